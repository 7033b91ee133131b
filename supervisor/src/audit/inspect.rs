//! `toolvisor audit verify` and `toolvisor audit tail`: library functions the CLI
//! calls. Both read the files directly, so they work with the daemon up or down.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::segments;
use super::verify::verify_dir;

/// How often `tail -f` looks for new records (a CLI follower may poll).
const FOLLOW_POLL: Duration = Duration::from_millis(200);

/// Verifies the chain; prints problems and a summary. Exit code 0 when the chain is
/// intact, 1 (with the first bad seq) when it is not.
pub fn verify_cmd(state_dir: &Path, files: &[PathBuf], out: &mut dyn Write) -> i32 {
    let report = verify_dir(state_dir, files);
    let mut lines = Vec::new();
    for w in &report.warnings {
        lines.push(format!("warning: {w}"));
    }
    for p in &report.problems {
        lines.push(format!(
            "{}: seq {}: {}",
            p.file.display(),
            p.fault.seq,
            p.fault.detail
        ));
    }
    let code = match report.first_bad() {
        Some(seq) => {
            lines.push(format!("FAILED: first bad seq {seq}"));
            1
        }
        None if report.segments == 0 => {
            lines.push(format!(
                "FAILED: no audit log in {}: nothing to verify (has the service run on this \
                 workspace? `toolvisor serve` writes it)",
                state_dir.display()
            ));
            1
        }
        None => {
            let range = match (report.first_seq, report.last_seq) {
                (Some(a), Some(b)) => format!("seq {a}..{b}"),
                _ => "no records".into(),
            };
            lines.push(format!(
                "OK: {} record(s), {range}, {} segment(s)",
                report.records, report.segments
            ));
            0
        }
    };
    let text = lines.join("\n") + "\n";
    if out.write_all(text.as_bytes()).is_err() {
        return 2;
    }
    code
}

/// What `audit tail` shows.
#[derive(Clone, Debug, Default)]
pub struct TailOptions {
    /// Keep printing new records, across rotation, until the output closes.
    pub follow: bool,
    /// Only records of this trace (its calls' records included).
    pub trace_id: Option<String>,
    /// Only records of this call.
    pub call_id: Option<String>,
    /// Print the raw JSON lines instead of the human format.
    pub json: bool,
    /// Print only the last N matching records before following (`None`: all).
    pub lines: Option<usize>,
}

/// Prints records: `seq ts kind call_id tool status key=value…`, one per line, or raw
/// JSON with `--json`. Returns 0, or 1 when the log cannot be read.
pub fn tail_cmd(state_dir: &Path, opts: TailOptions, out: &mut dyn Write) -> i32 {
    let mut filter = Filter::new(&opts);
    let files = match segments::all(state_dir) {
        Ok(f) => f,
        Err(e) => return fail(out, &format!("cannot list {}: {e}", state_dir.display())),
    };
    let mut shown = std::collections::VecDeque::new();
    let mut follow_from = None;
    for path in &files {
        match read_records(path, 0, |line| {
            keep_last(&mut shown, &mut filter, &opts, line)
        }) {
            Ok(end) => follow_from = Some((path.clone(), end)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return fail(out, &format!("cannot read {}: {e}", path.display())),
        }
    }
    for line in shown {
        if write_line(out, &line, opts.json).is_err() {
            return 0;
        }
    }
    if !opts.follow {
        return 0;
    }
    let active = segments::active_path(state_dir);
    let start = follow_from
        .filter(|(p, _)| *p == active)
        .map_or(0, |(_, end)| end);
    follow(state_dir, start, &mut filter, &opts, out)
}

fn fail(out: &mut dyn Write, msg: &str) -> i32 {
    let _ = writeln!(out, "error: {msg}");
    1
}

fn keep_last(
    shown: &mut std::collections::VecDeque<Value>,
    filter: &mut Filter,
    opts: &TailOptions,
    v: Value,
) {
    if filter.matches(&v) {
        shown.push_back(v);
        if opts.lines.is_some_and(|n| shown.len() > n) {
            shown.pop_front();
        }
    }
}

/// Calls `each` for every complete JSON line of `path` from `offset`; returns the
/// offset after the last complete line (a partial last line is left for later).
fn read_records(path: &Path, offset: u64, mut each: impl FnMut(Value)) -> io::Result<u64> {
    let mut f = File::open(path)?;
    read_from(&mut f, offset, &mut each)
}

fn read_from(f: &mut File, offset: u64, each: &mut dyn FnMut(Value)) -> io::Result<u64> {
    f.seek(SeekFrom::Start(offset))?;
    let mut reader = BufReader::new(f);
    let mut pos = offset;
    let mut buf = Vec::new();
    loop {
        buf.clear();
        let n = reader.read_until(b'\n', &mut buf)?;
        if n == 0 || buf.last() != Some(&b'\n') {
            return Ok(pos);
        }
        pos += n as u64;
        if let Ok(v) = serde_json::from_slice::<Value>(&buf) {
            each(v);
        }
    }
}

/// Polls the active file; when it is rotated (its inode changes), drains the old fd
/// and continues in the new file from its start.
fn follow(
    dir: &Path,
    mut offset: u64,
    filter: &mut Filter,
    opts: &TailOptions,
    out: &mut dyn Write,
) -> i32 {
    let path = segments::active_path(dir);
    let mut current: Option<File> = None;
    loop {
        if current.is_none() {
            current = File::open(&path).ok();
        }
        if let Some(f) = current.as_mut() {
            // Checked before reading: the writer renames only after its last write
            // to the old file, so this read drains it.
            let rotated = rotated_away(f, &path);
            let mut batch = Vec::new();
            match read_from(f, offset, &mut |v| batch.push(v)) {
                Ok(end) => offset = end,
                Err(e) => return fail(out, &format!("cannot read {}: {e}", path.display())),
            }
            for v in batch.into_iter().filter(|v| filter.matches(v)) {
                if write_line(out, &v, opts.json).is_err() {
                    return 0; // the reader went away (`| head`): a normal end
                }
            }
            if rotated {
                current = None;
                offset = 0;
                continue;
            }
        }
        if out.flush().is_err() {
            return 0;
        }
        std::thread::sleep(FOLLOW_POLL);
    }
}

/// Whether `path` now names another file than `f` (rotation happened).
fn rotated_away(f: &File, path: &Path) -> bool {
    match (f.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.ino() != b.ino() || a.dev() != b.dev(),
        _ => false,
    }
}

fn write_line(out: &mut dyn Write, v: &Value, json: bool) -> io::Result<()> {
    let text = if json {
        super::canonical::to_vec(v)
    } else {
        human(v).into_bytes()
    };
    out.write_all(&text)?;
    out.write_all(b"\n")
}

/// `seq ts kind call_id tool status` then the other fields as `key=value`.
fn human(v: &Value) -> String {
    const FIXED: [&str; 6] = ["seq", "ts", "kind", "call_id", "tool", "status"];
    const HIDDEN: [&str; 2] = ["prev", "hash"];
    let field = |k: &str| match v.get(k) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "-".into(),
        Some(other) => other.to_string(),
    };
    let mut parts: Vec<String> = FIXED.iter().map(|k| field(k)).collect();
    if let Some(map) = v.as_object() {
        for (k, val) in map {
            if FIXED.contains(&k.as_str()) || HIDDEN.contains(&k.as_str()) || val.is_null() {
                continue;
            }
            let shown = match val {
                Value::String(s) => s.clone(),
                other => String::from_utf8_lossy(&super::canonical::to_vec(other)).into_owned(),
            };
            parts.push(format!("{k}={shown}"));
        }
    }
    parts.join(" ")
}

/// `--trace` and `--call`. A trace's `completed` records carry only the call id, so
/// the filter remembers the call ids it has seen under the trace.
struct Filter {
    trace: Option<String>,
    call: Option<String>,
    trace_calls: std::collections::HashSet<String>,
}

impl Filter {
    fn new(opts: &TailOptions) -> Filter {
        Filter {
            trace: opts.trace_id.clone(),
            call: opts.call_id.clone(),
            trace_calls: Default::default(),
        }
    }

    fn matches(&mut self, v: &Value) -> bool {
        let call = v.get("call_id").and_then(Value::as_str);
        if let Some(want) = &self.call
            && call != Some(want.as_str())
        {
            return false;
        }
        let Some(trace) = &self.trace else {
            return true;
        };
        if v.get("trace_id").and_then(Value::as_str) == Some(trace.as_str()) {
            if let Some(c) = call {
                self.trace_calls.insert(c.to_owned());
            }
            return true;
        }
        call.is_some_and(|c| self.trace_calls.contains(c))
    }
}
