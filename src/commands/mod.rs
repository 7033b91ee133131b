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

use crate::workspace::Resolved;

/// The client name the CLI gives in `hello`.
pub const CLIENT: &str = "toolvisor-cli";

/// The runtime a client command runs on: one thread, timers and I/O.
pub fn runtime() -> std::io::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
}

/// A non-interactive connection to the daemon.
pub async fn connect(r: &Resolved) -> Result<Client, ClientError> {
    Client::connect(&r.socket, CLIENT, false).await
}

pub(crate) async fn restart(c: &mut Client, group: Option<String>) -> Result<i32, ClientError> {
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

pub(crate) async fn grant(c: &mut Client, msg: &ClientMessage) -> Result<i32, ClientError> {
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
