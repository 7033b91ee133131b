//! Starting a command (under the `toolvisor reap` shim, or directly as a fallback)
//! with its input (nothing, a pipe, or a terminal) and its control channel, and the one
//! kill path every ending shares: SIGTERM, SIGKILL after the grace. A CPU time limit
//! measured on the command's cgroup takes the same path. A foreground command may also
//! be let go while it runs (it yields to the background).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::cgroup::{CommandCgroup, Joiner};
use super::control::Control;
use super::input::{Input, Terminal, stdin_pipe};
use super::output::Pipes;
use crate::ToolError;
use crate::reap::ShimArgs;
use crate::reap::report::Report;
use crate::sandbox::spec::{Rlimits, SandboxSpec};
use toolvisor_protocol::worker::WorkerInit;

mod loopback;
pub mod server;
mod spare;
mod supervise;

pub(crate) use loopback::{Holder, Loopbacks};

pub(crate) use spare::Spares;
pub(crate) use supervise::{Bounds, CpuWatch, Ended, Stop, sleep_until_opt, supervise};

/// SIGTERM → SIGKILL grace (docs/PROTOCOL.md, deadlines and cancel).
pub(crate) const GRACE: Duration = Duration::from_secs(2);
/// How long the worker waits past the grace before it SIGKILLs the shim itself (the
/// shim needs a moment after its own SIGKILL round to reap and exit).
const SHIM_BACKSTOP: Duration = Duration::from_secs(6);
/// After the command exits, how long streaming may hold up the drain; then the rest
/// is drained without streaming, for at most [`LAST_DRAIN`].
const STREAM_DRAIN: Duration = Duration::from_secs(2);
const LAST_DRAIN: Duration = Duration::from_secs(1);

/// The shell a command runs in: bash, the language the policy parses, without any
/// start-up file (non-login, non-interactive, so no aliases and no history expansion).
pub(crate) const SHELL: [&str; 4] = ["bash", "--noprofile", "--norc", "-c"];

/// How commands are started.
#[derive(Clone, Debug)]
pub(crate) enum Launcher {
    /// `program prefix... [shim args] -- bash … -c CMD`: the subreaper shim.
    Shim(Box<ShimLauncher>),
    /// `bash … -c CMD` in its own process group: no subreaper, so `setsid` or double-forked
    /// processes can escape. Only when no shim binary is known.
    Direct,
}

/// The shim and what it is told for every command.
#[derive(Clone, Debug)]
pub(crate) struct ShimLauncher {
    pub program: PathBuf,
    pub prefix: Vec<OsString>,
    /// Pass the shim arguments JSON-encoded in this variable instead (tests host
    /// the shim in the test binary, whose command line libtest owns).
    pub args_env: Option<&'static str>,
    /// Landlock allow-list the shim applies to the command (`--confine`).
    pub writable: Vec<PathBuf>,
    /// The namespace sandbox (its per-command parts filled in at each start); None:
    /// the fallback, Landlock and the shim only.
    pub sandbox: Option<SandboxSpec>,
    pub rlimits: Rlimits,
}

impl ShimLauncher {
    /// `init.exec.exe reap` as the exec worker runs every command: Landlock's
    /// allow-list, the namespace sandbox when `namespaces`, the limits (cgroups, when
    /// `cgroups`, bound memory and processes instead of rlimits).
    pub(crate) fn for_init(init: &WorkerInit, cgroups: bool, namespaces: bool) -> ShimLauncher {
        let settings = &init.exec.sandbox;
        ShimLauncher {
            program: init.exec.exe.clone(),
            prefix: vec!["reap".into()],
            args_env: None,
            writable: crate::sandbox::command_writable(init),
            sandbox: namespaces.then(|| SandboxSpec::template(init)),
            rlimits: super::limits::rlimits(&settings.limits, cgroups, namespaces),
        }
    }

    /// The shim's arguments for a command of `instance` in `cwd`, without the command.
    /// `stage`: a staged command's staging directory; `widen`: what the call's sandbox
    /// gains.
    fn args(
        &self,
        (instance, cwd, network): (&str, &Path, bool),
        fds: ShimFds,
        (stage, widen): (Option<&Path>, &Widen),
    ) -> ShimArgs {
        let mut write = self.writable.clone();
        write.extend(widen.writable.iter().cloned());
        ShimArgs {
            ppid: Some(std::process::id() as i32),
            instance: (!instance.is_empty()).then(|| instance.to_owned()),
            grace: GRACE,
            confine: true,
            write,
            sandbox: self.sandbox.as_ref().map(|t| {
                let mut s = SandboxSpec {
                    netns: fds.netns.filter(|_| !network),
                    reveal: widen.reveal.clone(),
                    ..t.for_command(cwd, network, stage)
                };
                s.writable.extend(widen.writable.iter().cloned());
                s
            }),
            rlimits: self.rlimits,
            report_fd: fds.report,
            control_fd: fds.control,
            tty: None,
            spare: false,
            holder: false,
            keep_fds: Vec::new(),
            argv: Vec::new(),
        }
    }

    /// The shim's command line for `a`, with `env` as its whole environment.
    fn command(&self, a: &ShimArgs, env: &BTreeMap<String, String>) -> Result<Command, ToolError> {
        let args = a.to_args().map_err(ToolError::internal)?;
        let mut c = Command::new(&self.program);
        c.args(&self.prefix).env_clear().envs(env);
        match self.args_env {
            Some(var) => {
                let json =
                    serde_json::to_string(&args).map_err(|e| ToolError::internal(e.to_string()))?;
                c.env(var, json);
            }
            None => {
                c.args(&args);
            }
        }
        Ok(c)
    }

    /// [`Self::command`] for a shim that runs nothing of a person's: no standard
    /// streams, a process group of its own, killed when dropped (a spare, a holder).
    fn detached(&self, a: &ShimArgs, env: &BTreeMap<String, String>) -> Result<Command, ToolError> {
        let mut cmd = self.command(a, env)?;
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        Ok(cmd)
    }
}

/// The report pipe and the control channel of a shim about to start: the worker's
/// ends, and the shim's (moved out of the way of fixed small numbers).
fn shim_channels() -> std::io::Result<(std::io::PipeReader, OwnedFd, Control, OwnedFd)> {
    let (r, w) = std::io::pipe()?;
    let (control, end) = Control::pair()?;
    Ok((r, high_fd(OwnedFd::from(w))?, control, high_fd(end)?))
}

/// What to run.
pub(crate) struct Spec<'a> {
    pub command: &'a str,
    pub env: &'a BTreeMap<String, String>,
    /// The working directory, opened beneath its root (`fchdir` in the child: no race
    /// between resolving and entering it).
    pub cwd: &'a OwnedFd,
    /// Its host path: the sandbox enters it again inside the new root (and checks it
    /// is the same directory).
    pub cwd_path: &'a Path,
    pub instance: &'a str,
    /// Give stdout and stderr one pipe, so the output keeps the exact order the command
    /// wrote it in (two pipes can only approximate it). Only streaming, which labels
    /// each chunk with its stream, needs them apart.
    pub merged: bool,
    /// The rule that allowed the call gives the command the host's network.
    pub network: bool,
    /// The session's loopback the command joins (else, without `network`, it gets a
    /// network namespace of its own).
    pub loopback: Option<&'a Holder>,
    /// The command's cgroup, joined by the shim before it starts.
    pub cgroup: Option<&'a CommandCgroup>,
    /// Give the command a pipe for its standard input (else `/dev/null`; a terminal
    /// is its input when it has one).
    pub stdin_pipe: bool,
    /// Run it in a terminal of (rows, columns).
    pub tty: Option<(u16, u16)>,
    /// Stage it: its workspace roots are overlays whose writes are held in this
    /// staging directory (never in a spare, whose mounts are built already).
    pub stage: Option<&'a Path>,
    /// What the call's sandbox gains (never in a spare either).
    pub widen: &'a Widen,
}

/// What a call widens its sandbox by, as the policy granted it (`run_command`'s
/// `writable` and `reveal`): host paths, `~` expanded and checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Widen {
    /// More paths it may write.
    pub writable: Vec<PathBuf>,
    /// Hidden paths it may see.
    pub reveal: Vec<PathBuf>,
}

impl Widen {
    /// Whether it widens nothing.
    pub(crate) fn is_empty(&self) -> bool {
        self.writable.is_empty() && self.reveal.is_empty()
    }
}

/// A started command.
pub(crate) struct Running {
    pub child: Child,
    pub pid: u32,
    pub pipes: Pipes,
    /// Signals for the command's process group (and, first, its terminal); taken by
    /// the job the command becomes.
    control: Option<Control>,
    /// The write end of its standard-input pipe, when it has one.
    pub stdin: Option<Input>,
    /// Whether it runs in a terminal.
    pub tty: bool,
    /// The terminal's master side when the worker opened it itself (no shim).
    master: Option<OwnedFd>,
    /// Where the shim writes its [`Report`].
    report: ReportPipe,
    /// The command's egress proxy, when its network is a domain list; it stops taking
    /// connections when the command is retired.
    pub(crate) egress: Option<super::egress::Proxy>,
    shim: bool,
    /// It runs in its own namespaces (then the report tells when all of it is dead).
    namespaces: bool,
}

/// The shim's report pipe, read as the report comes.
#[derive(Default)]
pub(crate) struct ReportPipe {
    rx: Option<tokio::net::unix::pipe::Receiver>,
    bytes: Vec<u8>,
    read: Option<Option<Report>>,
}

/// The most of a report read.
const REPORT_MAX: usize = 64 * 1024;

impl ReportPipe {
    fn new(r: std::io::PipeReader) -> Self {
        let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(r)).ok();
        ReportPipe {
            rx,
            ..ReportPipe::default()
        }
    }

    /// Whether [`ReportPipe::next`] may still give a report.
    fn pending(&self) -> bool {
        self.rx.is_some() && self.read.is_none()
    }

    /// Wait for the report's line (or the pipe's end); cancellation-safe (what was
    /// read stays).
    async fn next(&mut self) -> Option<Report> {
        use tokio::io::AsyncReadExt;
        if let Some(rx) = self.rx.as_mut() {
            let mut buf = [0u8; 1024];
            while !self.bytes.contains(&b'\n') && self.bytes.len() < REPORT_MAX {
                match rx.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.bytes.extend_from_slice(&buf[..n]),
                }
            }
        }
        self.finish()
    }

    /// The report from what was read, plus what can be read without waiting.
    fn now(&mut self) -> Option<Report> {
        if let (None, Some(rx)) = (&self.read, self.rx.as_ref()) {
            let mut buf = [0u8; 1024];
            while self.bytes.len() < REPORT_MAX {
                match rx.try_read(&mut buf) {
                    Ok(n @ 1..) => self.bytes.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
        }
        self.finish()
    }

    fn finish(&mut self) -> Option<Report> {
        self.read
            .get_or_insert_with(|| Report::parse(&self.bytes))
            .clone()
    }
}

impl Running {
    /// The command's control channel, for the job it becomes (once).
    pub(crate) fn take_control(&mut self) -> Option<Control> {
        self.control.take()
    }

    /// For a command in a terminal: wait (until `deadline`) for the terminal's master
    /// side, read the command's output from it from now on, and return it as the
    /// command's input. None without a terminal, or when the command never started
    /// (its runner ended first: the report says why).
    pub(crate) async fn attach_terminal(
        &mut self,
        deadline: Instant,
    ) -> Result<Option<Input>, ToolError> {
        if !self.tty {
            return Ok(None);
        }
        let master = match (self.master.take(), &self.control) {
            (Some(m), _) => Some(m),
            (None, Some(c)) => c.terminal(deadline).await,
            (None, None) => None,
        };
        let Some(master) = master else {
            return Ok(None);
        };
        let (term, reader) = Terminal::new(master)
            .map_err(|e| ToolError::internal(format!("cannot use the terminal: {e}")))?;
        self.pipes.add_terminal(reader)?;
        Ok(Some(Input::Terminal(term)))
    }

    /// The shim's report, once it has written it (None: it wrote none, e.g. it was
    /// killed, or no shim runs the command).
    pub(crate) fn report(&mut self) -> Option<Report> {
        self.report.now()
    }

    /// Let go of a command that ended: its shim reaped and its cgroup removed. In its
    /// own namespaces everything the command started is dead already (the shim reaped
    /// the PID namespace's first process before its report, and a namespace's
    /// processes die with that one), so this happens in the background, after the
    /// call's result; otherwise the cgroup is emptied (killed) and removed before this
    /// returns, the last guard against a process that escaped the shim.
    pub(crate) async fn retire(self, cgroup: Option<CommandCgroup>) {
        let Running {
            mut child,
            namespaces,
            ..
        } = self;
        let done = async move {
            if tokio::time::timeout(SHIM_BACKSTOP, child.wait())
                .await
                .is_err()
            {
                let _ = child.start_kill();
            }
            if let Some(cg) = cgroup {
                let _ = tokio::task::spawn_blocking(move || drop(cg)).await;
            }
        };
        if namespaces {
            tokio::spawn(done);
        } else {
            done.await;
        }
    }
}

impl Launcher {
    pub(crate) fn is_shim(&self) -> bool {
        matches!(self, Launcher::Shim(_))
    }

    /// The workspace roots a staged command's overlays cover (the sandbox's, in
    /// order); None when commands get no namespaces, so none can be staged.
    pub(crate) fn stage_roots(&self) -> Option<&[PathBuf]> {
        match self {
            Launcher::Shim(s) => s.sandbox.as_ref().map(|t| t.roots.as_slice()),
            Launcher::Direct => None,
        }
    }

    /// Whether commands get their own namespaces.
    pub(crate) fn namespaces(&self) -> bool {
        matches!(self, Launcher::Shim(s) if s.sandbox.is_some())
    }

    /// Start `spec`. Must be called from a long-lived thread (a runtime worker thread,
    /// not `spawn_blocking`): the parent-death signal fires when the forking thread exits.
    pub(crate) fn spawn(&self, spec: &Spec<'_>) -> Result<Running, ToolError> {
        let pipe_err = |e: std::io::Error| ToolError::internal(format!("cannot make a pipe: {e}"));
        let (report_read, report_write, control, control_end) = match self {
            Launcher::Shim(_) => {
                let (r, w, control, end) = shim_channels().map_err(pipe_err)?;
                (Some(r), Some(w), Some(control), Some(end))
            }
            Launcher::Direct => (None, None, None, None),
        };
        let fds = ShimFds {
            report: report_write.as_ref().map(|w| w.as_raw_fd()),
            control: control_end.as_ref().map(|c| c.as_raw_fd()),
            netns: spec.loopback.filter(|_| !spec.network).map(Holder::fds),
        };
        let mut cmd = self.command(spec, fds)?;
        // Without a shim the worker opens the terminal itself.
        let direct_tty = match (self, spec.tty) {
            (Launcher::Direct, Some((rows, cols))) => {
                Some(crate::reap::control::open_terminal(rows, cols).map_err(ToolError::internal)?)
            }
            _ => None,
        };
        let merged_read = if let Some((_, slave)) = &direct_tty {
            let dup = |s: &OwnedFd| s.try_clone().map_err(pipe_err);
            cmd.stdout(Stdio::from(dup(slave)?))
                .stderr(Stdio::from(dup(slave)?));
            None
        } else if spec.merged || spec.tty.is_some() {
            let (read, write) = std::io::pipe().map_err(pipe_err)?;
            let write2 = write.try_clone().map_err(pipe_err)?;
            cmd.stdout(Stdio::from(write)).stderr(Stdio::from(write2));
            Some(read)
        } else {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            None
        };
        let stdin = match (&direct_tty, spec.stdin_pipe && spec.tty.is_none()) {
            (Some((_, slave)), _) => {
                cmd.stdin(Stdio::from(slave.try_clone().map_err(pipe_err)?));
                None
            }
            (None, true) => {
                let (read, tx) = stdin_pipe().map_err(pipe_err)?;
                cmd.stdin(Stdio::from(read));
                Some(Input::Pipe(tx))
            }
            (None, false) => {
                cmd.stdin(Stdio::null());
                None
            }
        };
        if direct_tty.is_none() {
            cmd.process_group(0);
        }
        cmd.kill_on_drop(true);
        let child_setup = ChildSetup {
            cwd: spec.cwd.as_raw_fd(),
            keep: fds.keep(),
            cgroup: spec.cgroup.map(CommandCgroup::joiner),
            terminal: direct_tty.is_some(),
        };
        pre_exec(&mut cmd, child_setup, self.is_shim());
        let mut child = cmd
            .spawn()
            .map_err(|e| ToolError::internal(format!("cannot start the command: {e}")))?;
        drop((report_write, control_end));
        // Never 0: killpg(0) would signal the worker's own group.
        let pid = child
            .id()
            .filter(|&p| p > 0)
            .ok_or_else(|| ToolError::internal("the command exited before it was seen"))?;
        // `cmd` holds the write ends until it drops: drop it so EOF can come.
        drop(cmd);
        let pipes = match merged_read {
            Some(read) => Pipes::merged(read)?,
            None => Pipes::new(child.stdout.take(), child.stderr.take()),
        };
        let control = control.unwrap_or(Control::Direct(Pid::from_raw(pid as i32)));
        Ok(Running {
            child,
            pid,
            pipes,
            control: Some(control),
            stdin,
            tty: spec.tty.is_some(),
            master: direct_tty.map(|(master, _)| master),
            report: report_read.map(ReportPipe::new).unwrap_or_default(),
            egress: None,
            shim: self.is_shim(),
            namespaces: self.namespaces(),
        })
    }

    fn command(&self, spec: &Spec<'_>, fds: ShimFds) -> Result<Command, ToolError> {
        let sh = SHELL.iter().copied().chain([spec.command]);
        match self {
            Launcher::Direct => {
                let mut c = Command::new(SHELL[0]);
                c.args(&SHELL[1..])
                    .arg(spec.command)
                    .env_clear()
                    .envs(spec.env);
                Ok(c)
            }
            Launcher::Shim(s) => {
                let a = ShimArgs {
                    tty: spec.tty,
                    argv: sh.map(str::to_owned).collect(),
                    ..s.args(
                        (spec.instance, spec.cwd_path, spec.network),
                        fds,
                        (spec.stage, spec.widen),
                    )
                };
                s.command(&a, spec.env)
            }
        }
    }
}

/// In the child before exec: enter the cwd, join the cgroup, let every descriptor but
/// the standard streams close at the exec except the report pipe and the control channel
/// (handed to the shim; without a shim, none: the command is exec'd here), take the
/// terminal (no shim), arm the
/// parent-death signal and check the worker did not die before it was armed.
/// Async-signal-safe calls only.
fn pre_exec(cmd: &mut Command, setup: ChildSetup, shim: bool) {
    let parent = nix::unistd::getpid();
    // The shim turns SIGTERM into an orderly tree kill; a bare `sh` gets SIGKILL.
    let death = if shim {
        Signal::SIGTERM
    } else {
        Signal::SIGKILL
    };
    // SAFETY: fchdir, fcntl, open/write (the cgroup join), prctl and getppid are
    // async-signal-safe; no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fchdir(setup.cwd) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Nothing of the worker's past the standard streams (its link to the
            // supervisor, other commands' pipes) crosses the exec; then the two the
            // shim is handed are let through again.
            toolvisor_os::fds::cloexec_from(toolvisor_os::fds::FIRST_NON_STDIO)?;
            for fd in setup.keep.into_iter().flatten() {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if setup.terminal {
                crate::reap::control::take_terminal()?;
            }
            if let Some(j) = &setup.cgroup {
                j.join_in_child()?;
            }
            nix::sys::prctl::set_pdeathsig(death)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// `fd` moved to a number of 10 or more, out of the way of anything a shim or a test
/// wrapper sets up at fixed small numbers (close-on-exec, like the original).
fn high_fd(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(&fd, 10).map_err(std::io::Error::from)
}

/// The descriptors the shim gets (numbers in the child, kept across `exec`).
#[derive(Clone, Copy, Debug)]
struct ShimFds {
    report: Option<i32>,
    control: Option<i32>,
    /// The session loopback's user and network namespaces.
    netns: Option<[i32; 2]>,
}

impl ShimFds {
    /// Every descriptor to keep open across `exec`.
    fn keep(&self) -> [Option<i32>; 4] {
        let [user, net] = self.netns.map_or([None, None], |[u, n]| [Some(u), Some(n)]);
        [self.report, self.control, user, net]
    }
}

/// What the forked child does before `exec` (see [`Launcher::pre_exec`]).
struct ChildSetup {
    cwd: i32,
    /// The report pipe's write end, the control channel and the session loopback's
    /// namespaces, to keep across `exec`.
    keep: [Option<i32>; 4],
    cgroup: Option<Joiner>,
    /// Make the terminal on the standard streams the controlling one (no shim).
    terminal: bool,
}
