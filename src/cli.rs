//! The command line: `serve`, the client commands, and the hidden `worker` and `reap`
//! entry points the supervisor re-executes itself as.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

use toolvisor_supervisor::config::Config;

#[derive(Parser, Debug)]
#[command(
    name = "toolvisor",
    version,
    about = "A local supervisor that executes tools for LLM agents"
)]
pub struct Cli {
    /// The workspace (default: the current directory).
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// The socket (default: <state_dir>/toolvisor.sock).
    #[arg(long, global = true, env = "TOOLVISOR_SOCKET", value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// The configuration file (default: <workspace>/toolvisor.toml when present).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Log format of `serve` (and of its workers, which log to the same stderr).
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = LOG_FORMAT_VAR)]
    pub log_format: LogFormat,
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
    /// Run the service in the foreground.
    Serve,
    /// List the tools.
    Tools {
        #[arg(long, value_enum, default_value_t = FormatArg::Native)]
        format: FormatArg,
    },
    /// Call a tool: `toolvisor call read_file '{"path":"README.md"}'`.
    Call {
        tool: String,
        /// The arguments as a JSON object.
        args: Option<String>,
        /// Print the raw result as JSON.
        #[arg(long)]
        json: bool,
        #[arg(long, value_name = "MS")]
        timeout_ms: Option<u64>,
        #[arg(long, value_name = "ID")]
        trace: Option<String>,
        /// A grant token that lets the call pass an `ask`.
        #[arg(long, value_name = "TOKEN")]
        token: Option<String>,
    },
    /// Show the workers and the audit position.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Restart the workers (of one group), one at a time, after their calls end.
    Restart { group: Option<String> },
    /// Answer confirmations as they come (all pending ones first).
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
    /// Serve the tools as an MCP server on stdio, backed by the workspace's daemon
    /// (started, and stopped on exit, when none runs).
    Mcp {
        /// Never start a daemon: without one, calls say how to start it.
        #[arg(long)]
        no_spawn: bool,
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
pub enum PolicyCommand {
    /// Say what the policy would do with a call, part by part, without running it or
    /// asking anyone. With --config, decide under that file (no daemon needed).
    Explain {
        tool: String,
        /// The arguments as a JSON object.
        args: Option<String>,
        /// Print the `explanation` message as JSON.
        #[arg(long)]
        json: bool,
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
        #[arg(short = 'f', long)]
        follow: bool,
        #[arg(long, value_name = "ID")]
        trace: Option<String>,
        #[arg(long, value_name = "ID")]
        call: Option<String>,
        #[arg(long)]
        json: bool,
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

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    Native,
    Openai,
    Mcp,
}

/// Where the pieces are, resolved from the flags.
pub struct Resolved {
    pub workspace: PathBuf,
    pub config_file: PathBuf,
    pub config: Config,
    pub socket: PathBuf,
    pub explicit_socket: Option<PathBuf>,
}

pub fn resolve(cli: &Cli) -> Result<Resolved, String> {
    let ws = cli.workspace.clone().unwrap_or_else(|| PathBuf::from("."));
    let workspace = ws
        .canonicalize()
        .map_err(|e| format!("workspace {}: {e}", ws.display()))?;
    let config_file = cli
        .config
        .clone()
        .unwrap_or_else(|| workspace.join("toolvisor.toml"));
    if cli.config.is_some() && !config_file.exists() {
        return Err(format!(
            "config file {} does not exist",
            config_file.display()
        ));
    }
    let config = Config::load(&config_file).map_err(|e| e.to_string())?;
    let state_dir = absolute(&workspace, &config.server.state_dir);
    let state_dir = state_dir.canonicalize().unwrap_or(state_dir);
    let socket = cli.socket.clone().unwrap_or_else(|| {
        toolvisor_supervisor::serve::state_dir::socket_path(&state_dir, &workspace)
    });
    Ok(Resolved {
        workspace,
        config_file,
        config,
        socket,
        explicit_socket: cli.socket.clone(),
    })
}

/// The state directory (canonical when it exists).
pub fn state_dir(r: &Resolved) -> PathBuf {
    let dir = absolute(&r.workspace, &r.config.server.state_dir);
    dir.canonicalize().unwrap_or(dir)
}

fn absolute(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        base.join(p)
    }
}

fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    // rmcp (MCP workers) says every message it gets at info: keep that for RUST_LOG.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The environment variable that carries `--log-format`.
pub const LOG_FORMAT_VAR: &str = "TOOLVISOR_LOG_FORMAT";

/// The binary's entry point.
pub fn main() {
    let cli = Cli::parse();
    let code = match &cli.command {
        Command::Worker { group } => {
            // Workers log to the supervisor's stderr (inherited), e.g. the background
            // jobs a planned restart kills; RUST_LOG passes through to them.
            init_tracing(cli.log_format);
            if group.starts_with(toolvisor_supervisor::config::mcp::GROUP_PREFIX) {
                crate::mcp::worker::main(group)
            } else {
                toolvisor_workers::worker::main(group)
            }
        }
        Command::Reap { argv } => toolvisor_workers::reap::main(argv.clone()),
        Command::Serve => {
            hand_log_format_to_workers(cli.log_format);
            run(&cli)
        }
        _ => {
            default_sigpipe();
            run(&cli)
        }
    };
    std::process::exit(code);
}

/// Workers are this binary re-executed with a scrubbed environment that keeps
/// [`LOG_FORMAT_VAR`] (supervisor/src/spawn.rs), so their lines match the service's:
/// one JSON object per line with `--log-format json`.
fn hand_log_format_to_workers(format: LogFormat) {
    let value = match format {
        LogFormat::Text => "text",
        LogFormat::Json => "json",
    };
    // SAFETY: called first thing in `main`, before any thread exists.
    unsafe { std::env::set_var(LOG_FORMAT_VAR, value) };
}

/// Client commands die quietly on a closed stdout (`toolvisor tools | head`), like
/// other Unix tools, instead of panicking in `println!`. Rust starts with SIGPIPE
/// ignored; the service keeps it so (a client hanging up must not kill it).
fn default_sigpipe() {
    // SAFETY: restoring a signal's default disposition at start, before any thread.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn run(cli: &Cli) -> i32 {
    let serve = matches!(cli.command, Command::Serve);
    if serve {
        // Before anything can fail, so even a bad config is logged in the chosen format.
        init_tracing(cli.log_format);
    }
    let r = match resolve(cli) {
        Ok(r) => r,
        Err(e) if serve => {
            tracing::error!("{e}");
            // EX_CONFIG for the service, so a supervisor of ours does not restart-loop.
            return 78;
        }
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return 2;
        }
    };
    if serve {
        return toolvisor_supervisor::serve::run(toolvisor_supervisor::serve::ServeArgs {
            host: toolvisor_supervisor::serve::HostHooks {
                probe_sandbox: toolvisor_workers::sandbox::probe::probe,
                prepare_cgroups: toolvisor_workers::exec::cgroup::prepare_delegated_v2,
            },
            workspace: r.workspace,
            config_file: r.config_file,
            config: r.config,
            socket: r.explicit_socket,
        });
    }
    if let Command::Audit { command } = &cli.command {
        return audit(command, &r);
    }
    if let Command::Policy { command } = &cli.command {
        return crate::commands::policy::run(command, &r, cli.config.is_some());
    }
    if let Command::Mcp { no_spawn } = cli.command {
        let opts = crate::mcp::Options {
            config: cli.config.clone(),
            no_spawn,
        };
        return crate::mcp::run(&r, opts);
    }
    crate::commands::run(&cli.command, &r)
}

/// `audit verify|tail` read the files directly: no daemon needed.
fn audit(cmd: &AuditCommand, r: &Resolved) -> i32 {
    let state_dir = absolute(&r.workspace, &r.config.server.state_dir);
    let mut out = std::io::stdout();
    match cmd {
        AuditCommand::Verify { files } => {
            toolvisor_supervisor::audit::inspect::verify_cmd(&state_dir, files, &mut out)
        }
        AuditCommand::Tail {
            follow,
            trace,
            call,
            json,
            lines,
        } => {
            let opts = toolvisor_supervisor::audit::inspect::TailOptions {
                follow: *follow,
                trace_id: trace.clone(),
                call_id: call.clone(),
                json: *json,
                lines: Some(*lines),
            };
            toolvisor_supervisor::audit::inspect::tail_cmd(&state_dir, opts, &mut out)
        }
    }
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
