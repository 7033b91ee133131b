//! One persistent connection from the MCP bridge to the daemon, shared by every MCP
//! request: an interactive session (so asks come to us as `confirm_required`), a
//! subscription to the `calls`, `confirmations` and `workers` topics (heartbeats, answers
//! given elsewhere, `tools_changed`), and a reader task that hands each message to the
//! request it belongs to by id.
//!
//! A lost connection fails the requests in flight; the next request connects again,
//! starting the daemon first when the bridge may ([`Daemon`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::sync::{broadcast, mpsc};
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::frame;
use toolvisor_protocol::message::{
    CallRequest, ClientMessage, KNOWN_SERVER_TYPES, ServerMessage, Topic,
};
use toolvisor_protocol::{Id, PROTOCOL_VERSION};

use crate::mcp::daemon::Daemon;

/// Messages queued for one request before the reader drops streamed ones.
const ROUTE_DEPTH: usize = 256;
/// Largest frame accepted from the daemon.
const MAX_FRAME: usize = 64 << 20;

/// Why the daemon cannot be reached; the message says what to do.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct Unavailable(pub String);

/// What the bridge tells the MCP side about the daemon, besides answers.
#[derive(Clone, Debug)]
pub enum Notice {
    /// An MCP server's tools changed (`tools_changed` on the `workers` topic).
    ToolsChanged,
    /// A resource an MCP server offers changed (`resource_updated` on the `workers`
    /// topic): its URI.
    ResourceUpdated(String),
}

/// The bridge's view of the daemon.
pub struct Bridge {
    socket: PathBuf,
    workspace: PathBuf,
    /// Present when the bridge may start a daemon itself.
    daemon: Option<Daemon>,
    client: Mutex<String>,
    /// The servers' requests the MCP client answers (`relay` of the `hello`).
    relay: Mutex<Vec<String>>,
    /// The resources of MCP servers the client subscribed to.
    subscribed: Mutex<std::collections::HashSet<String>>,
    conn: tokio::sync::Mutex<Option<Arc<Conn>>>,
    next_id: AtomicU64,
    notices: broadcast::Sender<Notice>,
}

/// One live connection.
pub struct Conn {
    tx: mpsc::Sender<Vec<u8>>,
    routes: Mutex<HashMap<Id, mpsc::Sender<ServerMessage>>>,
    pub session: String,
    closed: CancellationToken,
    /// Its holders: the bridge (until it goes or retires the connection) and each
    /// route. The release that brings it to zero ends the connection: one atomic
    /// count, so two holders going at once cannot each see the other still there.
    users: std::sync::atomic::AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Bridge {
    pub fn new(socket: PathBuf, workspace: PathBuf, daemon: Option<Daemon>) -> Bridge {
        Bridge {
            socket,
            workspace,
            daemon,
            client: Mutex::new("toolvisor-mcp".into()),
            relay: Mutex::new(Vec::new()),
            subscribed: Mutex::default(),
            conn: tokio::sync::Mutex::new(None),
            next_id: AtomicU64::new(1),
            notices: broadcast::channel(16).0,
        }
    }

    /// Say who the MCP client is (at its `initialize`): its name in the daemon's
    /// sessions (`toolvisor approve` shows it) and the requests of supervised MCP
    /// servers it answers ([`crate::mcp::relay::methods`]). A connection made before
    /// (to start the daemon early) said neither: it is retired, and the next request
    /// opens one that does.
    pub async fn introduce(&self, name: &str, relay: Vec<String>) {
        *lock(&self.client) = format!("mcp:{name}");
        *lock(&self.relay) = relay;
        self.retire().await;
    }

    /// Let go of the connection: it ends once no request holds it (a call parked for
    /// a second round keeps it); the next request opens another.
    pub async fn retire(&self) {
        if let Some(old) = self.conn.lock().await.take() {
            old.release();
        }
    }

    /// Note that the client subscribed to `uri` (true) or no longer is (false).
    pub fn set_subscribed(&self, uri: &str, on: bool) {
        let mut set = lock(&self.subscribed);
        if on {
            set.insert(uri.to_owned());
        } else {
            set.remove(uri);
        }
    }

    /// Whether the client subscribed to `uri`.
    pub fn is_subscribed(&self, uri: &str) -> bool {
        lock(&self.subscribed).contains(uri)
    }

    pub fn notices(&self) -> broadcast::Receiver<Notice> {
        self.notices.subscribe()
    }

    /// A fresh request id.
    pub fn id(&self) -> Id {
        Id::Str(format!("m{}", self.next_id.fetch_add(1, Ordering::Relaxed)))
    }

    /// The live connection, made (and the daemon started) if need be.
    pub async fn conn(&self) -> Result<Arc<Conn>, Unavailable> {
        let mut guard = self.conn.lock().await;
        if let Some(c) = guard.as_ref().filter(|c| !c.closed.is_cancelled()) {
            return Ok(c.clone());
        }
        let c = match self.connect().await {
            Ok(c) => c,
            Err(first) => match &self.daemon {
                Some(d) => {
                    let d = d.clone();
                    let started = tokio::task::spawn_blocking(move || d.start())
                        .await
                        .map_err(|e| Unavailable(e.to_string()))?;
                    // Even a start that failed may have lost a race to another daemon.
                    match (self.connect().await, started) {
                        (Ok(c), _) => c,
                        (Err(_), Err(why)) => {
                            return Err(Unavailable(format!(
                                "cannot start the toolvisor daemon for {}: {why}",
                                self.workspace.display()
                            )));
                        }
                        (Err(e), Ok(())) => return Err(self.not_running(&e)),
                    }
                }
                None => return Err(self.not_running(&first)),
            },
        };
        *guard = Some(c.clone());
        Ok(c)
    }

    fn not_running(&self, why: &std::io::Error) -> Unavailable {
        Unavailable(format!(
            "no toolvisor daemon serves {} (socket {}: {why}). Start one with \
             `toolvisor serve --workspace {}`, or run `toolvisor mcp` without --no-spawn \
             so it starts one itself.",
            self.workspace.display(),
            self.socket.display(),
            self.workspace.display()
        ))
    }

    async fn connect(&self) -> std::io::Result<Arc<Conn>> {
        let stream = UnixStream::connect(&self.socket).await?;
        let (mut rd, mut wr) = stream.into_split();
        let client = lock(&self.client).clone();
        let hello = ClientMessage::Hello {
            protocol: PROTOCOL_VERSION,
            client,
            interactive: Some(true),
            relay: lock(&self.relay).clone(),
        };
        wr.write_all(&frame::encode(&hello).map_err(std::io::Error::other)?)
            .await?;
        let session = match read(&mut rd).await? {
            ServerMessage::Welcome { session, .. } => session,
            other => {
                return Err(std::io::Error::other(format!(
                    "the daemon refused the connection: {other:?}"
                )));
            }
        };
        let (tx, rx) = mpsc::channel::<Vec<u8>>(256);
        let conn = Arc::new(Conn {
            tx,
            routes: Mutex::new(HashMap::new()),
            session,
            closed: CancellationToken::new(),
            users: std::sync::atomic::AtomicUsize::new(1),
        });
        tokio::spawn(write_loop(wr, rx, conn.closed.clone()));
        tokio::spawn(read_loop(rd, conn.clone(), self.notices.clone()));
        let subscribe = ClientMessage::Subscribe {
            id: self.id(),
            topics: vec![Topic::Calls, Topic::Confirmations, Topic::Workers],
        };
        // Queued without waiting: from the tasks' start to the caller's keeping the
        // connection nothing awaits, so a caller dropped meanwhile (its client went
        // away) cannot leave a connection that nobody holds and nobody ends.
        let bytes = frame::encode(&subscribe).map_err(std::io::Error::other)?;
        if conn.tx.try_send(bytes).is_err() {
            conn.closed.cancel();
            return Err(std::io::Error::other("the connection to the daemon ended"));
        }
        Ok(conn)
    }

    /// Send a request with an id and wait for the one message that answers it.
    pub async fn request(
        &self,
        make: impl FnOnce(Id) -> ClientMessage,
    ) -> Result<ServerMessage, Unavailable> {
        let conn = self.conn().await?;
        let id = self.id();
        let mut route = conn.route(id.clone());
        conn.send(&make(id)).await?;
        route.next().await.ok_or_else(lost)
    }

    /// Start a call; its messages come through the returned route.
    pub async fn call(&self, mut req: CallRequest) -> Result<Route, Unavailable> {
        let conn = self.conn().await?;
        req.id = self.id();
        let route = conn.route(req.id.clone());
        conn.send(&ClientMessage::Call(req)).await?;
        Ok(route)
    }
}

/// The bridge going (its MCP session ended) lets go of its daemon connection, which
/// ends (and with it the calls still running on it) once no route holds it any more:
/// a call parked for a stateless client's second round (which another bridge takes
/// up) keeps it.
impl Drop for Bridge {
    fn drop(&mut self) {
        if let Some(c) = self.conn.get_mut().take() {
            c.release();
        }
    }
}

fn lost() -> Unavailable {
    Unavailable("the connection to the toolvisor daemon was lost (did it stop?)".into())
}

impl Conn {
    /// One holder is done with the connection; the last one ends it.
    fn release(&self) {
        if self.users.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.closed.cancel();
        }
    }

    pub async fn send(&self, msg: &ClientMessage) -> Result<(), Unavailable> {
        let bytes = frame::encode(msg).map_err(|e| Unavailable(e.to_string()))?;
        self.tx.send(bytes).await.map_err(|_| lost())
    }

    /// Register `id`: messages for it go to the route until it drops.
    fn route(self: &Arc<Self>, id: Id) -> Route {
        let (tx, rx) = mpsc::channel(ROUTE_DEPTH);
        lock(&self.routes).insert(id.clone(), tx);
        self.users.fetch_add(1, Ordering::SeqCst);
        Route {
            id,
            rx,
            conn: self.clone(),
        }
    }

    /// Hand a message to its request. Streamed output and heartbeats are dropped when
    /// the request is behind (they are progress, not results); the rest waits.
    async fn deliver(&self, id: Id, msg: ServerMessage) {
        let Some(tx) = lock(&self.routes).get(&id).cloned() else {
            return;
        };
        let droppable = matches!(
            msg,
            ServerMessage::Output { .. } | ServerMessage::Event { .. }
        );
        if droppable {
            let _ = tx.try_send(msg);
        } else {
            let _ = tx.send(msg).await;
        }
    }
}

/// The messages of one request, in order; `None` once the connection is gone.
pub struct Route {
    pub id: Id,
    rx: mpsc::Receiver<ServerMessage>,
    conn: Arc<Conn>,
}

impl Route {
    pub async fn next(&mut self) -> Option<ServerMessage> {
        tokio::select! {
            m = self.rx.recv() => m,
            _ = self.conn.closed.cancelled() => self.rx.try_recv().ok(),
        }
    }

    /// Send on the request's connection (a `cancel`, a `confirm`).
    pub async fn send(&self, msg: &ClientMessage) -> Result<(), Unavailable> {
        self.conn.send(msg).await
    }
}

impl Drop for Route {
    fn drop(&mut self) {
        lock(&self.conn.routes).remove(&self.id);
        self.conn.release();
    }
}

async fn read<R: tokio::io::AsyncRead + Unpin>(rd: &mut R) -> std::io::Result<ServerMessage> {
    let body = frame::read_frame(rd, MAX_FRAME)
        .await
        .map_err(std::io::Error::other)?
        .ok_or_else(|| std::io::Error::other("the daemon closed the connection"))?;
    frame::decode(&body, KNOWN_SERVER_TYPES).map_err(std::io::Error::other)
}

async fn write_loop(
    mut wr: tokio::net::unix::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Vec<u8>>,
    closed: CancellationToken,
) {
    loop {
        tokio::select! {
            bytes = rx.recv() => match bytes {
                Some(b) if wr.write_all(&b).await.is_ok() => {}
                _ => break,
            },
            _ = closed.cancelled() => break,
        }
    }
    closed.cancel();
}

async fn read_loop(
    mut rd: tokio::net::unix::OwnedReadHalf,
    conn: Arc<Conn>,
    notices: broadcast::Sender<Notice>,
) {
    loop {
        let msg = tokio::select! {
            m = read(&mut rd) => m,
            _ = conn.closed.cancelled() => break,
        };
        let msg = match msg {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("connection to the daemon ended: {e}");
                break;
            }
        };
        if let Some(notice) = notice_of(&msg) {
            let _ = notices.send(notice);
            continue;
        }
        if let Some(id) = owner(&msg, &conn.session) {
            conn.deliver(id, msg).await;
        }
    }
    conn.closed.cancel();
    lock(&conn.routes).clear();
}

/// The notice a `workers` event is for the MCP client, if any.
fn notice_of(m: &ServerMessage) -> Option<Notice> {
    let ServerMessage::Event {
        topic: Topic::Workers,
        event,
        fields,
        ..
    } = m
    else {
        return None;
    };
    match event.as_str() {
        "tools_changed" => Some(Notice::ToolsChanged),
        "resource_updated" => fields
            .get("uri")
            .and_then(Value::as_str)
            .map(|u| Notice::ResourceUpdated(u.to_owned())),
        _ => None,
    }
}

/// The request a message belongs to: by its id, or for events of our own calls by the
/// call id they name.
fn owner(m: &ServerMessage, session: &str) -> Option<Id> {
    match m {
        ServerMessage::Output { id, .. }
        | ServerMessage::ConfirmRequired { id, .. }
        | ServerMessage::RelayRequest { id, .. }
        | ServerMessage::Tools { id, .. }
        | ServerMessage::BatchDone { id, .. }
        | ServerMessage::Token { id, .. }
        | ServerMessage::Subscribed { id }
        | ServerMessage::Status { id, .. }
        | ServerMessage::Ack { id }
        | ServerMessage::Pong { id }
        | ServerMessage::Explanation { id, .. } => Some(id.clone()),
        ServerMessage::Result(r) => Some(r.id.clone()),
        ServerMessage::Error { id, .. } => id.clone(),
        ServerMessage::Event { event, fields, .. }
            if event == "call_heartbeat" || event == "confirm_answered" =>
        {
            let ours = fields.get("session").and_then(Value::as_str) == Some(session);
            let id = fields
                .get("id")
                .and_then(|v| serde_json::from_value(v.clone()).ok());
            id.filter(|_| ours)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_of_our_calls_find_their_call() {
        let ev = |event: &str, session: &str| ServerMessage::Event {
            topic: Topic::Calls,
            event: event.into(),
            dropped: None,
            fields: json!({"id": "m7", "session": session})
                .as_object()
                .unwrap()
                .clone(),
        };
        assert_eq!(
            owner(&ev("call_heartbeat", "s1"), "s1"),
            Some(Id::Str("m7".into()))
        );
        assert_eq!(owner(&ev("call_heartbeat", "s2"), "s1"), None);
        assert_eq!(owner(&ev("call_started", "s1"), "s1"), None);
        assert_eq!(
            owner(&ev("confirm_answered", "s1"), "s1"),
            Some(Id::Str("m7".into()))
        );
        let err = ServerMessage::error(None, toolvisor_protocol::ErrorType::BadMessage, "x");
        assert_eq!(owner(&err, "s1"), None);
    }
}
