//! The error types of the contract (docs/PROTOCOL.md §8, §10): the `error.type` of a
//! result and of a connection-level `error` message.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Every error type a client can see. The serialized names are part of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorType {
    /// No tool or alias of that name; the message suggests close names.
    ToolNotFound,
    /// The arguments fail the tool's schema, or hold a value the tool refuses.
    InvalidParams,
    /// A deny rule matched, or a person answered no.
    PolicyDenied,
    /// The policy asks, and nobody can answer: the session is not interactive and brought
    /// no fitting `confirm_token`.
    ConfirmationRequired,
    /// Nobody answered `confirm_required` in time.
    ConfirmationTimeout,
    /// A `confirm_token` or preview token that does not fit the call.
    TokenInvalid,
    /// `..`, an absolute path or a symlink leaves every root.
    PathOutsideWorkspace,
    /// The path does not exist.
    FileNotFoundError,
    /// A write onto an existing file without `overwrite`.
    FileExistsError,
    /// A protected path, `.git` for the tools that never touch it, or the OS refused.
    PermissionError,
    /// The file to read is not text (a NUL byte or invalid UTF-8 near its start).
    BinaryFile,
    /// An edit's `target` does not occur in the file.
    EditTargetNotFound,
    /// An edit's `target` occurs more than once and no `lineHint` picks one.
    EditTargetAmbiguous,
    /// The file changed since its preview: the change is not applied.
    StaleChange,
    /// The command exited non-zero or died by a signal; its output is still in `content`.
    ShellExecutionError,
    /// The call did not finish within its deadline.
    Timeout,
    /// The client cancelled the call (or hung up).
    Cancelled,
    /// The worker process died with the call in flight.
    WorkerCrashed,
    /// Every worker of the group has failed; `retry_after_ms` says when to try again.
    WorkerUnavailable,
    /// The group's queue is full, or the connection has too many open calls.
    Overloaded,
    /// A fault of the server (the audit log cannot be written, a sandbox cannot be set up),
    /// not of the call.
    InternalError,
    /// A command was stopped by one of `[workers.exec.limits]` (the message names it).
    ResourceLimit,
    /// The sandbox a call needs cannot be built on this host (a staged command without
    /// user namespaces, or with the sandbox off): the command did not run.
    SandboxUnverified,
    /// A skill or subagent action of an envelope: toolvisor runs tools only.
    UnsupportedAction,
    /// `web_fetch`: the server answered with a non-2xx status (the message names it).
    HttpError,
    /// `web_fetch`: the address is refused, or the fetch failed (network, TLS, size, time).
    FetchError,
    /// `web_search`: no search endpoint is configured, or it failed.
    SearchError,
    /// `memory`: a missing `key`/`value`, a size bound, or a store that cannot be used.
    MemoryError,
    /// `write_todos`: a missing `task`, an unknown id, a size bound, or a broken list.
    TodoError,
    /// A tool of an MCP server (`[mcp.servers.NAME]`) answered with `isError`, or its
    /// result broke the tool's own `outputSchema`.
    McpToolError,
    // Connection level.
    /// Connection level: a frame that is not a well-formed message.
    BadMessage,
    /// Connection level: a `type` this server does not know.
    UnknownMessage,
    /// Connection level: a length prefix over `max_frame_bytes`; the connection closes.
    FrameTooLarge,
    /// Connection level: a message before the session's `welcome`.
    HelloRequired,
    /// Connection level: a `hello` for another protocol version; the connection closes.
    ProtocolVersion,
    /// Connection level: a call whose `id` is still open on this connection.
    DuplicateCallId,
    /// Connection level: a `cancel` of no open call.
    UnknownCall,
    /// Connection level: a `confirm` of an interaction unknown, answered or expired.
    UnknownInteraction,
    /// An `envelope` whose block cannot be run (the message names the problem).
    BadEnvelope,
    /// An undo left a path alone: something changed it after the call being undone.
    UndoConflict,
    /// What a call changed cannot be put back (the message says why).
    NotUndoable,
    /// A command's connection to a host the network list does not allow.
    NetworkDenied,
}

impl ErrorType {
    /// The contract's name of this error type.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorType::ToolNotFound => "ToolNotFound",
            ErrorType::InvalidParams => "InvalidParams",
            ErrorType::PolicyDenied => "PolicyDenied",
            ErrorType::ConfirmationRequired => "ConfirmationRequired",
            ErrorType::ConfirmationTimeout => "ConfirmationTimeout",
            ErrorType::TokenInvalid => "TokenInvalid",
            ErrorType::PathOutsideWorkspace => "PathOutsideWorkspace",
            ErrorType::FileNotFoundError => "FileNotFoundError",
            ErrorType::FileExistsError => "FileExistsError",
            ErrorType::PermissionError => "PermissionError",
            ErrorType::BinaryFile => "BinaryFile",
            ErrorType::EditTargetNotFound => "EditTargetNotFound",
            ErrorType::EditTargetAmbiguous => "EditTargetAmbiguous",
            ErrorType::StaleChange => "StaleChange",
            ErrorType::ShellExecutionError => "ShellExecutionError",
            ErrorType::Timeout => "Timeout",
            ErrorType::Cancelled => "Cancelled",
            ErrorType::WorkerCrashed => "WorkerCrashed",
            ErrorType::WorkerUnavailable => "WorkerUnavailable",
            ErrorType::Overloaded => "Overloaded",
            ErrorType::InternalError => "InternalError",
            ErrorType::ResourceLimit => "ResourceLimit",
            ErrorType::SandboxUnverified => "SandboxUnverified",
            ErrorType::UnsupportedAction => "UnsupportedAction",
            ErrorType::HttpError => "HttpError",
            ErrorType::FetchError => "FetchError",
            ErrorType::SearchError => "SearchError",
            ErrorType::MemoryError => "MemoryError",
            ErrorType::TodoError => "TodoError",
            ErrorType::McpToolError => "McpToolError",
            ErrorType::BadMessage => "BadMessage",
            ErrorType::UnknownMessage => "UnknownMessage",
            ErrorType::FrameTooLarge => "FrameTooLarge",
            ErrorType::HelloRequired => "HelloRequired",
            ErrorType::ProtocolVersion => "ProtocolVersion",
            ErrorType::DuplicateCallId => "DuplicateCallId",
            ErrorType::UnknownCall => "UnknownCall",
            ErrorType::UnknownInteraction => "UnknownInteraction",
            ErrorType::BadEnvelope => "BadEnvelope",
            ErrorType::UndoConflict => "UndoConflict",
            ErrorType::NotUndoable => "NotUndoable",
            ErrorType::NetworkDenied => "NetworkDenied",
        }
    }

    /// Whether a result with this error is a policy outcome (status `denied`).
    pub fn is_policy(self) -> bool {
        matches!(
            self,
            ErrorType::PolicyDenied
                | ErrorType::ConfirmationRequired
                | ErrorType::ConfirmationTimeout
                | ErrorType::TokenInvalid
        )
    }
}

impl fmt::Display for ErrorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `{type, message}` plus optional machine-readable extras (e.g. `retry_after_ms`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// What went wrong, for programs (`type` on the wire).
    #[serde(rename = "type")]
    pub kind: ErrorType,
    /// What went wrong, for the model or the person: says what would fix it.
    pub message: String,
    /// When a retry may succeed (`WorkerUnavailable`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl ErrorBody {
    /// An error with no extras.
    pub fn new(kind: ErrorType, message: impl Into<String>) -> Self {
        ErrorBody {
            kind,
            message: message.into(),
            retry_after_ms: None,
        }
    }
}
