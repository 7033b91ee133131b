//! The tool registry: every tool a client can call, with its compiled validator.

pub mod validate;
