//! The supervisor ↔ worker protocol: the same frame codec as clients, its own messages.
//!
//! A worker is `toolvisor worker --group G`, with its control socket on fd 3. The
//! supervisor sends `init`; the worker confines itself and answers `ready`; then the
//! supervisor sends `run` and `cancel` frames and the worker answers with `output` and
//! exactly one `done` per call.

use crate::ErrorBody;
use crate::message::{Guards, Status, Truncated};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;

mod announce;
mod settings;

pub use announce::{Annotations, AnnouncedTool, Connection};
pub use settings::{SkillsSettings, WebSettings};

/// A worker's exit code for a configuration error (EX_CONFIG): the supervisor does not
/// restart it.
pub const EXIT_CONFIG: i32 = 78;

/// The file descriptor on which a worker finds its control socket.
pub const CONTROL_FD: i32 = 3;

/// The environment variable every command carries: the supervisor instance that
/// started it, so a later instance can find and kill what a killed one left behind,
/// and a connection can be told to come from a command.
pub const MARKER_VAR: &str = "TOOLVISOR_INSTANCE";

/// The name prefix of every per-command cgroup (and of the daemon's own leaf,
/// `<prefix>daemon`), so the supervisor can tell a command's process by its cgroup.
pub const COMMAND_CGROUP_PREFIX: &str = "toolvisor-";

/// Test hook: `probe` or `command` makes the command sandbox fail to set up there, and
/// `holder` a session's loopback holder (docs/SANDBOX.md). The supervisor passes it to
/// workers.
pub const SANDBOX_TEST_FAIL_VAR: &str = "TOOLVISOR_SANDBOX_TEST_FAIL";

/// Test hook: a comma-separated list of `ip:port` that `web_fetch` treats as public
/// addresses, so a test's server on 127.0.0.1 can stand for "somewhere allowed" while
/// every other private address stays refused (docs/PROTOCOL.md §12). The supervisor
/// passes it to workers.
pub const WEB_TEST_ALLOW_VAR: &str = "TOOLVISOR_WEB_TEST_ALLOW";

/// How many of `slots` one session may hold (a group's call slots, a worker's
/// background processes): all but a quarter, at least one, so another session always
/// finds room.
pub fn session_share(slots: usize) -> usize {
    slots.saturating_sub((slots / 4).max(1)).max(1)
}

/// The `meta` field in which the exec worker hands the supervisor a staged command's
/// record (`toolvisor_os::staged::Manifest`): the supervisor takes it out, keeps it
/// behind `meta.token`, and a client never sees it.
pub const STAGED_META: &str = "staged_record";

/// The names inside every workspace root that commands may not change: what git, the
/// agent hosts and editors run or read as configuration (docs/SANDBOX.md). The
/// sandbox keeps those that exist read-only; the supervisor moves aside the ones a
/// command creates.
pub const PROTECTED_NAMES: [&str; 13] = [
    ".git/config",
    ".git/hooks",
    ".gitmodules",
    ".mcp.json",
    ".vscode",
    ".idea",
    ".envrc",
    ".claude",
    ".cursor",
    ".gemini",
    ".codex",
    ".windsurf",
    ".continue",
];

/// The message types a worker decodes; another `type` is refused, not guessed at.
pub const KNOWN_TO_WORKER: &[&str] = &[
    "init",
    "run",
    "cancel",
    "shutdown",
    "connect_answer",
    "relay_answer",
    "session_ended",
];
/// The message types the supervisor decodes from a worker.
pub const KNOWN_FROM_WORKER: &[&str] = &[
    "ready",
    "tools",
    "output",
    "done",
    "connect",
    "connection",
    "relay",
    "resource_updated",
];

/// Truncation thresholds and size caps (`[limits]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// `read_file` output over this many bytes is cut.
    pub file_max: usize,
    /// Bytes of a cut file output that are kept.
    pub file_keep: usize,
    /// Command output over this many bytes is cut (its full text goes to an artifact).
    pub shell_max: usize,
    /// Bytes kept from the start of cut command output.
    pub shell_head: usize,
    /// Bytes kept from the end of cut command output, where errors usually are.
    pub shell_tail: usize,
    /// Listings (`ls`, `glob`) over this many entries are cut.
    pub list_max: usize,
    /// Entries of a cut listing that are kept.
    pub list_keep: usize,
    /// Searches (`grep`) over this many matches are cut.
    pub search_max: usize,
    /// Matches of a cut search that are kept.
    pub search_keep: usize,
    /// The largest frame either side accepts; a result is cut to fit half of it.
    pub max_frame_bytes: usize,
    /// The most one artifact (a command's full output) may hold.
    pub artifacts_max_bytes: u64,
    /// The most the artifacts directory may hold at any moment; the oldest files go first.
    pub artifacts_total_bytes: u64,
    /// `read_many_files` output as a whole, then the marker.
    pub many_max: usize,
    /// The longest line `read_file` and `grep` show (and hold in memory), then the marker.
    pub line_max: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            file_max: 10240,
            file_keep: 5120,
            shell_max: 10240,
            shell_head: 1024,
            shell_tail: 4096,
            list_max: 1000,
            list_keep: 500,
            search_max: 100,
            search_keep: 50,
            max_frame_bytes: crate::DEFAULT_MAX_FRAME_BYTES,
            artifacts_max_bytes: 64 << 20,
            artifacts_total_bytes: 512 << 20,
            many_max: 1 << 20,
            line_max: 1 << 20,
        }
    }
}

/// The roots paths resolve against; `private` is the workspace itself.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Roots {
    /// The workspace (`private:/`, and paths without a scope).
    pub private: PathBuf,
    /// The `shared:/` root, when configured: writable by commands like the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<PathBuf>,
    /// The `public:/` root, when configured: readable, never writable by commands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<PathBuf>,
}

/// Settings of the exec group a worker needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecSettings {
    /// Host variables commands inherit (`workers.exec.env_passthrough`); every other is
    /// scrubbed.
    pub env_passthrough: Vec<String>,
    /// Variables set for every command (`workers.exec.env`).
    pub env: BTreeMap<String, String>,
    /// Paths outside the roots that commands may write (`workers.exec.writable`).
    pub writable: Vec<PathBuf>,
    /// Background commands one worker keeps at once (`workers.exec.max_jobs`).
    pub max_jobs: usize,
    /// `workers.exec.yield_ms`: a foreground command still running after this long goes
    /// on in the background (None: it runs to its end or deadline).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub yield_ms: Option<u64>,
    /// The supervisor instance's marker, put into every command's environment.
    pub instance: String,
    /// The toolvisor binary, to run commands under `toolvisor reap`.
    pub exe: PathBuf,
    /// How commands are confined (`workers.exec.sandbox`, `network`, `protected`,
    /// `limits`), as the supervisor resolved it for this host.
    #[serde(default)]
    pub sandbox: SandboxSettings,
}

/// The command sandbox a worker applies (see docs/SANDBOX.md).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxSettings {
    /// Each command gets its own user, mount, PID, network, IPC and UTS namespaces;
    /// false: Landlock and the reap shim only (the fallback).
    pub namespaces: bool,
    /// Commands share the host's network (`workers.exec.network`).
    pub network: bool,
    /// Extra read-only paths, relative to each workspace root (`workers.exec.protected`).
    pub protected: Vec<PathBuf>,
    /// The active config file: read-only for commands, refused by the edit tools.
    pub config_file: Option<PathBuf>,
    /// Absolute paths commands never see: the state directory and the socket.
    pub hidden: Vec<PathBuf>,
    /// The hidden paths no call's `reveal` (or `writable`) may reach: the state
    /// directory and the socket.
    pub unrevealable: Vec<PathBuf>,
    /// Per-command resource limits (`[workers.exec.limits]`).
    pub limits: ExecLimits,
    /// Why this host cannot build the sandbox (no user namespaces), whatever
    /// `workers.exec.sandbox` says; None where it can. An MCP server or external worker
    /// with `sandbox = "on"` does not start then.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
}

/// `[workers.exec.limits]`; 0 turns a limit off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecLimits {
    /// Memory of the whole command, all its processes, in MiB (a cgroup's limit where
    /// one can be made, else `RLIMIT_AS` per process).
    pub memory_mb: u64,
    /// Processes and threads a command may have at once.
    pub pids: u64,
    /// CPU seconds of the whole command where a cgroup measures it (`RLIMIT_CPU` per
    /// process always).
    pub cpu_s: u64,
    /// The largest file a command may write, in MiB (`RLIMIT_FSIZE`).
    pub file_mb: u64,
}

impl Default for ExecLimits {
    fn default() -> Self {
        ExecLimits {
            memory_mb: 4096,
            pids: 1024,
            cpu_s: 0,
            file_mb: 0,
        }
    }
}

/// The first frame a worker receives.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerInit {
    /// The tool group this worker serves (`search`, `edit`, `exec`, or an external one).
    pub group: String,
    /// This worker's slot in its group: background process handles name it.
    pub index: u32,
    /// Where paths resolve.
    pub roots: Roots,
    /// Paths no tool may show, read or write (state directory, config file).
    pub protected: Vec<PathBuf>,
    /// The supervisor's state directory, where artifacts are written.
    pub state_dir: PathBuf,
    /// The truncation thresholds and size caps.
    pub limits: Limits,
    /// What the exec group needs (other groups ignore it).
    pub exec: ExecSettings,
    /// Which process of this worker slot this is (1 for the first, then one more per
    /// restart): background process handles use it so a handle never names two jobs.
    #[serde(default)]
    pub generation: u64,
    /// `[web]`: what the web tools may reach and how much they fetch.
    #[serde(default)]
    pub web: WebSettings,
    /// `[skills]`: where the `meta` worker looks for skills.
    #[serde(default)]
    pub skills: SkillsSettings,
    /// For a group `mcp:NAME`: the MCP server this worker runs (`[mcp.servers.NAME]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpServerInit>,
}

/// How an MCP worker reaches its server (docs/MCP.md): a command it starts (stdio) or
/// a Streamable HTTP endpoint. `env` goes to that server only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpServerInit {
    /// The server's name (`NAME` of `[mcp.servers.NAME]`): its tools are announced as
    /// `NAME__TOOL`.
    pub name: String,
    /// The server's command line (stdio transport), program first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Or its Streamable HTTP endpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// Variables set for the server's process only.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Only these tools (the server's own names) are announced; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<String>>,
    /// How long the server has to answer `initialize` and `tools/list`.
    pub startup_timeout_ms: u64,
    /// What its tools' names start with: `NAME__` when absent, `""` mounts them under
    /// the server's own names (`prefix` of `[mcp.servers.NAME]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// Run the server's command in the command sandbox (`sandbox = "on"`, the
    /// default); false: as the daemon's user (`sandbox = "off"`).
    #[serde(default = "yes")]
    pub sandbox: bool,
    /// Give the sandboxed server the host's network (`network = true`).
    #[serde(default)]
    pub network: bool,
}

impl McpServerInit {
    /// What its tools' names start with: the configured `prefix`, or `NAME__`.
    pub fn tool_prefix(&self) -> String {
        self.prefix
            .clone()
            .unwrap_or_else(|| format!("{}__", self.name))
    }
}

fn yes() -> bool {
    true
}

/// Supervisor → worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToWorker {
    /// The worker's configuration; always the first frame.
    Init(Box<WorkerInit>),
    /// Run one call; exactly one `done` answers it.
    Run {
        /// The supervisor's number for the call, echoed in `output` and `done`.
        call: u64,
        /// The client's call id, used to name artifacts.
        name: String,
        /// The tool's canonical name (an alias is resolved before).
        tool: String,
        /// The arguments, already validated against the tool's schema.
        args: Value,
        /// Send `output` frames as the tool produces them.
        #[serde(default)]
        stream: bool,
        /// Milliseconds the call may run (the effective deadline).
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// The rule that allowed the call gives its commands the host's network.
        #[serde(default)]
        network: bool,
        /// The command's network goes through the egress proxy: these hosts connect,
        /// others are asked about (`connect`) or refused. None: no egress.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        egress: Option<crate::egress::Egress>,
        /// The session the call comes from: a background process belongs to the
        /// session that started it.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        session: String,
        /// The call carries a person's grant for its tool: it may write to or signal a
        /// background process another session started.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        takeover: bool,
    },
    /// Stop a call; its `done` still comes, with what it had.
    Cancel {
        /// The call to stop.
        call: u64,
    },
    /// Finish up and exit (the exec worker kills and logs its background jobs first).
    Shutdown,
    /// The answer to a `connect` question.
    ConnectAnswer {
        /// The question's number, from its `connect`.
        ask: u64,
        /// Whether the connection may be made.
        allow: bool,
    },
    /// A client's session ended (sent to MCP servers' workers only): what it held on
    /// the server (resource subscriptions) is let go.
    SessionEnded {
        /// The session's id.
        session: String,
    },
    /// The answer to a `relay`: the client's MCP result, or why there is none.
    RelayAnswer {
        /// The request's number, from its `relay`.
        ask: u64,
        /// The MCP result object.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// Why there is no result (the MCP server gets it as an error).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
}

/// How a call ended inside a worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// How the call ended, as the client will see it.
    pub status: Status,
    /// The result for the model.
    pub content: String,
    /// The result for a person (may differ: a diff rendered, colour left out).
    pub display: String,
    /// Why it failed, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// What was cut, when something was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Truncated>,
    /// Machine-readable extras of the tool (exit code, counts, paths).
    #[serde(default)]
    pub meta: Map<String, Value>,
}

impl Outcome {
    /// A successful outcome whose display is its content.
    pub fn ok(content: String) -> Self {
        Outcome {
            status: Status::Ok,
            display: content.clone(),
            content,
            error: None,
            truncated: None,
            meta: Map::new(),
        }
    }

    /// A failed outcome: `content` says what went wrong, for the model.
    pub fn err(error: ErrorBody) -> Self {
        let status = if error.kind.is_policy() {
            Status::Denied
        } else {
            match error.kind {
                crate::ErrorType::Timeout => Status::Timeout,
                crate::ErrorType::Cancelled => Status::Cancelled,
                crate::ErrorType::WorkerCrashed => Status::Crashed,
                _ => Status::Error,
            }
        };
        let content = format!("Error: {}", error.message);
        Outcome {
            status,
            display: content.clone(),
            content,
            error: Some(error),
            truncated: None,
            meta: Map::new(),
        }
    }
}

/// Worker → supervisor.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum FromWorker {
    /// The worker is confined and takes calls.
    Ready {
        /// The worker's own pid as it sees it (the supervisor audits the pid it spawned).
        pid: u32,
        /// The protections the worker applied to itself (an external worker's are
        /// ignored: the supervisor reports only what it enforces).
        #[serde(default)]
        guards: Guards,
        /// The tools this worker serves. Built-in workers announce none (their tools
        /// are compiled into the supervisor); an external worker or an MCP server's
        /// worker announces every tool it has.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tools: Vec<AnnouncedTool>,
    },
    /// The worker's tool set changed (an MCP server's `tools/list_changed`): the full
    /// new list replaces the announced one.
    Tools {
        /// The complete new list of tools.
        tools: Vec<AnnouncedTool>,
    },
    /// A chunk of a streaming call's output.
    Output {
        /// The call it belongs to.
        call: u64,
        /// `stdout` or `stderr`.
        stream: String,
        /// The text, as produced.
        data: String,
    },
    /// A command of `call` wants to connect to a host its egress does not list, and
    /// someone can be asked: one `connect_answer` with the same `ask` comes back.
    Connect {
        /// The call whose command connects (a background process's starting call).
        call: u64,
        /// The question's number, unique in this worker.
        ask: u64,
        /// The host name the command asked the proxy for.
        host: String,
        /// Its port.
        port: u16,
    },
    /// A connection through the egress proxy was refused or has closed: one audit
    /// record each.
    Connection(Connection),
    /// An MCP server asks its client something (sampling, elicitation) while `call`
    /// runs on it: passed to the call's client when it answers such requests; one
    /// `relay_answer` with the same `ask` comes back.
    Relay {
        /// The call on whose behalf the server asks.
        call: u64,
        /// The request's number, unique in this worker.
        ask: u64,
        /// The MCP method (`sampling/createMessage`, `elicitation/create`).
        method: String,
        /// Its params, as the server sent them.
        params: Value,
    },
    /// An MCP server's resource that a session subscribed to changed
    /// (`notifications/resources/updated`): published as a `resource_updated` event.
    ResourceUpdated {
        /// The resource's URI.
        uri: String,
    },
    /// A call ended; nothing more comes for it.
    Done {
        /// The call that ended.
        call: u64,
        /// How it ended.
        outcome: Outcome,
    },
}
