//! The client commands of the CLI, each a short conversation over the socket.

use std::io::{IsTerminal, Write};

use serde_json::Value;
use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Status, ToolFormat};

use crate::cli::{Command, FormatArg, Resolved};

/// Run a client command; returns the exit code.
pub fn run(cmd: &Command, r: &Resolved) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return 70;
        }
    };
    match rt.block_on(dispatch(cmd, r)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            if matches!(e, ClientError::Connect { .. }) {
                eprintln!("toolvisor: is `toolvisor serve` running for this workspace?");
            }
            1
        }
    }
}

async fn dispatch(cmd: &Command, r: &Resolved) -> Result<i32, ClientError> {
    let interactive = matches!(cmd, Command::Call { .. }) && std::io::stdin().is_terminal();
    let mut c = Client::connect(&r.socket, "toolvisor-cli", interactive).await?;
    match cmd {
        Command::Tools { format } => tools(&mut c, *format).await,
        Command::Call { tool, args, json, timeout_ms, trace, token } => {
            let args = match parse_args(args.as_deref()) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("toolvisor: {e}");
                    return Ok(2);
                }
            };
            let mut req = CallRequest::new("cli-1", tool.clone(), args);
            req.timeout_ms = *timeout_ms;
            req.trace_id = trace.clone();
            req.confirm_token = token.clone();
            req.stream = Some(!*json);
            call(&mut c, req, *json).await
        }
        Command::Status { json } => status(&mut c, *json).await,
        Command::Restart { group } => {
            let id = "restart".into();
            match c.request(&ClientMessage::Restart { id: "restart".into(), group: group.clone() }, &id).await? {
                ServerMessage::Ack { .. } => Ok(0),
                other => refused(other),
            }
        }
        Command::Serve | Command::Worker { .. } | Command::Reap { .. } => Ok(2),
    }
}

fn parse_args(text: Option<&str>) -> Result<Value, String> {
    let v: Value = match text {
        None => Value::Object(Default::default()),
        Some(t) => serde_json::from_str(t).map_err(|e| format!("the arguments are not JSON: {e}"))?,
    };
    if !v.is_object() {
        return Err("the arguments must be a JSON object".into());
    }
    Ok(v)
}

fn refused(m: ServerMessage) -> Result<i32, ClientError> {
    match m {
        ServerMessage::Error { error, .. } => {
            eprintln!("toolvisor: {}: {}", error.kind, error.message);
            Ok(1)
        }
        other => Err(ClientError::Unexpected(Box::new(other))),
    }
}

async fn tools(c: &mut Client, format: FormatArg) -> Result<i32, ClientError> {
    let format = match format {
        FormatArg::Native => ToolFormat::Native,
        FormatArg::Openai => ToolFormat::Openai,
        FormatArg::Mcp => ToolFormat::Mcp,
    };
    let id = "tools".into();
    match c.request(&ClientMessage::ListTools { id: "tools".into(), format: Some(format), groups: None }, &id).await? {
        ServerMessage::Tools { tools, .. } => {
            println!("{}", serde_json::to_string_pretty(&tools).unwrap_or_default());
            Ok(0)
        }
        other => refused(other),
    }
}

async fn call(c: &mut Client, req: CallRequest, json: bool) -> Result<i32, ClientError> {
    let mut streamed = false;
    let transcript = c
        .call(req, |_, data| {
            streamed = true;
            print!("{data}");
            let _ = std::io::stdout().flush();
        })
        .await?;
    let Some(result) = transcript.result else { return Ok(1) };
    if json {
        println!("{}", serde_json::to_string_pretty(&result).unwrap_or_default());
    } else if !streamed || result.truncated.is_some() {
        print!("{}", result.content);
        if !result.content.ends_with('\n') && !result.content.is_empty() {
            println!();
        }
    }
    if result.status == Status::Ok {
        return Ok(0);
    }
    if !json && let Some(e) = &result.error {
        eprintln!("toolvisor: {} ({})", result.status.as_str(), e.kind);
    }
    Ok(1)
}

async fn status(c: &mut Client, json: bool) -> Result<i32, ClientError> {
    let id = "status".into();
    let m = c.request(&ClientMessage::Status { id: "status".into() }, &id).await?;
    let ServerMessage::Status { uptime_ms, workers, audit, guards, .. } = &m else { return refused(m) };
    if json {
        println!("{}", serde_json::to_string_pretty(&m).unwrap_or_default());
        return Ok(0);
    }
    println!("uptime {:.1}s   audit {} (seq {})", *uptime_ms as f64 / 1000.0, audit.path, audit.seq);
    println!("guards: landlock {:?}, openat2 {}, subreaper {}, cgroup {}", guards.landlock, guards.openat2, guards.subreaper, guards.cgroup);
    println!("{:<8} {:>5} {:>8} {:<10} {:>8} {:>9} {:>10} {:>6}", "GROUP", "INDEX", "PID", "STATE", "RESTARTS", "IN-FLIGHT", "RSS", "CPU%");
    for w in workers {
        let pid = w.pid.map_or("-".to_owned(), |p| p.to_string());
        println!("{:<8} {:>5} {:>8} {:<10} {:>8} {:>9} {:>9}K {:>6.1}", w.group, w.index, pid, w.state, w.restarts, w.in_flight, w.rss_bytes / 1024, w.cpu_percent);
    }
    Ok(0)
}
