//! Background processes: `run_command` with `background: true`, `list_processes`,
//! `read_output`, `kill_process`.
//!
//! A job's output goes to its own file under `<state_dir>/artifacts/` (capped like any
//! artifact), never to memory; `read_output` pages through that file. Handles are
//! `w<worker index>-<n>` so the supervisor can route later calls to this worker; `n`
//! counts from 1 in a worker's first process and from `1 + 1 000 000 × (g - 1)` in its
//! `g`th, so a handle kept across a restart names no new job (`read_output` of it says
//! the process is unknown instead of showing another job's output). A
//! finished job stays listed until its output was read to the end (it is then dropped
//! when the next job starts), and at most [`MAX_FINISHED`] finished jobs are kept.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};
use tokio::sync::watch;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::{ExecLimits, Outcome, WorkerInit};

use super::ExecState;
use super::cgroup::CommandCgroup;
use super::launch::{Running, Spec, supervise};
use super::output::{ArtifactFile, Record, complete_prefix};
use super::run_command::{RunArgs, exit_parts};
use crate::{CancelFlag, ToolContext, ToolError};

/// Finished jobs kept at most (oldest dropped first).
const MAX_FINISHED: usize = 100;
/// `max_jobs` when the settings leave it 0 (the config's default).
const DEFAULT_MAX_JOBS: usize = 64;
/// Handle numbers set aside for each process of a worker slot (see the module doc).
const HANDLES_PER_PROCESS: u64 = 1_000_000;
/// How long `kill_process` and shutdown wait for a job to be gone.
const KILL_WAIT: Duration = Duration::from_secs(12);

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
        let st = self.lock();
        let mut m = Map::new();
        m.insert("process".into(), json!(self.handle));
        m.insert("pid".into(), json!(self.pid));
        m.insert("running".into(), json!(!self.finished()));
        m.insert("exit_code".into(), json!(st.exit.0));
        if let Some(s) = st.exit.1 {
            m.insert("signal".into(), json!(s));
        }
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
    }
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

    /// Start a background job and return at once with its handle.
    pub(crate) fn start(
        &self,
        state: &ExecState,
        a: &RunArgs<'_>,
        ctx: &ToolContext,
    ) -> Result<Outcome, ToolError> {
        let (cwd, cwd_path) = super::open_cwd(ctx, a.cwd)?;
        let env = super::env::build(std::env::vars(), &ctx.init.exec, a.env)?;
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
        let handle = format!("w{}-{}", self.index, t.next);
        let file = state
            .artifacts
            .create(&format!("job-{handle}"))
            .map_err(|e| ToolError::internal(format!("cannot create the output file: {e}")))?;
        let cgroup = state
            .cgroups
            .create()
            .map_err(|e| ToolError::internal(format!("cannot make the command's cgroup: {e}")))?;
        let spec = Spec {
            command: a.command,
            env: &env,
            cwd: &cwd,
            cwd_path: &cwd_path,
            instance: &ctx.init.exec.instance,
            merged: true,
            network: ctx.network,
            cgroup: cgroup.as_ref(),
        };
        let proc = state.launcher.spawn(&spec)?;
        let job = Arc::new(Job {
            handle: handle.clone(),
            command: a.command.to_owned(),
            pid: proc.pid,
            started: SystemTime::now(),
            log_path: file.path.clone(),
            bytes: AtomicU64::new(0),
            logged: AtomicU64::new(0),
            kill: CancelFlag::new(),
            done: watch::channel(false).0,
            state: Mutex::new(JobState::default()),
        });
        t.jobs.push(Arc::clone(&job));
        drop(t);
        let deadline = a.timeout.map(|d| tokio::time::Instant::now() + d);
        let limits = ctx.init.exec.sandbox.limits.clone();
        tokio::spawn(run_job(
            Arc::clone(&job),
            proc,
            file,
            deadline,
            (cgroup, limits),
        ));
        let mut out = Outcome::ok(format!(
            "Started background process {handle} (pid {})",
            job.pid
        ));
        out.meta = job.meta();
        Ok(out)
    }

    /// `list_processes`: a table for the model, `meta.processes` for programs.
    pub(crate) fn list(&self) -> Outcome {
        let jobs = self.lock().jobs.clone();
        let mut rows = Vec::new();
        let mut text = String::new();
        for j in &jobs {
            let m = j.meta();
            let running = !j.finished();
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

    /// `read_output`: a contiguous page of at most `shell_max` bytes from `since`
    /// (default: where the last read stopped), cut on a character boundary; `meta.next`
    /// is exactly where it ended. Works while the job runs: the log is read from disk
    /// as far as it has been written.
    pub(crate) fn read_output(&self, args: &Value) -> Result<Outcome, ToolError> {
        let job = self.find(args)?;
        // The state first, then the file: a job seen finished has its log complete, and
        // the page reports the state it was read under (`running`, `exit_code`).
        let meta = job.meta();
        let finished = job_finished(&meta);
        let mut st = job.lock();
        let since = args
            .get("since")
            .and_then(Value::as_u64)
            .unwrap_or(st.cursor);
        let logged = job.logged.load(Ordering::Acquire);
        let page = read_page(&job.log_path, since, self.page, finished, logged)?;
        st.cursor = page.next;
        if finished && page.next >= page.len {
            st.read_to_end = true;
        }
        drop(st);
        let mut out = Outcome::ok(String::from_utf8_lossy(&page.bytes).into_owned());
        out.meta = meta;
        out.meta.insert("next".into(), json!(page.next));
        out.meta.insert(
            "output_bytes".into(),
            json!(job.bytes.load(Ordering::Acquire)),
        );
        Ok(out)
    }

    /// `kill_process`: stop the job and everything it started, and wait until it is gone.
    pub(crate) async fn kill(&self, args: &Value) -> Result<Outcome, ToolError> {
        let job = self.find(args)?;
        let was_running = !job.finished();
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
    let ended = supervise(&mut proc, &mut log, None, deadline, &job.kill, cpu).await;
    let report = proc.report();
    let limit = super::limits::stopped_by(&ended, cgroup.as_ref(), &limits);
    // The group goes (killed and removed) with the job's last process.
    drop(cgroup);
    log.file.seal();
    {
        let mut st = job.lock();
        st.exit = exit_parts(ended.status);
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
}

/// Whether a [`Job::meta`] snapshot says the job had ended.
fn job_finished(meta: &Map<String, Value>) -> bool {
    meta.get("running").and_then(Value::as_bool) == Some(false)
}

/// One `read_output` page of a job's log.
#[derive(Debug)]
struct Page {
    bytes: Vec<u8>,
    /// Offset right after `bytes`.
    next: u64,
    /// The log's length when it was read.
    len: u64,
}

/// Read at most `max` bytes of the log at `path` from `since` (clamped to its length,
/// and to `logged`, what was written of it: the file may hold reserved room beyond).
/// Unless the job has `finished`, an incomplete UTF-8 character at the end of the page
/// is left for the next read: the rest of it may still be on its way.
fn read_page(
    path: &Path,
    since: u64,
    max: usize,
    finished: bool,
    logged: u64,
) -> Result<Page, ToolError> {
    let failed = |e: std::io::Error| ToolError::internal(format!("cannot read the output: {e}"));
    let file = std::fs::File::open(path).map_err(failed)?;
    let len = file.metadata().map_err(failed)?.len().min(logged);
    let since = since.min(len);
    let want = usize::try_from(len - since).map_or(max, |n| n.min(max));
    let mut bytes = vec![0u8; want];
    let mut n = 0;
    while n < want {
        match file.read_at(&mut bytes[n..], since + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) => return Err(failed(e)),
        }
    }
    bytes.truncate(n);
    let at_end = since + n as u64 >= len;
    bytes.truncate(page_cut(&bytes, at_end, finished));
    let next = since + bytes.len() as u64;
    Ok(Page { bytes, next, len })
}

/// Where a page of `bytes` ends: before a trailing incomplete character, unless the
/// log is complete and read to its end (then that character is all there is). A page
/// is never cut to nothing while more follows, so paging always advances.
fn page_cut(bytes: &[u8], at_end: bool, finished: bool) -> usize {
    if finished && at_end {
        return bytes.len();
    }
    match complete_prefix(bytes) {
        0 if !at_end => bytes.len(),
        c => c,
    }
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

    #[test]
    fn one_line_flattens_and_cuts() {
        assert_eq!(one_line("a\nb", 10), "a b");
        assert_eq!(one_line("abcdef", 4), "abc…");
    }

    #[test]
    fn pages_hold_back_a_trailing_partial_char_until_the_job_ends() {
        let euro = "€".as_bytes();
        let b = [b'a', euro[0], euro[1]];
        assert_eq!(page_cut(&b, true, false), 1, "running: wait for the rest");
        assert_eq!(page_cut(&b, false, true), 1, "finished, more follows");
        assert_eq!(
            page_cut(&b, true, true),
            3,
            "finished and at the end: all of it"
        );
        assert_eq!(page_cut(&b[1..], true, false), 0, "nothing whole yet");
        assert_eq!(page_cut(&b[1..], false, false), 2, "never stuck mid-log");
    }

    #[test]
    fn read_page_reads_a_growing_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        std::fs::write(&path, "one\n").unwrap();
        let p = read_page(&path, 0, 100, false, u64::MAX).unwrap();
        assert_eq!((p.bytes.as_slice(), p.next, p.len), (&b"one\n"[..], 4, 4));
        std::fs::write(&path, "one\ntwo\n").unwrap();
        let p = read_page(&path, p.next, 2, false, u64::MAX).unwrap();
        assert_eq!((p.bytes.as_slice(), p.next), (&b"tw"[..], 6));
        let p = read_page(&path, 99, 2, false, u64::MAX).unwrap();
        let p2 = read_page(&path, 0, 100, false, 3).unwrap();
        assert_eq!(p2.bytes, b"one", "never past what was logged");
        assert_eq!(
            (p.bytes.len(), p.next),
            (0, 8),
            "since past the end is clamped"
        );
    }

    #[test]
    fn grace_is_two_seconds() {
        assert_eq!(super::super::launch::GRACE, Duration::from_secs(2));
    }
}
