//! Tests of the exec tools with real processes. Commands run under the real shim
//! logic: the launcher re-executes this test binary as `toolvisor reap` (see
//! `reap::tests::shim_entry`).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::worker::{ExecSettings, FromWorker, Limits, Outcome, Roots, WorkerInit};
use toolvisor_protocol::{ErrorType, Status};

use super::launch::{Launcher, ShimLauncher};
use super::{ExecState, run};
use crate::paths::Resolver;
use crate::{CancelFlag, OutputSink, ToolContext};

/// Libtest's stdout/stderr go to /dev/null; the command's pipes are passed as 3 and 4.
const WRAP: &str = "exec 3>&1 4>&2 >/dev/null 2>&1; exec \"$0\" \"$@\"";

struct Fixture {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    state: Arc<ExecState>,
    init: Arc<WorkerInit>,
    resolver: Arc<Resolver>,
    marker: String,
}

fn unique_marker() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static N: AtomicU32 = AtomicU32::new(0);
    format!(
        "test-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

fn fixture_with(limits: Limits, max_jobs: usize, shim: bool) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::create_dir(ws.join("sub")).unwrap();
    let marker = unique_marker();
    let init = WorkerInit {
        generation: 0,
        web: Default::default(),
        skills: Default::default(),
        mcp: None,
        group: "exec".into(),
        index: 0,
        roots: Roots {
            private: ws.clone(),
            shared: None,
            public: None,
        },
        protected: vec![],
        state_dir: ws.join(".toolvisor"),
        limits,
        exec: ExecSettings {
            max_jobs,
            instance: marker.clone(),
            ..ExecSettings::default()
        },
    };
    let launcher = if shim {
        Launcher::Shim(Box::new(ShimLauncher {
            program: "/bin/sh".into(),
            prefix: vec![
                "-c".into(),
                WRAP.into(),
                std::env::current_exe().unwrap().into(),
                "reap::tests::shim_entry".into(),
                "--exact".into(),
                "--nocapture".into(),
                "--test-threads=1".into(),
                "-q".into(),
            ],
            args_env: Some(crate::reap::tests::TEST_SHIM_VAR),
            writable: crate::sandbox::command_writable(&init),
            sandbox: None,
            rlimits: Default::default(),
        }))
    } else {
        Launcher::Direct
    };
    let cgroups = super::cgroup::Cgroups::none(&init.exec.sandbox.limits);
    let state = Arc::new(ExecState::with_launcher(&init, launcher, cgroups));
    let resolver = Arc::new(Resolver::new(&init.roots, &[]).unwrap());
    Fixture {
        _dir: dir,
        ws,
        state,
        init: Arc::new(init),
        resolver,
        marker,
    }
}

fn fixture() -> Fixture {
    fixture_with(Limits::default(), 0, true)
}

impl Fixture {
    fn ctx(&self, name: &str) -> ToolContext {
        ToolContext {
            init: Arc::clone(&self.init),
            resolver: Arc::clone(&self.resolver),
            call: 1,
            name: name.into(),
            cancel: CancelFlag::new(),
            output: None,
            deadline: Some(Instant::now() + Duration::from_secs(60)),
            network: false,
            egress: None,
            session: "s1".into(),
            takeover: false,
        }
    }

    async fn call(&self, tool: &str, args: Value) -> Outcome {
        run(&self.state, tool, &args, &self.ctx("c1")).await
    }

    async fn sh(&self, command: &str) -> Outcome {
        self.call("run_command", json!({ "command": command }))
            .await
    }

    /// Processes still carrying this fixture's marker in their environment.
    fn marked(&self) -> Vec<i32> {
        let needle = format!("TOOLVISOR_INSTANCE={}\0", self.marker);
        let me = std::process::id() as i32;
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&pid| pid != me)
            .filter(|pid| {
                std::fs::read(format!("/proc/{pid}/environ"))
                    .map(|env| env.windows(needle.len()).any(|w| w == needle.as_bytes()))
                    .unwrap_or(false)
            })
            .collect()
    }
}

fn meta_i64(o: &Outcome, key: &str) -> Option<i64> {
    o.meta.get(key).and_then(Value::as_i64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_output_and_exit_code() {
    let f = fixture();
    let o = f.sh("echo hello; echo oops >&2").await;
    assert_eq!(o.status, Status::Ok, "{o:?}");
    assert_eq!(o.content, "hello\noops\n");
    assert_eq!(meta_i64(&o, "exit_code"), Some(0));
    assert!(o.truncated.is_none());

    let o = f.sh("echo out; exit 3").await;
    assert_eq!(o.status, Status::Error);
    assert_eq!(
        o.error.as_ref().unwrap().kind,
        ErrorType::ShellExecutionError
    );
    assert_eq!(o.content, "out\n", "output stays in content");
    assert_eq!(meta_i64(&o, "exit_code"), Some(3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn death_by_signal_is_reported_through_the_shim() {
    let f = fixture();
    let o = f.sh("echo before; kill -USR1 $$").await;
    assert_eq!(o.status, Status::Error, "{o:?}");
    assert_eq!(meta_i64(&o, "signal"), Some(libc::SIGUSR1 as i64));
    assert_eq!(o.meta.get("exit_code"), Some(&Value::Null));
    assert_eq!(o.content, "before\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdout_and_stderr_interleave_in_arrival_order() {
    let f = fixture();
    let o = f
        .sh("echo a; sleep 0.05; echo b >&2; sleep 0.05; echo c; sleep 0.05; echo d >&2")
        .await;
    assert_eq!(o.content, "a\nb\nc\nd\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn environment_is_scrubbed_and_layered() {
    // SAFETY: the variable is unique to this test and only read by child commands.
    unsafe { std::env::set_var("TOOLVISOR_TEST_SECRET", "leak") };
    let f = fixture();
    let o = f
        .call(
            "run_command",
            json!({"command": "echo $TERM $CI $PAGER $NO_COLOR $GIT_TERMINAL_PROMPT $FOO ${TOOLVISOR_TEST_SECRET:-none}; echo $TOOLVISOR_INSTANCE; cat",
                   "env": {"FOO": "bar"}}),
        )
        .await;
    assert_eq!(
        o.content,
        format!("dumb 1 cat 1 0 bar none\n{}\n", f.marker)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cwd_defaults_to_the_workspace_and_must_be_a_directory() {
    let f = fixture();
    let o = f.sh("pwd").await;
    assert_eq!(o.content.trim_end(), f.ws.display().to_string());
    let o = f
        .call("run_command", json!({"command": "pwd", "cwd": "sub"}))
        .await;
    assert_eq!(o.content.trim_end(), f.ws.join("sub").display().to_string());
    std::fs::write(f.ws.join("file"), "x").unwrap();
    let o = f
        .call("run_command", json!({"command": "pwd", "cwd": "file"}))
        .await;
    assert_eq!(o.status, Status::Error);
    let o = f
        .call("run_command", json!({"command": "pwd", "cwd": "../.."}))
        .await;
    assert_eq!(o.error.unwrap().kind, ErrorType::PathOutsideWorkspace);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_kills_and_keeps_output() {
    let f = fixture();
    let t0 = Instant::now();
    let o = f
        .call(
            "run_command",
            json!({"command": "echo started; sleep 300", "timeout": 300}),
        )
        .await;
    assert_eq!(o.status, Status::Timeout, "{o:?}");
    assert_eq!(o.error.as_ref().unwrap().kind, ErrorType::Timeout);
    assert_eq!(o.content, "started\n");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert!(f.marked().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_call_deadline_applies_too() {
    let f = fixture();
    let mut ctx = f.ctx("d");
    ctx.deadline = Some(Instant::now() + Duration::from_millis(200));
    let o = run(
        &f.state,
        "run_command",
        &json!({"command": "sleep 300"}),
        &ctx,
    )
    .await;
    assert_eq!(o.status, Status::Timeout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn term_ignoring_commands_get_sigkill_after_the_grace() {
    let f = fixture();
    let t0 = Instant::now();
    let o = f
        .call(
            "run_command",
            json!({"command": "trap '' TERM; echo x; sleep 300", "timeout": 100}),
        )
        .await;
    assert_eq!(o.status, Status::Timeout);
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(5),
        "{took:?}"
    );
    assert!(f.marked().is_empty());
}

/// A streaming context whose sink the test reads.
fn streaming(f: &Fixture, cap: usize) -> (ToolContext, tokio::sync::mpsc::Receiver<FromWorker>) {
    let (out, rx) = crate::context::Outgoing::pair(cap);
    let mut ctx = f.ctx("s");
    ctx.output = Some(OutputSink { call: 1, out });
    (ctx, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streaming_sends_incremental_chunks() {
    let f = fixture();
    let (ctx, mut rx) = streaming(&f, 64);
    let args = json!({"command": "for i in 1 2 3; do echo $i; sleep 0.1; done; echo e >&2"});
    let o = run(&f.state, "run_command", &args, &ctx).await;
    drop(ctx);
    let mut frames = Vec::new();
    while let Some(FromWorker::Output { stream, data, .. }) = rx.recv().await {
        frames.push((stream, data));
    }
    assert!(frames.len() >= 3, "incremental: {frames:?}");
    let joined: String = frames.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(joined, o.content);
    assert_eq!(
        frames.last().unwrap(),
        &("stderr".to_string(), "e\n".to_string())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_kills_with_status_cancelled() {
    let f = fixture();
    let (ctx, mut rx) = streaming(&f, 64);
    let cancel = ctx.cancel.clone();
    let args = json!({"command": "echo ready; sleep 300"});
    let st = Arc::clone(&f.state);
    let call = tokio::spawn(async move { run(&st, "run_command", &args, &ctx).await });
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap();
    assert!(matches!(first, Some(FromWorker::Output { ref data, .. }) if data == "ready\n"));
    cancel.cancel();
    let o = tokio::time::timeout(Duration::from_secs(5), call)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(o.status, Status::Cancelled);
    assert_eq!(o.content, "ready\n");
    assert!(f.marked().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_stream_does_not_hang_the_call_or_grow_memory() {
    let f = fixture();
    let (ctx, rx) = streaming(&f, 1); // never read: the sink stays full
    let args = json!({"command": "yes 0123456789", "timeout": 300});
    let t0 = Instant::now();
    let o = run(&f.state, "run_command", &args, &ctx).await;
    assert_eq!(o.status, Status::Timeout);
    assert!(t0.elapsed() < Duration::from_secs(6), "{:?}", t0.elapsed());
    assert!(o.content.len() < 16 * 1024);
    drop(rx);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_output_is_truncated_with_a_full_artifact() {
    let f = fixture();
    let o = f
        .sh("i=0; while [ $i -lt 3000 ]; do echo line $i; i=$((i+1)); done; head -c 300000 /dev/zero | tr '\\0' z; echo; echo end")
        .await;
    assert_eq!(o.status, Status::Ok);
    let t = o.truncated.clone().expect("truncated");
    assert!(o.content.starts_with("line 0\nline 1\n"));
    assert!(o.content.ends_with("zzz\nend\n"));
    assert_eq!(o.content.matches("[Output truncated:").count(), 1);
    assert!(o.content.len() <= 1024 + 4096 + 100, "{}", o.content.len());
    assert_eq!(
        t.full_output.as_deref(),
        Some(".toolvisor/artifacts/c1.log")
    );
    let full = std::fs::read(f.ws.join(".toolvisor/artifacts/c1.log")).unwrap();
    let expected_len: usize = (0..3000)
        .map(|i| format!("line {i}\n").len())
        .sum::<usize>()
        + 300_000
        + 5;
    assert_eq!(full.len(), expected_len);
    let marker_line = o
        .content
        .lines()
        .find(|l| l.starts_with("[Output truncated"))
        .unwrap();
    assert_eq!(
        marker_line,
        format!(
            "[Output truncated: {} lines and {} characters omitted]",
            t.omitted_lines, t.omitted_bytes
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_pipes_on_both_streams_do_not_deadlock() {
    let f = fixture();
    let o = f
        .sh("head -c 300000 /dev/zero | tr '\\0' a; head -c 300000 /dev/zero | tr '\\0' b >&2; head -c 300000 /dev/zero | tr '\\0' c")
        .await;
    assert_eq!(o.status, Status::Ok);
    let t = o.truncated.unwrap();
    assert!(t.omitted_bytes > 800_000);
    let full = std::fs::metadata(f.ws.join(".toolvisor/artifacts/c1.log")).unwrap();
    assert_eq!(full.len(), 900_000, "every byte of both streams was read");
}

/// Each way a call can end, with each way a process can try to outlive it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_orphans_whatever_the_ending() {
    let escapes = [
        "sleep 300 &",
        "setsid sleep 300 &",
        "(sleep 300 &) &",
        "(setsid sh -c 'sleep 300 & sleep 300' &) &",
    ];
    for escape in escapes {
        let f = fixture();
        // Exit: the command ends at once, leaving its escapee behind.
        let o = f.sh(&format!("{escape} echo done")).await;
        assert_eq!(o.content, "done\n", "{escape}");
        assert!(f.marked().is_empty(), "exit, {escape}: {:?}", f.marked());
        // Timeout.
        let o = f
            .call(
                "run_command",
                json!({"command": format!("{escape} sleep 300"), "timeout": 200}),
            )
            .await;
        assert_eq!(o.status, Status::Timeout);
        assert!(f.marked().is_empty(), "timeout, {escape}: {:?}", f.marked());
        // Cancel.
        let (ctx, mut rx) = streaming(&f, 8);
        let cancel = ctx.cancel.clone();
        let args = json!({"command": format!("{escape} echo go; sleep 300")});
        let st = Arc::clone(&f.state);
        let call = tokio::spawn(async move { run(&st, "run_command", &args, &ctx).await });
        let _ = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap();
        cancel.cancel();
        let o = tokio::time::timeout(Duration::from_secs(5), call)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(o.status, Status::Cancelled);
        assert!(f.marked().is_empty(), "cancel, {escape}: {:?}", f.marked());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn direct_launcher_still_runs_and_times_out() {
    let f = fixture_with(Limits::default(), 0, false);
    assert!(!f.state.subreaper());
    let o = f.sh("echo direct; exit 4").await;
    assert_eq!(
        (o.content.as_str(), meta_i64(&o, "exit_code")),
        ("direct\n", Some(4))
    );
    let o = f
        .call(
            "run_command",
            json!({"command": "sleep 300 & sleep 300", "timeout": 100}),
        )
        .await;
    assert_eq!(o.status, Status::Timeout);
    assert!(f.marked().is_empty(), "same-group children die too");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_cannot_write_the_state_dir_outside_the_workspace() {
    let outside = tempfile::tempdir().unwrap();
    let f = fixture();
    // Probe: does this kernel enforce Landlock for the shim?
    let target = outside.path().join("x");
    let o = f.sh(&format!("echo hi > {}", target.display())).await;
    if o.status == Status::Ok {
        eprintln!("Landlock not enforced here: skipping");
        return;
    }
    assert!(!target.exists());
    let o = f.sh("echo ok > inside.txt && cat inside.txt && echo t > ${TMPDIR:-/tmp}/tv-probe-$$ && echo tmp").await;
    assert_eq!(o.content, "ok\ntmp\n", "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_job_lifecycle() {
    let f = fixture();
    let o = f
        .call(
            "run_command",
            json!({"command": "echo one; sleep 0.1; echo two >&2", "background": true}),
        )
        .await;
    assert_eq!(o.status, Status::Ok, "{o:?}");
    let handle = o.meta["process"].as_str().unwrap().to_owned();
    assert_eq!(handle, "w0-1");
    assert!(
        o.content
            .starts_with("Started background process w0-1 (pid ")
    );
    assert!(f.state.jobs.wait(&handle).await);

    let l = f.call("list_processes", json!({})).await;
    assert!(
        l.content.contains("w0-1") && l.content.contains("exited"),
        "{}",
        l.content
    );
    let row = &l.meta["processes"][0];
    assert_eq!(row["exit_code"], json!(0));
    assert_eq!(row["output_bytes"], json!(8));
    assert!(row["started"].as_str().unwrap().ends_with('Z'));

    let r = f.call("read_output", json!({"process": handle})).await;
    assert_eq!(r.content, "one\ntwo\n");
    assert_eq!(
        (meta_i64(&r, "next"), r.meta["running"].clone()),
        (Some(8), json!(false))
    );
    let r = f.call("read_output", json!({"process": handle})).await;
    assert_eq!((r.content.as_str(), meta_i64(&r, "next")), ("", Some(8)));
    let r = f
        .call("read_output", json!({"process": handle, "since": 4}))
        .await;
    assert_eq!(r.content, "two\n");

    let o = f.call("read_output", json!({"process": "w0-99"})).await;
    assert_eq!(o.status, Status::Error);
}

/// `output_bytes` of `handle` in `list_processes`.
async fn output_bytes(f: &Fixture, handle: &str) -> Option<i64> {
    let l = f.call("list_processes", json!({})).await;
    let rows = l.meta.get("processes")?.as_array()?;
    let row = rows.iter().find(|r| r["process"] == json!(handle))?;
    row["output_bytes"].as_i64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_output_of_a_running_job() {
    let f = fixture();
    // "one\n" and the first two bytes of "€", then it keeps running.
    let o = f
        .call(
            "run_command",
            json!({"command": "printf 'one\\n\\342\\202'; exec sleep 300", "background": true}),
        )
        .await;
    let h = o.meta["process"].as_str().unwrap().to_owned();
    // Poll (bounded) until all six bytes were written: list_processes counts them live.
    let deadline = Instant::now() + Duration::from_secs(20);
    while output_bytes(&f, &h).await != Some(6) {
        assert!(Instant::now() < deadline, "output never reached 6 bytes");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let r = f.call("read_output", json!({"process": h})).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(
        r.content, "one\n",
        "the partial character waits for its rest"
    );
    assert_eq!(
        (meta_i64(&r, "next"), r.meta["running"].clone()),
        (Some(4), json!(true))
    );
    let r = f
        .call("read_output", json!({"process": h, "since": 1}))
        .await;
    assert_eq!(
        (r.content.as_str(), meta_i64(&r, "next")),
        ("ne\n", Some(4))
    );

    let k = f.call("kill_process", json!({"process": h})).await;
    assert_eq!(k.status, Status::Ok, "{k:?}");
    // Ended: the log is complete, so the incomplete character is all there is.
    let r = f.call("read_output", json!({"process": h})).await;
    assert_eq!(r.content, "\u{FFFD}");
    assert_eq!(
        (meta_i64(&r, "next"), r.meta["running"].clone()),
        (Some(6), json!(false))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_output_pages_are_contiguous_on_char_boundaries() {
    let f = fixture_with(
        Limits {
            shell_max: 1000,
            ..Limits::default()
        },
        0,
        true,
    );
    // 1200 × "€" (3 bytes): 1000-byte pages must be cut to whole characters.
    let o = f
        .call("run_command", json!({"command": "i=0; while [ $i -lt 1200 ]; do printf '€'; i=$((i+1)); done", "background": true}))
        .await;
    let h = o.meta["process"].as_str().unwrap().to_owned();
    assert!(f.state.jobs.wait(&h).await);
    let mut all = String::new();
    let mut next = 0;
    for _ in 0..10 {
        let r = f.call("read_output", json!({"process": h})).await;
        let n = meta_i64(&r, "next").unwrap();
        assert_eq!(
            n as usize - next,
            r.content.len(),
            "next counts the bytes returned"
        );
        assert!(r.content.len() <= 1000 && !r.content.contains('\u{FFFD}'));
        next = n as usize;
        if r.content.is_empty() {
            break;
        }
        all.push_str(&r.content);
    }
    assert_eq!(all, "€".repeat(1200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_process_limit_and_shutdown() {
    let f = fixture_with(Limits::default(), 2, true);
    let start = |cmd: &str| f.call("run_command", json!({"command": cmd, "background": true}));
    let a = start("setsid sleep 300 & sleep 300").await;
    // One session may hold only its share (one of two): the second comes from another.
    let refused = start("true").await;
    let why = refused.error.unwrap();
    assert_eq!(why.kind, ErrorType::Overloaded);
    assert!(why.message.contains("this session"), "{}", why.message);
    let mut other = f.ctx("c2");
    other.session = "s2".into();
    let args = json!({"command": "(sleep 300 &) & sleep 300", "background": true});
    let b = run(&f.state, "run_command", &args, &other).await;
    assert_eq!((a.status, b.status), (Status::Ok, Status::Ok));
    let c = run(&f.state, "run_command", &args, &other).await;
    assert_eq!(c.error.unwrap().kind, ErrorType::Overloaded);

    let k = f
        .call("kill_process", json!({"process": a.meta["process"]}))
        .await;
    assert_eq!(k.status, Status::Ok, "{k:?}");
    assert!(k.content.starts_with("Killed w0-1"));
    assert_eq!(k.meta["running"], json!(false));
    let again = f
        .call("kill_process", json!({"process": a.meta["process"]}))
        .await;
    assert!(
        again.content.contains("had already ended"),
        "{}",
        again.content
    );

    f.state.shutdown().await;
    let l = f.call("list_processes", json!({})).await;
    assert!(!l.content.contains("running"), "{}", l.content);
    assert!(f.marked().is_empty(), "{:?}", f.marked());
}

#[test]
fn unknown_tools_are_tool_not_found() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let f = fixture();
    let o = rt.block_on(f.call("nope", json!({})));
    assert_eq!(o.error.unwrap().kind, ErrorType::ToolNotFound);
}

/// Read `handle`'s output (long polls) until it contains `needle`.
async fn read_until(f: &Fixture, handle: &str, needle: &str) -> String {
    let end = Instant::now() + Duration::from_secs(30);
    let mut got = String::new();
    while !got.contains(needle) {
        assert!(Instant::now() < end, "{needle:?} never came: {got:?}");
        let r = f
            .call("read_output", json!({"process": handle, "wait_ms": 2000}))
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        got.push_str(&r.content);
    }
    got
}

/// Without namespaces (the shim alone, and no shim at all) a command still gets a
/// terminal that is its controlling one, Ctrl-C and signals reach it, and its size
/// can change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminals_and_signals_without_namespaces() {
    for shim in [true, false] {
        let f = fixture_with(Limits::default(), 0, shim);
        let o = f
            .call(
                "run_command",
                json!({"command": "tty >/dev/null && echo tty; stty size; echo x > /dev/tty; printf '\\033[1mb\\033[0m\\n'", "tty": true, "rows": 7, "cols": 9}),
            )
            .await;
        assert_eq!(o.status, Status::Ok, "shim {shim}: {o:?}");
        assert_eq!(o.content, "tty\n7 9\nx\nb\n", "shim {shim}");
        let script = "trap 'echo caught-INT' INT; trap 'echo size $(stty size)' WINCH; echo armed; while :; do sleep 0.05; done";
        let o = f
            .call(
                "run_command",
                json!({"command": script, "tty": true, "background": true}),
            )
            .await;
        let h = o.meta["process"].as_str().unwrap().to_owned();
        read_until(&f, &h, "armed").await;
        let w = f
            .call("write_input", json!({"process": h, "data": "\u{3}"}))
            .await;
        assert_eq!(w.status, Status::Ok, "{w:?}");
        read_until(&f, &h, "caught-INT").await;
        let w = f
            .call(
                "write_input",
                json!({"process": h, "data": "", "rows": 11, "cols": 33}),
            )
            .await;
        assert_eq!(w.status, Status::Ok, "{w:?}");
        read_until(&f, &h, "size 11 33").await;
        let k = f
            .call("kill_process", json!({"process": h, "signal": "INT"}))
            .await;
        assert_eq!(k.status, Status::Ok, "{k:?}");
        read_until(&f, &h, "caught-INT").await;
        let k = f.call("kill_process", json!({"process": h})).await;
        assert_eq!(k.meta["running"], json!(false), "{k:?}");
        assert!(f.marked().is_empty(), "shim {shim}: {:?}", f.marked());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdin_yield_and_input_to_a_job() {
    let f = fixture();
    let o = f
        .call(
            "run_command",
            json!({"command": "tr a-z A-Z", "stdin": "shout\n"}),
        )
        .await;
    assert_eq!(o.content, "SHOUT\n", "{o:?}");
    // A yielded command: output so far, then the rest from read_output.
    let o = f
        .call(
            "run_command",
            json!({"command": "echo first; sleep 0.6; echo second", "yield_ms": 300}),
        )
        .await;
    assert_eq!(o.status, Status::Ok, "{o:?}");
    assert_eq!(
        (o.content.as_str(), &o.meta["running"]),
        ("first\n", &json!(true))
    );
    let h = o.meta["process"].as_str().unwrap().to_owned();
    assert!(f.state.jobs.wait(&h).await);
    let r = f.call("read_output", json!({"process": h})).await;
    assert_eq!(r.content, "second\n", "returned output counted as read");
    // Input to a background job, and the owner rule.
    let o = f
        .call(
            "run_command",
            json!({"command": "read a; echo got:$a", "background": true}),
        )
        .await;
    let h = o.meta["process"].as_str().unwrap().to_owned();
    let mut stranger = f.ctx("c2");
    stranger.session = "someone-else".into();
    let w = run(
        &f.state,
        "write_input",
        &json!({"process": h, "data": "x\n"}),
        &stranger,
    )
    .await;
    assert_eq!(w.error.map(|e| e.kind), Some(ErrorType::InvalidParams));
    stranger.takeover = true;
    let w = run(
        &f.state,
        "write_input",
        &json!({"process": h, "data": "x\n", "close": true}),
        &stranger,
    )
    .await;
    assert_eq!(w.status, Status::Ok, "{w:?}");
    assert_eq!(read_until(&f, &h, "got:x").await, "got:x\n");
}

/// A command gets its standard streams (or its terminal as all three) and nothing of
/// the process that starts it — here the test binary's own descriptors and one left
/// inheritable on purpose, as a worker's link to the supervisor used to be — through
/// the shim and without one (docs/SANDBOX.md, "Descriptors").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_gets_only_its_standard_streams() {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    let null = std::fs::File::open("/dev/null").unwrap();
    // SAFETY: F_DUPFD (not F_DUPFD_CLOEXEC) of a descriptor we own; the copy is ours.
    let leaked = unsafe { OwnedFd::from_raw_fd(libc::fcntl(null.as_raw_fd(), libc::F_DUPFD, 50)) };
    for shim in [true, false] {
        let f = fixture_with(Limits::default(), 0, shim);
        for tty in [false, true] {
            let args = json!({"command": "ls /proc/$$/fd; true", "tty": tty});
            let o = f.call("run_command", args).await;
            assert_eq!(o.status, Status::Ok, "shim {shim}, tty {tty}: {o:?}");
            let fds: Vec<&str> = o.content.split_whitespace().collect();
            assert_eq!(fds, ["0", "1", "2"], "shim {shim}, tty {tty}: {o:?}");
        }
    }
    drop(leaked);
}
