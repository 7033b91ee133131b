//! Words and what bash expands in them: quoting, `$(…)`, `${…}`, arithmetic and the
//! operands of `[[ ]]`, each walked for hazards.

use tree_sitter::Node;

use super::*;

impl Walker<'_> {
    /// A word node as bash reads it; its expansions are walked for hazards.
    pub(super) fn word(&mut self, n: Node<'_>) -> Word {
        let mut b = WordBuilder::default();
        self.piece(n, &mut b, false);
        b.finish(n.byte_range())
    }

    pub(super) fn next_char(&self, n: Node<'_>) -> Option<char> {
        self.src[n.end_byte()..].chars().next()
    }

    pub(super) fn piece(&mut self, n: Node<'_>, b: &mut WordBuilder, quoted: bool) {
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
    pub(super) fn double_quoted(&mut self, n: Node<'_>, b: &mut WordBuilder) {
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
                // `"a$"`: a `$` right before the closing quote is a plain `$`.
                "$" if i + 1 == last => b.known("$"),
                "$" => self.undecidable("a `$` inside a string the parser did not read"),
                _ => self.piece(*k, b, true),
            }
        }
        if at != r.end {
            self.undecidable("a double-quoted string the parser did not cover");
        }
        // An empty string is still a word.
        b.known("");
    }

    pub(super) fn substitution(&mut self, n: Node<'_>) {
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
    pub(super) fn expansion(&mut self, n: Node<'_>) {
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
    pub(super) fn subscript(&mut self, n: Node<'_>) {
        let Some(index) = n.child_by_field_name("index") else {
            return;
        };
        if matches!(self.text(index), "@" | "*") {
            return;
        }
        self.arith(index);
    }

    pub(super) fn arith_expansion(&mut self, n: Node<'_>) {
        let t = self.text(n);
        let closed = (t.starts_with("$((") && t.ends_with("))"))
            || (t.starts_with("$[") && t.ends_with(']'));
        if !closed {
            self.hazard(Hazard::structural("arithmetic the policy cannot read"));
        }
        self.arith_children(n);
    }

    pub(super) fn arith_children(&mut self, n: Node<'_>) {
        let mut c = n.walk();
        let kids: Vec<Node<'_>> = n.named_children(&mut c).collect();
        for k in kids {
            self.arith(k);
        }
    }

    /// A node in arithmetic context: every variable it reads must be safe.
    pub(super) fn arith(&mut self, n: Node<'_>) {
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

    pub(super) fn arith_binary(&mut self, n: Node<'_>) {
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

    pub(super) fn read_var(&mut self, name: &str) {
        if !self.vars.is_safe(name) {
            self.hazard(Hazard::structural(format!("arithmetic reads `{name}`")));
        }
    }

    pub(super) fn test_command(&mut self, n: Node<'_>) {
        let double = first_token(n) == Some("[[");
        self.each_named(n, |w, k| w.test_expr(k, double));
    }

    pub(super) fn test_expr(&mut self, n: Node<'_>, double: bool) {
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

    pub(super) fn pattern_or_word(&mut self, n: Node<'_>) {
        match n.kind() {
            "regex" | "extglob_pattern" => {}
            _ => {
                self.word(n);
            }
        }
    }
}
