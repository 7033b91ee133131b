//! The command line: `serve`, the client commands, and the hidden `worker` and `reap`
//! entry points the supervisor re-executes itself as.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::workspace::{Discovery, Resolved, resolve};
use toolvisor_supervisor::serve::sandbox::NoNamespaces;

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
pub enum PolicyCommand {
    /// Say what the policy would do with a call, part by part, without running it or
    /// asking anyone. With --config, decide under that file (no daemon needed).
    Explain {
        /// The tool to decide (its name or an alias), as a call would name it.
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

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum FormatArg {
    Native,
    Openai,
    Mcp,
}

fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    // rmcp (MCP workers) says every message it gets at info: keep that for RUST_LOG.
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,rmcp=warn"));
    use std::io::IsTerminal;
    // A log line that cannot be written (the reader of stderr went away: a closed
    // pipe, a restarted journal) is dropped; the default would report it with
    // `eprintln!`, which panics on that same broken stderr and took the service down.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .log_internal_errors(false);
    let _ = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

/// The environment variable that carries `--log-format`.
pub const LOG_FORMAT_VAR: &str = "TOOLVISOR_LOG_FORMAT";

/// The binary's entry point.
pub fn main() {
    keep_inherited_descriptors_to_ourselves();
    let cli = Cli::parse();
    let code = match &cli.command {
        Command::Worker { group } => {
            // Workers log to the supervisor's stderr (inherited), e.g. the background
            // jobs a planned restart kills; RUST_LOG passes through to them.
            init_tracing(worker_log_format());
            if group.starts_with(toolvisor_supervisor::config::mcp::GROUP_PREFIX) {
                crate::mcp::worker::main(group)
            } else {
                toolvisor_workers::worker::main(group)
            }
        }
        Command::Reap { argv } => toolvisor_workers::reap::main(argv.clone()),
        Command::Serve { log_format } => {
            hand_log_format_to_workers(*log_format);
            run(&cli)
        }
        _ => {
            default_sigpipe();
            run(&cli)
        }
    };
    std::process::exit(code);
}

/// Whatever descriptors above the standard streams this process was started with (a
/// worker's link to the supervisor, a shim's report pipe, whatever the daemon's own
/// parent leaked into it) serve this process only: marked close-on-exec before anything
/// else runs, so no program it starts inherits them (docs/SANDBOX.md, "Descriptors").
/// A child that must get one (a worker its link) is handed it explicitly between fork
/// and exec. toolvisor uses no socket activation (`LISTEN_FDS`): nothing inherited is
/// meant to be passed on.
fn keep_inherited_descriptors_to_ourselves() {
    if let Err(e) = toolvisor_os::fds::cloexec_from(toolvisor_os::fds::FIRST_NON_STDIO) {
        eprintln!("toolvisor: cannot mark inherited descriptors close-on-exec: {e}");
    }
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

/// A worker logs the way the service that started it does ([`LOG_FORMAT_VAR`]).
fn worker_log_format() -> LogFormat {
    match std::env::var(LOG_FORMAT_VAR).as_deref() {
        Ok("json") => LogFormat::Json,
        _ => LogFormat::Text,
    }
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
    let serve = matches!(cli.command, Command::Serve { .. });
    if let Command::Serve { log_format } = cli.command {
        // Before anything can fail, so even a bad config is logged in the chosen format.
        init_tracing(log_format);
    }
    let how = match cli.command {
        Command::Serve { .. } | Command::Init { .. } => Discovery::Here,
        _ => Discovery::Nearest,
    };
    let resolved = resolve(
        cli.workspace.as_deref(),
        cli.config.as_deref(),
        cli.socket.as_deref(),
        how,
    );
    let r = match resolved {
        Ok(r) => r,
        Err(e) if serve => {
            tracing::error!("{e}");
            // EX_CONFIG for the service, so a supervisor of ours does not restart-loop.
            return 78;
        }
        Err(e) => {
            if let Command::Hook { host } = cli.command {
                return crate::commands::hook::unresolved(host, &e);
            }
            eprintln!("toolvisor: {e}");
            return 2;
        }
    };
    if let (Some(note), false) = (&r.note, serve) {
        eprintln!("toolvisor: note: {note}");
    }
    match &cli.command {
        Command::Serve { .. } => serve_cmd(r),
        Command::Init { force, host: None } => crate::commands::init::run(&r, *force),
        Command::Init { host: Some(h), .. } => crate::commands::init_host::run(&r, *h),
        Command::Hook { host } => crate::commands::hook::run(*host, &r),
        Command::Audit { command } => audit(command, &r),
        Command::Policy { command } => crate::commands::policy::run(command, &r),
        Command::Mcp { no_spawn, http } => {
            let opts = crate::mcp::Options {
                config: cli.config.clone(),
                no_spawn: *no_spawn,
                http: http.clone(),
            };
            crate::mcp::run(&r, opts)
        }
        other => crate::commands::run(other, &r),
    }
}

/// `serve`: the one command that needs the whole configuration, checked.
fn serve_cmd(r: Resolved) -> i32 {
    let config = match r.config() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("{e}");
            return 78;
        }
    };
    toolvisor_supervisor::serve::run(toolvisor_supervisor::serve::ServeArgs {
        host: toolvisor_supervisor::serve::HostHooks {
            probe_sandbox: |exe, workspace, hidden| {
                toolvisor_workers::sandbox::probe::probe(exe, workspace, hidden)
                    .map_err(|e| NoNamespaces(e.to_string()))
            },
            prepare_cgroups: toolvisor_workers::exec::cgroup::prepare_delegated_v2,
            wrap_worker: |init, argv, network, keep_fds| {
                let spec = toolvisor_workers::exec::server::ServerSpec {
                    argv,
                    network,
                    keep_fds,
                };
                toolvisor_workers::exec::server::command_line(init, spec).map_err(|e| e.to_string())
            },
        },
        workspace: r.workspace,
        config_file: r.config_file,
        config,
        socket: r.explicit_socket,
    })
}

/// `audit verify|tail` read the files directly: no daemon needed.
fn audit(cmd: &AuditCommand, r: &Resolved) -> i32 {
    let state_dir = &r.state_dir;
    let mut out = std::io::stdout();
    match cmd {
        AuditCommand::Verify { files } => {
            toolvisor_supervisor::audit::inspect::verify_cmd(state_dir, files, &mut out)
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
            toolvisor_supervisor::audit::inspect::tail_cmd(state_dir, opts, &mut out)
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
