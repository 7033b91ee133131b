//! `[workers.<group>]`: how many worker processes each group runs and how they are
//! bounded, the exec group's sandbox and limits (docs/SANDBOX.md), and external worker
//! groups (`[workers.NAME] command = [...]`, docs/PROTOCOL.md "Worker protocol").

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// One group's `[workers.NAME]` table.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupConfig {
    /// Worker processes; `None` takes the group's default (search 2, edit 1, exec 2).
    pub count: Option<usize>,
    /// Calls that may wait for a worker; one more gets `Overloaded`.
    pub queue_max: usize,
    /// Calls one worker process runs at once; past it calls wait in the queue.
    pub max_in_flight: usize,
    /// A call's deadline when it asks for none.
    pub default_timeout_ms: u64,
    /// The longest deadline a call may ask for.
    pub max_timeout_ms: u64,
    /// A worker above this resident memory is replaced once its calls end.
    pub max_rss_mb: u64,
    /// Host variables the group's worker processes inherit beyond the basic ones (for
    /// `exec`, its commands too); every other is scrubbed.
    pub env_passthrough: Vec<String>,
    /// Variables set for every command (`exec`) or for an external worker.
    pub env: BTreeMap<String, String>,
    /// `exec` only: paths outside the roots commands may write (`~/.cargo`).
    pub writable: Vec<PathBuf>,
    /// `exec` only: background commands one worker keeps at once.
    pub max_jobs: usize,
    /// How commands are confined (`exec`: `auto`, `required`, `off`), or whether an
    /// external worker runs in the command sandbox (`on`, the default, or `off`).
    pub sandbox: Option<SandboxMode>,
    /// Commands (`exec`) or an external worker get the host's network (`true`); a
    /// list of domains is accepted for external workers (not enforced yet: none).
    pub network: super::Network,
    /// `exec` only: more workspace-relative paths commands and edit tools may not change.
    pub protected: Vec<PathBuf>,
    /// `exec` only: paths commands never see (and file tools refuse), in addition to
    /// [`DEFAULT_HIDDEN`]: globs; `~/` is `$HOME`; relative ones are under each root.
    pub hidden: Vec<String>,
    /// `exec` only: `[workers.exec.limits]`.
    pub limits: toolvisor_protocol::worker::ExecLimits,
    /// `exec` only: a foreground command still running after this many ms goes on in
    /// the background (`run_command`'s `yield_ms` when the call gives none).
    pub yield_ms: Option<u64>,
    /// External groups only: the worker's command line (program first).
    pub command: Vec<String>,
    /// External groups only: the lowest risk of the group's tools (default `medium`);
    /// a tool may announce a higher one, never a lower.
    pub risk: Option<toolvisor_protocol::tools::Risk>,
}

/// What commands never see, whatever `workers.exec.hidden` adds: the usual credential
/// stores (what a command prints goes to the model's provider) and the host's password
/// hashes. A rule or a person's answer may reveal one for one command.
pub const DEFAULT_HIDDEN: [&str; 19] = [
    "~/.ssh",
    "~/.gnupg",
    "~/.aws",
    "~/.azure",
    "~/.config/gcloud",
    "~/.config/gh",
    "~/.kube",
    "~/.docker",
    "~/.netrc",
    "~/.git-credentials",
    "~/.npmrc",
    "~/.pypirc",
    "~/.cargo/credentials*",
    "~/.local/share/keyrings",
    "~/.password-store",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/shadow-",
    "/etc/gshadow-",
];

/// `workers.exec.sandbox`: namespaces for each command where the host allows them
/// (`auto`), or refuse to start without them (`required`), or never (`off`: Landlock
/// and the reap shim only).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum SandboxMode {
    /// Namespaces where the host allows them, the fallback (with a warning) where not.
    #[default]
    Auto,
    /// Namespaces or no service: `serve` refuses to start without them.
    Required,
    /// Never: Landlock and the reap shim only (an external worker: unsandboxed).
    Off,
    /// An external worker only: in the command sandbox (its default).
    On,
}

impl TryFrom<String> for SandboxMode {
    type Error = String;

    fn try_from(v: String) -> Result<Self, String> {
        match v.as_str() {
            "auto" => Ok(SandboxMode::Auto),
            "required" => Ok(SandboxMode::Required),
            "off" => Ok(SandboxMode::Off),
            "on" => Ok(SandboxMode::On),
            other => Err(format!(
                "sandbox {other:?}: an external worker's is \"on\" (the default) or \"off\"; [workers.exec]'s \"auto\", \"required\" or \"off\""
            )),
        }
    }
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
            sandbox: None,
            network: super::Network::default(),
            protected: Vec::new(),
            hidden: Vec::new(),
            limits: Default::default(),
            yield_ms: None,
            command: Vec::new(),
            risk: None,
        }
    }
}

impl GroupConfig {
    /// `workers.exec.sandbox`, `auto` when unset.
    pub fn exec_mode(&self) -> SandboxMode {
        self.sandbox.unwrap_or_default()
    }

    /// Whether an external worker runs in the command sandbox: unless `"off"`.
    pub fn worker_sandbox(&self) -> super::WorkerSandbox {
        match self.sandbox {
            Some(SandboxMode::Off) => super::WorkerSandbox::Off,
            _ => super::WorkerSandbox::On,
        }
    }
}

/// `[workers]`: the built-in groups, and any number of external worker groups.
///
/// Not `deny_unknown_fields`: a table that is not a built-in group is an external
/// group, and [`GroupConfig`] refuses unknown keys itself (a misspelt built-in group
/// is caught by the check that an external group has a `command`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkersConfig {
    /// The read-only tools' group.
    #[serde(default)]
    pub search: GroupConfig,
    /// The file-writing tools' group.
    #[serde(default)]
    pub edit: GroupConfig,
    /// The command-running tools' group (its sandbox and limits too).
    #[serde(default)]
    pub exec: GroupConfig,
    /// The web tools' group (`web_fetch`, `web_search`).
    #[serde(default)]
    pub web: GroupConfig,
    /// The agent's durable state (`memory`, `write_todos`).
    #[serde(default)]
    pub state: GroupConfig,
    /// The skills' group (`activate_skill`).
    #[serde(default)]
    pub meta: GroupConfig,
    /// `[workers.NAME]` with `command = [...]`: an executable that speaks the worker
    /// protocol and announces its tools.
    #[serde(flatten)]
    pub external: BTreeMap<String, GroupConfig>,
}

/// The built-in groups, in the order their workers start.
pub const BUILTIN_GROUPS: &[&str] = &["search", "edit", "exec", "web", "state", "meta"];

impl WorkersConfig {
    /// How many workers `group` runs: its `count`, else the group's default (search
    /// and exec 2, the others 1).
    pub fn count(&self, group: &str) -> usize {
        let default = match group {
            "search" | "exec" => 2,
            _ => 1,
        };
        self.group(group).and_then(|g| g.count).unwrap_or(default)
    }

    /// A group's settings, built-in or external.
    pub fn group(&self, name: &str) -> Option<&GroupConfig> {
        match name {
            "search" => Some(&self.search),
            "edit" => Some(&self.edit),
            "exec" => Some(&self.exec),
            "web" => Some(&self.web),
            "state" => Some(&self.state),
            "meta" => Some(&self.meta),
            other => self.external.get(other),
        }
    }

    /// Every group: the built-in ones, then the external ones by name.
    pub fn all(&self) -> impl Iterator<Item = (&str, &GroupConfig)> {
        [
            ("search", &self.search),
            ("edit", &self.edit),
            ("exec", &self.exec),
            ("web", &self.web),
            ("state", &self.state),
            ("meta", &self.meta),
        ]
        .into_iter()
        .chain(self.external.iter().map(|(k, v)| (k.as_str(), v)))
    }
}
