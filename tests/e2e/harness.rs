//! Start a real server on a temp workspace and talk to it. Every wait has a deadline.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, ToolResult};

pub const BIN: &str = env!("CARGO_BIN_EXE_toolvisor");

/// The test MCP server (tests/mcp_server), an example of this package: `cargo test`
/// builds examples, a run filtered to the e2e tests does not, so it is built here once
/// per test process (a no-op when it is up to date; cargo holds no lock while tests
/// run). Its path.
pub fn test_mcp_server() -> &'static str {
    static BUILT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| built_example("toolvisor-test-mcp-server"))
}

/// The MCP conformance suite's fixture server (examples/mcp-conformance), built like
/// [`test_mcp_server`]. Its path.
pub fn conformance_fixtures() -> &'static str {
    static BUILT: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| built_example("toolvisor-conformance-fixtures"))
}

/// Build example `name` of this package; its path.
fn built_example(name: &str) -> String {
    let status = Command::new(env!("CARGO"))
        .args(["build", "--quiet", "--locked", "--example", name])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .expect("run cargo");
    assert!(status.success(), "cannot build the {name} example");
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target directory");
    let exe = target.join("debug/examples").join(name);
    assert!(exe.is_file(), "{} is missing", exe.display());
    exe.display().to_string()
}

/// Generous: a loaded 2-core CI machine starts a debug build slowly.
pub const START_DEADLINE: Duration = Duration::from_secs(30);

/// A running `toolvisor serve` and its workspace.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub child: Option<Child>,
    /// Lines the server logged, as they come.
    pub log: mpsc::Receiver<String>,
    pub log_seen: Vec<String>,
}

impl Server {
    /// A workspace with `config` as its toolvisor.toml, and the server on it.
    pub fn start(config: &str) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("toolvisor.toml"), config).expect("write config");
        Self::start_in(dir)
    }

    /// [`Server::start_in`] with extra variables in the server's environment.
    pub fn start_in_with_env(dir: tempfile::TempDir, env: &[(&str, &str)]) -> Server {
        let mut s = Self::serving(dir, env);
        s.wait_ready(START_DEADLINE);
        s
    }

    pub fn start_in(dir: tempfile::TempDir) -> Server {
        let mut s = Self::serving(dir, &[]);
        s.wait_ready(START_DEADLINE);
        s
    }

    /// `serve` on `dir` with extra environment, once it serves (workers may still start).
    fn serving(dir: tempfile::TempDir, env: &[(&str, &str)]) -> Server {
        let (child, log) = spawn_serve_env(dir.path(), env);
        let mut s = Server {
            dir,
            child: Some(child),
            log,
            log_seen: Vec::new(),
        };
        s.wait_log("serving", START_DEADLINE);
        s
    }

    pub fn ws(&self) -> &Path {
        self.dir.path()
    }

    pub fn socket(&self) -> PathBuf {
        self.ws().join(".toolvisor/toolvisor.sock")
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map(|c| c.id()).unwrap_or(0)
    }

    pub fn write(&self, rel: &str, content: &str) {
        let p = self.ws().join(rel);
        std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        std::fs::write(p, content).expect("write");
    }

    /// Wait for a log line containing `needle`.
    pub fn wait_log(&mut self, needle: &str, deadline: Duration) -> String {
        wait_line(&self.log, &mut self.log_seen, needle, deadline)
    }

    /// Wait until every worker is ready and the start's guard canary has ended (status
    /// says both).
    pub fn wait_ready(&mut self, deadline: Duration) {
        let end = Instant::now() + deadline;
        let rt = rt();
        loop {
            let ready = rt.block_on(async {
                let mut c = self.client().await;
                let id = "ready?".into();
                match c
                    .request(
                        &ClientMessage::Status {
                            id: "ready?".into(),
                        },
                        &id,
                    )
                    .await
                {
                    // Ready, and the guard canary the daemon runs at start (one command
                    // on an exec worker) has ended: a test starts on a settled daemon.
                    Ok(ServerMessage::Status {
                        workers, guards, ..
                    }) => workers.iter().all(|w| w.state == "ready") && !guards.verified.is_empty(),
                    _ => false,
                }
            });
            if ready {
                return;
            }
            assert!(
                Instant::now() < end,
                "workers not ready within {deadline:?}"
            );
            // Readiness has no event a client can wait on besides status: poll it.
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub async fn client(&self) -> Client {
        Client::connect(&self.socket(), "e2e", false)
            .await
            .expect("connect")
    }

    /// Call a tool on a fresh connection and return its result.
    pub async fn call(&self, tool: &str, args: Value) -> ToolResult {
        let mut c = self.client().await;
        call_on(&mut c, "c1", tool, args).await
    }

    /// SIGTERM and wait for the exit (SIGKILL past the deadline).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        wait_child(&mut child, Duration::from_secs(20))
    }

    pub fn kill9(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The worker pids of `group` from status.
    pub async fn worker_pids(&self, group: &str) -> Vec<u32> {
        self.worker_status()
            .await
            .iter()
            .filter(|w| w.group == group)
            .filter_map(|w| w.pid)
            .collect()
    }

    /// The `guards` of `status` now.
    pub async fn guards(&self) -> toolvisor_protocol::message::Guards {
        let mut c = self.client().await;
        let id = "guards".into();
        match c
            .request(
                &ClientMessage::Status {
                    id: "guards".into(),
                },
                &id,
            )
            .await
            .expect("status")
        {
            ServerMessage::Status { guards, .. } => guards,
            other => panic!("{other:?}"),
        }
    }

    /// Every worker as `status` reports it now.
    pub async fn worker_status(&self) -> Vec<toolvisor_protocol::message::WorkerStatus> {
        let mut c = self.client().await;
        let id = "st".into();
        match c
            .request(&ClientMessage::Status { id: "st".into() }, &id)
            .await
            .expect("status")
        {
            ServerMessage::Status { workers, .. } => workers,
            other => panic!("{other:?}"),
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(child.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            if wait_child(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

pub fn spawn_serve(ws: &Path) -> (Child, mpsc::Receiver<String>) {
    spawn_serve_env(ws, &[])
}

/// `toolvisor serve` on `ws` with extra environment, and its log lines as they come.
pub fn spawn_serve_env(ws: &Path, env: &[(&str, &str)]) -> (Child, mpsc::Receiver<String>) {
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg("--workspace")
        .arg(ws)
        .env("RUST_LOG", "info")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn toolvisor serve");
    let rx = stderr_lines(&mut child, "serve");
    (child, rx)
}

/// The lines a child writes to its (piped) stderr, as they come (`E2E_VERBOSE=1`
/// echoes them, prefixed with `tag`).
pub fn stderr_lines(child: &mut Child, tag: &'static str) -> mpsc::Receiver<String> {
    let stderr = child.stderr.take().expect("stderr is piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if std::env::var_os("E2E_VERBOSE").is_some() {
                eprintln!("[{tag}] {line}");
            }
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Wait for a line containing `needle` on `rx`, keeping every line seen in `seen`.
pub fn wait_line(
    rx: &mpsc::Receiver<String>,
    seen: &mut Vec<String>,
    needle: &str,
    deadline: Duration,
) -> String {
    if let Some(l) = seen.iter().find(|l| l.contains(needle)) {
        return l.clone();
    }
    let end = Instant::now() + deadline;
    loop {
        let left = end.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                seen.push(line.clone());
                if line.contains(needle) {
                    return line;
                }
            }
            Err(_) => panic!(
                "no line with {needle:?} within {deadline:?}; seen:\n{}",
                seen.join("\n")
            ),
        }
    }
}

/// Wait for a child with a deadline, by its exit (not by polling a timer).
pub fn wait_child(child: &mut Child, deadline: Duration) -> Option<std::process::ExitStatus> {
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
        let _ = tx.send(status);
    });
    match rx.recv_timeout(deadline) {
        Ok(Ok(nix::sys::wait::WaitStatus::Exited(_, code))) => {
            let _ = waiter.join();
            use std::os::unix::process::ExitStatusExt;
            Some(std::process::ExitStatus::from_raw(code << 8))
        }
        Ok(Ok(nix::sys::wait::WaitStatus::Signaled(_, sig, _))) => {
            let _ = waiter.join();
            use std::os::unix::process::ExitStatusExt;
            Some(std::process::ExitStatus::from_raw(sig as i32))
        }
        _ => None,
    }
}

pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

pub async fn call_on(c: &mut Client, id: &str, tool: &str, args: Value) -> ToolResult {
    let t = c
        .call(CallRequest::new(id, tool, args), |_, _| {})
        .await
        .expect("call");
    t.result.expect("a result")
}

/// A config that allows every command (for tests of other things than policy).
pub const ALLOW_ALL: &str = r#"
[[policy.rules]]
tool = "run_command"
action = "allow"

[[policy.rules]]
tool = "*"
action = "allow"
"#;

/// Run a future on a fresh runtime with a deadline.
pub fn block<F: std::future::Future>(deadline: Duration, f: F) -> F::Output {
    rt().block_on(async {
        tokio::time::timeout(deadline, f)
            .await
            .expect("test deadline passed")
    })
}

pub const T: Duration = Duration::from_secs(60);

// ---- Helpers for the exec and edit tests (appended). ----

/// A value unique to this test run, for `env` markers.
pub fn unique_marker(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("e2e-{tag}-{}-{n}-{nanos}", std::process::id())
}

/// Live (not zombie) processes whose environment has an entry containing `needle`.
pub fn procs_with_env(needle: &str) -> Vec<u32> {
    let me = std::process::id();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let needle = needle.as_bytes();
    let mut out = Vec::new();
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env
            .split(|&b| b == 0)
            .any(|entry| entry.windows(needle.len()).any(|w| w == needle))
            && pid_alive(pid)
        {
            out.push(pid);
        }
    }
    out
}

/// `comm` of a process ("?" when gone).
pub fn proc_comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map_or_else(|_| "?".into(), |s| s.trim().to_owned())
}

/// Whether `pid` exists and is not a zombie.
pub fn pid_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the `(comm)`, which may contain spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}

/// Wait until no live process carries `needle` in its environment. A foreign process's
/// death has no event to wait on: re-scan /proc with short pauses, up to `deadline`.
pub async fn wait_no_procs_with_env(
    needle: &str,
    deadline: Duration,
) -> Result<(), Vec<(u32, String)>> {
    let end = Instant::now() + deadline;
    loop {
        let left = procs_with_env(needle);
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= end {
            return Err(left.into_iter().map(|p| (p, proc_comm(p))).collect());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// Wait until at least `n` live processes named `comm` carry `needle` in their environment.
pub async fn wait_procs_with_env(
    needle: &str,
    comm: &str,
    n: usize,
    deadline: Duration,
) -> Vec<u32> {
    let end = Instant::now() + deadline;
    loop {
        let found: Vec<u32> = procs_with_env(needle)
            .into_iter()
            .filter(|&p| proc_comm(p) == comm)
            .collect();
        if found.len() >= n {
            return found;
        }
        assert!(
            Instant::now() < end,
            "no {n} {comm:?} processes with {needle:?} within {deadline:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Resident set size of `pid` in bytes (`VmRSS` of /proc/<pid>/status).
pub fn rss_bytes(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl Server {
    /// Like [`Server::start`], with extra variables in the server's environment.
    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("toolvisor.toml"), config).expect("write config");
        let mut s = Self::serving(dir, env);
        s.wait_ready(START_DEADLINE);
        s
    }

    /// Every worker of every group from status: (group, pid, state).
    pub async fn workers(&self) -> Vec<(String, Option<u32>, String)> {
        self.worker_status()
            .await
            .iter()
            .map(|w| (w.group.clone(), w.pid, w.state.clone()))
            .collect()
    }

    /// `restart` of `group` (the operator command); returns once its `ack` came, i.e.
    /// once every worker of the group was replaced (or failed).
    pub async fn restart(&self, group: &str) {
        let mut c = self.client().await;
        let id: toolvisor_protocol::Id = "restart".into();
        let ack = c
            .request(
                &ClientMessage::Restart {
                    id: id.clone(),
                    group: Some(group.into()),
                },
                &id,
            )
            .await
            .expect("restart");
        assert!(matches!(ack, ServerMessage::Ack { .. }), "{ack:?}");
    }

    /// Calls in flight on `group`'s workers now.
    pub async fn workers_in_flight(&self, group: &str) -> u32 {
        self.worker_status()
            .await
            .iter()
            .filter(|w| w.group == group)
            .map(|w| w.in_flight)
            .sum()
    }

    /// Wait until every worker of `group` is `ready` and none has a pid in `old`.
    pub async fn wait_group_back(&self, group: &str, old: &[u32], deadline: Duration) -> Vec<u32> {
        let end = Instant::now() + deadline;
        loop {
            let ws: Vec<_> = self
                .workers()
                .await
                .into_iter()
                .filter(|w| w.0 == group)
                .collect();
            let back = !ws.is_empty()
                && ws
                    .iter()
                    .all(|w| w.2 == "ready" && w.1.is_some_and(|p| !old.contains(&p)));
            if back {
                return ws.iter().filter_map(|w| w.1).collect();
            }
            assert!(
                Instant::now() < end,
                "{group} workers not back within {deadline:?}: {ws:?}"
            );
            // Readiness has no event a client can wait on besides status: poll it.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

/// `toolvisor --workspace WS ARGS…` with stdin closed, to its end.
pub fn toolvisor(ws: &Path, args: &[&str]) -> std::process::Output {
    Command::new(BIN)
        .arg("--workspace")
        .arg(ws)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run toolvisor")
}

/// `serve` with `config` on `dir` (and extra arguments and environment) must refuse to
/// start: exit 78, no socket. Its stderr.
pub fn serve_refuses_with(
    dir: &Path,
    config: &str,
    extra: &[&str],
    env: &[(&str, &str)],
) -> String {
    std::fs::write(dir.join("toolvisor.toml"), config).unwrap();
    let out = Command::new(BIN)
        .arg("serve")
        .args(extra)
        .arg("--workspace")
        .arg(dir)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(78), "{out:?}");
    assert!(!dir.join(".toolvisor/toolvisor.sock").exists());
    String::from_utf8_lossy(&out.stderr).into_owned()
}

impl Server {
    /// Like [`Server::start`], but waits only for the daemon to serve, not for every
    /// worker to be ready (some may never be: servers that hang or fail on purpose).
    pub fn start_serving(config: &str) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("toolvisor.toml"), config).expect("write config");
        Self::serving(dir, &[])
    }
}

// ---- Helpers for the CLI surface tests (appended). ----

impl Server {
    /// Start `serve` again on the same workspace (after [`Server::stop`] or a kill).
    pub fn serve_again(&mut self) {
        let (child, log) = spawn_serve(self.dir.path());
        self.child = Some(child);
        self.log = log;
        self.log_seen.clear();
        self.wait_log("serving", START_DEADLINE);
        self.wait_ready(START_DEADLINE);
    }
}

/// `toolvisor ARGS…` run in `dir` (no `--workspace`: it finds its workspace itself),
/// with `stdin` as its input, to its end.
pub fn toolvisor_in(dir: &Path, args: &[&str], stdin: &str) -> std::process::Output {
    use std::io::Write;
    let mut child = Command::new(BIN)
        .current_dir(dir)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run toolvisor");
    let mut input = child.stdin.take().expect("stdin");
    // A command that does not read its stdin may exit before we write: ignore EPIPE.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    child.wait_with_output().expect("toolvisor output")
}

/// The next `result` on `c` (of any call).
pub async fn next_result(c: &mut Client) -> ToolResult {
    let (_, m) = c
        .recv_matching(|m| matches!(m, ServerMessage::Result(_)).then_some(()))
        .await
        .expect("a result");
    match m {
        ServerMessage::Result(r) => r,
        other => panic!("{other:?}"),
    }
}

/// The interaction of the next `confirm_required` on `c`.
pub async fn next_interaction(c: &mut Client) -> String {
    let (ix, _) = c
        .recv_matching(|m| match m {
            ServerMessage::ConfirmRequired { interaction, .. } => Some(interaction.clone()),
            _ => None,
        })
        .await
        .expect("a confirm_required");
    ix
}

/// A copy of the Python client package (and the example workers) inside `ws`, so that
/// scripts run by the daemon find it wherever the checkout is: commands and sandboxed
/// workers get a private `/tmp`, so a checkout under `/tmp` is not theirs to read.
/// Returns the directory to put on `PYTHONPATH`.
pub fn python_client_in(ws: &Path) -> PathBuf {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = ws.join("pyclient");
    let pkg = lib.join("toolvisor");
    std::fs::create_dir_all(&pkg).expect("pyclient dir");
    let src = repo.join("clients/python/src/toolvisor");
    for e in std::fs::read_dir(&src).expect("python client sources") {
        let p = e.expect("entry").path();
        if p.extension().is_some_and(|x| x == "py") {
            std::fs::copy(&p, pkg.join(p.file_name().expect("name"))).expect("copy");
        }
    }
    std::fs::copy(repo.join("examples/workers/words.py"), lib.join("words.py"))
        .expect("copy words.py");
    lib
}

/// The defaults, with the confined tier off: every `run_command` asks unless a rule
/// allows it (for tests of asking, answering and grants, not of the tier).
pub const ASKING: &str = "[policy]\nconfined = \"ask\"\n";

/// Every record of the workspace's audit log, parsed (lines still being written are
/// left out).
pub fn audit_log(ws: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(ws.join(".toolvisor/audit.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Poll `check` until it gives a value or `deadline` passes (then panic with `what`):
/// for what the service does after a call's result (detached audit records, a
/// process's end). Every wait is bounded.
pub fn eventually<T>(deadline: Duration, what: &str, mut check: impl FnMut() -> Option<T>) -> T {
    let end = std::time::Instant::now() + deadline;
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(
            std::time::Instant::now() < end,
            "not within {deadline:?}: {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The `result` of call `id` on `c` (other messages wait in the backlog).
pub async fn result_of(c: &mut Client, id: &str) -> ToolResult {
    let id: toolvisor_protocol::Id = id.into();
    let (_, m) = c
        .recv_matching(|m| matches!(m, ServerMessage::Result(r) if r.id == id).then_some(()))
        .await
        .expect("a result");
    let ServerMessage::Result(r) = m else {
        unreachable!()
    };
    r
}

/// The tool names of a `tools` listing (any format: each tool has a `name`).
pub fn tool_names(listing: &Value) -> Vec<&str> {
    listing
        .as_array()
        .map(|a| a.iter().filter_map(|t| t["name"].as_str()).collect())
        .unwrap_or_default()
}
