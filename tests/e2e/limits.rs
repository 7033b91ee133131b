//! Limits through the real binary: `[workers.exec.limits]` stop commands with
//! `ResourceLimit` naming the limit, and every result says what a command used; a call
//! never kills its worker (a TERM-ignoring command, cancelled or timed out, beside
//! another session's call and background job); search results of any size are cut,
//! never a crash (3 000 files, a 64 MiB line); artifacts stay under their total.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::client::Client;
use toolvisor_protocol::{CallRequest, ClientMessage, ErrorType, Status, ToolResult};

use crate::harness::*;

fn run(command: &str) -> Value {
    json!({ "command": command })
}

fn kind(r: &ToolResult) -> Option<ErrorType> {
    r.error.as_ref().map(|e| e.kind)
}

async fn send(c: &mut Client, id: &str, tool: &str, args: Value) {
    c.send(&ClientMessage::Call(CallRequest::new(id, tool, args)))
        .await
        .expect("send");
}

/// Assert `r` was stopped by the limit `key`.
fn stopped_by(r: &ToolResult, key: &str) {
    assert_eq!(r.status, Status::Error, "{r:?}");
    assert_eq!(kind(r), Some(ErrorType::ResourceLimit), "{r:?}");
    let msg = &r.error.as_ref().unwrap().message;
    assert!(msg.contains(&format!("workers.exec.limits.{key}")), "{msg}");
}

#[test]
fn limits_stop_commands_and_every_result_says_what_it_used() {
    let config = format!(
        "{ALLOW_ALL}\n[workers.exec.limits]\nmemory_mb = 64\npids = 32\ncpu_s = 1\nfile_mb = 1\n"
    );
    let s = Server::start(&config);
    block(T, async {
        let mechanism = s.guards().await.limits.expect("status.guards.limits");
        let r = s.call("run_command", run("echo fine")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let res = &r.meta["resources"];
        assert!(
            res["peak_rss_bytes"].as_u64().is_some_and(|b| b > 0),
            "{res}"
        );
        assert!(res["cpu_ms"].as_u64().is_some(), "{res}");
        // Also on a failure.
        let r = s.call("run_command", run("exit 3")).await;
        assert!(r.meta["resources"]["cpu_ms"].is_u64(), "{r:?}");

        let r = s
            .call("run_command", run("head -c 3000000 /dev/zero > big"))
            .await;
        stopped_by(&r, "file_mb");
        assert!(std::fs::metadata(s.ws().join("big")).unwrap().len() <= 1 << 20);

        let r = s.call("run_command", run("while :; do :; done")).await;
        stopped_by(&r, "cpu_s");
        // A background job too: its row says why it ended, and what it used.
        let r = s
            .call(
                "run_command",
                json!({"command": "while :; do :; done", "background": true}),
            )
            .await;
        assert_eq!(r.meta["resources"]["cpu_ms"], json!(0), "{r:?}");
        let handle = r.meta["process"].as_str().expect("handle").to_owned();
        let end = Instant::now() + Duration::from_secs(30);
        let row = loop {
            let r = s.call("read_output", json!({"process": handle})).await;
            if r.meta["running"] == json!(false) {
                break r.meta;
            }
            assert!(Instant::now() < end, "the job was never stopped");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(row["error"]["type"], json!("ResourceLimit"), "{row}");
        // About its limit: the cgroup's count lags the kernel's rlimit by a tick or so
        // (881 ms was seen on a loaded machine), so only "most of a second" is asked.
        assert!(
            row["resources"]["cpu_ms"]
                .as_u64()
                .is_some_and(|ms| ms >= 500),
            "{row}"
        );

        if mechanism == "rlimit" {
            eprintln!("no writable cgroups here: memory and process limits are rlimits");
            return;
        }
        let r = s
            .call(
                "run_command",
                run("python3 -c \"x = bytearray(256 << 20); print(len(x))\""),
            )
            .await;
        stopped_by(&r, "memory_mb");
        let r = s
            .call(
                "run_command",
                run("for i in $(seq 100); do sleep 5 & done; wait"),
            )
            .await;
        stopped_by(&r, "pids");
        // The worker survived all of it.
        let r = s.call("run_command", run("echo after")).await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "after\n"),
            "{r:?}"
        );
    });
}

/// A command that ignores SIGTERM (and whose children do), marked for lookup.
fn stubborn(marker: &str) -> Value {
    json!({"command": "trap '' TERM; while :; do sleep 0.1; done", "env": {"E2E_MARK": marker}})
}

#[test]
fn a_term_ignoring_command_is_killed_and_its_worker_keeps_serving_others() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\ncount = 1\n"));
    block(Duration::from_secs(120), async {
        let worker = s.worker_pids("exec").await;
        // The victim: another session's background job and foreground call.
        let mut victim = s.client().await;
        let job_mark = unique_marker("victim-job");
        let r = call_on(
            &mut victim,
            "job",
            "run_command",
            json!({"command": "sleep 300", "background": true, "env": {"E2E_MARK": job_mark}}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let handle = r.meta["process"].as_str().expect("handle").to_owned();
        send(
            &mut victim,
            "v",
            "run_command",
            run("sleep 8; echo victim-done"),
        )
        .await;

        for ending in ["cancel", "timeout"] {
            let mark = unique_marker("stubborn");
            let mut attacker = s.client().await;
            let mut args = stubborn(&mark);
            if ending == "timeout" {
                args["timeout"] = json!(1500);
            }
            send(&mut attacker, "a", "run_command", args).await;
            wait_procs_with_env(&mark, "sleep", 1, Duration::from_secs(20)).await;
            let t0 = Instant::now();
            if ending == "cancel" {
                attacker
                    .send(&ClientMessage::Cancel { id: "a".into() })
                    .await
                    .unwrap();
            }
            let r = result_of(&mut attacker, "a").await;
            let want = if ending == "cancel" {
                Status::Cancelled
            } else {
                Status::Timeout
            };
            assert_eq!(r.status, want, "{ending}: {r:?}");
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{ending} took {:?}",
                t0.elapsed()
            );
            if let Err(left) = wait_no_procs_with_env(&mark, Duration::from_secs(10)).await {
                panic!("{ending}: the command's processes outlived its result: {left:?}");
            }
            assert_eq!(
                s.worker_pids("exec").await,
                worker,
                "{ending} killed the worker"
            );
        }
        let r = result_of(&mut victim, "v").await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "victim-done\n"),
            "{r:?}"
        );
        let r = call_on(&mut victim, "ro", "read_output", json!({"process": handle})).await;
        assert_eq!(
            r.meta["running"],
            json!(true),
            "the victim's job died: {r:?}"
        );
        let r = call_on(&mut victim, "k", "kill_process", json!({"process": handle})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(s.worker_pids("exec").await, worker);
    });
}

#[test]
fn read_many_files_of_3000_files_is_cut_as_a_whole_and_the_worker_lives() {
    let s = Server::start(ALLOW_ALL);
    let line = "0123456789abcdef".repeat(62) + "\n"; // 993 bytes
    for i in 0..3000 {
        s.write(&format!("many/f{i:04}.txt"), &line);
    }
    block(T, async {
        let search = s.worker_pids("search").await;
        let r = s
            .call("read_many_files", json!({"paths": ["many/*.txt"]}))
            .await;
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
        assert!(
            r.content.len() <= (1 << 20) + 200,
            "{} bytes",
            r.content.len()
        );
        let tail = &r.content[r.content.len() - 100..];
        assert!(tail.contains("[Output truncated: "), "{tail}");
        assert_eq!(r.content.matches("[Output truncated").count(), 1);
        let t = r.truncated.expect("truncated");
        assert!(t.omitted_bytes > 1_000_000, "{t:?}");
        assert_eq!(s.worker_pids("search").await, search);
    });
    // Past the frame: a cap set larger than a frame still answers, cut to fit.
    let big = Server::start(&format!(
        "{ALLOW_ALL}\n[limits]\nmany_max = 67108864\nfile_max = 20000\nfile_keep = 10000\n"
    ));
    let page = "x".repeat(8000) + "\n";
    for i in 0..3000 {
        big.write(&format!("many/f{i:04}.txt"), &page);
    }
    block(T, async {
        let search = big.worker_pids("search").await;
        for _ in 0..2 {
            let r = big
                .call("read_many_files", json!({"paths": ["many/*.txt"]}))
                .await;
            assert_eq!(r.status, Status::Ok, "{:?}", r.error);
            assert!(r.content.len() <= 4 << 20, "{} bytes", r.content.len());
            assert!(r.truncated.is_some());
        }
        assert_eq!(big.worker_pids("search").await, search);
        let w = big.workers().await;
        assert!(w.iter().all(|w| w.2 == "ready"), "{w:?}");
    });
}

/// Sample `pid`'s RSS growth over `base` until `stop`; the largest seen.
fn rss_sampler(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let base = rss_bytes(pid).unwrap_or(0);
    std::thread::spawn(move || {
        let mut worst = 0u64;
        while !stop.load(Ordering::Relaxed) {
            worst = worst.max(rss_bytes(pid).unwrap_or(0).saturating_sub(base));
            std::thread::sleep(Duration::from_millis(20));
        }
        worst
    })
}

#[test]
fn a_file_with_one_64_mib_line_is_cut_and_memory_stays_bounded() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.search]\ncount = 1\n"));
    let mut big = String::with_capacity(65 << 20);
    big.push_str("needle-start ");
    big.push_str(&"x".repeat(64 << 20));
    big.push_str(" needle-end\n");
    s.write("big.txt", &big);
    drop(big);
    s.write("small.txt", "needle here\n");
    block(T, async {
        let pid = s.worker_pids("search").await[0];
        let stop = Arc::new(AtomicBool::new(false));
        let sampler = rss_sampler(pid, Arc::clone(&stop));
        let r = s.call("read_file", json!({"path": "big.txt"})).await;
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
        assert!(r.content.len() < 16 << 10, "{} bytes", r.content.len());
        assert!(r.content.starts_with("needle-start x"));
        assert!(r.truncated.is_some());
        let r = s.call("grep", json!({"pattern": "needle"})).await;
        assert_eq!(r.status, Status::Ok, "{:?}", r.error);
        let lines: Vec<&str> = r.content.lines().collect();
        assert_eq!(lines.len(), 2, "{}", &r.content[..200.min(r.content.len())]);
        assert!(
            lines[0].starts_with("big.txt:1: needle-start xxx"),
            "{}",
            &lines[0][..40]
        );
        assert!(
            lines[0].ends_with(" characters omitted]"),
            "{}",
            &lines[0][lines[0].len() - 60..]
        );
        assert!(lines[0].len() < (1 << 20) + 100);
        assert_eq!(lines[1], "small.txt:1: needle here");
        stop.store(true, Ordering::Relaxed);
        let grew = sampler.join().unwrap();
        eprintln!("search worker RSS grew by {grew} bytes");
        assert!(grew <= 24 << 20, "the search worker grew by {grew} bytes");
        assert_eq!(s.worker_pids("search").await, vec![pid]);
    });
}

/// The sizes of the files in `dir` added up while holding its `flock` (shared).
fn locked_total(dir: &std::path::Path) -> Option<u64> {
    let lock = std::fs::File::open(dir).ok()?;
    let held = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockShared).ok()?;
    let total = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter_map(|e| e.metadata().ok())
        .map(|m| m.len())
        .sum();
    drop(held);
    Some(total)
}

#[test]
fn artifacts_stay_under_their_total_at_every_moment() {
    let config = format!(
        "{ALLOW_ALL}\n[limits]\nartifacts_max_bytes = 2097152\nartifacts_total_bytes = 3145728\n"
    );
    let s = Server::start(&config);
    let dir = s.ws().join(".toolvisor/artifacts");
    let stop = Arc::new(AtomicBool::new(false));
    let worst = Arc::new(AtomicU64::new(0));
    let sampler = {
        let (stop, worst, dir) = (Arc::clone(&stop), Arc::clone(&worst), dir.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // A snapshot under the directory's lock (shared), which every writer takes
                // (exclusively) to reserve room or prune: sizes only shrink meanwhile.
                if let Some(total) = locked_total(&dir) {
                    worst.fetch_max(total, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    block(T, async {
        for round in 0..4 {
            let (ida, idb) = (format!("a{round}"), format!("b{round}"));
            let (mut a, mut b) = (s.client().await, s.client().await);
            let (ra, rb) = tokio::join!(
                call_on(&mut a, &ida, "run_command", run("yes | head -c 4000000")),
                call_on(&mut b, &idb, "run_command", run("yes | head -c 4000000")),
            );
            for r in [ra, rb] {
                assert_eq!(r.status, Status::Ok, "{r:?}");
                assert!(r.truncated.is_some(), "{r:?}");
            }
        }
    });
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let worst = worst.load(Ordering::Relaxed);
    eprintln!("artifacts directory peaked at {worst} bytes");
    assert!(
        worst <= 3 << 20,
        "the artifacts directory held {worst} bytes"
    );
    assert!(worst > 1 << 20, "the sampler saw nothing ({worst})");
}

/// Command cgroups of the worker `pid` still on the host (`toolvisor-<pid>-<n>`
/// anywhere under /sys/fs/cgroup, a few levels deep).
fn cgroups_of(pid: u32) -> Vec<std::path::PathBuf> {
    fn walk(dir: &std::path::Path, prefix: &str, depth: usize, out: &mut Vec<std::path::PathBuf>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for e in rd.flatten() {
            if !e.file_type().is_ok_and(|t| t.is_dir()) {
                continue;
            }
            let p = e.path();
            if e.file_name().to_string_lossy().starts_with(prefix) {
                out.push(p);
            } else if depth > 0 {
                walk(&p, prefix, depth - 1, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        std::path::Path::new("/sys/fs/cgroup"),
        &format!("toolvisor-{pid}-"),
        5,
        &mut out,
    );
    out
}

/// Whether the cgroup `dir` holds a spare sandbox's shim (`toolvisor reap --spare`).
fn holds_a_spare(dir: &std::path::Path) -> bool {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .any(|pid| {
            std::fs::read(format!("/proc/{}/cmdline", pid.trim()))
                .unwrap_or_default()
                .split(|&b| b == 0)
                .any(|a| a == b"--spare")
        })
}

#[test]
fn command_cgroups_leave_nothing_behind_even_after_a_worker_kill_9() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\ncount = 1\n"));
    block(Duration::from_secs(180), async {
        if s.guards().await.limits.as_deref() == Some("rlimit") {
            eprintln!("no writable cgroups here: skipping");
            return;
        }
        let worker = s.worker_pids("exec").await[0];
        let mut c = s.client().await;
        for i in 0..300 {
            let r = call_on(&mut c, &format!("t{i}"), "run_command", run("true")).await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
        // Nothing left but the group of the worker's spare sandbox, which waits in it
        // for the next command (a spare being built has its group before its shim is
        // in it: wait for that, within a deadline).
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let left: Vec<_> = cgroups_of(worker)
                .into_iter()
                .filter(|g| !holds_a_spare(g))
                .collect();
            if left.is_empty() {
                break;
            }
            assert!(Instant::now() < end, "{left:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // A command in flight when its worker is killed: the next worker removes its group.
        let mark = unique_marker("cg-kill");
        send(
            &mut c,
            "long",
            "run_command",
            json!({"command": "sleep 300", "env": {"E2E_MARK": mark}}),
        )
        .await;
        wait_procs_with_env(&mark, "sleep", 1, Duration::from_secs(20)).await;
        assert!(
            !cgroups_of(worker).is_empty(),
            "no group for the running command"
        );
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(worker as i32),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        let r = result_of(&mut c, "long").await;
        assert_eq!(r.status, Status::Crashed, "{r:?}");
        s.wait_group_back("exec", &[worker], Duration::from_secs(30))
            .await;
        if let Err(left) = wait_no_procs_with_env(&mark, Duration::from_secs(15)).await {
            panic!("the command outlived its worker: {left:?}");
        }
        // The new worker removed the dead one's groups before it said `ready`.
        assert!(
            cgroups_of(worker).is_empty(),
            "left behind: {:?}",
            cgroups_of(worker)
        );
    });
}

/// A command cannot use up the daemon user's per-user kernel counters: it gets a
/// share of each (inotify instances here), so the person's editors and watchers keep
/// theirs, and the daemon's own user still has the rest while the command holds its
/// share.
#[test]
fn a_command_cannot_exhaust_the_daemon_users_inotify_instances() {
    let s = Server::start(ALLOW_ALL);
    block(Duration::from_secs(60), async {
        if !s.guards().await.namespaces {
            return;
        }
        let host: u64 = std::fs::read_to_string("/proc/sys/user/max_inotify_instances")
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let grab = "python3 -c \"
import ctypes
libc = ctypes.CDLL(None)
n = 0
while libc.inotify_init() >= 0:
    n += 1
    if n > 100000:
        break
print('got', n)
\"";
        let r = s.call("run_command", json!({"command": grab})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let got: u64 = r
            .content
            .trim()
            .strip_prefix("got ")
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{r:?}"));
        assert!(got < host, "the command took {got} of {host}");
        assert!(got <= host / 4, "more than its share: {got} of {host}");
    });
}
