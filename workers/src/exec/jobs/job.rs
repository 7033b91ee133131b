//! One background process as the job table holds it: its handle, owner, log and
//! state, and what `list_processes` and `read_output` report about it.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::SystemTime;

use serde_json::{Map, Value, json};
use tokio::sync::watch;

use super::KILL_WAIT;
use crate::exec::control::Control;
use crate::exec::input::SharedInput;
use crate::exec::output::{ArtifactFile, Record};
use crate::{CancelFlag, ToolContext, ToolError};

/// One background process.
#[derive(Debug)]
pub(super) struct Job {
    pub(super) handle: String,
    pub(super) command: String,
    pub(super) pid: u32,
    pub(super) started: SystemTime,
    /// The session that started it (see the module doc).
    pub(super) owner: String,
    /// It runs in a terminal.
    pub(super) tty: bool,
    /// The job's log file, known from the start: `read_output` pages through it while
    /// the job runs as well as after it ended.
    pub(super) log_path: PathBuf,
    /// Bytes the process wrote (the log may hold fewer: it is capped).
    pub(super) bytes: AtomicU64,
    /// Bytes in the log so far (the file may be longer: room reserved ahead).
    pub(super) logged: AtomicU64,
    pub(super) kill: CancelFlag,
    /// true once the process ended and its output is all in the log.
    pub(super) done: watch::Sender<bool>,
    /// Bumped when output is logged and when the job ends: long polls wait on it.
    pub(super) progress: watch::Sender<u64>,
    /// None once it ended before it could be reached (no shim channel).
    pub(super) control: Option<Control>,
    /// Its standard input (a pipe, or its terminal), while it may still be written.
    pub(super) input: SharedInput,
    pub(super) state: Mutex<JobState>,
}

#[derive(Debug, Default)]
pub(super) struct JobState {
    pub(super) exit: (Option<i32>, Option<i32>),
    /// `meta.resources` once the job ended: (peak RSS bytes, CPU ms).
    pub(super) resources: (u64, u64),
    /// Why the job was stopped, when not by itself or `kill_process`: a limit, or a
    /// sandbox that could not be set up.
    pub(super) error: Option<toolvisor_protocol::ErrorBody>,
    /// Where the next `read_output` without `since` starts.
    pub(super) cursor: u64,
    pub(super) read_to_end: bool,
    /// Whether `write_input` may still write (mirrors `Job::input` for listings).
    pub(super) stdin_open: bool,
    /// The outcome of its `ready` condition (None: it had none).
    pub(super) ready: Option<bool>,
    /// The log's registration once the job ended (while it runs the pump holds it), so
    /// the artifacts pruning spares it as long as the job is in the table.
    pub(super) log: Option<ArtifactFile>,
}

impl Job {
    pub(super) fn finished(&self) -> bool {
        *self.done.borrow()
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait (bounded) until the process is gone.
    pub(super) async fn wait_done(&self) -> bool {
        let mut rx = self.done.subscribe();
        tokio::time::timeout(KILL_WAIT, rx.wait_for(|d| *d))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    pub(super) fn meta(&self) -> Map<String, Value> {
        let running = !self.finished();
        let st = self.lock();
        let mut m = Map::new();
        m.insert("process".into(), json!(self.handle));
        m.insert("pid".into(), json!(self.pid));
        m.insert("running".into(), json!(running));
        m.insert("exit_code".into(), json!(st.exit.0));
        if let Some(s) = st.exit.1 {
            m.insert("signal".into(), json!(s));
        }
        m.insert("tty".into(), json!(self.tty));
        m.insert("stdin_open".into(), json!(running && st.stdin_open));
        m.insert("ready".into(), json!(st.ready));
        let (rss, cpu) = st.resources;
        m.insert(
            "resources".into(),
            json!({"peak_rss_bytes": rss, "cpu_ms": cpu}),
        );
        if let Some(e) = &st.error {
            m.insert(
                "error".into(),
                json!({"type": e.kind, "message": e.message}),
            );
        }
        m
    }

    /// Whether `ctx`'s session may write to or signal this job (see the module doc).
    pub(super) fn check_owner(&self, ctx: &ToolContext, what: &str) -> Result<(), ToolError> {
        if ctx.takeover || ctx.session == self.owner {
            return Ok(());
        }
        Err(ToolError::invalid(format!(
            "{} was started by another session: only that session may {what} it \
             (a person can take it over: `toolvisor attach {}`, or a grant token for \
             this tool)",
            self.handle, self.handle
        )))
    }

    /// Remove the log file (the job leaves the table; only finished jobs do).
    pub(super) fn discard(&self) {
        let registration = self.lock().log.take();
        let _ = std::fs::remove_file(&self.log_path);
        drop(registration);
    }
}

/// Feeds a job's output into its log file.
pub(super) struct JobLog {
    pub(super) file: ArtifactFile,
    pub(super) job: Arc<Job>,
}

impl Record for JobLog {
    fn record(&mut self, data: &[u8]) {
        self.file.write(data);
        self.job.logged.store(self.file.written, Ordering::Release);
        // Release: whoever sees the count also finds those bytes in the file (written
        // just above, unbuffered).
        self.job
            .bytes
            .fetch_add(data.len() as u64, Ordering::Release);
        self.job.progress.send_modify(|n| *n += 1);
    }
}
