//! Statements in sequence: programs, lists (`a && b || c`), pipelines, subshells,
//! background jobs and redirected statements; the dispatch from a node kind to its
//! handler, and where what a statement sets reaches (a subshell's does not).

use tree_sitter::Node;

use super::*;

impl Walker<'_> {
    pub(super) fn stmt(&mut self, n: Node<'_>) {
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
            "variable_assignment" => {
                self.bare_assignment(n);
            }
            "variable_assignments" => self.each_named(n, |w, c| {
                w.bare_assignment(c);
            }),
            "declaration_command" => self.declaration(n),
            "unset_command" => self.unset(n),
            "test_command" => self.test_command(n),
            "comment" => self.comment(n),
            "file_redirect" | "herestring_redirect" | "heredoc_redirect" => self.redirect(n),
            kind => self.undecidable(format!("`{kind}` is a construct the policy does not read")),
        }
        self.depth -= 1;
    }

    pub(super) fn each_named(&mut self, n: Node<'_>, mut f: impl FnMut(&mut Self, Node<'_>)) {
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
    pub(super) fn token(&mut self, t: Node<'_>) {
        if !TOKENS.contains(&t.kind()) {
            self.undecidable(format!("the token `{}` is not read here", t.kind()));
        }
    }

    /// Statements in order; one followed by `&` runs in the background, in a subshell.
    pub(super) fn sequence(&mut self, n: Node<'_>) {
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
    pub(super) fn isolated(&mut self, f: impl FnOnce(&mut Self)) {
        let saved = self.vars.clone();
        f(self);
        let inner = std::mem::replace(&mut self.vars, saved);
        self.vars.meet(&inner);
    }

    /// Walk `f` on a path that may not run: only what holds either way stays.
    pub(super) fn maybe(&mut self, f: impl FnOnce(&mut Self)) {
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
    pub(super) fn pipeline(&mut self, n: Node<'_>) {
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
    pub(super) fn flag_shell_input(&mut self, before: usize, name: &str) {
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
    pub(super) fn runs_shell(&self, part: usize) -> bool {
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
}
