//! `toolvisor mcp`: an MCP server on stdio (newline-delimited JSON-RPC 2.0) backed by
//! the daemon, so MCP hosts get toolvisor's tools with its policy, audit and workers.
//!
//! Each `tools/call` runs on its own connection to the daemon (a connect and a hello
//! cost about as much as a ping), so calls run concurrently and a
//! `notifications/cancelled` cancels exactly one of them. The session is not
//! interactive: a call that needs a confirmation is answered with the daemon's
//! explanation of how to allow it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{
    CallRequest, ClientMessage, ServerMessage, Status, ToolFormat, ToolResult,
};

/// The MCP revision this bridge speaks when the client offers none we know.
const MCP_VERSION: &str = "2025-06-18";
const KNOWN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18"];

type Calls = Arc<Mutex<HashMap<String, CancellationToken>>>;

/// Run the bridge until stdin closes; returns the exit code.
pub fn run(socket: PathBuf) -> i32 {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolvisor mcp: {e}");
            return 70;
        }
    };
    rt.block_on(serve(socket))
}

async fn serve(socket: PathBuf) -> i32 {
    let (tx, mut rx) = mpsc::channel::<Value>(256);
    let writer = tokio::spawn(async move {
        let mut out = tokio::io::stdout();
        while let Some(msg) = rx.recv().await {
            let mut line = msg.to_string();
            line.push('\n');
            if out.write_all(line.as_bytes()).await.is_err() || out.flush().await.is_err() {
                return;
            }
        }
    });
    let calls: Calls = Arc::default();
    let mut lines = BufReader::new(tokio::io::stdin()).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        match serde_json::from_str::<Value>(&line) {
            Ok(msg) => handle(msg, &socket, &tx, &calls),
            Err(e) => {
                let _ = tx
                    .send(error_reply(
                        Value::Null,
                        -32700,
                        &format!("parse error: {e}"),
                    ))
                    .await;
            }
        }
    }
    for token in calls.lock().unwrap_or_else(|p| p.into_inner()).values() {
        token.cancel();
    }
    drop(tx);
    let _ = writer.await;
    0
}

fn handle(msg: Value, socket: &Path, tx: &mpsc::Sender<Value>, calls: &Calls) {
    let method = msg
        .get("method")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let id = msg.get("id").cloned();
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    let Some(id) = id else {
        // A notification: only cancellation needs doing.
        if method == "notifications/cancelled"
            && let Some(req) = params.get("requestId")
            && let Some(token) = calls
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&req.to_string())
        {
            token.cancel();
        }
        return;
    };
    let (socket, tx, calls) = (socket.to_owned(), tx.clone(), calls.clone());
    tokio::spawn(async move {
        let reply = match method.as_str() {
            "initialize" => Ok(initialize(&params)),
            "ping" => Ok(json!({})),
            "tools/list" => list_tools(&socket).await,
            "tools/call" => call_tool(&socket, &id, &params, &calls).await,
            other => Err((-32601, format!("method not found: {other}"))),
        };
        let msg = match reply {
            Ok(result) => json!({"jsonrpc": "2.0", "id": id, "result": result}),
            Err((code, message)) => error_reply(id, code, &message),
        };
        let _ = tx.send(msg).await;
    });
}

fn error_reply(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

fn initialize(params: &Value) -> Value {
    let asked = params
        .get("protocolVersion")
        .and_then(Value::as_str)
        .unwrap_or(MCP_VERSION);
    let version = if KNOWN_VERSIONS.contains(&asked) {
        asked
    } else {
        MCP_VERSION
    };
    json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": false}},
        "serverInfo": {"name": "toolvisor", "version": env!("CARGO_PKG_VERSION")},
        "instructions": "Tools run in the workspace of a toolvisor daemon, under its policy; calls that need a person's confirmation explain how to allow them."
    })
}

async fn connect(socket: &Path) -> Result<Client, (i64, String)> {
    Client::connect(socket, "toolvisor-mcp", false)
        .await
        .map_err(|e| (-32603, format!("toolvisor daemon: {e}")))
}

async fn list_tools(socket: &Path) -> Result<Value, (i64, String)> {
    let mut c = connect(socket).await?;
    let id = "tools".into();
    let msg = ClientMessage::ListTools {
        id: "tools".into(),
        format: Some(ToolFormat::Mcp),
        groups: None,
    };
    match c
        .request(&msg, &id)
        .await
        .map_err(|e| (-32603, e.to_string()))?
    {
        ServerMessage::Tools { tools, .. } => Ok(json!({"tools": tools})),
        other => Err((-32603, format!("unexpected answer: {other:?}"))),
    }
}

async fn call_tool(
    socket: &Path,
    rpc_id: &Value,
    params: &Value,
    calls: &Calls,
) -> Result<Value, (i64, String)> {
    let name = params
        .get("name")
        .and_then(Value::as_str)
        .ok_or((-32602, "tools/call needs a `name`".to_owned()))?;
    let args = params
        .get("arguments")
        .cloned()
        .unwrap_or_else(|| json!({}));
    let mut c = connect(socket).await?;
    let token = CancellationToken::new();
    let key = rpc_id.to_string();
    calls
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone(), token.clone());
    let req = CallRequest::new("mcp", name, args);
    let result = run_cancellable(&mut c, req, &token).await;
    calls.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
    let r = result.map_err(|e| (-32603, e.to_string()))?;
    Ok(to_mcp(&r))
}

/// Run a call; if `token` fires first, send `cancel` and wait for the result.
async fn run_cancellable(
    c: &mut Client,
    req: CallRequest,
    token: &CancellationToken,
) -> Result<ToolResult, toolvisor_protocol::client::ClientError> {
    let id = req.id.clone();
    c.send(&ClientMessage::Call(req)).await?;
    let pick =
        |m: &ServerMessage| matches!(m, ServerMessage::Result(r) if r.id == id).then_some(());
    let got = tokio::select! {
        r = c.recv_matching(pick) => Some(r?),
        _ = token.cancelled() => None,
    };
    let (_, m) = match got {
        Some(x) => x,
        None => {
            c.send(&ClientMessage::Cancel { id: id.clone() }).await?;
            c.recv_matching(pick).await?
        }
    };
    match m {
        ServerMessage::Result(r) => Ok(r),
        other => Err(toolvisor_protocol::client::ClientError::Unexpected(
            Box::new(other),
        )),
    }
}

/// A toolvisor result as an MCP `CallToolResult`.
fn to_mcp(r: &ToolResult) -> Value {
    let mut text = r.content.clone();
    if r.status != Status::Ok && text.is_empty() {
        text = r
            .error
            .as_ref()
            .map(|e| format!("{}: {}", e.kind, e.message))
            .unwrap_or_default();
    }
    json!({
        "content": [{"type": "text", "text": text}],
        "isError": r.status != Status::Ok,
        "_meta": {"toolvisor": {"status": r.status, "error": r.error, "truncated": r.truncated, "meta": r.meta, "audit_seq": r.audit_seq}},
    })
}
