//! MCP tasks (the `io.modelcontextprotocol/tasks` extension) for a client that
//! declared them: a command that goes on in the background — it yielded (`yield_ms`)
//! or was started with `background: true` — answers its `tools/call` with a task
//! instead of a process handle. The bridge follows the process through the daemon
//! (`read_output` long polls, each a call the policy and the audit log see), and the
//! task completes, when the process has exited and its output is read, with that whole
//! output (the last [`MAX_OUTPUT`] bytes) and the exit code. `tasks/cancel` kills the
//! process (`kill_process`). A client that did not declare tasks gets the handle, as
//! before.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolResult, CreateTaskResult, DetailedTask, Task, TaskPayload, TaskStatus};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::{CallRequest, Status, ToolResult};

use crate::mcp::call::{self, CallCtx};

/// Most output bytes a completed task keeps (the end of the output).
pub const MAX_OUTPUT: usize = 1 << 20;
/// Tasks a session keeps; the oldest ended ones are forgotten first.
const KEPT: usize = 64;
/// How long a task is kept, announced as its `ttlMs`.
const TTL: Duration = Duration::from_secs(3600);
/// The polling interval suggested to the client.
const POLL: Duration = Duration::from_millis(500);
/// How long one `read_output` waits for more output.
const WAIT_MS: u64 = 20_000;

/// One task: its state and what stops its process.
struct Entry {
    task: Task,
    payload: TaskPayload,
    cancel: CancellationToken,
    number: u64,
}

/// The tasks of one MCP session.
#[derive(Default)]
pub struct Tasks {
    map: Mutex<HashMap<String, Entry>>,
    next: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process handle of a call that left its command running in the background.
pub fn running_process(r: &ToolResult) -> Option<String> {
    let running = r.meta.get("running").and_then(Value::as_bool) == Some(true);
    let process = r.meta.get("process").and_then(Value::as_str)?;
    (r.status == Status::Ok && running).then(|| process.to_owned())
}

fn now() -> String {
    toolvisor_protocol::time::rfc3339_millis(std::time::SystemTime::now())
}

impl Tasks {
    /// A new task following `process`: its id, what cancels it, and the answer to the
    /// `tools/call`. [`follow`] runs it.
    pub fn start(&self, process: &str) -> (String, CancellationToken, CreateTaskResult) {
        let number = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        // Random: over HTTP the tasks of every session share one store.
        let secret = crate::mcp::rounds::handle().unwrap_or_else(|| format!("{number:032x}"));
        let id = format!("task-{secret}");
        let stamp = now();
        let mut task = Task::new(id.clone(), TaskStatus::Working, stamp.clone(), stamp);
        task.ttl_ms = Some(TTL.as_millis() as u64);
        task.poll_interval_ms = Some(POLL.as_millis() as u64);
        task.status_message = Some(format!("running in the background as {process}"));
        let cancel = CancellationToken::new();
        let entry = Entry {
            task: task.clone(),
            payload: TaskPayload::Working,
            cancel: cancel.clone(),
            number,
        };
        let mut map = lock(&self.map);
        map.insert(id.clone(), entry);
        forget_oldest(&mut map);
        (id, cancel, CreateTaskResult::new(task))
    }

    /// The task `id` now, as `tasks/get` answers it.
    pub fn get(&self, id: &str) -> Option<DetailedTask> {
        let map = lock(&self.map);
        let e = map.get(id)?;
        Some(DetailedTask::new(e.task.clone(), e.payload.clone()))
    }

    /// Stop task `id`'s process; false when there is no such task.
    pub fn cancel(&self, id: &str) -> bool {
        match lock(&self.map).get(id) {
            Some(e) => {
                e.cancel.cancel();
                true
            }
            None => false,
        }
    }

    fn end(&self, id: &str, payload: TaskPayload, message: String) {
        if let Some(e) = lock(&self.map).get_mut(id) {
            e.task.last_updated_at = now();
            e.task.status_message = Some(message);
            e.payload = payload;
            e.task.status = e.payload.status();
        }
    }
}

/// Past [`KEPT`] tasks, forget the oldest that ended.
fn forget_oldest(map: &mut HashMap<String, Entry>) {
    while map.len() > KEPT {
        let oldest = map
            .iter()
            .filter(|(_, e)| e.task.status.is_terminal())
            .min_by_key(|(_, e)| e.number)
            .map(|(id, _)| id.clone());
        match oldest {
            Some(id) => map.remove(&id),
            None => return,
        };
    }
}

/// Follow `process` to its end and complete task `id` (or fail or cancel it).
pub async fn follow(
    tasks: Arc<Tasks>,
    ctx: CallCtx<'_>,
    id: String,
    process: String,
    first: String,
    cancel: CancellationToken,
) {
    let mut output = first;
    loop {
        let read = CallRequest::new(
            "",
            "read_output",
            json!({"process": process, "wait_ms": WAIT_MS}),
        );
        let r = tokio::select! {
            r = call::run(&ctx, read) => r,
            _ = cancel.cancelled() => {
                let kill = CallRequest::new("", "kill_process", json!({"process": process}));
                let _ = call::run(&ctx, kill).await;
                tasks.end(&id, TaskPayload::Cancelled, "cancelled: the process was killed".into());
                return;
            }
        };
        let mut r = match r {
            Ok(r) if r.status == Status::Ok => r,
            Ok(r) => return fail(&tasks, &id, &r.content),
            Err(e) => return fail(&tasks, &id, &format!("{e:?}")),
        };
        keep_tail(&mut output, &r.content);
        if !finished(&r) {
            continue;
        }
        let code = r.meta.get("exit_code").cloned().unwrap_or(Value::Null);
        r.content = std::mem::take(&mut output);
        let result = crate::mcp::result::to_mcp("read_output", &r);
        let payload = completed(&result);
        tasks.end(&id, payload, format!("the process exited ({code})"));
        return;
    }
}

fn fail(tasks: &Tasks, id: &str, why: &str) {
    let error = json!({"code": -32603, "message": why});
    let payload = TaskPayload::Failed {
        error: error.as_object().cloned().unwrap_or_default(),
    };
    tasks.end(id, payload, format!("failed: {why}"));
}

fn completed(result: &CallToolResult) -> TaskPayload {
    let v = serde_json::to_value(result).unwrap_or_default();
    TaskPayload::Completed {
        result: v.as_object().cloned().unwrap_or_default(),
    }
}

/// The process has exited and its output is all read.
fn finished(r: &ToolResult) -> bool {
    let running = r.meta.get("running").and_then(Value::as_bool) != Some(false);
    let next = r.meta.get("next").and_then(Value::as_u64).unwrap_or(0);
    let total = r
        .meta
        .get("output_bytes")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    !running && next >= total
}

/// Append `more`, keeping the last [`MAX_OUTPUT`] bytes.
fn keep_tail(output: &mut String, more: &str) {
    output.push_str(more);
    if output.len() > MAX_OUTPUT {
        let mut cut = output.len() - MAX_OUTPUT;
        while !output.is_char_boundary(cut) {
            cut += 1;
        }
        output.drain(..cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_moves_from_working_to_its_end_once() {
        let tasks = Tasks::default();
        let (id, cancel, created) = tasks.start("w0-1");
        assert_eq!(created.task.status, TaskStatus::Working);
        assert_eq!(
            tasks.get(&id).map(|t| t.status()),
            Some(TaskStatus::Working)
        );
        assert!(tasks.cancel(&id) && cancel.is_cancelled());
        tasks.end(&id, TaskPayload::Cancelled, "cancelled".into());
        assert_eq!(
            tasks.get(&id).map(|t| t.status()),
            Some(TaskStatus::Cancelled)
        );
        assert!(tasks.get("task-0").is_none() && !tasks.cancel("nope"));
    }

    #[test]
    fn only_ended_tasks_are_forgotten() {
        let tasks = Tasks::default();
        let ids: Vec<String> = (0..KEPT + 5)
            .map(|i| tasks.start(&format!("w0-{i}")).0)
            .collect();
        assert_eq!(lock(&tasks.map).len(), KEPT + 5, "running tasks are kept");
        tasks.end(&ids[0], TaskPayload::Cancelled, String::new());
        tasks.start("w0-x");
        assert!(tasks.get(&ids[0]).is_none(), "the oldest ended task goes");
    }

    #[test]
    fn the_output_keeps_its_end() {
        let mut out = "é".repeat(MAX_OUTPUT / 2);
        keep_tail(&mut out, "tail");
        assert!(out.len() <= MAX_OUTPUT && out.ends_with("tail"));
    }
}
