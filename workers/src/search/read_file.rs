//! The `read_file` tool: a text file's content, verbatim, optionally a range of lines.
//!
//! Choices the contract leaves open:
//! - `startLine` past the last line is `InvalidParams` (saying how many lines the file
//!   has), except `startLine` 1 on an empty file, which is empty content; `endLine` past
//!   the end is clamped; `endLine < startLine` is `InvalidParams`.
//! - A directory is `InvalidParams` ("is a directory, not a file"): the path exists, so
//!   `FileNotFoundError` would mislead the model.
//! - Binary means a NUL byte or invalid UTF-8 in the first 8 KiB (`BinaryFile`); invalid
//!   UTF-8 further on is converted lossily.
//!
//! - A path inside `.git` is `PermissionError`; a file of `<state_dir>/artifacts/` (a
//!   command's full output, named by `truncated.full_output`) is readable although the
//!   rest of the state directory is protected (see [`super::guard`]).
//!
//! The file is streamed: only the requested lines are kept, and of those only what the
//! truncation may keep; the rest is counted for the marker. No line is held whole: at
//! most `limits.line_max` bytes of one are ever in memory, and the output ends (with
//! the marker) at the first line longer than that.

use std::fs::File;
use std::io::{BufRead, BufReader, Cursor, Read};

use rustix::io::Errno;
use serde_json::{Value, json};
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::Outcome;

use super::guard::Target;
use super::{opt_count, str_arg};
use crate::paths::errno_error;
use crate::truncate::{Cut, text_counted};
use crate::{ToolContext, ToolError};

/// Bytes inspected for the binary check.
const SNIFF: u64 = 8192;

/// Files up to this size are read on the worker's frame loop itself (see
/// [`run_if_small`]): microseconds of work, less than a hand-off to another thread.
pub const SMALL: u64 = 64 * 1024;

pub fn run(args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
    let (target, file, range) = open_call(args, ctx)?;
    read_opened(ctx, &target, file, range)
}

/// `read_file` when the file is at most [`SMALL`] bytes (or the call fails before any
/// reading: bad arguments, a missing or refused path); None for a larger file, which
/// the caller reads where a long read blocks nothing else.
pub fn run_if_small(args: &Value, ctx: &ToolContext) -> Option<Result<Outcome, ToolError>> {
    let (target, file, range) = match open_call(args, ctx) {
        Ok(opened) => opened,
        Err(e) => return Some(Err(e)),
    };
    if file.metadata().map_or(true, |m| m.len() > SMALL) {
        return None;
    }
    Some(read_opened(ctx, &target, file, range))
}

/// The call's arguments checked and its file opened (confined, regular, not blocking).
fn open_call(args: &Value, ctx: &ToolContext) -> Result<(Target, File, LineRange), ToolError> {
    let path = str_arg(args, "path")?;
    let range = LineRange::new(opt_count(args, "startLine")?, opt_count(args, "endLine")?)?;
    let target = Target::of(ctx, path)?;
    let file = target.open(ctx)?;
    Ok((target, file, range))
}

fn read_opened(
    ctx: &ToolContext,
    target: &Target,
    file: File,
    range: LineRange,
) -> Result<Outcome, ToolError> {
    let shown = target.display();
    let read = read_text(ctx, file, shown, range)?;
    let mut o = Outcome::ok(read.cut.text);
    o.truncated = read.cut.truncated;
    o.display = match read.lines {
        0 => format!("{shown}: empty"),
        n => format!("{shown}: lines {}-{}", range.start, range.start + n - 1),
    };
    o.meta.insert("lines".into(), json!(read.lines));
    o.meta.insert("start_line".into(), json!(range.start));
    Ok(o)
}

/// Lines to read, 1-based and inclusive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineRange {
    pub start: u64,
    pub end: u64,
}

impl LineRange {
    pub const ALL: LineRange = LineRange {
        start: 1,
        end: u64::MAX,
    };

    pub fn new(start: Option<usize>, end: Option<usize>) -> Result<Self, ToolError> {
        let start = start.map_or(1, |s| s as u64);
        let end = end.map_or(u64::MAX, |e| e as u64);
        if end < start {
            return Err(ToolError::invalid(format!(
                "endLine {end} is before startLine {start}"
            )));
        }
        Ok(LineRange { start, end })
    }
}

/// A file's text for a range, after truncation.
pub struct ReadText {
    pub cut: Cut,
    /// How many lines of the range the file had.
    pub lines: u64,
}

/// Refuse binary content in `file` (an opened [`Target`], shown as `shown`), return the
/// range's text truncated under `limits.file_max`.
pub fn read_text(
    ctx: &ToolContext,
    file: File,
    shown: &str,
    range: LineRange,
) -> Result<ReadText, ToolError> {
    let mut head = Vec::with_capacity(SNIFF as usize);
    (&file)
        .take(SNIFF)
        .read_to_end(&mut head)
        .map_err(|e| io_error(e, shown))?;
    check_text(&head, shown)?;
    let mut reader = BufReader::new(Cursor::new(head).chain(file));
    let limits = &ctx.init.limits;
    let caps = Caps {
        keep: limits.file_max + 4,
        line: limits.line_max.max(1),
    };
    let sel = select(&mut reader, range, caps, ctx, shown)?;
    if sel.lines == 0 && range.start > 1 {
        return Err(ToolError::invalid(format!(
            "startLine {} is past the end of `{shown}` ({} lines)",
            range.start, sel.seen
        )));
    }
    let text = String::from_utf8_lossy(&sel.kept);
    // A line cut at `line_max` ends the output there (unless the file limit cuts first).
    let (max, keep) = match sel.cut_at {
        Some(at) if at <= limits.file_max => (at, at),
        _ => (limits.file_max, limits.file_keep),
    };
    let cut = text_counted(&text, sel.bytes, sel.lines, max, keep);
    Ok(ReadText {
        cut,
        lines: sel.lines,
    })
}

/// What [`select`] gathered.
struct Selection {
    /// The first bytes of the range (at most the cap given).
    kept: Vec<u8>,
    /// Bytes and lines in the whole range.
    bytes: u64,
    lines: u64,
    /// Lines seen in the file (all of them when the range ran past the end).
    seen: u64,
    /// Where `kept` ends inside a line longer than the line cap (nothing is kept after
    /// it).
    cut_at: Option<usize>,
}

/// How much [`select`] keeps: of the range, and of any one line.
#[derive(Clone, Copy)]
struct Caps {
    keep: usize,
    line: usize,
}

/// Read lines `range` from `reader`, keeping at most `caps.keep` bytes of them and at
/// most `caps.line` bytes of any line (counting the rest).
fn select(
    reader: &mut impl BufRead,
    range: LineRange,
    caps: Caps,
    ctx: &ToolContext,
    shown: &str,
) -> Result<Selection, ToolError> {
    let mut sel = Selection {
        kept: Vec::new(),
        bytes: 0,
        lines: 0,
        seen: 0,
        cut_at: None,
    };
    let mut line = Vec::new();
    while sel.seen < range.end {
        line.clear();
        let n = read_line_capped(reader, &mut line, caps.line).map_err(|e| io_error(e, shown))?;
        if n == 0 {
            break;
        }
        sel.seen += 1;
        if sel.seen.is_multiple_of(4096) || n > caps.line {
            ctx.cancel.check()?;
        }
        if sel.seen < range.start {
            continue;
        }
        sel.bytes += n as u64;
        sel.lines += 1;
        if sel.cut_at.is_some() {
            continue;
        }
        let room = caps.keep.saturating_sub(sel.kept.len()).min(line.len());
        sel.kept.extend_from_slice(&line[..room]);
        if n > line.len() && room == line.len() {
            sel.cut_at = Some(sel.kept.len());
        }
    }
    Ok(sel)
}

/// Read one line (through its `\n`) into `line`, keeping at most `cap` bytes of it;
/// returns the line's full length (0 at the end of the file).
pub fn read_line_capped(
    reader: &mut impl BufRead,
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<usize> {
    let mut total = 0;
    loop {
        let buf = match reader.fill_buf() {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buf.is_empty() {
            return Ok(total);
        }
        let (used, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = cap.saturating_sub(line.len()).min(used);
        line.extend_from_slice(&buf[..room]);
        total += used;
        reader.consume(used);
        if done {
            return Ok(total);
        }
    }
}

/// `BinaryFile` for a NUL byte or invalid UTF-8 in `head` (a character cut by the end of
/// `head` is fine).
fn check_text(head: &[u8], shown: &str) -> Result<(), ToolError> {
    let bad_utf8 = matches!(std::str::from_utf8(head), Err(e) if e.error_len().is_some());
    if head.contains(&0) || bad_utf8 {
        return Err(ToolError::new(
            ErrorType::BinaryFile,
            format!("`{shown}` is a binary file"),
        ));
    }
    Ok(())
}

/// The contract error for a read failure.
pub fn io_error(e: std::io::Error, shown: &str) -> ToolError {
    match e.raw_os_error() {
        Some(code) => errno_error(Errno::from_raw_os_error(code), shown),
        None => ToolError::internal(format!("`{shown}`: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testutil::{err_kind, ws, ws_with};
    use proptest::prelude::*;
    use serde_json::json;
    use toolvisor_protocol::ErrorType;
    use toolvisor_protocol::worker::Limits;

    #[test]
    fn reads_whole_file_verbatim() {
        let w = ws();
        w.write("a.txt", "one\ntwo\r\nthree");
        let o = w.run("read_file", json!({"path": "a.txt"}));
        assert_eq!(o.content, "one\ntwo\r\nthree");
        assert!(o.truncated.is_none());
    }

    #[test]
    fn errors() {
        let w = ws_with(Limits::default(), &[".toolvisor"]);
        w.write("bin", b"ab\0cd");
        w.write("latin1", b"caf\xe9 au lait");
        w.write(".toolvisor/audit.jsonl", "x");
        w.mkdir("d");
        let kind = |p: &str| err_kind(&w.run("read_file", json!({"path": p})));
        assert_eq!(kind("missing.txt"), Some(ErrorType::FileNotFoundError));
        assert_eq!(kind("bin"), Some(ErrorType::BinaryFile));
        assert_eq!(kind("latin1"), Some(ErrorType::BinaryFile));
        assert_eq!(kind("d"), Some(ErrorType::InvalidParams));
        assert_eq!(kind("../x"), Some(ErrorType::PathOutsideWorkspace));
        assert_eq!(
            kind(".toolvisor/audit.jsonl"),
            Some(ErrorType::PermissionError)
        );
    }

    #[test]
    fn artifacts_are_readable_when_named_and_never_listed() {
        let w = ws_with(Limits::default(), &[".toolvisor"]);
        let full: String = (1..=3000).map(|i| format!("{i}\n")).collect();
        w.write(".toolvisor/artifacts/c1.log", &full);
        w.write(".toolvisor/audit.jsonl", "x");
        std::os::unix::fs::symlink(".toolvisor/audit.jsonl", w.root().join("ln")).unwrap();
        let read = |a| w.run("read_file", a);
        let o = read(json!({"path": ".toolvisor/artifacts/c1.log", "startLine": 2999}));
        assert_eq!(o.content, "2999\n3000\n");
        assert_eq!(o.display, ".toolvisor/artifacts/c1.log: lines 2999-3000");
        let o = read(json!({"path": ".toolvisor/artifacts/c1.log"}));
        assert!(o.truncated.is_some() && o.content.starts_with("1\n2\n"));
        let abs = w.root().join(".toolvisor/artifacts/c1.log");
        let o = read(json!({"path": abs, "endLine": 1}));
        assert_eq!(o.content, "1\n");
        for p in [".toolvisor/audit.jsonl", ".toolvisor/artifacts", "ln"] {
            let o = read(json!({"path": p}));
            assert_eq!(err_kind(&o), Some(ErrorType::PermissionError), "{p}");
        }
        let o = w.run(
            "read_many_files",
            json!({"paths": [".toolvisor/artifacts/c1.log", ".toolvisor/artifacts/*"]}),
        );
        assert!(
            o.content
                .starts_with("=== .toolvisor/artifacts/c1.log ===\n1\n")
        );
        assert_eq!(o.meta["errors"], 1, "globs never reach it: {}", o.content);
        let ls = w.run("ls", json!({"path": ".toolvisor/artifacts"}));
        assert_eq!(err_kind(&ls), Some(ErrorType::PermissionError));
        let all = json!({"pattern": "**", "includeHidden": true});
        assert!(!w.run("glob", all).content.contains("artifacts"));
        assert!(
            !w.run("grep", json!({"pattern": "3000"}))
                .content
                .contains("artifacts")
        );
    }

    #[test]
    fn a_long_line_is_cut_at_line_max_without_holding_it() {
        let w = ws_with(
            Limits {
                file_max: 1000,
                file_keep: 500,
                line_max: 100,
                ..Limits::default()
            },
            &[],
        );
        let long = "x".repeat(5000);
        w.write("f", format!("first\n{long}\nlast\n"));
        let o = w.run("read_file", json!({"path": "f"}));
        assert!(o.error.is_none(), "{}", o.content);
        let want = format!(
            "first\n{}\n[Output truncated: 2 lines and 4906 characters omitted]",
            &long[..100]
        );
        assert_eq!(o.content, want);
        let t = o.truncated.unwrap();
        assert_eq!((t.omitted_lines, t.omitted_bytes), (2, 4906));
        // Past the long line, a range reads normally.
        let o = w.run("read_file", json!({"path": "f", "startLine": 3}));
        assert_eq!(o.content, "last\n");
        let mut r = std::io::Cursor::new(b"abcdef\ngh".to_vec());
        let mut line = Vec::new();
        assert_eq!(super::read_line_capped(&mut r, &mut line, 3).unwrap(), 7);
        assert_eq!(line, b"abc");
        line.clear();
        assert_eq!(super::read_line_capped(&mut r, &mut line, 3).unwrap(), 2);
        assert_eq!(line, b"gh");
    }

    #[test]
    fn line_range_edges() {
        let w = ws();
        w.write("a", "1\n2\n3\n");
        w.write("empty", "");
        let read = |a| w.run("read_file", a);
        assert_eq!(read(json!({"path": "a", "startLine": 2})).content, "2\n3\n");
        assert_eq!(read(json!({"path": "a", "endLine": 1})).content, "1\n");
        assert_eq!(
            read(json!({"path": "a", "startLine": 3, "endLine": 9})).content,
            "3\n"
        );
        let past = read(json!({"path": "a", "startLine": 4}));
        assert_eq!(err_kind(&past), Some(ErrorType::InvalidParams));
        assert!(past.content.contains("3 lines"), "{}", past.content);
        let rev = read(json!({"path": "a", "startLine": 3, "endLine": 2}));
        assert_eq!(err_kind(&rev), Some(ErrorType::InvalidParams));
        assert_eq!(read(json!({"path": "empty"})).content, "");
    }

    #[test]
    fn large_file_is_truncated_with_one_marker() {
        let w = ws();
        let line = "é".repeat(40) + "\n"; // 81 bytes
        w.write("big", line.repeat(200));
        let o = w.run("read_file", json!({"path": "big"}));
        let t = o.truncated.expect("truncated");
        assert!(o.content.len() <= 5120 + 80);
        assert_eq!(o.content.matches("[Output truncated:").count(), 1);
        assert_eq!(
            t.omitted_bytes as usize + o.content.find("\n[Output").unwrap(),
            81 * 200
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        /// Property 6: what is written is read back (below the truncation limit).
        #[test]
        fn round_trip(content in "(\\PC|\n|\t){0,400}") {
            let w = ws();
            w.write("f.txt", &content);
            let o = w.run("read_file", json!({"path": "f.txt"}));
            prop_assert_eq!(o.content, content);
        }

        /// Property 7: a valid range gives exactly those lines.
        #[test]
        fn range_slicing(lines in proptest::collection::vec("[a-z ]{0,8}", 1..30), a in 1usize..40, b in 1usize..40) {
            let w = ws();
            let content: String = lines.iter().map(|l| format!("{l}\n")).collect();
            w.write("f", &content);
            let (start, end) = (a.min(b), a.max(b));
            let o = w.run("read_file", json!({"path": "f", "startLine": start, "endLine": end}));
            if start > lines.len() {
                prop_assert_eq!(err_kind(&o), Some(ErrorType::InvalidParams));
            } else {
                let want: String = lines[start - 1..end.min(lines.len())].iter().map(|l| format!("{l}\n")).collect();
                prop_assert_eq!(o.content, want);
            }
        }

        /// Property 8: a missing file is FileNotFoundError.
        #[test]
        fn missing_is_not_found(name in "[a-z]{1,10}(/[a-z]{1,10}){0,2}") {
            let w = ws();
            let o = w.run("read_file", json!({"path": name}));
            prop_assert_eq!(err_kind(&o), Some(ErrorType::FileNotFoundError));
        }
    }
}
