//! `toolvisor worker --group mcp:NAME`: one MCP server (`[mcp.servers.NAME]`) as a
//! supervised worker.
//!
//! It reads `init` on its control socket (fd 3), starts the server (or opens its HTTP
//! session) and lists its tools within the start-up deadline, and says `ready` with
//! those tools, named `NAME__TOOL` ([`catalog`]), and the tool that reaches its
//! resources and prompts ([`requests`]). Then each `run` becomes a
//! `tools/call` and each `cancel` a `notifications/cancelled`; a
//! `notifications/tools/list_changed` (however many come at once) becomes one new
//! `tools/list`, sent on as a `tools` frame when it differs.
//! When the server goes away (it exited, the session broke), the worker exits and the
//! supervisor restarts it like any other.

mod catalog;
mod downstream;
mod logs;
mod outcome;
mod oversize;
mod relay;
mod requests;
mod stderr;
mod subscriptions;

use std::collections::HashMap;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, ClientRequest, ProgressNotificationParam,
    ProgressToken, ServerResult,
};
use rmcp::service::PeerRequestOptions;
use rmcp::{Peer, RoleClient};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::Guards;
use toolvisor_protocol::worker::{
    AnnouncedTool, FromWorker, KNOWN_TO_WORKER, McpServerInit, Outcome, ToWorker, WorkerInit,
};
use toolvisor_protocol::writer::direct::DirectWriter;
use toolvisor_protocol::{ErrorBody, ErrorType, frame};
use toolvisor_workers::context::Outgoing;

use catalog::{Catalog, Listed};

/// The `meta` key of an MCP server's content items, as it sent them (JSON, MCP's
/// shape): what `toolvisor mcp` passes on to its host (docs/PROTOCOL.md, `result`).
pub const CONTENT_META: &str = "mcp_content";

/// Progress notifications a call keeps before more are dropped.
const PROGRESS_DEPTH: usize = 64;

/// The `stream` of the `output` frames that carry a server's progress notifications.
pub const PROGRESS_STREAM: &str = "progress";
pub use logs::LOG_STREAM;

/// Longest progress message passed on, in characters.
const MAX_PROGRESS_MESSAGE: usize = 1000;

/// Exit code for a configuration error: the supervisor does not restart on it.
const EXIT_CONFIG: i32 = 78;
/// Exit code when the server could not be started or went away: restarted.
const EXIT_SERVER: i32 = 1;
/// The least time between two `tools/list` after `list_changed` notifications.
const RELIST_EVERY: Duration = Duration::from_millis(250);

/// Entry point; returns the exit code.
pub fn main(group: &str) -> i32 {
    // Close-on-exec at once: the MCP server this worker starts must not get it.
    let control = toolvisor_workers::worker::take_control();
    let init = match toolvisor_workers::worker::read_init(&control) {
        Ok(init) if init.group == group && init.mcp.is_some() => init,
        Ok(init) => {
            tracing::error!(
                group,
                "worker asked for group {group} but init says {} (or names no MCP server)",
                init.group
            );
            return EXIT_CONFIG;
        }
        Err(e) => {
            tracing::error!(group, "worker: no valid init frame: {e}");
            return EXIT_CONFIG;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(group, "worker: cannot start a runtime: {e}");
            return EXIT_SERVER;
        }
    };
    let code = runtime.block_on(serve(control, init));
    runtime.shutdown_timeout(Duration::from_secs(2));
    code
}

/// A call running on the server.
pub struct RunningCall {
    cancel: CancellationToken,
    /// The session it comes from (a server's request to the client goes to it).
    session: String,
}

/// Calls running on the server, by the supervisor's call number.
type Running = Arc<Mutex<HashMap<u64, RunningCall>>>;

/// The tools announced last: a `run` names one of them.
type Current = Arc<RwLock<Arc<Catalog>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

async fn serve(control: StdUnixStream, init: WorkerInit) -> i32 {
    let group = init.group.clone();
    let Some(server) = init.mcp.clone() else {
        return EXIT_CONFIG;
    };
    let (session, heard) = match downstream::connect(&server, &init).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(group = %group, "MCP server `{}`: {e}", server.name);
            // A host that cannot build the sandbox will not build it on a retry.
            return match e {
                downstream::ConnectError::Sandbox(_) => EXIT_CONFIG,
                _ => EXIT_SERVER,
            };
        }
    };
    let deadline = Duration::from_millis(server.startup_timeout_ms);
    let listed = match list(session.peer(), &server, deadline).await {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(group = %group, "MCP server `{}`: tools/list: {e}", server.name);
            return EXIT_SERVER;
        }
    };
    let stream = match control
        .set_nonblocking(true)
        .and_then(|_| tokio::net::UnixStream::from_std(control))
    {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(group = %group, "worker: control socket: {e}");
            return EXIT_SERVER;
        }
    };
    let (mut rd, wr) = stream.into_split();
    let (direct, drain) = DirectWriter::new(wr);
    let tx = Outgoing::new(direct);
    let writer = tokio::spawn(drain.run());
    let current: Current = Arc::new(RwLock::new(listed.catalog));
    let tools = listed.announced;
    let ready = FromWorker::Ready {
        pid: std::process::id(),
        guards: Guards::default(),
        tools: tools.clone(),
    };
    if !tx.send(&ready).await {
        return EXIT_SERVER;
    }
    let running: Running = Arc::default();
    let max = init
        .limits
        .max_frame_bytes
        .max(toolvisor_protocol::DEFAULT_MAX_FRAME_BYTES);
    let peer = session.peer().clone();
    let closed = session.cancellation_token();
    let mut gone = Box::pin(session.waiting());
    let relister = tokio::spawn(relist(
        Relist {
            peer: peer.clone(),
            server: server.clone(),
            current: current.clone(),
            tx: tx.clone(),
            deadline,
        },
        heard.changed,
        tools,
    ));
    let streaming: Streaming = Arc::default();
    let progress = tokio::spawn(route_progress(heard.progress, streaming.clone()));
    let logs = tokio::spawn(logs::route(heard.logs, running.clone(), tx.clone()));
    let pending = relay::Pending::default();
    let relays = tokio::spawn(relay::route(
        heard.asks,
        running.clone(),
        pending.clone(),
        tx.clone(),
    ));
    let subs = subscriptions::Subscriptions::default();
    let updates = tokio::spawn(subscriptions::route(
        heard.updated,
        subs.clone(),
        tx.clone(),
    ));
    let ctx = Ctx {
        subs: &subs,
        peer: &peer,
        running: &running,
        streaming: &streaming,
        current: &current,
        tx: &tx,
        init: &init,
        pending: &pending,
    };
    let code = loop {
        tokio::select! {
            body = frame::read_frame(&mut rd, max) => {
                let msg = match body {
                    Ok(Some(b)) => frame::decode::<ToWorker>(&b, KNOWN_TO_WORKER),
                    Ok(None) => break 0,
                    Err(e) => {
                        tracing::error!(group = %group, "worker: control socket: {e}");
                        break 0;
                    }
                };
                match msg {
                    Ok(ToWorker::Shutdown) => break 0,
                    Ok(m) => on_message(m, &ctx),
                    Err(e) => tracing::error!(group = %group, "worker: bad frame from supervisor: {e}"),
                }
            }
            end = &mut gone => {
                tracing::error!(group = %group, "MCP server `{}` went away: {end:?}", server.name);
                break EXIT_SERVER;
            }
        }
    };
    relister.abort();
    progress.abort();
    logs.abort();
    relays.abort();
    updates.abort();
    // Asked to stop: the calls still running are cancelled on the server. When the
    // server went away, they end as crashed (their answers can never come), not as
    // cancelled: nobody cancelled them.
    if code == 0 {
        for c in lock(&running).values() {
            c.cancel.cancel();
        }
    }
    closed.cancel();
    drop(tx);
    let _ = writer.await;
    code
}

/// What [`relist`] works with.
struct Relist {
    peer: Peer<RoleClient>,
    server: McpServerInit,
    current: Current,
    tx: Outgoing,
    deadline: Duration,
}

/// On each `list_changed` (floods collapse into one pending notice), list the tools
/// again and send them on when they differ; at most one list per [`RELIST_EVERY`].
async fn relist(r: Relist, mut changed: mpsc::Receiver<()>, mut announced: Vec<AnnouncedTool>) {
    while changed.recv().await.is_some() {
        match list(&r.peer, &r.server, r.deadline).await {
            Ok(listed) if listed.announced != announced => {
                announced = listed.announced.clone();
                *r.current.write().unwrap_or_else(|p| p.into_inner()) = listed.catalog;
                let tools = listed.announced;
                if !r.tx.send(&FromWorker::Tools { tools }).await {
                    return;
                }
            }
            Ok(_) => {}
            Err(e) => tracing::warn!("tools/list after list_changed: {e}"),
        }
        // A rate limit, not a wait for anything: what came meanwhile is one notice.
        tokio::time::sleep(RELIST_EVERY).await;
    }
}

/// Every tool of the server (all pages), within `deadline`, as announced.
async fn list(
    peer: &Peer<RoleClient>,
    server: &McpServerInit,
    deadline: Duration,
) -> Result<Listed, String> {
    let tools = match tokio::time::timeout(deadline, peer.list_all_tools()).await {
        Ok(Ok(tools)) => tools,
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err(format!("no answer within {deadline:?}")),
    };
    let mut listed = catalog::build(server, tools);
    listed.announced.extend(requests::announced(server, peer));
    for w in &listed.warnings {
        tracing::warn!("MCP server `{}`: {w}", server.name);
    }
    Ok(listed)
}

/// What the worker's messages act on.
struct Ctx<'a> {
    peer: &'a Peer<RoleClient>,
    running: &'a Running,
    streaming: &'a Streaming,
    current: &'a Current,
    tx: &'a Outgoing,
    init: &'a WorkerInit,
    pending: &'a relay::Pending,
    subs: &'a subscriptions::Subscriptions,
}

fn on_message(msg: ToWorker, ctx: &Ctx<'_>) {
    match msg {
        ToWorker::Run {
            call,
            tool,
            args,
            stream,
            session,
            ..
        } => {
            let cancel = CancellationToken::new();
            let entry = RunningCall {
                cancel: cancel.clone(),
                session,
            };
            let caller = requests::Caller {
                session: entry.session.clone(),
                subs: ctx.subs.clone(),
            };
            lock(ctx.running).insert(call, entry);
            let (peer, running, tx) = (ctx.peer.clone(), ctx.running.clone(), ctx.tx.clone());
            let streaming = ctx.streaming.clone();
            let catalog = ctx
                .current
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let limits = ctx.init.limits.clone();
            let server = ctx.init.mcp.clone();
            tokio::spawn(async move {
                let mut o = match (catalog.find(&tool), &server) {
                    (None, Some(s)) if tool == requests::tool_name(&s.name) => {
                        requests::run(&peer, s, &caller, args, &cancel).await
                    }
                    (Some(served), _) => {
                        let mut o = call_tool(
                            &peer,
                            served.original.clone(),
                            args,
                            stream.then_some(ProgressTo {
                                call,
                                streaming: &streaming,
                                tx: &tx,
                            }),
                            &cancel,
                        )
                        .await;
                        served.check_output(&mut o);
                        o
                    }
                    (None, _) => Outcome::err(ErrorBody::new(
                        ErrorType::McpToolError,
                        format!("the server no longer offers `{tool}`"),
                    )),
                };
                outcome::fit(&mut o, &limits);
                lock(&running).remove(&call);
                tx.send_now(&FromWorker::Done { call, outcome: o });
            });
        }
        ToWorker::Cancel { call } => {
            if let Some(c) = lock(ctx.running).get(&call) {
                c.cancel.cancel();
            }
        }
        ToWorker::RelayAnswer { ask, result, error } => ctx.pending.answer(ask, result, error),
        ToWorker::SessionEnded { session } => {
            let (subs, peer) = (ctx.subs.clone(), ctx.peer.clone());
            tokio::spawn(async move { subs.drop_session(&peer, &session).await });
        }
        ToWorker::Init(_) => tracing::warn!("worker: ignoring a second init"),
        // An MCP server's worker runs no command with an egress: no question to answer.
        ToWorker::Shutdown | ToWorker::ConnectAnswer { .. } => {}
    }
}

/// The calls that asked for progress, by the progress token rmcp gave their
/// `tools/call` (it sets one on every request): the server's notifications name it.
/// Each call passes its own on, so that all of them go out before its `done`.
type Streaming = Arc<Mutex<HashMap<ProgressToken, mpsc::Sender<ProgressNotificationParam>>>>;

/// How long a call's progress notifications may trail its answer: rmcp hands each
/// notification to a task of its own, so one the server sent just before answering
/// can arrive just after.
const PROGRESS_GRACE: Duration = Duration::from_millis(20);

/// Hand each progress notification of the server to the call it names (none: it is
/// dropped); a call that is behind loses notifications, never its result.
async fn route_progress(mut rx: mpsc::Receiver<ProgressNotificationParam>, streaming: Streaming) {
    while let Some(p) = rx.recv().await {
        let to = lock(&streaming).get(&p.progress_token).cloned();
        if let Some(to) = to {
            let _ = to.try_send(p);
        }
    }
}

/// A progress notification of the server as an `output` frame of stream `progress`:
/// `data` is `{"progress", "total"?, "message"?}` as JSON, with the server's values
/// (docs/PROTOCOL.md).
async fn send_progress(tx: &Outgoing, call: u64, p: ProgressNotificationParam) {
    let mut data = serde_json::Map::new();
    data.insert("progress".into(), serde_json::json!(p.progress));
    if let Some(total) = p.total {
        data.insert("total".into(), serde_json::json!(total));
    }
    if let Some(message) = p.message {
        let message: String = message.chars().take(MAX_PROGRESS_MESSAGE).collect();
        data.insert("message".into(), serde_json::Value::String(message));
    }
    let frame = FromWorker::Output {
        call,
        stream: PROGRESS_STREAM.into(),
        data: serde_json::Value::Object(data).to_string(),
    };
    tx.send(&frame).await;
}

/// A call's relayed progress: its notifications, passed on as its `output`.
struct Relay<'a> {
    call: u64,
    tx: &'a Outgoing,
    rx: mpsc::Receiver<ProgressNotificationParam>,
    streaming: &'a Streaming,
    token: ProgressToken,
}

impl Drop for Relay<'_> {
    fn drop(&mut self) {
        lock(self.streaming).remove(&self.token);
    }
}

/// The next notification of `relay`, or never.
async fn next_progress(relay: &mut Option<Relay<'_>>) -> Option<ProgressNotificationParam> {
    match relay {
        Some(r) => r.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Where a call that asked for progress sends it.
struct ProgressTo<'a> {
    call: u64,
    streaming: &'a Streaming,
    tx: &'a Outgoing,
}

/// One `tools/call` (its progress passed on when `progress` says where); a cancel
/// sends `notifications/cancelled` and answers at once.
async fn call_tool(
    peer: &Peer<RoleClient>,
    tool: String,
    args: serde_json::Value,
    progress: Option<ProgressTo<'_>>,
    cancel: &CancellationToken,
) -> Outcome {
    let serde_json::Value::Object(args) = args else {
        return Outcome::err(ErrorBody::new(
            ErrorType::InvalidParams,
            "the arguments must be an object",
        ));
    };
    let params = CallToolRequestParams::new(tool).with_arguments(args);
    let request = ClientRequest::CallToolRequest(CallToolRequest::new(params));
    let mut handle = match peer
        .send_cancellable_request(request, PeerRequestOptions::no_options())
        .await
    {
        Ok(h) => h,
        Err(e) => return crashed(&e.to_string()),
    };
    let mut relay = progress.map(|to| {
        let (ptx, rx) = mpsc::channel(PROGRESS_DEPTH);
        let token = handle.progress_token.clone();
        lock(to.streaming).insert(token.clone(), ptx);
        Relay {
            call: to.call,
            tx: to.tx,
            rx,
            streaming: to.streaming,
            token,
        }
    });
    let answer = loop {
        tokio::select! {
            a = &mut handle.rx => break a,
            Some(p) = next_progress(&mut relay) => {
                if let Some(r) = &relay {
                    send_progress(r.tx, r.call, p).await;
                }
            }
            _ = cancel.cancelled() => {
                let _ = handle.cancel(Some("cancelled by toolvisor".into())).await;
                return Outcome::err(ErrorBody::new(ErrorType::Cancelled, "the call was cancelled"));
            }
        }
    };
    if let Some(r) = relay.as_mut() {
        while let Ok(Some(p)) = tokio::time::timeout(PROGRESS_GRACE, r.rx.recv()).await {
            send_progress(r.tx, r.call, p).await;
        }
    }
    match answer {
        Ok(Ok(ServerResult::CallToolResult(r))) => outcome::of(r),
        Ok(Ok(other)) => Outcome::err(ErrorBody::new(
            ErrorType::McpToolError,
            format!(
                "the server answered tools/call with something else: {}",
                outcome::kind(&other)
            ),
        )),
        Ok(Err(rmcp::ServiceError::McpError(e))) => Outcome::err(ErrorBody::new(
            ErrorType::McpToolError,
            format!(
                "the server refused the call: {} (code {})",
                e.message, e.code.0
            ),
        )),
        Ok(Err(e)) => crashed(&e.to_string()),
        Err(_) => crashed("the session with the server ended"),
    }
}

fn crashed(why: &str) -> Outcome {
    Outcome::err(ErrorBody::new(
        ErrorType::WorkerCrashed,
        format!("the MCP server went away during the call: {why}"),
    ))
}
