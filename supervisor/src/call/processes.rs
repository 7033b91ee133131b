//! `list_processes` over every exec worker. A background job lives in the worker that
//! started it (its handle `w<index>-<n>` names that worker), so each worker can list
//! only its own jobs. The router asks every live exec worker ([`Pool::run_on_ready`])
//! and this module merges their listings into the one a single worker would write: the
//! same table and `meta.processes` rows, sorted by handle (worker index, then job
//! number, so `w0-2` comes before `w0-10`).
//!
//! The worker owns the table's format; the merge only reorders whole lines it wrote
//! (paired with their `meta.processes` entries by handle), so the two cannot drift.
//!
//! [`Pool::run_on_ready`]: crate::workers::pool::Pool::run_on_ready

use serde_json::Value;
use toolvisor_protocol::message::Status;
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorBody, ErrorType};

/// One listed job: its `meta.processes` entry and, when found, its table line.
struct Row {
    key: (u32, u64, String),
    line: Option<String>,
    meta: Value,
}

/// Merge the `list_processes` outcomes of several workers (in worker order) into one.
///
/// A worker that crashed or became unavailable while asked is left out: its jobs died
/// with it. Any other failure (cancel, timeout, internal) fails the whole listing,
/// because a listing that silently missed a live worker's jobs would tell the agent
/// they are gone. With no listing at all, the first failure is the answer.
pub fn merge(outcomes: Vec<Outcome>) -> Outcome {
    let mut listings = Vec::new();
    let mut gone = None;
    for o in outcomes {
        match o.status {
            Status::Ok => listings.push(o),
            _ if worker_gone(&o) => {
                gone.get_or_insert(o);
            }
            _ => return o,
        }
    }
    let mut listings = listings.into_iter();
    let Some(mut base) = listings.next() else {
        return gone.unwrap_or_else(|| {
            Outcome::err(ErrorBody::new(
                ErrorType::InternalError,
                "no exec worker answered list_processes",
            ))
        });
    };
    let (mut header, mut rows) = rows_of(&base);
    for o in listings {
        let (h, r) = rows_of(&o);
        header = header.or(h);
        rows.extend(r);
    }
    // Nothing listed anywhere: the worker's own words for that.
    let Some(header) = header.filter(|_| !rows.is_empty()) else {
        return base;
    };
    rows.sort_by(|a, b| a.key.cmp(&b.key));
    let mut text = format!("{header}\n");
    for line in rows.iter().filter_map(|r| r.line.as_deref()) {
        text.push_str(line);
        text.push('\n');
    }
    let metas = rows.into_iter().map(|r| r.meta).collect();
    base.display = text.clone();
    base.content = text;
    base.truncated = None;
    base.meta.insert("processes".into(), Value::Array(metas));
    base
}

/// Whether a failed outcome says the worker itself went away (crash, or every worker
/// that could answer has failed): then its jobs are gone too.
fn worker_gone(o: &Outcome) -> bool {
    o.error.as_ref().is_some_and(|e| {
        matches!(
            e.kind,
            ErrorType::WorkerCrashed | ErrorType::WorkerUnavailable
        )
    })
}

/// A listing's header line (when it lists anything) and its rows.
fn rows_of(o: &Outcome) -> (Option<String>, Vec<Row>) {
    let metas = o
        .meta
        .get("processes")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if metas.is_empty() {
        return (None, Vec::new());
    }
    let mut lines = o.content.lines();
    let header = lines.next().map(str::to_owned);
    let body: Vec<&str> = lines.collect();
    let rows = metas
        .into_iter()
        .map(|meta| {
            let handle = meta.get("process").and_then(Value::as_str).unwrap_or("");
            // Each table line starts with its handle (the PROCESS column).
            let line = body
                .iter()
                .find(|l| l.split_whitespace().next() == Some(handle))
                .map(|l| (*l).to_owned());
            Row {
                key: handle_key(handle),
                line,
                meta,
            }
        })
        .collect();
    (header, rows)
}

/// Sort key of a handle: `w<index>-<n>` by numbers; anything else after those, by text.
fn handle_key(handle: &str) -> (u32, u64, String) {
    let parsed = handle
        .strip_prefix('w')
        .and_then(|rest| rest.split_once('-'))
        .and_then(|(i, n)| Some((i.parse().ok()?, n.parse().ok()?)));
    let (i, n) = parsed.unwrap_or((u32::MAX, u64::MAX));
    (i, n, handle.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const HEADER: &str =
        "PROCESS    PID      STATE    EXIT   BYTES      STARTED               COMMAND";

    /// A listing shaped like the exec worker's (`workers/src/exec/jobs.rs`).
    fn listing(jobs: &[(&str, &str)]) -> Outcome {
        if jobs.is_empty() {
            let mut o = Outcome::ok("No background processes.".into());
            o.meta.insert("processes".into(), json!([]));
            return o;
        }
        let mut text = format!("{HEADER}\n");
        let mut rows = Vec::new();
        for (handle, state) in jobs {
            text.push_str(&format!(
                "{handle:<10} 42       {state:<8} -      0          2025-01-01T00:00:00Z  sleep 9\n"
            ));
            rows.push(json!({"process": handle, "state": state}));
        }
        let mut o = Outcome::ok(text);
        o.meta.insert("processes".into(), Value::Array(rows));
        o
    }

    fn handles(o: &Outcome) -> Vec<String> {
        o.meta["processes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["process"].as_str().unwrap().to_owned())
            .collect()
    }

    fn failed(kind: ErrorType) -> Outcome {
        Outcome::err(ErrorBody::new(kind, "x"))
    }

    #[test]
    fn listings_merge_sorted_by_handle_with_one_header() {
        let a = listing(&[("w0-10", "exited"), ("w0-2", "running")]);
        let b = listing(&[("w1-1", "running")]);
        let m = merge(vec![b, a]);
        assert_eq!(m.status, Status::Ok);
        assert_eq!(handles(&m), ["w0-2", "w0-10", "w1-1"]);
        let lines: Vec<&str> = m.content.lines().collect();
        assert_eq!(lines.len(), 4, "{}", m.content);
        assert_eq!(lines[0], HEADER);
        assert!(lines[1].starts_with("w0-2 ") && lines[1].contains("running"));
        assert!(lines[2].starts_with("w0-10 ") && lines[2].contains("exited"));
        assert!(lines[3].starts_with("w1-1 "));
        assert!(m.content.ends_with('\n'));
        assert_eq!(m.display, m.content);
    }

    #[test]
    fn one_listing_comes_back_as_the_worker_wrote_it() {
        let a = listing(&[("w0-1", "running"), ("w0-2", "exited")]);
        let m = merge(vec![a.clone()]);
        assert_eq!((m.content, m.meta), (a.content, a.meta));
    }

    #[test]
    fn nothing_anywhere_is_the_workers_empty_text() {
        let m = merge(vec![listing(&[]), listing(&[])]);
        assert_eq!(m.content, "No background processes.");
        assert_eq!(m.meta["processes"], json!([]));
        let m = merge(vec![listing(&[]), listing(&[("w1-1", "running")])]);
        assert_eq!(handles(&m), ["w1-1"]);
        assert!(m.content.starts_with(HEADER), "{}", m.content);
    }

    #[test]
    fn a_worker_that_died_is_left_out() {
        let m = merge(vec![
            failed(ErrorType::WorkerCrashed),
            listing(&[("w1-1", "running")]),
        ]);
        assert_eq!(m.status, Status::Ok);
        assert_eq!(handles(&m), ["w1-1"]);
        let m = merge(vec![
            failed(ErrorType::WorkerUnavailable),
            failed(ErrorType::WorkerCrashed),
        ]);
        assert_eq!(
            m.error.map(|e| e.kind),
            Some(ErrorType::WorkerUnavailable),
            "with no listing, the first failure"
        );
    }

    #[test]
    fn any_other_failure_fails_the_listing() {
        for kind in [
            ErrorType::Cancelled,
            ErrorType::Timeout,
            ErrorType::InternalError,
        ] {
            let m = merge(vec![listing(&[("w0-1", "running")]), failed(kind)]);
            assert_eq!(m.error.map(|e| e.kind), Some(kind));
        }
    }

    #[test]
    fn handles_sort_by_worker_then_number() {
        let mut hs = ["w1-1", "zz", "w0-10", "w10-1", "w0-9", "w2-1"];
        hs.sort_by_key(|h| handle_key(h));
        assert_eq!(hs, ["w0-9", "w0-10", "w1-1", "w2-1", "w10-1", "zz"]);
    }
}
