//! Spares: one command sandbox per exec worker built ahead of its command, so that a
//! `run_command` pays for a fork and an `exec` of bash instead of a shim's `exec`, new
//! namespaces, a new root and a cgroup (see docs/SANDBOX.md, "How a command starts").
//!
//! A spare is `toolvisor reap --spare` started like any shim — in a cgroup of its own
//! with the limits, its parent-death signal armed — whose PID namespace's first process
//! builds the sandbox for the workspace root, drops every privilege, and sends
//! [`READY`](crate::reap::control::READY) with what its mount plan saw of the host.
//! A call claims it when nothing the spare was made for differs: no terminal, the
//! same network choice (never a session's shared loopback: a spare has its own), a
//! command that fits one packet, younger than [`MAX_AGE`], and every observation of
//! the plan still true ([`Observations::changed`]). It then gets
//! the command and its standard streams; everything after (report, status, control
//! channel, kill path) is the ordinary shim's. Anything else — or a spare that died,
//! failed or refused — and the call starts its command the ordinary way: prewarming
//! never fails a call. The next spare is started once the command that took one ended
//! (or went on in the background), so that building it does not compete with the
//! command for the CPU, and plans the host as that command left it; a spare dropped
//! unused is replaced at once.

use std::collections::BTreeMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::process::Child;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{
    ChildSetup, Launcher, Running, SHELL, ShimArgs, ShimFds, ShimLauncher, Spec, pre_exec,
    shim_channels,
};
use crate::ToolError;
use crate::exec::cgroup::{Cgroups, CommandCgroup};
use crate::exec::control::{Answer, Control};
use crate::exec::input::{Input, stdin_pipe};
use crate::exec::output::Pipes;
use crate::reap::control::MAX_PACKET;
use crate::reap::spare::Go;
use crate::sandbox::observe::Observations;
use crate::sandbox::plan::HostView;

/// A spare older than this is not used (a claim drops it and starts another): what
/// its plan did not look at (the host's mounts) may have changed.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(60);
/// How long a call waits for a spare still being built (it is nearer its end than a
/// new shim would be); then the command starts the ordinary way.
const READY_WAIT: Duration = Duration::from_secs(2);
/// How long a spare may take to build its sandbox before it is given up.
const BUILD_WAIT: Duration = Duration::from_secs(20);
/// How long a spare may take to answer its command (it does nothing else meanwhile).
const ANSWER_WAIT: Duration = Duration::from_secs(10);
/// Spares that failed in a row before this worker stops making them (a host where
/// they cannot work: every command then starts the ordinary way).
const MAX_FAILURES: u32 = 3;

/// The spare of one exec worker (none when commands get no namespaces).
#[derive(Clone, Debug, Default)]
pub(crate) struct Spares {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    shim: ShimLauncher,
    cgroups: Arc<Cgroups>,
    /// The workspace root: where a spare's sandbox is built.
    root: PathBuf,
    /// The shim's own environment (the worker's scrubbed one, with the instance marker
    /// that the supervisor's sweep of leftovers looks for).
    env: BTreeMap<String, String>,
    instance: String,
    slot: Mutex<Slot>,
}

#[derive(Debug, Default)]
struct Slot {
    /// The spare being built or ready.
    next: Option<JoinHandle<Option<Spare>>>,
    failures: u32,
    closed: bool,
}

/// A started spare.
#[derive(Debug)]
struct Spare {
    child: Child,
    pid: u32,
    control: Control,
    report: std::io::PipeReader,
    cgroup: Option<CommandCgroup>,
    seen: Observations,
    born: Instant,
}

impl Spares {
    /// Spares for `launcher`'s commands when they get namespaces (and the shim is the
    /// real binary); none otherwise.
    pub(crate) fn new(
        launcher: &Launcher,
        cgroups: Arc<Cgroups>,
        root: PathBuf,
        env: BTreeMap<String, String>,
        instance: String,
    ) -> Spares {
        let shim = match launcher {
            Launcher::Shim(s) if s.sandbox.is_some() && s.args_env.is_none() => s,
            _ => return Spares::default(),
        };
        let inner = Inner {
            shim: (**shim).clone(),
            cgroups,
            root,
            env,
            instance,
            slot: Mutex::new(Slot::default()),
        };
        Spares {
            inner: Some(Arc::new(inner)),
        }
    }

    /// Start building a spare when none is (call from the runtime, when the command
    /// that took the last one has ended or gone on in the background).
    pub(crate) fn refill(&self) {
        let Some(inner) = &self.inner else { return };
        let mut slot = inner.lock();
        if slot.next.is_some() || slot.closed || slot.failures >= MAX_FAILURES {
            return;
        }
        slot.next = Some(tokio::spawn(build(Arc::clone(inner))));
    }

    /// Run `spec` in the spare when it fits (see the module doc): its process and
    /// cgroup, or None to start it the ordinary way.
    pub(crate) async fn run(
        &self,
        spec: &Spec<'_>,
    ) -> Result<Option<(Running, Option<CommandCgroup>)>, ToolError> {
        let Some(inner) = &self.inner else {
            return Ok(None);
        };
        let network = inner.shim.sandbox.as_ref().is_some_and(|t| t.network);
        // A spare has a network namespace of its own: never for a session's loopback.
        let special = spec.tty.is_some()
            || spec.stage.is_some()
            || spec.loopback.is_some()
            || !spec.widen.is_empty();
        if special || (spec.network && !network) {
            return Ok(None);
        }
        let Some(body) = go_body(spec) else {
            return Ok(None);
        };
        let Some(spare) = inner.take().await else {
            tracing::debug!("no spare command sandbox ready");
            self.refill();
            return Ok(None);
        };
        if spare.born.elapsed() > MAX_AGE {
            spare.discard();
            self.refill();
            return Ok(None);
        }
        if let Some(seen) = spare.seen.changed(&HostView) {
            tracing::debug!("the spare command sandbox is stale ({seen:?}): not used");
            spare.discard();
            self.refill();
            return Ok(None);
        }
        let started = spare.go(spec, &body).await;
        match &started {
            Ok(Some(_)) => tracing::debug!("the command started in the spare sandbox"),
            _ => self.refill(),
        }
        started
    }

    /// Drop the spare and make no more (worker shutdown).
    pub(crate) fn close(&self) {
        let Some(inner) = &self.inner else { return };
        let next = {
            let mut slot = inner.lock();
            slot.closed = true;
            slot.next.take()
        };
        if let Some(h) = next {
            // Dropping the built spare kills it.
            h.abort();
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The spare, once ready (waiting up to [`READY_WAIT`] for one being built).
    async fn take(&self) -> Option<Spare> {
        let next = self.lock().next.take()?;
        let abort = next.abort_handle();
        let spare = match tokio::time::timeout(READY_WAIT, next).await {
            Ok(Ok(s)) => s,
            Ok(Err(_)) => None,
            Err(_) => {
                abort.abort();
                None
            }
        };
        let mut slot = self.lock();
        match &spare {
            Some(_) => slot.failures = 0,
            None => slot.failures += 1,
        }
        if slot.failures == MAX_FAILURES {
            tracing::warn!(
                "{MAX_FAILURES} spare command sandboxes failed in a row: commands start \
                 without one from now on"
            );
        }
        spare
    }
}

/// The [`Go`] packet's body for `spec` (None: too large for one packet, or the working
/// directory cannot be named).
fn go_body(spec: &Spec<'_>) -> Option<Vec<u8>> {
    let st = rustix::fs::fstat(spec.cwd).ok()?;
    let go = Go {
        argv: SHELL
            .iter()
            .copied()
            .chain([spec.command])
            .map(str::to_owned)
            .collect(),
        env: spec
            .env
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        cwd: spec.cwd_path.to_path_buf(),
        cwd_id: (st.st_dev, st.st_ino),
        instance: (!spec.instance.is_empty()).then(|| spec.instance.to_owned()),
    };
    let body = serde_json::to_vec(&go).ok()?;
    (body.len() < MAX_PACKET).then_some(body)
}

/// Build one spare: start it, and wait until its sandbox is ready.
async fn build(inner: Arc<Inner>) -> Option<Spare> {
    let mut spare = match Spare::start(&inner) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!("cannot start a spare command sandbox: {e}");
            return None;
        }
    };
    let ready = tokio::time::timeout(BUILD_WAIT, spare.control.spare_ready()).await;
    match ready.ok().flatten().map(|b| serde_json::from_slice(&b)) {
        Some(Ok(seen)) => {
            spare.seen = seen;
            tracing::debug!("a spare command sandbox is ready (shim {})", spare.pid);
            Some(spare)
        }
        _ => {
            tracing::debug!("a spare command sandbox ended before it was ready");
            spare.discard();
            None
        }
    }
}

impl Spare {
    /// `toolvisor reap --spare` in the workspace root, in a new cgroup.
    fn start(inner: &Inner) -> Result<Spare, ToolError> {
        let io = |what: &str| {
            let what = what.to_owned();
            move |e: std::io::Error| ToolError::internal(format!("{what}: {e}"))
        };
        let root = OwnedFd::from(std::fs::File::open(&inner.root).map_err(io("the workspace"))?);
        let cgroup = inner.cgroups.create().map_err(io("a cgroup"))?;
        let (report, report_w, control, control_end) = shim_channels().map_err(io("a pipe"))?;
        let fds = ShimFds {
            report: Some(report_w.as_raw_fd()),
            control: Some(control_end.as_raw_fd()),
            netns: None,
        };
        let a = ShimArgs {
            spare: true,
            ..inner.shim.args(
                (&inner.instance, &inner.root, false),
                fds,
                (None, &super::Widen::default()),
            )
        };
        let mut cmd = inner.shim.detached(&a, &inner.env)?;
        let setup = ChildSetup {
            cwd: root.as_raw_fd(),
            keep: fds.keep(),
            cgroup: cgroup.as_ref().map(CommandCgroup::joiner),
            terminal: false,
        };
        pre_exec(&mut cmd, setup, true);
        let child = cmd.spawn().map_err(io("the shim"))?;
        drop((cmd, report_w, control_end));
        let pid = child
            .id()
            .filter(|&p| p > 0)
            .ok_or_else(|| ToolError::internal("the spare exited before it was seen"))?;
        Ok(Spare {
            child,
            pid,
            control,
            report,
            cgroup,
            seen: Observations::default(),
            born: Instant::now(),
        })
    }

    /// Give the spare `spec`'s command (`body`) and its streams.
    async fn go(
        self,
        spec: &Spec<'_>,
        body: &[u8],
    ) -> Result<Option<(Running, Option<CommandCgroup>)>, ToolError> {
        let streams = match Streams::new(spec) {
            Ok(s) => s,
            Err(e) => {
                self.discard();
                return Err(ToolError::internal(format!("cannot make a pipe: {e}")));
            }
        };
        let stdio = [
            streams.stdin.as_fd(),
            streams.stdout.as_fd(),
            streams.stderr.as_fd(),
        ];
        let answer = tokio::time::timeout(ANSWER_WAIT, self.control.go(body, stdio)).await;
        let Streams { pipes, input, .. } = streams;
        match answer {
            Ok(Answer::Started) => {
                let running = Running {
                    child: self.child,
                    pid: self.pid,
                    pipes,
                    control: Some(self.control),
                    stdin: input,
                    tty: false,
                    master: None,
                    report: super::ReportPipe::new(self.report),
                    egress: None,
                    shim: true,
                    namespaces: true,
                };
                Ok(Some((running, self.cgroup)))
            }
            Ok(Answer::Refused(why)) => {
                tracing::debug!("the spare command sandbox refused the command: {why}");
                self.discard();
                Ok(None)
            }
            Ok(Answer::Gone) => {
                self.discard();
                Ok(None)
            }
            Err(_) => {
                // It may have started the command: never start it a second time.
                self.discard();
                Err(ToolError::internal(
                    "the command's prepared sandbox did not answer and was stopped; the \
                     command may have started",
                ))
            }
        }
    }

    /// Kill the spare; reap it and remove its cgroup in the background.
    fn discard(self) {
        let Spare {
            mut child, cgroup, ..
        } = self;
        let _ = child.start_kill();
        tokio::spawn(async move {
            let _ = child.wait().await;
            if let Some(cg) = cgroup {
                let _ = tokio::task::spawn_blocking(move || drop(cg)).await;
            }
        });
    }
}

/// A command's standard streams made by the worker for a spare: the ends the spare
/// gets (ours are closed once they are sent), and the worker's.
struct Streams {
    stdin: OwnedFd,
    stdout: OwnedFd,
    stderr: OwnedFd,
    pipes: Pipes,
    input: Option<Input>,
}

impl Streams {
    fn new(spec: &Spec<'_>) -> std::io::Result<Streams> {
        let (stdin, input) = if spec.stdin_pipe {
            let (read, tx) = stdin_pipe()?;
            (read, Some(Input::Pipe(tx)))
        } else {
            (OwnedFd::from(std::fs::File::open("/dev/null")?), None)
        };
        let to_io = |e: ToolError| std::io::Error::other(e.message);
        let (pipes, stdout, stderr) = if spec.merged {
            let (read, write) = std::io::pipe()?;
            let write2 = write.try_clone()?;
            (
                Pipes::merged(read).map_err(to_io)?,
                write.into(),
                write2.into(),
            )
        } else {
            let (out_r, out_w) = std::io::pipe()?;
            let (err_r, err_w) = std::io::pipe()?;
            (
                Pipes::split(out_r, err_r).map_err(to_io)?,
                out_w.into(),
                err_w.into(),
            )
        };
        Ok(Streams {
            stdin,
            stdout,
            stderr,
            pipes,
            input,
        })
    }
}
