//! The `exec` group's tools. OWNER: exec helper.
//!
//! - [`run_command`]: `bash --noprofile --norc -c` under the `toolvisor reap` shim, bounded output capture,
//!   streaming, deadline and cancel, `stdin`, `tty`, `yield_ms`;
//! - [`jobs`]: background processes (`background: true` and `ready`, `list_processes`,
//!   `read_output`, `write_input`, `kill_process`);
//! - [`output`]: head/tail capture, artifact files, stream coalescing, the pipe pump;
//! - [`launch`]: starting a command and the kill path (SIGTERM, SIGKILL after 2 s);
//! - [`input`], [`control`], [`ansi`], [`ports`]: a command's input (pipe or terminal),
//!   its control channel (signals, its terminal), a terminal's output as text, and the
//!   ports a job listens on;
//! - [`stage`]: `stage: true`, a command whose workspace changes are held, not written;
//! - [`env`]: the scrubbed environment;
//! - [`cgroup`], [`limits`]: `[workers.exec.limits]` per command.

mod ansi;
pub mod cgroup;
mod control;
mod egress;
mod env;
mod expose;
mod input;
mod jobs;
mod launch;
mod limits;
mod output;
mod ports;
mod run_command;
mod stage;
mod widen;

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::tools;
use toolvisor_protocol::worker::{Outcome, WorkerInit};

use crate::{ToolContext, ToolError, context::outcome};
use cgroup::Cgroups;
pub use launch::server;
use launch::{Launcher, ShimLauncher};
use output::Artifacts;

/// State of one exec worker: how commands start, their cgroups, the artifacts
/// directory, and the background jobs.
#[derive(Debug)]
pub struct ExecState {
    launcher: Launcher,
    cgroups: Arc<Cgroups>,
    /// The sandbox built ahead of the next command.
    spares: launch::Spares,
    /// Each session's shared loopback.
    loopbacks: launch::Loopbacks,
    artifacts: Arc<Artifacts>,
    jobs: jobs::Jobs,
    /// The egress proxies' questions waiting for the supervisor's answer.
    asks: Arc<egress::Asks>,
}

impl ExecState {
    /// Commands run under `init.exec.exe reap` when that binary exists, in their own
    /// namespaces when the supervisor found the host allows them; otherwise directly
    /// in their own process group (logged: no orphan protection).
    pub fn new(init: &WorkerInit, cgroups: Cgroups) -> Self {
        let exe = &init.exec.exe;
        let launcher = if launcher_exists(init) {
            Launcher::Shim(Box::new(ShimLauncher::for_init(
                init,
                cgroups.mechanism().is_some(),
                init.exec.sandbox.namespaces,
            )))
        } else {
            tracing::warn!(
                "no toolvisor binary at {:?}: commands run without the reap shim",
                exe
            );
            Launcher::Direct
        };
        Self::with_launcher(init, launcher, cgroups)
    }

    /// The cgroups commands of this worker get (none without a limit, or outside the
    /// exec group). Found before the worker confines itself: Landlock would then keep
    /// it from making groups, so their directories join its writable paths.
    pub fn cgroups(init: &WorkerInit) -> Cgroups {
        let limits = &init.exec.sandbox.limits;
        let off = toolvisor_protocol::worker::ExecLimits {
            memory_mb: 0,
            pids: 0,
            cpu_s: 0,
            file_mb: 0,
        };
        if init.group == tools::EXEC && *limits != off && launcher_exists(init) {
            Cgroups::detect(limits)
        } else {
            Cgroups::none(limits)
        }
    }

    fn with_launcher(init: &WorkerInit, launcher: Launcher, cgroups: Cgroups) -> Self {
        let cgroups = Arc::new(cgroups);
        let shim_env = env::build(std::env::vars(), &init.exec, None, false);
        let root = init
            .roots
            .private
            .canonicalize()
            .unwrap_or_else(|_| init.roots.private.clone());
        let (spares, loopbacks) = match shim_env {
            Ok(shim_env) if init.group == tools::EXEC => (
                launch::Spares::new(
                    &launcher,
                    Arc::clone(&cgroups),
                    root.clone(),
                    shim_env.clone(),
                    init.exec.instance.clone(),
                ),
                launch::Loopbacks::new(&launcher, root, shim_env),
            ),
            _ => Default::default(),
        };
        ExecState {
            launcher,
            cgroups,
            spares,
            loopbacks,
            artifacts: Artifacts::new(&init.state_dir, &init.limits),
            jobs: jobs::Jobs::new(init),
            asks: Arc::default(),
        }
    }

    /// Start building the first spare sandbox (call from the runtime, on a thread that
    /// lives as long as the worker: the spare's parent-death signal is tied to it).
    pub fn prewarm(&self) {
        self.spares.refill();
    }

    /// Whether commands run under the subreaper shim (the `subreaper` guard).
    pub fn subreaper(&self) -> bool {
        self.launcher.is_shim()
    }

    /// Whether commands get their own namespaces (the `namespaces` guard).
    pub fn namespaces(&self) -> bool {
        self.launcher.namespaces()
    }

    /// Whether each command gets a cgroup (the `cgroup` guard).
    pub fn cgroup(&self) -> bool {
        self.cgroups.mechanism().is_some()
    }

    /// How `[workers.exec.limits]` are enforced (the `limits` guard).
    pub fn limits_mechanism(&self) -> &'static str {
        self.cgroups.mechanism().unwrap_or("rlimit")
    }

    /// Where the supervisor's answers to egress questions go.
    pub fn egress_asks(&self) -> &egress::Asks {
        &self.asks
    }

    /// Kill and record every background job (worker shutdown).
    pub async fn shutdown(&self) {
        self.asks.refuse_all();
        self.spares.close();
        self.jobs.shutdown().await;
        self.loopbacks.close();
    }
}

/// Whether the toolvisor binary (for the reap shim) is there.
fn launcher_exists(init: &WorkerInit) -> bool {
    let exe = &init.exec.exe;
    !exe.as_os_str().is_empty() && exe.is_file()
}

/// Run one `exec` tool. Runs on the worker's tokio runtime; must honour
/// `ctx.cancel` and `ctx.deadline`.
pub async fn run(state: &ExecState, tool: &str, args: &Value, ctx: &ToolContext) -> Outcome {
    outcome(match tool {
        tools::run_command::NAME => run_command::run(state, args, ctx).await,
        tools::list_processes::NAME => Ok(state.jobs.list()),
        tools::read_output::NAME => state.jobs.read_output(args, ctx).await,
        tools::write_input::NAME => state.jobs.write_input(args, ctx).await,
        tools::kill_process::NAME => state.jobs.kill(args, ctx).await,
        _ => Err(ToolError::new(
            ErrorType::ToolNotFound,
            format!("the exec group has no tool {tool}"),
        )),
    })
}

/// Open the command's working directory: `cwd` resolved inside a root, or the
/// workspace root. It must be a directory.
fn open_cwd(ctx: &ToolContext, cwd: Option<&str>) -> Result<(OwnedFd, PathBuf), ToolError> {
    let (fd, host) = match cwd.filter(|c| !c.is_empty()) {
        Some(c) => {
            let r = ctx.resolver.resolve(c)?;
            (ctx.resolver.open_dir(&r)?, r.host)
        }
        None => {
            let root = workspace(ctx).to_path_buf();
            let f = std::fs::File::open(&root)
                .map_err(|e| ToolError::internal(format!("cannot open the workspace: {e}")))?;
            (OwnedFd::from(f), root)
        }
    };
    let st = nix::sys::stat::fstat(&fd)
        .map_err(|e| ToolError::internal(format!("cannot stat cwd: {e}")))?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(ToolError::invalid(format!(
            "cwd {} is not a directory",
            host.display()
        )));
    }
    Ok((fd, host))
}

/// The workspace root (the private root, canonical).
fn workspace(ctx: &ToolContext) -> &Path {
    ctx.resolver
        .roots
        .first()
        .map_or(ctx.init.roots.private.as_path(), |r| r.1.as_path())
}

#[cfg(test)]
mod tests;
