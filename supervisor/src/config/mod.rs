//! `toolvisor.toml`: every table and key optional, unknown keys refused with their name
//! and line. Every key, its default and an example: docs/CONFIG.md.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use toolvisor_protocol::worker::{Limits, SkillsSettings, WebSettings};

pub mod isolation;
pub mod mcp;
mod policy;
mod toml_error;
mod validate;
mod workers;

pub use isolation::{Network, WorkerSandbox};
pub use policy::{
    Action, Condition, Confined, Expose, Hazards, Mode, Operator, PolicyConfig, Rule,
};
use toml_error::describe_toml_error;
pub use workers::{BUILTIN_GROUPS, DEFAULT_HIDDEN, GroupConfig, SandboxMode, WorkersConfig};

/// Why a configuration cannot be used: `serve` refuses to start (exit 78), a reload
/// keeps the old one. Each names the file, and the key or line at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file exists but cannot be read.
    #[error("cannot read config {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// Why it cannot be read.
        source: std::io::Error,
    },
    /// Not TOML, an unknown key, or a value of the wrong type.
    #[error("bad config {path}: {message}")]
    Parse {
        /// The file.
        path: String,
        /// What is wrong, with its line.
        message: String,
    },
    /// Well-formed, but a value out of range or keys that contradict each other.
    #[error("bad config {path}: {message}")]
    Invalid {
        /// The file.
        path: String,
        /// The key at fault and what it must be.
        message: String,
    },
}

/// The whole file. Every table may be left out: the defaults serve one workspace.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// `[workspace]`: the roots.
    pub workspace: WorkspaceConfig,
    /// `[server]`: the state directory, draining, per-connection bounds.
    pub server: ServerConfig,
    /// `[supervisor]`: how crashed workers are restarted.
    pub supervisor: SupervisorConfig,
    /// `[policy]`: what runs, what asks, what is refused.
    pub policy: PolicyConfig,
    /// `[workers.*]`: the groups and their processes.
    pub workers: WorkersConfig,
    /// `[edit]`: previews.
    pub edit: EditConfig,
    /// `[limits]`: truncation and size caps.
    pub limits: Limits,
    /// `[audit]`: durability and rotation of the log.
    pub audit: AuditConfig,
    /// `[web]`: what `web_fetch` may reach, its caps, and `web_search`'s endpoint.
    pub web: WebSettings,
    /// `[skills]`: where skills are found.
    pub skills: SkillsSettings,
    /// `[mcp.servers.NAME]`: MCP servers run as supervised workers.
    pub mcp: mcp::McpConfig,
    /// `[undo]`: the journal of what calls changed.
    pub undo: UndoConfig,
    /// `[network]`: the domains every command and `web_fetch` reach without asking.
    pub network: NetworkConfig,
    /// `[hooks]`: how `toolvisor hook` answers an agent host's own tool calls.
    pub hooks: HooksConfig,
}

/// `[hooks]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HooksConfig {
    /// An allowed shell command of the host comes back rewritten to run inside the
    /// sandbox (`toolvisor exec -- bash -c '…'`).
    pub wrap: bool,
}

/// `[network]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NetworkConfig {
    /// Domain names (`*.example.com` for any name below it) every command reaches
    /// through the egress proxy, and `web_fetch` fetches from, without a question.
    #[serde(deserialize_with = "domain_list")]
    pub allow: Vec<String>,
}

/// A list of domain names, each checked.
fn domain_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let list = Vec::<String>::deserialize(d)?;
    if let Some(bad) = list
        .iter()
        .find(|n| !toolvisor_protocol::egress::valid_domain(n))
    {
        return Err(serde::de::Error::custom(format!(
            "{bad:?} is not a domain name (names like api.example.com or *.example.com)"
        )));
    }
    Ok(list)
}

/// `[undo]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct UndoConfig {
    /// The most bytes of file contents the journal keeps; past it the oldest calls'
    /// records are dropped first.
    pub max_bytes: u64,
}

impl Default for UndoConfig {
    fn default() -> Self {
        UndoConfig { max_bytes: 1 << 30 }
    }
}

/// `[workspace]`: the roots tools may reach; relative paths are taken against the
/// workspace directory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceConfig {
    /// The workspace itself (`private:/`), by default the directory served.
    pub private: PathBuf,
    /// A second writable root (`shared:/`).
    pub shared: Option<PathBuf>,
    /// A read-only root (`public:/`): commands cannot write it, edits there are high risk.
    pub public: Option<PathBuf>,
}

impl Default for WorkspaceConfig {
    fn default() -> Self {
        WorkspaceConfig {
            private: PathBuf::from("."),
            shared: None,
            public: None,
        }
    }
}

/// `[server]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Where the socket, the audit log and the artifacts live (no tool may touch it).
    pub state_dir: PathBuf,
    /// On SIGTERM, how long calls in flight may finish before they are cancelled.
    pub drain_grace_ms: u64,
    /// Calls one connection may have open at once; more get `Overloaded`.
    pub max_open_calls: usize,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            state_dir: PathBuf::from(".toolvisor"),
            drain_grace_ms: 10_000,
            max_open_calls: 64,
        }
    }
}

/// `[supervisor]`: the restart policy of every worker (a crash loop must not spin).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorConfig {
    /// Restarts allowed within `restart_window_ms`; one more fails the worker.
    pub restart_max: u32,
    /// The window `restart_max` counts in.
    pub restart_window_ms: u64,
    /// The first delay before a restart; it doubles with each crash.
    pub backoff_initial_ms: u64,
    /// The longest delay before a restart.
    pub backoff_max_ms: u64,
    /// How long a failed worker waits before it tries again on its own.
    pub cooldown_ms: u64,
}

impl Default for SupervisorConfig {
    fn default() -> Self {
        SupervisorConfig {
            restart_max: 5,
            restart_window_ms: 30_000,
            backoff_initial_ms: 100,
            backoff_max_ms: 5_000,
            cooldown_ms: 30_000,
        }
    }
}

/// `[edit]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EditConfig {
    /// How long a preview's change can still be applied by its token.
    pub preview_ttl_ms: u64,
}

impl Default for EditConfig {
    fn default() -> Self {
        EditConfig {
            preview_ttl_ms: 600_000,
        }
    }
}

/// Whether the audit log is synced to disk before a call starts and before its
/// result is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fsync {
    /// A record the client relied on survives a power loss.
    #[default]
    Always,
    /// Faster; a crash of the machine may lose the last records.
    Never,
}

/// `[audit]`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    /// When records reach the disk.
    pub fsync: Fsync,
    /// A segment this large is rotated.
    pub max_bytes: u64,
}

impl Default for AuditConfig {
    fn default() -> Self {
        AuditConfig {
            fsync: Fsync::Always,
            max_bytes: 64 << 20,
        }
    }
}

impl Config {
    /// What the log says about this configuration at load: settings accepted but not
    /// (yet) enforced as written.
    pub fn warnings(&self) -> Vec<String> {
        let servers = self
            .mcp
            .servers
            .iter()
            .map(|(n, s)| (format!("mcp.servers.{n}"), &s.network));
        let external = self
            .workers
            .external
            .iter()
            .map(|(n, g)| (format!("workers.{n}"), &g.network));
        servers
            .chain(external)
            .filter_map(|(key, n)| isolation::domains_warning(&key, n))
            .collect()
    }

    /// Parse TOML text; errors name the key and line.
    pub fn parse(text: &str, path: &str) -> Result<Config, ConfigError> {
        let cfg: Config = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: path.to_owned(),
            message: describe_toml_error(text, &e),
        })?;
        cfg.validate().map_err(|message| ConfigError::Invalid {
            path: path.to_owned(),
            message,
        })?;
        Ok(cfg)
    }

    /// Load `path`; a missing file means the defaults.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        match std::fs::read_to_string(path) {
            Ok(text) => Config::parse(&text, &path.display().to_string()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Config::default()),
            Err(source) => Err(ConfigError::Read {
                path: path.display().to_string(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod documented;
#[cfg(test)]
mod tests;
