//! The tools of the test MCP server (built with rmcp): the binary
//! `toolvisor-test-mcp-server` serves them on stdio, the end-to-end tests also over
//! Streamable HTTP. Each exercises one thing toolvisor must handle: plain and typed
//! results, the server's own environment, `isError`, a crash, a hang (cancellation is
//! written to `$TEST_MCP_LOG`), a result that breaks its own `outputSchema`, a
//! destructive tool, `list_changed`, a flood of notifications, a tool whose schema
//! does not compile, content of every kind with typed structuredContent (`rich`: it
//! answers what it is given), progress with totals and messages (`steps`), and a flood of stderr (`shout`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ProgressNotificationParam, ServerCapabilities,
    ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{Map, Value, json};

/// The test server; `extra` is offered once `add_tool` was called.
#[derive(Clone, Default)]
pub struct TestServer {
    extra: Arc<AtomicBool>,
}

fn object(v: Value) -> Arc<Map<String, Value>> {
    match v {
        Value::Object(m) => Arc::new(m),
        _ => Arc::default(),
    }
}

fn tool(name: &'static str, description: &'static str, schema: Value) -> Tool {
    Tool::new(name, description, object(schema))
}

fn props(p: Value, required: &[&str]) -> Value {
    json!({"type": "object", "properties": p, "required": required})
}

impl TestServer {
    fn tools(&self) -> Vec<Tool> {
        let typed = object(props(json!({"sum": {"type": "integer"}}), &["sum"]));
        let mut tools = vec![
            tool(
                "echo",
                "Say the text back",
                props(json!({"text": {"type": "string"}}), &["text"]),
            )
            .with_title("Echo")
            .with_annotations(ToolAnnotations::new().read_only(true)),
            tool(
                "add",
                "Add two integers",
                props(
                    json!({"a": {"type": "integer"}, "b": {"type": "integer"}}),
                    &["a", "b"],
                ),
            )
            .with_raw_output_schema(typed.clone()),
            tool(
                "lie",
                "Returns a result that breaks its own outputSchema",
                props(json!({}), &[]),
            )
            .with_raw_output_schema(typed),
            tool(
                "env",
                "Print an environment variable of the server",
                props(json!({"name": {"type": "string"}}), &["name"]),
            ),
            tool("fail", "Always reports an error", props(json!({}), &[])),
            tool("crash", "Exits the server process", props(json!({}), &[])),
            tool(
                "sleep",
                "Sleep ms milliseconds (cancellable)",
                props(json!({"ms": {"type": "integer"}}), &["ms"]),
            ),
            tool(
                "delete_everything",
                "A destructive tool",
                props(json!({}), &[]),
            )
            .with_annotations(ToolAnnotations::new().destructive(true)),
            tool(
                "add_tool",
                "Offer the tool `extra` too and say the list changed",
                props(json!({}), &[]),
            ),
            tool(
                "flood",
                "Send n list_changed and n progress notifications at once",
                props(json!({"n": {"type": "integer"}}), &["n"]),
            ),
            tool(
                "big",
                "Return n bytes of text (twice: in structuredContent too)",
                props(
                    json!({"n": {"type": "integer"}, "twice": {"type": "boolean"}}),
                    &["n"],
                ),
            ),
            tool(
                "rich",
                "Answer `content` (MCP content items) and `structured` as they are given, and an image of `image_bytes` bytes of base64 after them",
                props(
                    json!({"content": {"type": "array"}, "structured": {"type": "object"}, "image_bytes": {"type": "integer"}}),
                    &["content", "structured"],
                ),
            )
            .with_raw_output_schema(object(props(
                json!({"label": {"type": "string"}, "n": {"type": "integer"}}),
                &["label"],
            ))),
            tool(
                "steps",
                "Send n progress notifications (progress i+1 of total n, message `step i+1`)",
                props(json!({"n": {"type": "integer"}}), &["n"]),
            ),
            tool(
                "shout",
                "Write n lines of `shout-line` and bytes characters to stderr",
                props(
                    json!({"n": {"type": "integer"}, "bytes": {"type": "integer"}}),
                    &["n", "bytes"],
                ),
            ),
            tool(
                "bad.schema",
                "Its inputSchema does not compile",
                json!({"type": "nonsense"}),
            ),
        ];
        if self.extra.load(Ordering::SeqCst) {
            tools.push(tool("extra", "Added at run time", props(json!({}), &[])));
        }
        tools
    }
}

fn text(t: impl Into<String>) -> CallToolResult {
    CallToolResult::success(vec![ContentBlock::text(t)])
}

fn log(line: &str) {
    use std::io::Write;
    if let Some(path) = std::env::var_os("TEST_MCP_LOG")
        && let Ok(mut f) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
    {
        let _ = writeln!(f, "{line}");
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("toolvisor-test-mcp-server", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let args = request.arguments.unwrap_or_default();
        let int = |k: &str| args.get(k).and_then(Value::as_i64).unwrap_or(0);
        let string = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
        let result = match request.name.as_ref() {
            "echo" => text(string("text")),
            "add" => {
                let sum = int("a") + int("b");
                let mut r = text(sum.to_string());
                r.structured_content = Some(json!({"sum": sum}));
                r
            }
            "lie" => {
                let mut r = text("a lie");
                r.structured_content = Some(json!({"sum": "not a number"}));
                r
            }
            "env" => text(std::env::var(string("name")).unwrap_or_else(|_| "<unset>".into())),
            "fail" => CallToolResult::error(vec![ContentBlock::text(
                "it failed on purpose\nsecond line",
            )]),
            "crash" => {
                log("crash");
                std::process::exit(3)
            }
            "sleep" => {
                log("sleep started");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(int("ms").max(0) as u64)) => text("slept"),
                    _ = context.ct.cancelled() => {
                        log("sleep cancelled");
                        text("cancelled")
                    }
                }
            }
            "delete_everything" => text("deleted nothing, this is a test"),
            "add_tool" => {
                self.extra.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text("added")
            }
            "flood" => {
                let token = context.meta.get_progress_token();
                for i in 0..int("n") {
                    let _ = context.peer.notify_tool_list_changed().await;
                    if let Some(t) = &token {
                        let _ = context
                            .peer
                            .notify_progress(ProgressNotificationParam::new(t.clone(), i as f64))
                            .await;
                    }
                }
                text("flooded")
            }
            "big" => {
                let body = "z".repeat(int("n").max(0) as usize);
                let mut r = text(body.clone());
                if args.get("twice").and_then(Value::as_bool) == Some(true) {
                    r.structured_content = Some(json!({"text": body}));
                }
                r
            }
            "rich" => {
                let items = args.get("content").cloned().unwrap_or_default();
                let mut content: Vec<ContentBlock> = serde_json::from_value(items)
                    .map_err(|e| ErrorData::invalid_params(e.to_string(), None))?;
                let n = int("image_bytes");
                if n > 0 {
                    content.push(ContentBlock::image("A".repeat(n as usize), "image/png"));
                }
                let mut r = CallToolResult::success(content);
                r.structured_content = args.get("structured").cloned();
                r
            }
            "shout" => {
                use std::io::Write;
                let line = format!("shout-line {}\n", "s".repeat(int("bytes").max(0) as usize));
                let mut err = std::io::stderr().lock();
                for _ in 0..int("n") {
                    let _ = err.write_all(line.as_bytes());
                }
                let _ = err.flush();
                text("shouted")
            }
            "steps" => {
                let n = int("n");
                if let Some(t) = context.meta.get_progress_token() {
                    for i in 0..n {
                        let mut p = ProgressNotificationParam::new(t.clone(), (i + 1) as f64);
                        p.total = Some(n as f64);
                        p.message = Some(format!("step {}", i + 1));
                        let _ = context.peer.notify_progress(p).await;
                    }
                }
                text(format!("{n} steps"))
            }
            "extra" => text("extra"),
            other => return Err(ErrorData::invalid_params(format!("no tool {other}"), None)),
        };
        Ok(result.into())
    }
}
