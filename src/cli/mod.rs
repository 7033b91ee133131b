//! The command line: `serve`, the client commands, and the hidden `worker` and `reap`
//! entry points the supervisor re-executes itself as.

mod args;
mod client;

use clap::Parser;

use crate::workspace::{Discovery, Resolved, resolve};
pub use args::{AuditCommand, Cli, Command, LOG_FORMAT_VAR, LogFormat};
use toolvisor_supervisor::sandbox::NoNamespaces;

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
        Command::Reap { argv } => toolvisor_sandbox::reap::main(argv.clone()),
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
        other => client::run(other, &r),
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
                toolvisor_sandbox::probe::probe(exe, workspace, hidden)
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
