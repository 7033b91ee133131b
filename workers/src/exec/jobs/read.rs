//! `read_output`: contiguous pages of a job's log, a long poll for new output
//! (`wait_ms`), and `until` (wait for a line that matches, and end the page with it).
//!
//! A page never skips or repeats a byte of the log: it starts at `since` (default: where
//! the last `read_output` stopped) and `meta.next` is exactly where it ended. It never
//! ends inside a UTF-8 character, nor, for a job in a terminal, inside an escape
//! sequence (whose rest would show as text) — unless the job has ended and that is
//! all there is.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant as StdInstant};

use regex::Regex;
use serde_json::{Map, Value, json};
use tokio::time::Instant;
use toolvisor_protocol::worker::Outcome;

use super::{Job, Jobs};
use crate::exec::ansi;
use crate::exec::output::complete_prefix;
use crate::{ToolContext, ToolError};

/// How long `until` waits when the call gives no `wait_ms`.
pub(crate) const UNTIL_WAIT: Duration = Duration::from_secs(30);
/// A long poll answers this long before the call's deadline, so the answer is in time.
pub(crate) const DEADLINE_MARGIN: Duration = Duration::from_millis(500);

/// A `read_output` call's arguments.
struct Query {
    since: Option<u64>,
    wait: Duration,
    until: Option<Regex>,
}

impl Query {
    fn parse(args: &Value) -> Result<Query, ToolError> {
        let until = match args.get("until").and_then(Value::as_str) {
            Some(re) => Some(compile(re, "until")?),
            None => None,
        };
        let wait = args
            .get("wait_ms")
            .and_then(Value::as_u64)
            .map(|ms| Duration::from_millis(ms.min(toolvisor_protocol::tools::MAX_WAIT_MS)));
        let wait = match (wait, &until) {
            (Some(w), _) => w,
            (None, Some(_)) => UNTIL_WAIT,
            (None, None) => Duration::ZERO,
        };
        Ok(Query {
            since: args.get("since").and_then(Value::as_u64),
            wait,
            until,
        })
    }
}

/// A regular expression of the call (`until`, `ready.regex`), or a clear error.
pub(crate) fn compile(re: &str, what: &str) -> Result<Regex, ToolError> {
    Regex::new(re)
        .map_err(|e| ToolError::invalid(format!("{what} is not a valid regular expression: {e}")))
}

/// When a wait of `wait` ends, within the call's deadline.
pub(crate) fn wait_end(wait: Duration, ctx: &ToolContext) -> Instant {
    let now = StdInstant::now();
    let mut end = now + wait;
    if let Some(d) = ctx.deadline {
        end = end.min(d.checked_sub(DEADLINE_MARGIN).unwrap_or(now).max(now));
    }
    Instant::from_std(end)
}

impl Jobs {
    /// `read_output` (see the module doc).
    pub(crate) async fn read_output(
        &self,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<Outcome, ToolError> {
        let job = self.find(args)?;
        let q = Query::parse(args)?;
        let end = wait_end(q.wait, ctx);
        let mut rx = job.progress.subscribe();
        loop {
            rx.borrow_and_update();
            let Look {
                page,
                matched,
                meta,
            } = self.look(&job, &q)?;
            let settled = match (&q.until, matched) {
                (Some(_), Some(_)) => true,
                // Unread output beyond this page, or all of it read: nothing to wait for.
                (Some(_), None) => page.next < page.len || job_finished(&meta),
                (None, _) => !page.bytes.is_empty() || job_finished(&meta),
            };
            if settled || Instant::now() >= end || ctx.cancel.is_cancelled() {
                return Ok(self.answer(&job, page, matched, meta, q.until.is_some()));
            }
            tokio::select! {
                _ = rx.changed() => {}
                _ = tokio::time::sleep_until(end) => {}
                _ = ctx.cancel.cancelled() => {}
            }
        }
    }

    /// The page `q` asks for now, cut after its first matching line when there is one,
    /// and the job's state it was read under.
    fn look(&self, job: &Job, q: &Query) -> Result<Look, ToolError> {
        // The state first, then the file: a job seen finished has its log complete, and
        // the page reports the state it was read under (`running`, `exit_code`).
        let meta = job.meta();
        let finished = job_finished(&meta);
        let since = q.since.unwrap_or_else(|| job.lock().cursor);
        let logged = job.logged.load(Ordering::Acquire);
        let how = Cut {
            finished,
            logged,
            tty: job.tty,
        };
        let mut page = read_page(&job.log_path, since, self.page, how)?;
        let matched = q
            .until
            .as_ref()
            .and_then(|re| cut_at_match(&mut page, job.tty, re));
        Ok(Look {
            page,
            matched,
            meta,
        })
    }

    fn answer(
        &self,
        job: &Arc<Job>,
        page: Page,
        matched: Option<usize>,
        meta: Map<String, Value>,
        until: bool,
    ) -> Outcome {
        {
            let mut st = job.lock();
            st.cursor = page.next;
            if job_finished(&meta) && page.next >= page.len {
                st.read_to_end = true;
            }
        }
        let text = if job.tty {
            ansi::strip(&page.bytes)
        } else {
            String::from_utf8_lossy(&page.bytes).into_owned()
        };
        let mut out = Outcome::ok(text);
        out.meta = meta;
        out.meta.insert("next".into(), json!(page.next));
        out.meta.insert(
            "output_bytes".into(),
            json!(job.bytes.load(Ordering::Acquire)),
        );
        if until {
            out.meta.insert("matched".into(), json!(matched.is_some()));
        }
        if job.tty {
            // The page as the terminal wrote it, for a person's terminal (attach).
            let raw = String::from_utf8_lossy(&page.bytes).into_owned();
            out.meta.insert("raw".into(), json!(raw));
        }
        out
    }
}

/// One look at a job's output.
struct Look {
    page: Page,
    /// Where the first line `until` matches ends in the page (it is cut there).
    matched: Option<usize>,
    /// The job's state the page was read under.
    meta: Map<String, Value>,
}

/// Whether a [`Job::meta`] snapshot says the job had ended.
pub(super) fn job_finished(meta: &Map<String, Value>) -> bool {
    meta.get("running").and_then(Value::as_bool) == Some(false)
}

/// Cut `page` after its first line that `re` matches; where that is, if anywhere.
fn cut_at_match(page: &mut Page, tty: bool, re: &Regex) -> Option<usize> {
    let end = first_match(&page.bytes, tty, re)?;
    let start = page.next - page.bytes.len() as u64;
    page.bytes.truncate(end);
    page.next = start + end as u64;
    Some(end)
}

/// Where the first line of `bytes` that `re` matches ends (after its line feed; the
/// end of `bytes` for an unfinished last line), in `bytes`.
fn first_match(bytes: &[u8], tty: bool, re: &Regex) -> Option<usize> {
    let (text, ends) = if tty {
        ansi::page_text(bytes)
    } else {
        let ends = bytes
            .iter()
            .enumerate()
            .filter(|(_, b)| **b == b'\n')
            .map(|(i, _)| i + 1)
            .collect();
        (String::from_utf8_lossy(bytes).into_owned(), ends)
    };
    text.split_inclusive('\n')
        .enumerate()
        .find(|(_, line)| re.is_match(line.strip_suffix('\n').unwrap_or(line)))
        .map(|(i, _)| ends.get(i).copied().unwrap_or(bytes.len()))
}

/// One `read_output` page of a job's log.
#[derive(Debug)]
pub(super) struct Page {
    pub bytes: Vec<u8>,
    /// Offset right after `bytes`.
    pub next: u64,
    /// The log's length when it was read.
    pub len: u64,
}

/// How a page may be cut.
#[derive(Clone, Copy, Debug)]
pub(super) struct Cut {
    /// The job has ended: its log is complete.
    pub finished: bool,
    /// How much of the log was written (the file may hold reserved room beyond).
    pub logged: u64,
    /// A terminal's output: never end inside an escape sequence either.
    pub tty: bool,
}

/// Read at most `max` bytes of the log at `path` from `since` (clamped to its length,
/// and to what was written of it). Unless the job has finished, an unfinished
/// character (or escape sequence) at the end of the page is left for the next read:
/// the rest of it may still be on its way.
pub(super) fn read_page(path: &Path, since: u64, max: usize, how: Cut) -> Result<Page, ToolError> {
    use std::os::unix::fs::FileExt;
    let failed = |e: std::io::Error| ToolError::internal(format!("cannot read the output: {e}"));
    let file = std::fs::File::open(path).map_err(failed)?;
    let len = file.metadata().map_err(failed)?.len().min(how.logged);
    let since = since.min(len);
    let want = usize::try_from(len - since).map_or(max, |n| n.min(max));
    let mut bytes = vec![0u8; want];
    let mut n = 0;
    while n < want {
        match file.read_at(&mut bytes[n..], since + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(failed(e)),
        }
    }
    bytes.truncate(n);
    let at_end = since + n as u64 >= len;
    bytes.truncate(page_cut(&bytes, at_end, how));
    let next = since + bytes.len() as u64;
    Ok(Page { bytes, next, len })
}

/// Where a page of `bytes` ends: before a trailing incomplete character (or, for a
/// terminal, sequence), unless the log is complete and read to its end (then that is
/// all there is). A page is never cut to nothing while more follows, so paging always
/// advances.
pub(super) fn page_cut(bytes: &[u8], at_end: bool, how: Cut) -> usize {
    if how.finished && at_end {
        return bytes.len();
    }
    let whole = if how.tty {
        ansi::complete_prefix(bytes)
    } else {
        complete_prefix(bytes)
    };
    match whole {
        0 if !at_end => bytes.len(),
        c => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(finished: bool, tty: bool) -> Cut {
        Cut {
            finished,
            logged: u64::MAX,
            tty,
        }
    }

    #[test]
    fn pages_hold_back_a_trailing_partial_char_until_the_job_ends() {
        let euro = "€".as_bytes();
        let b = [b'a', euro[0], euro[1]];
        assert_eq!(
            page_cut(&b, true, cut(false, false)),
            1,
            "running: wait for the rest"
        );
        assert_eq!(
            page_cut(&b, false, cut(true, false)),
            1,
            "finished, more follows"
        );
        assert_eq!(
            page_cut(&b, true, cut(true, false)),
            3,
            "finished and at the end"
        );
        assert_eq!(
            page_cut(&b[1..], true, cut(false, false)),
            0,
            "nothing whole yet"
        );
        assert_eq!(
            page_cut(&b[1..], false, cut(false, false)),
            2,
            "never stuck mid-log"
        );
        assert_eq!(
            page_cut(b"ok\x1b[3", true, cut(false, true)),
            2,
            "mid-sequence"
        );
        assert_eq!(page_cut(b"ok\x1b[3", true, cut(true, true)), 5);
    }

    #[test]
    fn read_page_reads_a_growing_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "one\n").unwrap();
        let p = read_page(&path, 0, 100, cut(false, false)).unwrap();
        assert_eq!((p.bytes.as_slice(), p.next, p.len), (&b"one\n"[..], 4, 4));
        std::fs::write(&path, "one\ntwo\n").unwrap();
        let p = read_page(&path, p.next, 2, cut(false, false)).unwrap();
        assert_eq!((p.bytes.as_slice(), p.next), (&b"tw"[..], 6));
        let p = read_page(&path, 99, 2, cut(false, false)).unwrap();
        let short = Cut {
            logged: 3,
            ..cut(false, false)
        };
        let p2 = read_page(&path, 0, 100, short).unwrap();
        assert_eq!(p2.bytes, b"one", "never past what was logged");
        assert_eq!(
            (p.bytes.len(), p.next),
            (0, 8),
            "since past the end is clamped"
        );
    }

    #[test]
    fn until_ends_the_page_with_the_matching_line() {
        let re = Regex::new("^ready").unwrap();
        assert_eq!(first_match(b"a\nready now\nb\n", false, &re), Some(12));
        assert_eq!(first_match(b"a\nb\n", false, &re), None);
        assert_eq!(
            first_match(b"a\nready", false, &re),
            Some(7),
            "unfinished line"
        );
        let tty = b"\x1b[1ma\x1b[0m\r\n\x1b[32mready\x1b[0m\r\nb\r\n";
        assert_eq!(first_match(tty, true, &re), Some(27));
        let prompt = Regex::new("Password: $").unwrap();
        assert_eq!(first_match(b"x\nPassword: ", false, &prompt), Some(12));
    }

    use proptest::prelude::*;

    /// Pieces a log is made of: text, lines, multi-byte characters, escape sequences,
    /// carriage returns.
    fn piece() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            "[a-z ]{0,12}".prop_map(String::into_bytes),
            Just(b"\n".to_vec()),
            Just(b"\r\n".to_vec()),
            Just("é€😀".as_bytes().to_vec()),
            Just(b"\x1b[1;31m".to_vec()),
            Just(b"\x1b]0;title\x07".to_vec()),
            Just(b"ready\n".to_vec()),
            Just(b"\r".to_vec()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        /// Reading a log while it grows, in pages of any size, with or without `until`:
        /// the pages, following `next`, are the log — no byte lost, none repeated.
        #[test]
        fn pages_never_lose_or_repeat_a_byte(
            pieces in proptest::collection::vec(piece(), 1..40),
            writes in proptest::collection::vec(1usize..6, 1..20),
            page in 4usize..64,
            tty in any::<bool>(),
            untils in proptest::collection::vec(any::<bool>(), 1..8),
        ) {
            let log: Vec<u8> = pieces.concat();
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("log");
            let re = Regex::new("^ready").unwrap();
            let mut written = 0usize;
            let mut w = writes.iter().cycle();
            let mut u = untils.iter().cycle();
            let mut got = Vec::new();
            let mut since = 0u64;
            for _ in 0..10_000 {
                // The job writes a few more bytes (or is done).
                let step = w.next().copied().unwrap_or(1) * 3;
                written = (written + step).min(log.len());
                std::fs::write(&path, &log[..written]).unwrap();
                let finished = written == log.len();
                let how = Cut { finished, logged: written as u64, tty };
                let mut p = read_page(&path, since, page, how).unwrap();
                prop_assert_eq!(p.next - p.bytes.len() as u64, since, "a page starts where the last ended");
                prop_assert!(p.bytes.len() <= page);
                if *u.next().unwrap_or(&false) {
                    cut_at_match(&mut p, tty, &re);
                }
                got.extend_from_slice(&p.bytes);
                since = p.next;
                if finished && since == log.len() as u64 {
                    break;
                }
            }
            prop_assert_eq!(got, log);
        }
    }
}
