//! The control-socket link to one running worker process.
//!
//! Calls do not pass through the worker actor's mailbox: a dispatcher registers its
//! call here and writes the `run` frame itself, and the reader task hands each `done`
//! (and each streamed `output`) straight to the waiting call. The actor only hears of
//! the frames that change the process's life (`ready`, EOF). A link lives exactly as
//! long as one process: a restart makes a new one, and every call still registered on
//! the old one is answered at once with [`Reply::Crashed`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use ractor::ActorRef;
use serde_json::Value;
use tokio::net::UnixStream;
use tokio::net::unix::OwnedReadHalf;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::frame;
use toolvisor_protocol::worker::{FromWorker, KNOWN_FROM_WORKER, Outcome, ToWorker};
use toolvisor_protocol::writer::direct::DirectWriter;
use toolvisor_protocol::{ErrorBody, ErrorType};

use super::actor::{Announce, WorkerMsg};
use super::lock;
use crate::workers::fairq::FairQueue;

/// How a call on a worker ended, as the dispatcher sees it.
#[derive(Debug)]
pub enum Reply {
    /// The worker's answer.
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
    abandoned: CancellationToken,
}

/// The connection to one running worker process.
pub struct Link {
    /// The process at the other end (the one spawned).
    pub pid: u32,
    /// Frames to the worker, written by the sending task itself when nothing is
    /// queued (a `run` goes out without a hand-off to a writer task).
    tx: DirectWriter,
    pending: Mutex<HashMap<u64, Pending>>,
    /// Woken whenever the last call in flight ends.
    idle: tokio::sync::Notify,
    /// The group's wait queue: a freed slot is the next waiter's turn.
    queue: Arc<FairQueue>,
}

/// What the reader task needs to tell the worker's actor about its process.
pub(super) struct ReaderArgs {
    pub actor: ActorRef<WorkerMsg>,
    pub generation: u64,
    pub max_frame: usize,
    pub announce: Option<Announce>,
}

impl Link {
    /// Take over a started process's control socket: one task writes the frames sent
    /// on the link, one reads the worker's and delivers them.
    pub(super) fn open(
        pid: u32,
        control: UnixStream,
        queue: Arc<FairQueue>,
        reader: ReaderArgs,
    ) -> Arc<Link> {
        let (rd, wr) = control.into_split();
        let (tx, drain) = DirectWriter::new(wr);
        let link = Arc::new(Link {
            pid,
            tx,
            pending: Mutex::new(HashMap::new()),
            idle: tokio::sync::Notify::new(),
            queue,
        });
        tokio::spawn(drain.run());
        tokio::spawn(read_loop(rd, link.clone(), reader));
        link
    }

    /// Send an encoded frame, waiting while much is queued; false once the
    /// connection has failed.
    pub(super) async fn send(&self, bytes: Vec<u8>) -> bool {
        self.tx.send(bytes).await
    }

    /// Send an encoded frame without waiting; false once the connection has failed.
    pub(super) fn try_send(&self, bytes: Vec<u8>) -> bool {
        self.tx.send_now(bytes)
    }

    /// Register `call` and send its encoded `run` frame; `None` when the process's
    /// writer has gone (the call was never sent).
    pub(super) async fn submit(
        &self,
        bytes: Vec<u8>,
        call: u64,
        output: Option<mpsc::Sender<(String, String)>>,
    ) -> Option<oneshot::Receiver<Reply>> {
        let (reply, rx) = oneshot::channel();
        lock(&self.pending).insert(
            call,
            Pending {
                reply: Some(reply),
                output,
                abandoned: CancellationToken::new(),
            },
        );
        if !self.send(bytes).await {
            lock(&self.pending).remove(&call);
            return None;
        }
        Some(rx)
    }

    /// Nobody waits for `call` any more: drop its answer and its output.
    pub(super) fn abandon(&self, call: u64) {
        if let Some(p) = lock(&self.pending).get_mut(&call) {
            p.reply = None;
            p.output = None;
            p.abandoned.cancel();
        }
    }

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
            FromWorker::Ready { .. } | FromWorker::Tools { .. } => {}
        }
    }

    /// Answer every call still registered: the process is gone.
    pub(super) fn fail_all(&self, why: &str) {
        let pending: Vec<Pending> = lock(&self.pending).drain().map(|(_, p)| p).collect();
        self.idle.notify_waiters();
        self.queue.wake_turn();
        for p in pending {
            if let Some(reply) = p.reply {
                let _ = reply.send(Reply::Crashed(why.to_owned()));
            }
        }
    }

    /// Calls registered and not answered yet.
    pub fn in_flight(&self) -> usize {
        lock(&self.pending).len()
    }

    pub(super) fn has(&self, call: u64) -> bool {
        lock(&self.pending).contains_key(&call)
    }

    /// Resolves once no call is in flight.
    pub(super) async fn until_idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.in_flight() == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// Read the worker's frames until EOF, then tell the actor.
async fn read_loop(mut rd: OwnedReadHalf, link: Arc<Link>, args: ReaderArgs) {
    let ReaderArgs {
        actor,
        generation,
        max_frame,
        announce,
    } = args;
    let max = max_frame.max(toolvisor_protocol::DEFAULT_MAX_FRAME_BYTES) * 2;
    loop {
        let body = match frame::read_frame(&mut rd, max).await {
            Ok(Some(b)) => b,
            Ok(None) | Err(_) => break,
        };
        match frame::decode::<FromWorker>(&body, KNOWN_FROM_WORKER) {
            Ok(FromWorker::Ready { pid, guards, tools }) => {
                if let Some(announce) = &announce {
                    announce(tools);
                }
                let _ = actor.cast(WorkerMsg::Ready {
                    generation,
                    pid,
                    guards,
                });
            }
            Ok(FromWorker::Tools { tools }) => {
                if let Some(announce) = &announce {
                    announce(tools);
                }
            }
            Ok(msg) => link.deliver(msg).await,
            Err(e) => {
                tracing::warn!(pid = link.pid, "bad frame from worker: {e}");
                // A `done` that does not decode still ends its call, at once.
                if let Some(call) = done_call(&body) {
                    let why = format!("the worker sent a result that does not decode: {e}");
                    let outcome = Outcome::err(ErrorBody::new(ErrorType::InternalError, why));
                    link.deliver(FromWorker::Done { call, outcome }).await;
                }
            }
        }
    }
    let _ = actor.cast(WorkerMsg::Eof { generation });
}

/// The call a `done` frame names, read without the rest of the frame.
fn done_call(body: &[u8]) -> Option<u64> {
    #[derive(serde::Deserialize)]
    struct Done {
        #[serde(rename = "type")]
        kind: String,
        call: u64,
    }
    let d: Done = rmp_serde::from_slice(body).ok()?;
    (d.kind == "done").then_some(d.call)
}

/// The encoded `run` frame of one call (its arguments moved in apart: they can be
/// megabytes), for the pool to [`WorkerShared::submit`](super::WorkerShared::submit).
pub fn run_frame(
    job: &crate::workers::pool::Job,
    args: Value,
) -> Result<Vec<u8>, frame::FrameError> {
    frame::encode(&ToWorker::Run {
        call: job.call,
        name: job.name.clone(),
        tool: job.tool.clone(),
        args,
        stream: job.stream,
        timeout_ms: Some(job.timeout.as_millis() as u64),
        network: job.network,
        session: job.session.clone(),
        takeover: job.takeover,
    })
}
