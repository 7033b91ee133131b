//! `toolvisor mcp --http [ADDR]`: the same MCP bridge as on stdio, served over
//! Streamable HTTP at `/mcp` by rmcp's service, one daemon connection per MCP session.
//!
//! - [`args`]: the command-line options.
//! - [`auth`]: bearer tokens (`--token-file`), required unless bound to loopback.
//! - [`guard`]: the checks before rmcp's service (token, session owner, session
//!   limit); rmcp checks `Host`/`Origin` (DNS rebinding) and the body size.
//! - [`listen`]: the TCP accept loop.
//!
//! A session ends when the client deletes it or after `--idle-timeout` without a
//! request; its bridge, daemon connection and running calls end with it.

pub mod args;
pub mod auth;
pub mod guard;
mod listen;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
use tokio_util::sync::CancellationToken;

pub use args::HttpArgs;
use auth::Tokens;
use guard::Guard;

use crate::mcp::bridge::Bridge;
use crate::mcp::daemon::Daemon;
use crate::mcp::resources::ArtifactDir;
use crate::mcp::rounds::Rounds;
use crate::mcp::server::ToolvisorMcp;
use crate::workspace::Resolved;

/// Largest request body; a larger one is refused (413) as it streams in.
pub const MAX_BODY: usize = 4 << 20;
/// A session has this long to send `initialize` (at most; less with a shorter idle
/// timeout).
const INIT_TIMEOUT: Duration = Duration::from_secs(30);

/// Serve MCP over HTTP until interrupted; returns the exit code.
pub async fn serve(r: &Resolved, daemon: Option<Daemon>, args: &HttpArgs, addr: SocketAddr) -> i32 {
    let tokens = match tokens(args, addr) {
        Ok(t) => t,
        Err(why) => {
            eprintln!("toolvisor mcp: {why}");
            return 64;
        }
    };
    let listener = match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => l,
        Err(e) => {
            eprintln!("toolvisor mcp: cannot listen on {addr}: {e}");
            return 69;
        }
    };
    let local = listener.local_addr().unwrap_or(addr);
    // Start (or reach) the daemon now, so the first session is quick.
    let first = Bridge::new(r.socket.clone(), r.workspace.clone(), daemon.clone());
    if let Err(e) = first.conn().await {
        tracing::warn!("{e}");
    }
    drop(first);
    let stop = CancellationToken::new();
    let sessions = Arc::new(session_manager(args));
    let service = StreamableHttpService::new(
        factory(r, daemon),
        sessions.clone(),
        config(args, local, stop.clone()),
    );
    let guard = Arc::new(Guard::new(service, sessions, tokens, args.max_sessions));
    println!(
        "toolvisor mcp: serving MCP at http://{local}{}",
        guard::PATH
    );
    tokio::spawn(stop_on_signal(stop.clone()));
    listen::serve(listener, guard, stop).await;
    0
}

/// The tokens clients must present: required off loopback.
fn tokens(args: &HttpArgs, addr: SocketAddr) -> Result<Option<Tokens>, String> {
    match &args.token_file {
        Some(path) => Tokens::load(path).map(Some).map_err(|e| e.to_string()),
        None if addr.ip().is_loopback() => Ok(None),
        None => Err(format!(
            "--http {addr} is reachable from other machines: give the clients' bearer tokens \
             with --token-file FILE (one a line), or bind to 127.0.0.1"
        )),
    }
}

/// Each MCP session (or stateless request): its own bridge, so its own daemon
/// connection.
fn factory(
    r: &Resolved,
    daemon: Option<Daemon>,
) -> impl Fn() -> std::io::Result<ToolvisorMcp> + Send + Sync + 'static {
    let socket = r.socket.clone();
    let workspace = r.workspace.clone();
    let artifacts = ArtifactDir::new(&r.workspace, &r.state_dir);
    // A 2026-07-28 client is served statelessly, each request by a new instance: its
    // second round must find the call its first one parked.
    let rounds = Arc::new(Rounds::default());
    let tasks = Arc::new(crate::mcp::tasks::Tasks::default());
    move || {
        let bridge = Bridge::new(socket.clone(), workspace.clone(), daemon.clone());
        let server = ToolvisorMcp::new(
            Arc::new(bridge),
            workspace.clone(),
            artifacts.clone(),
            CancellationToken::new(),
        );
        Ok(server.with_rounds(rounds.clone()).with_tasks(tasks.clone()))
    }
}

fn session_manager(args: &HttpArgs) -> LocalSessionManager {
    let mut m = LocalSessionManager::default();
    m.session_config.keep_alive = Some(args.idle());
    m.session_config.init_timeout = Some(INIT_TIMEOUT.min(args.idle()));
    m
}

/// rmcp's checks: `Host` and `Origin` (loopback, the bound address and what
/// `--allow-host`/`--allow-origin` add), the body size, the server's end.
fn config(
    args: &HttpArgs,
    local: SocketAddr,
    stop: CancellationToken,
) -> StreamableHttpServerConfig {
    let mut hosts: Vec<String> = vec!["localhost".into(), "127.0.0.1".into(), "::1".into()];
    if !local.ip().is_unspecified() {
        hosts.push(local.ip().to_string());
    }
    hosts.extend(args.allow_hosts.iter().cloned());
    let mut origins: Vec<String> = ["http://localhost:*", "http://127.0.0.1:*", "http://[::1]:*"]
        .map(String::from)
        .to_vec();
    origins.extend(args.allow_origins.iter().cloned());
    StreamableHttpServerConfig::default()
        .with_allowed_hosts(hosts)
        .with_allowed_origins(origins)
        .enforce_origin_validation()
        .with_max_request_body_bytes(MAX_BODY)
        .with_cancellation_token(stop)
}

async fn stop_on_signal(stop: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return;
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    stop.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_required_off_loopback() {
        let args = HttpArgs::default();
        let open: SocketAddr = "0.0.0.0:8765".parse().unwrap_or_else(|_| unreachable!());
        let lo: SocketAddr = "127.0.0.1:8765".parse().unwrap_or_else(|_| unreachable!());
        assert!(tokens(&args, open).is_err());
        assert!(matches!(tokens(&args, lo), Ok(None)));
    }
}
