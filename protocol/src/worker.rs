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

/// The file descriptor on which a worker finds its control socket.
pub const CONTROL_FD: i32 = 3;

/// The environment variable every command carries: the supervisor instance that
/// started it, so a later instance can find and kill what a killed one left behind,
/// and a connection can be told to come from a command.
pub const MARKER_VAR: &str = "TOOLVISOR_INSTANCE";

/// The name prefix of every per-command cgroup (and of the daemon's own leaf,
/// `<prefix>daemon`), so the supervisor can tell a command's process by its cgroup.
pub const COMMAND_CGROUP_PREFIX: &str = "toolvisor-";

/// Test hook: `probe` or `command` makes the command sandbox fail to set up there
/// (docs/SANDBOX.md). The supervisor passes it to workers.
pub const SANDBOX_TEST_FAIL_VAR: &str = "TOOLVISOR_SANDBOX_TEST_FAIL";

pub const KNOWN_TO_WORKER: &[&str] = &["init", "run", "cancel", "shutdown"];
pub const KNOWN_FROM_WORKER: &[&str] = &["ready", "output", "done", "tools_changed"];

/// Truncation thresholds and size caps (`[limits]`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    pub file_max: usize,
    pub file_keep: usize,
    pub shell_max: usize,
    pub shell_head: usize,
    pub shell_tail: usize,
    pub list_max: usize,
    pub list_keep: usize,
    pub search_max: usize,
    pub search_keep: usize,
    pub max_frame_bytes: usize,
    pub artifacts_max_bytes: u64,
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
    pub private: PathBuf,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shared: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public: Option<PathBuf>,
}

/// Settings of the exec group a worker needs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ExecSettings {
    pub env_passthrough: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub writable: Vec<PathBuf>,
    pub max_jobs: usize,
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
    pub limits: ExecLimits,
}

/// `[workers.exec.limits]`; 0 turns a limit off.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ExecLimits {
    pub memory_mb: u64,
    pub pids: u64,
    pub cpu_s: u64,
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
    pub group: String,
    pub index: u32,
    pub roots: Roots,
    /// Paths no tool may show, read or write (state directory, config file).
    pub protected: Vec<PathBuf>,
    pub state_dir: PathBuf,
    pub limits: Limits,
    pub exec: ExecSettings,
    /// Which process of this worker slot this is (1 for the first, then one more per
    /// restart): background process handles use it so a handle never names two jobs.
    #[serde(default)]
    pub generation: u64,
    /// For a group `mcp:NAME`: the MCP server this worker runs (`[mcp.servers.NAME]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp: Option<McpServerInit>,
}

/// How an MCP worker reaches its server: a command it starts (stdio) or a Streamable
/// HTTP endpoint. `env` goes to that server only.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct McpServerInit {
    /// The server's name (`NAME` of `[mcp.servers.NAME]`).
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// How long the server has to answer `initialize` and `tools/list`.
    pub startup_timeout_ms: u64,
}

/// A tool a worker offers besides its group's built-in ones, announced in `ready` and
/// again in `tools_changed`: the MCP shape, as the server described it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnnouncedTool {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    #[serde(default)]
    pub description: String,
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    #[serde(
        rename = "outputSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub output_schema: Option<Value>,
    /// `readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint` (untrusted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub annotations: Option<Value>,
}

/// Supervisor → worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ToWorker {
    Init(Box<WorkerInit>),
    Run {
        call: u64,
        /// The client's call id, used to name artifacts.
        name: String,
        tool: String,
        args: Value,
        #[serde(default)]
        stream: bool,
        /// Milliseconds the call may run (the effective deadline).
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// The rule that allowed the call gives its commands the host's network.
        #[serde(default)]
        network: bool,
    },
    Cancel {
        call: u64,
    },
    Shutdown,
}

/// How a call ended inside a worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub status: Status,
    pub content: String,
    pub display: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Truncated>,
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
    Ready {
        pid: u32,
        guards: Guards,
        /// The tools this worker offers, when its group's tools are not built in.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        tools: Option<Vec<AnnouncedTool>>,
    },
    Output {
        call: u64,
        stream: String,
        data: String,
    },
    Done {
        call: u64,
        outcome: Outcome,
    },
    /// The worker's tools changed (an MCP server's `notifications/tools/list_changed`):
    /// the whole new list.
    ToolsChanged {
        tools: Vec<AnnouncedTool>,
    },
}
