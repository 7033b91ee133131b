//! What the reap shim needs to build one command's sandbox and limits, passed on its
//! command line as JSON (`--sandbox`, `--rlimits`). The exec worker builds a template
//! once from its `init` ([`SandboxSpec::template`]) and fills in the per-call parts (the
//! working directory, the network).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use toolvisor_protocol::worker::WorkerInit;

use super::SandboxError;
use super::landlock::expand_home;

/// One command's namespace sandbox.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SandboxSpec {
    /// Writable workspace roots (private, shared), canonical. The protected names are
    /// applied beneath each.
    pub roots: Vec<PathBuf>,
    /// Other writable paths (`workers.exec.writable`, `~` expanded).
    pub writable: Vec<PathBuf>,
    /// Root-relative read-only names (built-in and `workers.exec.protected`).
    pub protected: Vec<PathBuf>,
    /// Absolute read-only paths (the active config file).
    pub read_only: Vec<PathBuf>,
    /// Absolute paths replaced by an empty, read-only directory or file (the state
    /// directory, the socket).
    pub hidden: Vec<PathBuf>,
    /// Share the host's network namespace instead of a new one with only `lo`.
    pub network: bool,
    /// Descriptors (inherited) of the session's loopback holder's user and network
    /// namespaces: the command joins them instead of a network namespace of its own
    /// (the worker passes none with `network`).
    pub netns: Option<[i32; 2]>,
    /// The command's working directory (a host path inside a root).
    pub cwd: PathBuf,
    /// A staged command's staging directory (`STATE/staged/<id>`): each root becomes an
    /// overlay whose writes are held there (docs/SANDBOX.md, staged commands).
    pub stage: Option<PathBuf>,
    /// Directories inside the private `/tmp` (or `/run`) shown read-only: where an MCP
    /// server's or external worker's program lives when that is there.
    pub shown: Vec<PathBuf>,
    /// Hidden paths this command may see (`run_command`'s `reveal`, which a person or
    /// a rule granted).
    pub reveal: Vec<PathBuf>,
    /// Test hook (`TOOLVISOR_SANDBOX_TEST_FAIL`): fail the setup the way a host that
    /// refuses user namespaces does, before anything is created.
    pub fail: bool,
}

/// The environment variable that makes sandbox setups fail, for tests: `probe` (the
/// start-up probe fails: a host without namespaces) or `command` (every command's
/// setup fails after a successful probe).
pub use toolvisor_protocol::worker::SANDBOX_TEST_FAIL_VAR as TEST_FAIL_VAR;

impl SandboxSpec {
    /// The parts common to every command of this worker.
    pub fn template(init: &WorkerInit) -> SandboxSpec {
        let s = &init.exec.sandbox;
        let roots = std::iter::once(init.roots.private.clone())
            .chain(init.roots.shared.clone())
            .map(|r| r.canonicalize().unwrap_or(r))
            .collect();
        let home = std::env::var_os("HOME").map(PathBuf::from);
        let writable = init
            .exec
            .writable
            .iter()
            .filter_map(|w| expand_home(w, home.as_deref()))
            .map(|w| w.canonicalize().unwrap_or(w))
            .collect();
        SandboxSpec {
            roots,
            writable,
            protected: super::protect::names(&s.protected),
            read_only: s.config_file.iter().cloned().collect(),
            hidden: s.hidden.clone(),
            network: s.network,
            netns: None,
            stage: None,
            shown: Vec::new(),
            reveal: Vec::new(),
            cwd: PathBuf::new(),
            fail: std::env::var(TEST_FAIL_VAR).is_ok_and(|v| v == "command"),
        }
    }

    /// This template for one command (`stage`: its staging directory).
    pub fn for_command(&self, cwd: &Path, network: bool, stage: Option<&Path>) -> SandboxSpec {
        SandboxSpec {
            cwd: cwd.to_path_buf(),
            network: self.network || network,
            stage: stage.map(Path::to_path_buf),
            ..self.clone()
        }
    }
}

/// Resource limits the shim sets with `setrlimit` (None: unchanged). Cgroups, where the
/// exec worker has them, bound memory and processes instead of `as_bytes`/`nproc`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Rlimits {
    /// `RLIMIT_AS`: address space, the memory bound without cgroups.
    pub as_bytes: Option<u64>,
    /// `RLIMIT_NPROC`: processes of the command's user; only set in a user namespace,
    /// where the count is the sandbox's own.
    pub nproc: Option<u64>,
    /// `RLIMIT_CPU` seconds (SIGXCPU, then SIGKILL a second later).
    pub cpu_s: Option<u64>,
    /// `RLIMIT_FSIZE`: the largest file the command may write (SIGXFSZ).
    pub fsize: Option<u64>,
}

impl Rlimits {
    /// Whether no limit is set (the shim then skips `setrlimit`).
    pub fn is_empty(&self) -> bool {
        *self == Rlimits::default()
    }

    /// Apply them to this process (inherited by what it starts). Errors name the limit.
    pub fn apply(&self) -> Result<(), SandboxError> {
        use nix::sys::resource::{Resource, setrlimit};
        let set = |r: Resource, name: &str, soft: u64, hard: u64| {
            // nix's own wording of the errno (`EPERM: Operation not permitted`) is kept.
            setrlimit(r, soft, hard).map_err(|e| {
                SandboxError::step(
                    format!("cannot set {name} to {soft}"),
                    std::io::Error::other(e),
                )
            })
        };
        if let Some(b) = self.as_bytes {
            set(Resource::RLIMIT_AS, "RLIMIT_AS", b, b)?;
        }
        if let Some(n) = self.nproc {
            set(Resource::RLIMIT_NPROC, "RLIMIT_NPROC", n, n)?;
        }
        if let Some(s) = self.cpu_s {
            set(Resource::RLIMIT_CPU, "RLIMIT_CPU", s, s + 1)?;
        }
        if let Some(b) = self.fsize {
            set(Resource::RLIMIT_FSIZE, "RLIMIT_FSIZE", b, b)?;
        }
        Ok(())
    }
}
