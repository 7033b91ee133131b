//! An MCP client written against rmcp for the end-to-end tests: it starts `toolvisor
//! mcp`, records what the bridge tells it (progress, log messages, elicitations,
//! `tools/list_changed`), and answers elicitations the way a test asks.

// Log notifications are deprecated from 2026-07-28 on; the bridge sends them to older
// clients, which this one plays.
#![allow(deprecated)]

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientCapabilities, ClientConfig,
    CreateMessageRequestParams, CreateMessageResult, ElicitRequestParams, ElicitResult,
    ElicitationAction, Implementation, LoggingMessageNotificationParam, ProgressNotificationParam,
    ProtocolVersion,
};
use rmcp::service::{
    ClientLifecycleMode, NotificationContext, RequestContext, RunningService,
    serve_client_with_lifecycle,
};
use rmcp::{ClientHandler, ErrorData, RoleClient, ServiceExt};
use serde_json::{Map, Value, json};

use crate::harness::{BIN, Server, block, test_mcp_server};

/// How the client answers an elicitation (`None` in [`TestClient`]: it cannot be asked).
#[derive(Clone, Copy, Debug)]
pub enum Answer {
    Approve { session: bool },
    Reject,
    Decline,
    Cancel,
}

/// A progress notification's `progress`, `total` and `message`.
pub type ProgressSeen = (f64, Option<f64>, Option<String>);

/// What the bridge told the client.
#[derive(Default)]
pub struct Seen {
    pub progress: Mutex<Vec<String>>,
    /// Each progress notification's `progress`, `total` and `message`.
    pub progress_values: Mutex<Vec<ProgressSeen>>,
    pub logs: Mutex<Vec<String>>,
    pub elicitations: Mutex<Vec<String>>,
    /// The text of each sampling request's first message.
    pub samplings: Mutex<Vec<String>>,
    /// The URI of each `notifications/resources/updated`.
    pub updated: Mutex<Vec<String>>,
    pub list_changed: AtomicUsize,
    changed: tokio::sync::Notify,
}

impl Seen {
    fn tick(&self) {
        self.changed.notify_waiters();
    }

    /// Wait until `test` holds, or panic past `deadline`.
    pub async fn wait(&self, what: &str, deadline: Duration, test: impl Fn(&Seen) -> bool) {
        let end = Instant::now() + deadline;
        loop {
            let notified = self.changed.notified();
            if test(self) {
                return;
            }
            if tokio::time::timeout_at(end.into(), notified).await.is_err() {
                panic!("{what} did not happen within {deadline:?}");
            }
        }
    }

    pub fn progress(&self) -> Vec<String> {
        self.progress.lock().unwrap().clone()
    }

    pub fn elicitations(&self) -> Vec<String> {
        self.elicitations.lock().unwrap().clone()
    }
}

/// The test's MCP client.
#[derive(Clone)]
pub struct TestClient {
    pub answer: Option<Answer>,
    /// What the client's "model" answers a sampling request (None: it declares no
    /// sampling).
    pub sampling: Option<String>,
    /// Declare the tasks extension.
    pub tasks: bool,
    pub version: ProtocolVersion,
    pub seen: Arc<Seen>,
}

impl TestClient {
    pub fn new(answer: Option<Answer>) -> TestClient {
        TestClient {
            answer,
            sampling: None,
            tasks: false,
            version: ProtocolVersion::default(),
            seen: Arc::default(),
        }
    }
}

impl ClientHandler for TestClient {
    fn get_info(&self) -> ClientConfig {
        let mut caps = match self.answer {
            Some(_) => json!({"elicitation": {"form": {}}}),
            None => json!({}),
        };
        if self.sampling.is_some() {
            caps["sampling"] = json!({});
        }
        if self.tasks {
            caps["extensions"] = json!({rmcp::model::TASKS_EXTENSION_ID: {}});
        }
        let caps: ClientCapabilities = serde_json::from_value(caps).unwrap();
        ClientConfig::new(caps, Implementation::new("e2e-mcp-client", "1.0"))
            .with_protocol_version(self.version.clone())
    }

    async fn create_elicitation(
        &self,
        request: ElicitRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<ElicitResult, ErrorData> {
        if let ElicitRequestParams::FormElicitationParams { message, .. } = &request {
            self.seen.elicitations.lock().unwrap().push(message.clone());
        }
        self.seen.tick();
        Ok(match self.answer {
            Some(Answer::Approve { session }) => ElicitResult::new(ElicitationAction::Accept)
                .with_content(
                    json!({"approve": true, "remember": if session { "session" } else { "once" }}),
                ),
            Some(Answer::Reject) => {
                ElicitResult::new(ElicitationAction::Accept).with_content(json!({"approve": false}))
            }
            Some(Answer::Cancel) => ElicitResult::new(ElicitationAction::Cancel),
            Some(Answer::Decline) | None => ElicitResult::new(ElicitationAction::Decline),
        })
    }

    async fn create_message(
        &self,
        params: CreateMessageRequestParams,
        _context: RequestContext<RoleClient>,
    ) -> Result<CreateMessageResult, ErrorData> {
        let asked = serde_json::to_value(&params.messages).unwrap_or_default();
        let text = asked[0]["content"]["text"].as_str().unwrap_or_default();
        self.seen.samplings.lock().unwrap().push(text.to_owned());
        self.seen.tick();
        let said = self.sampling.clone().unwrap_or_default();
        serde_json::from_value(json!({"role": "assistant", "model": "e2e-model",
            "content": {"type": "text", "text": said}, "stopReason": "endTurn"}))
        .map_err(|e| ErrorData::internal_error(e.to_string(), None))
    }

    async fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.seen.progress_values.lock().unwrap().push((
            params.progress,
            params.total,
            params.message.clone(),
        ));
        let m = params.message.unwrap_or_default();
        self.seen.progress.lock().unwrap().push(m);
        self.seen.tick();
    }

    #[allow(deprecated)]
    async fn on_logging_message(
        &self,
        params: LoggingMessageNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        let text = params
            .data
            .as_str()
            .map_or(params.data.to_string(), str::to_owned);
        self.seen.logs.lock().unwrap().push(text);
        self.seen.tick();
    }

    async fn on_resource_updated(
        &self,
        params: rmcp::model::ResourceUpdatedNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) {
        self.seen.updated.lock().unwrap().push(params.uri);
        self.seen.tick();
    }

    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.seen.list_changed.fetch_add(1, Ordering::SeqCst);
        self.seen.tick();
    }
}

/// `toolvisor mcp` and the client session with it.
pub struct Mcp {
    pub child: tokio::process::Child,
    pub service: RunningService<RoleClient, TestClient>,
    pub seen: Arc<Seen>,
}

/// Start `toolvisor mcp --workspace WS ARGS…` and initialize a session with `client`.
pub async fn start(ws: &Path, args: &[&str], client: TestClient) -> Mcp {
    start_with(ws, args, client, None).await
}

/// Like [`start`], with `server/discover` (2026-07-28) instead of `initialize` when
/// `discover` names the versions to prefer.
pub async fn start_with(
    ws: &Path,
    args: &[&str],
    client: TestClient,
    discover: Option<Vec<ProtocolVersion>>,
) -> Mcp {
    let mut child = tokio::process::Command::new(BIN)
        .arg("mcp")
        .arg("--workspace")
        .arg(ws)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn toolvisor mcp");
    let stdout = child.stdout.take().expect("stdout");
    let stdin = child.stdin.take().expect("stdin");
    let seen = client.seen.clone();
    let service = match discover {
        None => client.serve((stdout, stdin)).await,
        Some(preferred_versions) => {
            let mode = ClientLifecycleMode::Discover { preferred_versions };
            serve_client_with_lifecycle(client, (stdout, stdin), mode).await
        }
    }
    .expect("MCP session with toolvisor mcp");
    Mcp {
        child,
        service,
        seen,
    }
}

impl Mcp {
    /// Call a tool.
    pub async fn call(&self, name: &str, args: Value) -> CallToolResult {
        self.call_meta(name, args, Map::new()).await
    }

    /// Call a tool with extra `_meta` entries.
    pub async fn call_meta(
        &self,
        name: &str,
        args: Value,
        meta: Map<String, Value>,
    ) -> CallToolResult {
        let mut params = CallToolRequestParams::new(name.to_owned())
            .with_arguments(args.as_object().cloned().unwrap_or_default());
        if !meta.is_empty() {
            let mut m = rmcp::model::RequestMetaObject::new();
            for (k, v) in meta {
                m.insert(k, v);
            }
            params.meta = Some(m);
        }
        self.service.call_tool(params).await.expect("tools/call")
    }

    /// End the session (stdin closes) and wait for `toolvisor mcp` to exit.
    pub async fn close(mut self) -> std::process::ExitStatus {
        let _ = self.service.close().await;
        tokio::time::timeout(Duration::from_secs(40), self.child.wait())
            .await
            .expect("toolvisor mcp exits after its client")
            .expect("wait")
    }
}

/// The text of a result's first content item.
pub fn text(r: &CallToolResult) -> String {
    r.content
        .first()
        .and_then(|c| c.as_text())
        .map(|t| t.text.clone())
        .unwrap_or_default()
}

/// Every result's `structuredContent` fits the tool's `outputSchema`.
pub fn assert_fits(tool: &rmcp::model::Tool, r: &rmcp::model::CallToolResult) {
    let schema = Value::Object((*tool.output_schema.clone().expect("outputSchema")).clone());
    let v = jsonschema::validator_for(&schema).expect("the outputSchema compiles");
    let s = structured(r);
    let errors: Vec<String> = v.iter_errors(&s).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{s} breaks the outputSchema: {errors:?}");
}

/// The `structuredContent` of a result.
pub fn structured(r: &CallToolResult) -> Value {
    r.structured_content.clone().unwrap_or(Value::Null)
}

/// A config with the test MCP server as `[mcp.servers.NAME]`, plus `extra` lines.
pub fn with_server(name: &str, args: &[&str], extra: &str) -> String {
    let argv: Vec<String> = std::iter::once(test_mcp_server())
        .chain(args.iter().copied())
        .map(|a| format!("{a:?}"))
        .collect();
    format!(
        "[mcp.servers.{name}]\ncommand = [{}]\n{extra}\n",
        argv.join(", ")
    )
}

/// The native listing of the daemon now.
pub async fn listing(s: &Server) -> Vec<Value> {
    let mut c = s.client().await;
    let ask = toolvisor_protocol::ClientMessage::ListTools {
        id: "l".into(),
        format: None,
        groups: None,
    };
    match c.request(&ask, &"l".into()).await.unwrap() {
        toolvisor_protocol::ServerMessage::Tools { tools, .. } => tools,
        other => panic!("{other:?}"),
    }
}

/// [`Server::start`], then wait until every one of `tools` is listed: an MCP server's
/// worker says `ready` with its tools, and the registry takes them a moment later.
pub fn start_with_tools(config: &str, tools: &[&str]) -> Server {
    let s = Server::start(config);
    block(Duration::from_secs(60), wait_listed(&s, tools));
    s
}

/// Wait until every one of `tools` is listed.
pub async fn wait_listed(s: &Server, tools: &[&str]) {
    let end = Instant::now() + Duration::from_secs(60);
    loop {
        let listed = listing(s).await;
        let has = |n: &&str| listed.iter().any(|t| t["name"] == **n);
        if tools.iter().all(has) {
            return;
        }
        assert!(Instant::now() < end, "{tools:?} not all listed in time");
        // Joining the registry has no event a test can wait on without racing it (the
        // worker may have announced before the test subscribed): look again.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
