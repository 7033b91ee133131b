//! Pure application of `edit_file`'s edits to a text: no I/O, so every rule (order,
//! uniqueness, `lineHint`, all or nothing) is tested on strings.
//!
//! Error messages are written for the model that made the call: they say which edit
//! failed, where the candidates are (line numbers) and what to change in the next call.

use serde::Deserialize;
use toolvisor_protocol::ErrorType;

use crate::ToolError;

/// One replacement requested by the model.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Edit {
    /// Exact text to replace.
    pub target: String,
    /// Text put in its place.
    pub replacement: String,
    /// 1-based line near the intended occurrence, when the target occurs several times.
    #[serde(rename = "lineHint", default)]
    pub line_hint: Option<u64>,
}

/// How many candidate lines a message lists before saying "and N more".
const LINES_SHOWN: usize = 20;

/// Apply `edits` in order, each to the result of the previous one.
///
/// All or nothing: the first failing edit returns its error and the caller writes
/// nothing. `path` only appears in messages.
pub fn apply_edits(text: &str, edits: &[Edit], path: &str) -> Result<String, ToolError> {
    let mut current = text.to_owned();
    for (i, edit) in edits.iter().enumerate() {
        let at = Position {
            index: i + 1,
            total: edits.len(),
        };
        current = apply_one(&current, edit, path, at)?;
    }
    Ok(current)
}

/// Which edit of the call we are at, for messages.
#[derive(Clone, Copy)]
struct Position {
    index: usize,
    total: usize,
}

impl Position {
    fn prefix(self) -> String {
        if self.total == 1 {
            String::new()
        } else {
            format!("edit {} of {}: ", self.index, self.total)
        }
    }

    /// Reminds the model that earlier edits of the same call changed the text it searched.
    fn after_earlier(self) -> &'static str {
        if self.index > 1 {
            " (searched after applying the earlier edits of this call, in memory; nothing was written)"
        } else {
            ""
        }
    }
}

fn apply_one(text: &str, edit: &Edit, path: &str, at: Position) -> Result<String, ToolError> {
    if edit.target.is_empty() {
        return Err(ToolError::invalid(format!(
            "{}target must not be empty",
            at.prefix()
        )));
    }
    let offsets = occurrences(text, &edit.target);
    let chosen = choose(text, &offsets, edit, path, at)?;
    let mut out = String::with_capacity(text.len() + edit.replacement.len());
    out.push_str(&text[..chosen]);
    out.push_str(&edit.replacement);
    out.push_str(&text[chosen + edit.target.len()..]);
    Ok(out)
}

/// Pick the one occurrence to replace, or explain why there is none.
fn choose(
    text: &str,
    offsets: &[usize],
    edit: &Edit,
    path: &str,
    at: Position,
) -> Result<usize, ToolError> {
    match offsets {
        [] => Err(not_found(text, &edit.target, path, at)),
        [only] => Ok(*only),
        _ => {
            let lines = lines_of(text, offsets);
            match edit.line_hint {
                Some(hint) => {
                    nearest(offsets, &lines, hint).ok_or_else(|| tie(&lines, hint, path, at))
                }
                None => Err(ambiguous(&lines, path, at)),
            }
        }
    }
}

/// Byte offsets of every occurrence, overlapping ones included: `aa` in `aaa` is two
/// candidates, so it is ambiguous rather than silently the first.
pub fn occurrences(text: &str, target: &str) -> Vec<usize> {
    let step = target.chars().next().map_or(1, char::len_utf8);
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(pos) = text[from..].find(target) {
        found.push(from + pos);
        from += pos + step;
    }
    found
}

/// The 1-based line of each offset (offsets ascending), in one pass.
pub fn lines_of(text: &str, offsets: &[usize]) -> Vec<u64> {
    let bytes = text.as_bytes();
    let mut line = 1u64;
    let mut scanned = 0;
    offsets
        .iter()
        .map(|&off| {
            line += bytes[scanned..off].iter().filter(|&&b| b == b'\n').count() as u64;
            scanned = off;
            line
        })
        .collect()
}

/// The occurrence whose line is nearest `hint`; `None` on a tie (two lines equally near,
/// or several occurrences on the nearest line), because guessing could edit the wrong one.
fn nearest(offsets: &[usize], lines: &[u64], hint: u64) -> Option<usize> {
    let best = lines.iter().map(|l| l.abs_diff(hint)).min()?;
    let mut winners = offsets
        .iter()
        .zip(lines)
        .filter(|(_, l)| l.abs_diff(hint) == best);
    let (first, _) = winners.next()?;
    match winners.next() {
        Some(_) => None,
        None => Some(*first),
    }
}

fn ambiguous(lines: &[u64], path: &str, at: Position) -> ToolError {
    ToolError::new(
        ErrorType::EditTargetAmbiguous,
        format!(
            "{}target occurs {} times in {path} (at lines {}){}; include more surrounding \
             text to make it unique, or pass lineHint with the line of the occurrence to replace",
            at.prefix(),
            lines.len(),
            list_lines(lines),
            at.after_earlier(),
        ),
    )
}

fn tie(lines: &[u64], hint: u64, path: &str, at: Position) -> ToolError {
    let best = lines.iter().map(|l| l.abs_diff(hint)).min().unwrap_or(0);
    let near: Vec<u64> = lines
        .iter()
        .copied()
        .filter(|l| l.abs_diff(hint) == best)
        .collect();
    ToolError::new(
        ErrorType::EditTargetAmbiguous,
        format!(
            "{}target occurs {} times in {path} (at lines {}){}, and lineHint {hint} is equally \
             near more than one of them (lines {}); include more surrounding text to make it unique",
            at.prefix(),
            lines.len(),
            list_lines(lines),
            at.after_earlier(),
            list_lines(&near),
        ),
    )
}

fn not_found(text: &str, target: &str, path: &str, at: Position) -> ToolError {
    ToolError::new(
        ErrorType::EditTargetNotFound,
        format!(
            "{}target not found in {path}{}; it must match the file's text exactly, whitespace \
             and indentation included{}",
            at.prefix(),
            at.after_earlier(),
            near_miss(text, target),
        ),
    )
}

/// A hint when the target's first line appears with different indentation or spacing.
fn near_miss(text: &str, target: &str) -> String {
    let Some(first) = target.lines().map(str::trim).find(|l| !l.is_empty()) else {
        return String::new();
    };
    let lines: Vec<u64> = text
        .lines()
        .zip(1u64..)
        .filter(|(l, _)| l.trim() == first)
        .map(|(_, n)| n)
        .collect();
    if lines.is_empty() {
        String::new()
    } else {
        format!(
            ". The target's first line appears, with different whitespace, at line(s) {}",
            list_lines(&lines)
        )
    }
}

/// `3, 7, 12` (and `… and 4 more` past [`LINES_SHOWN`]).
fn list_lines(lines: &[u64]) -> String {
    let shown: Vec<String> = lines.iter().take(LINES_SHOWN).map(u64::to_string).collect();
    let mut out = shown.join(", ");
    if lines.len() > LINES_SHOWN {
        out.push_str(&format!(" and {} more", lines.len() - LINES_SHOWN));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn edit(target: &str, replacement: &str) -> Edit {
        Edit {
            target: target.into(),
            replacement: replacement.into(),
            line_hint: None,
        }
    }

    fn hinted(target: &str, replacement: &str, hint: u64) -> Edit {
        Edit {
            line_hint: Some(hint),
            ..edit(target, replacement)
        }
    }

    #[test]
    fn unique_target_is_replaced() {
        let out = apply_edits("fn a() {}\nfn b() {}\n", &[edit("fn b", "fn c")], "f.rs");
        assert_eq!(out.unwrap(), "fn a() {}\nfn c() {}\n");
    }

    #[test]
    fn edits_apply_in_order_each_to_the_previous_result() {
        let edits = [edit("one", "two"), edit("two", "three")];
        assert_eq!(apply_edits("one\n", &edits, "f").unwrap(), "three\n");
    }

    #[test]
    fn missing_target_is_not_found() {
        let err = apply_edits("abc\n", &[edit("xyz", "q")], "f.rs").unwrap_err();
        assert_eq!(err.kind, ErrorType::EditTargetNotFound);
        assert!(err.message.contains("f.rs"), "{}", err.message);
    }

    #[test]
    fn not_found_points_at_a_whitespace_near_miss() {
        let err = apply_edits("a\n    let x = 1;\n", &[edit("let x = 1;  ", "")], "f").unwrap_err();
        assert!(err.message.contains("line(s) 2"), "{}", err.message);
    }

    #[test]
    fn ambiguous_target_names_the_lines() {
        let text = "x = 1\ny = 2\nx = 1\n\nx = 1\n";
        let err = apply_edits(text, &[edit("x = 1", "x = 9")], "f.py").unwrap_err();
        assert_eq!(err.kind, ErrorType::EditTargetAmbiguous);
        assert!(err.message.contains("3 times"), "{}", err.message);
        assert!(err.message.contains("lines 1, 3, 5"), "{}", err.message);
    }

    #[test]
    fn overlapping_occurrences_are_ambiguous() {
        let err = apply_edits("aaa", &[edit("aa", "b")], "f").unwrap_err();
        assert_eq!(err.kind, ErrorType::EditTargetAmbiguous);
    }

    #[test]
    fn line_hint_picks_the_nearest_occurrence() {
        let text = "x\na\nx\nb\nc\nd\nx\n";
        let out = apply_edits(text, &[hinted("x", "Y", 6)], "f").unwrap();
        assert_eq!(out, "x\na\nx\nb\nc\nd\nY\n");
        let out = apply_edits(text, &[hinted("x", "Y", 2)], "f");
        // Lines 1 and 3 are equally near 2: refuse to guess.
        assert_eq!(out.unwrap_err().kind, ErrorType::EditTargetAmbiguous);
        let out = apply_edits(text, &[hinted("x", "Y", 4)], "f").unwrap();
        assert_eq!(out, "x\na\nY\nb\nc\nd\nx\n");
    }

    #[test]
    fn line_hint_with_two_matches_on_one_line_is_a_tie() {
        let err = apply_edits("foo foo\n", &[hinted("foo", "bar", 1)], "f").unwrap_err();
        assert_eq!(err.kind, ErrorType::EditTargetAmbiguous);
        assert!(err.message.contains("equally near"), "{}", err.message);
    }

    #[test]
    fn line_hint_with_a_unique_target_is_ignored() {
        let out = apply_edits("a\nb\n", &[hinted("b", "c", 100)], "f").unwrap();
        assert_eq!(out, "a\nc\n");
    }

    #[test]
    fn second_edit_failing_names_its_position() {
        let edits = [edit("a", "b"), edit("zzz", "q")];
        let err = apply_edits("a\n", &edits, "f").unwrap_err();
        assert_eq!(err.kind, ErrorType::EditTargetNotFound);
        assert!(err.message.starts_with("edit 2 of 2: "), "{}", err.message);
    }

    #[test]
    fn empty_target_is_invalid() {
        let err = apply_edits("a", &[edit("", "b")], "f").unwrap_err();
        assert_eq!(err.kind, ErrorType::InvalidParams);
    }

    #[test]
    fn multibyte_text_is_handled_on_char_boundaries() {
        let out = apply_edits("héllo wörld", &[edit("wö", "wo")], "f").unwrap();
        assert_eq!(out, "héllo world");
        assert_eq!(occurrences("ééé", "éé"), vec![0, 2]);
    }

    #[test]
    fn long_match_lists_are_capped() {
        let text = "x\n".repeat(30);
        let err = apply_edits(&text, &[edit("x", "y")], "f").unwrap_err();
        assert!(err.message.contains("and 10 more"), "{}", err.message);
    }

    /// Lines that never contain the marker `@`, so a target with `@` is unique by design.
    fn plain_lines() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec("[a-z ]{0,12}", 0..12)
    }

    proptest! {
        /// Property 13: a target found exactly once is replaced, and only it.
        #[test]
        fn prop_unique_target_is_replaced(
            before in plain_lines(), after in plain_lines(), repl in "[a-z@\n]{0,10}"
        ) {
            let (b, a) = (before.join("\n"), after.join("\n"));
            let text = format!("{b}\n@target@\n{a}");
            let out = apply_edits(&text, &[edit("@target@", &repl)], "f").unwrap();
            prop_assert_eq!(out, format!("{b}\n{repl}\n{a}"));
        }

        /// Property 14: a target absent from the file is EditTargetNotFound.
        #[test]
        fn prop_absent_target_is_not_found(lines in plain_lines(), t in "[a-z]{0,6}") {
            let text = lines.join("\n");
            let target = format!("@{t}");
            let err = apply_edits(&text, &[edit(&target, "x")], "f").unwrap_err();
            prop_assert_eq!(err.kind, ErrorType::EditTargetNotFound);
        }

        /// Property 15: a target present several times is EditTargetAmbiguous, and the
        /// message lists the line of every occurrence.
        #[test]
        fn prop_repeated_target_is_ambiguous(
            chunks in prop::collection::vec(plain_lines(), 2..5)
        ) {
            let mut text = String::new();
            let mut expected = Vec::new();
            for chunk in &chunks {
                expected.push(text.matches('\n').count() as u64 + 1);
                text.push_str("@t@\n");
                for l in chunk {
                    text.push_str(l);
                    text.push('\n');
                }
            }
            let err = apply_edits(&text, &[edit("@t@", "x")], "f").unwrap_err();
            prop_assert_eq!(err.kind, ErrorType::EditTargetAmbiguous);
            prop_assert!(err.message.contains(&list_lines(&expected)), "{}", err.message);
        }

        /// lineHint always replaces exactly the occurrence whose line is strictly nearest.
        #[test]
        fn prop_line_hint_replaces_the_nearest(
            gaps in prop::collection::vec(0usize..4, 2..6), hint in 1u64..30
        ) {
            let mut text = String::new();
            for g in &gaps {
                text.push_str(&"-\n".repeat(*g));
                text.push_str("@\n");
            }
            let offsets = occurrences(&text, "@");
            let lines = lines_of(&text, &offsets);
            let result = apply_edits(&text, &[hinted("@", "#", hint)], "f");
            let best = lines.iter().map(|l| l.abs_diff(hint)).min().unwrap();
            let winners: Vec<usize> = (0..lines.len())
                .filter(|&i| lines[i].abs_diff(hint) == best)
                .collect();
            if let [w] = winners[..] {
                let out = result.unwrap();
                let mut expected = text.clone();
                expected.replace_range(offsets[w]..offsets[w] + 1, "#");
                prop_assert_eq!(out, expected);
            } else {
                prop_assert_eq!(result.unwrap_err().kind, ErrorType::EditTargetAmbiguous);
            }
        }
    }
}
