//! The `edit` group's tools: `write_file`, `edit_file`, their previews, and the internal
//! `apply_change` the supervisor sends for `apply_file_change`.
//!
//! Every write is atomic ([`atomic`]) and reaches the file only through directory fds
//! beneath its root ([`dirs`], [`target`]); protected paths (state directory, config)
//! are `PermissionError`. Previews return the change in `meta`
//! (`diff`, `path`, `before_sha256`, `content`); the supervisor keeps it under a token,
//! so tokens survive a restart of this worker.

pub mod apply_change;
pub mod atomic;
pub mod dirs;
pub mod edit_file;
pub mod edits;
pub mod preview;
pub mod target;
pub mod temps;
pub mod write_file;

#[cfg(test)]
mod tests;

use serde::de::DeserializeOwned;
use serde_json::Value;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::tools;
use toolvisor_protocol::worker::Outcome;

use crate::context::outcome;
use crate::paths::Resolver;
use crate::{ToolContext, ToolError};

/// The internal tool that applies a stored preview (not in the client catalog).
pub use apply_change::NAME as APPLY_CHANGE;

/// Run one `edit` tool (blocking; the worker calls it on a blocking thread).
pub fn run(tool: &str, args: &Value, ctx: &ToolContext) -> Outcome {
    outcome(dispatch(tool, args, &ctx.resolver))
}

/// Route a call by tool name; the arguments were schema-checked by the supervisor, and
/// are parsed strictly again here because `apply_change` has no client schema.
fn dispatch(tool: &str, args: &Value, resolver: &Resolver) -> Result<Outcome, ToolError> {
    match tool {
        tools::write_file::NAME => write_file::write_file(&parse(args)?, resolver),
        tools::preview_write_file::NAME => write_file::preview_write_file(&parse(args)?, resolver),
        tools::edit_file::NAME => edit_file::edit_file(&parse(args)?, resolver),
        tools::preview_edit_file::NAME => edit_file::preview_edit_file(&parse(args)?, resolver),
        APPLY_CHANGE => apply_change::apply_change(&parse(args)?, resolver),
        other => Err(ToolError::new(
            ErrorType::ToolNotFound,
            format!("the edit group has no tool `{other}`"),
        )),
    }
}

fn parse<T: DeserializeOwned>(args: &Value) -> Result<T, ToolError> {
    T::deserialize(args).map_err(|e| ToolError::invalid(format!("invalid arguments: {e}")))
}
