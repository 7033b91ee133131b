//! Background jobs spread over several exec workers (handles name their worker,
//! docs/PROTOCOL.md): `list_processes` shows the jobs of every live exec worker in one listing,
//! sorted by handle, as one audited call; a worker that died is left out.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage};
use toolvisor_protocol::{Id, Status, ToolResult};

use crate::harness::*;

fn two_exec_workers() -> String {
    format!("{ALLOW_ALL}\n[workers.exec]\ncount = 2\n")
}

/// Start a background job carrying `marker` in its environment; returns its handle.
async fn start_job(c: &mut Client, id: &str, marker: &str) -> String {
    let args = json!({"command": "sleep 300", "background": true, "env": {"E2E_MARK": marker}});
    let r = call_on(c, id, "run_command", args).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    r.meta["process"].as_str().expect("meta.process").to_owned()
}

/// Occupy the least-loaded exec worker with a foreground command; returns once it is
/// running there (its first output came back), so the next calls go to another worker.
async fn occupy_a_worker(c: &mut Client, id: &str, marker: &str) {
    let mut req = CallRequest::new(
        id,
        "run_command",
        json!({"command": "echo up; exec sleep 300", "env": {"E2E_MARK": marker}}),
    );
    req.stream = Some(true);
    c.send(&ClientMessage::Call(req)).await.expect("send");
    let want: Id = id.into();
    c.recv_matching(|m| matches!(m, ServerMessage::Output { id, .. } if *id == want).then_some(()))
        .await
        .expect("the blocker's output");
}

/// Cancel a call and wait for its `cancelled` result.
async fn cancel_call(c: &mut Client, id: &str) {
    let want: Id = id.into();
    c.send(&ClientMessage::Cancel { id: want.clone() })
        .await
        .expect("cancel");
    let (_, m) = c
        .recv_matching(|m| matches!(m, ServerMessage::Result(r) if r.id == want).then_some(()))
        .await
        .expect("result");
    assert!(
        matches!(&m, ServerMessage::Result(r) if r.status == Status::Cancelled),
        "{m:?}"
    );
}

/// The handles of a `list_processes` result, in its order.
fn listed(r: &ToolResult) -> Vec<String> {
    r.meta["processes"]
        .as_array()
        .expect("meta.processes")
        .iter()
        .map(|p| p["process"].as_str().expect("process").to_owned())
        .collect()
}

fn row<'a>(r: &'a ToolResult, handle: &str) -> &'a Value {
    r.meta["processes"]
        .as_array()
        .expect("meta.processes")
        .iter()
        .find(|p| p["process"] == json!(handle))
        .unwrap_or_else(|| panic!("{handle} not listed: {}", r.content))
}

/// `w1-2` → (1, 2): the order `list_processes` sorts by.
fn handle_key(h: &str) -> (u32, u64) {
    let (w, n) = h
        .strip_prefix('w')
        .and_then(|r| r.split_once('-'))
        .expect("w<index>-<n>");
    (w.parse().expect("index"), n.parse().expect("n"))
}

/// Two jobs on each of the two exec workers: two started on `c`, two on `other` (a
/// session's commands all go to the worker that holds its first job, where its loopback
/// lives); returns every handle, sorted, and `c`'s.
async fn jobs_on_both_workers(
    c: &mut Client,
    other: &mut Client,
    marker: &str,
) -> (Vec<String>, Vec<String>) {
    let mine = vec![
        start_job(c, "j1", marker).await,
        start_job(c, "j2", marker).await,
    ];
    // With `c`'s worker busy, `other` (no job yet) gets the other, least-loaded one.
    occupy_a_worker(c, "blocker", marker).await;
    let mut handles = mine.clone();
    handles.push(start_job(other, "j3", marker).await);
    handles.push(start_job(other, "j4", marker).await);
    cancel_call(c, "blocker").await;
    let workers: BTreeSet<u32> = handles.iter().map(|h| handle_key(h).0).collect();
    assert_eq!(
        workers,
        BTreeSet::from([0, 1]),
        "jobs not spread over both workers: {handles:?}"
    );
    handles.sort_by_key(|h| handle_key(h));
    (handles, mine)
}

#[test]
fn list_processes_shows_every_workers_jobs_in_one_audited_call() {
    let s = Server::start(&two_exec_workers());
    let marker = unique_marker("jobs");
    block(T, async {
        let mut c = s.client().await;
        let mut other = s.client().await;
        let (handles, mine) = jobs_on_both_workers(&mut c, &mut other, &marker).await;

        let r = call_on(&mut c, "lp1", "list_processes", json!({})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(listed(&r), handles, "all four, sorted by handle");
        let lines: Vec<&str> = r.content.lines().collect();
        assert_eq!(lines.len(), 5, "one header, four rows:\n{}", r.content);
        assert!(lines[0].starts_with("PROCESS"), "{}", r.content);
        for (line, handle) in lines[1..].iter().zip(&handles) {
            assert_eq!(line.split_whitespace().next(), Some(handle.as_str()));
            assert!(line.contains("running"), "{line}");
            assert_eq!(row(&r, handle)["state"], json!("running"));
        }

        // One call, one requested/completed pair in the audit log.
        let log = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).expect("audit");
        let call_id = json!(format!("{}:lp1", c.session));
        let kinds: Vec<String> = log
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).expect("audit line"))
            .filter(|r| r["call_id"] == call_id)
            .map(|r| r["kind"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(kinds, ["requested", "completed"]);

        // A job killed on one worker shows as exited; the others still run.
        let victim = mine[1].clone();
        let r = call_on(&mut c, "k1", "kill_process", json!({"process": victim})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let r = call_on(&mut c, "lp2", "list_processes", json!({})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(listed(&r), handles);
        for h in &handles {
            let want = if *h == victim { "exited" } else { "running" };
            assert_eq!(row(&r, h)["state"], json!(want), "{h}: {}", r.content);
            let line = r
                .content
                .lines()
                .find(|l| l.split_whitespace().next() == Some(h.as_str()))
                .expect("a table line");
            assert!(line.contains(want), "{line}");
        }

        let theirs: Vec<String> = handles
            .iter()
            .filter(|h| !mine.contains(h))
            .cloned()
            .collect();
        for h in &theirs {
            let r = call_on(&mut other, "k", "kill_process", json!({"process": h})).await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
        kill_all(&mut c, &mine[..1], &marker).await;
    });
}

/// `kill_process` each of `handles` (every one must succeed), then wait until no
/// process carrying `marker` is left.
async fn kill_all(c: &mut Client, handles: &[String], marker: &str) {
    for h in handles {
        let r = call_on(c, "k", "kill_process", json!({"process": h})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    }
    wait_no_procs_with_env(marker, Duration::from_secs(20))
        .await
        .expect("every job gone");
}

#[test]
fn list_processes_leaves_out_a_worker_that_died() {
    let s = Server::start(&two_exec_workers());
    let marker = unique_marker("jobs-dead");
    block(T, async {
        let mut c = s.client().await;
        let mut other = s.client().await;
        let (handles, mine) = jobs_on_both_workers(&mut c, &mut other, &marker).await;
        let w1 = s
            .worker_status()
            .await
            .iter()
            .find(|w| w.group == "exec" && w.index == 1)
            .and_then(|w| w.pid)
            .expect("exec worker 1");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(w1 as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .expect("kill worker 1");

        // Whether worker 1 is still dying, restarting or back (with no jobs), the
        // listing is the survivor's jobs, never an error.
        let r = call_on(&mut c, "lp", "list_processes", json!({})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let survivors: Vec<String> = handles
            .iter()
            .filter(|h| handle_key(h).0 == 0)
            .cloned()
            .collect();
        assert_eq!(listed(&r), survivors, "{}", r.content);

        s.wait_group_back("exec", &[w1], Duration::from_secs(30))
            .await;
        let r = call_on(&mut c, "lp2", "list_processes", json!({})).await;
        assert_eq!(listed(&r), survivors, "{}", r.content);
        // Each session kills its own survivors.
        let (own, others): (Vec<String>, Vec<String>) =
            survivors.into_iter().partition(|h| mine.contains(h));
        for h in &others {
            let r = call_on(&mut other, "k", "kill_process", json!({"process": h})).await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
        kill_all(&mut c, &own, &marker).await;
    });
}

/// A handle kept across a restart of its worker never names the new process's jobs:
/// `read_output` of it is an error, not another command's output.
#[test]
fn a_handle_from_before_a_restart_names_no_new_job() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\ncount = 1\n"));
    block(Duration::from_secs(60), async {
        let mut c = s.client().await;
        let r = call_on(
            &mut c,
            "old",
            "run_command",
            json!({"command": "echo old-job; sleep 300", "background": true}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let old = r.meta["process"].as_str().expect("handle").to_owned();
        let pids = s.worker_pids("exec").await;
        s.restart("exec").await;
        s.wait_group_back("exec", &pids, Duration::from_secs(20))
            .await;
        let r = call_on(
            &mut c,
            "new",
            "run_command",
            json!({"command": "echo new-job; sleep 300", "background": true}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let new = r.meta["process"].as_str().expect("handle").to_owned();
        assert_ne!(old, new, "a handle was reused across a restart");
        let r = call_on(&mut c, "read", "read_output", json!({"process": old})).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert!(!r.content.contains("new-job"), "{r:?}");
        let r = call_on(&mut c, "kill", "kill_process", json!({"process": new})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
}

/// One session cannot take every background slot of a worker: past its share (all
/// but a quarter) it gets `Overloaded`, and another session still starts one.
#[test]
fn one_session_cannot_take_every_background_slot() {
    let s = Server::start(&format!(
        "{ALLOW_ALL}\n[workers.exec]\ncount = 1\nmax_jobs = 4\n"
    ));
    let marker = unique_marker("share");
    block(T, async {
        let mut hog = s.client().await;
        let mut handles = Vec::new();
        for i in 0..3 {
            handles.push(start_job(&mut hog, &format!("h{i}"), &marker).await);
        }
        let args = json!({"command": "sleep 300", "background": true, "env": {"E2E_MARK": marker}});
        let r = call_on(&mut hog, "h3", "run_command", args).await;
        assert_eq!(
            r.error.as_ref().map(|e| e.kind),
            Some(toolvisor_protocol::ErrorType::Overloaded),
            "{r:?}"
        );
        assert!(r.content.contains("this session"), "{r:?}");
        let mut other = s.client().await;
        let other_marker = unique_marker("share-other");
        let theirs = start_job(&mut other, "o1", &other_marker).await;
        kill_all(&mut other, &[theirs], &other_marker).await;
        kill_all(&mut hog, &handles, &marker).await;
    });
}
