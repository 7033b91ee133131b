//! The command line: `serve`, the client commands, and the hidden `worker` and `reap`
//! entry points the supervisor re-executes itself as.

use std::path::{Path, PathBuf};

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::Config;

#[derive(Parser, Debug)]
#[command(name = "toolvisor", version, about = "A local supervisor that executes tools for LLM agents")]
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
    /// Log format of `serve`.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text)]
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
    let workspace = ws.canonicalize().map_err(|e| format!("workspace {}: {e}", ws.display()))?;
    let config_file = cli.config.clone().unwrap_or_else(|| workspace.join("toolvisor.toml"));
    if cli.config.is_some() && !config_file.exists() {
        return Err(format!("config file {} does not exist", config_file.display()));
    }
    let config = Config::load(&config_file).map_err(|e| e.to_string())?;
    let state_dir = absolute(&workspace, &config.server.state_dir);
    let state_dir = state_dir.canonicalize().unwrap_or(state_dir);
    let socket = cli.socket.clone().unwrap_or_else(|| crate::state::socket_path(&state_dir, &workspace));
    Ok(Resolved { workspace, config_file, config, socket, explicit_socket: cli.socket.clone() })
}

fn absolute(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() { p.to_owned() } else { base.join(p) }
}

fn init_tracing(format: LogFormat) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
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

/// The binary's entry point.
pub fn main() {
    let cli = Cli::parse();
    let code = match &cli.command {
        Command::Worker { group } => toolvisor_workers::worker::main(group),
        Command::Reap { argv } => toolvisor_workers::reap::main(argv.clone()),
        _ => run(&cli),
    };
    std::process::exit(code);
}

fn run(cli: &Cli) -> i32 {
    let r = match resolve(cli) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return 2;
        }
    };
    if matches!(cli.command, Command::Serve) {
        init_tracing(cli.log_format);
        return crate::serve::run(crate::serve::ServeArgs {
            workspace: r.workspace,
            config_file: r.config_file,
            config: r.config,
            socket: r.explicit_socket,
        });
    }
    crate::commands::run(&cli.command, &r)
}
