//! `toolvisor reap [OPTIONS] -- CMD...`: the single-threaded shim every command runs
//! under (see docs/SANDBOX.md).
//!
//! Why a separate process: a child subreaper must reap whatever it adopts, and
//! `waitpid(-1)` inside the tokio worker would steal the exit statuses tokio waits for;
//! and a new user namespace can only be entered by a single-threaded process. This
//! shim has no runtime and one thread of its own.
//!
//! What it does, in both modes:
//! 1. becomes a child subreaper, gets SIGTERM as its parent-death signal (and checks
//!    `--ppid` against the race before the `prctl`);
//! 2. sets the command's rlimits (`--rlimits`);
//! 3. when the command exits, or the shim gets SIGTERM/SIGINT/SIGHUP (cancel, timeout,
//!    worker death), kills everything the command started (TERM, then KILL after the
//!    grace), and exits with the command's status: the same exit code, or death by the
//!    same signal, so the worker sees exactly what the command did;
//! 4. writes a [`report::Report`] (resources used, or why the sandbox could not be set
//!    up) to `--report-fd`;
//! 5. serves the command's [`control`] channel (`--control-fd`): signals for its process
//!    group, and with `--tty ROWSxCOLS` the terminal it runs in, opened where the command
//!    runs (in the sandbox: its own `devpts` instance) and made its controlling terminal.
//!
//! With `--sandbox SPEC` ([`pidns`]) the command runs in new namespaces and its tree is
//! the PID namespace; without ([`tree`]), under Landlock (`--confine --write P...`)
//! with the tree found through `/proc`.
//!
//! With `--holder` ([`holder`]) it runs no command: it holds one session's loopback (a
//! user and a network namespace with `lo` up) that the session's commands join, because
//! a shim can join a namespace only by a descriptor of it, and something must keep it
//! alive between commands.

pub mod control;
pub mod holder;
mod pidns;
pub mod report;
mod signals;
pub mod spare;
mod tree;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, sigaction};
use nix::sys::wait::WaitStatus;
use nix::unistd::{Pid, getpid, getppid};

use crate::SandboxError;
use crate::spec::{Rlimits, SandboxSpec};
pub use signals::{SelfPipe, Woken};
pub use tree::{descendants, descendants_of_each, kill_tree};

/// Exit code when the shim's own arguments are wrong (EX_USAGE).
const EX_USAGE: i32 = 64;
/// Exit code when the command cannot be started (like a shell).
const EX_NOEXEC: i32 = 127;
/// Exit code when the sandbox or the limits cannot be set up: the command never ran.
pub const EX_SETUP: i32 = 125;
/// The environment marker the supervisor looks for at start to kill leftovers.
pub use toolvisor_protocol::worker::MARKER_VAR;

mod status;

use status::finish;
/// Default grace between SIGTERM and SIGKILL (docs/PROTOCOL.md §9).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);

/// Parsed `toolvisor reap` arguments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShimArgs {
    /// The worker's pid: if our parent is already someone else, the worker died
    /// before our parent-death signal was armed.
    pub ppid: Option<i32>,
    /// Value of `TOOLVISOR_INSTANCE` for the command.
    pub instance: Option<String>,
    /// How long the command has between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// Apply a Landlock write allow-list (`paths`) before starting the command.
    pub confine: bool,
    /// The paths Landlock lets the command write.
    pub write: Vec<PathBuf>,
    /// Run the command in new namespaces, with this view of the file system.
    pub sandbox: Option<SandboxSpec>,
    /// Resource limits applied before the command starts.
    pub rlimits: Rlimits,
    /// Where to write the [`report::Report`] (an inherited pipe).
    pub report_fd: Option<i32>,
    /// The [`control`] channel (an inherited `SOCK_SEQPACKET` socket).
    pub control_fd: Option<i32>,
    /// Run the command in a new terminal of (rows, columns).
    pub tty: Option<(u16, u16)>,
    /// Build the sandbox now and wait for the command on the control channel
    /// ([`spare`]); `argv` is then empty.
    pub spare: bool,
    /// Hold a session's loopback instead of running a command ([`holder`]); `argv` is
    /// then empty.
    pub holder: bool,
    /// Descriptors (inherited, at these numbers) the command gets besides its standard
    /// streams: an external worker's control socket, fd 3.
    pub keep_fds: Vec<i32>,
    /// The command and its arguments.
    pub argv: Vec<String>,
}

/// Why the shim's command line could not be read (or written: an argument that does
/// not serialise). The shim prints it and exits with `EX_USAGE`.
#[derive(Debug, thiserror::Error)]
pub enum ShimArgsError {
    /// An option given without its value.
    #[error("{0} needs a value")]
    MissingValue(&'static str),
    /// A number that does not parse.
    #[error("bad {0}")]
    BadNumber(&'static str),
    /// JSON that does not parse as the option's type.
    #[error("bad {option}: {source}")]
    BadJson {
        /// The option.
        option: &'static str,
        /// What the parser said.
        #[source]
        source: serde_json::Error,
    },
    /// An option the shim does not have.
    #[error("unknown option {0:?}")]
    UnknownOption(String),
    /// No command after `--` (or one with `--spare`).
    #[error(
        "usage: toolvisor reap [OPTIONS] -- COMMAND [ARGS...] | toolvisor reap [OPTIONS] --spare -- | toolvisor reap [OPTIONS] --holder --"
    )]
    NoCommand,
    /// A part of the arguments that does not serialise.
    #[error(transparent)]
    Encode(#[from] serde_json::Error),
}

impl ShimArgs {
    /// The command line [`parse`] reads back (without the program name).
    pub fn to_args(&self) -> Result<Vec<String>, ShimArgsError> {
        let mut out = Vec::new();
        if let Some(p) = self.ppid {
            out.extend(["--ppid".to_owned(), p.to_string()]);
        }
        if let Some(i) = &self.instance {
            out.extend(["--instance".to_owned(), i.clone()]);
        }
        out.extend(["--grace-ms".to_owned(), self.grace.as_millis().to_string()]);
        if self.confine {
            out.push("--confine".to_owned());
        }
        for w in &self.write {
            out.extend(["--write".to_owned(), w.to_string_lossy().into_owned()]);
        }
        if let Some(s) = &self.sandbox {
            out.extend(["--sandbox".to_owned(), to_json(s)?]);
        }
        if !self.rlimits.is_empty() {
            out.extend(["--rlimits".to_owned(), to_json(&self.rlimits)?]);
        }
        if let Some(fd) = self.report_fd {
            out.extend(["--report-fd".to_owned(), fd.to_string()]);
        }
        if let Some(fd) = self.control_fd {
            out.extend(["--control-fd".to_owned(), fd.to_string()]);
        }
        if let Some((rows, cols)) = self.tty {
            out.extend(["--tty".to_owned(), format!("{rows}x{cols}")]);
        }
        if self.spare {
            out.push("--spare".to_owned());
        }
        if self.holder {
            out.push("--holder".to_owned());
        }
        for fd in &self.keep_fds {
            out.extend(["--keep-fd".to_owned(), fd.to_string()]);
        }
        out.push("--".to_owned());
        out.extend(self.argv.iter().cloned());
        Ok(out)
    }
}

fn to_json<T: serde::Serialize>(v: &T) -> Result<String, ShimArgsError> {
    Ok(serde_json::to_string(v)?)
}

/// Parse `[--ppid N] [--instance ID] [--grace-ms N] [--confine] [--write P]...
/// [--sandbox JSON] [--rlimits JSON] [--report-fd N] [--control-fd N] [--tty RxC] --
/// CMD...`.
pub fn parse(args: Vec<String>) -> Result<ShimArgs, ShimArgsError> {
    let mut out = ShimArgs {
        grace: DEFAULT_GRACE,
        ..ShimArgs::default()
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = |name: &'static str| it.next().ok_or(ShimArgsError::MissingValue(name));
        match a.as_str() {
            "--" => {
                out.argv = it.collect();
                break;
            }
            "--ppid" => {
                out.ppid = Some(
                    value("--ppid")?
                        .parse()
                        .map_err(|_| ShimArgsError::BadNumber("--ppid"))?,
                )
            }
            "--instance" => out.instance = Some(value("--instance")?),
            "--grace-ms" => {
                let ms: u64 = value("--grace-ms")?
                    .parse()
                    .map_err(|_| ShimArgsError::BadNumber("--grace-ms"))?;
                out.grace = Duration::from_millis(ms);
            }
            "--confine" => out.confine = true,
            "--write" => out.write.push(PathBuf::from(value("--write")?)),
            "--sandbox" => {
                let v = value("--sandbox")?;
                out.sandbox =
                    Some(
                        serde_json::from_str(&v).map_err(|source| ShimArgsError::BadJson {
                            option: "--sandbox",
                            source,
                        })?,
                    );
            }
            "--rlimits" => {
                let v = value("--rlimits")?;
                out.rlimits =
                    serde_json::from_str(&v).map_err(|source| ShimArgsError::BadJson {
                        option: "--rlimits",
                        source,
                    })?;
            }
            "--report-fd" => {
                let v = value("--report-fd")?;
                out.report_fd = Some(
                    v.parse()
                        .map_err(|_| ShimArgsError::BadNumber("--report-fd"))?,
                );
            }
            "--control-fd" => {
                let v = value("--control-fd")?;
                out.control_fd = Some(
                    v.parse()
                        .map_err(|_| ShimArgsError::BadNumber("--control-fd"))?,
                );
            }
            "--tty" => {
                let v = value("--tty")?;
                out.tty =
                    Some(parse_size(&v).ok_or(ShimArgsError::BadNumber("--tty (ROWSxCOLS)"))?);
            }
            "--spare" => out.spare = true,
            "--holder" => out.holder = true,
            "--keep-fd" => {
                let fd: i32 = value("--keep-fd")?
                    .parse()
                    .map_err(|_| ShimArgsError::BadNumber("--keep-fd"))?;
                if fd < toolvisor_os::fds::FIRST_NON_STDIO {
                    return Err(ShimArgsError::BadNumber("--keep-fd (3 or more)"));
                }
                out.keep_fds.push(fd);
            }
            other => return Err(ShimArgsError::UnknownOption(other.to_owned())),
        }
    }
    if out.argv.is_empty() != (out.spare || out.holder) {
        return Err(ShimArgsError::NoCommand);
    }
    Ok(out)
}

/// `24x80` → (24, 80); both at least 1.
fn parse_size(v: &str) -> Option<(u16, u16)> {
    let (r, c) = v.split_once('x')?;
    let (r, c) = (r.parse().ok()?, c.parse().ok()?);
    (r > 0 && c > 0).then_some((r, c))
}

/// Entry point of `toolvisor reap`; returns the exit code (or does not return when
/// the command died by a signal: the shim then dies by the same signal).
pub fn main(args: Vec<String>) -> i32 {
    match parse(args) {
        Ok(a) => run(&a),
        Err(msg) => {
            eprintln!("toolvisor reap: {msg}");
            EX_USAGE
        }
    }
}

/// Run the shim with parsed arguments.
pub fn run(a: &ShimArgs) -> i32 {
    if a.holder {
        return holder::run(a);
    }
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("toolvisor reap: cannot become a child subreaper: {e}");
    }
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    if a.ppid.is_some_and(|p| getppid().as_raw() != p) {
        return 128 + Signal::SIGTERM as i32; // the worker is gone already
    }
    let report = report::Writer::new(a.report_fd);
    let pipe = match SelfPipe::install() {
        Ok(p) => p,
        Err(e) => return report.setup_failed(&format!("cannot install signal handlers: {e}")),
    };
    let channel = a.control_fd.and_then(control::Channel::from_raw);
    match &a.sandbox {
        Some(spec) => pidns::run(a, spec, pipe, &report, channel),
        None if a.spare => report.setup_failed("a spare needs the namespace sandbox"),
        None => run_plain(a, &pipe, &report, channel),
    }
}

/// The fallback: Landlock and the subreaper, no namespaces.
fn run_plain(
    a: &ShimArgs,
    pipe: &SelfPipe,
    report: &report::Writer,
    mut channel: Option<control::Channel>,
) -> i32 {
    // The terminal first: the command's Landlock domain need not allow opening one.
    let terminal = match open_terminal(a, channel.as_ref()) {
        Ok(t) => t,
        Err(e) => return report.setup_failed(&e.to_string()),
    };
    if a.confine {
        crate::restrict_writes(&a.write);
    }
    if let Err(e) = a.rlimits.apply() {
        return report.setup_failed(&e.to_string());
    }
    let child = match spawn(&Start::of(a), terminal.as_ref()) {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("toolvisor reap: cannot run {:?}: {e}", a.argv[0]);
            report.resources();
            return EX_NOEXEC;
        }
    };
    drop(terminal);
    detach_stdin();
    let mut status = None;
    while status.is_none() {
        tree::reap_all(child, &mut status);
        if status.is_some() {
            break;
        }
        let woken = pipe.wait_with(None, [channel.as_ref().map(|c| c.as_fd()), None]);
        if woken.terminate {
            break;
        }
        serve_control(&mut channel, woken.extra[0], child);
    }
    kill_tree(getpid(), child, a.grace, pipe, &mut status);
    report.resources();
    finish(status)
}

/// The command's terminal when it asked for one (`--tty`): opened here, its master
/// side handed to the worker over the control channel; returns the slave side.
fn open_terminal(
    a: &ShimArgs,
    channel: Option<&control::Channel>,
) -> Result<Option<std::os::fd::OwnedFd>, SandboxError> {
    let Some((rows, cols)) = a.tty else {
        return Ok(None);
    };
    let channel = channel.ok_or_else(|| {
        SandboxError::Refused("a terminal needs the control channel (--control-fd)".into())
    })?;
    let (master, slave) = control::open_terminal(rows, cols)?;
    channel.send_terminal(&master)?;
    Ok(Some(slave))
}

/// Serve the control channel when `ready`; forget it once the worker's end is gone.
fn serve_control(channel: &mut Option<control::Channel>, ready: bool, command: Pid) {
    if ready && channel.as_ref().is_some_and(|c| !c.serve(command)) {
        *channel = None;
    }
}

/// Point our own standard input at `/dev/null` once the command has it: a pipe the
/// worker writes to then has the command as its only reader.
fn detach_stdin() {
    if let Ok(null) = std::fs::File::open("/dev/null") {
        let _ = nix::unistd::dup2_stdin(null);
    }
}

/// Point all three standard streams at `/dev/null` once the command has them (a spare
/// got them for the command alone): its output ends when the command's processes close
/// it, not when this process exits.
fn detach_stdio() {
    detach_stdin();
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

/// What to start: from the shim's arguments, or the command a spare was given.
struct Start<'a> {
    argv: &'a [String],
    instance: Option<&'a str>,
    /// Descriptors the command keeps besides its standard streams.
    keep: &'a [i32],
    /// The command's whole environment (None: this process's own).
    env: Option<&'a [(String, String)]>,
}

impl<'a> Start<'a> {
    fn of(a: &'a ShimArgs) -> Self {
        Start {
            argv: &a.argv,
            instance: a.instance.as_deref(),
            keep: &a.keep_fds,
            env: None,
        }
    }

    fn given(g: &'a spare::Given) -> Self {
        Start {
            argv: &g.argv,
            instance: g.instance.as_deref(),
            keep: &[],
            env: Some(&g.env),
        }
    }
}

/// Start the command in its own process group — or, with a `terminal`, as the leader
/// of a new session whose controlling terminal it is, on all three standard streams —
/// with no descriptor past those three.
/// The handlers we installed are reset to the default by `execve`, and std resets the
/// signal mask.
fn spawn(s: &Start<'_>, terminal: Option<&std::os::fd::OwnedFd>) -> std::io::Result<Pid> {
    let (argv, instance) = (s.argv, s.instance);
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    if let Some(env) = s.env {
        cmd.env_clear()
            .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    }
    match terminal {
        Some(slave) => {
            cmd.stdin(slave.try_clone()?)
                .stdout(slave.try_clone()?)
                .stderr(slave.try_clone()?);
            // SAFETY: `take_terminal` makes only async-signal-safe calls.
            unsafe { cmd.pre_exec(control::take_terminal) };
        }
        None => {
            cmd.process_group(0);
        }
    }
    // The command gets its standard streams and nothing else: not the report pipe or
    // the control channel, not whatever the worker or the daemon held when it started
    // us (docs/SANDBOX.md, "Descriptors"). Marked here, closed by the kernel at the exec.
    // SAFETY: `cloexec_from` and `fcntl` are async-signal-safe; `keep` is copied
    // before the fork, nothing is allocated after it.
    let keep = s.keep.to_vec();
    unsafe {
        cmd.pre_exec(move || {
            toolvisor_os::fds::cloexec_from(toolvisor_os::fds::FIRST_NON_STDIO)?;
            for &fd in &keep {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        })
    };
    if let Some(id) = instance {
        cmd.env(MARKER_VAR, id);
    }
    // The shim reaps with waitpid(-1); the std handle is never waited on.
    let child = cmd.spawn()?;
    Ok(Pid::from_raw(child.id() as i32))
}

#[cfg(test)]
mod tests;
