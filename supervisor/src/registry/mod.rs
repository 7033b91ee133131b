//! The tool registry: every tool a client can call, with its compiled validator.

pub mod mcp;
pub mod mcp_pools;
pub mod validate;
