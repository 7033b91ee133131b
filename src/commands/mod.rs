//! The client commands of the CLI, each a short conversation over the socket. What
//! they print for people goes to stdout (results, tables); notes, prompts and errors
//! go to stderr, so a pipe gets only the data.

pub mod approve;
pub mod attach;
pub mod call;
pub mod doctor;
pub mod exec;
pub mod hook;
pub mod init;
pub mod init_host;
mod plain_call;
pub mod policy;
mod quote;
pub mod status;
pub mod tools;
pub mod undo;

use serde_json::Value;
use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{ClientMessage, ServerMessage};

use crate::cli::Command;
use crate::workspace::Resolved;

/// The client name the CLI gives in `hello`.
pub const CLIENT: &str = "toolvisor-cli";

/// Run a client command; returns the exit code.
pub fn run(cmd: &Command, r: &Resolved) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
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
                eprintln!(
                    "toolvisor: is `toolvisor serve` running for {}?",
                    r.workspace.display()
                );
            }
            1
        }
    }
}

async fn dispatch(cmd: &Command, r: &Resolved) -> Result<i32, ClientError> {
    match cmd {
        Command::Call {
            tool,
            args,
            json,
            timeout_ms,
            trace,
            token,
            interactive,
        } => {
            let opts = call::Options {
                tool: tool.clone(),
                args: args.clone(),
                json: *json,
                timeout_ms: *timeout_ms,
                trace: trace.clone(),
                token: token.clone(),
            };
            if *interactive {
                return attach::call_interactive(r, opts).await;
            }
            call::run(r, opts).await
        }
        Command::Attach { process } => {
            let mut c = Client::connect(&r.socket, CLIENT, true).await?;
            attach::attach_existing(&mut c, &r.socket, process).await
        }
        Command::Approve {
            all,
            session,
            count,
        } => approve::run(r, *all, *session, *count).await,
        Command::Tools { json, format } => {
            let mut c = connect(r).await?;
            tools::run(&mut c, *json, *format).await
        }
        Command::Status { json } => {
            let mut c = connect(r).await?;
            status::run(&mut c, *json).await
        }
        Command::Doctor { json } => {
            let mut c = connect(r).await?;
            doctor::run(&mut c, *json).await
        }
        Command::Undo {
            calls,
            trace,
            last,
            dry_run,
            json,
        } => {
            let o = undo::Options {
                calls: calls.clone(),
                trace: trace.clone(),
                last: *last,
                dry_run: *dry_run,
                json: *json,
            };
            undo::run(r, o).await
        }
        Command::Restart { group } => {
            let mut c = connect(r).await?;
            restart(&mut c, group.clone()).await
        }
        Command::Grant {
            tools,
            trace,
            paths,
            ttl,
            reusable,
        } => {
            let mut c = connect(r).await?;
            let msg = ClientMessage::Grant {
                id: "grant".into(),
                tools: tools.clone(),
                trace_id: trace.clone(),
                paths: (!paths.is_empty()).then(|| paths.clone()),
                ttl_ms: *ttl,
                reusable: Some(*reusable),
            };
            grant(&mut c, &msg).await
        }
        Command::Exec(a) => Ok(exec::run(r, a).await),
        Command::Serve { .. }
        | Command::Init { .. }
        | Command::Hook { .. }
        | Command::Worker { .. }
        | Command::Reap { .. }
        | Command::Audit { .. }
        | Command::Mcp { .. }
        | Command::Policy { .. } => Ok(2),
    }
}

/// A non-interactive connection to the daemon.
pub async fn connect(r: &Resolved) -> Result<Client, ClientError> {
    Client::connect(&r.socket, CLIENT, false).await
}

async fn restart(c: &mut Client, group: Option<String>) -> Result<i32, ClientError> {
    let id = "restart".into();
    let msg = ClientMessage::Restart {
        id: "restart".into(),
        group,
    };
    match c.request(&msg, &id).await? {
        ServerMessage::Ack { .. } => Ok(0),
        other => refused(other),
    }
}

async fn grant(c: &mut Client, msg: &ClientMessage) -> Result<i32, ClientError> {
    match c.request(msg, &"grant".into()).await? {
        ServerMessage::Token {
            token, expires_at, ..
        } => {
            println!("{token}");
            eprintln!(
                "expires at {expires_at}; pass it as confirm_token (toolvisor call --token …)"
            );
            Ok(0)
        }
        other => refused(other),
    }
}

/// The arguments of a call: JSON text, `-` for stdin, or nothing for `{}`.
pub(crate) fn parse_args(text: Option<&str>) -> Result<Value, String> {
    let owned;
    let text = match text {
        Some("-") => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
                .map_err(|e| format!("cannot read the arguments from stdin: {e}"))?;
            owned = s;
            Some(owned.as_str())
        }
        other => other,
    };
    let v: Value = match text {
        None => Value::Object(Default::default()),
        Some(t) => {
            serde_json::from_str(t).map_err(|e| format!("the arguments are not JSON: {e}"))?
        }
    };
    if !v.is_object() {
        return Err("the arguments must be a JSON object".into());
    }
    Ok(v)
}

/// A connection-level refusal ends the command with 1 (its message on stderr).
pub(crate) fn refused(m: ServerMessage) -> Result<i32, ClientError> {
    match m {
        ServerMessage::Error { error, .. } => {
            eprintln!("toolvisor: {}: {}", error.kind, error.message);
            Ok(1)
        }
        other => Err(ClientError::Unexpected(Box::new(other))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_must_be_a_json_object() {
        assert_eq!(parse_args(None).unwrap(), serde_json::json!({}));
        assert_eq!(
            parse_args(Some(r#"{"a": 1}"#)).unwrap(),
            serde_json::json!({"a": 1})
        );
        assert!(parse_args(Some("[1]")).unwrap_err().contains("object"));
        assert!(parse_args(Some("nope")).unwrap_err().contains("not JSON"));
    }
}
