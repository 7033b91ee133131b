//! Background processes: `run_command` with `background: true` (or a foreground
//! command that yielded), `list_processes`, `read_output` ([`read`]), `write_input`
//! ([`write`]), `kill_process`, and `ready` ([`ready`]).
//!
//! A job's output goes to its own file under `<state_dir>/artifacts/` (capped like any
//! artifact), never to memory; `read_output` pages through that file. Handles are
//! `w<worker index>-<n>` so the supervisor can route later calls to this worker; `n`
//! counts from 1 in a worker's first process and from `1 + 1 000 000 × (g - 1)` in its
//! `g`th, so a handle kept across a restart names no new job (`read_output` of it says
//! the process is unknown instead of showing another job's output). A
//! finished job stays listed until its output was read to the end (it is then dropped
//! when the next job starts), and at most [`MAX_FINISHED`] finished jobs are kept.
//!
//! A job belongs to the session that started it: only that session may write to it or
//! signal it, unless the call carries a person's grant (`ToolContext::takeover`).
//! Reading is open to every session (the output is an artifact anyway).

mod job;
mod read;
mod ready;
mod signal;
mod write;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use toolvisor_protocol::worker::session_share;

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::{ExecLimits, Outcome, WorkerInit};

use super::ExecState;
use super::cgroup::CommandCgroup;
use super::input::{Prepared, SharedInput};
use super::launch::{Bounds, Running, supervise};
use super::output::{ArtifactFile, LogStart};
use super::run_command::{RunArgs, exit_parts};
use crate::{CancelFlag, ToolContext, ToolError};

use job::{Job, JobLog, JobState};
pub(crate) use ready::ReadySpec;
pub(crate) use write::check_size as check_input_size;

/// Finished jobs kept at most (oldest dropped first).
const MAX_FINISHED: usize = 100;
/// `max_jobs` when the settings leave it 0 (the config's default).
const DEFAULT_MAX_JOBS: usize = 64;
/// Handle numbers set aside for each process of a worker slot (see the module doc).
const HANDLES_PER_PROCESS: u64 = 1_000_000;
/// How long `kill_process` and shutdown wait for a job to be gone.
const KILL_WAIT: Duration = Duration::from_secs(12);
/// How long a new job's runner may take to hand over its terminal.
const TERMINAL_WAIT: Duration = Duration::from_secs(20);

/// The job table of one exec worker.
#[derive(Debug)]
pub(crate) struct Jobs {
    index: u32,
    max_jobs: usize,
    page: usize,
    table: Mutex<Table>,
}

#[derive(Debug, Default)]
struct Table {
    next: u64,
    jobs: Vec<Arc<Job>>,
}

/// A process about to become a job, and what it brings.
pub(crate) struct NewJob {
    pub command: String,
    pub proc: Running,
    pub input: SharedInput,
    /// Whether `input` may be written (see [`super::input::prepare`]).
    pub stdin_open: bool,
    /// Until when it may run (None: until it ends or is killed).
    pub deadline: Option<tokio::time::Instant>,
    pub cgroup: Option<CommandCgroup>,
    pub limits: ExecLimits,
}

/// A foreground command that yielded: its process, and the output it had written.
pub(crate) struct Yielded {
    pub job: NewJob,
    pub log: LogStart,
    /// Bytes it wrote (its log may hold fewer: capped).
    pub bytes: u64,
}

impl Jobs {
    pub(crate) fn new(init: &WorkerInit) -> Self {
        Jobs {
            index: init.index,
            max_jobs: match init.exec.max_jobs {
                0 => DEFAULT_MAX_JOBS,
                n => n,
            },
            page: init.limits.shell_max.max(4),
            table: Mutex::new(Table {
                next: init
                    .generation
                    .saturating_sub(1)
                    .saturating_mul(HANDLES_PER_PROCESS),
                jobs: Vec::new(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn find(&self, args: &Value) -> Result<Arc<Job>, ToolError> {
        let handle = args
            .get("process")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::invalid("process is required"))?;
        self.lock()
            .jobs
            .iter()
            .find(|j| j.handle == handle)
            .cloned()
            .ok_or_else(|| {
                ToolError::invalid(format!(
                    "no background process {handle:?} (list_processes shows them)"
                ))
            })
    }

    /// Whether `session` has a background process still running (its loopback is kept).
    pub(crate) fn busy(&self, session: &str) -> bool {
        self.lock()
            .jobs
            .iter()
            .any(|j| !j.finished() && j.owner == session)
    }

    /// A new handle, when there is room for one more running job.
    fn reserve(&self, session: &str) -> Result<String, ToolError> {
        let mut t = self.lock();
        prune(&mut t);
        let running = t.jobs.iter().filter(|j| !j.finished()).count();
        let own = t
            .jobs
            .iter()
            .filter(|j| !j.finished() && j.owner == session)
            .count();
        let share = session_share(self.max_jobs);
        if own >= share && running < self.max_jobs {
            return Err(ToolError::new(
                ErrorType::Overloaded,
                format!(
                    "this session already runs {own} background processes on this worker, \
                     its share of {} (the rest stays for other sessions): stop one with \
                     kill_process first",
                    self.max_jobs
                ),
            ));
        }
        if running >= self.max_jobs {
            return Err(ToolError::new(
                ErrorType::Overloaded,
                format!(
                    "this worker already runs {running} background processes (max {}): \
                     stop one with kill_process first",
                    self.max_jobs
                ),
            ));
        }
        t.next += 1;
        Ok(format!("w{}-{}", self.index, t.next))
    }

    /// Put a started process in the table and run it to its end in the background.
    /// `read` bytes of its log count as read already (a yielded command's output).
    fn admit(
        &self,
        handle: String,
        mut new: NewJob,
        log: ArtifactFile,
        (bytes, owner): (u64, &str),
    ) -> Arc<Job> {
        let tty = new.proc.tty;
        let stdin_open = new.stdin_open;
        let job = Arc::new(Job {
            handle,
            command: new.command,
            pid: new.proc.pid,
            started: SystemTime::now(),
            owner: owner.to_owned(),
            tty,
            log_path: log.path.clone(),
            bytes: AtomicU64::new(bytes),
            logged: AtomicU64::new(log.written),
            kill: CancelFlag::new(),
            done: watch::channel(false).0,
            progress: watch::channel(0).0,
            control: new.proc.take_control(),
            input: new.input,
            state: Mutex::new(JobState {
                cursor: log.written,
                stdin_open,
                ..JobState::default()
            }),
        });
        self.lock().jobs.push(Arc::clone(&job));
        tokio::spawn(run_job(
            Arc::clone(&job),
            new.proc,
            log,
            new.deadline,
            (new.cgroup, new.limits),
        ));
        job
    }

    /// Start a background job; return at once with its handle, or once it is `ready`.
    pub(crate) async fn start(
        &self,
        state: &ExecState,
        a: &RunArgs<'_>,
        ctx: &ToolContext,
    ) -> Result<Outcome, ToolError> {
        if !a.expose.is_empty() && ctx.egress.is_some() {
            return Err(ToolError::invalid(
                "expose publishes ports of the session's loopback, and a command whose \
                 network is a domain list runs on a loopback of its own: use one or the other",
            ));
        }
        let handle = self.reserve(&ctx.session)?;
        let file = state
            .artifacts
            .create(&format!("job-{handle}"))
            .map_err(|e| ToolError::internal(format!("cannot create the output file: {e}")))?;
        // The host side of `expose` first: a port taken on the host fails the call
        // before the process starts. Without a session loopback (the host's network,
        // or no namespaces) the process's ports are the host's already.
        let loopback = match (a.expose.is_empty(), ctx.network) {
            (false, false) => state.loopbacks.get(&ctx.session, true).await?,
            _ => None,
        };
        let listeners = match &loopback {
            Some(_) => Some(super::expose::Listeners::bind(&a.expose).await?),
            None => None,
        };
        let (mut proc, cgroup) =
            super::run_command::launch(state, a, ctx, (true, true), None).await?;
        // It runs on in the background: the next spare may start now.
        state.spares.refill();
        let setup = tokio::time::Instant::now() + TERMINAL_WAIT;
        let terminal = proc.attach_terminal(setup).await?;
        let input = terminal.or_else(|| proc.stdin.take());
        let Prepared { input, open, .. } =
            super::input::prepare(input, a.stdin, &CancelFlag::new());
        let new = NewJob {
            command: a.command.to_owned(),
            proc,
            input,
            stdin_open: open,
            deadline: a.timeout.map(|d| tokio::time::Instant::now() + d),
            cgroup,
            limits: ctx.init.exec.sandbox.limits.clone(),
        };
        let job = self.admit(handle, new, file, (0, &ctx.session));
        if let (Some(l), Some(h)) = (listeners, loopback) {
            l.forward(h, job.done.subscribe());
        }
        let mut out = match &a.ready {
            Some(r) => self.wait_ready(&job, r, ctx).await,
            None => {
                let mut out = Outcome::ok(format!(
                    "Started background process {} (pid {})",
                    job.handle, job.pid
                ));
                out.meta = job.meta();
                out
            }
        };
        if !a.expose.is_empty() {
            let exposed = super::expose::addresses(&a.expose);
            out.display = format!(
                "{}\n[exposed on the host: {}]",
                out.display,
                exposed.join(", ")
            );
            out.meta.insert("exposed".into(), json!(exposed));
        }
        Ok(out)
    }

    /// A handle for a foreground command about to yield, when there is room for it.
    pub(crate) fn reserve_for_yield(&self, session: &str) -> Result<String, ToolError> {
        self.reserve(session)
    }

    /// Make a yielded foreground command the job `handle` of `owner`; its meta.
    pub(crate) fn adopt(
        &self,
        state: &ExecState,
        handle: String,
        y: Yielded,
        owner: &str,
    ) -> Result<Map<String, Value>, String> {
        let log = match y.log {
            LogStart::File(f) => f,
            LogStart::Bytes(bytes) => {
                let mut f = state
                    .artifacts
                    .create(&format!("job-{handle}"))
                    .map_err(|e| format!("cannot create the output file of {handle}: {e}"))?;
                f.write(&bytes);
                f
            }
        };
        let job = self.admit(handle, y.job, log, (y.bytes, owner));
        let mut meta = job.meta();
        meta.insert("next".into(), json!(job.lock().cursor));
        Ok(meta)
    }

    /// `list_processes`: a table for the model, `meta.processes` for programs.
    pub(crate) fn list(&self) -> Outcome {
        let jobs = self.lock().jobs.clone();
        let live: Vec<u32> = jobs
            .iter()
            .filter(|j| !j.finished())
            .map(|j| j.pid)
            .collect();
        let mut ports = live
            .iter()
            .copied()
            .zip(super::ports::listening_each(&live));
        let mut rows = Vec::new();
        let mut text = String::new();
        for j in &jobs {
            let m = j.meta();
            let running = !j.finished();
            let listening = if running {
                ports
                    .find(|(pid, _)| *pid == j.pid)
                    .map(|p| p.1)
                    .unwrap_or_default()
            } else {
                Vec::new()
            };
            let bytes = j.bytes.load(Ordering::Acquire);
            let started = toolvisor_protocol::time::rfc3339(j.started);
            let exit = match (m.get("exit_code").and_then(Value::as_i64), m.get("signal")) {
                (Some(c), _) => c.to_string(),
                (None, Some(s)) => format!("sig {s}"),
                (None, None) => "-".into(),
            };
            text.push_str(&format!(
                "{:<10} {:<8} {:<8} {:<6} {:<10} {:<21} {}\n",
                j.handle,
                j.pid,
                if running { "running" } else { "exited" },
                exit,
                bytes,
                started,
                one_line(&j.command, 80)
            ));
            let mut row = m;
            row.insert("command".into(), json!(j.command));
            row.insert("started".into(), json!(started));
            row.insert(
                "state".into(),
                json!(if running { "running" } else { "exited" }),
            );
            row.insert("output_bytes".into(), json!(bytes));
            row.insert("listening".into(), json!(listening));
            rows.push(Value::Object(row));
        }
        let content = if jobs.is_empty() {
            "No background processes.".to_owned()
        } else {
            format!(
                "{:<10} {:<8} {:<8} {:<6} {:<10} {:<21} COMMAND\n{text}",
                "PROCESS", "PID", "STATE", "EXIT", "BYTES", "STARTED"
            )
        };
        let mut out = Outcome::ok(content);
        out.meta.insert("processes".into(), Value::Array(rows));
        out
    }

    /// Wait (bounded) until a job has ended; false when unknown or still running.
    #[cfg(test)]
    pub(crate) async fn wait(&self, handle: &str) -> bool {
        match self.find(&json!({ "process": handle })) {
            Ok(j) => j.wait_done().await,
            Err(_) => false,
        }
    }

    /// Kill every running job (worker shutdown) and log each.
    pub(crate) async fn shutdown(&self) {
        let jobs: Vec<Arc<Job>> = self
            .lock()
            .jobs
            .iter()
            .filter(|j| !j.finished())
            .cloned()
            .collect();
        for j in &jobs {
            j.kill.cancel();
        }
        for j in &jobs {
            let gone = j.wait_done().await;
            tracing::info!(
                process = %j.handle, pid = j.pid, command = %one_line(&j.command, 200), gone,
                "background process killed at worker shutdown"
            );
        }
    }
}

/// The job's life: pump its output into the log until it ends (or is killed), then
/// record how it ended and wake the waiters.
async fn run_job(
    job: Arc<Job>,
    mut proc: Running,
    file: ArtifactFile,
    deadline: Option<tokio::time::Instant>,
    (cgroup, limits): (Option<CommandCgroup>, ExecLimits),
) {
    let mut log = JobLog {
        file,
        job: Arc::clone(&job),
    };
    let cpu = super::run_command::cpu_watch(cgroup.as_ref(), limits.cpu_s);
    let bounds = Bounds {
        deadline,
        cancel: &job.kill,
        cpu,
        yield_at: None,
    };
    let ended = supervise(&mut proc, &mut log, None, bounds).await;
    let report = proc.report();
    let limit = super::limits::stopped_by(&ended, cgroup.as_ref(), &limits);
    // The group goes (killed and removed) with the job's last process.
    proc.retire(cgroup).await;
    log.file.seal();
    if let Ok(mut input) = job.input.try_lock() {
        *input = None;
    }
    {
        let mut st = job.lock();
        st.exit = exit_parts(ended.status);
        st.stdin_open = false;
        if let Some(r) = &report {
            st.resources = (r.peak_rss_bytes, r.cpu_ms);
        }
        st.error = match report.and_then(|r| r.setup_error) {
            Some(why) => Some(toolvisor_protocol::ErrorBody::new(
                ErrorType::InternalError,
                format!("the job's sandbox could not be set up, so it did not run: {why}"),
            )),
            None => limit.map(|l| super::limits::error(l, &limits)),
        };
        // Keep the log registered (spared by pruning) while the job stays listed.
        st.log = Some(log.file);
    }
    job.done.send_replace(true);
    job.progress.send_modify(|n| *n += 1);
}

/// Drop finished jobs read to their end, then the oldest finished beyond the cap.
fn prune(t: &mut Table) {
    t.jobs.retain(|j| {
        let gone = j.finished() && j.lock().read_to_end;
        if gone {
            j.discard();
        }
        !gone
    });
    let finished = t.jobs.iter().filter(|j| j.finished()).count();
    let mut excess = finished.saturating_sub(MAX_FINISHED);
    t.jobs.retain(|j| {
        if excess > 0 && j.finished() {
            excess -= 1;
            j.discard();
            return false;
        }
        true
    });
}

/// At most `max` chars on one line.
fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        flat.chars()
            .take(max.saturating_sub(1))
            .chain(['…'])
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use nix::sys::signal::Signal;
    use signal::parse_signal;

    #[test]
    fn one_session_leaves_a_quarter_of_the_slots_to_others() {
        assert_eq!(session_share(64), 48);
        assert_eq!(session_share(4), 3);
        assert_eq!(session_share(2), 1);
        assert_eq!(session_share(1), 1);
    }

    #[test]
    fn one_line_flattens_and_cuts() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }

    #[test]
    fn signals_by_name() {
        assert_eq!(parse_signal(&json!("INT")).unwrap(), Signal::SIGINT);
        assert_eq!(parse_signal(&json!("USR2")).unwrap(), Signal::SIGUSR2);
        for bad in [json!("SIGINT"), json!("int"), json!(9), json!("STOP")] {
            let e = parse_signal(&bad).unwrap_err();
            assert_eq!(e.kind, ErrorType::InvalidParams, "{bad}");
        }
    }

    #[test]
    fn grace_is_two_seconds() {
        assert_eq!(super::super::launch::GRACE, Duration::from_secs(2));
    }
}
