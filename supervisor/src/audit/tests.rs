//! The audit log's promises, end to end through the public handle.

use std::fs;
use std::io::Write;
use std::path::Path;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::chain::{self, GENESIS};
use super::inspect::{TailOptions, tail_cmd, verify_cmd};
use super::record::{Completed, PolicyVerdict, Requested, WorkerRef};
use super::redact;
use super::segments;
use super::*;
use crate::config::{AuditConfig, Fsync};

fn cfg() -> AuditConfig {
    AuditConfig {
        fsync: Fsync::Always,
        max_bytes: 64 << 20,
    }
}

fn f(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn records(path: &Path) -> Vec<Value> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn verify(dir: &Path) -> (i32, String) {
    let mut out = Vec::new();
    let code = verify_cmd(dir, &[], &mut out);
    (code, String::from_utf8(out).unwrap())
}

async fn request(a: &Audit, call: &str) -> u64 {
    a.append(
        "requested",
        f(json!({"call_id": call, "trace_id": "t1", "tool": "read_file"})),
    )
    .await
    .unwrap()
}

async fn complete(a: &Audit, call: &str) -> u64 {
    a.append("completed", f(json!({"call_id": call, "status": "ok"})))
        .await
        .unwrap()
}

#[tokio::test]
async fn records_chain_from_genesis_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let (a, rec) = Audit::open(dir.path(), &cfg()).unwrap();
    assert!(rec.is_clean());
    assert_eq!(request(&a, "c1").await, 1);
    assert_eq!(complete(&a, "c1").await, 2);
    assert_eq!(a.last_seq(), 2);
    a.close().await;
    let recs = records(&a.path());
    assert_eq!(recs[0]["prev"], GENESIS);
    assert_eq!(recs[1]["prev"], recs[0]["hash"]);
    let ts = recs[0]["ts"].as_str().unwrap();
    assert_eq!((ts.len(), &ts[10..11], &ts[23..]), (24, "T", "Z"));
    let head = segments::read_head(dir.path()).unwrap().unwrap();
    assert_eq!(
        (head.seq, head.hash.as_str()),
        (2, recs[1]["hash"].as_str().unwrap())
    );
    let (code, out) = verify(dir.path());
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("OK: 2 record(s), seq 1..2"), "{out}");
    assert!(matches!(
        request_after_close(&a).await,
        Err(AuditError::Closed)
    ));
}

async fn request_after_close(a: &Audit) -> Result<u64, AuditError> {
    a.append("requested", Map::new()).await
}

fn cfg_with(fsync: Fsync) -> AuditConfig {
    AuditConfig { fsync, ..cfg() }
}

#[tokio::test]
async fn detached_records_are_kept_through_an_outage() {
    detached_records_kept(Fsync::Always).await;
}

/// With `fsync = "never"` the caller writes its own record: a failed write there
/// must take the log down and wake the thread that brings it back, just the same.
#[tokio::test]
async fn detached_records_are_kept_through_an_outage_of_an_inline_write() {
    detached_records_kept(Fsync::Never).await;
}

async fn detached_records_kept(fsync: Fsync) {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg_with(fsync)).unwrap();
    a.fail_next_writes(1);
    assert!(a.append("x", Map::new()).await.is_err());
    assert!(a.append_detached("worker_exited", f(json!({"pid": 7}))));
    let seq = a
        .append_wait("x", Map::new(), Duration::from_secs(10))
        .await
        .unwrap();
    a.close().await;
    let kinds: Vec<Value> = records(&a.path())
        .iter()
        .map(|r| r["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [json!("recovered"), json!("worker_exited"), json!("x")]
    );
    assert_eq!(seq, 3);
}

#[tokio::test]
async fn reserved_fields_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    let err = a.append("x", f(json!({"hash": "0"}))).await.unwrap_err();
    assert!(matches!(err, AuditError::ReservedField(k) if k == "hash"));
    assert_eq!(
        a.append("x", Map::new()).await.unwrap(),
        1,
        "a refused record uses no seq"
    );
    a.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_commit_many_tasks_unique_contiguous_seqs_fewer_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    let tasks: Vec<_> = (0..1000)
        .map(|i| {
            let a = a.clone();
            tokio::spawn(async move {
                a.append("worker_started", f(json!({"pid": i})))
                    .await
                    .unwrap()
            })
        })
        .collect();
    let mut seqs = Vec::new();
    for t in tasks {
        seqs.push(t.await.unwrap());
    }
    seqs.sort_unstable();
    assert_eq!(seqs, (1..=1000).collect::<Vec<u64>>());
    let syncs = a.fsync_count();
    assert!(syncs < 1000, "{syncs} fdatasyncs for 1000 records");
    a.close().await;
    assert_eq!(verify(dir.path()).0, 0);
}

#[tokio::test]
async fn torn_tail_without_newline_is_cut_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    request(&a, "c1").await;
    complete(&a, "c1").await;
    a.close().await;
    let before = fs::read(a.path()).unwrap();
    let mut next = Vec::new();
    let prev = records(&a.path())[1]["hash"].as_str().unwrap().to_owned();
    chain::seal(
        3,
        "2026-01-01T00:00:00.000Z",
        "requested",
        f(json!({"call_id": "c2"})),
        &prev,
        &mut next,
    );
    append_bytes(&a.path(), &next[..next.len() / 2]);
    let (code, out) = verify(dir.path());
    assert_eq!(
        code, 0,
        "a torn tail in the active file is a warning: {out}"
    );
    assert!(out.contains("torn tail"), "{out}");

    let (a, rec) = Audit::open(dir.path(), &cfg()).unwrap();
    assert_eq!(rec.torn_bytes, (next.len() / 2) as u64);
    assert!(rec.interrupted.is_empty(), "a torn requested never counted");
    a.close().await;
    let recs = records(&a.path());
    assert_eq!(recs[2]["kind"], "recovered");
    assert_eq!(recs[2]["reason"], "torn_tail");
    assert_eq!(recs[2]["dropped_bytes"], (next.len() / 2) as u64);
    assert_eq!(recs[2]["seq"], 3);
    let saved = rec.torn_saved_to.unwrap();
    assert_eq!(fs::read(saved).unwrap(), &next[..next.len() / 2]);
    assert!(
        fs::read(a.path()).unwrap().starts_with(&before),
        "good records untouched"
    );
    assert_eq!(verify(dir.path()).0, 0);
}

#[tokio::test]
async fn torn_tail_half_json_line_with_newline_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    request(&a, "c1").await;
    a.close().await;
    append_bytes(&a.path(), b"{\"call_id\":\"c9\",\"kind\":\"req\n");
    let (a, rec) = Audit::open(dir.path(), &cfg()).unwrap();
    assert_eq!(rec.torn_bytes, 28);
    assert_eq!(rec.interrupted, ["c1"]);
    a.close().await;
    let kinds: Vec<Value> = records(&a.path())
        .iter()
        .map(|r| r["kind"].clone())
        .collect();
    assert_eq!(
        kinds,
        [json!("requested"), json!("recovered"), json!("completed")]
    );
    assert_eq!(verify(dir.path()).0, 0);
}

fn append_bytes(path: &Path, bytes: &[u8]) {
    fs::OpenOptions::new()
        .append(true)
        .open(path)
        .unwrap()
        .write_all(bytes)
        .unwrap();
}

#[tokio::test]
async fn requested_without_completed_gets_interrupted_once() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    request(&a, "c1").await;
    request(&a, "c2").await;
    complete(&a, "c1").await;
    request(&a, "c3").await;
    a.close().await;
    let (a, rec) = Audit::open(dir.path(), &cfg()).unwrap();
    assert_eq!(rec.interrupted, ["c2", "c3"]);
    assert_eq!(rec.last_seq, 6);
    a.close().await;
    let recs = records(&a.path());
    assert_eq!(recs[4]["call_id"], "c2");
    assert_eq!(recs[4]["status"], "interrupted");
    assert_eq!(recs[4]["started_at"], recs[1]["ts"]);
    let (a, rec) = Audit::open(dir.path(), &cfg()).unwrap();
    assert!(rec.is_clean(), "{rec:?}");
    a.close().await;
}

#[tokio::test]
async fn tampering_is_reported_set_aside_and_not_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    for i in 0..9 {
        a.append(
            "worker_started",
            f(json!({"group": "search", "pid": 1000 + i})),
        )
        .await
        .unwrap();
    }
    a.close().await;
    let text = fs::read_to_string(a.path()).unwrap();
    fs::write(a.path(), text.replace("\"pid\":1004", "\"pid\":1005")).unwrap();
    let (code, out) = verify(dir.path());
    assert_eq!(code, 1);
    assert!(out.contains("FAILED: first bad seq 5"), "{out}");

    let (a, rec) = Audit::open(dir.path(), &cfg()).unwrap();
    assert_eq!(rec.problems.first().map(|p| p.fault.seq), Some(5));
    let aside = rec.set_aside.clone().unwrap();
    assert_eq!(aside, dir.path().join("audit.1.jsonl"));
    assert!(
        fs::read_to_string(&aside).unwrap().contains("\"pid\":1005"),
        "kept as it was"
    );
    assert_eq!(
        a.append("x", Map::new()).await.unwrap(),
        11,
        "seqs are never reused"
    );
    a.close().await;
    let first = &records(&a.path())[0];
    assert_eq!(
        (first["kind"].as_str(), first["reason"].as_str()),
        (Some("recovered"), Some("chain_break"))
    );
    assert_eq!(first["broken_file"], "audit.1.jsonl");
    assert_eq!(first["first_bad_seq"], 5);
    assert_eq!(first["seq"], 10);

    let (a, rec) = Audit::open(dir.path(), &cfg()).unwrap();
    assert!(
        rec.is_clean(),
        "the next start does not set aside again: {rec:?}"
    );
    a.close().await;
    let (code, out) = verify(dir.path());
    assert_eq!(code, 1, "the damage stays visible: {out}");
    assert!(out.contains("first bad seq 5"), "{out}");
}

#[tokio::test]
async fn head_catches_a_log_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    for _ in 0..5 {
        a.append("x", Map::new()).await.unwrap();
    }
    a.close().await;
    let text = fs::read_to_string(a.path()).unwrap();
    let keep: String = text.split_inclusive('\n').take(3).collect();
    fs::write(a.path(), keep).unwrap();
    let (code, out) = verify(dir.path());
    assert_eq!(code, 1);
    assert!(
        out.contains("cut short") && out.contains("first bad seq 4"),
        "{out}"
    );
    let (a, rec) = Audit::open(dir.path(), &cfg()).unwrap();
    assert!(rec.set_aside.is_some());
    a.close().await;
    let first = &records(&a.path())[0];
    assert_eq!(first["reason"], "cut_short");
    assert_eq!(first["seq"], 6, "continues after the head's seq");
    let head = segments::read_head(dir.path()).unwrap().unwrap();
    let lost = text.lines().nth(4).unwrap();
    let lost: Value = serde_json::from_str(lost).unwrap();
    assert_eq!(
        first["prev"], lost["hash"],
        "links to the last committed hash"
    );
    assert_eq!(head.seq, 6);
}

#[tokio::test]
async fn rotation_links_segments_and_seq_continues() {
    let dir = tempfile::tempdir().unwrap();
    let small = AuditConfig {
        fsync: Fsync::Never,
        max_bytes: 1500,
    };
    let (a, _) = Audit::open(dir.path(), &small).unwrap();
    for i in 0..40 {
        a.append("worker_started", f(json!({"group": "exec", "pid": i})))
            .await
            .unwrap();
    }
    a.rotate();
    a.append("supervisor_stopped", f(json!({"reason": "test"})))
        .await
        .unwrap();
    a.close().await;
    let files = segments::all(dir.path()).unwrap();
    assert!(files.len() >= 3, "{files:?}");
    let mut prev_hash = GENESIS.to_owned();
    let mut seq = 0;
    for file in &files {
        for r in records(file) {
            seq += 1;
            assert_eq!(r["seq"], seq);
            assert_eq!(r["prev"], prev_hash.as_str(), "{}", file.display());
            prev_hash = r["hash"].as_str().unwrap().to_owned();
        }
    }
    assert_eq!(seq, 41);
    assert_eq!(
        records(&files[files.len() - 1]).len(),
        1,
        "rotate() rolled before the last record"
    );
    let (code, out) = verify(dir.path());
    assert_eq!(code, 0, "{out}");
    // Deleting a middle segment breaks the cross-file link.
    fs::remove_file(&files[1]).unwrap();
    assert_eq!(verify(dir.path()).0, 1);
}

#[tokio::test]
async fn planted_secrets_never_reach_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    let args = redact::tests::planted_args();
    let req = Requested {
        trace_id: "t",
        call_id: "c",
        session: "s1",
        client: "test",
        tool: "run_command",
        args: &args,
        policy: PolicyVerdict {
            decision: "allow",
            reason: "mode",
            rule: None,
        },
    };
    a.record(&req).await.unwrap();
    let now = std::time::SystemTime::now();
    let done = Completed {
        call_id: "c",
        status: "ok",
        error_type: None,
        summary: "ran",
        started_at: now,
        ended_at: now,
        worker: Some(WorkerRef {
            group: "exec",
            pid: Some(7),
        }),
        output_bytes: 0,
        truncated: false,
    };
    a.record_wait(&done).await.unwrap();
    a.close().await;
    let text = fs::read_to_string(a.path()).unwrap();
    for s in redact::tests::PLANTED {
        assert!(!text.contains(s), "{s} reached the log");
    }
    assert_eq!(
        records(&a.path())[0]["args_sha256"],
        canonical::args_sha256(&args)
    );
}

#[tokio::test]
async fn failed_fdatasync_makes_log_unavailable_then_it_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    request(&a, "c1").await;
    a.fail_next_syncs(1);
    let err = a
        .append("requested", f(json!({"call_id": "c2"})))
        .await
        .unwrap_err();
    assert!(matches!(err, AuditError::Unavailable(_)), "{err}");
    assert!(!a.is_available());
    let t = Instant::now();
    let err = a
        .append("requested", f(json!({"call_id": "c3"})))
        .await
        .unwrap_err();
    assert!(matches!(err, AuditError::Unavailable(_)));
    assert!(t.elapsed() < Duration::from_millis(400), "fails fast");
    let seq = a
        .append_wait(
            "completed",
            f(json!({"call_id": "c1", "status": "ok"})),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
    assert!(a.is_available());
    assert_eq!(
        seq, 3,
        "seq 2 is the `recovered` record; the failed ones used none"
    );
    a.close().await;
    let recs = records(&a.path());
    assert_eq!(recs.len(), 3);
    assert_eq!(recs[1]["reason"], "resumed");
    assert!(
        recs[1]["dropped_bytes"].as_u64().unwrap() > 0,
        "the unsynced c2 was cut"
    );
    assert!(recs[1]["error"].as_str().unwrap().contains("fdatasync"));
    assert!(!fs::read_to_string(a.path()).unwrap().contains("\"c2\""));
    assert_eq!(verify(dir.path()).0, 0);
}

#[tokio::test]
async fn append_wait_gives_up_at_its_deadline() {
    append_wait_gives_up(Fsync::Always).await;
}

#[tokio::test]
async fn append_wait_gives_up_at_its_deadline_after_an_inline_write_failed() {
    append_wait_gives_up(Fsync::Never).await;
}

async fn append_wait_gives_up(fsync: Fsync) {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg_with(fsync)).unwrap();
    a.fail_next_writes(1_000);
    assert!(a.append("x", Map::new()).await.is_err());
    let t = Instant::now();
    let err = a
        .append_wait("x", Map::new(), Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(matches!(err, AuditError::Unavailable(_)));
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(3),
        "{waited:?}"
    );
    a.fail_next_writes(0);
    let seq = a
        .append_wait("y", Map::new(), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(seq, 3, "`recovered`, the late `x`, then this one");
    a.close().await;
    assert_eq!(verify(dir.path()).0, 0);
    // The caller gave up on `x` (its client got InternalError), but what it recorded
    // (a call's end) is not lost: written once the log resumed, marked late.
    let recs = records(&a.path());
    let kinds: Vec<&str> = recs.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["recovered", "x", "y"], "{recs:?}");
    assert_eq!(recs[1]["late"], true);
    assert!(recs[2].get("late").is_none());
}

fn tail(dir: &Path, opts: TailOptions) -> String {
    let mut out = Vec::new();
    assert_eq!(tail_cmd(dir, opts, &mut out), 0);
    String::from_utf8(out).unwrap()
}

#[tokio::test]
async fn tail_prints_filters_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    a.append(
        "requested",
        f(json!({"call_id": "c1", "trace_id": "T", "tool": "read_file"})),
    )
    .await
    .unwrap();
    a.append(
        "requested",
        f(json!({"call_id": "c2", "trace_id": "U", "tool": "grep"})),
    )
    .await
    .unwrap();
    a.append(
        "completed",
        f(json!({"call_id": "c1", "status": "ok", "duration_ms": 4})),
    )
    .await
    .unwrap();
    a.rotate();
    a.append("completed", f(json!({"call_id": "c2", "status": "error"})))
        .await
        .unwrap();
    a.close().await;
    let all = tail(dir.path(), TailOptions::default());
    let lines: Vec<&str> = all.lines().collect();
    assert_eq!(lines.len(), 4);
    assert!(lines[0].starts_with("1 2"), "{all}");
    assert!(
        lines[0].contains(" requested c1 read_file - trace_id=T"),
        "{all}"
    );
    assert!(
        lines[2].contains(" completed c1 - ok duration_ms=4"),
        "{all}"
    );
    let trace = tail(
        dir.path(),
        TailOptions {
            trace_id: Some("T".into()),
            ..Default::default()
        },
    );
    assert_eq!(trace.lines().count(), 2, "{trace}");
    let call = tail(
        dir.path(),
        TailOptions {
            call_id: Some("c2".into()),
            json: true,
            ..Default::default()
        },
    );
    let parsed: Vec<Value> = call
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(parsed.len(), 2);
    assert_eq!(parsed[1]["status"], "error");
    let last = tail(
        dir.path(),
        TailOptions {
            lines: Some(1),
            ..Default::default()
        },
    );
    assert!(last.starts_with("4 "), "{last}");
}

/// A writer that hands each write to a channel; it fails once the receiver is gone,
/// which is how `tail -f` learns its reader left.
struct ChanOut(mpsc::Sender<String>);

impl Write for ChanOut {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let text = String::from_utf8_lossy(buf).into_owned();
        self.0
            .send(text)
            .map_err(|_| std::io::ErrorKind::BrokenPipe)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn wait_for(rx: &mpsc::Receiver<String>, seen: &mut String, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !seen.contains(needle) {
        let left = deadline.saturating_duration_since(Instant::now());
        seen.push_str(
            &rx.recv_timeout(left)
                .unwrap_or_else(|_| panic!("no {needle} in {seen}")),
        );
    }
}

#[tokio::test]
async fn tail_follow_crosses_rotation() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    a.append("x", f(json!({"call_id": "before"})))
        .await
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let d = dir.path().to_owned();
    let follower = std::thread::spawn(move || {
        tail_cmd(
            &d,
            TailOptions {
                follow: true,
                ..Default::default()
            },
            &mut ChanOut(tx),
        )
    });
    let mut seen = String::new();
    wait_for(&rx, &mut seen, "before");
    a.append("x", f(json!({"call_id": "live"}))).await.unwrap();
    wait_for(&rx, &mut seen, "live");
    a.rotate();
    a.append("x", f(json!({"call_id": "rotated"})))
        .await
        .unwrap();
    wait_for(&rx, &mut seen, "rotated");
    drop(rx);
    a.append("x", f(json!({"call_id": "after"}))).await.unwrap();
    assert_eq!(follower.join().unwrap(), 0);
    a.close().await;
}

/// Group-commit throughput with fsync = always (debug build numbers; run with
/// `cargo test -p toolvisor-supervisor --lib audit::tests::throughput -- --ignored --nocapture`).
#[ignore]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    for concurrency in [1usize, 16, 64, 256] {
        let per = 4000 / concurrency;
        let before = a.fsync_count();
        let t = Instant::now();
        let tasks: Vec<_> = (0..concurrency)
            .map(|_| {
                let a = a.clone();
                tokio::spawn(async move {
                    for i in 0..per {
                        a.append("worker_started", f(json!({"pid": i, "group": "exec"})))
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let n = (per * concurrency) as f64;
        let secs = t.elapsed().as_secs_f64();
        let syncs = a.fsync_count() - before;
        println!(
            "concurrency {concurrency:>3}: {:>8.0} records/s, {syncs} fdatasyncs for {n} records ({:.1}/sync)",
            n / secs,
            n / syncs as f64
        );
    }
    a.close().await;
}

#[tokio::test]
async fn new_settings_apply_from_the_next_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (a, _) = Audit::open(dir.path(), &cfg()).unwrap();
    for i in 0..5 {
        request(&a, &format!("c{i}")).await;
    }
    assert_eq!(segments::all(dir.path()).unwrap().len(), 1);
    let syncs = a.fsync_count();
    a.reconfigure(&AuditConfig {
        fsync: Fsync::Never,
        max_bytes: 200,
    });
    for i in 5..10 {
        request(&a, &format!("c{i}")).await;
    }
    assert_eq!(a.fsync_count(), syncs, "fsync = never from now on");
    a.close().await;
    assert!(
        segments::all(dir.path()).unwrap().len() > 1,
        "the smaller max_bytes rolls the log"
    );
    assert_eq!(verify(dir.path()).0, 0);
}
