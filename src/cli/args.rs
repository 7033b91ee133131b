//! The command line's words: every subcommand and option, as clap reads them.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::commands::policy::PolicyCommand;
use crate::commands::tools::FormatArg;

/// The environment variable that carries `--log-format`.
pub const LOG_FORMAT_VAR: &str = "TOOLVISOR_LOG_FORMAT";

#[derive(Parser, Debug)]
#[command(
    name = "toolvisor",
    version,
    about = "A local supervisor that executes tools for LLM agents"
)]
pub struct Cli {
    /// The workspace (default: the nearest directory at or above this one with a
    /// toolvisor.toml or a served .toolvisor/; `serve` and `init`: this one).
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The socket (default: <state_dir>/toolvisor.sock).
    #[arg(long, global = true, env = "TOOLVISOR_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The configuration file (default: <workspace>/toolvisor.toml when present).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the service in the foreground (Ctrl-C drains and stops; twice skips the drain).
    Serve {
        /// How the service logs (its workers log to the same stderr, the same way).
        #[arg(long, value_enum, default_value_t = LogFormat::Text, env = LOG_FORMAT_VAR)]
        log_format: LogFormat,
    },
    /// Write a commented starter toolvisor.toml and .toolvisor/.gitignore here.
    Init {
        /// Replace an existing toolvisor.toml.
        #[arg(long)]
        force: bool,
        /// Instead: set this agent host up to use toolvisor (its MCP server entry and
        /// hooks, merged into its project config).
        #[arg(long, value_enum)]
        host: Option<crate::commands::init_host::HostKind>,
    },
    /// List the tools: a table on a terminal, JSON with --json, --format or in a pipe.
    Tools {
        /// Print JSON even on a terminal.
        #[arg(long)]
        json: bool,
        /// The JSON listing's shape (implies JSON; default: native).
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
    },
    /// Call a tool: `toolvisor call read_file '{"path":"README.md"}'`.
    Call {
        /// The tool's name or an alias (`toolvisor tools` lists them).
        tool: String,
        /// The arguments as a JSON object; `-` reads them from stdin (default: `{}`).
        args: Option<String>,
        /// Print the raw result as JSON.
        #[arg(long)]
        json: bool,
        /// The call's deadline in milliseconds (capped by workers.<group>.max_timeout_ms).
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        /// A trace id to group calls in the audit log (and to scope grants).
        #[arg(long, value_name = "ID")]
        trace: Option<String>,
        /// A grant token that lets the call pass an `ask`.
        #[arg(long, value_name = "TOKEN")]
        token: Option<String>,
        /// run_command only: run it in a terminal in the background and attach this
        /// terminal to it (Ctrl-] detaches).
        #[arg(long)]
        interactive: bool,
    },
    /// Attach this terminal to a background process that runs in a terminal (tty):
    /// type into it, see what it shows; Ctrl-] detaches.
    Attach {
        /// The handle (`meta.process`, `list_processes`).
        process: String,
    },
    /// Show the workers, the calls in flight and the audit position.
    Status {
        /// Print the raw answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Say which guards hold here, as the daemon's canary command found them in a real
    /// command sandbox (exit 0: every guard verified; 1: one or more do not hold).
    Doctor {
        /// Print `{"verified": {...}, "all": bool}`.
        #[arg(long)]
        json: bool,
    },
    /// Put back what calls changed in the workspace, newest first (a path changed
    /// since by anything else is left alone and reported). Exit 1 when anything was
    /// left alone or cannot be undone.
    Undo {
        /// Call ids as results and the audit log give them (`call_id`: `s3:c7`).
        calls: Vec<String>,
        /// Every call of this trace.
        #[arg(long, value_name = "ID")]
        trace: Option<String>,
        /// The newest N calls that changed something.
        #[arg(long, value_name = "N")]
        last: Option<u64>,
        /// Say what would be put back; change nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the answer as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Restart the workers (of one group), one at a time, after their calls end.
    Restart {
        /// `search`, `edit`, `exec`, `web`, `state`, `meta`, an external group
        /// (`[workers.NAME]`) or an MCP server's (`mcp:NAME`); default: every group.
        group: Option<String>,
    },
    /// Answer confirmations as agents ask (pending ones first); waits for the daemon.
    Approve {
        /// Approve everything without asking (for scripts; use with care).
        #[arg(long)]
        all: bool,
        /// Answer `remember: session` (approve the same call again without asking).
        #[arg(long)]
        session: bool,
        /// Stop after answering this many (default: run until interrupted).
        #[arg(long, value_name = "N")]
        count: Option<usize>,
    },
    /// Issue a grant token that lets matching calls pass an `ask`.
    Grant {
        /// A tool the token covers (repeatable).
        #[arg(long = "tool", required = true, value_name = "TOOL")]
        tools: Vec<String>,
        /// Only calls with this trace id may use it.
        #[arg(long, value_name = "ID")]
        trace: Option<String>,
        /// A workspace-relative path prefix the calls must stay under (repeatable).
        #[arg(long = "path", value_name = "PATH")]
        paths: Vec<String>,
        /// How long the token lives: 90s, 10m, 2h, or milliseconds.
        #[arg(long, default_value = "10m", value_parser = parse_duration_ms)]
        ttl: u64,
        /// Usable many times until it expires.
        #[arg(long)]
        reusable: bool,
    },
    /// Serve the tools as an MCP server on stdio (or Streamable HTTP with --http),
    /// backed by the workspace's daemon (started, and stopped on exit, when none runs).
    Mcp {
        /// Never start a daemon: without one, calls say how to start it.
        #[arg(long)]
        no_spawn: bool,
        #[command(flatten)]
        http: crate::mcp::http::HttpArgs,
    },
    /// Read and check the audit log (works with the service up or down).
    Audit {
        #[command(subcommand)]
        command: AuditCommand,
    },
    /// Inspect the policy: `toolvisor policy explain run_command '{"command":"ls"}'`.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Answer one hook event of an agent host (on stdin) in its JSON, by this
    /// workspace's policy (docs/HOSTS.md).
    Hook {
        #[arg(value_enum)]
        host: crate::commands::hook::Host,
    },
    /// Run one command in the workspace's sandbox through the daemon, with this
    /// terminal's streams: `toolvisor exec -- cargo test`.
    Exec(crate::commands::exec::ExecArgs),
    /// Internal: a worker process.
    #[command(hide = true)]
    Worker {
        #[arg(long)]
        group: String,
    },
    /// Internal: the subreaper shim commands run under.
    #[command(hide = true)]
    Reap {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        argv: Vec<String>,
    },
}

#[derive(Subcommand, Debug)]
pub enum AuditCommand {
    /// Check the hash chain; exit 1 with the first bad seq.
    Verify {
        /// Segments to check (default: every segment in the state directory).
        files: Vec<PathBuf>,
    },
    /// Print records (the last 20 by default).
    Tail {
        /// Keep printing records as they are written (across rotation).
        #[arg(short = 'f', long)]
        follow: bool,
        /// Only the records of this trace id.
        #[arg(long, value_name = "ID")]
        trace: Option<String>,
        /// Only the records of this call (`<session>:<id>`, as in `call_id`).
        #[arg(long, value_name = "ID")]
        call: Option<String>,
        /// Print the records as they are stored (JSON Lines).
        #[arg(long)]
        json: bool,
        /// How many of the last records to print.
        #[arg(short = 'n', long, default_value_t = 20)]
        lines: usize,
    },
}

/// `90s`, `10m`, `2h`, `500ms` or a number of milliseconds.
fn parse_duration_ms(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, ""), |i| s.split_at(i));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration like 90s, 10m or 2h"))?;
    let factor = match unit {
        "" | "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{s}` (use ms, s, m or h)"
            ));
        }
    };
    Ok(n * factor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse() {
        assert_eq!(parse_duration_ms("10m"), Ok(600_000));
        assert_eq!(parse_duration_ms("90s"), Ok(90_000));
        assert_eq!(parse_duration_ms("250"), Ok(250));
        assert!(parse_duration_ms("3 weeks").is_err());
    }

    #[test]
    fn global_flags_go_before_or_after_the_command() {
        let a = Cli::try_parse_from(["toolvisor", "--workspace", "/w", "status"]).unwrap();
        let b = Cli::try_parse_from(["toolvisor", "status", "--workspace", "/w"]).unwrap();
        assert_eq!(a.workspace, b.workspace);
    }
}
