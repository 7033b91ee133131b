//! The `exec` group's tools. OWNER: exec helper.

use serde_json::Value;
use toolvisor_protocol::worker::Outcome;

use crate::ToolContext;

/// State of one exec worker: its background jobs.
#[derive(Debug, Default)]
pub struct ExecState {}

impl ExecState {
    pub fn new(_init: &toolvisor_protocol::worker::WorkerInit) -> Self {
        ExecState {}
    }

    /// Kill and record every background job (worker shutdown).
    pub async fn shutdown(&self) {}
}

/// Run one `exec` tool. Runs on the worker's tokio runtime; must honour
/// `ctx.cancel` and `ctx.deadline`.
pub async fn run(_state: &ExecState, tool: &str, _args: &Value, _ctx: &ToolContext) -> Outcome {
    crate::ToolError::internal(format!("tool {tool} is not implemented yet")).into()
}
