//! Simple commands and what hangs on them: parts, their words and program checks,
//! the commands wrappers run, assignments, declarations (redirections: `redirect.rs`).

use tree_sitter::Node;

use super::*;

/// Builtins that read a value starting with `(` again as an array assignment when the
/// variable is an array (bash 5.2: `readonly` only with `-a`/`-A`; asked for always).
const ARRAY_DECLARERS: &[&str] = &["declare", "typeset", "local", "readonly"];

impl Walker<'_> {
    /// A simple command: one part, plus a part for each command it runs.
    pub(super) fn command(&mut self, n: Node<'_>) -> usize {
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

    pub(super) fn new_part(&mut self, span: Range<usize>, via: Via) -> usize {
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
    pub(super) fn fill_part(&mut self, idx: usize, words: Vec<Word>) {
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
    pub(super) fn is_env_word(&self, w: &Word) -> bool {
        w.text.split_once('=').is_some_and(|(k, _)| {
            is_name(k.trim_end_matches('+')) && hazards::is_env_hazard(k.trim_end_matches('+'))
        })
    }

    /// The command a wrapper runs: a part of its own, in the wrapper's part.
    pub(super) fn nested_part(&mut self, words: Vec<Word>, inherited: &[Hazard]) {
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
    pub(super) fn script(&mut self, script: &str) {
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
    pub(super) fn var_effects(&mut self, name: &str, args: &[Word]) {
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
    pub(super) fn let_args(&mut self, args: &[Word]) {
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
    pub(super) fn prefix_assignment(&mut self, n: Node<'_>) -> Option<Word> {
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
    pub(super) fn bare_assignment(&mut self, n: Node<'_>) -> Option<Word> {
        if n.kind() != "variable_assignment" {
            self.undecidable(format!("`{}` in a list of assignments", n.kind()));
            return None;
        }
        let appends = has_token(n, "+=");
        let (name, value) = self.assignment_parts(n);
        if hazards::is_env_hazard(&name) {
            let base = name.trim_end_matches("[]");
            self.hazard(Hazard::structural(format!("sets {base}")));
            self.out.env_keys.push(base.to_owned());
        }
        match &value {
            Some(v) if v.literal() && !appends => self.vars.assign(&name, Some(&v.text)),
            // `i=$((i + 1))`: an arithmetic result is an integer.
            Some(v) if v.numeric && !appends && v.prefix().is_empty() => self.vars.set_safe(&name),
            _ => self.vars.forget(&name),
        }
        value
    }

    /// `declare a='($(cmd))'`: when `a` is an array (`-a`, `-A`, declared before, or
    /// one of bash's own such as `DIRSTACK`), `declare`, `typeset`, `local` and
    /// `readonly -a` read a value that starts with `(` again as an array assignment, expanding what its
    /// quotes hid. Only a real `(…)` array (which the walk reads) or a value that
    /// cannot start with `(` is safe.
    fn compound_value(&mut self, keyword: &str, assignment: Node<'_>, value: Option<&Word>) {
        if !ARRAY_DECLARERS.contains(&keyword) {
            return;
        }
        let array = assignment
            .child_by_field_name("value")
            .is_some_and(|v| v.kind() == "array");
        if !array && value.is_some_and(may_start_with_paren) {
            self.hazard(Hazard::structural(format!(
                "{keyword} of a quoted (…) value (bash reads it as an array assignment)"
            )));
        }
    }

    /// The name (subscripts walked as arithmetic) and value word of an assignment.
    pub(super) fn assignment_parts(&mut self, n: Node<'_>) -> (String, Option<Word>) {
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

    pub(super) fn declaration(&mut self, n: Node<'_>) {
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
                    let value = self.bare_assignment(*k);
                    self.compound_value(&keyword, *k, value.as_ref());
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
                    self.compound_value(&keyword, *k, value.as_ref());
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
                    // `declare -a 'a=($(cmd))'`, `declare -a $x`: an assignment bash
                    // finds only in the word's value.
                    let risky = match w.prefix().split_once('=') {
                        Some((_, known)) => {
                            known.starts_with('(') || (known.is_empty() && !w.literal())
                        }
                        None => !w.literal(),
                    };
                    if risky && ARRAY_DECLARERS.contains(&keyword.as_str()) {
                        self.hazard(Hazard::structural(format!(
                            "{keyword} of a quoted (…) value (bash reads it as an array \
                             assignment)"
                        )));
                    }
                    words.push(w);
                }
                _ => self.token(*k),
            }
        }
        self.fill_part(idx, words);
        self.stack.pop();
    }

    pub(super) fn unset(&mut self, n: Node<'_>) {
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
}
