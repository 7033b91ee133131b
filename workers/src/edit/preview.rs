//! What a change looks like to the model and to a person: a unified diff, the file's
//! hash before the change, and the outcomes of previews and applied writes.

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use similar::TextDiff;
use toolvisor_protocol::worker::Outcome;

use crate::truncate;

/// Lines of context around each change, as `diff -u` and git show them.
const CONTEXT: usize = 3;

/// A diff longer than this (bytes) keeps its first [`DIFF_KEEP`] bytes and the
/// truncation marker: a whole-file rewrite of a large file must not blow the frame limit
/// or the model's context. The change itself is never cut (it travels in `content`).
pub const DIFF_MAX: usize = 256 * 1024;
/// What a cut diff keeps.
pub const DIFF_KEEP: usize = 128 * 1024;

/// Lowercase hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    toolvisor_os::hex::hex(&Sha256::digest(bytes))
}

/// A git-style unified diff of `old` (`None`: the file does not exist) against `new`;
/// empty when nothing changes. Non-UTF-8 old content is shown lossily.
pub fn unified_diff(display: &str, old: Option<&[u8]>, new: &str) -> String {
    let old_text = old.map(String::from_utf8_lossy).unwrap_or_default();
    let old_header = match old {
        Some(_) => format!("a/{display}"),
        None => "/dev/null".to_owned(),
    };
    let new_header = format!("b/{display}");
    if old.is_none() && new.is_empty() {
        // Creating an empty file is still a change; similar prints nothing for it.
        return format!("--- {old_header}\n+++ {new_header}\n");
    }
    TextDiff::from_lines(old_text.as_ref(), new)
        .unified_diff()
        .context_radius(CONTEXT)
        .header(&old_header, &new_header)
        .to_string()
}

/// The model-facing text of a preview: the diff, or a clear "(no changes)".
fn diff_text(diff: &str) -> String {
    if diff.is_empty() {
        "(no changes)".to_owned()
    } else {
        diff.to_owned()
    }
}

/// A preview's outcome. `meta`: `diff`, `path` (display form), `before_sha256` (hex, or
/// null when the file does not exist) and `content` (the full new text). The supervisor
/// stores the change, removes `content` and adds `token`.
pub fn preview_outcome(display: &str, before: Option<&[u8]>, new: String) -> Outcome {
    let cut = truncate::text(&unified_diff(display, before, &new), DIFF_MAX, DIFF_KEEP);
    let diff = cut.text;
    let mut outcome = Outcome::ok(diff_text(&diff));
    outcome.truncated = cut.truncated;
    outcome.meta = meta(&[
        ("diff", json!(diff)),
        ("path", json!(display)),
        ("before_sha256", json!(before.map(sha256_hex))),
        ("content", json!(new)),
    ]);
    outcome
}

/// The outcome of a write that happened: a short confirmation, and the diff in `meta`
/// for people reading along.
pub fn written_outcome(summary: String, display: &str, diff: String) -> Outcome {
    let diff = truncate::text(&diff, DIFF_MAX, DIFF_KEEP).text;
    let mut outcome = Outcome::ok(summary);
    outcome.meta = meta(&[("diff", json!(diff)), ("path", json!(display))]);
    outcome
}

fn meta(pairs: &[(&str, Value)]) -> Map<String, Value> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_lowercase_hex() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn diff_of_a_change_has_git_headers() {
        let diff = unified_diff("src/a.rs", Some(b"a\nb\n"), "a\nc\n");
        assert!(
            diff.starts_with("--- a/src/a.rs\n+++ b/src/a.rs\n"),
            "{diff}"
        );
        assert!(diff.contains("-b\n+c\n"), "{diff}");
    }

    #[test]
    fn diff_of_a_new_file_is_against_dev_null() {
        let diff = unified_diff("n.txt", None, "hello\n");
        assert!(diff.starts_with("--- /dev/null\n+++ b/n.txt\n"), "{diff}");
        assert!(diff.contains("+hello"), "{diff}");
    }

    #[test]
    fn preview_meta_carries_the_change() {
        let out = preview_outcome("f", Some(b"x\n"), "y\n".to_owned());
        assert_eq!(out.meta["path"], "f");
        assert_eq!(out.meta["content"], "y\n");
        assert_eq!(out.meta["before_sha256"], json!(sha256_hex(b"x\n")));
        assert_eq!(out.content, out.meta["diff"].as_str().unwrap());
    }

    #[test]
    fn a_huge_diff_is_cut_with_the_marker_but_the_content_is_whole() {
        let new = "line of text\n".repeat(DIFF_MAX / 8);
        let out = preview_outcome("big", None, new.clone());
        assert!(out.content.len() < DIFF_MAX, "{}", out.content.len());
        assert!(
            out.content.contains("[Output truncated: "),
            "marker missing"
        );
        assert!(out.truncated.is_some());
        assert_eq!(out.meta["content"], json!(new));
        let written = written_outcome("ok".into(), "big", unified_diff("big", None, &new));
        assert!(written.meta["diff"].as_str().unwrap().len() < DIFF_MAX);
    }

    #[test]
    fn preview_of_no_change_says_so() {
        let out = preview_outcome("f", Some(b"same\n"), "same\n".to_owned());
        assert_eq!(out.content, "(no changes)");
        assert_eq!(out.meta["diff"], "");
        let new = preview_outcome("g", None, String::new());
        assert_eq!(new.meta["before_sha256"], Value::Null);
        assert_eq!(new.content, "--- /dev/null\n+++ b/g\n");
    }
}
