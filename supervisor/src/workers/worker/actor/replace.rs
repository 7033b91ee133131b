//! Replacing a worker's process on purpose, without blocking the actor's mailbox.
//!
//! A planned replacement (operator `restart`, SIGHUP, the memory watchdog) lets the
//! calls in flight end: the worker stops taking calls, a task reports when the last
//! one ended, then the process gets `Shutdown` (the exec worker kills and logs its
//! background jobs) and `SIGKILL` only if it is still there after its group's
//! [`patience`]. Retirement (a lowered `count`) and service shutdown end the same way,
//! without a new process.

use std::sync::Arc;
use std::time::Duration;

use ractor::ActorRef;
use toolvisor_protocol::frame;
use toolvisor_protocol::worker::ToWorker;

use super::{ExitStatus, WorkerActorState, WorkerMsg};
use crate::workers::worker::link::Link;
use crate::workers::worker::shared::WorkerState;
use crate::workers::worker::{CANCEL_GRACE, kill_group, patience};

/// Why a worker process is replaced on purpose (said in its `worker_exited` record).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestartReason {
    /// `toolvisor restart [GROUP]`: also revives a `failed` worker.
    Operator,
    /// SIGHUP after a successful reload: also revives a `failed` worker.
    Reload,
    /// The memory watchdog saw it above `max_rss_mb`; only a ready worker is replaced.
    Memory,
}

impl RestartReason {
    /// The reason as the `worker_exited` record spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            RestartReason::Operator => "operator_restart",
            RestartReason::Reload => "reload",
            RestartReason::Memory => "memory",
        }
    }

    /// Whether this restart starts the intensity count afresh (an operator or a
    /// reload may fix what made the worker fail; memory growth says nothing of it).
    fn resets_policy(self) -> bool {
        !matches!(self, RestartReason::Memory)
    }
}

/// A replacement under way: the process of `generation` is let finish its calls, then
/// asked to shut down (so the exec worker kills and logs its background jobs).
pub(super) struct Planned {
    pub(super) reason: RestartReason,
    pub(super) generation: u64,
    pub(super) shutdown_sent: bool,
}

impl WorkerActorState {
    /// A restart on purpose: let the calls in flight end, then replace the process. A
    /// worker without a process (failed, or waiting out a backoff) starts at once.
    pub(super) async fn restart(
        &mut self,
        myself: &ActorRef<WorkerMsg>,
        reason: RestartReason,
        reply: Option<ractor::RpcReplyPort<()>>,
    ) {
        if reason == RestartReason::Memory && self.args.shared.state() != WorkerState::Ready {
            return; // the watchdog looks again next time
        }
        if reason == RestartReason::Reload && self.reload_changes_nothing() {
            tracing::info!(group = %self.args.shared.group, index = self.args.shared.index, "the reload changed nothing this worker was started with: it goes on");
            if let Some(r) = reply {
                let _ = r.send(());
            }
            return;
        }
        self.waiters.extend(reply);
        if self.stopping {
            self.answer_waiters();
            return;
        }
        if reason.resets_policy() {
            self.args.policy.reset();
        }
        if self.planned_here() {
            return; // one replacement serves every request made while it is under way
        }
        let link = self.args.shared.link();
        match (self.child_pid, link) {
            (Some(_), Some(link)) => {
                tracing::info!(group = %self.args.shared.group, index = self.args.shared.index, reason = reason.as_str(), "replacing the worker once its calls are done");
                self.planned = Some(Planned {
                    reason,
                    generation: self.generation,
                    shutdown_sent: false,
                });
                self.args.shared.set_state(WorkerState::Restarting);
                wake_when_idle(link, myself.clone(), self.generation);
            }
            (Some(pid), None) => kill_group(pid), // never connected: its exit restarts it
            (None, _) => self.start(myself).await,
        }
    }

    /// The process being replaced is idle: ask it to shut down, and kill it if it has
    /// not exited within its group's [`patience`] (an exec worker first stops its
    /// background jobs, each of which may take the 2 s grace).
    pub(super) fn idle(&mut self, myself: &ActorRef<WorkerMsg>) {
        let generation = self.generation;
        let Some(link) = self.args.shared.link() else {
            return;
        };
        if self.stopping || !self.planned_here() {
            return;
        }
        if link.in_flight() > 0 {
            // A call slipped in between the state change and now: wait for it too.
            wake_when_idle(link, myself.clone(), generation);
            return;
        }
        if let Some(p) = self.planned.as_mut() {
            p.shutdown_sent = true;
        }
        if let Ok(bytes) = frame::encode(&ToWorker::Shutdown)
            && !link.try_send(bytes)
            && let Some(pid) = self.child_pid
        {
            kill_group(pid);
        }
        let wait = patience(&self.args.shared.group);
        myself.send_after(wait, move || WorkerMsg::ShutdownOverdue { generation });
    }

    /// Retirement: `stopping` at once (no new process, no `ready`, no restart), the
    /// process stopped once its calls are done (the idle wake-up comes back here), then
    /// the actor ends; the pool, seeing it stop while `Stopping`, does not replace it.
    pub(super) async fn retire(&mut self, myself: &ActorRef<WorkerMsg>) {
        if !self.retiring {
            tracing::info!(group = %self.args.shared.group, index = self.args.shared.index, "retiring the worker once its calls are done");
        }
        self.retiring = true;
        self.stopping = true;
        self.args.shared.set_state(WorkerState::Stopping);
        match self.args.shared.link() {
            Some(link) if link.in_flight() > 0 => {
                wake_when_idle(link, myself.clone(), self.generation)
            }
            _ => {
                self.stop("retired").await;
                myself.stop(Some("retired".into()));
            }
        }
    }

    /// Service shutdown: ask the process to shut down, kill it after [`CANCEL_GRACE`],
    /// and record its exit before answering, so that `supervisor_stopped` comes last.
    pub(super) async fn stop(&mut self, reason: &str) {
        self.stopping = true;
        self.args.shared.set_state(WorkerState::Stopping);
        let link = self.args.shared.take_link();
        if let Some(pid) = self.child_pid.take() {
            if let Some(link) = &link
                && let Ok(bytes) = frame::encode(&ToWorker::Shutdown)
            {
                link.try_send(bytes);
            }
            let status = match self.wait_exit(CANCEL_GRACE).await {
                Some(s) => s,
                None => {
                    kill_group(pid);
                    self.wait_exit(Duration::from_secs(1))
                        .await
                        .unwrap_or((None, Some(9)))
                }
            };
            kill_group(pid);
            // Its `Exited` message, if still queued, is about an older process now.
            self.generation += 1;
            self.args.events.worker_exited(
                self.args.shared.id(),
                Some(pid),
                status.0,
                status.1,
                reason,
            );
        }
        if let Some(link) = link {
            link.fail_all(&format!("the worker is stopping ({reason})"));
        }
        self.answer_waiters();
    }

    /// The exit status of the current process, waiting up to `limit` for it.
    async fn wait_exit(&mut self, limit: Duration) -> Option<ExitStatus> {
        let exited = self.exited.as_mut()?;
        match tokio::time::timeout(limit, exited.wait_for(|s| s.is_some())).await {
            Ok(Ok(s)) => *s,
            _ => None,
        }
    }
}

/// Tell the actor once `link` has no call in flight (or its process died and every
/// call was answered), without blocking the actor's mailbox meanwhile.
fn wake_when_idle(link: Arc<Link>, me: ActorRef<WorkerMsg>, generation: u64) {
    tokio::spawn(async move {
        link.until_idle().await;
        let _ = me.cast(WorkerMsg::Idle { generation });
    });
}
