//! Compound commands: `if`, `while`/`until`, `for` (both forms), `case` and function
//! definitions. Each branch and loop body is walked on a copy of what is known of the
//! variables, and only what holds on every path survives it.

use tree_sitter::Node;

use super::flow::unsafely_assigned;
use super::*;

impl Walker<'_> {
    pub(super) fn if_statement(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let mut in_condition = true;
        let mut branches: Vec<SafeVars> = Vec::new();
        let mut after_condition = self.vars.clone();
        let has_else = kids.iter().any(|k| k.kind() == "else_clause");
        for k in kids {
            match k.kind() {
                "then" => {
                    in_condition = false;
                    after_condition = self.vars.clone();
                }
                "elif_clause" | "else_clause" => {
                    let saved = self.vars.clone();
                    self.vars = after_condition.clone();
                    self.clause(k);
                    branches.push(std::mem::replace(&mut self.vars, saved));
                }
                _ if !k.is_named() => self.token(k),
                _ if in_condition => self.stmt(k),
                _ => self.stmt(k),
            }
        }
        // The then-branch ran on self.vars; every branch (and, without an else, the
        // path through none) meet.
        for b in &branches {
            self.vars.meet(b);
        }
        if !has_else {
            self.vars.meet(&after_condition);
        }
    }

    /// `elif COND then BODY` or `else BODY`.
    fn clause(&mut self, n: Node<'_>) {
        self.sequence(n);
    }

    /// A loop body may run any number of times: variables it assigns unsafely are
    /// unsafe from the start, and what it makes safe does not outlive it.
    pub(super) fn loop_over(&mut self, n: Node<'_>, body: impl FnOnce(&mut Self)) {
        for name in unsafely_assigned(n, self.src) {
            self.vars.forget(&name);
        }
        self.isolated(body);
    }

    pub(super) fn for_statement(&mut self, n: Node<'_>) {
        let var = n
            .child_by_field_name("variable")
            .map(|v| self.text(v).to_owned())
            .unwrap_or_default();
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let mut all_integers = true;
        let mut has_in = false;
        let mut body = None;
        for k in kids {
            match k.kind() {
                "in" => has_in = true,
                "do_group" | "compound_statement" => body = Some(k),
                "variable_name" if !has_in => {}
                _ if !k.is_named() => self.token(k),
                "brace_expression" => {
                    let t = self.text(k).to_owned();
                    all_integers &= t[1..t.len().saturating_sub(1)].split("..").all(is_integer);
                }
                _ => {
                    let w = self.word(k);
                    all_integers &= w.literal() && is_integer(&w.text);
                }
            }
        }
        self.vars.forget(&var);
        if hazards::is_env_hazard(&var) {
            self.hazard(Hazard::structural(format!("sets {var}")));
            self.out.env_keys.push(var.clone());
        }
        let safe = has_in && all_integers;
        self.loop_over(n, |w| {
            if safe {
                w.vars.set_safe(&var);
            }
            if let Some(b) = body {
                w.stmt(b);
            }
        });
        self.vars.forget(&var);
    }

    pub(super) fn c_for(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let first_semi = kids.iter().position(|k| k.kind() == ";");
        for (i, k) in kids.iter().enumerate() {
            if first_semi.is_some_and(|s| i < s) && k.is_named() {
                self.arith(*k);
            }
        }
        self.loop_over(n, |w| {
            for (i, k) in kids.iter().enumerate() {
                if first_semi.is_some_and(|s| i < s) {
                    continue;
                }
                match k.kind() {
                    "do_group" | "compound_statement" => w.stmt(*k),
                    _ if k.is_named() => w.arith(*k),
                    _ => w.token(*k),
                }
            }
        });
    }

    pub(super) fn case_statement(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let mut seen_in = false;
        let start = self.vars.clone();
        let mut ends: Vec<SafeVars> = Vec::new();
        for k in kids {
            match k.kind() {
                "in" => seen_in = true,
                "case_item" => {
                    let saved = std::mem::replace(&mut self.vars, start.clone());
                    self.case_item(k);
                    ends.push(std::mem::replace(&mut self.vars, saved));
                }
                _ if !k.is_named() => self.token(k),
                _ if !seen_in => {
                    self.word(k);
                }
                _ => self.stmt(k),
            }
        }
        for e in &ends {
            self.vars.meet(e);
        }
    }

    fn case_item(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let values: Vec<usize> = n
            .children_by_field_name("value", &mut c)
            .map(|v| v.id())
            .collect();
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        for k in kids {
            if values.contains(&k.id()) {
                self.pattern(k);
            } else if k.is_named() {
                self.stmt(k);
            } else {
                self.token(k);
            }
        }
    }

    /// A pattern (`case`, `[[ == ]]`): its expansions are walked; globs are fine.
    fn pattern(&mut self, n: Node<'_>) {
        match n.kind() {
            "extglob_pattern" | "regex" | "word" => {}
            _ => {
                self.word(n);
            }
        }
    }

    pub(super) fn function(&mut self, n: Node<'_>) {
        push_unique(
            &mut self.out.hazards,
            Hazard::structural("function definition"),
        );
        let name = n
            .child_by_field_name("name")
            .map(|x| self.text(x).to_owned())
            .unwrap_or_default();
        let body = n.child_by_field_name("body");
        if let Some(b) = body
            && calls(b, &name, self.src)
        {
            push_unique(
                &mut self.out.hazards,
                Hazard::structural("self-calling function"),
            );
        }
        let saved = std::mem::take(&mut self.vars);
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        for k in kids {
            match k.kind() {
                "word" if Some(k.id()) == n.child_by_field_name("name").map(|x| x.id()) => {}
                "file_redirect" | "herestring_redirect" => self.redirect(k),
                _ if k.is_named() => self.stmt(k),
                _ => self.token(k),
            }
        }
        self.vars = saved;
    }

    pub(super) fn comment(&mut self, n: Node<'_>) {
        let at = n.start_byte();
        let before = self.src[..at].chars().next_back();
        if !before.is_none_or(|c| " \t\n;&|()<>".contains(c)) {
            self.undecidable("a `#` the parser took for a comment is inside a word");
        }
    }
}

/// Does a function body call the function (`:(){ :|:& };:`)?
fn calls(n: Node<'_>, name: &str, src: &str) -> bool {
    if n.kind() == "command"
        && let Some(c) = n.child_by_field_name("name")
        && src[c.byte_range()].trim_matches(['\'', '"', '\\']) == name
    {
        return true;
    }
    let mut c = n.walk();
    let kids: Vec<Node<'_>> = n.children(&mut c).collect();
    kids.into_iter().any(|k| calls(k, name, src))
}
