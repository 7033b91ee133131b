//! A call's `result`: its status, content, error, truncation and meta.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{ErrorBody, Id};

use super::client::empty_args;

/// The outcome class of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The tool did its work.
    Ok,
    /// Refused before running, or the tool failed (`error.type` says which).
    Error,
    /// A policy outcome: denied, not confirmed, or not asked in time.
    Denied,
    /// The deadline passed.
    Timeout,
    /// Cancelled by the client, or by the server draining.
    Cancelled,
    /// The worker died with the call in flight.
    Crashed,
}

impl Status {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Denied => "denied",
            Status::Timeout => "timeout",
            Status::Cancelled => "cancelled",
            Status::Crashed => "crashed",
        }
    }
}

/// What truncation left out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Truncated {
    /// Bytes left out.
    pub omitted_bytes: u64,
    /// Lines (or entries, or matches) left out.
    pub omitted_lines: u64,
    /// Where the whole output is kept (commands only), as `read_file` reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_output: Option<String>,
}

/// The one `result` every call gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call's id, as sent.
    pub id: Id,
    /// How the call ended.
    pub status: Status,
    /// What the model reads; `Error: <message>` on failure, except a command's output.
    pub content: String,
    /// A short text for a person.
    pub display: String,
    /// Why it failed; present exactly when `status` is not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// What was cut, when something was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Truncated>,
    /// Tool-specific data (exit code, counts, the policy's reason).
    #[serde(default = "empty_args")]
    pub meta: Value,
    /// From receipt of the call to its result.
    pub duration_ms: u64,
    /// The `seq` of the call's last audit record, to find it in the log.
    #[serde(default)]
    pub audit_seq: u64,
}
