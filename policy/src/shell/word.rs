//! Words as bash reads them: quote removal, and which part of a word is known before
//! the command runs.
//!
//! The policy decides on words, so each word is rebuilt here from the source text with
//! bash's own quoting rules, independently of the parser: a token whose text bash
//! would read differently (an unquoted `;` inside what the parser called one word, a
//! quote it did not close where bash does) is refused instead of being trusted.

use std::ops::Range;

use super::check::skip_continuations;

pub use crate::word::Word;

/// Builds a word from its pieces (a concatenation such as `'a'"$b"c*`).
#[derive(Debug, Default)]
pub(crate) struct WordBuilder {
    text: String,
    unknown_from: Option<usize>,
    splits: bool,
    /// An unknown piece that is not arithmetic was added.
    opaque: bool,
    /// Positions in `text` of unquoted `{`, `,`, `}` and `.` (brace expansion).
    braces: Vec<(usize, char)>,
    pieces: usize,
}

impl WordBuilder {
    /// Text bash takes as it is.
    pub(crate) fn known(&mut self, s: &str) {
        self.text.push_str(s);
        self.pieces += 1;
    }

    /// Text known only at run time (kept as written); `splits` for an unquoted expansion.
    pub(crate) fn unknown(&mut self, s: &str, splits: bool) {
        self.opaque = true;
        self.mark_unknown();
        self.text.push_str(s);
        self.splits |= splits;
        self.pieces += 1;
    }

    /// An arithmetic expansion: unknown now, but a number when it runs.
    pub(crate) fn number(&mut self, s: &str) {
        self.mark_unknown();
        self.text.push_str(s);
        self.pieces += 1;
    }

    fn mark_unknown(&mut self) {
        if self.unknown_from.is_none() {
            self.unknown_from = Some(self.text.len());
        }
    }

    /// An unquoted piece of a word node: backslash escapes, globs, tilde and braces.
    /// `next` is the source character right after the piece.
    pub(crate) fn unquoted(&mut self, raw: &str, next: Option<char>) -> Result<(), String> {
        let first_piece = self.pieces == 0;
        let mut chars = raw.char_indices().peekable();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => match chars.next() {
                    Some((_, '\n')) => {}
                    Some((_, e)) => self.text.push(e),
                    None => self.text.push('\\'),
                },
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')' => {
                    return Err(format!("`{c}` inside the word `{raw}`"));
                }
                '\'' | '"' | '`' => return Err(format!("an unpaired `{c}` in `{raw}`")),
                '$' => {
                    let at_end = chars.peek().is_none();
                    let quiet_next = next.is_none_or(|n| !"'\"({[".contains(n));
                    if !(at_end && quiet_next) {
                        return Err(format!("an expansion the parser did not see in `{raw}`"));
                    }
                    self.text.push('$');
                }
                '#' if i == 0 && first_piece => {
                    return Err(format!("`{raw}` would start a comment"));
                }
                '~' if i == 0 && first_piece => {
                    self.opaque = true;
                    self.mark_unknown();
                    self.text.push('~');
                }
                '*' | '?' | '[' => {
                    self.opaque = true;
                    self.mark_unknown();
                    self.text.push(c);
                }
                '{' | ',' | '}' | '.' => {
                    self.braces.push((self.text.len(), c));
                    self.text.push(c);
                }
                c if c.is_control() => {
                    return Err(format!("a control character in `{raw}`"));
                }
                c => self.text.push(c),
            }
        }
        self.pieces += 1;
        Ok(())
    }

    pub(crate) fn finish(mut self, span: Range<usize>) -> Word {
        if let Some(at) = brace_expansion(&self.braces) {
            self.opaque = true;
            self.unknown_from = Some(self.unknown_from.map_or(at, |u| u.min(at)));
        }
        let known = self.unknown_from.unwrap_or(self.text.len());
        Word {
            numeric: known < self.text.len() && !self.opaque && !self.splits,
            text: self.text,
            known,
            splits: self.splits,
            span,
        }
    }
}

/// Where a brace expansion (`{a,b}`, `{1..3}`) starts among a word's unquoted braces.
/// A word with very many braces is taken as one from its first (the search is
/// quadratic).
fn brace_expansion(marks: &[(usize, char)]) -> Option<usize> {
    if marks.len() > 4096 {
        return marks.first().map(|m| m.0);
    }
    for (i, &(open, c)) in marks.iter().enumerate() {
        if c != '{' {
            continue;
        }
        let mut depth = 0;
        let mut expands = false;
        let mut last_dot: Option<usize> = None;
        for &(pos, c) in &marks[i + 1..] {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    if expands {
                        return Some(open);
                    }
                    break;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => expands = true,
                '.' if depth == 0 => {
                    if last_dot == Some(pos.wrapping_sub(1)) {
                        expands = true;
                    }
                    last_dot = Some(pos);
                }
                _ => {}
            }
        }
    }
    None
}

/// The content of a single-quoted string `'…'`: bash ends it at the first `'`.
pub(crate) fn single_quoted(raw: &str) -> Result<&str, String> {
    let inner = raw
        .strip_prefix('\'')
        .and_then(|r| r.strip_suffix('\''))
        .ok_or_else(|| format!("`{raw}` is not a closed single-quoted string"))?;
    if inner.contains('\'') {
        return Err(format!("`{raw}` holds a quote that ends it early"));
    }
    Ok(inner)
}

/// The value of an ANSI-C string `$'…'`, or `None` when bash's value cannot be
/// known exactly here (a NUL, `\c`, `\u`: locale- or truncation-dependent).
pub(crate) fn ansi_c(raw: &str) -> Result<Option<String>, String> {
    let inner = raw
        .strip_prefix("$'")
        .and_then(|r| r.strip_suffix('\''))
        .ok_or_else(|| format!("`{raw}` is not a closed $'…' string"))?;
    let mut out = String::new();
    let mut chars = inner.chars().peekable();
    let mut exact = true;
    while let Some(c) = chars.next() {
        if c == '\'' {
            return Err(format!("`{raw}` holds a quote that ends it early"));
        }
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(e) = chars.next() else {
            return Err(format!("`{raw}` ends with a backslash"));
        };
        match e {
            'a' => out.push('\x07'),
            'b' => out.push('\x08'),
            'e' | 'E' => out.push('\x1b'),
            'f' => out.push('\x0c'),
            'n' => out.push('\n'),
            'r' => out.push('\r'),
            't' => out.push('\t'),
            'v' => out.push('\x0b'),
            '\\' | '\'' | '"' | '?' => out.push(e),
            '0'..='7' => {
                let mut n = e.to_digit(8).unwrap_or(0);
                for _ in 0..2 {
                    match chars.peek().and_then(|d| d.to_digit(8)) {
                        Some(d) => {
                            n = n * 8 + d;
                            chars.next();
                        }
                        None => break,
                    }
                }
                exact &= push_code(&mut out, n);
            }
            'x' => {
                let mut n = 0;
                let mut digits = 0;
                while digits < 2 {
                    match chars.peek().and_then(|d| d.to_digit(16)) {
                        Some(d) => {
                            n = n * 16 + d;
                            chars.next();
                            digits += 1;
                        }
                        None => break,
                    }
                }
                if digits == 0 {
                    out.push_str("\\x");
                } else {
                    exact &= push_code(&mut out, n);
                }
            }
            'c' | 'u' | 'U' => {
                exact = false;
                out.push('\\');
                out.push(e);
            }
            other => {
                out.push('\\');
                out.push(other);
            }
        }
    }
    Ok(exact.then_some(out))
}

/// A byte from an escape; bash cuts the string at a NUL and writes raw bytes above
/// 0x7f, neither of which a `String` holds faithfully.
fn push_code(out: &mut String, n: u32) -> bool {
    match n {
        1..=0x7f => {
            out.push(char::from_u32(n).unwrap_or('?'));
            true
        }
        _ => false,
    }
}

/// The value of the literal text inside double quotes: `\` escapes only `$`, `` ` ``,
/// `"`, `\` and a newline. Any unescaped `"`, `` ` `` or expanding `$` means the parser
/// and bash disagree about where the string or its expansions are.
pub(crate) fn double_quoted_text(raw: &str, closes: bool) -> Result<String, String> {
    let mut out = String::new();
    let mut chars = raw.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('\n') => {}
                Some(e @ ('$' | '`' | '"' | '\\')) => out.push(e),
                Some(e) => {
                    out.push('\\');
                    out.push(e);
                }
                None => return Err("a string piece ends with a backslash".into()),
            },
            '"' | '`' => return Err(format!("an unescaped `{c}` inside a string")),
            '$' => {
                let quiet = match chars.peek() {
                    None => closes,
                    Some(n) => !(n.is_ascii_alphanumeric() || "_{([@*#?$!-'\"".contains(*n)),
                };
                if !quiet {
                    return Err("an expansion inside a string that the parser did not see".into());
                }
                out.push('$');
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// Where bash ends a construct that opens at `open` in `src` (`"…"` or `${…}`), by its
/// own matching rules; `None` when it does not end.
pub(crate) fn matching_end(src: &str, open: usize) -> Option<usize> {
    let b = src.as_bytes();
    if b.get(open) == Some(&b'"') {
        return skip_double(b, open + 1);
    }
    if b.get(open) == Some(&b'$') && b.get(open + 1) == Some(&b'{') {
        return skip_braces(b, open + 2);
    }
    None
}

/// From inside `"…"`: the index just past the closing quote.
fn skip_double(b: &[u8], mut i: usize) -> Option<usize> {
    while let Some(&c) = b.get(i) {
        match c {
            b'\\' => i += 2,
            b'"' => return Some(i + 1),
            b'`' => i = skip_backquote(b, i + 1)?,
            b'$' => i = skip_dollar(b, i)?,
            _ => i += 1,
        }
    }
    None
}

/// From a `$`: past the `$(…)` or `${…}` it opens (through line continuations, which
/// bash deletes first), else just past the `$`.
fn skip_dollar(b: &[u8], i: usize) -> Option<usize> {
    let next = skip_continuations(b, i + 1);
    match b.get(next) {
        Some(b'(') => skip_parens(b, next + 1),
        Some(b'{') => skip_braces(b, next + 1),
        _ => Some(i + 1),
    }
}

/// `$'…'` inside `${…}`: bash's parser ends it by ANSI-C rules (`\'` does not end
/// it), then reads the result again when it expands, in ways that vary with the
/// context and the operator. Only a string that both readings end at the same place,
/// and that holds no backslash, is taken; `None` (undecidable) otherwise.
fn skip_ansi_in_braces(b: &[u8], i: usize) -> Option<usize> {
    let end = skip_single(b, i)?;
    if b[i..end].contains(&b'\\') {
        return None;
    }
    Some(end)
}

/// From inside `${…}`: the index just past the closing brace.
fn skip_braces(b: &[u8], i: usize) -> Option<usize> {
    skip_nested(b, i, (b'{', b'}'), skip_ansi_in_braces)
}

/// From inside `$(…)`: the index just past the closing paren (quotes respected).
fn skip_parens(b: &[u8], i: usize) -> Option<usize> {
    skip_nested(b, i, (b'(', b')'), skip_ansi)
}

/// From inside a `${…}` or `$(…)` (`open`, `close`): the index just past the closing
/// one, nested pairs counted and quotes, backquotes and substitutions skipped whole;
/// `ansi` reads a `$'…'` (its reading differs between the two, see
/// [`skip_ansi_in_braces`]).
fn skip_nested(
    b: &[u8],
    mut i: usize,
    (open, close): (u8, u8),
    ansi: fn(&[u8], usize) -> Option<usize>,
) -> Option<usize> {
    let mut depth = 0usize;
    while let Some(&c) = b.get(i) {
        match c {
            b'\\' => i += 2,
            b'\'' => i = skip_single(b, i + 1)?,
            b'"' => i = skip_double(b, i + 1)?,
            b'`' => i = skip_backquote(b, i + 1)?,
            b'$' if b.get(i + 1) == Some(&b'\'') => i = ansi(b, i + 2)?,
            b'$' if close == b'}' => i = skip_dollar(b, i)?,
            c if c == open => {
                depth += 1;
                i += 1;
            }
            c if c == close && depth == 0 => return Some(i + 1),
            c if c == close => {
                depth -= 1;
                i += 1;
            }
            _ => i += 1,
        }
    }
    None
}

/// From inside `$'…'`: a backslash escapes the next byte, a `'` ends it.
fn skip_ansi(b: &[u8], mut i: usize) -> Option<usize> {
    while let Some(&c) = b.get(i) {
        match c {
            b'\\' => i += 2,
            b'\'' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

fn skip_single(b: &[u8], i: usize) -> Option<usize> {
    b[i.min(b.len())..]
        .iter()
        .position(|&c| c == b'\'')
        .map(|p| i + p + 1)
}

fn skip_backquote(b: &[u8], mut i: usize) -> Option<usize> {
    while let Some(&c) = b.get(i) {
        match c {
            b'\\' => i += 2,
            b'`' => return Some(i + 1),
            _ => i += 1,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn word(pieces: &[&str]) -> Word {
        let mut b = WordBuilder::default();
        for p in pieces {
            b.unquoted(p, None).unwrap();
        }
        b.finish(0..0)
    }

    #[test]
    fn unquoted_pieces() {
        assert_eq!(word(&["\\rm"]).text, "rm");
        assert!(word(&["ls"]).literal());
        let w = word(&["src/*.rs"]);
        assert_eq!((w.prefix(), w.literal()), ("src/", false));
        assert_eq!(word(&["~/x"]).known, 0);
        assert_eq!(word(&["a~b"]).known, 3);
        assert_eq!(word(&["{a,b}c"]).known, 0);
        assert_eq!(word(&["x{1..3}"]).known, 1);
        assert!(word(&["stash@{0}"]).literal(), "no comma, no expansion");
        assert!(word(&["{}"]).literal());
        assert_eq!(word(&["a$"]).text, "a$");
        for bad in ["a;b", "a b", "a'b", "a$b", "`x`", "a\nb", "#x", "a\u{7}b"] {
            let mut b = WordBuilder::default();
            assert!(b.unquoted(bad, None).is_err(), "{bad:?}");
        }
        let mut b = WordBuilder::default();
        assert!(b.unquoted("a$", Some('(')).is_err());
    }

    #[test]
    fn quoted_strings() {
        assert_eq!(single_quoted("'a\\'"), Ok("a\\"));
        assert!(single_quoted("'a'b'").is_err());
        assert_eq!(ansi_c("$'\\x6c\\x73'"), Ok(Some("ls".into())));
        assert_eq!(ansi_c("$'a\\'b'"), Ok(Some("a'b".into())));
        assert_eq!(ansi_c("$'a\\0b'"), Ok(None), "NUL cuts the string");
        assert_eq!(ansi_c("$'\\u263a'"), Ok(None));
        assert!(ansi_c("$'a'b'").is_err());
        assert_eq!(double_quoted_text("a\\\"b\\x", true), Ok("a\"b\\x".into()));
        assert_eq!(double_quoted_text("cost $", true), Ok("cost $".into()));
        assert!(double_quoted_text("a\"b", true).is_err());
        assert!(double_quoted_text("$x", true).is_err());
        assert!(double_quoted_text("`x`", true).is_err());
    }

    #[test]
    fn bash_matching() {
        let s = r#"echo "a$(echo ")")b" x"#;
        assert_eq!(matching_end(s, 5), Some(s.len() - 2));
        let s = "${x:-'}'}z";
        assert_eq!(matching_end(s, 0), Some(s.len() - 1));
        let s = "${a:-{b}}c";
        assert_eq!(matching_end(s, 0), Some(s.len() - 1));
        assert_eq!(matching_end("\"abc", 0), None);
        // bash deletes `\<newline>` first: `$\<newline>(` opens a substitution.
        let s = "\"$\\\n(echo \")\")\" x";
        assert_eq!(matching_end(s, 0), Some(s.len() - 2));
        let s = "${x:-$\\\n(echo })}z";
        assert_eq!(matching_end(s, 0), Some(s.len() - 1));
        // `$'…'` inside `${…}` with a backslash: bash's two readings differ.
        assert_eq!(matching_end("${x:-$'a\\'}'}", 0), None);
        assert_eq!(matching_end("\"${x:-$'a\\'}'}\"", 0), None);
        let s = "${x:-$'a'}z";
        assert_eq!(matching_end(s, 0), Some(s.len() - 1));
        let s = "$(echo $'a\\')')z";
        assert_eq!(matching_end(&format!("\"{s}\""), 0), Some(s.len() + 2));
    }
}
