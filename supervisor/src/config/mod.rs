//! `toolvisor.toml`: every table and key optional, unknown keys refused with their name
//! and line. Every key, its default and an example: docs/CONFIG.md.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

use toolvisor_protocol::worker::Limits;

mod policy;
mod toml_error;
mod validate;
mod workers;

pub use policy::{Action, Condition, Hazards, Mode, Operator, PolicyConfig, Rule};
use toml_error::describe_toml_error;
pub use workers::{BUILTIN_GROUPS, GroupConfig, SandboxMode, WorkersConfig};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("bad config {path}: {message}")]
    Parse { path: String, message: String },
    #[error("bad config {path}: {message}")]
    Invalid { path: String, message: String },
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub workspace: WorkspaceConfig,
    pub server: ServerConfig,
    pub supervisor: SupervisorConfig,
    pub policy: PolicyConfig,
    pub workers: WorkersConfig,
    pub edit: EditConfig,
    pub limits: Limits,
    pub audit: AuditConfig,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WorkspaceConfig {
    pub private: PathBuf,
    pub shared: Option<PathBuf>,
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    pub state_dir: PathBuf,
    pub drain_grace_ms: u64,
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SupervisorConfig {
    pub restart_max: u32,
    pub restart_window_ms: u64,
    pub backoff_initial_ms: u64,
    pub backoff_max_ms: u64,
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

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct EditConfig {
    pub preview_ttl_ms: u64,
}

impl Default for EditConfig {
    fn default() -> Self {
        EditConfig {
            preview_ttl_ms: 600_000,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fsync {
    #[default]
    Always,
    Never,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AuditConfig {
    pub fsync: Fsync,
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
