//! The control-socket link to one running worker process.
//!
//! Calls do not pass through the worker actor's mailbox: a dispatcher registers its
//! call here and writes the `run` frame itself, and the reader task hands each `done`
//! (and each streamed `output`) straight to the waiting call. The actor only hears of
//! the frames that change the process's life (`ready`, EOF). A link lives exactly as
//! long as one process: a restart makes a new one, and every call still registered on
//! the old one is answered at once with [`Reply::Crashed`].
//!
//! A worker is trusted for its own calls only. Call numbers are one counter for the
//! whole service, so they are easy to guess: a frame is taken only for a call that was
//! sent on this link and is not answered yet. A frame about any other call, or one that
//! does not decode, is a protocol violation (a broken worker, or something speaking on
//! its link): the reader stops at once, the worker's own calls end `crashed`, and its
//! actor replaces the process. No other worker's call can be touched from here.

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
use crate::events::{EgressEvent, Events, RelayEvent};
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
    /// The calls sent with an egress proxy: their commands' connections (a background
    /// process's too, after the call ended) are taken from this worker, no others'.
    egress: Mutex<EgressCalls>,
    /// Where connection questions and records go.
    events: Events,
    /// The worker's group (a `resource_updated` event names it).
    group: String,
}

/// The calls with an egress sent on a link, the oldest forgotten past [`EGRESS_KEPT`].
#[derive(Default)]
struct EgressCalls {
    set: std::collections::HashSet<u64>,
    order: std::collections::VecDeque<u64>,
}

/// How many egress calls a link remembers (a background process's connections are
/// refused once its call is forgotten).
const EGRESS_KEPT: usize = 4096;

impl EgressCalls {
    fn add(&mut self, call: u64) {
        if self.set.insert(call) {
            self.order.push_back(call);
        }
        while self.order.len() > EGRESS_KEPT {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
    }
}

/// What the reader task needs to tell the worker's actor about its process.
pub(super) struct ReaderArgs {
    pub actor: ActorRef<WorkerMsg>,
    pub generation: u64,
    pub max_frame: usize,
    pub announce: Option<Announce>,
    pub events: Events,
    /// The worker's group.
    pub group: String,
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
            egress: Mutex::new(EgressCalls::default()),
            events: reader.events.clone(),
            group: reader.group.clone(),
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

    /// Send `msg` without waiting; false when it cannot be (the connection failed).
    pub fn tell(&self, msg: &ToWorker) -> bool {
        frame::encode(msg).is_ok_and(|bytes| self.tx.send_now(bytes))
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
        egress: bool,
    ) -> Option<oneshot::Receiver<Reply>> {
        if egress {
            lock(&self.egress).add(call);
        }
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

    /// Hand a worker's message to the call it belongs to; an error (and nothing
    /// delivered) when it names a call that is not in flight on this link.
    async fn deliver(&self, msg: FromWorker) -> Result<(), Violation> {
        match msg {
            FromWorker::Done { call, outcome } => {
                let pending = {
                    let mut map = lock(&self.pending);
                    let p = map.remove(&call).ok_or(Violation::NotOurs("done", call))?;
                    if map.is_empty() {
                        self.idle.notify_waiters();
                    }
                    p
                };
                self.queue.wake_turn();
                if let Some(reply) = pending.reply {
                    let _ = reply.send(Reply::Done(outcome));
                }
            }
            FromWorker::Output { call, stream, data } => {
                let out = {
                    let map = lock(&self.pending);
                    let p = map.get(&call).ok_or(Violation::NotOurs("output", call))?;
                    p.output.clone().map(|o| (o, p.abandoned.clone()))
                };
                if let Some((out, abandoned)) = out {
                    tokio::select! {
                        _ = out.send((stream, data)) => {}
                        _ = abandoned.cancelled() => {}
                    }
                }
            }
            FromWorker::Connect {
                call,
                ask,
                host,
                port,
            } => {
                if !lock(&self.egress).set.contains(&call) {
                    return Err(Violation::NotOurs("connect", call));
                }
                let (reply, answer) = oneshot::channel();
                self.events.egress(EgressEvent::Ask {
                    call,
                    host,
                    port,
                    reply,
                });
                self.answer_later(answer, false, move |allow| ToWorker::ConnectAnswer {
                    ask,
                    allow,
                });
            }
            FromWorker::Connection(c) => {
                if !lock(&self.egress).set.contains(&c.call) {
                    return Err(Violation::NotOurs("connection", c.call));
                }
                self.events.egress(EgressEvent::Closed(c));
            }
            FromWorker::Relay {
                call,
                ask,
                method,
                params,
            } => {
                if !lock(&self.pending).contains_key(&call) {
                    return Err(Violation::NotOurs("relay", call));
                }
                let (reply, answer) = oneshot::channel();
                self.events.relay(RelayEvent {
                    call,
                    method,
                    params,
                    reply,
                });
                let dropped = Err("the supervisor dropped the request".into());
                self.answer_later(answer, dropped, move |answer| {
                    let (result, error) = toolvisor_protocol::message::relay_fields(answer);
                    ToWorker::RelayAnswer { ask, result, error }
                });
            }
            FromWorker::ResourceUpdated { uri } => self.resource_updated(uri),
            FromWorker::Ready { .. } | FromWorker::Tools { .. } => {}
        }
        Ok(())
    }

    /// Once `answer` comes (`dropped` when its sender goes first), send the worker the
    /// frame `make` builds of it: a question of the worker is answered beside its calls.
    fn answer_later<T: Send + 'static>(
        &self,
        answer: oneshot::Receiver<T>,
        dropped: T,
        make: impl FnOnce(T) -> ToWorker + Send + 'static,
    ) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            let msg = make(answer.await.unwrap_or(dropped));
            if let Ok(bytes) = frame::encode(&msg) {
                tx.send_now(bytes);
            }
        });
    }

    /// An MCP server's subscribed resource changed: an event for the sessions that
    /// subscribed (`toolvisor mcp` passes it on). Other groups have no resources.
    fn resource_updated(&self, uri: String) {
        if !self.group.starts_with("mcp:") {
            tracing::warn!(group = %self.group, "ignoring `resource_updated` from a group that is not an MCP server");
            return;
        }
        let fields = crate::events::obj(serde_json::json!({"group": self.group, "uri": uri}));
        self.events.publish(
            toolvisor_protocol::message::Topic::Workers,
            "resource_updated",
            fields,
        );
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

/// Why a worker's frames stopped being read: it said something only a broken or
/// impersonated worker says.
#[derive(Debug, thiserror::Error)]
enum Violation {
    /// A frame about a call this worker was not given, or has answered already.
    #[error("it sent `{0}` for call {1}, which is not in flight on it")]
    NotOurs(&'static str, u64),
    /// A frame that does not decode (its call, if it named one of its own, was answered).
    #[error("it sent a frame that does not decode: {0}")]
    Malformed(String),
    /// A frame that cannot be read at all (cut, or over the size limit).
    #[error("its frames cannot be read: {0}")]
    Unreadable(frame::FrameError),
}

/// Read the worker's frames until EOF, then tell the actor; at a protocol violation,
/// stop reading, answer the worker's own calls `crashed` and have the actor replace it.
async fn read_loop(rd: OwnedReadHalf, link: Arc<Link>, args: ReaderArgs) {
    let (actor, generation) = (args.actor.clone(), args.generation);
    match read_frames(rd, &link, args).await {
        Ok(()) => {
            let _ = actor.cast(WorkerMsg::Eof { generation });
        }
        Err(v) => {
            // Logged by the actor, with the worker's group and index.
            let why = format!("worker process {} was replaced: {v}", link.pid);
            link.fail_all(&why);
            let _ = actor.cast(WorkerMsg::Violation { generation, why });
        }
    }
}

/// Deliver the worker's frames until EOF (Ok) or a protocol violation.
async fn read_frames(
    mut rd: OwnedReadHalf,
    link: &Link,
    args: ReaderArgs,
) -> Result<(), Violation> {
    let ReaderArgs {
        actor,
        generation,
        max_frame,
        announce,
        events: _,
        group: _,
    } = args;
    let max = max_frame.max(toolvisor_protocol::DEFAULT_MAX_FRAME_BYTES) * 2;
    loop {
        let body = match frame::read_frame(&mut rd, max).await {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(()),
            // The socket failing or ending mid-frame (the process died while writing)
            // is its end, not a lie.
            Err(frame::FrameError::Io(_) | frame::FrameError::Truncated) => return Ok(()),
            Err(e) => return Err(Violation::Unreadable(e)),
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
            Ok(msg) => link.deliver(msg).await?,
            Err(e) => {
                // A `done` of its own that does not decode still ends its call with
                // that reason (not only `crashed`); a `done` for a call that is not its
                // own is not delivered.
                if let Some(call) = done_call(&body)
                    && link.has(call)
                {
                    let why = format!("the worker sent a result that does not decode: {e}");
                    let outcome = Outcome::err(ErrorBody::new(ErrorType::InternalError, why));
                    link.deliver(FromWorker::Done { call, outcome }).await?;
                }
                return Err(Violation::Malformed(e.to_string()));
            }
        }
    }
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
        egress: job.egress.clone(),
        session: job.session.clone(),
        takeover: job.takeover,
    })
}

#[cfg(test)]
mod tests;
