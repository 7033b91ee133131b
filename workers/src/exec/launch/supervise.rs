//! A started command until it ends: its output pumped, its deadline, cancellation and
//! CPU limit watched, and the one kill path (SIGTERM, SIGKILL after the grace).

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::time::Instant;

use super::{GRACE, LAST_DRAIN, Running, SHIM_BACKSTOP, STREAM_DRAIN};
use crate::CancelFlag;
use crate::exec::cgroup::{CommandCgroup, Limit};
use crate::exec::output::{Coalescer, Record, pump};

/// Why a command was stopped before it ended by itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stop {
    Timeout,
    Cancelled,
    /// A limit measured while the command ran (CPU time on its cgroup).
    Limit(Limit),
}

/// How often the CPU time of a command's cgroup is read against `cpu_s`.
const CPU_EVERY: Duration = Duration::from_millis(250);

/// A CPU time budget measured on the command's cgroup (the whole tree's time, which
/// `RLIMIT_CPU`, counted per process, cannot bound).
#[derive(Clone, Copy, Debug)]
pub(crate) struct CpuWatch<'a> {
    pub cgroup: &'a CommandCgroup,
    pub limit_ms: u64,
}

impl CpuWatch<'_> {
    fn over(&self) -> bool {
        self.cgroup.cpu_ms().is_some_and(|ms| ms >= self.limit_ms)
    }
}

/// How a supervised command ended.
#[derive(Debug)]
pub(crate) struct Ended {
    pub status: Option<ExitStatus>,
    pub stop: Option<Stop>,
    /// It did not end: it still ran at its yield time, and goes on in the background.
    pub yielded: bool,
}

/// What ends (or lets go of) a supervised command besides its own exit.
#[derive(Clone, Copy)]
pub(crate) struct Bounds<'a> {
    pub deadline: Option<Instant>,
    pub cancel: &'a CancelFlag,
    pub cpu: Option<CpuWatch<'a>>,
    /// Stop supervising a command still running then (it goes on in the background).
    pub yield_at: Option<Instant>,
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
/// At `yield_at`, a command still running is let go instead (`Ended::yielded`), with
/// everything it wrote so far recorded and streamed.
pub(crate) async fn supervise(
    r: &mut Running,
    rec: &mut (dyn Record + Send),
    mut stream: Option<&mut Coalescer>,
    b: Bounds<'_>,
) -> Ended {
    let Bounds {
        deadline,
        cancel,
        cpu,
        yield_at,
    } = b;
    let k = Killer {
        group: Pid::from_raw(r.pid as i32),
        shim: r.shim,
    };
    let mut status = None;
    let mut stop = None;
    let mut force_at: Option<Instant> = None;
    let mut drain_until: Option<Instant> = None;
    let mut cpu_tick = tokio::time::interval(CPU_EVERY);
    let mut yielded = false;
    {
        let pump = pump(&mut r.pipes, rec, stream.as_deref_mut());
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
                // Under the namespace sandbox the report comes once nothing the command
                // started is left: its status need not wait for the shim's exit.
                rep = r.report.next(), if status.is_none() && r.report.pending() => {
                    if let Some(exit) = rep.and_then(|rep| rep.exit) {
                        status = Some(Some(exit.status()));
                        k.after_exit();
                        drain_until = Some(Instant::now() + STREAM_DRAIN);
                    }
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
                _ = cpu_tick.tick(), if cpu.is_some() && stop.is_none() && status.is_none() => {
                    if cpu.is_some_and(|c| c.over()) {
                        stop = Some(Stop::Limit(Limit::Cpu));
                        k.terminate();
                        force_at = Some(Instant::now() + k.force_after());
                    }
                }
                _ = sleep_until_opt(force_at), if status.is_none() => {
                    k.force();
                    force_at = None;
                }
                _ = sleep_until_opt(drain_until) => break,
                _ = sleep_until_opt(yield_at), if stop.is_none() && status.is_none() => {
                    yielded = true;
                    break;
                }
            }
        }
    }
    if yielded {
        if let Some(c) = stream {
            c.flush(true).await;
        }
        return Ended {
            status: None,
            stop: None,
            yielded,
        };
    }
    // Streaming gave up (slow client) or the pipes are still open: drain the rest into
    // the capture only, briefly (a process that escaped may hold the pipes forever).
    if !r.pipes.done() {
        let _ = tokio::time::timeout(LAST_DRAIN, pump(&mut r.pipes, rec, None)).await;
    }
    Ended {
        status: status.flatten(),
        stop,
        yielded,
    }
}

/// Sleep until `t`; never wakes when `t` is None.
pub(crate) async fn sleep_until_opt(t: Option<Instant>) {
    match t {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}
