//! One pool per tool group: N worker processes, each owned by a [`WorkerActor`] that
//! this pool's actor supervises (an actor that panics is started again, its process
//! replaced), and the dispatch path that sends each call to the least-loaded ready
//! worker, waits for it with the call's deadline, and turns every way a call can end
//! into exactly one outcome.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::Status;
use toolvisor_protocol::worker::{Outcome, WorkerInit};
use toolvisor_protocol::{ErrorBody, ErrorType};

use crate::session::events::Events;
use crate::workers::fairq::{FairQueue, Ticket};
use crate::workers::restart::RestartPolicy;
use crate::workers::spawn::{SpawnSpec, Spawner};
use crate::workers::worker::{
    Reconfig, Reply, RestartReason, WorkerActor, WorkerArgs, WorkerMsg, WorkerShared, WorkerState,
};

/// What a group runs, handed to the pool by the service.
#[derive(Clone)]
pub struct PoolSpec {
    pub group: String,
    pub count: usize,
    pub queue_max: usize,
    /// Calls one worker process runs at once before more wait in the group's queue.
    pub max_in_flight: usize,
    pub spawner: Spawner,
    pub spawn: SpawnSpec,
    pub init: WorkerInit,
    pub policy: RestartPolicy,
    pub events: Events,
    /// Extra time the supervisor gives a worker past the deadline to answer itself
    /// (exec kills its command with TERM, then KILL after 2 s, and reports the output).
    pub deadline_grace: Duration,
    /// Where announced tools go (groups whose tools are not built in).
    pub tools_hook: Option<crate::workers::worker::ToolsHook>,
}

/// One call for a worker.
pub struct Job {
    pub call: u64,
    pub name: String,
    pub tool: String,
    /// Moved into the encoded `run` frame when [`Pool::run`] starts.
    pub args: Value,
    pub stream: bool,
    pub timeout: Duration,
    /// Read-only low-risk calls are run again once if their worker dies.
    pub rerunnable: bool,
    pub output: Option<mpsc::Sender<(String, String)>>,
    /// Only this worker index may run it (background process handles name a worker).
    pub worker: Option<u32>,
    /// The session it comes from: waiting calls are served round-robin by session.
    pub session: String,
    /// The rule that allowed the call gives its command the host's network.
    pub network: bool,
}

/// How a job ended, and where it ran.
pub struct JobEnd {
    pub outcome: Outcome,
    pub worker: Option<(String, u32)>,
}

/// The workers calls may go to, replaced as a whole when a reload changes the group's
/// `count` (readers take a snapshot: one `Arc` clone under a read lock).
type Roster = Arc<RwLock<Arc<Vec<Arc<WorkerShared>>>>>;

/// The dispatch side of a pool, shared by every call.
pub struct Pool {
    pub group: String,
    roster: Roster,
    changed: watch::Receiver<u64>,
    queue_max: AtomicUsize,
    max_in_flight: AtomicUsize,
    /// Calls waiting for a slot, served round-robin across sessions.
    queue: Arc<FairQueue>,
    deadline_grace: Duration,
    pub actor: ActorRef<PoolMsg>,
}

fn err(kind: ErrorType, message: impl Into<String>) -> Outcome {
    Outcome::err(ErrorBody::new(kind, message))
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

    /// The queue and concurrency limits of a reloaded configuration.
    pub fn set_limits(&self, queue_max: usize, max_in_flight: usize) {
        self.queue_max.store(queue_max, Ordering::SeqCst);
        self.max_in_flight.store(max_in_flight, Ordering::SeqCst);
    }

    /// Run a job to its end: result, timeout, cancel, crash (re-run once when allowed).
    pub async fn run(&self, mut job: Job, cancel: &CancellationToken) -> JobEnd {
        // Waiting for a free worker is bounded by the call's timeout too; the call's
        // own clock starts when a worker takes it.
        let queue_deadline = Instant::now() + job.timeout;
        // The `run` frame is the same on every attempt (and a re-run): encode it once,
        // moving the arguments (they can be megabytes) rather than copying them.
        let frame = match crate::workers::worker::run_frame(
            job.call,
            &job.name,
            &job.tool,
            std::mem::take(&mut job.args),
            job.stream,
            job.timeout.as_millis() as u64,
            job.network,
        ) {
            Ok(f) => f,
            Err(e) => {
                return JobEnd {
                    outcome: err(
                        ErrorType::InternalError,
                        format!("cannot encode the call: {e}"),
                    ),
                    worker: None,
                };
            }
        };
        let mut rerun_left = job.rerunnable;
        loop {
            let (slot, rx) = match self.acquire(&job, &frame, queue_deadline, cancel).await {
                Ok(x) => x,
                Err(outcome) => {
                    return JobEnd {
                        outcome,
                        worker: None,
                    };
                }
            };
            let deadline = Instant::now() + job.timeout;
            let worker = slot.pid().map(|pid| (self.group.clone(), pid));
            let end = |outcome| JobEnd {
                outcome,
                worker: worker.clone(),
            };
            let give_up = tokio::time::Instant::from_std(deadline + self.deadline_grace);
            let mut rx = rx;
            let reply = tokio::select! {
                reply = &mut rx => reply,
                _ = tokio::time::sleep_until(give_up) => {
                    slot.cancel(job.call, true);
                    return end(err(ErrorType::Timeout, format!(
                        "the call did not finish within its deadline of {} ms", job.timeout.as_millis())));
                }
                _ = cancel.cancelled() => return end(cancelled(&slot, job.call, rx).await),
            };
            match reply {
                Ok(Reply::Done(outcome)) => return end(outcome),
                Ok(Reply::Crashed(why)) if rerun_left => {
                    tracing::info!(group = %self.group, call = job.call, "re-running a read-only call after: {why}");
                    rerun_left = false;
                }
                Ok(Reply::Crashed(why)) => return end(err(ErrorType::WorkerCrashed, why)),
                Err(_) => return end(err(ErrorType::WorkerCrashed, "the worker dropped the call")),
            }
        }
    }

    /// Run a job on every worker that is ready now, all at once; each end comes with
    /// its worker's index, in index order. For questions whose answer each worker keeps
    /// to itself (its background jobs). A worker that is not ready is left out: it is
    /// starting or restarting (a restart killed its jobs) or failed. Empty when no
    /// worker is ready.
    pub async fn run_on_ready(
        &self,
        make: impl Fn(u32) -> Job,
        cancel: &CancellationToken,
    ) -> Vec<(u32, JobEnd)> {
        let workers = self.workers();
        let runs = workers
            .iter()
            .filter(|w| w.state() == WorkerState::Ready)
            .map(|w| {
                let mut job = make(w.index);
                job.worker = Some(w.index);
                let index = w.index;
                async move { (index, self.run(job, cancel).await) }
            });
        futures::future::join_all(runs).await
    }

    /// Find a ready worker with room and submit the job's encoded `run` frame to it,
    /// waiting (bounded by the deadline and the queue) when none is ready.
    async fn acquire(
        &self,
        job: &Job,
        frame: &[u8],
        deadline: Instant,
        cancel: &CancellationToken,
    ) -> Result<(Arc<WorkerShared>, tokio::sync::oneshot::Receiver<Reply>), Outcome> {
        let mut changed = self.changed.clone();
        let mut ticket = None::<Ticket<'_>>;
        loop {
            if cancel.is_cancelled() {
                return Err(err(ErrorType::Cancelled, "the call was cancelled"));
            }
            changed.borrow_and_update();
            // Newcomers go straight to a free slot only when nobody is waiting.
            let my_turn = match &ticket {
                None => self.queue.is_empty(),
                Some(t) => self.queue.is_turn(t.id),
            };
            if my_turn && let Some(slot) = self.pick(job.worker) {
                if let Some(rx) = slot
                    .submit(frame.to_vec(), job.call, job.output.clone())
                    .await
                {
                    return Ok((slot, rx));
                }
                continue;
            }
            if let Some(e) = self.unavailable(job.worker) {
                return Err(e);
            }
            let Some(t) = &ticket else {
                ticket = Some(self.join_queue(&job.session)?);
                continue;
            };
            tokio::select! {
                _ = changed.changed() => {}
                _ = t.wake.notified() => {}
                _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {
                    return Err(err(ErrorType::Timeout, format!(
                        "no {} worker became available within the deadline of {} ms",
                        self.group, job.timeout.as_millis())));
                }
                _ = cancel.cancelled() => {}
            }
        }
    }

    /// A place in the group's bounded wait queue; `Overloaded` when it is full.
    fn join_queue(&self, session: &str) -> Result<Ticket<'_>, Outcome> {
        let max = self.queue_max.load(Ordering::SeqCst);
        if self.queue.len() >= max {
            return Err(err(
                ErrorType::Overloaded,
                format!(
                    "the {} queue is full ({max} calls waiting); retry later",
                    self.group
                ),
            ));
        }
        Ok(self.queue.join(session))
    }

    /// The least-loaded ready worker with room (or the one the job names).
    fn pick(&self, only: Option<u32>) -> Option<Arc<WorkerShared>> {
        let max = self.max_in_flight.load(Ordering::SeqCst);
        self.workers()
            .iter()
            .filter(|w| only.is_none_or(|i| w.index == i))
            .filter(|w| w.state() == WorkerState::Ready)
            .map(|w| (w.in_flight(), w))
            .filter(|(n, _)| *n < max)
            .min_by_key(|(n, _)| *n)
            .map(|(_, w)| w.clone())
    }

    /// `WorkerUnavailable` when every worker that could run the job has failed.
    fn unavailable(&self, only: Option<u32>) -> Option<Outcome> {
        let workers = self.workers();
        let mut candidates = workers
            .iter()
            .filter(|w| only.is_none_or(|i| w.index == i))
            .peekable();
        if candidates.peek().is_none() {
            let message = match only {
                Some(i) => format!(
                    "there is no {} worker {i} (any more): the process handle belonged to a \
                     worker that was restarted or removed, and its processes ended with it",
                    self.group
                ),
                None => format!("the {} group has no workers", self.group),
            };
            return Some(err(ErrorType::InvalidParams, message));
        }
        let mut retry: Option<Duration> = None;
        for w in candidates {
            if w.state() != WorkerState::Failed {
                return None;
            }
            retry = match (retry, w.retry_after()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
        }
        let mut body = ErrorBody::new(
            ErrorType::WorkerUnavailable,
            match retry {
                Some(_) => format!("every {} worker has failed; retry later", self.group),
                None => format!(
                    "every {} worker has failed; an operator restart (`toolvisor restart {}`) is needed",
                    self.group, self.group
                ),
            },
        );
        body.retry_after_ms = Some(retry.map_or(0, |d| d.as_millis() as u64).max(1));
        Some(Outcome::err(body))
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

pub enum PoolMsg {
    /// Grow or shrink to `count` workers (SIGHUP); new ones start with the reloaded
    /// configuration. Answered once new workers are spawned and the others told to
    /// retire (not once they have).
    Resize {
        count: usize,
        reconfig: Box<Reconfig>,
        reply: RpcReplyPort<()>,
    },
}

pub struct PoolArgs {
    spec: PoolSpec,
    workers: Vec<Arc<WorkerShared>>,
    roster: Roster,
    changed: watch::Sender<u64>,
    queue: Arc<FairQueue>,
}

pub struct PoolActor;

pub struct PoolState {
    spec: PoolSpec,
    /// Workers `0..count`, each with its actor at the same position in `actors`.
    workers: Vec<Arc<WorkerShared>>,
    actors: Vec<ActorCell>,
    /// Workers leaving after a shrink, until their actors end.
    retiring: Vec<(Arc<WorkerShared>, ActorCell)>,
    roster: Roster,
    changed: watch::Sender<u64>,
    queue: Arc<FairQueue>,
}

impl PoolState {
    /// Show the current workers (and the retiring ones) to the dispatch side.
    fn publish(&self) {
        let mut all = self.workers.clone();
        all.extend(self.retiring.iter().map(|(w, _)| w.clone()));
        *self.roster.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(all);
        self.changed.send_modify(|n| *n += 1);
    }

    /// Take a reloaded configuration for workers started from now on, then grow (new
    /// indices after the last) or shrink (the highest indices retire after their calls).
    async fn resize(&mut self, myself: &ActorRef<PoolMsg>, count: usize, r: Reconfig) {
        self.spec.init = WorkerInit {
            group: self.spec.group.clone(),
            ..r.init
        };
        self.spec.spawn.passthrough = r.passthrough;
        self.spec.policy = RestartPolicy::new(r.supervisor);
        let before = self.workers.len();
        if count < before {
            let workers = self.workers.split_off(count);
            let actors = self.actors.split_off(count);
            for (w, a) in workers.into_iter().zip(actors) {
                if let Some(actor) = w.actor_ref() {
                    let _ = actor.cast(WorkerMsg::Retire);
                }
                self.retiring.push((w, a));
            }
        }
        for i in before..count {
            let shared = WorkerShared::new(
                &self.spec.group,
                i as u32,
                self.changed.clone(),
                self.queue.clone(),
            );
            self.workers.push(shared);
            self.actors.push(myself.get_cell());
            if let Err(e) = self.spawn_worker(myself, i).await {
                tracing::error!(group = %self.spec.group, index = i, "cannot start a new worker: {e}");
            }
        }
        if count != before {
            tracing::info!(group = %self.spec.group, from = before, to = count, "worker count changed");
        }
        self.publish();
    }

    async fn spawn_worker(
        &mut self,
        myself: &ActorRef<PoolMsg>,
        i: usize,
    ) -> Result<(), ActorProcessingErr> {
        let args = WorkerArgs {
            shared: self.workers[i].clone(),
            spawner: self.spec.spawner.clone(),
            spec: self.spec.spawn.clone(),
            init: WorkerInit {
                index: i as u32,
                ..self.spec.init.clone()
            },
            policy: self.spec.policy.clone(),
            events: self.spec.events.clone(),
            tools_hook: self.spec.tools_hook.clone(),
        };
        let (actor, _) = Actor::spawn_linked(None, WorkerActor, args, myself.get_cell()).await?;
        self.actors[i] = actor.get_cell();
        Ok(())
    }
}

impl Actor for PoolActor {
    type Msg = PoolMsg;
    type State = PoolState;
    type Arguments = PoolArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<PoolMsg>,
        args: PoolArgs,
    ) -> Result<PoolState, ActorProcessingErr> {
        let n = args.workers.len();
        let mut st = PoolState {
            spec: args.spec,
            workers: args.workers,
            actors: Vec::with_capacity(n),
            retiring: Vec::new(),
            roster: args.roster,
            changed: args.changed,
            queue: args.queue,
        };
        for i in 0..n {
            st.actors.push(myself.get_cell());
            st.spawn_worker(&myself, i).await?;
        }
        Ok(st)
    }

    async fn handle(
        &self,
        myself: ActorRef<PoolMsg>,
        msg: PoolMsg,
        st: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            PoolMsg::Resize {
                count,
                reconfig,
                reply,
            } => {
                st.resize(&myself, count, *reconfig).await;
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    /// A worker actor that panicked or stopped is started again; its process was
    /// killed when its state dropped, and the new actor starts a new one. A retired
    /// worker's actor ending takes it off the roster.
    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<PoolMsg>,
        evt: SupervisionEvent,
        st: &mut PoolState,
    ) -> Result<(), ActorProcessingErr> {
        let cell = match &evt {
            SupervisionEvent::ActorFailed(cell, e) => {
                tracing::error!("a worker actor failed: {e}");
                cell.clone()
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => cell.clone(),
            _ => return Ok(()),
        };
        if let Some(r) = st
            .retiring
            .iter()
            .position(|(_, a)| a.get_id() == cell.get_id())
        {
            st.retiring.remove(r);
            st.publish();
            return Ok(());
        }
        let Some(i) = st.actors.iter().position(|a| a.get_id() == cell.get_id()) else {
            return Ok(());
        };
        if st.workers[i].state() == WorkerState::Stopping {
            return Ok(());
        }
        if let Err(e) = st.spawn_worker(&myself, i).await {
            tracing::error!("cannot restart worker actor {i}: {e}");
        }
        Ok(())
    }
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("group", &self.group).finish()
    }
}

/// Cancel on the worker and wait (bounded) for what it had, so a cancelled command
/// still shows its output; the status is `cancelled` whatever the worker says.
async fn cancelled(
    slot: &Arc<WorkerShared>,
    call: u64,
    rx: tokio::sync::oneshot::Receiver<Reply>,
) -> Outcome {
    slot.cancel(call, false);
    let fallback = err(ErrorType::Cancelled, "the call was cancelled");
    let wait = crate::workers::worker::patience(&slot.group) + Duration::from_millis(500);
    match tokio::time::timeout(wait, rx).await {
        Ok(Ok(Reply::Done(mut o))) => {
            if o.status != Status::Cancelled {
                o.status = Status::Cancelled;
                o.error = Some(ErrorBody::new(
                    ErrorType::Cancelled,
                    "the call was cancelled",
                ));
            }
            o
        }
        Ok(_) => fallback,
        Err(_) => {
            slot.cancel(call, true);
            fallback
        }
    }
}
