//! One worker process, owned by one `WorkerActor`.
//!
//! The actor runs the process's life: spawn, `init`, `ready`, death, backoff, restart.
//! Calls do not pass through its mailbox: a dispatcher registers the call in the
//! current [`Link`] and writes the `run` frame itself, and the link's reader task hands
//! each `done` straight to the waiting call. Death is seen first as EOF on the control
//! socket; the process is then killed for sure and its exit status collected, and
//! every call still in flight on it is answered at once.
//!
//! A planned replacement (operator `restart`, SIGHUP, the memory watchdog) never blocks
//! the mailbox: the worker stops taking calls, a task reports when the last one ended,
//! then the process gets `Shutdown` (the exec worker kills and logs its background
//! jobs) and `SIGKILL` only if it is still there after its group's [`patience`]. Every
//! start is tagged with a generation, so a start scheduled by a backoff or cool-down
//! that an operator restart overtook is dropped, and one worker never runs two
//! processes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, oneshot, watch};
use toolvisor_protocol::frame;
use toolvisor_protocol::message::Guards;
use toolvisor_protocol::worker::{
    AnnouncedTool, FromWorker, KNOWN_FROM_WORKER, Outcome, ToWorker, WorkerInit,
};

use crate::session::events::{Events, WorkerEvent};
use crate::workers::fairq::FairQueue;
use crate::workers::restart::{Next, RestartPolicy};
use crate::workers::spawn::{SpawnSpec, Spawner};

/// How long a started worker of a built-in group has to say `ready`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a worker may ignore a cancel before it is killed.
pub const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// The same for an exec worker: a command that ignores SIGTERM is killed by its shim
/// 2 s after it (the worker's own backstop kills the shim 6 s later) and the worker
/// then drains its pipes; a call never costs the other calls their worker.
pub const EXEC_PATIENCE: Duration = Duration::from_secs(12);

/// How long the supervisor waits for a worker of `group` to answer a cancel, or a call
/// past its deadline, before it gives up on the process.
pub fn patience(group: &str) -> Duration {
    if group == "exec" {
        EXEC_PATIENCE
    } else {
        CANCEL_GRACE
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
    Starting = 0,
    Ready = 1,
    Restarting = 2,
    Failed = 3,
    Stopping = 4,
}

impl WorkerState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerState::Starting => "starting",
            WorkerState::Ready => "ready",
            WorkerState::Restarting => "restarting",
            WorkerState::Failed => "failed",
            WorkerState::Stopping => "stopping",
        }
    }

    fn from_u8(v: u8) -> Self {
        match v {
            0 => WorkerState::Starting,
            1 => WorkerState::Ready,
            2 => WorkerState::Restarting,
            3 => WorkerState::Failed,
            _ => WorkerState::Stopping,
        }
    }
}

/// How a call on a worker ended, as the dispatcher sees it.
#[derive(Debug)]
pub enum Reply {
    Done(Outcome),
    /// The process died with the call in flight.
    Crashed(String),
}

/// A call registered on a link.
struct Pending {
    reply: Option<oneshot::Sender<Reply>>,
    output: Option<mpsc::Sender<(String, String)>>,
    /// Cancelled when nobody waits for the call any more: its streamed output, held up
    /// by a client that does not read, must not hold up the link (other calls' frames,
    /// its own `done`).
    abandoned: tokio_util::sync::CancellationToken,
}

/// The connection to one running worker process.
pub struct Link {
    pub pid: u32,
    tx: mpsc::Sender<Vec<u8>>,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Woken whenever the last call in flight ends.
    idle: tokio::sync::Notify,
    /// The group's wait queue: a freed slot is the next waiter's turn.
    queue: Arc<FairQueue>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Link {
    /// Hand a worker's message to the call it belongs to.
    async fn deliver(&self, msg: FromWorker) {
        match msg {
            FromWorker::Done { call, outcome } => {
                let pending = {
                    let mut map = lock(&self.pending);
                    let p = map.remove(&call);
                    if map.is_empty() {
                        self.idle.notify_waiters();
                    }
                    p
                };
                self.queue.wake_turn();
                if let Some(reply) = pending.and_then(|p| p.reply) {
                    let _ = reply.send(Reply::Done(outcome));
                }
            }
            FromWorker::Output { call, stream, data } => {
                let out = lock(&self.pending)
                    .get(&call)
                    .and_then(|p| p.output.clone().map(|o| (o, p.abandoned.clone())));
                if let Some((out, abandoned)) = out {
                    tokio::select! {
                        _ = out.send((stream, data)) => {}
                        _ = abandoned.cancelled() => {}
                    }
                }
            }
            FromWorker::Ready { .. } | FromWorker::ToolsChanged { .. } => {}
        }
    }

    /// Answer every call still registered: the process is gone.
    fn fail_all(&self, why: &str) {
        let pending: Vec<Pending> = lock(&self.pending).drain().map(|(_, p)| p).collect();
        self.idle.notify_waiters();
        self.queue.wake_turn();
        for p in pending {
            if let Some(reply) = p.reply {
                let _ = reply.send(Reply::Crashed(why.to_owned()));
            }
        }
    }

    pub fn in_flight(&self) -> usize {
        lock(&self.pending).len()
    }

    fn has(&self, call: u64) -> bool {
        lock(&self.pending).contains_key(&call)
    }

    /// Resolves once no call is in flight.
    async fn until_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// What the pool and status see of a worker, shared with its actor.
pub struct WorkerShared {
    pub group: String,
    pub index: u32,
    state: AtomicU8,
    pub restarts: AtomicU32,
    link: Mutex<Option<Arc<Link>>>,
    /// Bumped on every state change, so waiters for a ready worker wake.
    changed: watch::Sender<u64>,
    /// When a failed worker will try again (for `retry_after_ms`).
    retry_at: Mutex<Option<Instant>>,
    pub actor: Mutex<Option<ActorRef<WorkerMsg>>>,
    /// The protections the current process reported in its `ready`.
    pub guards: Mutex<Guards>,
    /// The group's wait queue (shared by the pool's workers).
    pub queue: Arc<FairQueue>,
}

impl WorkerShared {
    pub fn new(
        group: &str,
        index: u32,
        changed: watch::Sender<u64>,
        queue: Arc<FairQueue>,
    ) -> Arc<Self> {
        Arc::new(WorkerShared {
            group: group.to_owned(),
            index,
            state: AtomicU8::new(WorkerState::Starting as u8),
            restarts: AtomicU32::new(0),
            link: Mutex::new(None),
            changed,
            retry_at: Mutex::new(None),
            actor: Mutex::new(None),
            guards: Mutex::new(Guards::default()),
            queue,
        })
    }

    pub fn state(&self) -> WorkerState {
        WorkerState::from_u8(self.state.load(Ordering::SeqCst))
    }

    fn set_state(&self, s: WorkerState) {
        self.state.store(s as u8, Ordering::SeqCst);
        self.changed.send_modify(|n| *n += 1);
        if s == WorkerState::Ready {
            self.queue.wake_turn();
        }
    }

    pub fn link(&self) -> Option<Arc<Link>> {
        lock(&self.link).clone()
    }

    pub fn pid(&self) -> Option<u32> {
        self.link().map(|l| l.pid)
    }

    pub fn in_flight(&self) -> usize {
        self.link().map_or(0, |l| l.in_flight())
    }

    /// The actor that owns this worker (none while a panicked one is replaced).
    pub fn actor_ref(&self) -> Option<ActorRef<WorkerMsg>> {
        lock(&self.actor).clone()
    }

    pub fn retry_after(&self) -> Option<Duration> {
        lock(&self.retry_at).map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Register a call on the current process and send its encoded `run` frame (see
    /// [`run_frame`]). `None` when the worker is not ready (the caller picks another
    /// or waits).
    pub async fn submit(
        &self,
        bytes: Vec<u8>,
        call: u64,
        output: Option<mpsc::Sender<(String, String)>>,
    ) -> Option<oneshot::Receiver<Reply>> {
        if self.state() != WorkerState::Ready {
            return None;
        }
        let link = self.link()?;
        let (reply, rx) = oneshot::channel();
        lock(&link.pending).insert(
            call,
            Pending {
                reply: Some(reply),
                output,
                abandoned: tokio_util::sync::CancellationToken::new(),
            },
        );
        if link.tx.send(bytes).await.is_err() {
            lock(&link.pending).remove(&call);
            return None;
        }
        Some(rx)
    }

    /// Ask the worker to stop a call. When `abandon`, nobody waits for its answer any
    /// more; a worker that still has not answered after its group's [`patience`] is
    /// killed.
    pub fn cancel(self: &Arc<Self>, call: u64, abandon: bool) {
        let Some(link) = self.link() else { return };
        if abandon && let Some(p) = lock(&link.pending).get_mut(&call) {
            p.reply = None;
            p.output = None;
            p.abandoned.cancel();
        }
        if let Ok(bytes) = frame::encode(&ToWorker::Cancel { call }) {
            let _ = link.tx.try_send(bytes);
        }
        let this = self.clone();
        let wait = patience(&self.group);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            // A deadline, not synchronisation: the worker had its chance to answer.
            if let Some(now) = this.link()
                && Arc::ptr_eq(&now, &link)
                && link.has(call)
            {
                tracing::warn!(group = %this.group, index = this.index, pid = link.pid, call,
                    "worker ignored a cancel for {wait:?}; killing it");
                kill_group(link.pid);
            }
        });
    }
}

/// SIGKILL a worker's process group (it leads its own group).
pub fn kill_group(pid: u32) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

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

/// How a process ended: exit code or signal (one of them `None`).
type ExitStatus = (Option<i32>, Option<i32>);

/// Messages of a worker actor.
pub enum WorkerMsg {
    /// Start the process, unless `generation` is stale: a start scheduled by a backoff
    /// or a cool-down is dropped when an operator restart already started a newer one.
    Start {
        generation: u64,
    },
    /// The process said `ready`.
    Ready {
        generation: u64,
        pid: u32,
        guards: Guards,
        /// The tools it offers, when its group's tools are not built in.
        tools: Option<Vec<AnnouncedTool>>,
    },
    /// The process's tools changed (`tools_changed`).
    Tools {
        generation: u64,
        tools: Vec<AnnouncedTool>,
    },
    /// The control socket reached EOF.
    Eof {
        generation: u64,
    },
    /// The process exited (status collected).
    Exited {
        generation: u64,
        code: Option<i32>,
        signal: Option<i32>,
    },
    ReadyTimeout {
        generation: u64,
    },
    /// Leave the pool for good (SIGHUP lowered the group's `count`): take no more
    /// calls, stop the process once its calls are done, then end this actor.
    Retire,
    /// Replace the process once its calls are done. The reply (if any) comes once the
    /// new process is ready, or has failed, or the service stops.
    Restart {
        reason: RestartReason,
        reply: Option<ractor::RpcReplyPort<()>>,
    },
    /// The process being replaced has no call left in flight.
    Idle {
        generation: u64,
    },
    /// A process asked to shut down did not exit within its group's [`patience`].
    ShutdownOverdue {
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
    pub init: WorkerInit,
    pub passthrough: Vec<String>,
    pub supervisor: crate::config::SupervisorConfig,
}

/// A replacement under way: the process of `generation` is let finish its calls, then
/// asked to shut down (so the exec worker kills and logs its background jobs).
struct Planned {
    reason: RestartReason,
    generation: u64,
    shutdown_sent: bool,
}

/// Everything a worker actor needs to (re)start its process.
pub struct WorkerArgs {
    pub shared: Arc<WorkerShared>,
    pub spawner: Spawner,
    pub spec: SpawnSpec,
    pub init: WorkerInit,
    pub policy: RestartPolicy,
    pub events: Events,
    /// Where the tools a worker announces go (groups whose tools are not built in).
    pub tools_hook: Option<ToolsHook>,
}

/// Takes the tools a worker announced (in `ready`, or `tools_changed` when `changed`).
pub type ToolsHook = Arc<dyn Fn(&WorkerShared, Vec<AnnouncedTool>, bool) + Send + Sync>;

pub struct WorkerActor;

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
                tools,
            } if generation == st.generation => {
                st.announce(tools, false);
                st.ready(pid, guards)
            }
            WorkerMsg::Tools { generation, tools } if generation == st.generation => {
                st.announce(Some(tools), true)
            }
            WorkerMsg::Eof { generation } if generation == st.generation => st.eof(),
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

    /// Hand announced tools to the hook (before `ready` lets calls in).
    fn announce(&self, tools: Option<Vec<AnnouncedTool>>, changed: bool) {
        if let (Some(hook), Some(tools)) = (&self.args.tools_hook, tools) {
            hook(&self.args.shared, tools, changed);
        }
    }

    fn ready(&mut self, pid: u32, guards: Guards) {
        self.args.policy.on_ready(Instant::now());
        *lock(&self.args.shared.guards) = guards.clone();
        self.guards = guards;
        self.args
            .events
            .worker(WorkerEvent::Started, &self.args.shared, Some(pid));
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

    fn ready_timeout(&mut self) {
        if self.args.shared.state() == WorkerState::Starting
            && let Some(pid) = self.child_pid
        {
            let limit = self.args.spec.ready_timeout;
            tracing::warn!(group = %self.args.shared.group, pid, "worker not ready within {limit:?}");
            self.kill_reason = Some("not_ready");
            kill_group(pid);
        }
    }

    fn reconfigure(&mut self, r: Reconfig) {
        let index = self.args.init.index;
        self.args.init = WorkerInit { index, ..r.init };
        self.args.spec.passthrough = r.passthrough;
        self.args.policy.reconfigure(r.supervisor);
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
        let generation = self.generation;
        self.args.shared.set_state(WorkerState::Starting);
        *lock(&self.args.shared.retry_at) = None;
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
        let (rd, wr) = control.into_split();
        let (tx, rx) = mpsc::channel::<Vec<u8>>(1024);
        let link = Arc::new(Link {
            pid: spawned.pid,
            tx,
            pending: Mutex::new(HashMap::new()),
            idle: tokio::sync::Notify::new(),
            queue: self.args.shared.queue.clone(),
        });
        let init = WorkerInit {
            generation: self.generation,
            ..self.args.init.clone()
        };
        if let Ok(init) = frame::encode(&ToWorker::Init(Box::new(init))) {
            let _ = link.tx.send(init).await;
        }
        *lock(&self.args.shared.link) = Some(link.clone());
        tokio::spawn(write_loop(wr, rx));
        tokio::spawn(read_loop(
            rd,
            link,
            myself.clone(),
            generation,
            self.args.init.limits.max_frame_bytes,
        ));
        myself.send_after(self.args.spec.ready_timeout, move || {
            WorkerMsg::ReadyTimeout { generation }
        });
    }

    /// The current process is gone: answer its calls, record it, then restart it now
    /// (a planned replacement) or per the restart policy (a crash).
    async fn exited(
        &mut self,
        myself: &ActorRef<WorkerMsg>,
        code: Option<i32>,
        signal: Option<i32>,
    ) {
        let pid = self.child_pid.take();
        let planned = self
            .planned
            .take()
            .filter(|p| p.generation == self.generation && p.shutdown_sent);
        let why = match (code, signal) {
            (_, Some(sig)) => format!(
                "worker process {} was killed by signal {sig}",
                pid.unwrap_or(0)
            ),
            (Some(c), _) => format!("worker process {} exited with code {c}", pid.unwrap_or(0)),
            _ => "worker process ended".to_owned(),
        };
        if let Some(pid) = pid {
            kill_group(pid); // anything it left in its group goes too
        }
        if let Some(link) = lock(&self.args.shared.link).take() {
            link.fail_all(&why);
        }
        let reason = match (&planned, self.kill_reason) {
            (Some(p), _) => p.reason.as_str(),
            (None, Some(r)) => r,
            (None, None) => "crashed",
        };
        self.args
            .events
            .worker_exited(&self.args.shared, pid, code, signal, reason);
        if self.stopping {
            self.args.shared.set_state(WorkerState::Stopping);
            self.answer_waiters();
            return;
        }
        if let Some(p) = planned {
            tracing::info!(group = %self.args.shared.group, index = self.args.shared.index, reason = p.reason.as_str(), "worker replaced");
            self.args.shared.restarts.fetch_add(1, Ordering::SeqCst);
            self.start(myself).await;
            return;
        }
        tracing::warn!(group = %self.args.shared.group, index = self.args.shared.index, "{why}");
        self.after_crash(myself, code);
    }

    fn after_crash(&mut self, myself: &ActorRef<WorkerMsg>, code: Option<i32>) {
        let generation = self.generation;
        match self.args.policy.on_exit(Instant::now(), code) {
            Next::RestartAfter(delay) => {
                self.args.shared.restarts.fetch_add(1, Ordering::SeqCst);
                self.args.shared.set_state(WorkerState::Restarting);
                myself.send_after(delay, move || WorkerMsg::Start { generation });
            }
            Next::Fail { retry_after } => {
                tracing::error!(group = %self.args.shared.group, index = self.args.shared.index, "worker failed; retry after {retry_after:?}");
                *lock(&self.args.shared.retry_at) = retry_after.map(|d| Instant::now() + d);
                self.args.shared.set_state(WorkerState::Failed);
                self.args
                    .events
                    .worker(WorkerEvent::Failed, &self.args.shared, None);
                if let Some(d) = retry_after {
                    self.args.policy.reset();
                    myself.send_after(d, move || WorkerMsg::Start { generation });
                }
                self.answer_waiters();
            }
        }
    }

    /// A restart on purpose: let the calls in flight end, then replace the process. A
    /// worker without a process (failed, or waiting out a backoff) starts at once.
    async fn restart(
        &mut self,
        myself: &ActorRef<WorkerMsg>,
        reason: RestartReason,
        reply: Option<ractor::RpcReplyPort<()>>,
    ) {
        if reason == RestartReason::Memory && self.args.shared.state() != WorkerState::Ready {
            return; // the watchdog looks again next time
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
    fn idle(&mut self, myself: &ActorRef<WorkerMsg>) {
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
            && link.tx.try_send(bytes).is_err()
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
    async fn retire(&mut self, myself: &ActorRef<WorkerMsg>) {
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
    async fn stop(&mut self, reason: &str) {
        self.stopping = true;
        self.args.shared.set_state(WorkerState::Stopping);
        let link = lock(&self.args.shared.link).take();
        if let Some(pid) = self.child_pid.take() {
            if let Some(link) = &link
                && let Ok(bytes) = frame::encode(&ToWorker::Shutdown)
            {
                let _ = link.tx.try_send(bytes);
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
                &self.args.shared,
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

/// Tell the actor once `link` has no call in flight (or its process died and every
/// call was answered), without blocking the actor's mailbox meanwhile.
fn wake_when_idle(link: Arc<Link>, me: ActorRef<WorkerMsg>, generation: u64) {
    tokio::spawn(async move {
        link.until_idle().await;
        let _ = me.cast(WorkerMsg::Idle { generation });
    });
}

async fn write_loop(mut wr: tokio::net::unix::OwnedWriteHalf, mut rx: mpsc::Receiver<Vec<u8>>) {
    let mut buf = Vec::with_capacity(64 * 1024);
    while let Some(first) = rx.recv().await {
        buf.extend_from_slice(&first);
        while buf.len() < 256 * 1024 {
            match rx.try_recv() {
                Ok(more) => buf.extend_from_slice(&more),
                Err(_) => break,
            }
        }
        if wr.write_all(&buf).await.is_err() {
            return;
        }
        buf.clear();
    }
}

async fn read_loop(
    mut rd: tokio::net::unix::OwnedReadHalf,
    link: Arc<Link>,
    actor: ActorRef<WorkerMsg>,
    generation: u64,
    max_frame: usize,
) {
    let max = max_frame.max(toolvisor_protocol::DEFAULT_MAX_FRAME_BYTES) * 2;
    loop {
        let body = match frame::read_frame(&mut rd, max).await {
            Ok(Some(b)) => b,
            Ok(None) | Err(_) => break,
        };
        match frame::decode::<FromWorker>(&body, KNOWN_FROM_WORKER) {
            Ok(FromWorker::Ready { pid, guards, tools }) => {
                let _ = actor.cast(WorkerMsg::Ready {
                    generation,
                    pid,
                    guards,
                    tools,
                });
            }
            Ok(FromWorker::ToolsChanged { tools }) => {
                let _ = actor.cast(WorkerMsg::Tools { generation, tools });
            }
            Ok(msg) => link.deliver(msg).await,
            Err(e) => tracing::warn!(pid = link.pid, "bad frame from worker: {e}"),
        }
    }
    let _ = actor.cast(WorkerMsg::Eof { generation });
}

/// The encoded `run` frame of one call, for the pool to [`WorkerShared::submit`].
pub fn run_frame(
    call: u64,
    name: &str,
    tool: &str,
    args: Value,
    stream: bool,
    timeout_ms: u64,
    network: bool,
) -> Result<Vec<u8>, frame::FrameError> {
    frame::encode(&ToWorker::Run {
        call,
        name: name.to_owned(),
        tool: tool.to_owned(),
        args,
        stream,
        timeout_ms: Some(timeout_ms),
        network,
    })
}
