//! The daemon behind `toolvisor mcp`: found at the workspace's socket, or started as
//! the bridge's own child (`toolvisor serve` for that workspace) and stopped when the
//! bridge exits.
//!
//! Every start happens on one thread that lives as long as the bridge, so the child's
//! parent-death signal (SIGTERM: the daemon drains) fires when the bridge dies, not when
//! some pool thread retires. Readiness is the daemon's `serving` log line, read from
//! its stderr (which is passed on to ours, where MCP hosts collect server logs).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc as std_mpsc;
use std::time::Duration;

/// How long a started daemon has to say it serves.
const START_DEADLINE: Duration = Duration::from_secs(60);
/// How long a stopped daemon has to drain and exit before it is killed.
const STOP_DEADLINE: Duration = Duration::from_secs(20);

/// What `toolvisor serve` needs to serve the bridge's workspace.
#[derive(Clone, Debug)]
pub struct ServeCommand {
    pub exe: PathBuf,
    pub workspace: PathBuf,
    pub config: Option<PathBuf>,
    pub socket: Option<PathBuf>,
}

enum Request {
    Start(std_mpsc::Sender<Result<(), String>>),
    Stop(std_mpsc::Sender<()>),
}

/// Starts and stops the bridge's own daemon, from one long-lived thread.
#[derive(Clone)]
pub struct Daemon {
    tx: std_mpsc::Sender<Request>,
}

impl Daemon {
    pub fn new(cmd: ServeCommand) -> std::io::Result<Daemon> {
        let (tx, rx) = std_mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("toolvisor-mcp-daemon".into())
            .spawn(move || owner(cmd, rx))?;
        Ok(Daemon { tx })
    }

    /// Start a daemon unless ours still runs; returns once it serves (blocking).
    pub fn start(&self) -> Result<(), String> {
        let (reply, rx) = std_mpsc::channel();
        self.tx
            .send(Request::Start(reply))
            .map_err(|_| "the daemon thread is gone".to_string())?;
        rx.recv()
            .map_err(|_| "the daemon thread is gone".to_string())?
    }

    /// Stop the daemon we started, if any (blocking, bounded).
    pub fn stop(&self) {
        let (reply, rx) = std_mpsc::channel();
        if self.tx.send(Request::Stop(reply)).is_ok() {
            let _ = rx.recv();
        }
    }
}

/// The thread that owns the child.
fn owner(cmd: ServeCommand, rx: std_mpsc::Receiver<Request>) {
    let mut child: Option<Child> = None;
    while let Ok(req) = rx.recv() {
        match req {
            Request::Start(reply) => {
                if let Some(c) = child.as_mut()
                    && matches!(c.try_wait(), Ok(None))
                {
                    let _ = reply.send(Ok(()));
                    continue;
                }
                let started = spawn(&cmd);
                let result = started.as_ref().map(|_| ()).map_err(Clone::clone);
                child = started.ok();
                let _ = reply.send(result);
            }
            Request::Stop(reply) => {
                if let Some(c) = child.take() {
                    stop(c);
                }
                let _ = reply.send(());
            }
        }
    }
    if let Some(c) = child.take() {
        stop(c);
    }
}

/// Start `toolvisor serve` and wait until it serves.
fn spawn(cmd: &ServeCommand) -> Result<Child, String> {
    let mut c = Command::new(&cmd.exe);
    c.arg("serve").arg("--workspace").arg(&cmd.workspace);
    if let Some(config) = &cmd.config {
        c.arg("--config").arg(config);
    }
    if let Some(socket) = &cmd.socket {
        c.arg("--socket").arg(socket);
    }
    // Its readiness line must not be filtered out by the caller's RUST_LOG.
    if let Ok(filter) = std::env::var("RUST_LOG") {
        c.env(
            "RUST_LOG",
            format!("{filter},toolvisor_supervisor::serve=info"),
        );
    }
    // stdout is the MCP channel: the daemon must never write to it.
    c.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    // SAFETY: the hooks only make async-signal-safe calls between fork and exec.
    unsafe {
        c.pre_exec(crate::mcp::child::die_with_parent(libc::SIGTERM));
        c.pre_exec(crate::mcp::child::only_stdio);
    }
    let mut child = c
        .spawn()
        .map_err(|e| format!("cannot start `{} serve`: {e}", cmd.exe.display()))?;
    let Some(stderr) = child.stderr.take() else {
        return Err("the daemon's stderr is missing".into());
    };
    let (ready_tx, ready_rx) = std_mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("toolvisor-mcp-daemon-log".into())
        .spawn(move || pass_log_on(stderr, ready_tx))
        .map_err(|e| format!("cannot read the daemon's log: {e}"))?;
    match ready_rx.recv_timeout(START_DEADLINE) {
        Ok(()) => Ok(child),
        // The log ended without the line: the daemon exited, because another one
        // serves the workspace (then the caller connects to that one) or because it
        // could not start (its log, above, says why).
        Err(std_mpsc::RecvTimeoutError::Disconnected) => {
            let status = child.wait().map_err(|e| e.to_string())?;
            Err(format!(
                "`toolvisor serve` exited before serving ({status}); its log says why"
            ))
        }
        Err(std_mpsc::RecvTimeoutError::Timeout) => {
            stop(child);
            Err(format!(
                "the daemon did not start serving within {START_DEADLINE:?}"
            ))
        }
    }
}

/// Copy the daemon's log lines to our stderr; say when it serves.
fn pass_log_on(stderr: std::process::ChildStderr, ready: std_mpsc::Sender<()>) {
    let mut ready = Some(ready);
    for line in BufReader::new(stderr).lines().map_while(Result::ok) {
        let _ = writeln!(std::io::stderr(), "{line}");
        if line.contains("serving")
            && let Some(tx) = ready.take()
        {
            let _ = tx.send(());
        }
    }
}

/// SIGTERM (the daemon drains its calls), then SIGKILL past [`STOP_DEADLINE`].
fn stop(mut child: Child) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signalling our own child, which we have not reaped yet.
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let (tx, rx) = std_mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let status = child.wait();
        let _ = tx.send(());
        status
    });
    if rx.recv_timeout(STOP_DEADLINE).is_err() {
        // SAFETY: as above; the waiter has not reaped it (it is still running).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    let _ = waiter.join();
}
