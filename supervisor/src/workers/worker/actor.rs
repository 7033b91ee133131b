//! The actor that owns one worker process: spawn, `init`, `ready`, death, backoff,
//! restart.
//!
//! Death is seen first as EOF on the control socket; the process is then killed for
//! sure and its exit status collected, every call still in flight on it is answered at
//! once, and the restart policy says when it starts again. Every start is tagged with
//! a generation, so a message about an older process (a start scheduled by a backoff
//! that an operator restart overtook, a late exit) is dropped, and one worker never
//! runs two processes. Replacements on purpose are in [`replace`].

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::watch;
use toolvisor_protocol::frame;
use toolvisor_protocol::message::Guards;
use toolvisor_protocol::worker::{AnnouncedTool, ToWorker, WorkerInit};

use super::link::{Link, ReaderArgs};
use super::shared::{WorkerShared, WorkerState};
use super::{kill_group, lock, patience, ready_timeout};
use crate::events::{Events, WorkerEvent};
use crate::workers::restart::{Next, RestartPolicy};
use crate::workers::spawn::{SpawnSpec, Spawner};
use replace::Planned;
pub use replace::RestartReason;

mod exit;
mod replace;

/// How a process ended: exit code or signal (one of them `None`).
type ExitStatus = (Option<i32>, Option<i32>);

/// Messages of a worker actor.
pub enum WorkerMsg {
    /// Start the process, unless `generation` is stale: a start scheduled by a backoff
    /// or a cool-down is dropped when an operator restart already started a newer one.
    Start {
        /// The start this message schedules.
        generation: u64,
    },
    /// The process said `ready`.
    Ready {
        /// The process that said it.
        generation: u64,
        /// Its pid as it sees itself (the spawned pid is what is audited).
        pid: u32,
        /// The protections it applied to itself.
        guards: Guards,
    },
    /// The process broke the worker protocol (a frame about a call it was not given,
    /// or one that does not decode): its frames are no longer read, its calls were
    /// answered `crashed`, and it is killed and replaced like a crashed one.
    Violation {
        /// The process that broke it.
        generation: u64,
        /// What it did.
        why: String,
    },
    /// The control socket reached EOF.
    Eof {
        /// The process whose socket closed.
        generation: u64,
    },
    /// The process exited (status collected).
    Exited {
        /// The process that exited.
        generation: u64,
        /// Its exit code, if it exited.
        code: Option<i32>,
        /// The signal that killed it, if one did.
        signal: Option<i32>,
    },
    /// The process did not say `ready` within its [`super::ready_timeout`]: it is killed.
    ReadyTimeout {
        /// The process that was given the time.
        generation: u64,
    },
    /// Leave the pool for good (SIGHUP lowered the group's `count`): take no more
    /// calls, stop the process once its calls are done, then end this actor.
    Retire,
    /// Replace the process once its calls are done. The reply (if any) comes once the
    /// new process is ready, or has failed, or the service stops.
    Restart {
        /// Why (said in the `worker_exited` record).
        reason: RestartReason,
        /// Answered once the new process is ready or has failed.
        reply: Option<ractor::RpcReplyPort<()>>,
    },
    /// The process being replaced has no call left in flight.
    Idle {
        /// The process being replaced.
        generation: u64,
    },
    /// A process asked to shut down did not exit within its group's [`patience`].
    ShutdownOverdue {
        /// The process asked to shut down.
        generation: u64,
    },
    /// A reloaded configuration, used from the next start on.
    Reconfigure(Box<Reconfig>),
    /// Stop the process for good (service shutdown).
    Stop(ractor::RpcReplyPort<()>),
}

/// What a reload changes in how a worker is (re)started.
#[derive(Clone, Debug)]
pub struct Reconfig {
    /// The next `init` (the worker's own index is kept).
    pub init: WorkerInit,
    /// The group's `env_passthrough`.
    pub passthrough: Vec<String>,
    /// The restart policy.
    pub supervisor: crate::config::SupervisorConfig,
}

/// Everything a worker actor needs to (re)start its process.
pub struct WorkerArgs {
    /// What calls and status read; the actor keeps it current.
    pub shared: Arc<WorkerShared>,
    /// The one thread that forks worker processes.
    pub spawner: Spawner,
    /// The process to start.
    pub spec: SpawnSpec,
    /// Its first frame.
    pub init: WorkerInit,
    /// When to restart after a crash, and when to give up.
    pub policy: RestartPolicy,
    /// Where `worker_started`, `worker_exited` and `worker_failed` go (audit, subscribers).
    pub events: Events,
    /// Where announced tools go (groups whose worker names its tools).
    pub announce: Option<Announce>,
}

/// Receives the tools a worker announces: in its `ready`, and again whenever its set
/// changes (a `tools` frame). The newest announcement replaces the group's tools.
pub type Announce = Arc<dyn Fn(Vec<AnnouncedTool>) + Send + Sync>;

/// The actor owning one worker process (its state is [`WorkerActorState`]).
pub struct WorkerActor;

/// The actor's state: the current process, its generation, the replacement under way.
/// Dropping it kills the process, so a panicked actor leaves none behind.
pub struct WorkerActorState {
    args: WorkerArgs,
    generation: u64,
    child_pid: Option<u32>,
    /// Set to the exit status once the current process has been reaped.
    exited: Option<watch::Receiver<Option<ExitStatus>>>,
    stopping: bool,
    /// Leaving the pool for good (see [`WorkerMsg::Retire`]).
    retiring: bool,
    guards: Guards,
    planned: Option<Planned>,
    /// Restart requests answered once the new process is ready (or failed).
    waiters: Vec<ractor::RpcReplyPort<()>>,
    /// Why the current process was killed on purpose, if it was.
    kill_reason: Option<&'static str>,
    /// A reload changed what the next process starts with (its `init`, its
    /// environment): only then does a reload replace the running one. A reload that
    /// changed nothing the process holds (rules, timeouts, limits the supervisor
    /// applies) leaves it, and the background processes it runs, alone.
    stale: bool,
}

impl Drop for WorkerActorState {
    /// An actor that dies (even by panic) takes its process with it.
    fn drop(&mut self) {
        if let Some(pid) = self.child_pid.take() {
            kill_group(pid);
        }
    }
}

impl Actor for WorkerActor {
    type Msg = WorkerMsg;
    type State = WorkerActorState;
    type Arguments = WorkerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<WorkerMsg>,
        args: WorkerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        *lock(&args.shared.actor) = Some(myself.clone());
        myself.cast(WorkerMsg::Start { generation: 0 })?;
        Ok(WorkerActorState {
            args,
            generation: 0,
            child_pid: None,
            exited: None,
            stopping: false,
            retiring: false,
            guards: Guards::default(),
            planned: None,
            waiters: Vec::new(),
            kill_reason: None,
            stale: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<WorkerMsg>,
        msg: WorkerMsg,
        st: &mut WorkerActorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            WorkerMsg::Start { generation } if generation == st.generation => {
                st.start(&myself).await
            }
            WorkerMsg::Ready {
                generation,
                pid,
                guards,
            } if generation == st.generation => st.ready(pid, guards),
            WorkerMsg::Eof { generation } if generation == st.generation => st.eof(),
            WorkerMsg::Violation { generation, why } if generation == st.generation => {
                st.violation(&why)
            }
            WorkerMsg::ReadyTimeout { generation } if generation == st.generation => {
                st.ready_timeout()
            }
            WorkerMsg::Exited {
                generation,
                code,
                signal,
            } if generation == st.generation => {
                st.exited(&myself, code, signal).await;
            }
            WorkerMsg::Restart { reason, reply } => st.restart(&myself, reason, reply).await,
            WorkerMsg::Retire => st.retire(&myself).await,
            WorkerMsg::Idle { generation } if generation == st.generation && st.retiring => {
                st.retire(&myself).await
            }
            WorkerMsg::Idle { generation } if generation == st.generation => st.idle(&myself),
            WorkerMsg::ShutdownOverdue { generation } if generation == st.generation => {
                if let Some(pid) = st.child_pid {
                    tracing::warn!(group = %st.args.shared.group, pid, "worker did not shut down within {:?}; killing it", patience(&st.args.shared.group));
                    kill_group(pid);
                }
            }
            WorkerMsg::Reconfigure(r) => st.reconfigure(*r),
            WorkerMsg::Stop(reply) => {
                st.stop("shutdown").await;
                let _ = reply.send(());
            }
            _ => {} // a message about an older process
        }
        Ok(())
    }
}

impl WorkerActorState {
    /// The protections the current process reported.
    pub fn guards(&self) -> &Guards {
        &self.guards
    }

    fn planned_here(&self) -> bool {
        self.planned
            .as_ref()
            .is_some_and(|p| p.generation == self.generation)
    }

    /// Answer every restart request: the worker is ready, failed, or stopping.
    fn answer_waiters(&mut self) {
        for w in self.waiters.drain(..) {
            let _ = w.send(());
        }
    }

    fn ready(&mut self, reported: u32, guards: Guards) {
        // The pid we spawned is the one audited; an external worker's word about its
        // pid or its protections is not taken (`status.guards` reports ours only).
        let pid = self.child_pid.unwrap_or(reported);
        let guards = match self.args.spec.command {
            Some(_) => Guards::default(),
            None => guards,
        };
        self.args.policy.on_ready(Instant::now());
        *lock(&self.args.shared.guards) = guards.clone();
        self.guards = guards;
        self.args
            .events
            .worker(WorkerEvent::Started, self.args.shared.id(), Some(pid));
        if self.planned_here() || self.stopping {
            // Already being replaced (or stopped): it must not take calls.
            return;
        }
        self.args.shared.set_state(WorkerState::Ready);
        tracing::info!(group = %self.args.shared.group, index = self.args.shared.index, pid, "worker ready");
        self.answer_waiters();
    }

    /// EOF on the control socket: the process is dying, make sure of it. A process
    /// asked to shut down is let exit by itself (bounded by `ShutdownOverdue`), so its
    /// exec jobs are killed and logged cleanly.
    fn eof(&mut self) {
        let shutting_down = self
            .planned
            .as_ref()
            .is_some_and(|p| p.generation == self.generation && p.shutdown_sent);
        if !shutting_down && let Some(pid) = self.child_pid {
            kill_group(pid);
        }
    }

    /// A protocol violation: kill the process (its exit restarts it per the policy,
    /// recorded with reason `protocol_violation`), even one asked to shut down.
    fn violation(&mut self, why: &str) {
        if let Some(pid) = self.child_pid {
            tracing::warn!(group = %self.args.shared.group, index = self.args.shared.index, pid, "{why}");
            self.kill_reason = Some("protocol_violation");
            kill_group(pid);
        }
    }

    fn ready_timeout(&mut self) {
        if self.args.shared.state() == WorkerState::Starting
            && let Some(pid) = self.child_pid
        {
            let limit = ready_timeout(&self.args.init);
            tracing::warn!(group = %self.args.shared.group, pid, "worker not ready within {limit:?}");
            self.kill_reason = Some("not_ready");
            kill_group(pid);
        }
    }

    fn reconfigure(&mut self, r: Reconfig) {
        let init = WorkerInit {
            index: self.args.init.index,
            generation: self.args.init.generation,
            ..r.init
        };
        if init != self.args.init || r.passthrough != self.args.spec.passthrough {
            self.stale = true;
        }
        self.args.init = init;
        self.args.spec.passthrough = r.passthrough;
        self.args.policy.reconfigure(r.supervisor);
    }

    /// Whether a reload finds nothing to replace: an exec worker (the one group whose
    /// process holds state a restart loses: background processes) that runs, started
    /// with what the reloaded configuration would start it with. Other groups are
    /// replaced on every reload (the `meta` worker rescans skills, an MCP worker lists
    /// its server's tools again).
    fn reload_changes_nothing(&self) -> bool {
        self.args.shared.group == toolvisor_protocol::tools::EXEC
            && !self.stale
            && self.child_pid.is_some()
            && matches!(
                self.args.shared.state(),
                WorkerState::Ready | WorkerState::Starting
            )
    }

    async fn start(&mut self, myself: &ActorRef<WorkerMsg>) {
        if self.stopping {
            self.answer_waiters();
            return;
        }
        if let Some(pid) = self.child_pid {
            // Never two processes for one worker: a start while one runs is a bug.
            tracing::error!(group = %self.args.shared.group, pid, "start asked while a worker process runs; ignored");
            return;
        }
        self.generation += 1;
        self.kill_reason = None;
        self.stale = false;
        let generation = self.generation;
        self.args.shared.set_state(WorkerState::Starting);
        self.args.shared.set_retry_at(None);
        if let Some(why) = &self.args.spec.refused {
            tracing::error!(group = %self.args.shared.group, "not started: {why}");
            let _ = myself.cast(WorkerMsg::Exited {
                generation,
                code: Some(crate::workers::restart::EXIT_CONFIG),
                signal: None,
            });
            return;
        }
        let spawned = match self.args.spawner.spawn(self.args.spec.clone()).await {
            Ok(s) => s,
            Err(e) => {
                tracing::error!(group = %self.args.shared.group, "cannot start a worker: {e}");
                let _ = myself.cast(WorkerMsg::Exited {
                    generation,
                    code: Some(127),
                    signal: None,
                });
                return;
            }
        };
        self.child_pid = Some(spawned.pid);
        self.exited = Some(watch_exit(spawned.child, myself.clone(), generation));
        let control = match spawned
            .control
            .set_nonblocking(true)
            .and_then(|_| tokio::net::UnixStream::from_std(spawned.control))
        {
            Ok(c) => c,
            Err(e) => {
                // Its exit arrives as `Exited` and goes through the restart policy.
                tracing::error!("worker control socket: {e}");
                kill_group(spawned.pid);
                return;
            }
        };
        let reader = ReaderArgs {
            actor: myself.clone(),
            generation,
            max_frame: self.args.init.limits.max_frame_bytes,
            announce: self.args.announce.clone(),
            events: self.args.events.clone(),
            group: self.args.init.group.clone(),
        };
        let link = Link::open(spawned.pid, control, self.args.shared.queue.clone(), reader);
        let init = WorkerInit {
            generation: self.generation,
            ..self.args.init.clone()
        };
        if let Ok(init) = frame::encode(&ToWorker::Init(Box::new(init))) {
            link.send(init).await;
        }
        self.args.shared.set_link(link);
        myself.send_after(ready_timeout(&self.args.init), move || {
            WorkerMsg::ReadyTimeout { generation }
        });
    }
}

/// Reap `child` in a task; its status goes to the watch (for `stop`) and to the actor.
fn watch_exit(
    mut child: tokio::process::Child,
    me: ActorRef<WorkerMsg>,
    generation: u64,
) -> watch::Receiver<Option<ExitStatus>> {
    let (tx, rx) = watch::channel(None);
    tokio::spawn(async move {
        let (code, signal) = match child.wait().await {
            Ok(s) => {
                use std::os::unix::process::ExitStatusExt;
                (s.code(), s.signal())
            }
            Err(_) => (None, None),
        };
        let _ = tx.send(Some((code, signal)));
        let _ = me.cast(WorkerMsg::Exited {
            generation,
            code,
            signal,
        });
    });
    rx
}
