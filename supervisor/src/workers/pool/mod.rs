//! One pool per tool group: N worker processes, each owned by a [`WorkerActor`] that
//! the pool's actor ([`actor`]) supervises (an actor that panics is started again, its
//! process replaced), and the dispatch path ([`dispatch`]) that sends each call to the
//! least-loaded ready worker, waits for it with the call's deadline, and turns every
//! way a call can end into exactly one outcome. Here: the pool as the service holds
//! it, its start, and what operators do to it (restart, reload, stop).
//!
//! [`WorkerActor`]: crate::workers::worker::WorkerActor

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::sync::watch;
use toolvisor_protocol::worker::WorkerInit;

use crate::events::Events;
use crate::workers::fairq::FairQueue;
use crate::workers::restart::RestartPolicy;
use crate::workers::spawn::{SpawnSpec, Spawner};
use crate::workers::worker::{
    Announce, Reconfig, RestartReason, WorkerMsg, WorkerShared, WorkerState,
};
use actor::{PoolActor, PoolArgs, PoolMsg};

mod actor;
mod dispatch;
mod share;

pub use dispatch::{Job, JobEnd};

/// What a group runs, handed to the pool by the service.
#[derive(Clone)]
pub struct PoolSpec {
    /// The group's name.
    pub group: String,
    /// Worker processes.
    pub count: usize,
    /// Calls that may wait for a worker.
    pub queue_max: usize,
    /// Calls one worker process runs at once before more wait in the group's queue.
    pub max_in_flight: usize,
    /// The one thread that forks worker processes.
    pub spawner: Spawner,
    /// The process each worker runs.
    pub spawn: SpawnSpec,
    /// Each worker's first frame (its index filled in per worker).
    pub init: WorkerInit,
    /// The restart policy every worker starts with.
    pub policy: RestartPolicy,
    /// Where worker events go.
    pub events: Events,
    /// Extra time the supervisor gives a worker past the deadline to answer itself
    /// (exec kills its command with TERM, then KILL after 2 s, and reports the output).
    pub deadline_grace: Duration,
    /// Where the tools a worker announces go (groups whose tools the worker names).
    pub announce: Option<Announce>,
}

/// The workers calls may go to, replaced as a whole when a reload changes the group's
/// `count` (readers take a snapshot: one `Arc` clone under a read lock).
type Roster = Arc<RwLock<Arc<Vec<Arc<WorkerShared>>>>>;

/// The dispatch side of a pool, shared by every call.
pub struct Pool {
    /// The group's name.
    pub group: String,
    roster: Roster,
    changed: watch::Receiver<u64>,
    queue_max: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Calls waiting for a slot, served round-robin across sessions.
    queue: Arc<FairQueue>,
    /// How many slots each session holds now.
    shares: Arc<share::Shares>,
    deadline_grace: Duration,
    actor: ActorRef<PoolMsg>,
}

impl Pool {
    /// Start the pool's actor and its workers.
    pub async fn start(spec: PoolSpec) -> Result<Arc<Pool>, ActorProcessingErr> {
        let (changed_tx, changed) = watch::channel(0u64);
        let queue = Arc::new(FairQueue::default());
        let workers: Vec<_> = (0..spec.count)
            .map(|i| WorkerShared::new(&spec.group, i as u32, changed_tx.clone(), queue.clone()))
            .collect();
        let roster: Roster = Arc::new(RwLock::new(Arc::new(workers.clone())));
        let (actor, _) = Actor::spawn(
            None,
            PoolActor,
            PoolArgs {
                spec: spec.clone(),
                workers,
                roster: roster.clone(),
                changed: changed_tx,
                queue: queue.clone(),
            },
        )
        .await?;
        Ok(Arc::new(Pool {
            group: spec.group,
            roster,
            changed,
            queue_max: AtomicUsize::new(spec.queue_max),
            max_in_flight: AtomicUsize::new(spec.max_in_flight),
            queue,
            shares: Arc::default(),
            deadline_grace: spec.deadline_grace,
            actor,
        }))
    }

    /// The group's workers now (those retiring included, as `stopping`, until they end).
    pub fn workers(&self) -> Arc<Vec<Arc<WorkerShared>>> {
        self.roster
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Send `msg` to every worker of the group that has a process now (a worker
    /// starting later never heard of what it says).
    pub fn tell_all(&self, msg: &toolvisor_protocol::worker::ToWorker) {
        for w in self.workers().iter() {
            if let Some(link) = w.link() {
                link.tell(msg);
            }
        }
    }

    /// The queue and concurrency limits of a reloaded configuration.
    pub fn set_limits(&self, queue_max: usize, max_in_flight: usize) {
        self.queue_max.store(queue_max, Ordering::SeqCst);
        self.max_in_flight.store(max_in_flight, Ordering::SeqCst);
    }

    /// Operator restart (`toolvisor restart [GROUP]`): every worker of the group, one
    /// at a time, each after its calls end; `failed` workers start again.
    pub async fn restart(&self) {
        self.restart_for(RestartReason::Operator).await;
    }

    /// Rolling restart: each worker is replaced after its calls end, and the next one
    /// only once the previous is ready again (or failed), so the group keeps serving.
    pub async fn restart_for(&self, reason: RestartReason) {
        self.restart_these(&self.workers(), reason).await;
    }

    /// SIGHUP: take the group's new `count` (new workers start with the reloaded
    /// configuration, surplus ones retire once their calls end), then replace the
    /// workers that stay, one at a time, so they run the new configuration too.
    pub async fn reload(&self, count: usize, r: &Reconfig) {
        let before = self.workers();
        let resized = self
            .actor
            .call(
                |reply| PoolMsg::Resize {
                    count,
                    reconfig: Box::new(r.clone()),
                    reply,
                },
                None,
            )
            .await;
        if let Err(e) = resized {
            tracing::error!(group = %self.group, "cannot resize the pool: {e}");
        }
        let stay: Vec<_> = before
            .iter()
            .filter(|w| (w.index as usize) < count && w.state() != WorkerState::Stopping)
            .cloned()
            .collect();
        self.restart_these(&stay, RestartReason::Reload).await;
    }

    async fn restart_these(&self, workers: &[Arc<WorkerShared>], reason: RestartReason) {
        for w in workers {
            if let Some(actor) = w.actor_ref() {
                let asked = actor
                    .call(
                        |reply| WorkerMsg::Restart {
                            reason,
                            reply: Some(reply),
                        },
                        None,
                    )
                    .await;
                if let Err(e) = asked {
                    tracing::warn!(group = %self.group, index = w.index, "restart not confirmed: {e}");
                }
            }
        }
    }

    /// Use a reloaded configuration from each worker's next start on.
    pub fn reconfigure(&self, r: &Reconfig) {
        for w in self.workers().iter() {
            if let Some(actor) = w.actor_ref() {
                let init = WorkerInit {
                    group: self.group.clone(),
                    ..r.init.clone()
                };
                let _ = actor.cast(WorkerMsg::Reconfigure(Box::new(Reconfig {
                    init,
                    ..r.clone()
                })));
            }
        }
    }

    /// Stop every worker (service shutdown).
    pub async fn stop(&self) {
        let mut waits = Vec::new();
        let workers = self.workers();
        for w in workers.iter() {
            if let Some(actor) = w.actor_ref() {
                waits.push(async move { ractor::call_t!(actor, WorkerMsg::Stop, 5_000) });
            }
        }
        futures::future::join_all(waits).await;
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("group", &self.group).finish()
    }
}
