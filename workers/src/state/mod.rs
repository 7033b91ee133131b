//! The `state` group's tools: [`memory`] and [`write_todos`], the agent's durable
//! memory and todo list in the state directory.
//!
//! This worker is the only writer of its store ([`store`]): Landlock lets it write
//! there and nowhere else, and every other tool sees the state directory as protected
//! (search never shows it, edits refuse it, commands do not see it). Calls are
//! serialised per store, across this worker's threads and across state workers, so
//! concurrent changes never lose one another.

pub mod memory;
pub mod store;
pub mod write_todos;

#[cfg(test)]
mod tests;

use std::path::Path;
use std::sync::OnceLock;

use serde_json::Value;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::tools;
use toolvisor_protocol::worker::Outcome;

use crate::context::outcome;
use crate::{ToolContext, ToolError};
use store::Store;

/// The files of the store (each gets its documented link in the state directory).
pub const FILES: &[&str] = &[memory::FILE, write_todos::FILE];

/// This process's store, opened before it confined itself.
static STORE: OnceLock<Store> = OnceLock::new();

/// Open the store (create it and its links), before Landlock; the worker still runs
/// without it, and each call then says why.
pub fn prepare(state_dir: &Path) {
    match Store::prepare(state_dir, FILES) {
        Ok(s) => {
            let _ = STORE.set(s);
        }
        Err(e) => tracing::error!(
            group = "state",
            "cannot open the store {}: {e}",
            store::dir(state_dir).display()
        ),
    }
}

/// Run one `state` tool (blocking; the worker calls it on a blocking thread).
pub fn run(tool: &str, args: &Value, ctx: &ToolContext) -> Outcome {
    outcome(dispatch(tool, args, ctx))
}

fn dispatch(tool: &str, args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
    let store = STORE.get().ok_or_else(|| {
        ToolError::internal("the state store could not be opened (see the daemon's log)")
    })?;
    run_on(store, tool, args, ctx)
}

/// Run `tool` against `store` (tests pass their own).
pub fn run_on(
    store: &Store,
    tool: &str,
    args: &Value,
    ctx: &ToolContext,
) -> Result<Outcome, ToolError> {
    let limits = &ctx.init.limits;
    match tool {
        tools::memory::NAME => memory::run(args, store, limits),
        tools::write_todos::NAME => write_todos::run(args, store, limits),
        other => Err(ToolError::new(
            ErrorType::ToolNotFound,
            format!("the state group has no tool `{other}`"),
        )),
    }
}
