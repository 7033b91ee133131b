//! The shim with namespaces: the shim enters new namespaces and forks the PID
//! namespace's first process ("init"), which builds the command's file system view,
//! drops every privilege, starts the command and reaps everything in the namespace.
//!
//! When the command exits (or a termination request arrives) init sends SIGTERM to
//! every process of the namespace, SIGKILL after the grace, and exits; the kernel kills
//! whatever is left when a namespace's init dies, so nothing the command started can
//! outlive it (a double-forked `setsid` daemon included). Init's status pipe tells the
//! shim how the command ended (or why the sandbox could not be built); init watches a
//! pipe from the shim too, so it ends the namespace if the shim dies.
//!
//! Init cannot die by a signal of its own namespace, so it never re-raises one: the
//! shim does, from the status init sent.

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{ForkResult, Pid};

use super::control::Channel;
use super::report::{Exit, Writer};
use super::signals::SelfPipe;
use super::tree::KILL_CAP;
use super::{EX_NOEXEC, ShimArgs, Start, finish, spare};
use crate::observe::Observations;
use crate::spec::SandboxSpec;
use crate::{SandboxError, ns};

/// Run `a` in new namespaces; returns the shim's exit code. Init serves the control
/// `channel`; the shim keeps no copy of it (nor of the command's standard input).
pub fn run(
    a: &ShimArgs,
    spec: &SandboxSpec,
    pipe: SelfPipe,
    report: &Writer,
    channel: Option<Channel>,
) -> i32 {
    if let Err(e) = ns::unshare(spec) {
        return report.setup_failed(&e.to_string());
    }
    let pipes = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).and_then(|status| {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map(|life| (status, life))
    });
    let ((status_r, status_w), (life_r, life_w)) = match pipes {
        Ok(p) => p,
        Err(e) => return report.setup_failed(&format!("cannot make a pipe: {e}")),
    };
    // SAFETY: this process has one thread; the child only makes system calls and
    // allocates (the allocator's state is consistent: nothing else runs).
    match unsafe { nix::unistd::fork() } {
        Ok(ForkResult::Child) => {
            drop((status_r, life_w));
            let pipes = InitPipes {
                status: status_w,
                life: life_r,
                channel,
            };
            std::process::exit(init(a, spec, pipe, pipes))
        }
        Ok(ForkResult::Parent { child }) => {
            drop((status_w, life_r, channel));
            super::detach_stdin();
            let ended = wait_init(child, a.grace, &pipe);
            drop(life_w);
            let from_init = read_all(status_r);
            finish_outer(&from_init, ended, report)
        }
        Err(e) => report.setup_failed(&format!("cannot start the namespace's first process: {e}")),
    }
}

/// Wait for init to exit; a termination request is passed on to it (SIGTERM: it kills
/// the namespace), and SIGKILL follows if it is still there well past the grace.
fn wait_init(init: Pid, grace: Duration, pipe: &SelfPipe) -> Option<WaitStatus> {
    let mut kill_at: Option<Instant> = None;
    loop {
        match waitpid(init, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {}
            Ok(s) => return Some(s),
            Err(_) => return None,
        }
        let timeout = kill_at.map(|t| t.saturating_duration_since(Instant::now()));
        let woken = pipe.wait(timeout);
        if woken.terminate && kill_at.is_none() {
            let _ = kill(init, Signal::SIGTERM);
            kill_at = Some(Instant::now() + grace + KILL_CAP);
        }
        if kill_at.is_some_and(|t| Instant::now() >= t) {
            let _ = kill(init, Signal::SIGKILL);
        }
    }
}

/// Everything init wrote to its status pipe.
fn read_all(fd: OwnedFd) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = std::fs::File::from(fd)
        .take(64 * 1024)
        .read_to_end(&mut out);
    out
}

/// The shim's exit: a setup failure, or the command's status as init saw it.
fn finish_outer(from_init: &[u8], init: Option<WaitStatus>, report: &Writer) -> i32 {
    match from_init.split_first() {
        Some((b'E', why)) => report.setup_failed(&String::from_utf8_lossy(why)),
        // Init was reaped: nothing of the namespace is left, so the report says how
        // the command ended before this process (and the namespaces) go.
        Some((b'X', code)) => {
            let code = parse_num(code).unwrap_or(EX_NOEXEC);
            report.ended(Exit::Code(code));
            code
        }
        Some((b'K', sig)) => {
            let sig = parse_num(sig).and_then(|s| Signal::try_from(s).ok());
            match sig {
                Some(s) => report.ended(Exit::Signal(s as i32)),
                None => report.resources(),
            }
            finish(sig.map(|s| WaitStatus::Signaled(Pid::from_raw(0), s, false)))
        }
        _ => {
            // Init was killed before it could tell (SIGKILL past the grace, or by the
            // worker's backstop): report its own end.
            report.resources();
            match init {
                Some(WaitStatus::Signaled(p, s, c)) => finish(Some(WaitStatus::Signaled(p, s, c))),
                _ => finish(None),
            }
        }
    }
}

fn parse_num(b: &[u8]) -> Option<i32> {
    std::str::from_utf8(b).ok()?.trim().parse().ok()
}

/// What init inherits from the shim besides its arguments.
struct InitPipes {
    /// Init → shim: how the command ended, or why the sandbox could not be built.
    status: OwnedFd,
    /// Shim → init: hung up when the shim is gone.
    life: OwnedFd,
    channel: Option<Channel>,
}

/// The PID namespace's first process. Returns its exit code (always 0: the command's
/// status goes through `status`).
fn init(a: &ShimArgs, spec: &SandboxSpec, shims: SelfPipe, pipes: InitPipes) -> i32 {
    let InitPipes {
        status,
        life,
        mut channel,
    } = pipes;
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    let tell = |msg: &[u8]| {
        let _ = rustix::io::write(&status, msg);
    };
    // Our own self-pipe first, then close the shim's copy: the handlers always have one.
    let pipe = match SelfPipe::install() {
        Ok(p) => p,
        Err(e) => {
            tell(format!("Ecannot install signal handlers: {e}").as_bytes());
            return 0;
        }
    };
    drop(shims);
    let seen = match prepare(a, spec) {
        Ok(seen) => seen,
        Err(e) => {
            tell(format!("E{e}").as_bytes());
            return 0;
        }
    };
    let given = if a.spare {
        match await_command(channel.as_ref(), &seen, &life, &pipe) {
            Ok(g) => Some(g),
            Err(e) => {
                tell(format!("E{e}").as_bytes());
                return 0;
            }
        }
    } else {
        None
    };
    // Opened inside the new root: the terminal belongs to the command's own `devpts`.
    let terminal = match super::open_terminal(a, channel.as_ref()) {
        Ok(t) => t,
        Err(e) => {
            tell(format!("E{e}").as_bytes());
            return 0;
        }
    };
    let start = given.as_ref().map_or(Start::of(a), Start::given);
    let child = match super::spawn(&start, terminal.as_ref()) {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("toolvisor reap: cannot run {:?}: {e}", start.argv[0]);
            tell(format!("X{EX_NOEXEC}").as_bytes());
            return 0;
        }
    };
    drop(terminal);
    if given.is_some() {
        super::detach_stdio();
    } else {
        super::detach_stdin();
    }
    let mut ended = None;
    while ended.is_none() {
        super::tree::reap_all(child, &mut ended);
        if ended.is_some() {
            break;
        }
        let control = channel.as_ref().map(|c| c.as_fd());
        let w = pipe.wait_with(None, [Some(life.as_fd()), control]);
        if w.terminate || w.extra[0] {
            break; // asked to stop, or the shim above us is gone
        }
        super::serve_control(&mut channel, w.extra[1], child);
    }
    end_namespace(child, a.grace, &pipe, &mut ended);
    match ended {
        Some(WaitStatus::Exited(_, code)) => tell(format!("X{code}").as_bytes()),
        Some(WaitStatus::Signaled(_, sig, _)) => tell(format!("K{}", sig as i32).as_bytes()),
        _ => tell(format!("K{}", Signal::SIGKILL as i32).as_bytes()),
    }
    0
}

/// A spare: tell the worker the sandbox is ready, and wait for the command.
fn await_command(
    channel: Option<&Channel>,
    seen: &Observations,
    life: &OwnedFd,
    pipe: &SelfPipe,
) -> Result<spare::Given, SandboxError> {
    let channel =
        channel.ok_or_else(|| SandboxError::Refused("a spare needs the control channel".into()))?;
    spare::ready(channel, seen)?;
    spare::wait(channel, life, pipe)
        .ok_or_else(|| SandboxError::Refused("the spare was given no command".into()))
}

/// Build the sandbox and give up what the command must not have, in the order each
/// step needs: mounts first (they need the capabilities), then Landlock, the rlimits,
/// a new session (no controlling terminal to push keystrokes into), and last the
/// capabilities themselves. Returns what the mount plan saw of the host.
fn prepare(a: &ShimArgs, spec: &SandboxSpec) -> Result<Observations, SandboxError> {
    let seen = ns::setup(spec)?;
    if a.confine {
        let mut write = a.write.clone();
        // The command's own /dev: its shm, its terminals, harmless devices.
        write.extend(
            [
                "/dev/shm",
                "/dev/pts",
                "/dev/ptmx",
                "/dev/tty",
                "/dev/zero",
                "/dev/full",
            ]
            .map(std::path::PathBuf::from),
        );
        crate::landlock::restrict_command(&write);
    }
    a.rlimits.apply()?;
    nix::unistd::setsid()
        .map_err(|e| SandboxError::step("cannot start a session", std::io::Error::other(e)))?;
    // Not dumpable: a command may not read this process's memory or descriptors.
    let _ = nix::sys::prctl::set_dumpable(false);
    ns::drop_privileges()?;
    Ok(seen)
}

/// Stop everything in the namespace: SIGTERM (and SIGCONT) to all, SIGKILL to all
/// after the grace, reaping as they go. Returns once none is left (or after the cap:
/// the kernel kills the rest when we exit anyway).
fn end_namespace(command: Pid, grace: Duration, pipe: &SelfPipe, ended: &mut Option<WaitStatus>) {
    let all = Pid::from_raw(-1);
    super::tree::reap_all(command, ended);
    if none_left() {
        return;
    }
    let _ = kill(all, Signal::SIGTERM);
    let _ = kill(all, Signal::SIGCONT);
    let kill_at = Instant::now() + grace;
    while Instant::now() < kill_at {
        super::tree::reap_all(command, ended);
        if none_left() {
            return;
        }
        pipe.wait(Some(kill_at.saturating_duration_since(Instant::now())));
    }
    let _ = kill(all, Signal::SIGKILL);
    let cap = Instant::now() + KILL_CAP;
    while Instant::now() < cap {
        super::tree::reap_all(command, ended);
        if none_left() {
            return;
        }
        pipe.wait(Some(Duration::from_millis(20)));
    }
}

/// Whether no child is left to wait for (every process of the namespace is ours:
/// orphans re-parent to us).
/// `WNOWAIT`: looking must not reap (the command's status would be lost).
fn none_left() -> bool {
    use nix::sys::wait::{Id, waitid};
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    matches!(waitid(Id::All, flags), Err(nix::errno::Errno::ECHILD))
}
