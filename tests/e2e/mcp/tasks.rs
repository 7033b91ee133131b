//! MCP tasks: for a client that declared the tasks extension, a command that goes on
//! in the background (`yield_ms`, `background`) answers with a task, which completes
//! with the command's whole output and exit code, or is cancelled with its process;
//! a client that did not declare tasks gets the process handle, as before.

use std::time::{Duration, Instant};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, GetTaskParams, TaskPayload,
    TaskStatus,
};
use serde_json::{Value, json};

use super::support::*;
use crate::harness::*;

fn run(command: &str) -> CallToolRequestParams {
    let args = json!({"command": command, "yield_ms": 300});
    CallToolRequestParams::new("run_command").with_arguments(args.as_object().unwrap().clone())
}

/// Poll `tasks/get` until the task ends; its last state.
async fn ended(mcp: &Mcp, id: &str) -> rmcp::model::DetailedTask {
    let end = Instant::now() + T;
    loop {
        let got = mcp
            .service
            .get_task(GetTaskParams::new(id))
            .await
            .expect("tasks/get");
        if got.task.status().is_terminal() {
            return got.task;
        }
        assert!(Instant::now() < end, "the task did not end in time");
        // Tasks are polled: the protocol has nothing to wait on.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn tasks_client() -> TestClient {
    let mut c = TestClient::new(None);
    c.tasks = true;
    c
}

#[test]
fn a_command_that_yields_is_a_task_that_completes_with_all_its_output() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], tasks_client()).await;
        let command = "echo first; sleep 1; echo second; exit 3";
        let r = mcp
            .service
            .call_tool_once(run(command))
            .await
            .expect("tools/call");
        let CallToolResponse::Task(created) = r else {
            panic!("not a task: {r:?}");
        };
        assert_eq!(created.task.status, TaskStatus::Working);
        let task = ended(&mcp, &created.task.task_id).await;
        let TaskPayload::Completed { result } = task.payload else {
            panic!("not completed: {task:?}");
        };
        let text = Value::Object(result).to_string();
        assert!(text.contains("first") && text.contains("second"), "{text}");
        assert!(text.contains("\"exit_code\":3"), "{text}");
        mcp.close().await;
    });
}

#[test]
fn cancelling_a_task_kills_its_process() {
    let s = Server::start(ALLOW_ALL);
    let marker = unique_marker("task");
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], tasks_client()).await;
        let command = format!("MARK={marker} sleep 60");
        let r = mcp
            .service
            .call_tool_once(run(&command))
            .await
            .expect("tools/call");
        let CallToolResponse::Task(created) = r else {
            panic!("not a task: {r:?}");
        };
        let id = created.task.task_id.clone();
        mcp.service
            .cancel_task(CancelTaskParams::new(id.clone()))
            .await
            .expect("tasks/cancel");
        assert_eq!(ended(&mcp, &id).await.status(), TaskStatus::Cancelled);
        wait_no_procs_with_env(&marker, T)
            .await
            .expect("the task's process is gone");
        // Another client cannot reach a task it does not know.
        let other = start(s.ws(), &["--no-spawn"], tasks_client()).await;
        let got = other.service.get_task(GetTaskParams::new("task-0")).await;
        assert!(got.is_err(), "{got:?}");
        other.close().await;
        mcp.close().await;
    });
}

#[test]
fn a_client_without_tasks_gets_the_process_handle() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let r = mcp
            .service
            .call_tool_once(run("sleep 2"))
            .await
            .expect("tools/call");
        let CallToolResponse::Complete(done) = r else {
            panic!("not a plain result: {r:?}");
        };
        assert_eq!(structured(&done)["running"], true, "{done:?}");
        mcp.close().await;
    });
}

/// `id` with its last hex digit changed: a near miss of a guess.
fn near(id: &str) -> String {
    let (head, last) = id.split_at(id.len() - 1);
    format!("{head}{}", if last == "0" { "1" } else { "0" })
}

#[test]
fn over_http_another_client_can_neither_read_nor_cancel_a_task_it_guesses() {
    let s = Server::start(ALLOW_ALL);
    let tokens = s.ws().join("tokens");
    let (a, b) = ("a-token-of-sixteen-chars", "b-token-of-sixteen-chars");
    std::fs::write(&tokens, format!("{a}\n{b}\n")).unwrap();
    let http = super::http::HttpMcp::start(s.ws(), &["--token-file", tokens.to_str().unwrap()]);
    block(T, async {
        let owner = http.client_as(Some(a), tasks_client()).await;
        let r = owner
            .call_tool_once(run("sleep 60"))
            .await
            .expect("tools/call");
        let CallToolResponse::Task(created) = r else {
            panic!("not a task: {r:?}");
        };
        let id = created.task.task_id.clone();
        // Unguessable: 128 random bits, not a counter.
        assert_eq!(id.len(), "task-".len() + 32, "{id}");

        let intruder = http.client_as(Some(b), tasks_client()).await;
        let zeros = format!("task-{}", "0".repeat(31) + "1");
        for guess in [near(&id), zeros, "task-1".to_owned()] {
            let got = intruder.get_task(GetTaskParams::new(guess.clone())).await;
            assert!(got.is_err(), "{guess}: {got:?}");
            let cancel = intruder
                .cancel_task(CancelTaskParams::new(guess.clone()))
                .await;
            assert!(cancel.is_err(), "{guess}: {cancel:?}");
        }
        let got = owner.get_task(GetTaskParams::new(id.clone())).await;
        assert_eq!(got.expect("tasks/get").task.status(), TaskStatus::Working);

        owner
            .cancel_task(CancelTaskParams::new(id.clone()))
            .await
            .expect("tasks/cancel");
        drop(intruder.cancel().await);
        drop(owner.cancel().await);
    });
}
