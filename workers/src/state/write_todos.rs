//! `write_todos`: add, complete, remove and list the todos of `<state_dir>/todos.json`,
//! a JSON array in the order they were added. Ids are 8 random hex digits, unique in
//! the list. A file that is not such an array is reported (`TodoError`) and left alone.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::tools::write_todos::{MAX_TASK, MAX_TODOS};
use toolvisor_protocol::worker::{Limits, Outcome};

use super::store::{Locked, Store};
use crate::{ToolError, truncate};

/// The list's file in the state directory.
pub const FILE: &str = "todos.json";

/// One todo as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Todo {
    /// Its id, stable across rewrites.
    pub id: String,
    /// What is to be done.
    pub task: String,
    /// Whether it is done.
    pub completed: bool,
}

impl Todo {
    /// `[x] <id>: <task>` or `[ ] <id>: <task>`.
    pub fn line(&self) -> String {
        let mark = if self.completed { 'x' } else { ' ' };
        format!("[{mark}] {}: {}", self.id, self.task)
    }
}

fn err(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorType::TodoError, message)
}

/// Run one `write_todos` call.
pub fn run(args: &Value, store: &Store, limits: &Limits) -> Result<Outcome, ToolError> {
    let action = args
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let arg = |k: &str| args.get(k).and_then(Value::as_str);
    let need_id = || arg("id").ok_or_else(|| err(format!("`id` is required for {action}")));
    let locked = store.lock(ErrorType::TodoError)?;
    let mut todos = load(&locked)?;
    match action {
        "add" => {
            let task = arg("task").ok_or_else(|| err("`task` is required for add"))?;
            check_task(task, todos.len())?;
            let id = new_id(&todos)?;
            todos.push(Todo {
                id: id.clone(),
                task: task.to_owned(),
                completed: false,
            });
            save(&locked, &todos)?;
            let mut o = Outcome::ok(format!("Added todo: {id}"));
            o.display = format!("Added: {task}");
            o.meta.insert("id".into(), json!(id));
            Ok(o)
        }
        "complete" => {
            let id = need_id()?;
            let todo = todos
                .iter_mut()
                .find(|t| t.id == id)
                .ok_or_else(|| not_found(id))?;
            todo.completed = true;
            let task = todo.task.clone();
            save(&locked, &todos)?;
            let mut o = Outcome::ok(format!("Completed todo: {id}"));
            o.display = format!("Completed: {task}");
            Ok(o)
        }
        "remove" => {
            let id = need_id()?;
            let at = todos
                .iter()
                .position(|t| t.id == id)
                .ok_or_else(|| not_found(id))?;
            let removed = todos.remove(at);
            save(&locked, &todos)?;
            let mut o = Outcome::ok(format!("Removed todo: {id}"));
            o.display = format!("Removed: {}", removed.task);
            Ok(o)
        }
        "list" => {
            let lines: Vec<String> = todos.iter().map(Todo::line).collect();
            let cut = truncate::listing(&lines, limits);
            let mut o = Outcome::ok(cut.text);
            o.truncated = cut.truncated;
            let done = todos.iter().filter(|t| t.completed).count();
            o.display = format!("{} todos ({done} done)", todos.len());
            o.meta.insert("todos".into(), json!(todos.len()));
            o.meta.insert("completed".into(), json!(done));
            Ok(o)
        }
        other => Err(err(format!(
            "unknown action `{other}` (add, complete, remove or list)"
        ))),
    }
}

fn not_found(id: &str) -> ToolError {
    err(format!("Todo not found: {id}"))
}

/// A task is one non-empty line of at most [`MAX_TASK`] bytes; the list holds at most
/// [`MAX_TODOS`].
fn check_task(task: &str, count: usize) -> Result<(), ToolError> {
    if task.trim().is_empty() {
        return Err(err("the task is empty"));
    }
    if task.contains(['\n', '\r']) {
        return Err(err("a task is one line (it contains a line break)"));
    }
    if task.len() > MAX_TASK {
        return Err(err(format!(
            "the task is {} bytes; at most {MAX_TASK}",
            task.len()
        )));
    }
    if count >= MAX_TODOS {
        return Err(err(format!(
            "the list holds {MAX_TODOS} todos, the most it may; remove some first"
        )));
    }
    Ok(())
}

/// 8 random hex digits not used in the list.
fn new_id(todos: &[Todo]) -> Result<String, ToolError> {
    for _ in 0..64 {
        let mut b = [0u8; 4];
        getrandom(&mut b)?;
        let id: String = b.iter().map(|x| format!("{x:02x}")).collect();
        if !todos.iter().any(|t| t.id == id) {
            return Ok(id);
        }
    }
    Err(err("cannot find a free id"))
}

fn getrandom(buf: &mut [u8]) -> Result<(), ToolError> {
    // SAFETY: `buf` is a valid, writable buffer of `buf.len()` bytes.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n == buf.len() as isize {
        Ok(())
    } else {
        Err(ToolError::internal("the kernel gave no random bytes"))
    }
}

fn load(locked: &Locked<'_>) -> Result<Vec<Todo>, ToolError> {
    let Some(bytes) = locked.read(FILE, ErrorType::TodoError)? else {
        return Ok(Vec::new());
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        err(format!(
            "{FILE} is not a JSON array of todos ({e}); it was left as it is: fix or remove it"
        ))
    })
}

fn save(locked: &Locked<'_>, todos: &[Todo]) -> Result<(), ToolError> {
    let bytes = serde_json::to_vec_pretty(todos).map_err(|e| err(e.to_string()))?;
    locked.write(FILE, &bytes, ErrorType::TodoError)
}
