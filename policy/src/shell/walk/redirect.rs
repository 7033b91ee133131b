//! Redirections and here-documents: the files a command writes, and the bodies bash expands.

use super::*;

impl Walker<'_> {
    pub(super) fn redirect(&mut self, n: Node<'_>) {
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

    pub(super) fn file_redirect(&mut self, n: Node<'_>) {
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

    pub(super) fn heredoc(&mut self, n: Node<'_>) {
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

    pub(super) fn heredoc_body(&mut self, n: Node<'_>) {
        self.each_named(n, |w, k| match k.kind() {
            "heredoc_content" => {}
            "expansion" => w.expansion(k),
            "simple_expansion" => {}
            "command_substitution" => w.substitution(k),
            other => w.undecidable(format!("`{other}` in a here-document")),
        });
    }
}
