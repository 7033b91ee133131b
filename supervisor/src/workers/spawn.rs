//! Starting worker processes from one long-lived thread.
//!
//! `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, and tokio's
//! blocking threads exit when idle; so every worker is forked from this one thread,
//! which lives as long as the supervisor. The child gets its own process group, the
//! death signal (then a check that its parent is still us), no new privileges, no core
//! dumps, a scrubbed environment, and its control socket as fd 3 — the only descriptor
//! past its standard streams it gets (docs/SANDBOX.md, "Descriptors").

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::mpsc as std_mpsc;

use nix::sys::socket::{AddressFamily, SockFlag, SockType, socketpair};
use tokio::sync::oneshot;
use toolvisor_protocol::worker::CONTROL_FD;

/// Environment variables a worker keeps from the supervisor's environment.
const BASE_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "LANG",
    "LC_ALL",
    "LC_CTYPE",
    "TZ",
    "TMPDIR",
    "USER",
    "LOGNAME",
    "RUST_LOG",
    "RUST_BACKTRACE",
    // `--log-format`, so workers log in the service's format (supervisor/src/cli.rs).
    "TOOLVISOR_LOG_FORMAT",
    // Forces the edit worker's named-temp-file fallback (workers/src/edit/atomic.rs).
    "TOOLVISOR_EDIT_NAMED_TEMPS",
    // Makes command sandboxes fail to set up, for tests (docs/SANDBOX.md).
    toolvisor_protocol::worker::SANDBOX_TEST_FAIL_VAR,
    // Addresses web_fetch treats as public, for tests (docs/PROTOCOL.md §12).
    toolvisor_protocol::worker::WEB_TEST_ALLOW_VAR,
];

/// A freshly started worker process.
#[derive(Debug)]
pub struct Spawned {
    /// The process, for its exit status.
    pub child: tokio::process::Child,
    /// Its pid: it leads its own process group, killed as a whole.
    pub pid: u32,
    /// The supervisor's end of the control socket.
    pub control: std::os::unix::net::UnixStream,
}

/// What to start.
#[derive(Clone, Debug)]
pub struct SpawnSpec {
    /// This binary: a built-in group's worker is `exe worker --group GROUP`.
    pub exe: PathBuf,
    /// The group (`--group` of a built-in worker).
    pub group: String,
    /// An external group's worker: its own command line (program first) instead.
    pub command: Option<Vec<String>>,
    /// Its working directory (the workspace).
    pub cwd: PathBuf,
    /// Extra variables to pass through (the group's `env_passthrough`).
    pub passthrough: Vec<String>,
    /// Variables set for the worker process itself (an external group's `env`).
    pub env: std::collections::BTreeMap<String, String>,
    /// Scheduling niceness: search walks are CPU-bound and must not starve the
    /// supervisor (a `ping` waits behind them on a 2-core machine otherwise).
    pub nice: i32,
    /// Why this worker must not be started at all (an external worker that cannot
    /// have its sandbox here): its start fails with this, and it is not retried.
    pub refused: Option<String>,
}

struct Request {
    spec: SpawnSpec,
    reply: oneshot::Sender<std::io::Result<Spawned>>,
}

/// Handle to the spawner thread.
#[derive(Clone, Debug)]
pub struct Spawner {
    tx: std_mpsc::Sender<Request>,
}

impl Spawner {
    /// Start the spawner thread; it forks with `runtime`'s process driver.
    pub fn start(runtime: tokio::runtime::Handle) -> std::io::Result<Spawner> {
        let (tx, rx) = std_mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("toolvisor-spawner".into())
            .spawn(move || {
                let _guard = runtime.enter();
                while let Ok(req) = rx.recv() {
                    let _ = req.reply.send(spawn(&req.spec));
                }
            })?;
        Ok(Spawner { tx })
    }

    /// Start a worker process on the spawner thread.
    pub async fn spawn(&self, spec: SpawnSpec) -> std::io::Result<Spawned> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(Request { spec, reply })
            .map_err(|_| std::io::Error::other("the spawner thread is gone"))?;
        rx.await
            .map_err(|_| std::io::Error::other("the spawner thread dropped the request"))?
    }
}

fn spawn(spec: &SpawnSpec) -> std::io::Result<Spawned> {
    let (ours, theirs) = socketpair(
        AddressFamily::Unix,
        SockType::Stream,
        None,
        SockFlag::SOCK_CLOEXEC,
    )?;
    let mut cmd = match spec.command.as_deref() {
        Some([program, args @ ..]) => {
            let mut c = tokio::process::Command::new(program);
            c.args(args);
            c
        }
        _ => {
            let mut c = tokio::process::Command::new(&spec.exe);
            c.arg("worker").arg("--group").arg(&spec.group);
            c
        }
    };
    cmd.current_dir(&spec.cwd)
        .env_clear()
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .process_group(0)
        .kill_on_drop(true);
    for key in BASE_ENV
        .iter()
        .copied()
        .chain(spec.passthrough.iter().map(String::as_str))
    {
        if let Some(v) = std::env::var_os(key) {
            cmd.env(key, v);
        }
    }
    cmd.envs(&spec.env);
    let child_fd = theirs.as_raw_fd();
    let parent = std::process::id() as libc::pid_t;
    let nice = spec.nice;
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls; it allocates nothing.
    unsafe {
        cmd.pre_exec(move || harden_child(child_fd, parent, nice));
    }
    let child = cmd.spawn()?;
    drop(theirs);
    let pid = child
        .id()
        .ok_or_else(|| std::io::Error::other("the worker exited at once"))?;
    Ok(Spawned {
        child,
        pid,
        control: std::os::unix::net::UnixStream::from(ours),
    })
}

/// Runs between fork and exec in the child.
fn harden_child(child_fd: i32, parent: libc::pid_t, nice: i32) -> std::io::Result<()> {
    // SAFETY: plain system calls on integers; async-signal-safe.
    unsafe {
        if child_fd == CONTROL_FD {
            let flags = libc::fcntl(CONTROL_FD, libc::F_GETFD);
            if flags < 0 || libc::fcntl(CONTROL_FD, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        } else if libc::dup2(child_fd, CONTROL_FD) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // The control socket is the only descriptor past the standard streams the worker
        // gets: whatever else the supervisor holds (other workers' links, a descriptor
        // its own parent leaked) is closed by the exec.
        toolvisor_os::fds::cloexec_from(CONTROL_FD + 1)?;
        if libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
        if libc::getppid() != parent {
            return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let zero = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::setrlimit(libc::RLIMIT_CORE, &zero) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        // Best effort: a lower priority is a nicety, not a guard.
        if nice != 0 {
            libc::setpriority(libc::PRIO_PROCESS, 0, nice);
        }
    }
    Ok(())
}
