//! One session actor per connection: it owns the connection's state (hello, open
//! calls), answers requests, and starts one task per call. A reader task feeds it
//! decoded frames; a writer task drains its bounded outbox to the socket.

use std::collections::HashMap;
use std::sync::Arc;

use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::net::UnixStream;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::frame::DecodeError;
use toolvisor_protocol::message::{ClientMessage, ServerMessage, ToolFormat, ToolResult};
use toolvisor_protocol::{ErrorType, Id, PROTOCOL_VERSION};

use crate::call::router::{SessionInfo, to_result};
use crate::call::service::Service;
use crate::outbox::Outbox;
use crate::session::io::{read_loop, write_loop};
use crate::session::open::OpenCalls;

/// Messages of a session actor.
pub enum SessionMsg {
    /// A frame read from the client (or why it does not decode).
    Frame(Result<ClientMessage, DecodeError>),
    /// The client announced a frame over the limit: `(its length, the limit)`.
    TooLarge(usize, usize),
    /// The connection ended (read side or write side).
    Closed,
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
    pub(super) service: Arc<Service>,
    pub(super) out: Outbox,
    pub(super) info: Option<Arc<SessionInfo>>,
    pub(super) id: String,
    pub(super) uid: u32,
    pub(super) peer: crate::session::peer::Peer,
    /// Open calls (single or in a batch); each counts against `max_open_calls`.
    pub(super) open: OpenCalls,
    /// Open batches; each token is the parent of its calls' tokens.
    pub(super) batches: HashMap<Id, CancellationToken>,
    pub(super) reader: tokio::task::JoinHandle<()>,
}

impl Drop for SessionState {
    fn drop(&mut self) {
        self.reader.abort();
        self.service.confirmations().end_session(&self.id);
        self.service.session_ended(&self.id);
        self.open.cancel_all();
        for token in self.batches.values() {
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
        let (out, drain) = Outbox::new(wr);
        let max = args.service.config().limits.max_frame_bytes;
        tokio::spawn(write_loop(drain, out.closed.clone(), myself.clone()));
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
            open: OpenCalls::default(),
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
                    relay,
                },
            ) => {
                let interactive = interactive.unwrap_or(false);
                return self.hello(myself, protocol, client, interactive, relay);
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
            ClientMessage::Hook {
                id,
                phase,
                call,
                tool,
                args,
                status,
                summary,
            } => {
                let report = crate::session::hook::HookReport {
                    id,
                    phase,
                    call,
                    tool,
                    args,
                    status,
                    summary,
                };
                let (svc, out) = (self.service.clone(), self.out.clone());
                tokio::spawn(async move {
                    out.send(&crate::session::hook::answer(&svc, &info, report).await)
                });
            }
            ClientMessage::ListTools { id, format, groups } => {
                self.list_tools(id, format.unwrap_or_default(), groups)
            }
            ClientMessage::Call(req) => self.call(&info, req),
            ClientMessage::Cancel { id } => self.cancel(id),
            ClientMessage::Status { id } => {
                let (svc, out) = (self.service.clone(), self.out.clone());
                tokio::spawn(
                    async move { out.send(&crate::session::status::status(&svc, id).await) },
                );
            }
            ClientMessage::Restart { id, group } => self.restart(id, group),
            ClientMessage::Undo {
                id,
                calls,
                trace,
                last,
                dry_run,
            } => {
                let req = crate::call::undo_request::UndoRequest {
                    id,
                    calls,
                    trace,
                    last,
                    dry_run: dry_run.unwrap_or(false),
                };
                let person = info.interactive && !self.peer.is_command();
                let (svc, out) = (self.service.clone(), self.out.clone());
                tokio::spawn(async move {
                    out.send(&svc.undo_request(&info, person, req).await);
                });
            }
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
            ClientMessage::RelayAnswer {
                request,
                result,
                error,
            } => {
                let answer = toolvisor_protocol::message::relay_outcome(result, error);
                if !self.service.relay_book().answer(&info.id, request, answer) {
                    self.out.send(&ServerMessage::error(
                        None,
                        ErrorType::BadMessage,
                        format!("no relay_request {request} waits for this session"),
                    ));
                }
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
        relay: Vec<String>,
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
            exec_home: Arc::new(std::sync::atomic::AtomicU32::new(u32::MAX)),
            relay,
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
pub(super) fn overloaded(id: Id, why: &str) -> ToolResult {
    refused(id, ErrorType::Overloaded, why)
}

/// A result for a call refused before it was registered (no audit record).
pub(super) fn refused(id: Id, kind: ErrorType, why: &str) -> ToolResult {
    let o = toolvisor_protocol::worker::Outcome::err(toolvisor_protocol::ErrorBody::new(kind, why));
    to_result(id, o, Default::default(), std::time::Instant::now(), 0)
}

pub(super) fn envelope_done(id: Id, end: EnvelopeEnd) -> ServerMessage {
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
        | ClientMessage::Hook { id, .. }
        | ClientMessage::Undo { id, .. }
        | ClientMessage::Envelope { id, .. } => Some(id.clone()),
        ClientMessage::Call(c) => Some(c.id.clone()),
        ClientMessage::Hello { .. }
        | ClientMessage::Confirm { .. }
        | ClientMessage::RelayAnswer { .. } => None,
    }
}
