//! Starting a command (under the `toolvisor reap` shim, or directly as a fallback)
//! and the one kill path every ending shares: SIGTERM, SIGKILL after the grace.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::time::Instant;

use super::output::{Coalescer, Pipes, Record, pump};
use crate::{CancelFlag, ToolError};

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
    Shim {
        program: PathBuf,
        prefix: Vec<OsString>,
        /// Pass the shim arguments JSON-encoded in this variable instead (tests host
        /// the shim in the test binary, whose command line libtest owns).
        args_env: Option<&'static str>,
        /// Landlock allow-list the shim applies to the command (`--confine`).
        writable: Vec<PathBuf>,
    },
    /// `bash … -c CMD` in its own process group: no subreaper, so `setsid` or double-forked
    /// processes can escape. Only when no shim binary is known.
    Direct,
}

/// What to run.
pub(crate) struct Spec<'a> {
    pub command: &'a str,
    pub env: &'a BTreeMap<String, String>,
    /// The working directory, opened beneath its root (`fchdir` in the child: no race
    /// between resolving and entering it).
    pub cwd: &'a OwnedFd,
    pub instance: &'a str,
    /// Give stdout and stderr one pipe, so the output keeps the exact order the command
    /// wrote it in (two pipes can only approximate it). Only streaming, which labels
    /// each chunk with its stream, needs them apart.
    pub merged: bool,
}

/// A started command.
pub(crate) struct Running {
    pub child: Child,
    pub pid: u32,
    pub pipes: Pipes,
    shim: bool,
}

impl Launcher {
    pub(crate) fn is_shim(&self) -> bool {
        matches!(self, Launcher::Shim { .. })
    }

    /// Start `spec`. Must be called from a long-lived thread (a runtime worker thread,
    /// not `spawn_blocking`): the parent-death signal fires when the forking thread exits.
    pub(crate) fn spawn(&self, spec: &Spec<'_>) -> Result<Running, ToolError> {
        let mut cmd = self.command(spec)?;
        let merged_read = if spec.merged {
            let (read, write) = std::io::pipe()
                .map_err(|e| ToolError::internal(format!("cannot make a pipe: {e}")))?;
            let write2 = write
                .try_clone()
                .map_err(|e| ToolError::internal(format!("cannot make a pipe: {e}")))?;
            cmd.stdout(Stdio::from(write)).stderr(Stdio::from(write2));
            Some(read)
        } else {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            None
        };
        cmd.stdin(Stdio::null()).process_group(0).kill_on_drop(true);
        self.pre_exec(&mut cmd, spec.cwd.as_raw_fd());
        let mut child = cmd
            .spawn()
            .map_err(|e| ToolError::internal(format!("cannot start the command: {e}")))?;
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
        Ok(Running {
            child,
            pid,
            pipes,
            shim: self.is_shim(),
        })
    }

    fn command(&self, spec: &Spec<'_>) -> Result<Command, ToolError> {
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
            Launcher::Shim {
                program,
                prefix,
                args_env,
                writable,
            } => {
                let mut args = vec![
                    "--ppid".to_owned(),
                    std::process::id().to_string(),
                    "--grace-ms".to_owned(),
                    GRACE.as_millis().to_string(),
                ];
                if !spec.instance.is_empty() {
                    args.extend(["--instance".to_owned(), spec.instance.to_owned()]);
                }
                args.push("--confine".to_owned());
                for w in writable {
                    args.extend(["--write".to_owned(), w.to_string_lossy().into_owned()]);
                }
                args.push("--".to_owned());
                args.extend(sh.map(str::to_owned));
                let mut c = Command::new(program);
                c.args(prefix).env_clear().envs(spec.env);
                match args_env {
                    Some(var) => {
                        let json = serde_json::to_string(&args)
                            .map_err(|e| ToolError::internal(e.to_string()))?;
                        c.env(var, json);
                    }
                    None => {
                        c.args(&args);
                    }
                }
                Ok(c)
            }
        }
    }

    /// In the child before exec: enter the cwd, arm the parent-death signal and check
    /// the worker did not die before it was armed. Async-signal-safe calls only.
    fn pre_exec(&self, cmd: &mut Command, cwd: i32) {
        let parent = nix::unistd::getpid();
        // The shim turns SIGTERM into an orderly tree kill; a bare `sh` gets SIGKILL.
        let death = if self.is_shim() {
            Signal::SIGTERM
        } else {
            Signal::SIGKILL
        };
        // SAFETY: fchdir, prctl and getppid are async-signal-safe; no allocation.
        unsafe {
            cmd.pre_exec(move || {
                if libc::fchdir(cwd) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                nix::sys::prctl::set_pdeathsig(death)?;
                if nix::unistd::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
    }
}

/// Why a command was stopped before it ended by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Timeout,
    Cancelled,
}

/// How a supervised command ended.
#[derive(Debug)]
pub(crate) struct Ended {
    pub status: Option<ExitStatus>,
    pub stop: Option<Stop>,
}

/// The signals of the kill path, copied out of [`Running`] so they can be sent while
/// the pump borrows its pipes.
#[derive(Clone, Copy, Debug)]
struct Killer {
    group: Pid,
    shim: bool,
}

impl Killer {
    /// First step. Under the shim, SIGTERM reaches the shim alone (its own group): it
    /// terminates the whole tree and escalates to SIGKILL after the grace itself.
    fn terminate(self) {
        let _ = killpg(self.group, Signal::SIGTERM);
    }

    /// Second step: SIGKILL. For the shim this is only a backstop.
    fn force(self) {
        let _ = killpg(self.group, Signal::SIGKILL);
    }

    /// When [`Killer::force`] is due after [`Killer::terminate`].
    fn force_after(self) -> Duration {
        if self.shim {
            GRACE + SHIM_BACKSTOP
        } else {
            GRACE
        }
    }

    /// The direct launcher leaves background members of the group behind: kill them.
    fn after_exit(self) {
        if !self.shim {
            let _ = killpg(self.group, Signal::SIGKILL);
        }
    }
}

/// Run `r` to its end: pump its output into `rec` (and the stream), stop it at the
/// deadline or on cancel (SIGTERM, SIGKILL after the grace), and drain what it wrote.
pub(crate) async fn supervise(
    r: &mut Running,
    rec: &mut (dyn Record + Send),
    stream: Option<&mut Coalescer>,
    deadline: Option<Instant>,
    cancel: &CancelFlag,
) -> Ended {
    let k = Killer {
        group: Pid::from_raw(r.pid as i32),
        shim: r.shim,
    };
    let mut status = None;
    let mut stop = None;
    let mut force_at: Option<Instant> = None;
    let mut drain_until: Option<Instant> = None;
    {
        let pump = pump(&mut r.pipes, rec, stream);
        tokio::pin!(pump);
        let mut pumped = false;
        while !(pumped && status.is_some()) {
            tokio::select! {
                _ = &mut pump, if !pumped => pumped = true,
                s = r.child.wait(), if status.is_none() => {
                    status = Some(s.ok());
                    k.after_exit();
                    drain_until = Some(Instant::now() + STREAM_DRAIN);
                }
                _ = sleep_until_opt(deadline), if stop.is_none() && status.is_none() => {
                    stop = Some(Stop::Timeout);
                    k.terminate();
                    force_at = Some(Instant::now() + k.force_after());
                }
                _ = cancel.cancelled(), if stop.is_none() && status.is_none() => {
                    stop = Some(Stop::Cancelled);
                    k.terminate();
                    force_at = Some(Instant::now() + k.force_after());
                }
                _ = sleep_until_opt(force_at), if status.is_none() => {
                    k.force();
                    force_at = None;
                }
                _ = sleep_until_opt(drain_until) => break,
            }
        }
    }
    // Streaming gave up (slow client) or the pipes are still open: drain the rest into
    // the capture only, briefly (a process that escaped may hold the pipes forever).
    if !r.pipes.done() {
        let _ = tokio::time::timeout(LAST_DRAIN, pump(&mut r.pipes, rec, None)).await;
    }
    Ended {
        status: status.flatten(),
        stop,
    }
}

/// Sleep until `t`; never wakes when `t` is None.
pub(crate) async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
