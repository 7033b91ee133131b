//! What calls, the pool and status read of one worker, without asking its actor.
//!
//! The actor owns the process; this is the little it publishes: its state (an atomic,
//! so picking a worker takes no lock), the current [`Link`], the protections the
//! process reported, when a failed worker tries again. Calls go through here straight
//! to the link, so a busy actor (a restart under way) never delays a call.

use std::sync::atomic::{AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::ActorRef;
use tokio::sync::{mpsc, oneshot, watch};
use toolvisor_protocol::frame;
use toolvisor_protocol::message::Guards;
use toolvisor_protocol::worker::ToWorker;

use super::actor::WorkerMsg;
use super::link::{Link, Reply};
use super::{kill_group, lock, patience};
use crate::workers::fairq::FairQueue;

/// A worker's life as calls and `status` see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WorkerState {
    /// A process is starting and has not said `ready`.
    Starting = 0,
    /// It takes calls.
    Ready = 1,
    /// Being replaced, or waiting out a backoff: no new calls.
    Restarting = 2,
    /// Restarted too often: no process until a cool-down or an operator restart.
    Failed = 3,
    /// Stopped for good (shutdown, or retired by a lower `count`).
    Stopping = 4,
}

impl WorkerState {
    /// The spelling `status` reports.
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

/// What the pool and status see of a worker, shared with its actor.
pub struct WorkerShared {
    /// Its group.
    pub group: String,
    /// Its slot in the group (background process handles name it).
    pub index: u32,
    state: AtomicU8,
    /// Processes replaced so far (for `status`).
    pub restarts: AtomicU32,
    link: Mutex<Option<Arc<Link>>>,
    /// Bumped on every state change, so waiters for a ready worker wake.
    changed: watch::Sender<u64>,
    /// When a failed worker will try again (for `retry_after_ms`).
    retry_at: Mutex<Option<Instant>>,
    /// The actor owning it, for restart requests (none while a panicked one is replaced).
    pub actor: Mutex<Option<ActorRef<WorkerMsg>>>,
    /// The protections the current process reported in its `ready`.
    pub guards: Mutex<Guards>,
    /// The group's wait queue (shared by the pool's workers).
    pub queue: Arc<FairQueue>,
}

impl WorkerShared {
    /// A worker not started yet; `changed` wakes calls waiting for a ready worker.
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

    /// Where the worker is in its life.
    pub fn state(&self) -> WorkerState {
        WorkerState::from_u8(self.state.load(Ordering::SeqCst))
    }

    pub(super) fn set_state(&self, s: WorkerState) {
        self.state.store(s as u8, Ordering::SeqCst);
        self.changed.send_modify(|n| *n += 1);
        if s == WorkerState::Ready {
            self.queue.wake_turn();
        }
    }

    /// The current process's link (none between processes).
    pub fn link(&self) -> Option<Arc<Link>> {
        lock(&self.link).clone()
    }

    /// Publish the link of a newly started process.
    pub(super) fn set_link(&self, link: Arc<Link>) {
        *lock(&self.link) = Some(link);
    }

    /// Take the link away: its process is gone or going, no call may start on it.
    pub(super) fn take_link(&self) -> Option<Arc<Link>> {
        lock(&self.link).take()
    }

    /// When a failed worker tries again (`None`: not failed, or only an operator
    /// restart revives it).
    pub(super) fn set_retry_at(&self, at: Option<Instant>) {
        *lock(&self.retry_at) = at;
    }

    /// The current process's pid.
    pub fn pid(&self) -> Option<u32> {
        self.link().map(|l| l.pid)
    }

    /// Calls running on the current process.
    pub fn in_flight(&self) -> usize {
        self.link().map_or(0, |l| l.in_flight())
    }

    /// The actor that owns this worker (none while a panicked one is replaced).
    pub fn actor_ref(&self) -> Option<ActorRef<WorkerMsg>> {
        lock(&self.actor).clone()
    }

    /// How long until a failed worker tries again (none: not failed, or only an operator
    /// can revive it).
    pub fn retry_after(&self) -> Option<Duration> {
        lock(&self.retry_at).map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Register a call on the current process and send its encoded `run` frame (see
    /// [`run_frame`](super::run_frame)); `egress`: its command's connections may be
    /// reported and asked about for as long as the process lives. `None` when the worker is not ready (the
    /// caller picks another or waits).
    pub async fn submit(
        &self,
        bytes: Vec<u8>,
        call: u64,
        output: Option<mpsc::Sender<(String, String)>>,
        egress: bool,
    ) -> Option<oneshot::Receiver<Reply>> {
        if self.state() != WorkerState::Ready {
            return None;
        }
        self.link()?.submit(bytes, call, output, egress).await
    }

    /// Ask the worker to stop a call. When `abandon`, nobody waits for its answer any
    /// more; a worker that still has not answered after its group's [`patience`] is
    /// killed.
    pub fn cancel(self: &Arc<Self>, call: u64, abandon: bool) {
        let Some(link) = self.link() else { return };
        if abandon {
            link.abandon(call);
        }
        if let Ok(bytes) = frame::encode(&ToWorker::Cancel { call }) {
            link.try_send(bytes);
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
