//! The walk over the syntax tree, each node kind by a handler written for it (an
//! allow-list): here the statements — lists, pipelines, compound commands, loops,
//! functions — and the flow of which variables hold integers; simple commands in
//! [`command`], words, expansions and arithmetic in [`expand`].

use std::cell::RefCell;
use std::collections::HashSet;
use std::ops::Range;

use tree_sitter::{Node, Parser, Tree};

use super::check::{self, Finding, Landmarks};
use super::vars::{SafeVars, is_integer, is_name, is_numeric_special};
use super::word::{self, Word, WordBuilder};
use super::{Analysis, Part, Via};
use crate::policy::hazards::{self, Hazard, Paths};

mod command;
mod expand;

/// Deeper than this, nesting is not read (and the command asks).
const MAX_DEPTH: usize = 64;
/// A syntax tree deeper than this is not walked at all (every walk stays far from
/// the end of a thread's stack).
const MAX_TREE_DEPTH: usize = 256;
/// Longer commands are not read (and ask): real ones are a few KiB.
const MAX_COMMAND: usize = 128 * 1024;
/// Raw-scan findings placed in parts; past that one more changes nothing.
const MAX_FINDINGS: usize = 1024;
/// `sh -c` scripts inside scripts are read this many levels deep.
const MAX_SCRIPT_DEPTH: usize = 3;

/// Reserved words bash never runs as a program name.
const RESERVED: &[&str] = &[
    "if", "then", "else", "elif", "fi", "case", "esac", "for", "select", "while", "until", "do",
    "done", "in", "function", "{", "}", "!", "[[", "]]",
];

/// Tokens the statement handlers expect between their statements.
const TOKENS: &[&str] = &[
    ";", "&", "&&", "||", "|", "|&", "\n", ";;", ";&", ";;&", "{", "}", "(", ")", "((", "))", "!",
    "if", "then", "elif", "else", "fi", "while", "until", "do", "done", "for", "select", "in",
    "case", "esac", "function", "[[", "]]", "[", "]", "$(", "`", "<(", ">(",
];

thread_local! {
    /// One parser per thread: building one loads the grammar.
    static PARSER: RefCell<Option<Parser>> = const { RefCell::new(None) };
}

fn parse(command: &str) -> Option<Tree> {
    PARSER.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            let mut parser = Parser::new();
            parser
                .set_language(&tree_sitter_bash::LANGUAGE.into())
                .ok()?;
            *slot = Some(parser);
        }
        slot.as_mut()?.parse(command, None)
    })
}

pub(super) fn analyze(command: &str, paths: &dyn Paths, script_depth: usize) -> Analysis {
    let mut out = Analysis::default();
    if let Err(why) = check::text(command) {
        out.undecidable = Some(why);
        return out;
    }
    if command.len() > MAX_COMMAND {
        out.undecidable = Some(format!(
            "the command is longer than the policy reads ({MAX_COMMAND} bytes)"
        ));
        return out;
    }
    let Some(tree) = parse(command) else {
        out.undecidable = Some("the shell grammar could not be loaded".into());
        return out;
    };
    let root = tree.root_node();
    if check::deeper_than(root, MAX_TREE_DEPTH) {
        out.undecidable = Some("the command nests too deeply".into());
        return out;
    }
    let mut w = Walker {
        src: command,
        paths,
        out,
        stack: Vec::new(),
        vars: SafeVars::default(),
        depth: 0,
        script_depth,
        wrapped: Default::default(),
    };
    if root.has_error() {
        w.undecidable("the command does not parse as bash");
    }
    if let Err(why) = check::gaps(root, command) {
        w.undecidable(why);
    }
    let marks = w.landmarks(root);
    w.stmt(root);
    for (at, finding) in check::scan(command, &marks).into_iter().take(MAX_FINDINGS) {
        let name = match finding {
            Finding::CommandSubstitution => "command substitution",
            Finding::ProcessSubstitution => "process substitution",
            Finding::UnparsedArithmetic => "arithmetic the policy cannot read",
            Finding::UnparsedExpansion => "expansion the policy cannot read",
        };
        w.hazard_at(at, Hazard::structural(name));
    }
    w.out
}

struct Walker<'a> {
    src: &'a str,
    paths: &'a dyn Paths,
    out: Analysis,
    /// The parts we are inside, innermost last.
    stack: Vec<usize>,
    vars: SafeVars,
    depth: usize,
    script_depth: usize,
    /// A part → the part of the command its wrapper runs (`env X=1 ls` → `ls`).
    wrapped: std::collections::HashMap<usize, usize>,
}

impl Walker<'_> {
    fn text(&self, n: Node<'_>) -> &str {
        &self.src[n.byte_range()]
    }

    fn undecidable(&mut self, why: impl Into<String>) {
        if self.out.undecidable.is_none() {
            self.out.undecidable = Some(why.into());
        }
    }

    /// A hazard of the innermost part we are in (or of the command).
    fn hazard(&mut self, h: Hazard) {
        match self.stack.last() {
            Some(&i) => push_unique(&mut self.out.parts[i].hazards, h),
            None => push_unique(&mut self.out.hazards, h),
        }
    }

    /// A hazard at a byte offset: it belongs to the innermost part around it.
    fn hazard_at(&mut self, at: usize, h: Hazard) {
        let inner = self
            .out
            .parts
            .iter()
            .enumerate()
            .filter(|(_, p)| p.via == Via::Command && p.span.contains(&at))
            .min_by_key(|(_, p)| p.span.len())
            .map(|(i, _)| i);
        match inner {
            Some(i) => push_unique(&mut self.out.parts[i].hazards, h),
            None => push_unique(&mut self.out.hazards, h),
        }
    }

    /// Where the raw scan must look, from one pass over the tree. Here-documents are
    /// checked on the way: their extent must be the one bash sees.
    fn landmarks(&mut self, root: Node<'_>) -> Landmarks {
        let mut m = Landmarks::default();
        let mut todo = vec![root];
        while let Some(n) = todo.pop() {
            let r = n.byte_range();
            match n.kind() {
                "raw_string" | "ansi_c_string" | "comment" => m.inert.push(r),
                "expansion" => {
                    m.expansions.insert(r.start);
                }
                "arithmetic_expansion" => {
                    m.arithmetic.insert(r.start);
                }
                "heredoc_redirect" => match check::heredoc(n, self.src) {
                    Ok(h) => {
                        if let Some(body) = h.body.filter(|_| h.quoted) {
                            m.inert.push(body);
                        }
                    }
                    Err(why) => self.undecidable(why),
                },
                _ => {}
            }
            if n.is_missing() || n.is_error() {
                self.undecidable(format!("the parser could not read `{}`", self.text(n)));
            }
            let mut c = n.walk();
            todo.extend(n.children(&mut c));
        }
        m
    }

    // ---- statements ----

    fn stmt(&mut self, n: Node<'_>) {
        if self.depth > MAX_DEPTH {
            self.undecidable("the command nests too deeply");
            return;
        }
        self.depth += 1;
        match n.kind() {
            "program" | "do_group" | "negated_command" | "else_clause" => self.sequence(n),
            "compound_statement" if first_token(n) == Some("((") => self.arith_children(n),
            "compound_statement" => self.sequence(n),
            "subshell" => self.isolated(|w| w.sequence(n)),
            "list" => self.list(n),
            "pipeline" => self.pipeline(n),
            "redirected_statement" => self.redirected(n),
            "if_statement" => self.if_statement(n),
            "while_statement" => self.loop_over(n, |w| w.sequence(n)),
            "for_statement" => self.for_statement(n),
            "c_style_for_statement" => self.c_for(n),
            "case_statement" => self.case_statement(n),
            "function_definition" => self.function(n),
            "command" => {
                self.command(n);
            }
            "variable_assignment" => self.bare_assignment(n),
            "variable_assignments" => self.each_named(n, |w, c| w.bare_assignment(c)),
            "declaration_command" => self.declaration(n),
            "unset_command" => self.unset(n),
            "test_command" => self.test_command(n),
            "comment" => self.comment(n),
            "file_redirect" | "herestring_redirect" | "heredoc_redirect" => self.redirect(n),
            kind => self.undecidable(format!("`{kind}` is a construct the policy does not read")),
        }
        self.depth -= 1;
    }

    fn each_named(&mut self, n: Node<'_>, mut f: impl FnMut(&mut Self, Node<'_>)) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        for k in kids {
            if k.is_named() {
                f(self, k);
            } else {
                self.token(k);
            }
        }
    }

    /// An anonymous token between statements must be one the handlers expect.
    fn token(&mut self, t: Node<'_>) {
        if !TOKENS.contains(&t.kind()) {
            self.undecidable(format!("the token `{}` is not read here", t.kind()));
        }
    }

    /// Statements in order; one followed by `&` runs in the background, in a subshell.
    fn sequence(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        for (i, k) in kids.iter().enumerate() {
            if !k.is_named() {
                self.token(*k);
                continue;
            }
            let background = kids.get(i + 1).is_some_and(|t| t.kind() == "&");
            if background {
                self.isolated(|w| w.stmt(*k));
            } else {
                self.stmt(*k);
            }
        }
    }

    /// Walk `f` in a subshell: what it sets does not reach the rest of the command.
    fn isolated(&mut self, f: impl FnOnce(&mut Self)) {
        let saved = self.vars.clone();
        f(self);
        let inner = std::mem::replace(&mut self.vars, saved);
        self.vars.meet(&inner);
    }

    /// Walk `f` on a path that may not run: only what holds either way stays.
    fn maybe(&mut self, f: impl FnOnce(&mut Self)) {
        self.isolated(f);
    }

    /// `a && b || c`: the first runs, the rest may not.
    fn list(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let mut first = true;
        for k in kids {
            if !k.is_named() {
                self.token(k);
            } else if first {
                first = false;
                self.stmt(k);
            } else {
                self.maybe(|w| w.stmt(k));
            }
        }
    }

    /// Each stage runs in a subshell; a stage after a pipe that is a shell or an
    /// interpreter runs what the earlier stages print.
    fn pipeline(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let mut after_pipe = false;
        for k in kids {
            if !k.is_named() {
                self.token(k);
                after_pipe |= matches!(k.kind(), "|" | "|&");
                continue;
            }
            let before = self.out.parts.len();
            self.isolated(|w| w.stmt(k));
            if after_pipe {
                self.flag_shell_input(before, "pipe into a shell or interpreter");
            }
        }
    }

    /// Parts created since `before` that run a shell or interpreter reading stdin.
    fn flag_shell_input(&mut self, before: usize, name: &str) {
        let parent = self.stack.last().copied();
        let tops: Vec<usize> = (before..self.out.parts.len())
            .filter(|&i| self.out.parts[i].parent == parent)
            .collect();
        for top in tops {
            if self.runs_shell(top) {
                push_unique(&mut self.out.parts[top].hazards, Hazard::structural(name));
            }
        }
    }

    /// The program a part really runs (through wrappers) is a shell or interpreter.
    fn runs_shell(&self, part: usize) -> bool {
        let p = &self.out.parts[part];
        if p.words.first().is_some_and(|w| {
            hazards::is_shell_or_interpreter(&w.text)
                || matches!(w.text.as_str(), "source" | "." | "eval")
        }) {
            return true;
        }
        self.wrapped
            .get(&part)
            .is_some_and(|inner| self.runs_shell(*inner))
    }

    fn redirected(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let before = self.out.parts.len();
        let mut body_part = None;
        let mut feeds_stdin = false;
        for k in kids {
            match k.kind() {
                "file_redirect" | "herestring_redirect" | "heredoc_redirect" => {
                    feeds_stdin |= k.kind() != "file_redirect";
                    let top = body_part.filter(|_| self.out.parts.len() > before);
                    match top {
                        Some(p) => self.inside(p, |w| w.redirect(k)),
                        None => self.redirect(k),
                    }
                }
                _ if k.is_named() => {
                    let was = self.out.parts.len();
                    self.stmt(k);
                    if k.kind() == "command" && self.out.parts.len() > was {
                        body_part = Some(was);
                    }
                }
                _ => self.token(k),
            }
        }
        if feeds_stdin {
            self.flag_shell_input(before, "here-document into a shell or interpreter");
        }
    }

    fn inside(&mut self, part: usize, f: impl FnOnce(&mut Self)) {
        self.stack.push(part);
        f(self);
        self.stack.pop();
    }

    fn if_statement(&mut self, n: Node<'_>) {
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
    fn loop_over(&mut self, n: Node<'_>, body: impl FnOnce(&mut Self)) {
        for name in unsafely_assigned(n, self.src) {
            self.vars.forget(&name);
        }
        self.isolated(body);
    }

    fn for_statement(&mut self, n: Node<'_>) {
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

    fn c_for(&mut self, n: Node<'_>) {
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

    fn case_statement(&mut self, n: Node<'_>) {
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

    fn function(&mut self, n: Node<'_>) {
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

    fn comment(&mut self, n: Node<'_>) {
        let at = n.start_byte();
        let before = self.src[..at].chars().next_back();
        if !before.is_none_or(|c| " \t\n;&|()<>".contains(c)) {
            self.undecidable("a `#` the parser took for a comment is inside a word");
        }
    }

    // ---- simple commands ----

    // ---- redirections ----

    // ---- words ----

    // ---- arithmetic ----

    // ---- [[ ]] and [ ] ----
}

/// At most this many distinct hazards are kept per part: one is enough to ask, and a
/// command made of thousands must not cost quadratic time.
const MAX_HAZARDS: usize = 64;

fn push_unique(list: &mut Vec<Hazard>, h: Hazard) {
    if list.len() < MAX_HAZARDS && !list.contains(&h) {
        list.push(h);
    }
}

fn first_token<'a>(n: Node<'a>) -> Option<&'a str> {
    n.child(0).filter(|c| !c.is_named()).map(|c| c.kind())
}

fn has_token(n: Node<'_>, kind: &str) -> bool {
    let mut c = n.walk();
    n.children(&mut c)
        .any(|k| !k.is_named() && k.kind() == kind)
}

/// The operator of an expression node: its `operator` field, else its first token.
fn op_text(n: Node<'_>, src: &str) -> String {
    if let Some(o) = n.child_by_field_name("operator") {
        return src[o.byte_range()].to_owned();
    }
    let mut c = n.walk();
    n.children(&mut c)
        .find(|k| !k.is_named() || k.kind() == "test_operator")
        .map(|k| src[k.byte_range()].to_owned())
        .unwrap_or_default()
}

/// A newline in `gap` that is not a line continuation.
fn bare_newline(gap: &str) -> bool {
    gap.match_indices('\n')
        .any(|(i, _)| !gap[..i].ends_with('\\'))
}

/// `{name}` right before a redirection: bash stores a new descriptor in `name`.
fn is_fd_variable(t: &str) -> bool {
    t.strip_prefix('{')
        .and_then(|r| r.strip_suffix('}'))
        .is_some_and(is_name)
}

fn literal_word(t: &str, span: Range<usize>) -> Word {
    Word {
        text: t.to_owned(),
        known: t.len(),
        splits: false,
        numeric: false,
        span,
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

/// Builtins that set the variables they are given.
const SETTERS: &[&str] = &[
    "read",
    "mapfile",
    "readarray",
    "getopts",
    "printf",
    "wait",
    "unset",
    "export",
    "declare",
    "typeset",
    "local",
    "readonly",
];

/// Variables a node may set to something other than an integer literal or an
/// arithmetic result: assignments with other values, `read X`, `for X in`, `${X:=…}`.
fn unsafely_assigned(n: Node<'_>, src: &str) -> HashSet<String> {
    let mut out = HashSet::new();
    let text = |x: Node<'_>| src[x.byte_range()].to_owned();
    let mut todo = vec![n];
    while let Some(n) = todo.pop() {
        match n.kind() {
            "variable_assignment" if !in_arithmetic(n) => {
                let name = n.named_child(0).map(text).unwrap_or_default();
                let value = n.named_child(1);
                let integer = value
                    .is_some_and(|v| v.kind() == "arithmetic_expansion" || is_integer(&text(v)));
                if !integer || has_token(n, "+=") {
                    out.insert(name.split('[').next().unwrap_or_default().to_owned());
                }
            }
            "for_statement" => {
                out.extend(n.child_by_field_name("variable").map(text));
            }
            "declaration_command" | "unset_command" => {
                let mut c = n.walk();
                for k in n.named_children(&mut c) {
                    let t = match k.kind() {
                        "variable_assignment" => k.named_child(0).map(text).unwrap_or_default(),
                        _ => text(k),
                    };
                    out.insert(t.split(['[', '=']).next().unwrap_or_default().to_owned());
                }
            }
            "command" => {
                let program = n.child_by_field_name("name").map(text).unwrap_or_default();
                if SETTERS.contains(&program.as_str()) {
                    let mut c = n.walk();
                    for k in n.children_by_field_name("argument", &mut c) {
                        let t = text(k);
                        out.insert(t.split('[').next().unwrap_or_default().to_owned());
                    }
                }
            }
            "expansion" if has_token(n, "=") || has_token(n, ":=") => {
                let mut c = n.walk();
                let var = n
                    .named_children(&mut c)
                    .find(|k| k.kind() == "variable_name")
                    .map(text);
                out.extend(var);
            }
            _ => {}
        }
        let mut c = n.walk();
        todo.extend(n.children(&mut c));
    }
    out
}

/// An assignment inside arithmetic (`for ((i=0;…))`, `$((x=1))`): its value is a number.
fn in_arithmetic(n: Node<'_>) -> bool {
    let mut p = n.parent();
    while let Some(x) = p {
        match x.kind() {
            "c_style_for_statement"
            | "arithmetic_expansion"
            | "binary_expression"
            | "parenthesized_expression" => return true,
            "compound_statement" => return first_token(x) == Some("(("),
            "command" | "program" | "list" | "do_group" => return false,
            _ => p = x.parent(),
        }
    }
    false
}
