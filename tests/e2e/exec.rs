//! The exec tools through the real binary: output, exit codes, signals, cwd, the
//! scrubbed environment, deadlines and cancels that leave no process behind (however
//! the command tried to escape), worker and supervisor deaths, streaming, bounded memory
//! under a flood of output, and background jobs.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::client::Client;
use toolvisor_protocol::{CallRequest, ClientMessage, ErrorType, ServerMessage, Status};

use crate::harness::*;

/// How long processes may take to disappear after a result (TERM → KILL grace is 2 s,
/// plus the shim's KILL round; generous for a loaded machine).
const GONE: Duration = Duration::from_secs(15);

fn one_exec_worker() -> String {
    format!("{ALLOW_ALL}\n[workers.exec]\ncount = 1\n")
}

/// Send a call without waiting for anything.
async fn send_call(c: &mut Client, id: &str, args: Value, timeout_ms: Option<u64>) {
    let mut req = CallRequest::new(id, "run_command", args);
    req.timeout_ms = timeout_ms;
    c.send(&ClientMessage::Call(req)).await.expect("send call");
}

fn run(command: &str) -> Value {
    json!({ "command": command })
}

fn marked(command: &str, marker: &str) -> Value {
    json!({ "command": command, "env": { "E2E_MARK": marker } })
}

async fn assert_gone(marker: &str, what: &str) {
    if let Err(left) = wait_no_procs_with_env(marker, GONE).await {
        panic!("{what}: processes left {GONE:?} after the end: {left:?}");
    }
}

#[test]
fn output_exit_code_and_signal() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        // stdout and stderr interleaved in arrival order, nothing else.
        let r = s
            .call(
                "run_command",
                run("echo a; sleep 0.1; echo b >&2; sleep 0.1; echo c"),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, "a\nb\nc\n");
        assert_eq!(r.meta["exit_code"], json!(0), "{r:?}");
        assert!(r.error.is_none(), "{r:?}");

        // Non-zero exit: error, ShellExecutionError, output still there.
        let r = s
            .call("run_command", run("echo partial; echo oops >&2; exit 3"))
            .await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert_eq!(
            r.error.as_ref().unwrap().kind,
            ErrorType::ShellExecutionError,
            "{r:?}"
        );
        // Not streaming: one pipe, so the exact order the command wrote.
        assert_eq!(r.content, "partial\noops\n", "{r:?}");
        assert_eq!(r.meta["exit_code"], json!(3), "{r:?}");

        // Death by a signal: meta.signal, no exit code.
        let r = s.call("run_command", run("echo before; kill -9 $$")).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert_eq!(
            r.error.as_ref().unwrap().kind,
            ErrorType::ShellExecutionError,
            "{r:?}"
        );
        assert_eq!(r.content, "before\n");
        assert_eq!(r.meta["signal"], json!(9), "{r:?}");
        assert!(r.meta["exit_code"].is_null(), "{r:?}");

        // The alias runs the same tool.
        let r = s.call("shell", run("printf x")).await;
        assert_eq!((r.status, r.content.as_str()), (Status::Ok, "x"), "{r:?}");

        // stdin is /dev/null: a reader gets EOF at once.
        let r = s.call("run_command", run("cat; echo done")).await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "done\n"),
            "{r:?}"
        );
    });
}

#[test]
fn cwd_is_inside_the_workspace() {
    let s = Server::start(ALLOW_ALL);
    s.write("sub/dir/f.txt", "x");
    let sub = s.ws().join("sub/dir").canonicalize().unwrap();
    let root = s.ws().canonicalize().unwrap();
    block(T, async {
        let r = s.call("run_command", run("pwd")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content.trim_end(), root.to_str().unwrap());

        let r = s
            .call(
                "run_command",
                json!({"command": "pwd; ls", "cwd": "sub/dir"}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, format!("{}\nf.txt\n", sub.display()));

        for bad in ["..", "/tmp", "sub/../.."] {
            let r = s
                .call("run_command", json!({"command": "pwd", "cwd": bad}))
                .await;
            assert_eq!(r.status, Status::Error, "{bad}: {r:?}");
            assert_eq!(
                r.error.unwrap().kind,
                ErrorType::PathOutsideWorkspace,
                "{bad}"
            );
        }
        let r = s
            .call(
                "run_command",
                json!({"command": "pwd", "cwd": "sub/dir/f.txt"}),
            )
            .await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        let r = s
            .call("run_command", json!({"command": "pwd", "cwd": "nope"}))
            .await;
        assert_eq!(r.status, Status::Error, "{r:?}");
    });
}

#[test]
fn the_environment_is_scrubbed() {
    let config = format!(
        "{ALLOW_ALL}\n[workers.exec]\nenv_passthrough = [\"PATH\", \"TOOLVISOR_E2E_PASSED\"]\nenv = {{ E2E_FROM_CONFIG = \"conf\" }}\n"
    );
    let s = Server::start_with_env(
        &config,
        &[
            ("TOOLVISOR_E2E_SECRET", "hunter2"),
            ("TOOLVISOR_E2E_PASSED", "passed"),
        ],
    );
    block(T, async {
        let r = s.call("run_command", run("env")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let vars: Vec<&str> = r.content.lines().collect();
        assert!(
            !r.content.contains("hunter2"),
            "secret leaked:\n{}",
            r.content
        );
        assert!(
            !vars.iter().any(|v| v.starts_with("TOOLVISOR_E2E_SECRET=")),
            "{}",
            r.content
        );
        for want in [
            "PAGER=cat",
            "GIT_TERMINAL_PROMPT=0",
            "TERM=dumb",
            "NO_COLOR=1",
            "CI=1",
            "TOOLVISOR_E2E_PASSED=passed",
            "E2E_FROM_CONFIG=conf",
        ] {
            assert!(vars.contains(&want), "{want} missing from:\n{}", r.content);
        }
        assert!(
            vars.iter()
                .any(|v| v.starts_with("TOOLVISOR_INSTANCE=")
                    && v.len() > "TOOLVISOR_INSTANCE=".len()),
            "{}",
            r.content
        );
        assert!(vars.iter().any(|v| v.starts_with("PATH=")), "{}", r.content);

        // Passed explicitly by the call, it is visible; the call overrides the config.
        let r = s
            .call(
                "run_command",
                json!({"command": "echo \"$TOOLVISOR_E2E_SECRET $E2E_FROM_CONFIG\"", "env": {"TOOLVISOR_E2E_SECRET": "given", "E2E_FROM_CONFIG": "call"}}),
            )
            .await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "given call\n"),
            "{r:?}"
        );

        // No call can hide a command from the start-up sweep of leftovers.
        let r = s.call("run_command", json!({"command": "echo \"[$TOOLVISOR_INSTANCE]\"", "env": {"TOOLVISOR_INSTANCE": "mine"}})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_ne!(r.content, "[mine]\n", "a call replaced the instance marker");
    });
}

/// Commands that keep running, each with the number of `sleep` processes it leaves
/// running: a plain child, a grandchild in its own session, a double-forked orphan.
const STUBBORN: [(&str, &str, usize); 3] = [
    ("plain", "sleep 300", 1),
    ("setsid", "setsid -f sleep 300; sleep 300", 2),
    ("double-fork", "(sleep 300 &); sleep 300", 2),
];

#[derive(Clone, Copy, Debug)]
enum Ending {
    Timeout,
    Cancel,
    Disconnect,
}

/// Run one stubborn command to `ending` and check nothing it started survives.
async fn end_and_check(s: &Server, (name, command, sleeps): (&str, &str, usize), ending: Ending) {
    let marker = unique_marker(name);
    let mut c = s.client().await;
    let mut args = marked(command, &marker);
    if let Ending::Timeout = ending {
        // Long enough for the processes to be seen first on a loaded machine.
        args["timeout"] = json!(4000);
    }
    send_call(&mut c, "k", args, None).await;
    let pids = wait_procs_with_env(&marker, "sleep", sleeps, Duration::from_secs(20)).await;
    let t0 = Instant::now();
    match ending {
        Ending::Timeout => {
            let r = result_of(&mut c, "k").await;
            assert_eq!(r.status, Status::Timeout, "{name}: {r:?}");
            assert_eq!(r.error.unwrap().kind, ErrorType::Timeout, "{name}");
        }
        Ending::Cancel => {
            c.send(&ClientMessage::Cancel { id: "k".into() })
                .await
                .unwrap();
            let r = result_of(&mut c, "k").await;
            assert_eq!(r.status, Status::Cancelled, "{name}: {r:?}");
            assert_eq!(r.error.unwrap().kind, ErrorType::Cancelled, "{name}");
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{name}: cancel took {:?}",
                t0.elapsed()
            );
        }
        Ending::Disconnect => drop(c),
    }
    assert_gone(
        &marker,
        &format!("{name} after {ending:?} (sleeps were {pids:?})"),
    )
    .await;
}

fn stubborn_commands_leave_nothing(ending: Ending) {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\ncount = 3\n"));
    block(T, async {
        tokio::join!(
            end_and_check(&s, STUBBORN[0], ending),
            end_and_check(&s, STUBBORN[1], ending),
            end_and_check(&s, STUBBORN[2], ending),
        );
        // The worker is still fine afterwards.
        let r = s.call("run_command", run("echo alive")).await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "alive\n"),
            "{r:?}"
        );
    });
}

#[test]
fn timeout_kills_the_command_and_everything_it_started() {
    stubborn_commands_leave_nothing(Ending::Timeout);
}

#[test]
fn cancel_kills_the_command_and_everything_it_started() {
    stubborn_commands_leave_nothing(Ending::Cancel);
}

#[test]
fn client_disconnect_kills_the_command_and_everything_it_started() {
    stubborn_commands_leave_nothing(Ending::Disconnect);
}

#[test]
fn orphans_of_a_finished_command_are_killed() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        for (name, command) in [
            ("setsid", "setsid -f sleep 300; echo started"),
            ("double-fork", "(sleep 300 &) & echo started"),
        ] {
            let marker = unique_marker(name);
            let r = s.call("run_command", marked(command, &marker)).await;
            assert_eq!(
                (r.status, r.content.as_str()),
                (Status::Ok, "started\n"),
                "{name}: {r:?}"
            );
            assert_gone(&marker, name).await;
        }
    });
}

#[test]
fn killing_the_exec_worker_kills_the_command_tree() {
    let s = Server::start(&one_exec_worker());
    block(T, async {
        let worker = s.worker_pids("exec").await;
        assert_eq!(worker.len(), 1);
        let marker = unique_marker("worker-kill");
        let mut c = s.client().await;
        send_call(&mut c, "k", marked(STUBBORN[1].1, &marker), None).await;
        wait_procs_with_env(&marker, "sleep", 2, Duration::from_secs(20)).await;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(worker[0] as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let r = result_of(&mut c, "k").await;
        assert_eq!(r.status, Status::Crashed, "{r:?}");
        assert_eq!(r.error.unwrap().kind, ErrorType::WorkerCrashed);
        assert_gone(&marker, "after the worker's SIGKILL").await;
        // And the worker comes back.
        s.wait_group_back("exec", &worker, Duration::from_secs(20))
            .await;
        let r = s.call("run_command", run("echo back")).await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "back\n"),
            "{r:?}"
        );
    });
}

#[test]
fn killing_the_supervisor_kills_workers_and_commands() {
    let mut s = Server::start(&one_exec_worker());
    let marker = unique_marker("supervisor-kill");
    let workers: Vec<u32> = block(T, async {
        let workers: Vec<u32> = s.workers().await.into_iter().filter_map(|w| w.1).collect();
        let mut c = s.client().await;
        send_call(&mut c, "k", marked(STUBBORN[1].1, &marker), None).await;
        wait_procs_with_env(&marker, "sleep", 2, Duration::from_secs(20)).await;
        // Keep the connection open while the supervisor dies.
        std::mem::forget(c);
        workers
    });
    assert!(!workers.is_empty());
    s.kill9();
    block(T, async {
        let end = Instant::now() + GONE;
        loop {
            let alive: Vec<u32> = workers.iter().copied().filter(|&p| pid_alive(p)).collect();
            if alive.is_empty() {
                break;
            }
            assert!(
                Instant::now() < end,
                "workers outlived the supervisor: {alive:?}"
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
        assert_gone(&marker, "after the supervisor's SIGKILL").await;
    });
}

#[test]
fn streaming_sends_output_before_the_result_in_order() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mut c = s.client().await;
        let mut req = CallRequest::new(
            "st",
            "run_command",
            run("for i in 1 2 3; do echo $i; sleep 0.05; done"),
        );
        req.stream = Some(true);
        let t = c.call(req, |_, _| {}).await.unwrap();
        let r = t.result.unwrap();
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, "1\n2\n3\n");
        assert!(!t.outputs.is_empty(), "no output messages");
        assert!(
            t.outputs.iter().all(|(stream, _)| stream == "stdout"),
            "{:?}",
            t.outputs
        );
        let streamed: String = t.outputs.iter().map(|(_, d)| d.as_str()).collect();
        assert_eq!(streamed, "1\n2\n3\n");

        // Output arrives while the command still runs, not at its end.
        let mut req = CallRequest::new(
            "live",
            "run_command",
            run("echo first; sleep 1; echo second >&2"),
        );
        req.stream = Some(true);
        c.send(&ClientMessage::Call(req)).await.unwrap();
        let (_, first) = c
            .recv_matching(|m| {
                matches!(m, ServerMessage::Output { .. } | ServerMessage::Result(_)).then_some(())
            })
            .await
            .unwrap();
        let t_first = Instant::now();
        let ServerMessage::Output { data, stream, .. } = first else {
            panic!("result before any output: {first:?}")
        };
        assert_eq!((stream.as_str(), data.as_str()), ("stdout", "first\n"));
        let (_, second) = c
            .recv_matching(|m| {
                matches!(m, ServerMessage::Output { .. } | ServerMessage::Result(_)).then_some(())
            })
            .await
            .unwrap();
        let ServerMessage::Output { data, stream, .. } = second else {
            panic!("no second output: {second:?}")
        };
        assert_eq!((stream.as_str(), data.as_str()), ("stderr", "second\n"));
        assert!(
            t_first.elapsed() >= Duration::from_millis(500),
            "the first line was not streamed live"
        );
        let r = result_of(&mut c, "live").await;
        assert_eq!(r.content, "first\nsecond\n");
    });
}

#[test]
fn a_gigabyte_of_output_keeps_memory_bounded() {
    let s = Server::start(&one_exec_worker());
    block(T, async {
        // Warm up the exec worker (buffers, artifacts directory) before the baseline.
        let r = s.call("run_command", run("yes | head -c 1048576")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let mut pids = vec![s.pid()];
        pids.extend(s.workers().await.into_iter().filter_map(|w| w.1));
        let start: Vec<u64> = pids.iter().map(|&p| rss_bytes(p).expect("rss")).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = {
            let (stop, pids, start) = (Arc::clone(&stop), pids.clone(), start.clone());
            std::thread::spawn(move || {
                // (largest growth of the sum, largest growth per process, samples)
                let mut worst_sum = 0i64;
                let mut worst: Vec<i64> = vec![0; pids.len()];
                let mut samples = 0;
                while !stop.load(Ordering::Relaxed) {
                    let now: Vec<u64> = pids.iter().map(|&p| rss_bytes(p).unwrap_or(0)).collect();
                    let mut sum = 0i64;
                    for i in 0..pids.len() {
                        let g = now[i] as i64 - start[i] as i64;
                        worst[i] = worst[i].max(g);
                        sum += g;
                    }
                    worst_sum = worst_sum.max(sum);
                    samples += 1;
                    std::thread::sleep(Duration::from_millis(100));
                }
                (worst_sum, worst, samples)
            })
        };
        let mut c = s.client().await;
        let t0 = Instant::now();
        send_call(
            &mut c,
            "big",
            json!({"command": "yes | head -c 1073741824", "timeout": 300000}),
            Some(300_000),
        )
        .await;
        let r = result_of(&mut c, "big").await;
        let took = t0.elapsed();
        stop.store(true, Ordering::Relaxed);
        let (worst_sum, worst, samples) = sampler.join().unwrap();
        eprintln!(
            "1 GiB in {took:?}; {samples} samples; growth sum {worst_sum} per process {worst:?} (pids {pids:?})"
        );
        assert_eq!(
            r.status,
            Status::Ok,
            "{:?}",
            (r.status, &r.error, &r.truncated)
        );
        assert!(
            worst_sum <= 16 << 20,
            "RSS grew by {worst_sum} bytes (per process {worst:?}, pids {pids:?})"
        );
        let t = r.truncated.expect("truncated");
        let total = 1u64 << 30;
        assert!(
            t.omitted_bytes <= total && t.omitted_bytes >= total - 6 * 1024,
            "{t:?}"
        );
        assert!(
            t.omitted_lines <= total / 2 && t.omitted_lines >= total / 2 - 3 * 1024,
            "{t:?}"
        );
        assert!(
            r.content.len() <= 5 * 1024 + 200,
            "content is {} bytes",
            r.content.len()
        );
        assert!(
            r.content.contains("[Output truncated:"),
            "{}",
            &r.content[..200.min(r.content.len())]
        );
        let full = t.full_output.expect("full_output");
        let path = if full.starts_with('/') {
            std::path::PathBuf::from(&full)
        } else {
            s.ws().join(&full)
        };
        let meta = std::fs::metadata(&path).unwrap_or_else(|e| panic!("{full}: {e}"));
        assert!(
            meta.len() > 0 && meta.len() <= 64 << 20,
            "artifact is {} bytes",
            meta.len()
        );
        assert!(
            path.starts_with(s.ws().join(".toolvisor/artifacts")),
            "{}",
            path.display()
        );
    });
}

#[test]
fn background_job_lifecycle() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\ncount = 2\n"));
    let marker = unique_marker("bg");
    // ~29 KB of output, more than one page (limits.shell_max 10240), then it keeps running.
    let expected: String = (1..=3000).map(|i| format!("line-{i}\n")).collect();
    block(T, async {
        // A job belongs to the session that started it: that one stops it below.
        let mut owner = s.client().await;
        let r = call_on(&mut owner, "bg", "run_command", json!({"command": "seq -f line-%g 1 3000; sleep 300", "background": true, "env": {"E2E_MARK": marker}})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let handle = r.meta["process"].as_str().expect("meta.process").to_owned();
        assert_eq!(r.meta["running"], json!(true), "{r:?}");

        // list_processes shows it, running.
        let r = s.call("list_processes", json!({})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(r.content.contains(&handle), "{}", r.content);
        let row = r.meta["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["process"] == json!(handle))
            .cloned()
            .expect("listed");
        assert_eq!(row["state"], json!("running"), "{row}");

        // Wait until all of its output was written (output_bytes), then page through it.
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let r = s.call("list_processes", json!({})).await;
            let bytes = r.meta["processes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|p| p["process"] == json!(handle))
                .map(|p| p["output_bytes"].clone());
            if bytes == Some(json!(expected.len())) {
                break;
            }
            assert!(Instant::now() < end, "output not complete: {bytes:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        read_all_pages(&s, &handle, &expected, true).await;
        // Reading again from an earlier offset gives the same bytes.
        let r = s
            .call("read_output", json!({"process": handle, "since": 7}))
            .await;
        let stop = 7 + r.content.len();
        assert_eq!(r.content, expected[7..stop]);
        assert_eq!(r.meta["next"].as_u64(), Some(stop as u64));
        // Without since: from where the previous read stopped.
        let r = s.call("read_output", json!({"process": handle})).await;
        assert!(!r.content.is_empty());
        assert_eq!(r.content, expected[stop..stop + r.content.len()]);

        // kill_process stops it and everything it started.
        let r = call_on(&mut owner, "k", "kill_process", json!({"process": handle})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.meta["running"], json!(false), "{r:?}");
        assert_gone(&marker, "after kill_process").await;

        let r = s
            .call(
                "read_output",
                json!({"process": handle, "since": expected.len()}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.meta["running"], json!(false), "{r:?}");
        assert_eq!(r.content, "");
        let r = s.call("list_processes", json!({})).await;
        let row = r.meta["processes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["process"] == json!(handle))
            .cloned()
            .expect("still listed");
        assert_eq!(row["state"], json!("exited"), "{row}");
        assert!(r.content.contains("exited"), "{}", r.content);

        // An unknown handle is a clear error.
        let r = s.call("read_output", json!({"process": "w0-999"})).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
    });
}

/// The `list_processes` row of `handle`.
async fn row_of(s: &Server, handle: &str) -> Option<Value> {
    let r = s.call("list_processes", json!({})).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    r.meta["processes"]
        .as_array()?
        .iter()
        .find(|p| p["process"] == json!(handle))
        .cloned()
}

/// The parts of the job lifecycle that do not read a running job's output: paging
/// through a finished job's output, and kill_process of a running one.
#[test]
fn background_jobs_finished_and_killed() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\ncount = 2\n"));
    let marker = unique_marker("bg2");
    let expected: String = (1..=3000).map(|i| format!("line-{i}\n")).collect();
    block(T, async {
        // A job that ends by itself.
        let r = s
            .call(
                "run_command",
                json!({"command": "seq -f line-%g 1 3000", "background": true}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let done = r.meta["process"].as_str().expect("meta.process").to_owned();
        // A job that runs until killed, with a grandchild in its own session; its
        // session (the only one that may) stops it below.
        let mut owner = s.client().await;
        let r = call_on(&mut owner, "bg", "run_command", json!({"command": "setsid -f sleep 300; sleep 300", "background": true, "env": {"E2E_MARK": marker}})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let running = r.meta["process"].as_str().expect("meta.process").to_owned();
        assert_ne!(done, running);
        assert!(r.meta["pid"].as_u64().is_some(), "{r:?}");

        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let row = row_of(&s, &done).await.expect("listed");
            if row["state"] == json!("exited") {
                assert_eq!(row["exit_code"], json!(0), "{row}");
                assert_eq!(row["output_bytes"], json!(expected.len()), "{row}");
                break;
            }
            assert!(Instant::now() < end, "the job did not end: {row}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let row = row_of(&s, &running).await.expect("listed");
        assert_eq!(row["state"], json!("running"), "{row}");

        read_all_pages(&s, &done, &expected, false).await;
        let r = s
            .call("read_output", json!({"process": done, "since": 7}))
            .await;
        let stop = 7 + r.content.len();
        assert_eq!(r.content, expected[7..stop]);
        let r = s.call("read_output", json!({"process": done})).await;
        assert!(!r.content.is_empty());
        assert_eq!(
            r.content,
            expected[stop..stop + r.content.len()],
            "read without since does not continue"
        );

        wait_procs_with_env(&marker, "sleep", 2, Duration::from_secs(20)).await;
        let r = call_on(
            &mut owner,
            "k1",
            "kill_process",
            json!({"process": running}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.meta["running"], json!(false), "{r:?}");
        assert_gone(&marker, "after kill_process").await;
        let row = row_of(&s, &running).await.expect("still listed");
        assert_eq!(row["state"], json!("exited"), "{row}");
        let r = call_on(
            &mut owner,
            "k2",
            "kill_process",
            json!({"process": running}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "killing an ended job again: {r:?}");
        let r = s
            .call("read_output", json!({"process": running, "since": 0}))
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.meta["running"], json!(false), "{r:?}");
        assert_eq!(
            (r.content.as_str(), r.meta["next"].as_u64()),
            ("", Some(0)),
            "{r:?}"
        );

        let r = s.call("read_output", json!({"process": "w0-999"})).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        let r = s.call("kill_process", json!({"process": "w1-999"})).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
    });
}

/// Page through a background job's whole output with `since`/`meta.next`: every page
/// is non-empty, at most `limits.shell_max`, contiguous, and together they are
/// `expected`; `running` (and, once exited, exit code 0) as given. At least 3 pages.
async fn read_all_pages(s: &Server, handle: &str, expected: &str, running: bool) {
    let mut got = String::new();
    let mut since = 0u64;
    let mut pages = 0;
    while (since as usize) < expected.len() {
        let r = s
            .call("read_output", json!({"process": handle, "since": since}))
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(
            r.content.len() <= 10240,
            "page of {} bytes",
            r.content.len()
        );
        assert!(!r.content.is_empty(), "empty page at {since}");
        let next = r.meta["next"].as_u64().expect("meta.next");
        assert_eq!(
            next,
            since + r.content.len() as u64,
            "meta.next is not where the page ended"
        );
        assert_eq!(r.meta["running"], json!(running));
        if !running {
            assert_eq!(r.meta["exit_code"], json!(0));
        }
        got.push_str(&r.content);
        since = next;
        pages += 1;
    }
    assert!(pages >= 3, "{pages} pages");
    assert_eq!(got, expected);
}

/// `seq FROM TO` as the text it prints.
fn seq_text(from: u32, to: u32) -> String {
    (from..=to).map(|i| format!("{i}\n")).collect()
}

/// Run `seq FROM TO` as call `id` on `c`; its `truncated.full_output`.
async fn full_output_of_seq(c: &mut Client, id: &str, from: u32, to: u32) -> String {
    let r = call_on(c, id, "run_command", run(&format!("seq {from} {to}"))).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    let t = r.truncated.expect("the output is over shell_max");
    t.full_output.expect("truncated.full_output")
}

#[test]
fn the_full_output_is_read_with_read_file() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mut c = s.client().await;
        let full = full_output_of_seq(&mut c, "big1", 1, 3000).await;
        assert_eq!(full, ".toolvisor/artifacts/big1.log");
        let all = seq_text(1, 3000);
        let range = json!({"path": full, "startLine": 1000, "endLine": 1500});
        let r = s.call("read_file", range).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, seq_text(1000, 1500));
        let r = s
            .call("read_file", json!({"path": full, "startLine": 2999}))
            .await;
        assert_eq!(r.content, "2999\n3000\n");
        // Over file_max it is truncated like any file, from the first line.
        let r = s.call("read_file", json!({"path": full})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(r.truncated.is_some(), "{r:?}");
        let kept = r.content.split("\n[Output truncated:").next().unwrap_or("");
        assert!(!kept.is_empty() && all.starts_with(kept), "{}", r.content);
        let r = s
            .call("read_many_files", json!({"paths": [full, "missing.txt"]}))
            .await;
        assert!(
            r.content.starts_with(&format!("=== {full} ===\n1\n2\n")),
            "{}",
            &r.content[..200.min(r.content.len())]
        );
        assert_eq!(r.meta["errors"], 1, "{r:?}");
    });
}

#[test]
fn the_same_call_id_in_two_sessions_keeps_both_outputs() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let (mut a, mut b) = (s.client().await, s.client().await);
        // At once, so the two exec workers create their artifacts concurrently.
        let (fa, fb) = tokio::join!(
            full_output_of_seq(&mut a, "c1", 1, 3000),
            full_output_of_seq(&mut b, "c1", 5001, 8000),
        );
        let mut names = [fa.clone(), fb.clone()];
        names.sort();
        assert_eq!(
            names,
            [
                ".toolvisor/artifacts/c1-2.log",
                ".toolvisor/artifacts/c1.log"
            ]
        );
        for (full, last) in [(&fa, "3000\n"), (&fb, "8000\n")] {
            let r = s
                .call("read_file", json!({"path": full, "startLine": 3000}))
                .await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
            assert_eq!(r.content, last, "{full}");
        }
        // A third run with that id (as the CLI's fixed `cli-1` would) takes the next name.
        let fc = full_output_of_seq(&mut a, "c1", 1, 3000).await;
        assert_eq!(fc, ".toolvisor/artifacts/c1-3.log");
    });
}

#[test]
fn the_full_output_is_readable_when_the_state_directory_is_outside() {
    let state_parent = tempfile::tempdir().expect("tempdir");
    let state = state_parent.path().join("state");
    let ws = tempfile::tempdir().expect("tempdir");
    let config = format!(
        "{ALLOW_ALL}\n[server]\nstate_dir = \"{}\"\n",
        state.display()
    );
    std::fs::write(ws.path().join("toolvisor.toml"), config).expect("config");
    let (child, log) = spawn_serve(ws.path());
    let mut s = Server {
        dir: ws,
        child: Some(child),
        log,
        log_seen: Vec::new(),
    };
    s.wait_log("serving", START_DEADLINE);
    let socket = state.join("toolvisor.sock");
    block(T, async {
        let mut c = Client::connect(&socket, "e2e", false)
            .await
            .expect("connect");
        let full = full_output_of_seq(&mut c, "c1", 1, 3000).await;
        assert_eq!(full, "artifacts:/c1.log");
        assert!(state.join("artifacts/c1.log").is_file());
        let r = call_on(
            &mut c,
            "r1",
            "read_file",
            json!({"path": full, "startLine": 2999}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, "2999\n3000\n");
        let r = call_on(
            &mut c,
            "r2",
            "read_file",
            json!({"path": "artifacts:/../audit.jsonl"}),
        )
        .await;
        assert_ne!(r.status, Status::Ok, "{r:?}");
    });
}

/// Streamed output to a client that never reads: what the supervisor holds for it is
/// bounded (a 1 MiB output budget per connection), the command is held back instead,
/// and the client still gets its result once it reads again.
#[test]
fn streamed_output_to_a_client_that_does_not_read_keeps_memory_bounded() {
    let s = Server::start(&one_exec_worker());
    block(T, async {
        let r = s.call("run_command", run("yes | head -c 1048576")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let base = rss_bytes(s.pid()).expect("rss");
        let mut c = s.client().await;
        let mut req = CallRequest::new("flood", "run_command", run("yes"));
        req.stream = Some(true);
        req.timeout_ms = Some(3000);
        c.send(&ClientMessage::Call(req)).await.expect("send");
        // Not reading: sample the supervisor while the call runs to its deadline.
        let mut worst = 0i64;
        let mut seen_running = false;
        let end = Instant::now() + Duration::from_secs(30);
        loop {
            worst = worst.max(rss_bytes(s.pid()).unwrap_or(0) as i64 - base as i64);
            let busy = s.workers_in_flight("exec").await > 0;
            seen_running |= busy;
            if seen_running && !busy {
                break;
            }
            assert!(Instant::now() < end, "the flood never ended");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("streaming to a non-reader: supervisor RSS growth {worst} bytes");
        assert!(worst <= 16 << 20, "supervisor RSS grew by {worst} bytes");
        // Reading again, the client gets the output held for it, then its result.
        let r = result_of(&mut c, "flood").await;
        assert_eq!(r.status, Status::Timeout, "{:?}", (r.status, &r.error));
    });
}

/// The value of a secret-named variable in the supervisor's environment never reaches
/// the audit log, even in a shape no pattern knows (an agent grepping for it).
#[test]
fn secret_variable_values_are_masked_in_the_audit_log() {
    let s = Server::start_with_env(ALLOW_ALL, &[("MY_E2E_SECRET", "hunter2planted")]);
    block(T, async {
        let r = s.call("grep", json!({"pattern": "hunter2planted"})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let r = s.call("run_command", run("echo hunter2planted")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
    let log = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
    assert!(log.contains("\"tool\":\"grep\""), "{log}");
    assert!(
        !log.contains("hunter2planted"),
        "secret in the audit log:\n{log}"
    );
}
