//! `toolvisor exec [--network[=DOMAINS]] [--writable P]… [--stage] -- CMD ARGS…`: one
//! command through the daemon's `run_command` (policy, sandbox, audit, undo, limits),
//! as if it ran here: its stdout and stderr on this process's stdout and stderr, apart;
//! its exit status as this process's (a signal n as 128+n); Ctrl-C cancels the call.
//! Standard input that is a pipe or a file is passed to the command (at most
//! [`MAX_INPUT_BYTES`]); a terminal or `/dev/null` is not.
//!
//! Exit codes of its own, apart from the command's: 2 usage, 124 the deadline passed,
//! 125 toolvisor failed (no daemon, invalid arguments, overloaded), 126 the policy
//! refused it, 130 cancelled by Ctrl-C.

use std::io::{IsTerminal, Read, Write};
use std::path::Path;

use serde_json::{Map, Value, json};
use toolvisor_protocol::client::{Client, ClientError, Incoming, Sender};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Status, ToolResult};
use toolvisor_protocol::tools::{MAX_INPUT_BYTES, run_command};

use crate::commands::quote;
use crate::workspace::Resolved;

/// The client name `exec` gives in `hello` (the audit's `client`).
const CLIENT: &str = "toolvisor-exec";
const CALL_ID: &str = "exec-1";

/// Exit codes of `exec` itself.
const TIMED_OUT: i32 = 124;
const FAILED: i32 = 125;
const REFUSED: i32 = 126;
const INTERRUPTED: i32 = 130;

#[derive(clap::Args, Debug)]
pub struct ExecArgs {
    /// Let the command reach the network: all of it, or only these comma-separated
    /// domains (`--network=crates.io,github.com`). Asks unless a rule grants it.
    #[arg(long, value_name = "DOMAINS", num_args = 0..=1, require_equals = true, default_missing_value = "")]
    pub network: Option<String>,
    /// Let the command write here too, outside the workspace (repeatable). Asks unless
    /// a rule grants it.
    #[arg(long = "writable", value_name = "PATH")]
    pub writable: Vec<String>,
    /// Hold the command's workspace changes for review instead of writing them.
    #[arg(long)]
    pub stage: bool,
    /// The call's deadline in milliseconds (capped by workers.exec.max_timeout_ms).
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// The command and its arguments, after `--`; quoted into one bash command line.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Run the command; the exit code.
pub async fn run(r: &Resolved, a: &ExecArgs) -> i32 {
    let args = match arguments(a, &r.workspace) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("toolvisor exec: {e}");
            return FAILED;
        }
    };
    match call(r, args, a.timeout_ms).await {
        Ok(code) => code,
        Err(e) => {
            eprintln!("toolvisor exec: {e}");
            if matches!(e, ClientError::Connect { .. }) {
                eprintln!(
                    "toolvisor exec: is `toolvisor serve` running for {}?",
                    r.workspace.display()
                );
            }
            FAILED
        }
    }
}

/// `run_command`'s arguments for this invocation.
fn arguments(a: &ExecArgs, workspace: &Path) -> Result<Value, String> {
    let mut args = Map::new();
    args.insert("command".into(), quote::line(&a.command).into());
    if let Some(cwd) = cwd_in(workspace) {
        args.insert("cwd".into(), cwd.into());
    }
    if let Some(n) = &a.network {
        args.insert("network".into(), network(n));
    }
    if !a.writable.is_empty() {
        args.insert("writable".into(), json!(a.writable));
    }
    if a.stage {
        args.insert("stage".into(), true.into());
    }
    if let Some(input) = piped_stdin()? {
        args.insert("stdin".into(), input.into());
    }
    Ok(Value::Object(args))
}

/// `--network` alone: `true`; with domains: the list.
fn network(n: &str) -> Value {
    let domains: Vec<&str> = n
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if domains.is_empty() {
        true.into()
    } else {
        json!(domains)
    }
}

/// This directory relative to the workspace, when it is below its root.
fn cwd_in(workspace: &Path) -> Option<String> {
    let here = std::env::current_dir().ok()?.canonicalize().ok()?;
    let rel = here.strip_prefix(workspace).ok()?;
    let rel = rel.to_str()?;
    (!rel.is_empty()).then(|| rel.to_owned())
}

/// Standard input when it is a pipe or a file (a terminal or a device is not read).
fn piped_stdin() -> Result<Option<String>, String> {
    let stdin = std::io::stdin();
    if stdin.is_terminal() || !is_pipe_or_file() {
        return Ok(None);
    }
    let mut buf = Vec::new();
    let limit = MAX_INPUT_BYTES as u64;
    stdin
        .lock()
        .take(limit + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read standard input: {e}"))?;
    if buf.len() as u64 > limit {
        return Err(format!(
            "standard input is over {MAX_INPUT_BYTES} bytes, the most a command is given"
        ));
    }
    String::from_utf8(buf)
        .map(Some)
        .map_err(|_| "standard input is not UTF-8 text".into())
}

fn is_pipe_or_file() -> bool {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::metadata("/proc/self/fd/0") else {
        return false;
    };
    let t = meta.file_type();
    t.is_fifo() || t.is_file() || t.is_socket()
}

async fn call(r: &Resolved, args: Value, timeout_ms: Option<u64>) -> Result<i32, ClientError> {
    let client = Client::connect(&r.socket, CLIENT, false).await?;
    let (mut tx, rx) = client.split();
    let mut req = CallRequest::new(CALL_ID, run_command::NAME, args);
    req.stream = Some(true);
    req.timeout_ms = timeout_ms;
    tx.send(&ClientMessage::Call(req)).await?;
    let result = follow(&mut tx, rx).await?;
    Ok(exit_code(&result))
}

/// Print the call's output as it comes, cancel on Ctrl-C (a second one leaves at
/// once), until the result.
async fn follow(tx: &mut Sender, mut rx: Incoming) -> Result<ToolResult, ClientError> {
    let mut interrupts = 0;
    loop {
        tokio::select! {
            m = rx.recv() => {
                match m.unwrap_or(Err(ClientError::Closed))? {
                    ServerMessage::Output { stream, data, .. } => write_out(&stream, &data),
                    ServerMessage::Result(res) => return Ok(res),
                    ServerMessage::Error { error, .. } => return Err(ClientError::Refused(error)),
                    _ => {}
                }
            }
            _ = tokio::signal::ctrl_c() => {
                interrupts += 1;
                if interrupts > 1 {
                    std::process::exit(INTERRUPTED);
                }
                tx.send(&ClientMessage::Cancel { id: CALL_ID.into() }).await?;
            }
        }
    }
}

fn write_out(stream: &str, data: &str) {
    // A closed stdout or stderr ends nothing here: the command's result still counts.
    let _ = if stream == "stderr" {
        let mut e = std::io::stderr().lock();
        e.write_all(data.as_bytes()).and_then(|()| e.flush())
    } else {
        let mut o = std::io::stdout().lock();
        o.write_all(data.as_bytes()).and_then(|()| o.flush())
    };
}

/// The command's exit status, or `exec`'s own code when it did not run to its end.
fn exit_code(res: &ToolResult) -> i32 {
    let meta_int = |k: &str| res.meta.get(k).and_then(Value::as_i64);
    let own = match res.status {
        Status::Denied => Some(REFUSED),
        Status::Timeout => Some(TIMED_OUT),
        Status::Cancelled => Some(INTERRUPTED),
        Status::Crashed => Some(FAILED),
        Status::Ok | Status::Error => None,
    };
    let ran = match (meta_int("signal"), meta_int("exit_code")) {
        (Some(sig), _) => Some(128 + sig as i32),
        (None, Some(c)) => Some(c as i32),
        (None, None) => None,
    };
    match (own, ran) {
        (None, Some(code)) => {
            say_staged(res);
            code
        }
        (None, None) if res.status == Status::Ok => 0,
        (own, _) => {
            if let Some(e) = &res.error {
                eprintln!("toolvisor exec: {}: {}", e.kind, e.message);
            }
            own.unwrap_or(FAILED)
        }
    }
}

/// With `--stage`: what is held and how to apply it.
fn say_staged(res: &ToolResult) {
    let Some(token) = res.meta.get("token").and_then(Value::as_str) else {
        return;
    };
    let n = res
        .meta
        .get("changes")
        .and_then(Value::as_array)
        .map_or(0, Vec::len);
    eprintln!(
        "toolvisor exec: {n} change(s) held; apply them with: toolvisor call apply_file_change '{{\"token\":\"{token}\"}}'"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn network_alone_is_true_and_domains_are_a_list() {
        assert_eq!(network(""), json!(true));
        assert_eq!(network("a.com, b.org"), json!(["a.com", "b.org"]));
    }

    fn result(status: Status, meta: Value) -> ToolResult {
        ToolResult {
            id: CALL_ID.into(),
            status,
            content: String::new(),
            display: String::new(),
            error: None,
            truncated: None,
            meta,
            duration_ms: 0,
            audit_seq: 0,
        }
    }

    #[test]
    fn exit_status_passes_through() {
        assert_eq!(exit_code(&result(Status::Ok, json!({"exit_code": 0}))), 0);
        assert_eq!(
            exit_code(&result(Status::Error, json!({"exit_code": 3}))),
            3
        );
        let killed = json!({"exit_code": null, "signal": 9});
        assert_eq!(exit_code(&result(Status::Error, killed)), 137);
        assert_eq!(exit_code(&result(Status::Denied, json!({}))), REFUSED);
        let killed_at_deadline = json!({"exit_code": null, "signal": 9});
        assert_eq!(
            exit_code(&result(Status::Timeout, killed_at_deadline)),
            TIMED_OUT
        );
        assert_eq!(
            exit_code(&result(Status::Cancelled, json!({}))),
            INTERRUPTED
        );
    }
}
