//! One `tools/call` through the daemon, to its `result`: streamed output and heartbeats
//! become progress (an MCP server's own progress is passed on as it sent it, its log
//! messages as log messages), a confirmation is put to the person (elicitation) or announced,
//! a supervised server's request to the client is put to it ([`crate::mcp::relay`]),
//! `notifications/cancelled` (or the client going away) cancels the call.

use std::future::Future;
use std::pin::Pin;

use rmcp::model::ProgressToken;
use rmcp::{Peer, RoleServer};
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, ToolResult};

use crate::mcp::bridge::{Bridge, Route, Unavailable};
use crate::mcp::confirm::{self, Ask, Channel};
use crate::mcp::logging::{self, LogLevel};
use crate::mcp::progress::Progress;
use crate::mcp::worker::{LOG_STREAM, PROGRESS_STREAM};

/// What a call needs from its MCP request.
pub struct CallCtx<'a> {
    pub bridge: &'a Bridge,
    pub peer: Peer<RoleServer>,
    pub progress: Option<ProgressToken>,
    pub channel: Channel,
    pub cancel: CancellationToken,
    /// The client went away: every call of it ends.
    pub gone: CancellationToken,
    pub workspace: &'a std::path::Path,
    /// The least severity of log messages the client wants.
    pub log_level: &'a LogLevel,
}

/// How a call ended, short of a result.
#[derive(Debug)]
pub enum CallError {
    Unavailable(Unavailable),
    /// The MCP request was cancelled; the daemon was told.
    Cancelled,
    /// The daemon refused the request itself (a connection-level error).
    Refused(String),
}

type Asking = Pin<Box<dyn Future<Output = Option<ClientMessage>> + Send>>;

/// Where a call stopped: at its result, or at a confirmation a 2026-07-28 client
/// answers in a second round of its request (the call waits on `Route`).
pub enum Step {
    Done(ToolResult),
    NeedsInput(Route, Ask),
}

/// Run `req` to its result; a confirmation is asked or waited for, never handed back.
pub async fn run(ctx: &CallCtx<'_>, req: CallRequest) -> Result<ToolResult, CallError> {
    let ctx = CallCtx {
        channel: match ctx.channel {
            Channel::Rounds => Channel::Wait,
            other => other,
        },
        peer: ctx.peer.clone(),
        progress: ctx.progress.clone(),
        cancel: ctx.cancel.clone(),
        gone: ctx.gone.clone(),
        ..*ctx
    };
    match start(&ctx, req).await? {
        Step::Done(r) => Ok(r),
        Step::NeedsInput(..) => Err(CallError::Refused(
            "a confirmation could not be asked".into(),
        )),
    }
}

/// Send `req` to the daemon and [`drive`] it.
pub async fn start(ctx: &CallCtx<'_>, mut req: CallRequest) -> Result<Step, CallError> {
    req.stream = Some(ctx.progress.is_some() || !builtin(&req.tool));
    let route = ctx.bridge.call(req).await.map_err(CallError::Unavailable)?;
    drive(ctx, route).await
}

/// Whether `tool` is a built-in tool, whose output only progress wants (an MCP
/// server's tool streams for its log messages too).
fn builtin(tool: &str) -> bool {
    static BUILTIN: std::sync::OnceLock<Vec<toolvisor_protocol::tools::def::ToolDef>> =
        std::sync::OnceLock::new();
    BUILTIN
        .get_or_init(toolvisor_protocol::tools::builtin)
        .iter()
        .any(|t| t.answers_to(tool))
}

/// Follow a call to its result (or, on the `Rounds` channel, to its confirmation).
pub async fn drive(ctx: &CallCtx<'_>, mut route: Route) -> Result<Step, CallError> {
    let mut progress = ctx
        .progress
        .clone()
        .map(|t| Progress::new(ctx.peer.clone(), t));
    let mut asking: Option<Asking> = None;
    // A supervised server's requests to the client, each answered beside the call.
    let mut relays: tokio::task::JoinSet<ClientMessage> = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            m = route.next() => {
                let Some(m) = m else {
                    return Err(CallError::Unavailable(Unavailable(
                        "the connection to the toolvisor daemon was lost during the call".into(),
                    )));
                };
                match m {
                    ServerMessage::Result(r) => return Ok(Step::Done(r)),
                    ServerMessage::Output { stream, data, .. } if stream == LOG_STREAM => {
                        logging::relay(&ctx.peer, ctx.log_level, &data).await;
                    }
                    ServerMessage::Output { stream, data, .. } => {
                        if let Some(p) = progress.as_mut() {
                            if stream == PROGRESS_STREAM {
                                p.relay(&data).await;
                            } else {
                                p.output(&data).await;
                            }
                        }
                    }
                    ServerMessage::Event { event, .. } if event == "call_heartbeat" => {
                        if let Some(p) = progress.as_mut() {
                            p.heartbeat().await;
                        }
                    }
                    // Answered by another connection: stop asking here.
                    ServerMessage::Event { event, .. } if event == "confirm_answered" => asking = None,
                    ServerMessage::ConfirmRequired { interaction, tool, description, risk, preview, expires_in_ms, .. } => {
                        let ask = Ask {
                            interaction, tool, description, risk, preview,
                            expires_in: std::time::Duration::from_millis(expires_in_ms),
                        };
                        if ctx.channel == Channel::Rounds {
                            return Ok(Step::NeedsInput(route, ask));
                        }
                        asking = on_ask(ctx, ask, progress.as_mut()).await;
                    }
                    ServerMessage::Error { error, .. } => {
                        return Err(CallError::Refused(format!("{}: {}", error.kind, error.message)));
                    }
                    ServerMessage::RelayRequest { request, server, method, params, .. } => {
                        let peer = ctx.peer.clone();
                        relays.spawn(async move {
                            crate::mcp::relay::answer(&peer, request, &server, &method, params).await
                        });
                    }
                    _ => {}
                }
            }
            Some(Ok(answer)) = relays.join_next(), if !relays.is_empty() => {
                route.send(&answer).await.map_err(CallError::Unavailable)?;
            }
            answer = async {
                match asking.as_mut() {
                    Some(a) => a.await,
                    None => std::future::pending().await,
                }
            }, if asking.is_some() => {
                asking = None;
                if let Some(confirm) = answer {
                    route.send(&confirm).await.map_err(CallError::Unavailable)?;
                }
            }
            _ = cancelled(ctx) => {
                let _ = route.send(&ClientMessage::Cancel { id: route.id.clone() }).await;
                return Err(CallError::Cancelled);
            }
        }
    }
}

/// The request was cancelled, or its client is gone.
async fn cancelled(ctx: &CallCtx<'_>) {
    tokio::select! {
        _ = ctx.cancel.cancelled() => {}
        _ = ctx.gone.cancelled() => {}
    }
}

/// Put a confirmation to the person: an elicitation to answer (returned, to run
/// beside the call), or a notice that the call waits for `toolvisor approve`.
async fn on_ask(ctx: &CallCtx<'_>, ask: Ask, progress: Option<&mut Progress>) -> Option<Asking> {
    match ctx.channel {
        Channel::Elicit => {
            let peer = ctx.peer.clone();
            Some(Box::pin(async move { confirm::elicit(&peer, &ask).await }))
        }
        Channel::Wait | Channel::Rounds => {
            let notice = confirm::waiting_notice(&ask, ctx.workspace);
            match progress {
                Some(p) => p.say(notice).await,
                None => confirm::log_notice(&ctx.peer, ctx.log_level, &notice).await,
            }
            None
        }
    }
}
