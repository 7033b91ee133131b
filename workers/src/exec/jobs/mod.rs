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

mod read;
mod ready;
mod write;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use nix::sys::signal::Signal;
use serde_json::{Map, Value, json};
use tokio::sync::watch;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::{ExecLimits, Outcome, WorkerInit};

use super::ExecState;
use super::cgroup::CommandCgroup;
use super::control::{Control, SignalError};
use super::input::{Prepared, SharedInput};
use super::launch::{Bounds, Running, supervise};
use super::output::{ArtifactFile, LogStart, Record};
use super::run_command::{RunArgs, exit_parts};
use crate::{CancelFlag, ToolContext, ToolError};

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

/// One background process.
#[derive(Debug)]
struct Job {
    handle: String,
    command: String,
    pid: u32,
    started: SystemTime,
    /// The session that started it (see the module doc).
    owner: String,
    /// It runs in a terminal.
    tty: bool,
    /// The job's log file, known from the start: `read_output` pages through it while
    /// the job runs as well as after it ended.
    log_path: PathBuf,
    /// Bytes the process wrote (the log may hold fewer: it is capped).
    bytes: AtomicU64,
    /// Bytes in the log so far (the file may be longer: room reserved ahead).
    logged: AtomicU64,
    kill: CancelFlag,
    /// true once the process ended and its output is all in the log.
    done: watch::Sender<bool>,
    /// Bumped when output is logged and when the job ends: long polls wait on it.
    progress: watch::Sender<u64>,
    /// None once it ended before it could be reached (no shim channel).
    control: Option<Control>,
    /// Its standard input (a pipe, or its terminal), while it may still be written.
    input: SharedInput,
    state: Mutex<JobState>,
}

#[derive(Debug, Default)]
struct JobState {
    exit: (Option<i32>, Option<i32>),
    /// `meta.resources` once the job ended: (peak RSS bytes, CPU ms).
    resources: (u64, u64),
    /// Why the job was stopped, when not by itself or `kill_process`: a limit, or a
    /// sandbox that could not be set up.
    error: Option<toolvisor_protocol::ErrorBody>,
    /// Where the next `read_output` without `since` starts.
    cursor: u64,
    read_to_end: bool,
    /// Whether `write_input` may still write (mirrors `Job::input` for listings).
    stdin_open: bool,
    /// The outcome of its `ready` condition (None: it had none).
    ready: Option<bool>,
    /// The log's registration once the job ended (while it runs the pump holds it), so
    /// the artifacts pruning spares it as long as the job is in the table.
    log: Option<ArtifactFile>,
}

impl Job {
    fn finished(&self) -> bool {
        *self.done.borrow()
    }

    fn lock(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait (bounded) until the process is gone.
    async fn wait_done(&self) -> bool {
        let mut rx = self.done.subscribe();
        tokio::time::timeout(KILL_WAIT, rx.wait_for(|d| *d))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    fn meta(&self) -> Map<String, Value> {
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
    fn check_owner(&self, ctx: &ToolContext, what: &str) -> Result<(), ToolError> {
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
    fn discard(&self) {
        let registration = self.lock().log.take();
        let _ = std::fs::remove_file(&self.log_path);
        drop(registration);
    }
}

/// Feeds a job's output into its log file.
struct JobLog {
    file: ArtifactFile,
    job: Arc<Job>,
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

    /// A new handle, when there is room for one more running job.
    fn reserve(&self) -> Result<String, ToolError> {
        let mut t = self.lock();
        prune(&mut t);
        let running = t.jobs.iter().filter(|j| !j.finished()).count();
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
        let handle = self.reserve()?;
        let file = state
            .artifacts
            .create(&format!("job-{handle}"))
            .map_err(|e| ToolError::internal(format!("cannot create the output file: {e}")))?;
        let (mut proc, cgroup) = super::run_command::launch(state, a, ctx, true, true)?;
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
        if let Some(r) = &a.ready {
            return Ok(self.wait_ready(&job, r, ctx).await);
        }
        let mut out = Outcome::ok(format!(
            "Started background process {} (pid {})",
            job.handle, job.pid
        ));
        out.meta = job.meta();
        Ok(out)
    }

    /// A handle for a foreground command about to yield, when there is room for it.
    pub(crate) fn reserve_for_yield(&self) -> Result<String, ToolError> {
        self.reserve()
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
            let started = rfc3339(j.started);
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

    /// `kill_process`: stop the job and everything it started, and wait until it is
    /// gone; with `signal`, send only that signal to its process group.
    pub(crate) async fn kill(&self, args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
        let job = self.find(args)?;
        job.check_owner(ctx, "signal")?;
        let signal = match args.get("signal") {
            None | Some(Value::Null) => None,
            Some(v) => Some(parse_signal(v)?),
        };
        let was_running = !job.finished();
        if let (Some(sig), true) = (signal, was_running) {
            return send_signal(&job, sig).await;
        }
        if was_running {
            job.kill.cancel();
            if !job.wait_done().await {
                return Err(ToolError::internal(format!(
                    "{} (pid {}) did not stop within {} s",
                    job.handle,
                    job.pid,
                    KILL_WAIT.as_secs()
                )));
            }
        }
        let (code, _) = job.lock().exit;
        let text = if was_running {
            format!("Killed {} (pid {})", job.handle, job.pid)
        } else {
            let how = code.map_or("was killed by a signal".into(), |c| {
                format!("exited with code {c}")
            });
            format!(
                "{} (pid {}) had already ended: it {how}",
                job.handle, job.pid
            )
        };
        let mut out = Outcome::ok(text);
        out.meta = job.meta();
        Ok(out)
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

/// `signal` by name (`INT`, `TERM`, …: the schema's enum).
fn parse_signal(v: &Value) -> Result<Signal, ToolError> {
    let name = v.as_str().unwrap_or_default();
    let sig = match name {
        "INT" => Signal::SIGINT,
        "TERM" => Signal::SIGTERM,
        "KILL" => Signal::SIGKILL,
        "HUP" => Signal::SIGHUP,
        "QUIT" => Signal::SIGQUIT,
        "USR1" => Signal::SIGUSR1,
        "USR2" => Signal::SIGUSR2,
        _ => {
            return Err(ToolError::invalid(format!(
                "signal {v} is not one of {}",
                toolvisor_protocol::tools::SIGNALS.join(", ")
            )));
        }
    };
    Ok(sig)
}

/// Deliver `sig` to a running job's process group.
async fn send_signal(job: &Job, sig: Signal) -> Result<Outcome, ToolError> {
    let sent = match &job.control {
        Some(c) => c.signal(sig).await,
        None => Err(SignalError::Gone),
    };
    match sent {
        Ok(()) => {
            let mut out = Outcome::ok(format!(
                "Sent {} to {} (pid {})",
                sig.as_str(),
                job.handle,
                job.pid
            ));
            out.meta = job.meta();
            out.meta.insert("signal_sent".into(), json!(sig.as_str()));
            Ok(out)
        }
        Err(SignalError::Gone) => Err(ToolError::invalid(format!(
            "{} has ended: there is no process to signal",
            job.handle
        ))),
        Err(e) => Err(ToolError::internal(format!("{}: {e}", job.handle))),
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
    drop(cgroup);
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

/// RFC 3339 UTC with seconds, e.g. `2025-01-31T12:00:00Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Days since 1970-01-01 → (year, month, day) (H. Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_709_210_096);
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56Z");
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
