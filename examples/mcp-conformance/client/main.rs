//! `toolvisor-conformance-client URL`: toolvisor as the MCP *client* of the conformance
//! suite's client scenarios (`conformance client --command …`). The suite starts a
//! test server at URL and names the scenario in `MCP_CONFORMANCE_SCENARIO`; this
//! program mounts that server in a fresh workspace (`[mcp.servers.conformance] url =
//! URL`), starts `toolvisor serve` on it, so the server's client is toolvisor's MCP
//! worker, and then, as a native client of the daemon, does what the scenario asks of a
//! client: list the tools (`initialize`), call one (`tools_call`, `sse-retry`), or call
//! one and answer the server's elicitation with the form's defaults
//! (`elicitation-sep1034-client-defaults`, which the daemon relays to this client).
//! It stops the daemon before it exits. `TOOLVISOR` names the binary (default: the
//! `toolvisor` next to this program's directory).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolvisor_protocol::Id;
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, ToolFormat};

/// How long the daemon has to start, and the scenario to run.
const DEADLINE: Duration = Duration::from_secs(25);
const ELICITATION: &str = "elicitation/create";

fn main() {
    let code = match run() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("toolvisor-conformance-client: {e}");
            1
        }
    };
    std::process::exit(code);
}

fn run() -> Result<(), String> {
    let url = std::env::args()
        .nth(1)
        .ok_or("usage: toolvisor-conformance-client URL")?;
    let scenario = std::env::var("MCP_CONFORMANCE_SCENARIO").unwrap_or_default();
    let ws = tempfile::tempdir().map_err(|e| e.to_string())?;
    let config = format!(
        "[mcp.servers.conformance]\nurl = {url:?}\nprefix = \"\"\nrisk = \"low\"\n\
         [[policy.rules]]\ntool = \"*\"\naction = \"allow\"\n"
    );
    std::fs::write(ws.path().join("toolvisor.toml"), config).map_err(|e| e.to_string())?;
    let mut daemon = serve(ws.path())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    let socket = ws.path().join(".toolvisor/toolvisor.sock");
    let done = rt.block_on(async {
        tokio::time::timeout(DEADLINE, act(&socket, &scenario))
            .await
            .unwrap_or_else(|_| Err(format!("{scenario} did not finish within {DEADLINE:?}")))
    });
    stop(&mut daemon);
    done
}

/// Start `toolvisor serve` on `ws`; return once it serves.
fn serve(ws: &Path) -> Result<Child, String> {
    let mut child = Command::new(toolvisor())
        .arg("serve")
        .arg("--workspace")
        .arg(ws)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start toolvisor: {e}"))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("serving") {
                let _ = tx.send(());
            }
            eprintln!("{line}");
        }
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(()) => Ok(child),
        Err(_) => {
            stop(&mut child);
            Err("toolvisor serve did not start".into())
        }
    }
}

fn toolvisor() -> PathBuf {
    if let Some(p) = std::env::var_os("TOOLVISOR") {
        return p.into();
    }
    let me = std::env::current_exe().unwrap_or_default();
    let dir = me.parent().and_then(Path::parent).unwrap_or(Path::new("."));
    dir.join("toolvisor")
}

fn stop(child: &mut Child) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    );
    let _ = child.wait();
}

/// What the scenario asks of the client, through the daemon.
async fn act(socket: &Path, scenario: &str) -> Result<(), String> {
    let relay = vec![ELICITATION.to_owned()];
    let mut c = Client::connect_relaying(socket, "conformance-client", false, relay)
        .await
        .map_err(|e| e.to_string())?;
    let (tool, args) = match scenario {
        "tools_call" => ("add_numbers", json!({"a": 5, "b": 3})),
        "sse-retry" => ("test_reconnection", json!({})),
        "elicitation-sep1034-client-defaults" => ("test_client_elicitation_defaults", json!({})),
        // `initialize` and anything else: the server is initialized and listed.
        _ => {
            listed(&mut c, None).await?;
            return Ok(());
        }
    };
    listed(&mut c, Some(tool)).await?;
    call(&mut c, tool, args).await
}

/// Wait until the daemon lists the server's tool `tool` (or the server's worker is
/// ready, when `tool` is None).
async fn listed(c: &mut Client, tool: Option<&str>) -> Result<(), String> {
    loop {
        let id = Id::Str("list".into());
        let tools_msg = ClientMessage::ListTools {
            id: id.clone(),
            format: Some(ToolFormat::Native),
            groups: Some(vec!["mcp:conformance".into()]),
        };
        c.send(&tools_msg).await.map_err(|e| e.to_string())?;
        let (tools, _) = c
            .recv_matching(|m| match m {
                ServerMessage::Tools { tools, .. } => Some(tools.clone()),
                _ => None,
            })
            .await
            .map_err(|e| e.to_string())?;
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        let ready = match tool {
            Some(t) => names.contains(&t),
            None => worker_ready(c).await?,
        };
        if ready {
            return Ok(());
        }
        // The worker announces its tools a moment after it starts; nothing to wait on
        // from here but asking again.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether the MCP server's worker said `ready` (it has then initialized the server).
async fn worker_ready(c: &mut Client) -> Result<bool, String> {
    c.send(&ClientMessage::Status {
        id: Id::Str("status".into()),
    })
    .await
    .map_err(|e| e.to_string())?;
    let (workers, _) = c
        .recv_matching(|m| match m {
            ServerMessage::Status { workers, .. } => Some(workers.clone()),
            _ => None,
        })
        .await
        .map_err(|e| e.to_string())?;
    Ok(workers
        .iter()
        .any(|w| w.group == "mcp:conformance" && w.state == "ready"))
}

/// Call `tool`, answering the server's elicitations with their defaults.
async fn call(c: &mut Client, tool: &str, args: Value) -> Result<(), String> {
    let req = CallRequest::new("c1", tool, args);
    c.send(&ClientMessage::Call(req))
        .await
        .map_err(|e| e.to_string())?;
    loop {
        let m = c.recv().await.map_err(|e| e.to_string())?;
        match m {
            ServerMessage::Result(r) => {
                eprintln!("{tool}: {:?}: {}", r.status, r.content);
                return Ok(());
            }
            ServerMessage::RelayRequest {
                request, params, ..
            } => {
                let answer = ClientMessage::RelayAnswer {
                    request,
                    result: Some(json!({"action": "accept", "content": defaults(&params)})),
                    error: None,
                };
                c.send(&answer).await.map_err(|e| e.to_string())?;
            }
            _ => {}
        }
    }
}

/// The defaults of an elicitation's form: what a person who accepts without typing
/// sends.
fn defaults(params: &Value) -> Value {
    let mut content = Map::new();
    if let Some(props) = params["requestedSchema"]["properties"].as_object() {
        for (name, schema) in props {
            if let Some(d) = schema.get("default") {
                content.insert(name.clone(), d.clone());
            }
        }
    }
    Value::Object(content)
}
