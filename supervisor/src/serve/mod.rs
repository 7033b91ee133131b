//! `toolvisor serve`: lock the state directory, start the pools and the listener,
//! then obey signals until a drain ends the process.
//!
//! SIGTERM/SIGINT drain (stop accepting, let calls finish within the grace, cancel the
//! rest, stop the workers, remove socket and pidfile, exit 0); a second one skips the
//! rest of the drain (the calls still open are cancelled at once). SIGHUP reloads the
//! configuration and restarts every worker, one per group at a time; SIGUSR1 logs a
//! status dump; SIGUSR2 rotates the audit log. The memory watchdog runs alongside, and
//! systemd hears of readiness and the stop ([`notify`]).

pub mod config_file;
pub mod leftovers;
pub mod notify;
pub mod reload;
pub mod state_dir;
pub mod verify;
pub mod watchdog;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::Actor;
use tokio::signal::unix::{SignalKind, signal};

use crate::call::service::{Paths, Service};
use crate::config::Config;
use crate::serve::state_dir::StateDir;
use crate::session::listener::{Listener, ListenerArgs};
use crate::workers::spawn::Spawner;

/// Everything `serve` needs from the command line.
pub struct ServeArgs {
    /// The workspace to serve.
    pub workspace: PathBuf,
    /// The configuration file (it may not exist: the defaults then).
    pub config_file: PathBuf,
    /// The configuration read from it.
    pub config: Config,
    /// `--socket`, when given; else the state directory's.
    pub socket: Option<PathBuf>,
    /// What the workers crate does for the host.
    pub host: HostHooks,
}

/// Host preparation that lives with the workers (the supervisor does not link them):
/// the binary passes the workers' functions in.
#[derive(Clone, Copy)]
pub struct HostHooks {
    /// Whether commands can have their own namespaces here: runs the shim once.
    /// `Err` says why not.
    pub probe_sandbox: crate::sandbox::ProbeFn,
    /// Prepare a delegated cgroup v2 tree for per-command cgroups, where there is one.
    pub prepare_cgroups: fn(),
    /// Put an external worker's command under the reap shim in the command sandbox.
    pub wrap_worker: crate::workers::confine::WrapFn,
}

/// Run the service; returns the process exit code.
pub fn run(args: ServeArgs) -> i32 {
    let state_dir = resolve(&args.workspace, &args.config.server.state_dir);
    let state = match StateDir::acquire(&state_dir, &args.workspace) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            return 1;
        }
    };
    if let Ok(v) = std::env::var(toolvisor_protocol::worker::WEB_TEST_ALLOW_VAR) {
        tracing::warn!(
            "{} is set: web_fetch treats {v} as public addresses (a test hook; unset it in production)",
            toolvisor_protocol::worker::WEB_TEST_ALLOW_VAR
        );
    }
    match config_file::ensure(&args.config_file) {
        Ok(true) => tracing::info!(
            "wrote an empty {} (every default), so that no command can plant one",
            args.config_file.display()
        ),
        Ok(false) => {}
        Err(e) => tracing::warn!(
            "cannot write {}: {e}; until it exists, a command could create it",
            args.config_file.display()
        ),
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!("cannot start the runtime: {e}");
            return 70;
        }
    };
    let code = runtime.block_on(serve(args, state));
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

fn resolve(workspace: &std::path::Path, p: &std::path::Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        workspace.join(p)
    }
}

async fn serve(args: ServeArgs, state: StateDir) -> i32 {
    // Handlers first: a signal that arrives while we start must not kill us half-way.
    let signals = match Signals::install() {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot install signal handlers: {e}");
            return 70;
        }
    };
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            tracing::error!("cannot find my own binary: {e}");
            return 70;
        }
    };
    let state_dir = state.dir.clone();
    let socket = args.socket.clone().unwrap_or_else(|| state.socket.clone());
    let instance = instance_marker(&state_dir);
    crate::serve::leftovers::kill(&instance);
    // Held changes of staged commands die with the daemon that held their tokens.
    let staged = toolvisor_os::staged::remove_leftovers(&state_dir);
    if staged > 0 {
        tracing::info!("removed {staged} staging directories left by an earlier daemon");
    }
    let spawner = match Spawner::start(tokio::runtime::Handle::current()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot start the spawner thread: {e}");
            return 70;
        }
    };
    let namespaces = crate::sandbox::probe(
        args.host.probe_sandbox,
        &exe,
        &args.workspace,
        &state_dir,
        &args.config,
    )
    .await;
    (args.host.prepare_cgroups)();
    let paths = Paths {
        workspace: args.workspace.clone(),
        state_dir: state_dir.clone(),
        socket: socket.clone(),
        config_file: args.config_file.clone(),
        exe,
        namespaces,
        wrap_worker: args.host.wrap_worker,
    };
    let audit = match open_audit(&state_dir, &args.config) {
        Ok(a) => a,
        Err(e) => {
            tracing::error!("{e}");
            return 1;
        }
    };
    record_start(&audit, &args.workspace, &instance).await;
    let service = match Service::start(paths, args.config, spawner, instance, audit.clone()).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("{e}");
            return 78;
        }
    };
    let listener = match state.bind(&socket) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("{e}");
            service.stop_workers().await;
            return 1;
        }
    };
    if let Err(e) = state.write_pidfile() {
        tracing::warn!("cannot write the pidfile: {e}");
    }
    let (listener_ref, _) = match Actor::spawn(
        None,
        Listener,
        ListenerArgs {
            service: service.clone(),
            listener,
        },
    )
    .await
    {
        Ok(l) => l,
        Err(e) => {
            tracing::error!("cannot start the listener: {e}");
            return 70;
        }
    };
    let watchdog = tokio::spawn(crate::serve::watchdog::run(service.clone()));
    let notifier = notify::Notifier::from_env();
    if let Some(n) = &notifier {
        n.send(&notify::ready_message(&format!(
            "serving {}",
            args.workspace.display()
        )));
    }
    tracing::info!(socket = %socket.display(), workspace = %args.workspace.display(), pid = std::process::id(), "serving");
    let verifying = service.clone();
    tokio::spawn(async move { verify::verify(&verifying).await });
    let mut signals = signals;
    let code = obey_signals(&service, &mut signals, notifier.as_ref()).await;
    if let Some(n) = &notifier {
        n.send("STOPPING=1\nSTATUS=draining");
    }
    // Stop accepting by taking the socket's name away: new clients get "no such file".
    // The listener actor itself lives on until the drain ends, because stopping it
    // stops its sessions, and the calls in flight on them must still get their result.
    let _ = std::fs::remove_file(&socket);
    watchdog.abort();
    drain(&service, &mut signals).await;
    // A call sent on a connection still open from now on is refused before it starts
    // (and recorded as `rejected`), rather than waiting for a stopped worker.
    service.shutdown().cancel();
    stop_workers(&service).await;
    listener_ref.stop(None);
    let stopped = crate::audit::record::SupervisorStopped {
        reason: if code == 0 { "signal" } else { "error" },
    };
    if let Err(e) = audit.record(&stopped).await {
        tracing::error!("cannot record supervisor_stopped: {e}");
    }
    audit.close().await;
    state.cleanup();
    if socket != state.socket {
        let _ = std::fs::remove_file(&socket);
    }
    tracing::info!("stopped");
    code
}

/// Stop every group's workers at once (each: `Shutdown`, then KILL after 2 s), so a
/// stop takes one grace, not one per group. Their `worker_exited` records are queued
/// before this returns, hence before `supervisor_stopped`.
async fn stop_workers(service: &Service) {
    futures::future::join_all(service.pools().values().map(|p| p.stop())).await;
}

/// Open (and recover) the audit log, and say what recovery did.
fn open_audit(
    state_dir: &std::path::Path,
    config: &Config,
) -> Result<crate::audit::Audit, crate::audit::AuditError> {
    let (audit, recovery) = crate::audit::Audit::open(state_dir, &config.audit)?;
    if !recovery.is_clean() {
        tracing::warn!(
            torn_bytes = recovery.torn_bytes,
            interrupted = recovery.interrupted.len(),
            problems = recovery.problems.len(),
            set_aside = ?recovery.set_aside,
            "audit log recovered"
        );
        for p in &recovery.problems {
            tracing::warn!("audit: {p:?}");
        }
    }
    Ok(audit)
}

async fn record_start(audit: &crate::audit::Audit, workspace: &std::path::Path, instance: &str) {
    let r = crate::audit::record::SupervisorStarted {
        pid: std::process::id(),
        version: env!("CARGO_PKG_VERSION"),
        workspace: &workspace.display().to_string(),
        instance_id: instance,
    };
    if let Err(e) = audit.record(&r).await {
        tracing::error!("cannot record supervisor_started: {e}");
    }
}

/// The marker every command carries: which state directory, and which run of it.
fn instance_marker(state_dir: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(state_dir.as_os_str().as_encoded_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{hex}-{}-{nanos}", std::process::id())
}

/// The signals an operator may send.
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    usr1: tokio::signal::unix::Signal,
    usr2: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
            usr2: signal(SignalKind::user_defined2())?,
        })
    }
}

/// Wait for signals; returns the exit code once a drain was asked for.
async fn obey_signals(
    service: &Arc<Service>,
    s: &mut Signals,
    notifier: Option<&notify::Notifier>,
) -> i32 {
    loop {
        tokio::select! {
            _ = s.term.recv() => { tracing::info!("SIGTERM: draining (send it again to skip the drain)"); return 0; }
            _ = s.int.recv() => { tracing::info!("SIGINT: draining (Ctrl-C again to skip the drain)"); return 0; }
            _ = s.hup.recv() => {
                if let Some(n) = notifier {
                    n.send(&notify::reloading_message());
                }
                crate::serve::reload::reload_and_restart(service).await;
                if let Some(n) = notifier {
                    n.send("READY=1");
                }
            }
            _ = s.usr1.recv() => {
                let status = crate::session::status::status(service, "sigusr1".into()).await;
                crate::session::status::log(&status);
            }
            _ = s.usr2.recv() => {
                tracing::info!("SIGUSR2: rotating the audit log");
                service.audit().rotate();
            }
        }
    }
}

/// Let the calls still open finish within `server.drain_grace_ms`, then cancel the
/// rest. A second SIGINT or SIGTERM meanwhile skips the wait: the calls are cancelled
/// at once (and get their `cancelled` result); a third one stops waiting for them.
async fn drain(service: &Arc<Service>, s: &mut Signals) {
    let grace = Duration::from_millis(service.config().server.drain_grace_ms);
    tokio::select! {
        _ = service.drain(grace) => return,
        name = s.stop() => tracing::warn!(
            open = service.active_calls(),
            "second {name}: skipping the drain; cancelling the calls still open"
        ),
    }
    tokio::select! {
        _ = service.drain(Duration::ZERO) => {}
        name = s.stop() => tracing::warn!(
            open = service.active_calls(),
            "third {name}: not waiting for the cancelled calls"
        ),
    }
}

impl Signals {
    /// The next SIGINT or SIGTERM; its name.
    async fn stop(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}
