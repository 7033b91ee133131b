//! The command-line options of `toolvisor mcp --http`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Where the HTTP transport listens by default.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8765";

/// `toolvisor mcp --http [ADDR]` and the options that go with it.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct HttpArgs {
    /// Serve MCP over Streamable HTTP at ADDR (path /mcp) instead of stdio
    /// [default: 127.0.0.1:8765]. Port 0 picks a free port (the first line on stdout
    /// says which).
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = DEFAULT_ADDR)]
    pub http: Option<SocketAddr>,
    /// A file of bearer tokens, one a line: clients must send one
    /// (`Authorization: Bearer …`). Required unless ADDR is a loopback address.
    #[arg(long, value_name = "FILE", requires = "http")]
    pub token_file: Option<PathBuf>,
    /// Also accept this `Host` (a name the server is reached by, e.g. behind a proxy);
    /// loopback names and ADDR itself are always accepted. Repeatable.
    #[arg(long = "allow-host", value_name = "HOST", requires = "http")]
    pub allow_hosts: Vec<String>,
    /// Also accept requests from this browser origin (`https://app.example:443`);
    /// loopback origins are always accepted. Repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN", requires = "http")]
    pub allow_origins: Vec<String>,
    /// A session without a request for this many seconds ends.
    #[arg(long, value_name = "SECONDS", default_value_t = 300, requires = "http")]
    pub idle_timeout: u64,
    /// At most this many MCP sessions at once; a new one beyond is refused (503).
    #[arg(long, value_name = "N", default_value_t = 64, requires = "http")]
    pub max_sessions: usize,
}

impl HttpArgs {
    pub fn idle(&self) -> Duration {
        Duration::from_secs(self.idle_timeout.max(1))
    }
}
