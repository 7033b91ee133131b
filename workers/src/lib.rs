//! toolvisor's worker side: the tools of each group and the loop a worker process runs.
//!
//! A worker is the toolvisor binary re-executed as `toolvisor worker --group G`; see
//! [`worker::main`]. Each group's tools live in their own module: [`search`], [`edit`],
//! [`exec`], [`web`], [`state`] and [`skills`] (the `meta` group). Paths go through [`paths::Resolver`]; long output through [`truncate`].
//!
//! The boundary the workers and their commands run in — namespaces, mounts, Landlock,
//! the `toolvisor reap` shim — is the `toolvisor-sandbox` crate (sandbox/).

pub mod context;
pub mod edit;
pub mod exec;
pub mod paths;
pub mod search;
pub mod skills;
pub mod state;
pub mod truncate;
pub mod web;
pub mod worker;

pub use context::{CancelFlag, OutputSink, ToolContext, ToolError};
