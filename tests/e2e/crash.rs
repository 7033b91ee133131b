//! Worker deaths: a call in flight gets a result (re-run or crashed), never a hang,
//! and the worker comes back with a new pid.

use std::time::Duration;

use serde_json::json;
use toolvisor_protocol::Status;

use crate::harness::*;

#[test]
fn killing_a_search_worker_mid_grep_never_hangs() {
    let s = Server::start("[workers.search]\ncount = 1\n");
    // Enough files that a grep takes a while in a debug build.
    for d in 0..40 {
        let body: String = (0..400)
            .map(|i| format!("line {i} of a file with some words\n"))
            .collect();
        for f in 0..10 {
            s.write(&format!("d{d}/f{f}.txt"), &body);
        }
    }
    block(T, async {
        let before = s.worker_pids("search").await;
        assert_eq!(before.len(), 1);
        let mut c = s.client().await;
        let req = toolvisor_protocol::CallRequest::new("g", "grep", json!({"pattern": "w.r.s$"}));
        c.send(&toolvisor_protocol::ClientMessage::Call(req))
            .await
            .unwrap();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(before[0] as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let (_, m) = c
            .recv_matching(|m| {
                matches!(m, toolvisor_protocol::ServerMessage::Result(_)).then_some(())
            })
            .await
            .unwrap();
        let toolvisor_protocol::ServerMessage::Result(r) = m else {
            unreachable!()
        };
        assert!(matches!(r.status, Status::Ok | Status::Crashed), "{r:?}");
        if r.status == Status::Crashed {
            assert_eq!(
                r.error.unwrap().kind,
                toolvisor_protocol::ErrorType::WorkerCrashed
            );
        }
        // The worker comes back with a new pid.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let now = s.worker_pids("search").await;
            if now.len() == 1 && now != before {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "no new search worker");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let r = s
            .call("grep", json!({"pattern": "line 399 of", "maxResults": 1}))
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
}

#[test]
fn a_call_in_flight_on_a_killed_exec_worker_ends_crashed_at_once() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\ncount = 1\n"));
    block(T, async {
        let pids = s.worker_pids("exec").await;
        let mut c = s.client().await;
        let req = toolvisor_protocol::CallRequest::new(
            "long",
            "run_command",
            json!({"command": "sleep 30"}),
        );
        c.send(&toolvisor_protocol::ClientMessage::Call(req))
            .await
            .unwrap();
        // Wait until the call is in flight on the worker.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let mut sc = s.client().await;
            let id = "st".into();
            if let Ok(toolvisor_protocol::ServerMessage::Status { workers, .. }) = sc
                .request(
                    &toolvisor_protocol::ClientMessage::Status { id: "st".into() },
                    &id,
                )
                .await
                && workers
                    .iter()
                    .any(|w| w.group == "exec" && w.in_flight == 1)
            {
                break;
            }
            assert!(std::time::Instant::now() < deadline);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let t0 = std::time::Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pids[0] as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let (_, m) = c
            .recv_matching(|m| {
                matches!(m, toolvisor_protocol::ServerMessage::Result(_)).then_some(())
            })
            .await
            .unwrap();
        let toolvisor_protocol::ServerMessage::Result(r) = m else {
            unreachable!()
        };
        assert_eq!(r.status, Status::Crashed, "{r:?}");
        let e = r.error.unwrap();
        assert_eq!(e.kind, toolvisor_protocol::ErrorType::WorkerCrashed);
        assert!(e.message.contains("signal 9"), "{}", e.message);
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "answered at once, not at the timeout"
        );
    });
}

#[test]
fn deadline_answers_timeout() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mut c = s.client().await;
        let mut req = toolvisor_protocol::CallRequest::new(
            "t",
            "run_command",
            json!({"command": "sleep 30"}),
        );
        req.timeout_ms = Some(300);
        let t = c.call(req, |_, _| {}).await.unwrap();
        let r = t.result.unwrap();
        assert_eq!(r.status, Status::Timeout, "{r:?}");
    });
}

/// A process a killed instance left behind (it carries the state directory's marker)
/// is killed when the next instance starts; a process with another marker is not.
#[test]
fn leftovers_of_a_previous_instance_are_killed_at_start() {
    use sha2::{Digest, Sha256};
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join(".toolvisor");
    std::fs::create_dir_all(&state).unwrap();
    let state = state.canonicalize().unwrap();
    let hex: String = Sha256::digest(state.as_os_str().as_encoded_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let spawn = |marker: &str| {
        std::process::Command::new("sleep")
            .arg("300")
            .env("TOOLVISOR_INSTANCE", marker)
            .spawn()
            .unwrap()
    };
    let mut ours = spawn(&format!("{hex}-1-1"));
    let mut other = spawn("0123456789abcdef-1-1");
    let _s = Server::start_in(dir);
    let status = wait_child(&mut ours, Duration::from_secs(20));
    assert!(status.is_some(), "the leftover was not killed");
    assert!(
        other.try_wait().unwrap().is_none(),
        "a stranger's process was killed"
    );
    let _ = other.kill();
    let _ = other.wait();
}
