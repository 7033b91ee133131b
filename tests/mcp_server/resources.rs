//! `toolvisor-test-mcp-server --resources`: a server of resources and prompts for the
//! tests of what passes through the bridge: 10,000 resources in one page, a resource
//! larger than any message toolvisor takes (`test://huge`, `$TEST_MCP_HUGE_BYTES`
//! bytes, 64 MiB by default), a template, a prompt with an argument, a tool whose
//! name is too long for `NAME__TOOL` to fit in 64 characters, and `ping`, which logs
//! `pinged` (info) before it answers. Subscriptions are taken, and each
//! `subscribe URI` / `unsubscribe URI` written to `$TEST_MCP_LOG`.

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetPromptRequestParams, GetPromptResponse,
    Implementation, ListPromptsResult, ListResourceTemplatesResult, ListResourcesResult,
    ListToolsResult, PaginatedRequestParams, ReadResourceRequestParams, ReadResourceResponse,
    ServerCapabilities, ServerConfig, SubscribeRequestParams, UnsubscribeRequestParams,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

/// How many resources the server lists (in one page).
pub const MANY: usize = 10_000;
/// The tool whose name is long.
pub const LONG_TOOL: &str =
    "a_tool_whose_name_is_long_enough_that_with_its_server_prefix_it_passes_64";

#[derive(Clone, Default)]
pub struct ResourceServer;

/// `subscribe URI` or `unsubscribe URI`, a line appended to `$TEST_MCP_LOG` (if set).
fn note_subscription(what: &str, uri: &str) {
    let Some(path) = std::env::var_os("TEST_MCP_LOG") else {
        return;
    };
    let old = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::write(&path, format!("{old}{what} {uri}\n"));
}

fn shaped<T: DeserializeOwned>(v: Value) -> Result<T, ErrorData> {
    serde_json::from_value(v).map_err(|e| ErrorData::internal_error(e.to_string(), None))
}

impl ServerHandler for ResourceServer {
    fn get_info(&self) -> ServerConfig {
        let caps = ServerCapabilities::builder()
            .enable_prompts()
            .enable_resources()
            .enable_resources_subscribe()
            .enable_tools()
            .build();
        ServerConfig::new(caps)
            .with_server_info(Implementation::new("toolvisor-test-resources", "1.0.0"))
    }

    async fn list_tools(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let schema = json!({"type": "object", "properties": {}});
        shaped(json!({"tools": [
            {"name": LONG_TOOL, "description": "long", "inputSchema": schema},
            {"name": "ping", "description": "pong", "inputSchema": schema}
        ]}))
    }

    async fn subscribe(
        &self,
        request: SubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        note_subscription("subscribe", &request.uri);
        Ok(())
    }

    async fn unsubscribe(
        &self,
        request: UnsubscribeRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<(), ErrorData> {
        note_subscription("unsubscribe", &request.uri);
        Ok(())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        if request.name == "ping" {
            #[allow(deprecated)] // Log messages: what older servers send.
            let param = rmcp::model::LoggingMessageNotificationParam::new(
                rmcp::model::LoggingLevel::Info,
                json!("pinged"),
            );
            #[allow(deprecated)]
            let _ = context.peer.notify_logging_message(param).await;
        }
        let said = format!("called {}", request.name);
        let r: rmcp::model::CallToolResult =
            shaped(json!({"content": [{"type": "text", "text": said}]}))?;
        Ok(r.into())
    }

    async fn list_resources(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, ErrorData> {
        let mut all: Vec<Value> = (0..MANY)
            .map(|i| json!({"uri": format!("test://many/{i}"), "name": format!("many {i}")}))
            .collect();
        all.push(json!({"uri": "test://huge", "name": "huge"}));
        shaped(json!({ "resources": all }))
    }

    async fn list_resource_templates(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, ErrorData> {
        shaped(json!({"resourceTemplates": [{"uriTemplate": "test://many/{i}", "name": "many"}]}))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, ErrorData> {
        let text = match request.uri.as_str() {
            "test://huge" => {
                let n = std::env::var("TEST_MCP_HUGE_BYTES")
                    .ok()
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(64usize << 20);
                "x".repeat(n)
            }
            uri if uri.starts_with("test://many/") => format!("resource {uri}"),
            uri => return Err(ErrorData::resource_not_found(format!("no {uri}"), None)),
        };
        let r: rmcp::model::ReadResourceResult =
            shaped(json!({"contents": [{"uri": request.uri, "text": text}]}))?;
        Ok(r.into())
    }

    async fn list_prompts(
        &self,
        _r: Option<PaginatedRequestParams>,
        _c: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, ErrorData> {
        shaped(
            json!({"prompts": [{"name": "greet", "description": "Greets",
            "arguments": [{"name": "who", "required": true}]}]}),
        )
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _c: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, ErrorData> {
        if request.name != "greet" {
            return Err(ErrorData::invalid_params("no such prompt", None));
        }
        let who = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("who"))
            .and_then(Value::as_str)
            .unwrap_or("nobody");
        let r: rmcp::model::GetPromptResult = shaped(json!({"messages": [
            {"role": "user", "content": {"type": "text", "text": format!("Hello, {who}")}}]}))?;
        Ok(r.into())
    }
}
