//! One session actor per connection: it owns the connection's state (hello, open
//! calls), answers requests, and starts one task per call. A reader task feeds it
//! decoded frames; a writer task drains its bounded outbox to the socket.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::io::AsyncReadExt;
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::frame::{self, DecodeError, FrameError};
use toolvisor_protocol::message::{
    CallRequest, ClientMessage, KNOWN_CLIENT_TYPES, ServerMessage, ToolFormat, ToolResult,
};
use toolvisor_protocol::writer::FrameWriter;
use toolvisor_protocol::{ErrorType, Id, PROTOCOL_VERSION};

use crate::call::batch::{BatchCall, Deliver, split_duplicates};
use crate::call::router::{SessionInfo, to_result};
use crate::service::Service;
use crate::session::outbox::{Frame, Outbox};

/// Messages of a session actor.
pub enum SessionMsg {
    /// A frame read from the client (or why it does not decode).
    Frame(Result<ClientMessage, DecodeError>),
    /// The client announced a frame over the limit: `(its length, the limit)`.
    TooLarge(usize, usize),
    /// The connection ended (read side or write side).
    Closed,
    /// A call task finished: unregister the id, then send its result.
    CallDone(Box<ToolResult>),
    /// Every call of a batch has its result: unregister the batch, send `batch_done`
    /// (and `envelope_done` when the batch ran an envelope's tool actions).
    BatchDone(Id, Vec<Id>, Option<EnvelopeEnd>),
}

/// What an envelope's `envelope_done` says once its batch is done.
pub struct EnvelopeEnd {
    /// The text for the person.
    pub assistant_text: String,
    /// Every action id of the block, in order.
    pub ids: Vec<Id>,
}

/// What a session actor starts with.
pub struct SessionArgs {
    /// The service it serves.
    pub service: Arc<Service>,
    /// The accepted connection.
    pub stream: UnixStream,
    /// The peer's uid (checked equal to ours by the listener).
    pub uid: u32,
    /// The peer's pid, when the kernel tells it.
    pub pid: Option<i32>,
    /// A person, or a command toolvisor runs (privileged messages refused).
    pub peer: crate::session::peer::Peer,
}

/// The actor owning one client connection: it reads requests in order and starts each call
/// as its own task, so a slow call never holds up the session.
pub struct SessionActor;

/// A session's state: its outbox, its open calls and batches, its subscriptions.
pub struct SessionState {
    service: Arc<Service>,
    out: Outbox,
    info: Option<Arc<SessionInfo>>,
    id: String,
    uid: u32,
    peer: crate::session::peer::Peer,
    /// Open calls (single or in a batch); each counts against `max_open_calls`.
    open: HashMap<Id, CancellationToken>,
    /// Open batches; each token is the parent of its calls' tokens.
    batches: HashMap<Id, CancellationToken>,
    reader: tokio::task::JoinHandle<()>,
}

impl Drop for SessionState {
    fn drop(&mut self) {
        self.reader.abort();
        self.service.confirmations().end_session(&self.id);
        for token in self.open.values().chain(self.batches.values()) {
            token.cancel();
        }
        // The writer flushes what is queued (a last error, say), closes, and then
        // marks the outbox closed for everyone still holding it.
        self.out.close_after_flush();
    }
}

impl Actor for SessionActor {
    type Msg = SessionMsg;
    type State = SessionState;
    type Arguments = SessionArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SessionMsg>,
        args: SessionArgs,
    ) -> Result<SessionState, ActorProcessingErr> {
        let (rd, wr) = args.stream.into_split();
        let (out, rx) = Outbox::new();
        let max = args.service.config().limits.max_frame_bytes;
        tokio::spawn(write_loop(wr, rx, out.closed.clone(), myself.clone()));
        let reader = tokio::spawn(read_loop(rd, max, myself.clone()));
        let id = args.service.next_session();
        tracing::debug!(session = %id, uid = args.uid, pid = ?args.pid, "connection");
        Ok(SessionState {
            service: args.service,
            out,
            info: None,
            id,
            uid: args.uid,
            peer: args.peer,
            open: HashMap::new(),
            batches: HashMap::new(),
            reader,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<SessionMsg>,
        msg: SessionMsg,
        st: &mut SessionState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SessionMsg::Frame(Ok(m)) => st.on_message(&myself, m),
            SessionMsg::Frame(Err(e)) => st.on_bad_frame(e),
            SessionMsg::TooLarge(len, max) => {
                st.out.send(&ServerMessage::error(
                    None,
                    ErrorType::FrameTooLarge,
                    format!("frame of {len} bytes exceeds the limit of {max} bytes"),
                ));
                st.close(&myself);
            }
            SessionMsg::Closed => {
                myself.stop(None);
            }
            SessionMsg::CallDone(result) => {
                st.open.remove(&result.id);
                st.out.send(&ServerMessage::Result(*result));
            }
            SessionMsg::BatchDone(id, ids, envelope) => {
                st.batches.remove(&id);
                st.out.send(&ServerMessage::BatchDone {
                    id: id.clone(),
                    ids,
                });
                if let Some(end) = envelope {
                    st.out.send(&envelope_done(id, end));
                }
            }
        }
        Ok(())
    }
}

impl SessionState {
    /// Flush what is queued, then end the connection.
    fn close(&mut self, myself: &ActorRef<SessionMsg>) {
        self.reader.abort();
        self.out.close_after_flush();
        myself.stop(None);
    }

    fn on_bad_frame(&mut self, e: DecodeError) {
        let msg = match e {
            DecodeError::Malformed(m) => ServerMessage::error(None, ErrorType::BadMessage, m),
            DecodeError::UnknownType { kind, id } => ServerMessage::error(
                id,
                ErrorType::UnknownMessage,
                format!("unknown message type `{kind}`"),
            ),
            DecodeError::BadFields { message, id } => {
                ServerMessage::error(id, ErrorType::BadMessage, message)
            }
        };
        self.out.send(&msg);
    }

    fn on_message(&mut self, myself: &ActorRef<SessionMsg>, m: ClientMessage) {
        let info = match (&self.info, m) {
            (
                None,
                ClientMessage::Hello {
                    protocol,
                    client,
                    interactive,
                },
            ) => {
                return self.hello(myself, protocol, client, interactive.unwrap_or(false));
            }
            (None, other) => {
                let id = request_id(&other);
                self.out.send(&ServerMessage::error(
                    id,
                    ErrorType::HelloRequired,
                    "say hello first",
                ));
                return;
            }
            (Some(info), m) => (info.clone(), m),
        };
        let (info, m) = info;
        if let Some(refusal) = crate::session::peer::refusal(&self.peer, &m, &self.id) {
            self.out.send(&refusal);
            return;
        }
        match m {
            ClientMessage::Hello { .. } => self.out.send(&ServerMessage::error(
                None,
                ErrorType::BadMessage,
                "hello was already said",
            )),
            ClientMessage::Ping { id } => self.out.send(&ServerMessage::Pong { id }),
            ClientMessage::Explain { id, tool, args } => {
                self.out.send(&crate::policy::explain::explain(
                    id,
                    &self.service.policy(),
                    &self.service.registry(),
                    &tool,
                    &args,
                ))
            }
            ClientMessage::ListTools { id, format, groups } => {
                self.list_tools(id, format.unwrap_or_default(), groups)
            }
            ClientMessage::Call(req) => self.call(myself, &info, req),
            ClientMessage::Cancel { id } => self.cancel(id),
            ClientMessage::Status { id } => {
                let (svc, out) = (self.service.clone(), self.out.clone());
                tokio::spawn(
                    async move { out.send(&crate::serve::status::status(&svc, id).await) },
                );
            }
            ClientMessage::Restart { id, group } => self.restart(id, group),
            ClientMessage::Subscribe { id, topics } => {
                crate::session::subscribe::start(&self.service, &self.out, id, topics);
            }
            ClientMessage::Batch { id, calls } => self.batch(myself, &info, id, calls),
            ClientMessage::Envelope { id, text } => self.envelope(myself, &info, id, text),
            ClientMessage::Grant {
                id,
                tools,
                trace_id,
                paths,
                ttl_ms,
                reusable,
            } => {
                let req = crate::call::grants::GrantRequest {
                    tools,
                    trace_id,
                    paths: paths.unwrap_or_default(),
                    ttl: std::time::Duration::from_millis(ttl_ms),
                    reusable: reusable.unwrap_or(false),
                };
                self.out.send(&self.service.grant(&info, id, &req));
            }
            ClientMessage::Confirm {
                interaction,
                approve,
                remember,
            } => {
                let by = crate::call::confirm::Answerer {
                    session: info.id.clone(),
                    client: info.client.clone(),
                };
                let answer = self.service.confirmations().answer(
                    &interaction,
                    approve,
                    remember.unwrap_or_default(),
                    &by,
                );
                self.out.send(&match answer {
                    Ok(()) => ServerMessage::Confirmed {
                        interaction,
                        approve,
                    },
                    Err(e) => {
                        ServerMessage::error(None, ErrorType::UnknownInteraction, e.to_string())
                    }
                });
            }
        }
    }

    fn hello(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        protocol: u32,
        client: String,
        interactive: bool,
    ) {
        if protocol != PROTOCOL_VERSION {
            self.out.send(&ServerMessage::error(
                None,
                ErrorType::ProtocolVersion,
                format!("this server speaks protocol {PROTOCOL_VERSION}, not {protocol}"),
            ));
            self.close(myself);
            return;
        }
        self.info = Some(Arc::new(SessionInfo {
            id: self.id.clone(),
            client,
            interactive,
            uid: self.uid,
            out: self.out.clone(),
            familiar: Default::default(),
        }));
        self.out.send(&ServerMessage::Welcome {
            protocol: PROTOCOL_VERSION,
            server: format!("toolvisor/{}", env!("CARGO_PKG_VERSION")),
            session: self.id.clone(),
            tools: self.service.registry().len() as u32,
        });
    }

    fn list_tools(&self, id: Id, format: ToolFormat, groups: Option<Vec<String>>) {
        let tools = self.service.registry().listing(format, groups.as_deref());
        self.out.send(&ServerMessage::Tools { id, tools });
    }

    fn call(&mut self, myself: &ActorRef<SessionMsg>, info: &Arc<SessionInfo>, req: CallRequest) {
        if self.is_open(&req.id) {
            self.refuse_duplicate(req.id);
            return;
        }
        if let Some(why) = self.over_limit(1) {
            self.out
                .send(&ServerMessage::Result(overloaded(req.id, &why)));
            return;
        }
        let token = self.service.shutdown().child_token();
        self.open.insert(req.id.clone(), token.clone());
        let (svc, info, me) = (self.service.clone(), info.clone(), myself.clone());
        tokio::spawn(async move {
            let result = svc.run_call_guarded(info, req, token).await;
            let _ = me.cast(SessionMsg::CallDone(Box::new(result)));
        });
    }

    /// Start a batch. Its own id must be free, or the whole batch is refused (as a
    /// `call` would be). A call whose id is taken (open here, the batch's own, or an
    /// earlier call's of this batch) gets `DuplicateCallId` and does not run; the
    /// others run, and `batch_done` lists them, so a client always sees the batch end.
    /// The calls that run must all fit under `max_open_calls` (all or none: a batch is
    /// ordered work, running a prefix of it would surprise). Overloaded calls still
    /// each get a `result`, then `batch_done`.
    fn batch(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        info: &Arc<SessionInfo>,
        id: Id,
        calls: Vec<CallRequest>,
    ) {
        if self.is_open(&id) {
            self.refuse_duplicate(id);
            return;
        }
        self.start_batch(myself, info, id, calls, None);
    }

    /// Run an envelope (docs/PROTOCOL.md, "Envelopes"): no block → `envelope_done` with
    /// the text; a block that cannot run → `BadEnvelope` and nothing runs; else its
    /// skill and subagent actions get `UnsupportedAction` results and its tool actions
    /// run as a batch with the envelope's id, then `envelope_done`.
    fn envelope(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        info: &Arc<SessionInfo>,
        id: Id,
        text: String,
    ) {
        if self.is_open(&id) {
            self.refuse_duplicate(id);
            return;
        }
        let max = self.service.config().server.max_open_calls;
        let env = match crate::call::envelope::parse(&text, max) {
            Ok(Some(env)) => env,
            Ok(None) => {
                let end = EnvelopeEnd {
                    assistant_text: text,
                    ids: Vec::new(),
                };
                self.out.send(&envelope_done(id, end));
                return;
            }
            Err(why) => {
                self.out
                    .send(&ServerMessage::error(Some(id), ErrorType::BadEnvelope, why));
                return;
            }
        };
        let plan = self.service.plan_envelope(env);
        for (action, why) in plan.unsupported {
            if self.is_open(&action) || action == id {
                self.refuse_duplicate(action);
            } else {
                let r = refused(action, ErrorType::UnsupportedAction, &why);
                self.out.send(&ServerMessage::Result(r));
            }
        }
        let end = EnvelopeEnd {
            assistant_text: plan.assistant_text,
            ids: plan.ids,
        };
        self.start_batch(myself, info, id, plan.calls, Some((plan.translated, end)));
    }

    /// The body of `batch` (and of an envelope's tool actions), once the batch's own id
    /// is known to be free.
    fn start_batch(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        info: &Arc<SessionInfo>,
        id: Id,
        calls: Vec<CallRequest>,
        envelope: Option<(std::collections::HashSet<Id>, EnvelopeEnd)>,
    ) {
        let (translated, envelope) = match envelope {
            Some((t, end)) => (t, Some(end)),
            None => (Default::default(), None),
        };
        let (calls, refused) = split_duplicates(&id, calls, |c| self.is_open(c));
        for dup in refused {
            self.out.send(&ServerMessage::error(
                Some(dup.id().clone()),
                ErrorType::DuplicateCallId,
                dup.to_string(),
            ));
        }
        let ids: Vec<Id> = calls.iter().map(|c| c.id.clone()).collect();
        if let Some(why) = self.over_limit(calls.len()) {
            for c in calls {
                self.out
                    .send(&ServerMessage::Result(overloaded(c.id, &why)));
            }
            self.out.send(&ServerMessage::BatchDone {
                id: id.clone(),
                ids,
            });
            if let Some(end) = envelope {
                self.out.send(&envelope_done(id, end));
            }
            return;
        }
        let batch_token = self.service.shutdown().child_token();
        self.batches.insert(id.clone(), batch_token.clone());
        let calls: Vec<BatchCall> = calls
            .into_iter()
            .map(|req| {
                let cancel = batch_token.child_token();
                self.open.insert(req.id.clone(), cancel.clone());
                BatchCall { req, cancel }
            })
            .collect();
        let (svc, info, me) = (self.service.clone(), info.clone(), myself.clone());
        let to_session = me.clone();
        let deliver: Deliver = Arc::new(move |mut r| {
            if translated.contains(&r.id) {
                crate::call::envelope::mark_translated(&mut r);
            }
            let _ = to_session.cast(SessionMsg::CallDone(Box::new(r)));
        });
        tokio::spawn(async move {
            svc.run_batch(info, id.clone(), calls, deliver).await;
            // Every CallDone was cast before this, so `batch_done` follows all results.
            let _ = me.cast(SessionMsg::BatchDone(id, ids, envelope));
        });
    }

    /// Whether `id` names an open call or an open batch of this connection.
    fn is_open(&self, id: &Id) -> bool {
        self.open.contains_key(id) || self.batches.contains_key(id)
    }

    fn refuse_duplicate(&self, id: Id) {
        let msg = format!("id `{id}` is still open on this connection");
        self.out.send(&ServerMessage::error(
            Some(id),
            ErrorType::DuplicateCallId,
            msg,
        ));
    }

    /// Why `more` new calls would pass `server.max_open_calls`, if they would.
    fn over_limit(&self, more: usize) -> Option<String> {
        let max = self.service.config().server.max_open_calls;
        let open = self.open.len();
        (open + more > max).then(|| format!("this connection has {open} open calls and asked for {more} more; the limit is {max} (server.max_open_calls)"))
    }

    fn cancel(&mut self, id: Id) {
        match self.open.get(&id).or_else(|| self.batches.get(&id)) {
            Some(token) => token.cancel(),
            None => self.out.send(&ServerMessage::error(
                Some(id.clone()),
                ErrorType::UnknownCall,
                format!("no open call or batch `{id}` on this connection"),
            )),
        }
    }

    fn restart(&self, id: Id, group: Option<String>) {
        let (svc, out) = (self.service.clone(), self.out.clone());
        if let Some(g) = &group
            && !svc.pools().contains_key(g)
        {
            out.send(&ServerMessage::error(
                Some(id),
                ErrorType::BadMessage,
                format!("no group `{g}`"),
            ));
            return;
        }
        tokio::spawn(async move {
            for (name, pool) in svc.pools() {
                if group.as_ref().is_none_or(|g| g == name) {
                    pool.restart().await;
                }
            }
            out.send(&ServerMessage::Ack { id });
        });
    }
}

/// An `Overloaded` result for a call refused before it was registered.
fn overloaded(id: Id, why: &str) -> ToolResult {
    refused(id, ErrorType::Overloaded, why)
}

/// A result for a call refused before it was registered (no audit record).
fn refused(id: Id, kind: ErrorType, why: &str) -> ToolResult {
    let o = toolvisor_protocol::worker::Outcome::err(toolvisor_protocol::ErrorBody::new(kind, why));
    to_result(id, o, Default::default(), std::time::Instant::now(), 0)
}

fn envelope_done(id: Id, end: EnvelopeEnd) -> ServerMessage {
    ServerMessage::EnvelopeDone {
        id,
        assistant_text: end.assistant_text,
        ids: end.ids,
    }
}

/// The `id` of a request, when it has one (to echo in an error).
fn request_id(m: &ClientMessage) -> Option<Id> {
    match m {
        ClientMessage::ListTools { id, .. }
        | ClientMessage::Batch { id, .. }
        | ClientMessage::Cancel { id }
        | ClientMessage::Grant { id, .. }
        | ClientMessage::Subscribe { id, .. }
        | ClientMessage::Status { id }
        | ClientMessage::Restart { id, .. }
        | ClientMessage::Ping { id }
        | ClientMessage::Explain { id, .. }
        | ClientMessage::Envelope { id, .. } => Some(id.clone()),
        ClientMessage::Call(c) => Some(c.id.clone()),
        ClientMessage::Hello { .. } | ClientMessage::Confirm { .. } => None,
    }
}

/// How long a frame may take to arrive once its first byte has (see [`read_loop`]).
const FRAME_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

async fn read_loop(rd: tokio::net::unix::OwnedReadHalf, max: usize, session: ActorRef<SessionMsg>) {
    // Buffered: the first byte of a frame is read on its own (below) without a syscall
    // of its own, and small frames arrive in one read.
    let mut rd = tokio::io::BufReader::with_capacity(8 * 1024, rd);
    loop {
        // An idle connection may wait for ever (a subscriber, an agent thinking); once a
        // frame has begun, the whole of it must arrive within FRAME_DEADLINE, so clients
        // trickling bytes (slowloris) cannot pin connections and buffers.
        let mut first = [0u8; 1];
        if !matches!(rd.read(&mut first).await, Ok(1)) {
            let _ = session.cast(SessionMsg::Closed);
            return;
        }
        let mut rest = (&first[..]).chain(&mut rd);
        let read = tokio::time::timeout(FRAME_DEADLINE, frame::read_frame(&mut rest, max)).await;
        let Ok(read) = read else {
            tracing::warn!(
                "a client sent part of a frame and stalled for {FRAME_DEADLINE:?}; closing its connection"
            );
            let _ = session.cast(SessionMsg::Closed);
            return;
        };
        match read {
            Ok(Some(body)) => {
                let msg = frame::decode::<ClientMessage>(&body, KNOWN_CLIENT_TYPES);
                if session.cast(SessionMsg::Frame(msg)).is_err() {
                    return;
                }
            }
            Err(FrameError::TooLarge { len, max }) => {
                let _ = session.cast(SessionMsg::TooLarge(len, max));
                return;
            }
            Ok(None) | Err(_) => {
                let _ = session.cast(SessionMsg::Closed);
                return;
            }
        }
    }
}

async fn write_loop(
    wr: tokio::net::unix::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Frame>,
    closed: CancellationToken,
    session: ActorRef<SessionMsg>,
) {
    let mut out = FrameWriter::new(wr);
    // Streamed output's budget shares, given back once their bytes are written.
    let mut written_budget = Vec::new();
    loop {
        let first = tokio::select! {
            m = rx.recv() => m,
            _ = closed.cancelled() => None,
        };
        let Some(first) = first else { break };
        // An empty frame is the outbox's "close after flush" mark.
        let mut last = first.bytes.is_empty();
        out.push_encoded(&first.bytes);
        written_budget.extend(first.budget);
        while !last && out.has_room() {
            match rx.try_recv() {
                Ok(more) => {
                    last = more.bytes.is_empty();
                    out.push_encoded(&more.bytes);
                    written_budget.extend(more.budget);
                }
                Err(_) => break,
            }
        }
        // A client that stopped reading leaves this write pending forever; the outbox
        // closing (it overflowed) must still end the connection.
        let wrote = tokio::select! {
            r = out.flush() => r.is_ok(),
            _ = closed.cancelled() => false,
        };
        if !wrote || last {
            break;
        }
        written_budget.clear();
    }
    let _ = out.shutdown().await;
    closed.cancel();
    let _ = session.cast(SessionMsg::Closed);
}
