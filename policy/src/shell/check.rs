//! Cross-checks of the parse against the text, so that what the policy reads is what
//! bash runs: every byte the parser skipped must be a separator bash skips too, and
//! every `$(`, `` ` ``, `<(`, `${`, `$((` bash would expand is found in the raw text
//! even where the parser built no node for it (tree-sitter-bash 0.25 builds none
//! inside some `${…}` forms and for backticks in here-documents).

use std::collections::HashSet;
use std::ops::Range;

use tree_sitter::Node;

/// Characters bash never takes as part of a command line this policy decides: a NUL
/// cannot reach `execve`, and CR, form feed and friends are blanks to the parser but
/// word characters to bash.
pub(crate) fn text(src: &str) -> Result<(), String> {
    if let Some(c) = src
        .chars()
        .find(|&c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(format!("the command contains the control character {c:?}"));
    }
    Ok(())
}

/// Node kinds whose text is checked as a whole (by the word scanners or below), not
/// token by token.
const OPAQUE: &[&str] = &[
    "word",
    "string",
    "raw_string",
    "ansi_c_string",
    "expansion",
    "simple_expansion",
    "heredoc_body",
    "comment",
    "regex",
    "extglob_pattern",
    "number",
    "heredoc_start",
    "heredoc_end",
];

/// Between the parser's tokens there may only be blanks, newlines and line
/// continuations that do not join two tokens into one word.
pub(crate) fn gaps(root: Node<'_>, src: &str) -> Result<(), String> {
    let mut leaves = Vec::new();
    collect_leaves(root, &mut leaves);
    leaves.sort_by_key(|r| (r.start, r.end));
    let mut at = 0;
    for r in leaves {
        if r.start < at {
            if r.end <= at {
                continue; // a zero-width or nested token
            }
            return Err("the parser's tokens overlap".into());
        }
        gap_ok(src, at, r.start)?;
        at = r.end;
    }
    gap_ok(src, at, src.len())
}

fn collect_leaves(root: Node<'_>, out: &mut Vec<Range<usize>>) {
    let mut todo = vec![root];
    while let Some(node) = todo.pop() {
        if node.child_count() == 0 || OPAQUE.contains(&node.kind()) {
            if node.end_byte() > node.start_byte() {
                out.push(node.start_byte()..node.end_byte());
            }
            continue;
        }
        let mut cursor = node.walk();
        todo.extend(node.children(&mut cursor));
    }
}

/// Is the tree deeper than `limit`? (Without recursion: the tree may be very deep.)
pub(crate) fn deeper_than(root: Node<'_>, limit: usize) -> bool {
    let mut cursor = root.walk();
    let mut depth = 0;
    loop {
        if depth > limit {
            return true;
        }
        if cursor.goto_first_child() {
            depth += 1;
            continue;
        }
        loop {
            if cursor.goto_next_sibling() {
                break;
            }
            if !cursor.goto_parent() {
                return false;
            }
            depth -= 1;
        }
    }
}

fn gap_ok(src: &str, start: usize, end: usize) -> Result<(), String> {
    let b = src.as_bytes();
    let blank = |i: usize| matches!(b.get(i), None | Some(b' ' | b'\t' | b'\n'));
    let mut i = start;
    while i < end {
        match b[i] {
            b' ' | b'\t' | b'\n' => i += 1,
            b'\\' if b.get(i + 1) == Some(&b'\n') => {
                // bash deletes `\<newline>` before splitting words: fine only when
                // blanks keep the neighbours apart.
                let before = i > 0 && blank(i - 1);
                if !(before || blank(i + 2)) {
                    return Err("a line continuation joins two words".into());
                }
                i += 2;
            }
            _ => {
                let skipped: String = src[i..end].chars().take(20).collect();
                return Err(format!("the parser skipped `{skipped}`"));
            }
        }
    }
    Ok(())
}

/// Where bash would run or expand something the raw text shows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finding {
    CommandSubstitution,
    ProcessSubstitution,
    /// `$((`/`$[` with no arithmetic node: bash may read it as a command substitution.
    UnparsedArithmetic,
    /// `${` with no expansion node: an expansion nobody checked (`${!x}`, `${x@P}`…).
    UnparsedExpansion,
}

/// What the raw scan needs from the tree.
#[derive(Debug, Default)]
pub(crate) struct Landmarks {
    /// Text bash never expands: single quotes, `$'…'`, comments, quoted here-documents.
    pub inert: Vec<Range<usize>>,
    pub arithmetic: HashSet<usize>,
    pub expansions: HashSet<usize>,
}

/// Every place in `src` bash would substitute or expand, outside inert text.
pub(crate) fn scan(src: &str, marks: &Landmarks) -> Vec<(usize, Finding)> {
    let b = src.as_bytes();
    let mut inert: Vec<&Range<usize>> = marks.inert.iter().collect();
    inert.sort_by_key(|r| r.start);
    let mut next_inert = inert.into_iter().peekable();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        while next_inert.peek().is_some_and(|r| r.end <= i) {
            next_inert.next();
        }
        if let Some(r) = next_inert.peek().filter(|r| r.contains(&i)) {
            i = r.end;
            continue;
        }
        // bash deletes `\<newline>` before it reads the line: `$\<newline>(c)` is `$(c)`.
        let at_next = skip_continuations(b, i + 1);
        let next = b.get(at_next).copied();
        let second = b.get(skip_continuations(b, at_next + 1)).copied();
        match (b[i], next) {
            (b'\\', _) => i += 1,
            (b'`', _) => out.push((i, Finding::CommandSubstitution)),
            (b'$', Some(b'(')) if second == Some(b'(') && marks.arithmetic.contains(&i) => {}
            (b'$', Some(b'(')) if second == Some(b'(') => {
                out.push((i, Finding::UnparsedArithmetic));
            }
            (b'$', Some(b'(')) => out.push((i, Finding::CommandSubstitution)),
            (b'$', Some(b'[')) if !marks.arithmetic.contains(&i) => {
                out.push((i, Finding::UnparsedArithmetic));
            }
            (b'$', Some(b'{')) if !marks.expansions.contains(&i) => {
                out.push((i, Finding::UnparsedExpansion));
            }
            // Even inside double quotes: bash runs `"${X%%<(cmd)}"`'s.
            (b'<' | b'>', Some(b'(')) => out.push((i, Finding::ProcessSubstitution)),
            _ => {}
        }
        i += 1;
    }
    out
}

/// The first index from `i` that is not part of a `\<newline>` line continuation.
pub(crate) fn skip_continuations(b: &[u8], mut i: usize) -> usize {
    while b.get(i) == Some(&b'\\') && b.get(i + 1) == Some(&b'\n') {
        i += 2;
    }
    i
}

/// A here-document as bash reads it: its delimiter, whether it is quoted, and where
/// its body ends must be where the parser says.
pub(crate) struct Heredoc {
    pub quoted: bool,
    pub body: Option<Range<usize>>,
}

pub(crate) fn heredoc(node: Node<'_>, src: &str) -> Result<Heredoc, String> {
    let mut cursor = node.walk();
    let children: Vec<Node<'_>> = node.children(&mut cursor).collect();
    let kind_text = |k: &str| {
        children
            .iter()
            .find(|c| c.kind() == k)
            .map(|c| (&src[c.byte_range()], c.byte_range()))
    };
    let dash = children.iter().any(|c| c.kind() == "<<-");
    let (start, _) = kind_text("heredoc_start").ok_or("a here-document without a delimiter")?;
    if !start
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.-'\"\\".contains(c))
    {
        return Err(format!(
            "the here-document delimiter `{start}` is not plain"
        ));
    }
    let balanced = start.matches('\'').count() % 2 == 0 && start.matches('"').count() % 2 == 0;
    if !balanced || start.ends_with('\\') {
        return Err(format!(
            "the here-document delimiter `{start}` does not end where it seems to"
        ));
    }
    let quoted = start.contains(['\'', '"', '\\']);
    let delim: String = start.chars().filter(|c| !"'\"\\".contains(*c)).collect();
    let (end, end_range) = kind_text("heredoc_end").ok_or("a here-document that does not end")?;
    if end != delim {
        return Err(format!(
            "the here-document `{delim}` ends at `{end}` for the parser"
        ));
    }
    let b = src.as_bytes();
    let mut line_start = end_range.start;
    while dash && line_start > 0 && b[line_start - 1] == b'\t' {
        line_start -= 1;
    }
    let at_line_start = line_start == 0 || b[line_start - 1] == b'\n';
    let at_line_end = matches!(b.get(end_range.end), None | Some(b'\n'));
    if !(at_line_start && at_line_end) {
        return Err(format!(
            "the here-document `{delim}` does not end on a line of its own"
        ));
    }
    let body = kind_text("heredoc_body").map(|(_, r)| r);
    if let Some(r) = &body {
        let ends_early = src[r.clone()].split('\n').any(|line| {
            let line = if dash {
                line.trim_start_matches('\t')
            } else {
                line
            };
            line == delim
        });
        if ends_early {
            return Err(format!("bash ends the here-document `{delim}` earlier"));
        }
    }
    Ok(Heredoc { quoted, body })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters() {
        assert!(text("ls -la\n\tpwd").is_ok());
        assert!(text("ls\r-la").is_err());
        assert!(text("ls\0x").is_err());
        assert!(text("ls\u{c}x").is_err());
    }

    #[test]
    fn gap_rules() {
        assert!(gap_ok("a \\\nb", 1, 4).is_ok());
        assert!(gap_ok("a\\\n b", 1, 4).is_ok());
        assert!(gap_ok("a\\\nb", 1, 3).is_err());
        assert!(gap_ok("a\u{a0}b", 1, 3).is_err());
    }

    #[test]
    fn raw_scan() {
        let m = Landmarks::default();
        let kinds = |s: &str| scan(s, &m).into_iter().map(|f| f.1).collect::<Vec<_>>();
        assert_eq!(
            kinds("ls ${P#$(x)}"),
            [Finding::UnparsedExpansion, Finding::CommandSubstitution]
        );
        assert_eq!(kinds("echo \\$(x) \\`y\\`"), []);
        assert_eq!(kinds("a `b`"), [Finding::CommandSubstitution; 2]);
        assert_eq!(kinds("diff <(a) >(b)"), [Finding::ProcessSubstitution; 2]);
        assert_eq!(kinds("echo $((1))"), [Finding::UnparsedArithmetic]);
        let m = Landmarks {
            inert: vec![Range { start: 5, end: 11 }],
            ..Landmarks::default()
        };
        assert_eq!(scan("echo '$(x)'", &m), []);
    }
}
