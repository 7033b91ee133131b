//! The error types of the contract (docs/PROTOCOL.md §8, §10): the `error.type` of a
//! result and of a connection-level `error` message.

use serde::{Deserialize, Serialize};
use std::fmt;

/// Every error type a client can see. The serialized names are part of the contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorType {
    ToolNotFound,
    InvalidParams,
    PolicyDenied,
    ConfirmationRequired,
    ConfirmationTimeout,
    TokenInvalid,
    PathOutsideWorkspace,
    FileNotFoundError,
    FileExistsError,
    PermissionError,
    BinaryFile,
    EditTargetNotFound,
    EditTargetAmbiguous,
    StaleChange,
    ShellExecutionError,
    Timeout,
    Cancelled,
    WorkerCrashed,
    WorkerUnavailable,
    Overloaded,
    InternalError,
    /// A command was stopped by one of `[workers.exec.limits]` (the message names it).
    ResourceLimit,
    /// A tool of an MCP server (`[mcp.servers.NAME]`) answered with `isError`, or its
    /// result broke the tool's own `outputSchema`.
    McpToolError,
    // Connection level.
    BadMessage,
    UnknownMessage,
    FrameTooLarge,
    HelloRequired,
    ProtocolVersion,
    DuplicateCallId,
    UnknownCall,
    UnknownInteraction,
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
            ErrorType::McpToolError => "McpToolError",
            ErrorType::BadMessage => "BadMessage",
            ErrorType::UnknownMessage => "UnknownMessage",
            ErrorType::FrameTooLarge => "FrameTooLarge",
            ErrorType::HelloRequired => "HelloRequired",
            ErrorType::ProtocolVersion => "ProtocolVersion",
            ErrorType::DuplicateCallId => "DuplicateCallId",
            ErrorType::UnknownCall => "UnknownCall",
            ErrorType::UnknownInteraction => "UnknownInteraction",
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
    #[serde(rename = "type")]
    pub kind: ErrorType,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

impl ErrorBody {
    pub fn new(kind: ErrorType, message: impl Into<String>) -> Self {
        ErrorBody {
            kind,
            message: message.into(),
            retry_after_ms: None,
        }
    }
}
