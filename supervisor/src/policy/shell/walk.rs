//! The walk over the syntax tree: statements, words, redirections, expansions and
//! arithmetic, each by a handler written for that node kind (an allow-list).

use std::cell::RefCell;
use std::collections::HashSet;
use std::ops::Range;

use tree_sitter::{Node, Parser, Tree};

use super::check::{self, Finding, Landmarks};
use super::vars::{SafeVars, is_integer, is_name, is_numeric_special};
use super::word::{self, Word, WordBuilder};
use super::{Analysis, Part, Via};
use crate::policy::hazards::{self, Hazard, Paths};

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

    /// A simple command: one part, plus a part for each command it runs.
    fn command(&mut self, n: Node<'_>) -> usize {
        let idx = self.new_part(n.byte_range(), Via::Command);
        self.stack.push(idx);
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        // A newline ends a simple command for bash: none may sit between its words.
        if kids
            .windows(2)
            .any(|w| bare_newline(&self.src[w[0].end_byte()..w[1].start_byte()]))
        {
            self.undecidable("a newline inside what the parser took for one command");
        }
        let mut words: Vec<Word> = Vec::new();
        let mut have_program = false;
        let mut here_string = false;
        for k in kids.iter().copied() {
            match k.kind() {
                "variable_assignment" if !have_program => {
                    if let Some(w) = self.prefix_assignment(k) {
                        words.push(w);
                    }
                }
                "command_name" => {
                    have_program = true;
                    let inner = k.named_child(0).unwrap_or(k);
                    let w = self.word(inner);
                    words.push(w);
                }
                "file_redirect" => self.redirect(k),
                "herestring_redirect" => {
                    here_string = true;
                    self.redirect(k);
                }
                "$" => {
                    self.hazard(Hazard::structural("translated string $\"…\""));
                }
                _ if k.is_named() => {
                    let w = self.word(k);
                    words.push(w);
                }
                other => {
                    self.undecidable(format!("the token `{other}` inside a command"));
                }
            }
        }
        if !have_program {
            // Only assignments and redirections: nothing runs, but what they hold
            // (a redirection to a file, a substitution) still counts, outside.
            self.out.parts[idx].words.clear();
            self.stack.pop();
            let held = std::mem::take(&mut self.out.parts[idx].hazards);
            for h in held {
                self.hazard(h);
            }
            return idx;
        }
        self.fill_part(idx, words);
        self.stack.pop();
        if here_string && self.runs_shell(idx) {
            push_unique(
                &mut self.out.parts[idx].hazards,
                Hazard::structural("here-document into a shell or interpreter"),
            );
        }
        idx
    }

    fn new_part(&mut self, span: Range<usize>, via: Via) -> usize {
        let parent = self.stack.last().copied();
        self.out.parts.push(Part {
            text: String::new(),
            words: Vec::new(),
            hazards: Vec::new(),
            neutral: false,
            parent,
            via,
            span,
        });
        self.out.parts.len() - 1
    }

    /// Give a part its words and work out what its program does with them.
    fn fill_part(&mut self, idx: usize, words: Vec<Word>) {
        let env_words = words
            .iter()
            .take_while(|w| w.text.contains('=') && self.is_env_word(w))
            .count();
        let text = match (words.first(), words.last()) {
            (Some(a), Some(b)) if a.span.end <= self.src.len() && b.span.end <= self.src.len() => {
                self.src[a.span.start..b.span.end.max(a.span.start)].to_owned()
            }
            _ => String::new(),
        };
        self.out.parts[idx].text = text;
        self.out.parts[idx].words = words.clone();
        let Some(program) = words.get(env_words) else {
            return;
        };
        if !program.literal() {
            self.hazard(Hazard::structural("program name known only at run time"));
            return;
        }
        if RESERVED.contains(&program.text.as_str()) {
            self.undecidable(format!("`{}` as a program name", program.text));
        }
        let name = program.text.as_str();
        self.out.parts[idx].neutral = hazards::NEUTRAL.contains(&name);
        let args = &words[env_words + 1..];
        self.var_effects(name, args);
        let found = hazards::check(program, args, self.paths);
        for h in found.hazards {
            if let Some(key) = h.name.strip_prefix("sets ") {
                self.out.env_keys.push(key.to_owned());
            }
            self.hazard(h);
        }
        // The environment a wrapper sets (`env EDITOR=x git commit`) is the wrapped
        // command's too: its rule must accept it as well.
        let env: Vec<Hazard> = self.out.parts[idx]
            .hazards
            .iter()
            .filter(|h| h.name.starts_with("sets "))
            .cloned()
            .collect();
        for r in found.nested {
            let nested: Vec<Word> = args[r].to_vec();
            self.nested_part(nested, &env);
        }
        if let Some(script) = found.script {
            self.script(&script);
        }
    }

    /// Was this word an environment-hazard assignment prefix (kept as a word)?
    fn is_env_word(&self, w: &Word) -> bool {
        w.text.split_once('=').is_some_and(|(k, _)| {
            is_name(k.trim_end_matches('+')) && hazards::is_env_hazard(k.trim_end_matches('+'))
        })
    }

    /// The command a wrapper runs: a part of its own, in the wrapper's part.
    fn nested_part(&mut self, words: Vec<Word>, inherited: &[Hazard]) {
        if self.depth > MAX_DEPTH || words.is_empty() {
            return;
        }
        self.depth += 1;
        let span = words[0].span.start..words[words.len() - 1].span.end;
        let idx = self.new_part(span, Via::Wrapper);
        if let Some(&outer) = self.stack.last() {
            self.wrapped.entry(outer).or_insert(idx);
        }
        for h in inherited {
            push_unique(&mut self.out.parts[idx].hazards, h.clone());
        }
        self.stack.push(idx);
        self.fill_part(idx, words);
        self.stack.pop();
        self.depth -= 1;
    }

    /// A literal `sh -c SCRIPT`: its commands are parts too (the hazard stays).
    fn script(&mut self, script: &str) {
        if self.script_depth >= MAX_SCRIPT_DEPTH {
            return;
        }
        let inner = analyze(script, self.paths, self.script_depth + 1);
        let Some(&parent) = self.stack.last() else {
            return;
        };
        let offset = self.out.parts.len();
        for mut p in inner.parts {
            p.parent = Some(p.parent.map_or(parent, |i| i + offset));
            p.via = Via::Script;
            p.span = self.out.parts[parent].span.clone();
            self.out.parts.push(p);
        }
        for h in inner.hazards {
            self.hazard(h);
        }
        if let Some(why) = inner.undecidable {
            self.hazard(Hazard::structural(format!(
                "a script the policy cannot read ({why})"
            )));
        }
        self.out.env_keys.extend(inner.env_keys);
    }

    /// What builtins do to variables: `read X` makes X anything; `let` is arithmetic.
    fn var_effects(&mut self, name: &str, args: &[Word]) {
        match name {
            "let" => self.let_args(args),
            "read" | "mapfile" | "readarray" | "getopts" | "printf" | "wait" | "unset" => {
                for a in args {
                    let base = a.text.split('[').next().unwrap_or(&a.text);
                    self.vars.forget(base);
                }
            }
            _ => {}
        }
    }

    /// `let` evaluates its arguments as arithmetic.
    fn let_args(&mut self, args: &[Word]) {
        for a in args {
            if !a.literal() {
                self.hazard(Hazard::structural("let on text known only at run time"));
                continue;
            }
            let text = &a.text;
            let mut targets = Vec::new();
            let mut i = 0;
            let b = text.as_bytes();
            while i < b.len() {
                if b[i].is_ascii_alphabetic() || b[i] == b'_' {
                    let start = i;
                    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                        i += 1;
                    }
                    let ident = &text[start..i];
                    let assigns = b.get(i) == Some(&b'=') && b.get(i + 1) != Some(&b'=');
                    if assigns {
                        targets.push(ident.to_owned());
                    } else {
                        self.read_var(ident);
                    }
                } else if b[i].is_ascii_digit() {
                    while i < b.len() && b[i].is_ascii_alphanumeric() {
                        i += 1;
                    }
                } else {
                    if matches!(b[i], b'[' | b'$' | b'`') {
                        self.hazard(Hazard::structural("let on text the policy cannot read"));
                    }
                    i += 1;
                }
            }
            for t in targets {
                self.vars.set_safe(&t);
            }
        }
    }

    /// `X=1 cmd`: not a word, unless it sets an environment hazard.
    fn prefix_assignment(&mut self, n: Node<'_>) -> Option<Word> {
        let (name, value) = self.assignment_parts(n);
        if hazards::is_env_hazard(&name) {
            let name = name.trim_end_matches("[]").to_owned();
            self.hazard(Hazard::argument(format!("sets {name}")));
            self.out.env_keys.push(name.clone());
            let mut w = value.unwrap_or_else(|| literal_word("", n.byte_range()));
            w.text = format!("{name}={}", w.text);
            w.known += name.len() + 1;
            w.span = n.byte_range();
            return Some(w);
        }
        None
    }

    /// A bare `X=value`: runs nothing, but may change what runs later.
    fn bare_assignment(&mut self, n: Node<'_>) {
        if n.kind() != "variable_assignment" {
            self.undecidable(format!("`{}` in a list of assignments", n.kind()));
            return;
        }
        let appends = has_token(n, "+=");
        let (name, value) = self.assignment_parts(n);
        if hazards::is_env_hazard(&name) {
            let base = name.trim_end_matches("[]");
            self.hazard(Hazard::structural(format!("sets {base}")));
            self.out.env_keys.push(base.to_owned());
        }
        match value {
            Some(v) if v.literal() && !appends => self.vars.assign(&name, Some(&v.text)),
            // `i=$((i + 1))`: an arithmetic result is an integer.
            Some(v) if v.numeric && !appends && v.prefix().is_empty() => self.vars.set_safe(&name),
            _ => self.vars.forget(&name),
        }
    }

    /// The name (subscripts walked as arithmetic) and value word of an assignment.
    fn assignment_parts(&mut self, n: Node<'_>) -> (String, Option<Word>) {
        let mut name = String::new();
        let mut value = None;
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let mut after_op = false;
        for k in kids {
            match k.kind() {
                "=" | "+=" => after_op = true,
                "variable_name" if !after_op => {
                    name = self.text(k).to_owned();
                    if !is_name(&name) {
                        // bash runs `1a=x/…/prog` as a program, not an assignment.
                        self.undecidable(format!("`{name}` is not a variable name to bash"));
                    }
                }
                "subscript" if !after_op => {
                    name = k
                        .child_by_field_name("name")
                        .map(|x| self.text(x).to_owned())
                        .unwrap_or_default();
                    self.subscript(k);
                    name = format!("{name}[]");
                }
                _ if after_op && k.is_named() => value = Some(self.word(k)),
                other => self.undecidable(format!("`{other}` in an assignment")),
            }
        }
        (name, value)
    }

    fn declaration(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let keyword = kids
            .first()
            .map(|k| self.text(*k).to_owned())
            .unwrap_or_default();
        let has_options = kids
            .iter()
            .any(|k| k.kind() == "word" && self.text(*k).starts_with(['-', '+']));
        let only_names = kids[1..]
            .iter()
            .all(|k| matches!(k.kind(), "variable_assignment" | "variable_name"));
        if !has_options && only_names {
            for k in &kids[1..] {
                if k.kind() == "variable_assignment" {
                    self.bare_assignment(*k);
                }
            }
            return;
        }
        let idx = self.new_part(n.byte_range(), Via::Command);
        self.stack.push(idx);
        let mut words = vec![literal_word(&keyword, kids[0].byte_range())];
        for k in &kids[1..] {
            match k.kind() {
                "variable_assignment" => {
                    let (name, value) = self.assignment_parts(*k);
                    self.vars.forget(&name);
                    let v = value.map(|v| v.text).unwrap_or_default();
                    words.push(literal_word(&format!("{name}={v}"), k.byte_range()));
                }
                "variable_name" => {
                    let t = self.text(*k).to_owned();
                    self.vars.forget(&t);
                    words.push(literal_word(&t, k.byte_range()));
                }
                "file_redirect" | "herestring_redirect" => self.redirect(*k),
                _ if k.is_named() => {
                    let w = self.word(*k);
                    words.push(w);
                }
                _ => self.token(*k),
            }
        }
        self.fill_part(idx, words);
        self.stack.pop();
    }

    fn unset(&mut self, n: Node<'_>) {
        let idx = self.new_part(n.byte_range(), Via::Command);
        self.stack.push(idx);
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let mut words = Vec::new();
        for (i, k) in kids.iter().enumerate() {
            if i == 0 {
                words.push(literal_word(self.text(*k), k.byte_range()));
            } else if matches!(k.kind(), "file_redirect" | "herestring_redirect") {
                self.redirect(*k);
            } else if k.is_named() {
                let w = self.word(*k);
                words.push(w);
            } else {
                self.token(*k);
            }
        }
        self.fill_part(idx, words);
        self.stack.pop();
    }

    // ---- redirections ----

    fn redirect(&mut self, n: Node<'_>) {
        match n.kind() {
            "file_redirect" => self.file_redirect(n),
            "herestring_redirect" => {
                let mut c = n.walk();
                let kids: Vec<Node<'_>> = n.named_children(&mut c).collect();
                for k in kids.into_iter().filter(|k| k.kind() != "file_descriptor") {
                    self.word(k);
                }
            }
            "heredoc_redirect" => self.heredoc(n),
            other => self.undecidable(format!("`{other}` as a redirection")),
        }
    }

    fn file_redirect(&mut self, n: Node<'_>) {
        let before = &self.src[..n.start_byte()];
        if let Some(open) = before.rfind('{')
            && is_fd_variable(&before[open..])
        {
            self.undecidable("a `{fd}` redirection");
        }
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let op = kids
            .iter()
            .find(|k| !k.is_named())
            .map(|k| k.kind().to_owned())
            .unwrap_or_default();
        let dest = kids
            .iter()
            .filter(|k| k.is_named() && k.kind() != "file_descriptor")
            .map(|k| self.word(*k))
            .next_back();
        let dup = |d: &Option<Word>| {
            d.as_ref().is_some_and(|d| {
                d.literal() && (d.text == "-" || d.text.chars().all(|c| c.is_ascii_digit()))
            })
        };
        let writes = match op.as_str() {
            ">" | ">>" | "&>" | "&>>" | ">|" | "<>" => true,
            ">&" | "&>&" => !dup(&dest),
            "<" | "<&" | ">&-" | "<&-" => false,
            other => {
                self.undecidable(format!("the redirection `{other}`"));
                return;
            }
        };
        let to_null = dest
            .as_ref()
            .is_some_and(|d| d.literal() && d.text == "/dev/null");
        if writes && !to_null {
            let to = dest.map(|d| d.text).unwrap_or_default();
            self.hazard(Hazard::structural(format!("redirection to `{to}`")));
        }
    }

    fn heredoc(&mut self, n: Node<'_>) {
        let quoted = check::heredoc(n, self.src).is_ok_and(|h| h.quoted);
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let mut conditional = false;
        for k in kids {
            match k.kind() {
                "heredoc_start" | "heredoc_end" | "<<" | "<<-" => {}
                "heredoc_body" if quoted => {}
                "heredoc_body" => self.heredoc_body(k),
                "&&" | "||" => conditional = true,
                "pipeline" => {
                    let before = self.out.parts.len();
                    self.isolated(|w| w.pipeline(k));
                    self.flag_shell_input(before, "pipe into a shell or interpreter");
                }
                "file_redirect" | "herestring_redirect" => self.redirect(k),
                _ if k.is_named() && conditional => self.maybe(|w| w.stmt(k)),
                _ if k.is_named() => self.stmt(k),
                _ => self.token(k),
            }
        }
    }

    fn heredoc_body(&mut self, n: Node<'_>) {
        self.each_named(n, |w, k| match k.kind() {
            "heredoc_content" => {}
            "expansion" => w.expansion(k),
            "simple_expansion" => {}
            "command_substitution" => w.substitution(k),
            other => w.undecidable(format!("`{other}` in a here-document")),
        });
    }

    // ---- words ----

    /// A word node as bash reads it; its expansions are walked for hazards.
    fn word(&mut self, n: Node<'_>) -> Word {
        let mut b = WordBuilder::default();
        self.piece(n, &mut b, false);
        b.finish(n.byte_range())
    }

    fn next_char(&self, n: Node<'_>) -> Option<char> {
        self.src[n.end_byte()..].chars().next()
    }

    fn piece(&mut self, n: Node<'_>, b: &mut WordBuilder, quoted: bool) {
        let text = self.text(n).to_owned();
        match n.kind() {
            "word" => {
                if let Err(why) = b.unquoted(&text, self.next_char(n)) {
                    self.undecidable(why);
                }
            }
            "raw_string" => match word::single_quoted(&text) {
                Ok(inner) => b.known(inner),
                Err(why) => self.undecidable(why),
            },
            "ansi_c_string" => match word::ansi_c(&text) {
                Ok(Some(v)) => b.known(&v),
                Ok(None) => b.unknown(&text, false),
                Err(why) => self.undecidable(why),
            },
            "string" => self.double_quoted(n, b),
            "translated_string" => {
                self.hazard(Hazard::structural("translated string $\"…\""));
                b.unknown(&text, false);
            }
            "simple_expansion" => b.unknown(&text, !quoted),
            "expansion" => {
                self.expansion(n);
                b.unknown(&text, !quoted);
            }
            "command_substitution" => {
                self.substitution(n);
                b.unknown(&text, !quoted);
            }
            "process_substitution" => {
                self.hazard(Hazard::structural("process substitution"));
                self.isolated(|w| w.each_named(n, |w, k| w.stmt(k)));
                b.unknown(&text, false);
            }
            "arithmetic_expansion" => {
                self.arith_expansion(n);
                b.number(&text);
            }
            "number" if n.named_child_count() == 0 => b.known(&text),
            "number" | "concatenation" => {
                let mut at = n.start_byte();
                let mut c = n.walk();
                let kids: Vec<Node<'_>> = n.children(&mut c).collect();
                for k in kids {
                    if k.start_byte() != at {
                        self.undecidable(format!("a gap inside the word `{text}`"));
                    }
                    at = k.end_byte();
                    self.piece(k, b, quoted);
                }
            }
            "brace_expression" => b.unknown(&text, false),
            "variable_name" => b.known(&text),
            "array" => {
                self.each_named(n, |w, k| {
                    w.word(k);
                });
                b.unknown(&text, false);
            }
            "extglob_pattern" | "regex" => b.unknown(&text, false),
            other => {
                self.undecidable(format!("`{other}` as a word"));
                b.unknown(&text, !quoted);
            }
        }
    }

    /// `"…"`: bash must end it where the parser does, and its pieces must be in reach.
    fn double_quoted(&mut self, n: Node<'_>, b: &mut WordBuilder) {
        let r = n.byte_range();
        if word::matching_end(self.src, r.start) != Some(r.end) {
            self.undecidable("bash ends a double-quoted string elsewhere");
        }
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.children(&mut c).collect();
        let mut at = r.start;
        let last = kids.len().saturating_sub(1);
        for (i, k) in kids.iter().enumerate() {
            if k.start_byte() != at {
                self.undecidable("a gap inside a double-quoted string");
            }
            at = k.end_byte();
            match k.kind() {
                "\"" => {}
                "string_content" => {
                    let closes = i + 1 == last;
                    match word::double_quoted_text(self.text(*k), closes) {
                        Ok(v) => b.known(&v),
                        Err(why) => self.undecidable(why),
                    }
                }
                "$" => self.hazard(Hazard::structural("translated string $\"…\"")),
                _ => self.piece(*k, b, true),
            }
        }
        if at != r.end {
            self.undecidable("a double-quoted string the parser did not cover");
        }
        // An empty string is still a word.
        b.known("");
    }

    fn substitution(&mut self, n: Node<'_>) {
        self.hazard(Hazard::structural("command substitution"));
        self.isolated(|w| {
            let mut c = n.walk();
            let kids: Vec<Node<'_>> = n.children(&mut c).collect();
            for k in kids {
                match k.kind() {
                    "$(" | ")" | "`" => {}
                    "file_redirect" => w.redirect(k),
                    _ if k.is_named() => w.stmt(k),
                    _ => w.token(k),
                }
            }
        });
    }

    /// `${…}`: bash must end it where the parser does; indirection, prompt
    /// expansion, assignment and the arithmetic inside it are checked.
    fn expansion(&mut self, n: Node<'_>) {
        let r = n.byte_range();
        if word::matching_end(self.src, r.start) != Some(r.end) {
            self.undecidable("bash ends a `${…}` elsewhere");
        }
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n
            .children(&mut c)
            .filter(|k| !matches!(k.kind(), "${" | "}"))
            .collect();
        let kinds: Vec<&str> = kids.iter().map(|k| k.kind()).collect();
        if kinds.first() == Some(&"!") {
            let names_only = matches!(kinds.as_slice(), ["!", "variable_name", "*" | "@"])
                || matches!(kinds.as_slice(), ["!", "subscript"])
                    && kids
                        .get(1)
                        .and_then(|s| s.child_by_field_name("index"))
                        .is_some_and(|i| matches!(self.text(i), "@" | "*"));
            if !names_only {
                self.hazard(Hazard::structural("indirect expansion ${!…}"));
            }
        }
        let transforms = kinds.windows(2).any(|w| w[0] == "@" && w[1] == "P");
        if transforms {
            self.hazard(Hazard::structural("prompt expansion ${…@P}"));
        }
        let var = kids.iter().find_map(|k| match k.kind() {
            "variable_name" => Some(self.text(*k).to_owned()),
            "subscript" => k
                .child_by_field_name("name")
                .map(|x| self.text(x).to_owned()),
            _ => None,
        });
        if kinds.iter().any(|k| matches!(*k, "=" | ":="))
            && let Some(v) = &var
        {
            self.vars.forget(v);
            if hazards::is_env_hazard(v) {
                self.hazard(Hazard::structural(format!("sets {v}")));
            }
        }
        let mut arithmetic = false;
        for k in kids {
            match k.kind() {
                ":" => arithmetic = true,
                "subscript" => self.subscript(k),
                _ if !k.is_named() => {}
                _ if arithmetic => self.arith(k),
                "command_substitution" => self.substitution(k),
                "expansion" => self.expansion(k),
                "arithmetic_expansion" => self.arith_expansion(k),
                "process_substitution" => {
                    self.hazard(Hazard::structural("process substitution"));
                }
                "string" => {
                    let mut scratch = WordBuilder::default();
                    self.double_quoted(k, &mut scratch);
                }
                _ => {}
            }
        }
    }

    /// `a[i]`: an indexed array's subscript is arithmetic (`@` and `*` are not).
    fn subscript(&mut self, n: Node<'_>) {
        let Some(index) = n.child_by_field_name("index") else {
            return;
        };
        if matches!(self.text(index), "@" | "*") {
            return;
        }
        self.arith(index);
    }

    // ---- arithmetic ----

    fn arith_expansion(&mut self, n: Node<'_>) {
        let t = self.text(n);
        let closed = (t.starts_with("$((") && t.ends_with("))"))
            || (t.starts_with("$[") && t.ends_with(']'));
        if !closed {
            self.hazard(Hazard::structural("arithmetic the policy cannot read"));
        }
        self.arith_children(n);
    }

    fn arith_children(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.named_children(&mut c).collect();
        for k in kids {
            self.arith(k);
        }
    }

    /// A node in arithmetic context: every variable it reads must be safe.
    fn arith(&mut self, n: Node<'_>) {
        match n.kind() {
            "number" if n.named_child_count() == 0 => {}
            "variable_name" => {
                let t = self.text(n).to_owned();
                self.read_var(&t);
            }
            "word" => {
                let t = self.text(n).to_owned();
                if is_name(&t) {
                    self.read_var(&t);
                } else if !is_integer(&t) {
                    self.hazard(Hazard::structural("arithmetic the policy cannot read"));
                }
            }
            "simple_expansion" => {
                let name = n
                    .named_child(0)
                    .map(|x| self.text(x).to_owned())
                    .unwrap_or_default();
                if !is_numeric_special(&name) {
                    self.read_var(&name);
                }
            }
            "expansion" => {
                self.expansion(n);
                let plain = n.named_child_count() == 1
                    && n.named_child(0)
                        .is_some_and(|x| x.kind() == "variable_name");
                let t = self.text(n).to_owned();
                if plain {
                    self.read_var(&t[2..t.len() - 1]);
                } else {
                    self.read_var(&t);
                }
            }
            "subscript" => {
                self.subscript(n);
                let t = self.text(n).to_owned();
                self.read_var(&t);
            }
            "binary_expression" => self.arith_binary(n),
            "unary_expression" | "postfix_expression" => {
                let op = op_text(n, self.src);
                let operand = n.named_child(0);
                if matches!(op.as_str(), "++" | "--") {
                    if let Some(o) = operand {
                        let t = self.text(o).to_owned();
                        self.arith(o);
                        self.vars.set_safe(&t);
                    }
                } else {
                    self.arith_children(n);
                }
            }
            "parenthesized_expression" | "ternary_expression" => self.arith_children(n),
            "variable_assignment" => {
                let name = n
                    .named_child(0)
                    .map(|x| self.text(x).to_owned())
                    .unwrap_or_default();
                if let Some(v) = n.named_child(1) {
                    self.arith(v);
                }
                self.vars.set_safe(&name);
            }
            "command_substitution" => self.substitution(n),
            "arithmetic_expansion" => self.arith_expansion(n),
            "string" => {
                let mut c = n.walk();
                let kids: Vec<Node<'_>> = n.children(&mut c).collect();
                for k in kids {
                    match k.kind() {
                        "\"" => {}
                        "string_content" if is_integer(self.text(k)) => {}
                        "simple_expansion"
                        | "expansion"
                        | "command_substitution"
                        | "arithmetic_expansion" => self.arith(k),
                        _ => self.hazard(Hazard::structural("arithmetic the policy cannot read")),
                    }
                }
            }
            _ => {
                // Walk it for substitutions anyway, then refuse to vouch for it.
                let mut scratch = WordBuilder::default();
                self.piece(n, &mut scratch, true);
                self.hazard(Hazard::structural("arithmetic the policy cannot read"));
            }
        }
    }

    fn arith_binary(&mut self, n: Node<'_>) {
        let op = op_text(n, self.src);
        let left = n.child_by_field_name("left");
        let right = n.child_by_field_name("right");
        let assigns = op.ends_with('=') && !matches!(op.as_str(), "==" | "!=" | "<=" | ">=");
        if let Some(r) = right {
            self.arith(r);
        }
        match left {
            Some(l) if assigns && matches!(l.kind(), "variable_name" | "word") => {
                let t = self.text(l).to_owned();
                if op != "=" {
                    self.read_var(&t);
                }
                self.vars.set_safe(&t);
            }
            Some(l) => self.arith(l),
            None => {}
        }
    }

    fn read_var(&mut self, name: &str) {
        if !self.vars.is_safe(name) {
            self.hazard(Hazard::structural(format!("arithmetic reads `{name}`")));
        }
    }

    // ---- [[ ]] and [ ] ----

    fn test_command(&mut self, n: Node<'_>) {
        let double = first_token(n) == Some("[[");
        self.each_named(n, |w, k| w.test_expr(k, double));
    }

    fn test_expr(&mut self, n: Node<'_>, double: bool) {
        match n.kind() {
            "binary_expression" => {
                let op = op_text(n, self.src);
                let arithmetic =
                    double && matches!(op.as_str(), "-eq" | "-ne" | "-lt" | "-le" | "-gt" | "-ge");
                let logical = matches!(op.as_str(), "&&" | "||" | "-a" | "-o");
                let mut c = n.walk();
                let kids: Vec<Node<'_>> = n.named_children(&mut c).collect();
                for k in kids {
                    if k.kind() == "test_operator" {
                        continue;
                    }
                    if arithmetic {
                        self.arith(k);
                    } else if logical {
                        self.test_expr(k, double);
                    } else {
                        self.pattern_or_word(k);
                    }
                }
            }
            "unary_expression" => {
                let op = op_text(n, self.src);
                let mut c = n.walk();
                let kids: Vec<Node<'_>> = n.named_children(&mut c).collect();
                for k in kids {
                    if k.kind() == "test_operator" {
                        continue;
                    }
                    if op == "-v" || op == "-R" {
                        let w = self.word(k);
                        if !w.literal() || w.text.contains('[') {
                            self.hazard(Hazard::structural("a variable name with a subscript"));
                        }
                    } else {
                        self.test_expr(k, double);
                    }
                }
            }
            "parenthesized_expression" => self.each_named(n, |w, k| w.test_expr(k, double)),
            "redirected_statement" => self.stmt(n),
            _ => self.pattern_or_word(n),
        }
    }

    fn pattern_or_word(&mut self, n: Node<'_>) {
        match n.kind() {
            "regex" | "extglob_pattern" => {}
            _ => {
                self.word(n);
            }
        }
    }
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
