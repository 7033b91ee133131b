//! MCP, both directions, on the official Rust SDK (`rmcp`).
//!
//! - `toolvisor mcp` ([`run`]): an MCP server on stdio backed by the daemon, which it
//!   starts when none serves the workspace ([`daemon`]) and reaches through one
//!   persistent connection ([`bridge`]); [`server`] answers the MCP requests, [`call`]
//!   runs one tool call with its [`progress`] and [`confirm`]ations, [`result`] shapes
//!   the answer, [`resources`] serves truncated outputs, [`passthrough`] the MCP
//!   servers' resources and prompts, [`listing`] the tool list,
//!   [`logging`] the client's log level.
//! - `toolvisor mcp --http [ADDR]` ([`http`]): the same server over Streamable HTTP,
//!   one daemon connection per MCP session.
//! - `toolvisor worker --group mcp:NAME` ([`worker`]): one configured MCP server as a
//!   supervised worker, its tools announced to the daemon.

pub mod bridge;
pub mod call;
mod child;
pub mod confirm;
pub mod daemon;
mod eof;
pub mod http;
pub mod listing;
pub mod logging;
pub mod passthrough;
pub mod progress;
pub mod relay;
pub mod resources;
pub mod result;
pub mod rounds;
pub mod server;
pub mod tasks;
pub mod worker;

use std::path::PathBuf;
use std::sync::Arc;

use rmcp::ServiceExt;

use crate::workspace::Resolved;
use bridge::Bridge;
use daemon::{Daemon, ServeCommand};
use resources::ArtifactDir;
use server::ToolvisorMcp;

/// How `toolvisor mcp` was asked to run.
pub struct Options {
    /// `--config` as given (the spawned daemon uses it too).
    pub config: Option<PathBuf>,
    /// `--no-spawn`: never start a daemon.
    pub no_spawn: bool,
    /// `--http [ADDR]` and its options: Streamable HTTP instead of stdio.
    pub http: http::HttpArgs,
}

/// Serve MCP on stdio until the client goes away; returns the exit code.
pub fn run(r: &Resolved, opts: Options) -> i32 {
    init_tracing();
    let daemon = match (opts.no_spawn, std::env::current_exe()) {
        (true, _) => None,
        (false, Ok(exe)) => {
            let cmd = ServeCommand {
                exe,
                workspace: r.workspace.clone(),
                config: opts.config.clone(),
                socket: r.explicit_socket.clone(),
            };
            match Daemon::new(cmd) {
                Ok(d) => Some(d),
                Err(e) => {
                    eprintln!("toolvisor mcp: {e}");
                    return 70;
                }
            }
        }
        (false, Err(e)) => {
            eprintln!("toolvisor mcp: cannot find the toolvisor binary: {e}");
            return 70;
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("toolvisor mcp: {e}");
            return 70;
        }
    };
    let code = match opts.http.http {
        Some(addr) => rt.block_on(http::serve(r, daemon.clone(), &opts.http, addr)),
        None => rt.block_on(serve(r, daemon.clone())),
    };
    // Calls still running end with the connection; the daemon we started drains.
    rt.shutdown_timeout(std::time::Duration::from_secs(2));
    if let Some(d) = daemon {
        d.stop();
    }
    code
}

async fn serve(r: &Resolved, daemon: Option<Daemon>) -> i32 {
    let state_dir = r.state_dir.clone();
    let bridge = Arc::new(Bridge::new(r.socket.clone(), r.workspace.clone(), daemon));
    // Connect (or start the daemon) now, so the first tools/list is quick; a failure
    // is said again, with what to do, by every call.
    if let Err(e) = bridge.conn().await {
        tracing::warn!("{e}");
    }
    // The client going away cancels its calls at once (rmcp would first wait for
    // their answers).
    let gone = tokio_util::sync::CancellationToken::new();
    let server = ToolvisorMcp::new(
        bridge,
        r.workspace.clone(),
        ArtifactDir::new(&r.workspace, &state_dir),
        gone.clone(),
    );
    let (rd, wr) = rmcp::transport::stdio_pipes();
    let rd = eof::EofReader::new(rd, gone);
    let running = match server.serve((rd, wr)).await {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("MCP session did not start: {e}");
            return 1;
        }
    };
    match running.waiting().await {
        Ok(_) => 0,
        Err(e) => {
            tracing::error!("MCP session ended badly: {e}");
            1
        }
    }
}

/// Logs go to stderr (MCP hosts collect them), warnings only unless `RUST_LOG` says
/// (rmcp's own: errors only, it warns of every error answer).
fn init_tracing() {
    use tracing_subscriber::EnvFilter;
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("warn,rmcp=error"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}

#[cfg(test)]
pub(crate) mod tests {
    /// Run a future to its end on a fresh runtime (unit tests of async helpers).
    pub fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map(|rt| rt.block_on(f))
            .unwrap_or_else(|e| panic!("runtime: {e}"))
    }
}
