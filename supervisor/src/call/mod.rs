//! The path of one call inside the supervisor, from an admitted request to its one
//! result: routing ([`router`]), the policy gate with its confirmations, grants and
//! previews, batches, and the audit records each call leaves.

pub mod batch;
pub mod changes;
pub mod confirm;
pub mod dispatch;
pub mod egress;
pub mod envelope;
pub mod familiar;
pub mod gate;
pub mod grants;
pub mod host_config;
pub mod journaling;
pub mod previews;
pub mod processes;
pub mod record;
pub mod relay;
pub mod router;
pub mod running;
pub mod service;
pub mod staged;
pub mod timeout_hint;
pub mod undo_request;
