//! The MCP server `toolvisor mcp` runs on stdio (rmcp): `tools/list` and `tools/call`
//! through the daemon, artifacts as resources, `notifications/tools/list_changed`
//! when an MCP server behind the daemon changes its tools, and
//! `notifications/resources/updated` for the servers' resources the client subscribed to. Every revision rmcp knows is
//! negotiated (the stateless 2026-07-28 one through `server/discover`).

use std::path::PathBuf;
use std::sync::Arc;

#[allow(deprecated)] // logging/setLevel: deprecated from 2026-07-28, used before it.
use rmcp::model::SetLevelRequestParams;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    GetPromptRequestParams, GetPromptResponse, GetPromptResult, Implementation,
    InitializeRequestParams, InitializeResult, ListPromptsResult, ListResourceTemplatesResult,
    ListResourcesResult, ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, ResourceContents, ResourceUpdatedNotificationParam,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::model::{CancelTaskParams, GetTaskParams, GetTaskResult};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::Value;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::CallRequest;

use crate::mcp::bridge::{Bridge, Notice};
use crate::mcp::call::{self, CallCtx, CallError, Step};
use crate::mcp::confirm;
use crate::mcp::logging::LogLevel;
use crate::mcp::passthrough::{self, AskError};
use crate::mcp::resources::{self, ArtifactDir, ReadError};
use crate::mcp::rounds::{self, Rounds};
use crate::mcp::tasks::{self, Tasks};
use crate::mcp::{listing, result};

/// The `_meta` key of a grant token.
pub const CONFIRM_TOKEN_META: &str = "toolvisor/confirm_token";

/// The server's state: the daemon connection and where the workspace is.
#[derive(Clone)]
pub struct ToolvisorMcp {
    bridge: Arc<Bridge>,
    workspace: PathBuf,
    artifacts: ArtifactDir,
    /// Cancelled when the client's end of stdio closes.
    gone: CancellationToken,
    /// Calls waiting for a 2026-07-28 client's second round.
    rounds: Arc<Rounds>,
    /// The client's `logging/setLevel`.
    log_level: Arc<LogLevel>,
    /// Commands gone to the background, as MCP tasks (clients that declared them).
    tasks: Arc<Tasks>,
}

impl ToolvisorMcp {
    pub fn new(
        bridge: Arc<Bridge>,
        workspace: PathBuf,
        artifacts: ArtifactDir,
        gone: CancellationToken,
    ) -> Self {
        ToolvisorMcp {
            bridge,
            workspace,
            artifacts,
            gone,
            rounds: Arc::default(),
            log_level: Arc::default(),
            tasks: Arc::default(),
        }
    }

    /// Share the calls parked for a second round with other instances (over HTTP, a
    /// stateless client's second round reaches a new one).
    pub fn with_rounds(mut self, rounds: Arc<Rounds>) -> Self {
        self.rounds = rounds;
        self
    }

    /// A 2026-07-28 client is served statelessly, each request by an instance of its
    /// own: once the request is answered the instance's daemon connection is let go
    /// (a call parked for a second round keeps it until then), not kept for as long
    /// as the HTTP layer keeps the instance.
    async fn done_if_stateless(&self, rc: &RequestContext<RoleServer>) {
        let stateful = rc.protocol_version().is_none_or(|v| v.has_initialize());
        if !stateful {
            self.bridge.retire().await;
        }
    }

    /// Share the tasks with other instances (over HTTP, a stateless client's
    /// `tasks/get` reaches a new one).
    pub fn with_tasks(mut self, tasks: Arc<Tasks>) -> Self {
        self.tasks = tasks;
        self
    }

    /// A call whose command went on in the background, as a task the bridge follows
    /// to the command's end, when the client declared tasks.
    fn as_task(
        &self,
        rc: &RequestContext<RoleServer>,
        r: &toolvisor_protocol::message::ToolResult,
    ) -> Option<CallToolResponse> {
        let declared = rc.client_capabilities().is_some_and(|c| c.supports_tasks());
        let process = tasks::running_process(r).filter(|_| declared)?;
        let (id, cancel, created) = self.tasks.start(&process);
        let (bridge, workspace, level) = (
            self.bridge.clone(),
            self.workspace.clone(),
            self.log_level.clone(),
        );
        let (store, peer, gone, first) = (
            self.tasks.clone(),
            rc.peer.clone(),
            self.gone.clone(),
            r.content.clone(),
        );
        tokio::spawn(async move {
            let ctx = CallCtx {
                bridge: &bridge,
                peer,
                progress: None,
                channel: confirm::Channel::Wait,
                cancel: CancellationToken::new(),
                gone,
                workspace: &workspace,
                log_level: &level,
            };
            tasks::follow(store, ctx, id, process, first, cancel).await;
        });
        Some(CallToolResponse::Task(created))
    }

    fn ctx<'a>(&'a self, rc: &RequestContext<RoleServer>) -> CallCtx<'a> {
        CallCtx {
            bridge: &self.bridge,
            peer: rc.peer.clone(),
            progress: rc.meta.get_progress_token(),
            channel: confirm::channel(rc),
            cancel: rc.ct.clone(),
            gone: self.gone.clone(),
            workspace: &self.workspace,
            log_level: &self.log_level,
        }
    }

    /// One page of an MCP servers' list (`method`, items under `key`).
    async fn page<T: serde::de::DeserializeOwned>(
        &self,
        rc: &RequestContext<RoleServer>,
        method: &str,
        key: &str,
        request: Option<PaginatedRequestParams>,
    ) -> Result<T, ErrorData> {
        let tools = listing::request_tools(&self.bridge)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        let cursor = request.and_then(|r| r.cursor);
        let v = passthrough::page(&self.ctx(rc), &tools, method, key, cursor.as_deref())
            .await
            .map_err(|e| ask_error(e, ErrorData::invalid_params))?;
        shaped(v)
    }

    /// The first MCP server's answer to `method`.
    async fn first(
        &self,
        rc: &RequestContext<RoleServer>,
        method: &str,
        params: Value,
        not_found: fn(String, Option<Value>) -> ErrorData,
    ) -> Result<Value, ErrorData> {
        let tools = listing::request_tools(&self.bridge)
            .await
            .map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        passthrough::first(&self.ctx(rc), &tools, method, params)
            .await
            .map_err(|e| ask_error(e, not_found))
    }

    /// Tell a stateful client whenever the daemon says an MCP server's tools changed,
    /// or a resource it subscribed to did.
    fn forward_notices(&self, peer: rmcp::Peer<RoleServer>) {
        let mut notices = self.bridge.notices();
        // Weak: the bridge's notices end when it goes, and this task must not keep it.
        let bridge = Arc::downgrade(&self.bridge);
        tokio::spawn(async move {
            loop {
                let subscribed = |uri: &str| bridge.upgrade().is_some_and(|b| b.is_subscribed(uri));
                let sent = match notices.recv().await {
                    Ok(Notice::ToolsChanged) => peer.notify_tool_list_changed().await,
                    Ok(Notice::ResourceUpdated(uri)) if subscribed(&uri) => {
                        let p = ResourceUpdatedNotificationParam::new(uri);
                        peer.notify_resource_updated(p).await
                    }
                    Ok(Notice::ResourceUpdated(_)) => Ok(()),
                    // Behind: what was missed is gone; go on with what comes.
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => Ok(()),
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                };
                if sent.is_err() {
                    return;
                }
            }
        });
    }

    /// `resources/subscribe` or `resources/unsubscribe`, through the first MCP server
    /// that takes it.
    async fn subscription(
        &self,
        rc: &RequestContext<RoleServer>,
        method: &str,
        uri: &str,
    ) -> Result<(), ErrorData> {
        let params = serde_json::json!({"uri": uri});
        self.first(rc, method, params, ErrorData::resource_not_found)
            .await?;
        self.bridge
            .set_subscribed(uri, method == "resources/subscribe");
        Ok(())
    }
}

impl ServerHandler for ToolvisorMcp {
    fn get_info(&self) -> ServerConfig {
        #[allow(deprecated)]
        let capabilities = ServerCapabilities::builder()
            .enable_logging()
            .enable_completions()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .enable_tool_list_changed()
            .enable_tasks()
            .build();
        ServerConfig::new(capabilities)
            .with_server_info(
                Implementation::new("toolvisor", env!("CARGO_PKG_VERSION")).with_title("toolvisor"),
            )
            .with_instructions(format!(
                "Tools run in the workspace {} under toolvisor's policy, audited. A call that \
                 needs a person's approval asks through the client (elicitation) or waits for \
                 `toolvisor approve`. A truncated output links its full text as a resource.",
                self.workspace.display()
            ))
    }

    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        let relay = crate::mcp::relay::methods(&request);
        self.bridge
            .introduce(&request.client_info.name, relay)
            .await;
        context.peer.set_peer_info(request.clone());
        self.forward_notices(context.peer.clone());
        self.negotiate_initialize(&request)
    }

    /// Advertised with `logging`, so answered (MCP Inspector sets a level first thing).
    #[allow(deprecated)]
    async fn set_level(
        &self,
        request: SetLevelRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.log_level.set(request.level);
        Ok(())
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let tools = listing::list(&self.bridge).await;
        self.done_if_stateless(&context).await;
        let tools = tools.map_err(|e| ErrorData::internal_error(e.to_string(), None))?;
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = request.name.to_string();
        let args = Value::Object(request.arguments.unwrap_or_default());
        let ctx = self.ctx(&context);
        let step = match &request.request_state {
            // The second round of a 2026-07-28 call: the person's answer.
            Some(state) => match self.rounds.take(state, &tool, &args) {
                Ok(parked) => {
                    let confirm = rounds::confirm(&parked.ask, request.input_responses.as_ref());
                    match parked.route.send(&confirm).await {
                        Ok(()) => call::drive(&ctx, parked.route).await,
                        Err(e) => Err(CallError::Unavailable(e)),
                    }
                }
                Err(why) => return Ok(result::failure(&tool, "InvalidParams", &why).into()),
            },
            None => {
                let mut req = CallRequest::new("", tool.clone(), args.clone());
                req.confirm_token = context
                    .meta
                    .get(CONFIRM_TOKEN_META)
                    .and_then(Value::as_str)
                    .map(str::to_owned);
                call::start(&ctx, req).await
            }
        };
        self.done_if_stateless(&context).await;
        Ok(match step {
            Ok(Step::Done(r)) => match self.as_task(&context, &r) {
                Some(task) => task,
                None => result::to_mcp(&tool, &r).into(),
            },
            Ok(Step::NeedsInput(route, ask)) => match self.rounds.park(route, ask, &tool, &args) {
                Some(input) => input.into(),
                None => {
                    call_failure(&tool, CallError::Refused("cannot ask the person".into())).into()
                }
            },
            Err(e) => call_failure(&tool, e).into(),
        })
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        if !request.uri.starts_with(resources::PREFIX) {
            let params = serde_json::json!({"uri": request.uri});
            let v = self
                .first(
                    &context,
                    "resources/read",
                    params,
                    ErrorData::resource_not_found,
                )
                .await?;
            return Ok(shaped::<ReadResourceResult>(v)?.into());
        }
        let path = self
            .artifacts
            .path_of(&request.uri)
            .map_err(|e| ErrorData::resource_not_found(e.to_string(), None))?;
        let ctx = self.ctx(&context);
        let text = resources::read_all(&path, |req| {
            let ctx = &ctx;
            async move {
                call::run(ctx, req)
                    .await
                    .map_err(|e| ReadError::Failed(failure_text(e)))
            }
        })
        .await
        .map_err(|e| match e {
            ReadError::NotFound(m) => ErrorData::resource_not_found(m, None),
            ReadError::Failed(m) => ErrorData::internal_error(m, None),
        })?;
        let contents = ResourceContents::text(text, request.uri).with_mime_type("text/plain");
        Ok(ReadResourceResult::new(vec![contents]).into())
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscription(&context, "resources/subscribe", &request.uri)
            .await
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        self.subscription(&context, "resources/unsubscribe", &request.uri)
            .await
    }

    async fn get_task(
        &self,
        request: GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetTaskResult, ErrorData> {
        self.tasks
            .get(&request.task_id)
            .map(GetTaskResult::new)
            .ok_or_else(|| ErrorData::invalid_params(format!("no task {}", request.task_id), None))
    }

    async fn cancel_task(
        &self,
        request: CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        match self.tasks.cancel(&request.task_id) {
            true => Ok(()),
            false => Err(ErrorData::invalid_params(
                format!("no task {}", request.task_id),
                None,
            )),
        }
    }

    async fn list_resources(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        self.page(&context, "resources/list", "resources", request)
            .await
    }

    async fn list_resource_templates(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        let (method, key) = ("resources/templates/list", "resourceTemplates");
        self.page(&context, method, key, request).await
    }

    async fn list_prompts(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        self.page(&context, "prompts/list", "prompts", request)
            .await
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        let params = serde_json::to_value(&request)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let v = self
            .first(&context, "prompts/get", params, ErrorData::invalid_params)
            .await?;
        Ok(shaped::<GetPromptResult>(v)?.into())
    }

    async fn complete(
        &self,
        request: CompleteRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CompleteResult, ErrorData> {
        let params = serde_json::to_value(&request)
            .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
        let v = self
            .first(
                &context,
                "completion/complete",
                params,
                ErrorData::invalid_params,
            )
            .await?;
        shaped(v)
    }
}

/// An MCP result from the JSON a server answered.
fn shaped<T: serde::de::DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| {
        ErrorData::internal_error(format!("an MCP server's answer is malformed: {e}"), None)
    })
}

fn ask_error(e: AskError, not_found: fn(String, Option<Value>) -> ErrorData) -> ErrorData {
    match e {
        AskError::NotFound(m) => not_found(m, None),
        AskError::Failed(m) => ErrorData::internal_error(m, None),
    }
}

fn failure_text(e: CallError) -> String {
    match e {
        CallError::Unavailable(u) => u.to_string(),
        CallError::Cancelled => "the request was cancelled".into(),
        CallError::Refused(m) => format!("the daemon refused the call: {m}"),
    }
}

/// The `isError` result of a call that got no result from the daemon.
fn call_failure(tool: &str, e: CallError) -> CallToolResult {
    match e {
        CallError::Cancelled => result::failure(tool, "Cancelled", "the request was cancelled"),
        other => result::failure(tool, "InternalError", &failure_text(other)),
    }
}
