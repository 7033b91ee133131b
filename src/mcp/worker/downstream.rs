//! The MCP server a worker runs: a child process spoken to over its stdin and stdout,
//! or a Streamable HTTP session, as an rmcp client.
//!
//! The child gets the worker's (scrubbed) environment plus its own `env`, the workspace
//! as its directory, the worker's process group (so the supervisor's kill of the worker
//! reaches it), death with the worker (parent-death signal), and no descriptor past its
//! standard streams. It runs under the reap shim in the command sandbox
//! ([`toolvisor_workers::exec::server`]) unless its section says `sandbox = "off"`; the
//! shim kills its whole tree when the worker goes. Its stderr goes to the
//! daemon's log, bounded ([`super::stderr`]); an answer too long for rmcp to read is
//! answered as an error in its place ([`super::oversize`]), never waited for. The
//! session declares sampling and elicitation: a server that asks its client something
//! during a call is passed on to that call's client ([`super::relay`]), which may
//! refuse. Its progress notifications (for calls that asked for them) are handed to the worker,
//! which passes them on; a flood of them is cut to what the worker keeps up with.

#![allow(deprecated)] // Log messages: deprecated from 2026-07-28, older servers send them.

use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{
    ClientCapabilities, ClientConfig, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequestParams, ElicitResult, Implementation, LoggingMessageNotificationParam,
    ProgressNotificationParam, ProtocolVersion, ResourceUpdatedNotificationParam,
};
use rmcp::service::{NotificationContext, RequestContext, RunningService};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;
use toolvisor_protocol::worker::{McpServerInit, WorkerInit};
use toolvisor_workers::exec::server::{self, ServerSpec};

/// The running client session with the server.
pub type Session = RunningService<RoleClient, Handler>;

/// Why the server could not be reached.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("cannot start `{program}`: {source}")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("the server did not finish `initialize` within {0:?}")]
    Timeout(Duration),
    #[error("the MCP handshake failed: {0}")]
    Handshake(String),
    /// The server cannot be run in the command sandbox: not started (and not retried).
    #[error("{0}")]
    Sandbox(#[from] toolvisor_workers::exec::server::ServerSandboxError),
}

/// Progress notifications waiting for the worker before more are dropped (progress
/// only informs: a late one is worth less than the call's result).
const PROGRESS_DEPTH: usize = 64;

/// The client side of the session: it hears when the server's tools change, the
/// progress of calls and the server's log messages.
pub struct Handler {
    /// One pending "tools changed" is enough: floods collapse into it.
    changed: mpsc::Sender<()>,
    progress: mpsc::Sender<ProgressNotificationParam>,
    logs: mpsc::Sender<LoggingMessageNotificationParam>,
    asks: mpsc::Sender<super::relay::Ask>,
    updated: mpsc::Sender<String>,
}

/// What the session tells the worker besides answers.
pub struct Heard {
    /// `notifications/tools/list_changed`.
    pub changed: mpsc::Receiver<()>,
    /// `notifications/progress`.
    pub progress: mpsc::Receiver<ProgressNotificationParam>,
    /// `notifications/message`.
    pub logs: mpsc::Receiver<LoggingMessageNotificationParam>,
    /// `sampling/createMessage` and `elicitation/create` requests.
    pub asks: mpsc::Receiver<super::relay::Ask>,
    /// The URIs of `notifications/resources/updated`.
    pub updated: mpsc::Receiver<String>,
}

/// Requests of the server waiting to be passed on before more are refused.
const ASK_DEPTH: usize = 16;

impl Handler {
    /// Pass the server's request `method` on, and read the client's answer as `R`.
    async fn relay<P: Serialize, R: DeserializeOwned>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<R, ErrorData> {
        let params = serde_json::to_value(params)
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let (reply, answer) = tokio::sync::oneshot::channel();
        let ask = super::relay::Ask {
            method: method.to_owned(),
            params,
            reply,
        };
        if self.asks.try_send(ask).is_err() {
            let why = "too many requests wait for the client";
            return Err(ErrorData::internal_error(why, None));
        }
        let refused = |why: String| ErrorData::invalid_request(format!("toolvisor: {why}"), None);
        let result = match answer.await {
            Ok(Ok(v)) => v,
            Ok(Err(why)) => return Err(refused(why)),
            Err(_) => return Err(refused("the worker stopped".into())),
        };
        serde_json::from_value(result)
            .map_err(|e| refused(format!("the client's answer is not a {method} result: {e}")))
    }
}

impl ClientHandler for Handler {
    /// Revision 2025-11-25 is asked for: its server-to-client requests (sampling,
    /// elicitation) are what the worker passes on; 2026-07-28 replaces them with
    /// results that ask for input, which the worker does not take. A server that
    /// speaks only an older revision answers with it, and the session goes on in it.
    fn get_info(&self) -> ClientConfig {
        let capabilities = ClientCapabilities::builder()
            .enable_sampling()
            .enable_elicitation()
            .build();
        ClientConfig::new(
            capabilities,
            Implementation::new("toolvisor", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::V_2025_11_25)
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        let _ = self.changed.try_send(());
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.progress.try_send(params);
    }

    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.logs.try_send(params);
    }

    async fn on_resource_updated(
        &self,
        params: ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let _ = self.updated.try_send(params.uri);
    }

    /// A sampling request goes on without its `includeContext`: the client's context
    /// is not the server's to ask for (its client sees toolvisor as the one server
    /// asking, so "this server" would be every server toolvisor runs).
    async fn create_message(
        &self,
        mut params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        params.include_context = None;
        self.relay("sampling/createMessage", &params).await
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        self.relay("elicitation/create", &request).await
    }
}

/// Connect to the server `init` describes, within its start-up deadline; `worker`
/// says where and in which sandbox a stdio server runs.
pub async fn connect(
    init: &McpServerInit,
    worker: &WorkerInit,
) -> Result<(Session, Heard), ConnectError> {
    let (changed, changed_rx) = mpsc::channel(1);
    let (progress, progress_rx) = mpsc::channel(PROGRESS_DEPTH);
    let (logs, logs_rx) = mpsc::channel(PROGRESS_DEPTH);
    let (asks, asks_rx) = mpsc::channel(ASK_DEPTH);
    let (updated, updated_rx) = mpsc::channel(PROGRESS_DEPTH);
    let heard = Heard {
        changed: changed_rx,
        progress: progress_rx,
        logs: logs_rx,
        asks: asks_rx,
        updated: updated_rx,
    };
    let handler = Handler {
        changed,
        progress,
        logs,
        asks,
        updated,
    };
    let deadline = Duration::from_millis(init.startup_timeout_ms);
    let started = match &init.url {
        Some(url) => {
            // rustls is built without a default crypto provider: ring is ours.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let transport = rmcp::transport::StreamableHttpClientTransport::from_uri(url.as_str());
            tokio::time::timeout(deadline, handler.serve(transport)).await
        }
        None => {
            let (stdout, stdin) = spawn(init, worker)?;
            let stdout = super::oversize::Bounded::new(stdout);
            tokio::time::timeout(deadline, handler.serve((stdout, stdin))).await
        }
    };
    match started {
        Ok(Ok(session)) => Ok((session, heard)),
        Ok(Err(e)) => Err(ConnectError::Handshake(e.to_string())),
        Err(_) => Err(ConnectError::Timeout(deadline)),
    }
}

/// The command line that starts the server: under the reap shim in the command
/// sandbox, or as configured with `sandbox = "off"` (said in the log).
fn command_line(init: &McpServerInit, worker: &WorkerInit) -> Result<Vec<String>, ConnectError> {
    if !init.sandbox {
        tracing::warn!(
            "MCP server `{}`: sandbox = \"off\": it runs unsandboxed, as the daemon's user",
            init.name
        );
        return Ok(init.command.clone());
    }
    let spec = ServerSpec {
        argv: &init.command,
        network: init.network,
        keep_fds: &[],
    };
    Ok(server::command_line(worker, spec)?)
}

/// Start the server's command; its pipes for the client.
fn spawn(
    init: &McpServerInit,
    worker: &WorkerInit,
) -> Result<(tokio::process::ChildStdout, tokio::process::ChildStdin), ConnectError> {
    let spawn_err = |source| ConnectError::Spawn {
        program: init.command.first().cloned().unwrap_or_default(),
        source,
    };
    let line = command_line(init, worker)?;
    let Some((program, args)) = line.split_first() else {
        return Err(spawn_err(std::io::Error::other("the command is empty")));
    };
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .envs(&init.env)
        .current_dir(&worker.roots.private)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // The shim turns SIGTERM into the kill of the server's whole tree.
    let death = if init.sandbox {
        libc::SIGTERM
    } else {
        libc::SIGKILL
    };
    // SAFETY: the hooks only make async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(crate::mcp::child::die_with_parent(death));
        cmd.pre_exec(crate::mcp::child::only_stdio);
    }
    let mut child = cmd.spawn().map_err(spawn_err)?;
    let (Some(stdout), Some(stdin)) = (child.stdout.take(), child.stdin.take()) else {
        return Err(spawn_err(std::io::Error::other("no pipes to the server")));
    };
    if let Some(stderr) = child.stderr.take() {
        let to = tokio::io::stderr();
        tokio::spawn(super::stderr::pass_on(init.name.clone(), stderr, to));
    }
    // The child is reaped (and its death seen) through the session closing; keep it
    // from being killed by the drop of its handle while it serves.
    tokio::spawn(async move {
        let status = child.wait().await;
        tracing::warn!("the MCP server exited: {status:?}");
    });
    Ok((stdout, stdin))
}
