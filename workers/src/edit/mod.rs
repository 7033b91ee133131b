//! The `edit` group's tools. OWNER: edit helper.

use serde_json::Value;
use toolvisor_protocol::worker::Outcome;

use crate::ToolContext;

/// Run one `edit` tool (blocking; the worker calls it on a blocking thread).
pub fn run(tool: &str, _args: &Value, _ctx: &ToolContext) -> Outcome {
    crate::ToolError::internal(format!("tool {tool} is not implemented yet")).into()
}
