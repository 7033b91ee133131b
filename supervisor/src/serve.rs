//! `toolvisor serve`: lock the state directory, start the pools and the listener,
//! then obey signals until a drain ends the process.
//!
//! SIGTERM/SIGINT drain (stop accepting, let calls finish within the grace, cancel the
//! rest, stop the workers, remove socket and pidfile, exit 0); SIGHUP reloads the
//! configuration and restarts every worker, one per group at a time; SIGUSR1 logs a
//! status dump; SIGUSR2 rotates the audit log.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use ractor::Actor;
use tokio::signal::unix::{SignalKind, signal};

use crate::config::Config;
use crate::listener::{Listener, ListenerArgs};
use crate::service::{Paths, Service};
use crate::spawn::Spawner;
use crate::state::StateDir;

/// Everything `serve` needs from the command line.
pub struct ServeArgs {
    pub workspace: PathBuf,
    pub config_file: PathBuf,
    pub config: Config,
    pub socket: Option<PathBuf>,
}

/// Run the service; returns the process exit code.
pub fn run(args: ServeArgs) -> i32 {
    let state_dir = resolve(&args.workspace, &args.config.server.state_dir);
    let state = match StateDir::acquire(&state_dir) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return 1;
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolvisor: cannot start the runtime: {e}");
            return 70;
        }
    };
    let code = runtime.block_on(serve(args, state));
    runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

fn resolve(workspace: &std::path::Path, p: &std::path::Path) -> PathBuf {
    if p.is_absolute() { p.to_owned() } else { workspace.join(p) }
}

async fn serve(args: ServeArgs, state: StateDir) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("toolvisor: cannot find my own binary: {e}");
            return 70;
        }
    };
    let state_dir = state.dir.canonicalize().unwrap_or_else(|_| state.dir.clone());
    let socket = args.socket.clone().unwrap_or_else(|| state.socket.clone());
    let instance = instance_marker(&state_dir);
    crate::leftovers::kill(&instance);
    let spawner = match Spawner::start(tokio::runtime::Handle::current()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("toolvisor: cannot start the spawner thread: {e}");
            return 70;
        }
    };
    let paths = Paths { workspace: args.workspace.clone(), state_dir, socket: socket.clone(), config_file: args.config_file.clone(), exe };
    let service = match Service::start(paths, args.config, spawner, instance).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return 78;
        }
    };
    let listener = match state.bind(&socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            service.stop_workers().await;
            return 1;
        }
    };
    if let Err(e) = state.write_pidfile() {
        tracing::warn!("cannot write the pidfile: {e}");
    }
    let (listener_ref, _) = match Actor::spawn(None, Listener, ListenerArgs { service: service.clone(), listener }).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("toolvisor: cannot start the listener: {e}");
            return 70;
        }
    };
    tracing::info!(socket = %socket.display(), workspace = %args.workspace.display(), pid = std::process::id(), "serving");
    let code = obey_signals(&service).await;
    listener_ref.stop(None);
    let grace = Duration::from_millis(service.config().server.drain_grace_ms);
    service.drain(grace).await;
    service.stop_workers().await;
    state.cleanup();
    if socket != state.socket {
        let _ = std::fs::remove_file(&socket);
    }
    tracing::info!("stopped");
    code
}

/// The marker every command carries: which state directory, and which run of it.
fn instance_marker(state_dir: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(state_dir.as_os_str().as_encoded_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
    format!("{hex}-{}-{nanos}", std::process::id())
}

/// Wait for signals; returns the exit code once a drain was asked for.
async fn obey_signals(service: &Arc<Service>) -> i32 {
    let (Ok(mut term), Ok(mut int), Ok(mut hup), Ok(mut usr1), Ok(mut usr2)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
        signal(SignalKind::user_defined1()),
        signal(SignalKind::user_defined2()),
    ) else {
        tracing::error!("cannot install signal handlers");
        return 70;
    };
    loop {
        tokio::select! {
            _ = term.recv() => { tracing::info!("SIGTERM: draining"); return 0; }
            _ = int.recv() => { tracing::info!("SIGINT: draining"); return 0; }
            _ = hup.recv() => crate::reload::reload_and_restart(service).await,
            _ = usr1.recv() => {
                let status = crate::status::status(service, "sigusr1".into()).await;
                tracing::info!("status: {}", serde_json::to_string(&status).unwrap_or_default());
            }
            _ = usr2.recv() => tracing::info!("SIGUSR2: audit rotation requested"),
        }
    }
}
