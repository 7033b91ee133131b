//! `run_command`'s `ready` for a background process: the call returns once the
//! process's output has a line the regex matches, or something listens on the port
//! in its network namespace, or the timeout passes, or the process ends — with
//! `meta.ready` saying which, and the output so far (which then counts as read).

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use regex::Regex;
use serde_json::{Value, json};
use tokio::time::Instant;
use toolvisor_protocol::Truncated;
use toolvisor_protocol::worker::{Limits, Outcome};

use super::read::{compile, wait_end};
use super::{Job, Jobs};
use crate::exec::ansi::Stripper;
use crate::exec::output::{complete_prefix, full_output_name};
use crate::{ToolContext, ToolError, truncate};

/// `ready.timeout_ms` when the call gives none.
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// How often the listening ports are looked at.
const PORT_EVERY: Duration = Duration::from_millis(100);
/// The longest line the regex is tested on (a longer one: its last part).
const LINE_MAX: usize = 64 * 1024;
/// Log bytes read at a time.
const CHUNK: usize = 64 * 1024;

/// A `ready` condition.
#[derive(Debug)]
pub(crate) struct ReadySpec {
    pub regex: Option<Regex>,
    pub port: Option<u16>,
    pub timeout: Duration,
}

impl ReadySpec {
    pub(crate) fn parse(v: &Value) -> Result<ReadySpec, ToolError> {
        let regex = match v.get("regex").and_then(Value::as_str) {
            Some(re) => Some(compile(re, "ready.regex")?),
            None => None,
        };
        let port = match v.get("port").and_then(Value::as_u64) {
            Some(p @ 1..=65535) => Some(p as u16),
            Some(p) => return Err(ToolError::invalid(format!("ready.port {p} is not a port"))),
            None => None,
        };
        if regex.is_none() && port.is_none() {
            return Err(ToolError::invalid(
                "ready needs a regex or a port to wait for",
            ));
        }
        let timeout = v
            .get("timeout_ms")
            .and_then(Value::as_u64)
            .map_or(DEFAULT_TIMEOUT, Duration::from_millis);
        Ok(ReadySpec {
            regex,
            port,
            timeout,
        })
    }
}

/// Finds the first line of a growing log that a regex matches, reading each byte once.
struct Scanner {
    pos: u64,
    /// A terminal's output is matched as text.
    stripper: Option<Stripper>,
    /// Bytes of an unfinished character, for the next read.
    carry: Vec<u8>,
    /// The current, unfinished line.
    line: String,
}

impl Scanner {
    fn new(tty: bool) -> Scanner {
        Scanner {
            pos: 0,
            stripper: tty.then(Stripper::default),
            carry: Vec::new(),
            line: String::new(),
        }
    }

    /// Read the log up to `logged` and test each new line (and the unfinished one:
    /// a prompt has no line feed) until `re` matches.
    fn scan(&mut self, path: &Path, logged: u64, re: &Regex) -> bool {
        let Ok(file) = std::fs::File::open(path) else {
            return false;
        };
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; CHUNK];
        while self.pos < logged {
            let want = usize::try_from(logged - self.pos).map_or(CHUNK, |n| n.min(CHUNK));
            let n = match file.read_at(&mut buf[..want], self.pos) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            self.pos += n as u64;
            if self.feed(&buf[..n], re) {
                return true;
            }
        }
        re.is_match(&self.line)
    }

    fn feed(&mut self, bytes: &[u8], re: &Regex) -> bool {
        let text = match &mut self.stripper {
            Some(s) => s.push(bytes),
            None => {
                self.carry.extend_from_slice(bytes);
                let whole = complete_prefix(&self.carry);
                let text = String::from_utf8_lossy(&self.carry[..whole]).into_owned();
                self.carry.drain(..whole);
                text
            }
        };
        for piece in text.split_inclusive('\n') {
            self.line.push_str(piece);
            if self.line.len() > LINE_MAX {
                let cut = truncate::floor_boundary(&self.line, self.line.len() - LINE_MAX);
                self.line.drain(..cut);
            }
            if let Some(l) = self.line.strip_suffix('\n') {
                if re.is_match(l.strip_suffix('\r').unwrap_or(l)) {
                    return true;
                }
                self.line.clear();
            }
        }
        false
    }
}

impl Jobs {
    /// Wait for `spec` on a job just started (see the module doc).
    pub(super) async fn wait_ready(
        &self,
        job: &Arc<Job>,
        spec: &ReadySpec,
        ctx: &ToolContext,
    ) -> Outcome {
        let end = wait_end(spec.timeout, ctx);
        let mut rx = job.progress.subscribe();
        let mut scanner = Scanner::new(job.tty);
        let mut port_seen = Instant::now()
            .checked_sub(PORT_EVERY)
            .unwrap_or_else(Instant::now);
        let ready = loop {
            rx.borrow_and_update();
            let finished = job.finished();
            let logged = job.logged.load(Ordering::Acquire);
            if let Some(re) = &spec.regex
                && scanner.scan(&job.log_path, logged, re)
            {
                break true;
            }
            if let Some(port) = spec.port
                && Instant::now() >= port_seen + PORT_EVERY
            {
                port_seen = Instant::now();
                if crate::exec::ports::listening(job.pid).contains(&port) {
                    break true;
                }
            }
            if finished || Instant::now() >= end || ctx.cancel.is_cancelled() {
                break false;
            }
            let tick = spec.port.map(|_| port_seen + PORT_EVERY);
            tokio::select! {
                _ = rx.changed() => {}
                _ = crate::exec::launch::sleep_until_opt(tick) => {}
                _ = tokio::time::sleep_until(end) => {}
                _ = ctx.cancel.cancelled() => {}
            }
        };
        if ctx.cancel.is_cancelled() {
            // The caller will never learn the handle: the job goes with its call.
            job.kill.cancel();
        }
        let logged = job.logged.load(Ordering::Acquire);
        {
            let mut st = job.lock();
            st.ready = Some(ready);
            st.cursor = st.cursor.max(logged);
        }
        let (text, truncated) = output_so_far(
            &job.log_path,
            logged,
            &ctx.init.limits,
            job.tty,
            crate::exec::workspace(ctx),
        );
        let mut out = Outcome::ok(text);
        out.truncated = truncated;
        out.meta = job.meta();
        out.meta.insert("next".into(), json!(logged));
        out
    }
}

/// The first `logged` bytes of a job's log as `run_command` shows output: whole, or
/// its head and tail with the marker (and the log named as the full output).
fn output_so_far(
    path: &Path,
    logged: u64,
    limits: &Limits,
    tty: bool,
    workspace: &Path,
) -> (String, Option<Truncated>) {
    let (head, tail, lines) = match read_ends(path, logged, limits) {
        Ok(parts) => parts,
        Err(e) => return (format!("[cannot read the output: {e}]"), None),
    };
    let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    let render: &dyn Fn(&[u8]) -> String = if tty {
        &crate::exec::ansi::strip
    } else {
        &lossy
    };
    let cut = truncate::shell_with(&head, &tail, (logged, lines), limits, render);
    let truncated = cut.truncated.map(|mut t| {
        t.full_output = Some(full_output_name(path, workspace));
        t
    });
    (cut.text, truncated)
}

/// The head and tail of the log's first `logged` bytes (all of it when it fits
/// `shell_max`), and how many lines it has: read in chunks, never all at once.
fn read_ends(
    path: &Path,
    logged: u64,
    limits: &Limits,
) -> std::io::Result<(Vec<u8>, Vec<u8>, u64)> {
    let mut file = std::fs::File::open(path)?.take(logged);
    let whole = logged <= limits.shell_max as u64;
    let head_max = if whole { usize::MAX } else { limits.shell_head };
    let (mut head, mut tail) = (Vec::new(), std::collections::VecDeque::new());
    let (mut newlines, mut last) = (0u64, None);
    let mut buf = vec![0u8; CHUNK];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        newlines += chunk.iter().filter(|&&b| b == b'\n').count() as u64;
        last = chunk.last().copied();
        let into_head = head_max.saturating_sub(head.len()).min(n);
        head.extend_from_slice(&chunk[..into_head]);
        tail.extend(&chunk[into_head..]);
        let excess = tail.len().saturating_sub(limits.shell_tail);
        tail.drain(..excess);
    }
    let lines = newlines + u64::from(last.is_some_and(|b| b != b'\n'));
    Ok((head, tail.into_iter().collect(), lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_needs_something_to_wait_for() {
        let r = ReadySpec::parse(&json!({"regex": "up", "timeout_ms": 500})).unwrap();
        assert_eq!(r.timeout, Duration::from_millis(500));
        assert!(
            ReadySpec::parse(&json!({"port": 8080}))
                .unwrap()
                .regex
                .is_none()
        );
        for bad in [json!({}), json!({"regex": "("}), json!({"port": 70000})] {
            let e = ReadySpec::parse(&bad).unwrap_err();
            assert_eq!(
                e.kind,
                toolvisor_protocol::ErrorType::InvalidParams,
                "{bad}"
            );
        }
    }

    #[test]
    fn the_scanner_finds_lines_across_reads_and_prompts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let re = Regex::new("^listening on \\d+$").unwrap();
        let mut s = Scanner::new(false);
        std::fs::write(&path, "starting\nlisten").unwrap();
        assert!(!s.scan(&path, 15, &re));
        std::fs::write(&path, "starting\nlistening on 80\n").unwrap();
        assert!(s.scan(&path, 25, &re));
        let mut t = Scanner::new(true);
        std::fs::write(&path, "\x1b[32mPassword: \x1b[0m").unwrap();
        assert!(t.scan(&path, 21, &Regex::new("Password: $").unwrap()));
    }

    #[test]
    fn output_so_far_is_cut_like_a_command_s() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let body: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, &body).unwrap();
        let limits = Limits::default();
        let (text, t) = output_so_far(&path, body.len() as u64, &limits, false, dir.path());
        let t = t.expect("truncated");
        assert!(
            text.starts_with("line 0\n") && text.ends_with("line 1999\n"),
            "{text}"
        );
        assert_eq!(t.full_output.as_deref(), Some("log"));
        let (text, t) = output_so_far(&path, 14, &limits, false, dir.path());
        assert_eq!((text.as_str(), t), ("line 0\nline 1\n", None));
    }
}
