//! The worker process: `toolvisor worker --group G`.
//!
//! It reads `init` from its control socket (fd 3), confines itself, answers `ready`,
//! then serves `run` and `cancel` frames concurrently, answering each `run` with
//! exactly one `done`. EOF on the control socket means the supervisor is gone: the
//! worker stops its jobs and exits.

use std::collections::HashMap;
use std::os::fd::FromRawFd;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use toolvisor_protocol::tools::{self, Group};

use serde_json::Value;
use tokio::net::UnixStream;
use toolvisor_protocol::frame;
use toolvisor_protocol::message::Guards;
use toolvisor_protocol::worker::{
    AnnouncedTool, CONTROL_FD, FromWorker, KNOWN_TO_WORKER, Outcome, ToWorker, WorkerInit,
};
use toolvisor_protocol::writer::direct::DirectWriter;

use crate::context::{CancelFlag, Outgoing, OutputSink, ToolContext, ToolError};
use crate::exec::ExecState;
use crate::paths::Resolver;

/// Exit code for a configuration error: the supervisor does not restart on it.
pub use toolvisor_protocol::worker::EXIT_CONFIG;
/// Exit code for a broken control channel or runtime.
pub const EXIT_SOFTWARE: i32 = 70;

/// How long the worker waits for `init` before giving up.
const INIT_TIMEOUT: Duration = Duration::from_secs(10);

/// Entry point of `toolvisor worker --group G`; returns the exit code.
pub fn main(group: &str) -> i32 {
    let control = take_control();
    let init = match read_init(&control) {
        Ok(init) if init.group == group => init,
        Ok(init) => {
            tracing::error!(
                group,
                "worker asked for group {group} but init says {}",
                init.group
            );
            return EXIT_CONFIG;
        }
        Err(e) => {
            tracing::error!(group, "worker: no valid init frame: {e}");
            return EXIT_CONFIG;
        }
    };
    let journals = (group == tools::EDIT).then(|| crate::edit::temps::prepare(&init.state_dir));
    if group == tools::STATE {
        crate::state::prepare(&init.state_dir);
    }
    let cgroups = ExecState::cgroups(&init);
    // What the group writes under the state directory, besides the roots.
    let own = match Group::parse(group) {
        Some(Group::Edit) => vec![crate::edit::temps::dir(&init.state_dir)],
        Some(Group::State) => vec![crate::state::store::dir(&init.state_dir)],
        _ => Vec::new(),
    };
    let landlock = toolvisor_sandbox::confine(&init, &cgroups.bases(), &own);
    let roots = [
        Some(init.roots.private.as_path()),
        init.roots.shared.as_deref(),
        init.roots.public.as_deref(),
    ];
    let roots: Vec<&std::path::Path> = roots.into_iter().flatten().collect();
    let mut refused = init.protected.clone();
    refused.extend(toolvisor_sandbox::hidden::inside(
        &init.exec.sandbox.hidden,
        &roots,
    ));
    // What the repository's git configuration makes the host run (as git reads it
    // when this worker starts): the edit tools refuse it like `.git/config`.
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let mut edit_refused = init.exec.sandbox.protected.clone();
    edit_refused.extend(toolvisor_sandbox::gitcfg::guarded_names(
        &roots,
        home.as_deref(),
    ));
    let resolver = match Resolver::new(&init.roots, &refused) {
        Ok(r) => Arc::new(
            r.with_artifacts(&init.state_dir)
                .with_edit_protection(&edit_refused),
        ),
        Err(e) => {
            tracing::error!(group, "worker: cannot open the workspace roots: {e}");
            return EXIT_CONFIG;
        }
    };
    if let Some(journals) = journals {
        sweep_temps(journals, &resolver);
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .max_blocking_threads(64)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(group, "worker: cannot start a runtime: {e}");
            return EXIT_SOFTWARE;
        }
    };
    // On a runtime thread, not the main one: the thread that sees the socket become
    // readable then runs the frame loop itself (`block_on` here would take a
    // cross-thread wake-up per frame).
    let served = runtime.spawn(serve(control, Arc::new(init), resolver, landlock, cgroups));
    runtime.block_on(served).unwrap_or(EXIT_SOFTWARE)
}

/// Take the control socket the supervisor passed as fd 3, close-on-exec from now on:
/// it is this process's link alone, and a command, shim or server it starts must not
/// inherit it (a command holding it could speak as this worker: docs/SANDBOX.md,
/// "Descriptors"). The MCP worker of the binary takes its own with this too.
pub fn take_control() -> StdUnixStream {
    if let Err(e) = toolvisor_os::fds::cloexec(CONTROL_FD) {
        tracing::error!("worker: cannot mark the control socket close-on-exec: {e}");
    }
    // SAFETY: the supervisor passes the control socket as fd 3 and nothing else in this
    // process owns that descriptor.
    unsafe { StdUnixStream::from_raw_fd(CONTROL_FD) }
}

/// Remove the temp files dead edit workers left, before answering `ready`; without a
/// journal the worker still runs (a kill mid-write may then leave a hidden temp file).
fn sweep_temps(journals: std::io::Result<std::path::PathBuf>, resolver: &Resolver) {
    let swept = journals.and_then(|dir| crate::edit::temps::open(&dir, resolver));
    match swept {
        Ok(s) if s.removed > 0 => tracing::warn!(
            group = "edit",
            "removed {} temp file(s) left by {} dead worker(s)",
            s.removed,
            s.journals
        ),
        Ok(_) => {}
        Err(e) => tracing::warn!(
            group = "edit",
            "no temp-name journal ({e}); continuing without"
        ),
    }
}

/// Read the `init` frame synchronously, before any thread exists (the MCP worker of
/// the binary reads its own with this too).
pub fn read_init(control: &StdUnixStream) -> Result<WorkerInit, String> {
    use std::io::Read;
    control
        .set_read_timeout(Some(INIT_TIMEOUT))
        .map_err(|e| e.to_string())?;
    let mut head = [0u8; 4];
    (&*control)
        .read_exact(&mut head)
        .map_err(|e| e.to_string())?;
    let len = u32::from_be_bytes(head) as usize;
    if len > toolvisor_protocol::DEFAULT_MAX_FRAME_BYTES {
        return Err(format!("init frame of {len} bytes"));
    }
    let mut body = vec![0u8; len];
    (&*control)
        .read_exact(&mut body)
        .map_err(|e| e.to_string())?;
    control.set_read_timeout(None).map_err(|e| e.to_string())?;
    match frame::decode::<ToWorker>(&body, KNOWN_TO_WORKER).map_err(|e| e.to_string())? {
        ToWorker::Init(init) => Ok(*init),
        other => Err(format!("expected init, got {other:?}")),
    }
}

/// Calls running in this worker, by the supervisor's call number.
type Running = Arc<Mutex<HashMap<u64, CancelFlag>>>;

async fn serve(
    control: StdUnixStream,
    init: Arc<WorkerInit>,
    resolver: Arc<Resolver>,
    landlock: Option<u32>,
    cgroups: crate::exec::cgroup::Cgroups,
) -> i32 {
    let exec = Arc::new(ExecState::new(&init, cgroups));
    exec.prewarm();
    let guards = guards(&init, &exec, landlock);
    let stream = match control
        .set_nonblocking(true)
        .and_then(|_| UnixStream::from_std(control))
    {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("worker: control socket: {e}");
            return EXIT_SOFTWARE;
        }
    };
    let (mut rd, wr) = stream.into_split();
    let (direct, drain) = DirectWriter::new(wr);
    let tx = Outgoing::new(direct);
    let writer = tokio::spawn(drain.run());
    let pid = std::process::id();
    let tools = announced(&init, &resolver);
    if !tx.send_now(&FromWorker::Ready { pid, guards, tools }) {
        return EXIT_SOFTWARE;
    }
    let running: Running = Arc::default();
    let max = init
        .limits
        .max_frame_bytes
        .max(toolvisor_protocol::DEFAULT_MAX_FRAME_BYTES);
    loop {
        let body = match frame::read_frame(&mut rd, max).await {
            Ok(Some(body)) => body,
            Ok(None) => break,
            Err(e) => {
                tracing::error!(group = %init.group, "worker: control socket: {e}");
                break;
            }
        };
        let msg = match frame::decode::<ToWorker>(&body, KNOWN_TO_WORKER) {
            Ok(m) => m,
            Err(e) => {
                tracing::error!(group = %init.group, "worker: bad frame from supervisor: {e}");
                continue;
            }
        };
        match msg {
            ToWorker::Run {
                call,
                name,
                tool,
                args,
                stream,
                timeout_ms,
                network,
                egress,
                session,
                takeover,
            } => {
                let cancel = CancelFlag::new();
                lock(&running).insert(call, cancel.clone());
                let ctx = ToolContext {
                    init: init.clone(),
                    resolver: resolver.clone(),
                    call,
                    name,
                    cancel,
                    output: stream.then(|| OutputSink {
                        call,
                        out: tx.clone(),
                    }),
                    deadline: timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms)),
                    network,
                    egress: egress.map(|egress| crate::context::EgressCtx {
                        egress,
                        out: tx.clone(),
                    }),
                    session,
                    takeover,
                };
                let job = Job {
                    tool,
                    args,
                    ctx,
                    exec: exec.clone(),
                    running: running.clone(),
                    tx: tx.clone(),
                };
                job.start();
            }
            ToWorker::Cancel { call } => {
                if let Some(flag) = lock(&running).get(&call) {
                    flag.cancel();
                }
            }
            ToWorker::ConnectAnswer { ask, allow } => exec.egress_asks().answer(ask, allow),
            // Built-in workers run no MCP server: nothing of theirs is relayed, and no
            // session holds anything in them.
            ToWorker::RelayAnswer { .. } | ToWorker::SessionEnded { .. } => {}
            ToWorker::Shutdown => break,
            ToWorker::Init(_) => {
                tracing::warn!(group = %init.group, "worker: ignoring a second init")
            }
        }
    }
    for flag in lock(&running).values() {
        flag.cancel();
    }
    exec.shutdown().await;
    drop(tx);
    let _ = writer.await;
    0
}

/// The built-in tools this worker names itself in `ready`: the `meta` worker's
/// `activate_skill` when it finds skills (found again at every start, so a SIGHUP,
/// which restarts it, rescans them). Other groups' tools are compiled in.
fn announced(init: &WorkerInit, resolver: &Resolver) -> Vec<AnnouncedTool> {
    if init.group != tools::META {
        return Vec::new();
    }
    crate::skills::announce(resolver, &init.skills.paths)
}

/// What this worker reports as active in `ready` (`status.guards`).
fn guards(init: &WorkerInit, exec: &ExecState, landlock: Option<u32>) -> Guards {
    let is_exec = init.group == tools::EXEC;
    let s = &init.exec.sandbox;
    let mut protected: Vec<String> = toolvisor_sandbox::protect::names(&s.protected)
        .iter()
        .map(|p| p.display().to_string())
        .collect();
    protected.extend(s.config_file.iter().map(|c| c.display().to_string()));
    Guards {
        landlock,
        openat2: crate::paths::openat2_available(),
        subreaper: is_exec && exec.subreaper(),
        cgroup: is_exec && exec.cgroup(),
        namespaces: is_exec && exec.namespaces(),
        network: is_exec && (!exec.namespaces() || s.network),
        // Read-only for commands only inside their namespaces (Landlock can only allow).
        protected: if is_exec && exec.namespaces() {
            protected
        } else {
            Vec::new()
        },
        limits: is_exec.then(|| exec.limits_mechanism().to_owned()),
        // The supervisor's canary says what holds (serve/verify.rs).
        verified: Default::default(),
    }
}

use toolvisor_os::sync::lock;

/// One `run` request on its way to a `done`.
struct Job {
    tool: String,
    args: Value,
    ctx: ToolContext,
    exec: Arc<ExecState>,
    running: Running,
    tx: Outgoing,
}

impl Job {
    /// Start the call: exec and web tools are async (they wait on processes and the
    /// network); the others are blocking file work, run on a blocking thread that also
    /// sends the `done` itself, one thread hand-off less than awaiting it from a task.
    fn start(self) {
        match Group::parse(&self.ctx.init.group) {
            Some(Group::Exec | Group::Web) => {
                tokio::spawn(self.run_async());
            }
            Some(Group::Search) => {
                if let Some(job) = self.run_inline() {
                    tokio::task::spawn_blocking(move || job.run_blocking());
                }
            }
            _ => {
                tokio::task::spawn_blocking(move || self.run_blocking());
            }
        }
    }

    /// A call small enough to answer here, on the frame loop (`read_file` of a small
    /// file): answered, None; else the job back, for a blocking thread.
    fn run_inline(self) -> Option<Self> {
        let run = std::panic::AssertUnwindSafe(|| {
            crate::search::run_inline(&self.tool, &self.args, &self.ctx)
        });
        let outcome = match std::panic::catch_unwind(run) {
            Ok(Some(o)) => o,
            Ok(None) => return Some(self),
            Err(_) => panicked(),
        };
        let tx = self.tx.clone();
        tx.send_now(&self.done(outcome));
        None
    }

    async fn run_async(self) {
        let outcome = match Group::parse(&self.ctx.init.group) {
            Some(Group::Web) => crate::web::run(&self.tool, &self.args, &self.ctx).await,
            _ => crate::exec::run(&self.exec, &self.tool, &self.args, &self.ctx).await,
        };
        let tx = self.tx.clone();
        tx.send_now(&self.done(outcome));
    }

    fn run_blocking(self) {
        let group = &self.ctx.init.group;
        let run = std::panic::AssertUnwindSafe(|| match Group::parse(group) {
            Some(Group::Search) => crate::search::run(&self.tool, &self.args, &self.ctx),
            Some(Group::Edit) => crate::edit::run(&self.tool, &self.args, &self.ctx),
            Some(Group::State) => crate::state::run(&self.tool, &self.args, &self.ctx),
            Some(Group::Meta) => crate::skills::run(&self.tool, &self.args, &self.ctx),
            Some(Group::Exec | Group::Web) | None => {
                ToolError::internal(format!("unknown group {group}")).into()
            }
        });
        // A tool that panics still answers (the panic message went to stderr).
        let outcome = std::panic::catch_unwind(run).unwrap_or_else(|_| panicked());
        let tx = self.tx.clone();
        // Written from this thread when nothing is queued before it: no hand-off.
        tx.send_now(&self.done(outcome));
    }

    /// Forget the call; its `done` frame, cut to fit a frame whatever the tool made.
    fn done(self, mut outcome: Outcome) -> FromWorker {
        let max = self.ctx.init.limits.max_frame_bytes;
        crate::truncate::fit_frame(&mut outcome, max);
        let call = self.ctx.call;
        lock(&self.running).remove(&call);
        FromWorker::Done { call, outcome }
    }
}

/// A tool that panicked still answers, as an internal error.
fn panicked() -> Outcome {
    ToolError::internal("the tool failed unexpectedly (it panicked)").into()
}
