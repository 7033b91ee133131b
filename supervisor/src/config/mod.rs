//! `toolvisor.toml` (docs/PROTOCOL.md, docs/POLICY.md, docs/SANDBOX.md): every table and key optional, unknown keys refused
//! with their name and line.

pub mod mcp;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toolvisor_protocol::worker::Limits;

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
    /// `[mcp.servers.NAME]`: MCP servers run as supervised workers.
    pub mcp: mcp::McpConfig,
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

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Yolo,
    Workspace,
    #[default]
    Auto,
    Ask,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Allow,
    Deny,
    Ask,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Operator {
    #[serde(rename = "equals")]
    Equals,
    #[serde(rename = "contains")]
    Contains,
    #[serde(rename = "startsWith")]
    StartsWith,
    #[serde(rename = "matches")]
    Matches,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Condition {
    pub param: String,
    pub operator: Operator,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    pub tool: String,
    pub action: Action,
    #[serde(default)]
    pub risk: Option<toolvisor_protocol::tools::Risk>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// `hazards = "allow"`: argument hazards (docs/POLICY.md) do not make this rule ask.
    #[serde(default)]
    pub hazards: Hazards,
    /// An `allow` of `run_command` by this rule gives the command the host's network.
    #[serde(default)]
    pub network: Option<bool>,
}

impl Rule {
    /// A rule with no conditions and every optional key at its default.
    pub fn new(tool: &str, action: Action) -> Rule {
        Rule {
            tool: tool.into(),
            action,
            risk: None,
            message: None,
            conditions: Vec::new(),
            hazards: Hazards::default(),
            network: None,
        }
    }
}

/// What argument hazards do to a rule's allow: ask (the default) or nothing.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Hazards {
    #[default]
    Ask,
    Allow,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PolicyConfig {
    pub mode: Mode,
    pub confirm_timeout_ms: u64,
    pub rules: Vec<Rule>,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            mode: Mode::Auto,
            confirm_timeout_ms: 60_000,
            rules: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupConfig {
    /// Worker processes; `None` takes the group's default (search 2, edit 1, exec 2).
    pub count: Option<usize>,
    pub queue_max: usize,
    /// Calls one worker process runs at once; past it calls wait in the queue.
    pub max_in_flight: usize,
    pub default_timeout_ms: u64,
    pub max_timeout_ms: u64,
    pub max_rss_mb: u64,
    pub env_passthrough: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub writable: Vec<PathBuf>,
    pub max_jobs: usize,
    /// `exec` only: how commands are confined (`auto`, `required`, `off`).
    pub sandbox: SandboxMode,
    /// `exec` only: commands share the host's network.
    pub network: bool,
    /// `exec` only: more workspace-relative paths commands and edit tools may not change.
    pub protected: Vec<PathBuf>,
    /// `exec` only: `[workers.exec.limits]`.
    pub limits: toolvisor_protocol::worker::ExecLimits,
}

/// `workers.exec.sandbox`: namespaces for each command where the host allows them
/// (`auto`), or refuse to start without them (`required`), or never (`off`: Landlock
/// and the reap shim only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SandboxMode {
    #[default]
    Auto,
    Required,
    Off,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            count: None,
            queue_max: 256,
            max_in_flight: 32,
            default_timeout_ms: 30_000,
            max_timeout_ms: 600_000,
            max_rss_mb: 512,
            env_passthrough: vec!["PATH".into(), "HOME".into(), "LANG".into()],
            env: BTreeMap::new(),
            writable: Vec::new(),
            max_jobs: 64,
            sandbox: SandboxMode::Auto,
            network: false,
            protected: Vec::new(),
            limits: Default::default(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkersConfig {
    #[serde(default = "search_default")]
    pub search: GroupConfig,
    #[serde(default = "edit_default")]
    pub edit: GroupConfig,
    #[serde(default = "exec_default")]
    pub exec: GroupConfig,
}

fn search_default() -> GroupConfig {
    GroupConfig::default()
}
fn edit_default() -> GroupConfig {
    GroupConfig::default()
}
fn exec_default() -> GroupConfig {
    GroupConfig::default()
}

impl Default for WorkersConfig {
    fn default() -> Self {
        WorkersConfig {
            search: search_default(),
            edit: edit_default(),
            exec: exec_default(),
        }
    }
}

impl WorkersConfig {
    /// How many workers `group` runs.
    pub fn count(&self, group: &str) -> usize {
        let default = if group == "edit" { 1 } else { 2 };
        self.group(group).and_then(|g| g.count).unwrap_or(default)
    }

    pub fn group(&self, name: &str) -> Option<&GroupConfig> {
        match name {
            "search" => Some(&self.search),
            "edit" => Some(&self.edit),
            "exec" => Some(&self.exec),
            _ => None,
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

    /// Checks serde cannot express: ranges and cross-field rules.
    fn validate(&self) -> Result<(), String> {
        for (name, g) in [
            ("search", &self.workers.search),
            ("edit", &self.workers.edit),
            ("exec", &self.workers.exec),
        ] {
            if let Some(n) = g.count.filter(|n| !(1..=64).contains(n)) {
                return Err(format!("workers.{name}.count must be 1..=64, not {n}"));
            }
            if !(1..=1024).contains(&g.max_in_flight) {
                return Err(format!(
                    "workers.{name}.max_in_flight must be 1..=1024, not {}",
                    g.max_in_flight
                ));
            }
            if g.queue_max == 0 {
                return Err(format!("workers.{name}.queue_max must be at least 1"));
            }
            if g.default_timeout_ms == 0 || g.max_timeout_ms == 0 {
                return Err(format!("workers.{name}: timeouts must be at least 1 ms"));
            }
        }
        self.validate_exec_only()?;
        let l = &self.limits;
        for (key, keep, max) in [
            ("file_keep", l.file_keep, l.file_max),
            ("list_keep", l.list_keep, l.list_max),
            ("search_keep", l.search_keep, l.search_max),
            (
                "shell_head + shell_tail",
                l.shell_head + l.shell_tail,
                l.shell_max,
            ),
        ] {
            if keep > max {
                return Err(format!(
                    "limits.{key} ({keep}) must not exceed its maximum ({max})"
                ));
            }
        }
        if l.max_frame_bytes < 1024 {
            return Err("limits.max_frame_bytes must be at least 1024".into());
        }
        for (key, v) in [("many_max", l.many_max), ("line_max", l.line_max)] {
            if v < 1024 {
                return Err(format!("limits.{key} must be at least 1024, not {v}"));
            }
        }
        if self.server.max_open_calls == 0 {
            return Err("server.max_open_calls must be at least 1".into());
        }
        self.mcp.validate()?;
        for (i, rule) in self.policy.rules.iter().enumerate() {
            for c in &rule.conditions {
                if c.operator == Operator::Matches {
                    regex::Regex::new(&c.value).map_err(|e| {
                        format!(
                            "policy.rules[{i}] condition on `{}`: bad regex: {e}",
                            c.param
                        )
                    })?;
                }
            }
        }
        Ok(())
    }
}

impl Config {
    /// The sandbox keys belong to `[workers.exec]`; protected paths must stay inside
    /// the workspace.
    fn validate_exec_only(&self) -> Result<(), String> {
        let base = GroupConfig::default();
        for (name, g) in [
            ("search", &self.workers.search),
            ("edit", &self.workers.edit),
        ] {
            let set = g.sandbox != base.sandbox
                || g.network != base.network
                || !g.protected.is_empty()
                || g.limits != base.limits;
            if set {
                return Err(format!(
                    "workers.{name}: sandbox, network, protected and limits belong to [workers.exec]"
                ));
            }
        }
        for p in &self.workers.exec.protected {
            let inside = p.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::Normal(_) | std::path::Component::CurDir
                )
            });
            if !inside || p.as_os_str().is_empty() {
                return Err(format!(
                    "workers.exec.protected: `{}` must be a relative path inside the workspace",
                    p.display()
                ));
            }
        }
        Ok(())
    }
}

/// toml's message, plus the line number and the dotted key when it has a span (serde's
/// type errors say what was expected, not where: "invalid type: string, expected usize").
fn describe_toml_error(text: &str, e: &toml::de::Error) -> String {
    let msg = e.message().trim().to_owned();
    let Some(span) = e.span() else {
        return msg;
    };
    let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
    match key_at(text, span.start) {
        Some(key) if !msg.contains(&format!("`{key}`")) => format!("line {line}: `{key}`: {msg}"),
        _ => format!("line {line}: {msg}"),
    }
}

/// The dotted path of the innermost value whose span holds `offset` (`None` when the
/// text does not parse as TOML at all, or the offset is outside every value).
fn key_at(text: &str, offset: usize) -> Option<String> {
    let table = toml::de::DeTable::parse(text).ok()?;
    let mut best: Option<(usize, String)> = None;
    find_key(table.get_ref(), "", offset, &mut best);
    best.map(|(_, key)| key)
}

/// Depth-first search for the narrowest value span containing `offset`.
fn find_key(
    table: &toml::de::DeTable<'_>,
    prefix: &str,
    offset: usize,
    best: &mut Option<(usize, String)>,
) {
    for (key, value) in table {
        let path = if prefix.is_empty() {
            key.get_ref().to_string()
        } else {
            format!("{prefix}.{}", key.get_ref())
        };
        find_in_value(value, path, offset, best);
    }
}

fn find_in_value(
    value: &toml::Spanned<toml::de::DeValue<'_>>,
    path: String,
    offset: usize,
    best: &mut Option<(usize, String)>,
) {
    let span = value.span();
    if span.contains(&offset) && best.as_ref().is_none_or(|(w, _)| span.len() <= *w) {
        *best = Some((span.len(), path.clone()));
    }
    match value.get_ref() {
        toml::de::DeValue::Table(t) => find_key(t, &path, offset, best),
        toml::de::DeValue::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                find_in_value(item, format!("{path}[{i}]"), offset, best);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_config_is_the_defaults() {
        assert_eq!(Config::parse("", "t").unwrap(), Config::default());
    }

    #[test]
    fn design_example_parses() {
        let text = r#"
[workspace]
private = "."
[server]
state_dir = ".toolvisor"
drain_grace_ms = 10000
max_open_calls = 64
[supervisor]
restart_max = 5
restart_window_ms = 30000
backoff_initial_ms = 100
backoff_max_ms = 5000
cooldown_ms = 30000
[policy]
mode = "auto"
confirm_timeout_ms = 60000
[[policy.rules]]
tool = "run_command"
action = "allow"
conditions = [{ param = "command", operator = "startsWith", value = "cargo " }]
[workers.exec]
count = 2
queue_max = 256
default_timeout_ms = 30000
max_timeout_ms = 600000
max_rss_mb = 512
env_passthrough = ["PATH", "HOME", "LANG"]
env = { RUST_BACKTRACE = "1" }
writable = ["~/.cargo", "~/.cache"]
max_jobs = 64
[edit]
preview_ttl_ms = 600000
[limits]
file_max = 10240
file_keep = 5120
shell_max = 10240
shell_head = 1024
shell_tail = 4096
list_max = 1000
list_keep = 500
search_max = 100
search_keep = 50
max_frame_bytes = 8388608
artifacts_max_bytes = 67108864
artifacts_total_bytes = 536870912
[audit]
fsync = "always"
max_bytes = 67108864
"#;
        let cfg = Config::parse(text, "t").unwrap();
        assert_eq!(cfg.policy.rules.len(), 1);
        assert_eq!(cfg.workers.exec.env["RUST_BACKTRACE"], "1");
        assert_eq!(cfg.workers.count("search"), 2);
        assert_eq!(cfg.workers.count("edit"), 1);
        assert_eq!(cfg.workers.count("exec"), 2);
    }

    #[test]
    fn unknown_key_is_named_with_its_line() {
        let err = Config::parse("[server]\nmax_open_calls = 3\nbogus_key = 1\n", "t").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("bogus_key"), "{text}");
        assert!(text.contains("line 3"), "{text}");
    }

    #[test]
    fn ill_typed_values_name_their_key() {
        let err = Config::parse("[server]\n\n[limits]\nfile_max = \"big\"\n", "t").unwrap_err();
        let text = err.to_string();
        assert!(text.contains("`limits.file_max`"), "{text}");
        assert!(text.contains("line 4"), "{text}");
        let err = Config::parse("[policy]\nmode = \"sometimes\"\n", "t").unwrap_err();
        assert!(err.to_string().contains("`policy.mode`"), "{err}");
        let rules = "[[policy.rules]]\ntool = \"ls\"\naction = \"allow\"\n\
                     [[policy.rules]]\ntool = \"grep\"\naction = 3\n";
        let err = Config::parse(rules, "t").unwrap_err();
        assert!(
            err.to_string().contains("`policy.rules[1].action`"),
            "{err}"
        );
        let err = Config::parse("[workers.exec]\nenv = { A = 1 }\n", "t").unwrap_err();
        assert!(err.to_string().contains("`workers.exec.env.A`"), "{err}");
    }

    #[test]
    fn sandbox_keys_parse_and_belong_to_exec() {
        let cfg = Config::parse(
            "[workers.exec]\nsandbox = \"required\"\nnetwork = true\nprotected = [\"secrets\", \"./a/b\"]\n\
             [workers.exec.limits]\nmemory_mb = 512\ncpu_s = 10\n\
             [[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\nnetwork = true\n\
             [limits]\nmany_max = 4096\nline_max = 2048\n",
            "t",
        )
        .unwrap();
        let e = &cfg.workers.exec;
        assert_eq!(e.sandbox, SandboxMode::Required);
        assert!(e.network);
        assert_eq!(
            (e.limits.memory_mb, e.limits.pids, e.limits.cpu_s),
            (512, 1024, 10)
        );
        assert_eq!(cfg.policy.rules[0].network, Some(true));
        assert_eq!((cfg.limits.many_max, cfg.limits.line_max), (4096, 2048));
        assert_eq!(Config::default().workers.exec.sandbox, SandboxMode::Auto);
        for (bad, key) in [
            (
                "[workers.exec]\nsandbox = \"maybe\"\n",
                "workers.exec.sandbox",
            ),
            ("[workers.search]\nnetwork = true\n", "workers.search"),
            (
                "[workers.exec]\nprotected = [\"/etc\"]\n",
                "workers.exec.protected",
            ),
            (
                "[workers.exec]\nprotected = [\"../up\"]\n",
                "workers.exec.protected",
            ),
            ("[workers.exec.limits]\nmemory = 5\n", "memory"),
            ("[limits]\nline_max = 10\n", "limits.line_max"),
        ] {
            let err = Config::parse(bad, "t").unwrap_err().to_string();
            assert!(err.contains(key), "{bad}: {err}");
        }
    }

    #[test]
    fn bad_value_is_named() {
        let err = Config::parse("[policy]\nmode = \"reckless\"\n", "t").unwrap_err();
        assert!(err.to_string().contains("reckless"), "{err}");
        let err = Config::parse("[workers.search]\ncount = 0\n", "t").unwrap_err();
        assert!(err.to_string().contains("workers.search.count"), "{err}");
    }
}
