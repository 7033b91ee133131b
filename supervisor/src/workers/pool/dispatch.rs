//! The dispatch side of a pool: a call finds the least-loaded ready worker with room
//! (or waits its turn in the group's fair queue, bounded by its deadline and the
//! queue's size), runs there, and ends in exactly one outcome whatever happens:
//! result, timeout, cancel, crash (a read-only call is run again once), failed group.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::Status;
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorBody, ErrorType};

use super::Pool;
use super::share::Held;
use crate::workers::fairq::Ticket;
use crate::workers::worker::{Reply, WorkerShared, WorkerState};

/// One call for a worker.
pub struct Job {
    /// The supervisor's number for the call, unique while it runs.
    pub call: u64,
    /// The client's call id (artifacts are named after it).
    pub name: String,
    /// The tool's canonical name.
    pub tool: String,
    /// Moved into the encoded `run` frame when [`Pool::run`] starts.
    pub args: Value,
    /// Forward the tool's output as it comes.
    pub stream: bool,
    /// The call's deadline, from when a worker takes it (waiting for one counts too).
    pub timeout: Duration,
    /// Read-only low-risk calls are run again once if their worker dies.
    pub rerunnable: bool,
    /// Where streamed output goes.
    pub output: Option<mpsc::Sender<(String, String)>>,
    /// Only this worker index may run it (background process handles name a worker).
    pub worker: Option<u32>,
    /// The session it comes from: waiting calls are served round-robin by session.
    pub session: String,
    /// The rule that allowed the call gives its command the host's network.
    pub network: bool,
    /// The command's network through the egress proxy, if it has one.
    pub egress: Option<toolvisor_protocol::egress::Egress>,
    /// A person's grant lets it act on another session's background process.
    pub takeover: bool,
}

/// How a job ended, and where it ran.
pub struct JobEnd {
    /// How it ended.
    pub outcome: Outcome,
    /// The group and pid of the worker it ran on, if it reached one.
    pub worker: Option<(String, u32)>,
}

fn err(kind: ErrorType, message: impl Into<String>) -> Outcome {
    Outcome::err(ErrorBody::new(kind, message))
}

impl Pool {
    /// Run a job to its end: result, timeout, cancel, crash (re-run once when allowed).
    pub async fn run(&self, mut job: Job, cancel: &CancellationToken) -> JobEnd {
        // Waiting for a free worker is bounded by the call's timeout too; the call's
        // own clock starts when a worker takes it.
        let queue_deadline = Instant::now() + job.timeout;
        // The `run` frame is the same on every attempt (and a re-run): encode it once,
        // moving the arguments (they can be megabytes) rather than copying them.
        let args = std::mem::take(&mut job.args);
        let frame = match crate::workers::worker::run_frame(&job, args) {
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
            let (slot, rx, _held) = match self.acquire(&job, &frame, queue_deadline, cancel).await {
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
    ) -> Result<
        (
            Arc<WorkerShared>,
            tokio::sync::oneshot::Receiver<Reply>,
            Held,
        ),
        Outcome,
    > {
        let mut changed = self.changed.clone();
        let mut ticket = None::<Ticket<'_>>;
        let timeout = || {
            err(
                ErrorType::Timeout,
                format!(
                    "no {} worker became available within the deadline of {} ms",
                    self.group,
                    job.timeout.as_millis()
                ),
            )
        };
        loop {
            if cancel.is_cancelled() {
                return Err(err(ErrorType::Cancelled, "the call was cancelled"));
            }
            changed.borrow_and_update();
            let freed = self.shares.freed();
            let slots = self.slots();
            // No worker ready (a restart): nobody runs, nothing to share; wait in the queue.
            if slots > 0 && !self.shares.has_room(&job.session, slots) {
                // At its share: wait outside the queue, so the turn passes to others.
                ticket = None;
                tokio::select! {
                    _ = freed => {}
                    _ = changed.changed() => {}
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {
                        return Err(timeout());
                    }
                    _ = cancel.cancelled() => {}
                }
                continue;
            }
            // Newcomers go straight to a free slot only when nobody is waiting.
            let my_turn = match &ticket {
                None => self.queue.is_empty(),
                Some(t) => self.queue.is_turn(t.id),
            };
            if my_turn && let Some(slot) = self.pick(job.worker) {
                let held = self.shares.hold(&job.session);
                if let Some(rx) = slot
                    .submit(
                        frame.to_vec(),
                        job.call,
                        job.output.clone(),
                        job.egress.is_some(),
                    )
                    .await
                {
                    return Ok((slot, rx, held));
                }
                // Its connection is gone (the process is dying) though it still reads
                // as ready: wait for its actor to notice, never retry in a loop that
                // does not yield (it would starve the very actor that must notice).
                drop(held);
                tokio::select! {
                    r = changed.changed() => {
                        if r.is_err() {
                            // The pool is going away: nothing will change any more.
                            return Err(err(ErrorType::Cancelled, "the service is stopping"));
                        }
                    }
                    _ = tokio::time::sleep_until(tokio::time::Instant::from_std(deadline)) => {
                        return Err(timeout());
                    }
                    _ = cancel.cancelled() => {}
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
                    return Err(timeout());
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

    /// Every slot of the group's ready workers (what a session's share is taken of).
    fn slots(&self) -> usize {
        let per_worker = self.max_in_flight.load(Ordering::SeqCst);
        let ready = self
            .workers()
            .iter()
            .filter(|w| w.state() == WorkerState::Ready)
            .count();
        ready * per_worker
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
