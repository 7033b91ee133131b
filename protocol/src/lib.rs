//! toolvisor's wire protocol (v1): the frame codec, every message both sides send,
//! the error types, the tool catalog and a small async client.
//!
//! `docs/PROTOCOL.md` is the normative description; this crate is its one Rust
//! implementation, shared by the supervisor, the workers, the CLI and the tests.

pub mod client;
pub mod egress;
pub mod error;
pub mod frame;
pub mod id;
pub mod message;
pub mod time;
pub mod tools;
pub mod worker;
pub mod writer;

pub use error::{ErrorBody, ErrorType};
pub use frame::{DecodeError, FrameError, MAX_DEPTH};
pub use id::Id;
pub use message::{CallRequest, ClientMessage, ServerMessage, Status, ToolResult, Truncated};

/// The protocol version this crate speaks (`hello.protocol`).
pub const PROTOCOL_VERSION: u32 = 1;

/// Default upper bound of one frame's body, in bytes (`limits.max_frame_bytes`).
pub const DEFAULT_MAX_FRAME_BYTES: usize = 8 * 1024 * 1024;
