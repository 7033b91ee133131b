//! The `init` frame every worker process gets: the roots, the protected paths, the
//! limits, and the exec group's settings (its sandbox included), all from the config.

use std::path::{Path, PathBuf};

use toolvisor_protocol::worker::{ExecSettings, Roots, SandboxSettings, WorkerInit};

use crate::config::{Config, SandboxMode};
use crate::serve::sandbox::NoNamespaces;
use crate::service::Paths;

/// Why the workers' `init` cannot be made from a configuration: serve does not start
/// (exit 78), a reload keeps the old configuration.
#[derive(Debug, thiserror::Error)]
pub enum InitError {
    /// A configured root does not resolve (missing, or not searchable).
    #[error("workspace root {}: {source}", path.display())]
    Root {
        /// The root as configured, made absolute.
        path: PathBuf,
        /// Why it does not resolve.
        #[source]
        source: std::io::Error,
    },
    /// `workers.exec.sandbox = "required"` on a host that refuses command namespaces.
    #[error(
        "workers.exec.sandbox = \"required\", but commands cannot have their own namespaces here: {why}"
    )]
    SandboxRequired {
        /// Why the host refuses them.
        why: NoNamespaces,
    },
}

/// The roots of `workspace` as `config` names them, canonical.
pub fn workspace_roots(workspace: &Path, config: &Config) -> Result<Roots, InitError> {
    let root = |p: &Path| {
        let p = if p.is_absolute() {
            p.to_owned()
        } else {
            workspace.join(p)
        };
        p.canonicalize()
            .map_err(|source| InitError::Root { path: p, source })
    };
    Ok(Roots {
        private: root(&config.workspace.private)?,
        shared: config.workspace.shared.as_deref().map(root).transpose()?,
        public: config.workspace.public.as_deref().map(root).transpose()?,
    })
}

/// The `init` every worker gets (its group filled in per pool).
pub fn worker_init(
    paths: &Paths,
    config: &Config,
    instance: &str,
) -> Result<WorkerInit, InitError> {
    let roots = workspace_roots(&paths.workspace, config)?;
    let mut protected = vec![paths.state_dir.clone()];
    if let Ok(c) = paths.config_file.canonicalize() {
        protected.push(c);
    }
    let exec = &config.workers.exec;
    let sandbox = sandbox_settings(paths, config, paths.config_file.canonicalize().ok())?;
    Ok(WorkerInit {
        group: String::new(),
        index: 0,
        roots,
        protected,
        state_dir: paths.state_dir.clone(),
        limits: config.limits.clone(),
        exec: ExecSettings {
            env_passthrough: exec.env_passthrough.clone(),
            env: exec.env.clone(),
            writable: exec.writable.clone(),
            max_jobs: exec.max_jobs,
            yield_ms: exec.yield_ms,
            instance: instance.to_owned(),
            exe: paths.exe.clone(),
            sandbox,
        },
        generation: 0,
        web: config.web.clone(),
        skills: config.skills.clone(),
        mcp: None,
    })
}

/// `workers.exec.protected`, and the files of configured MCP servers and external
/// workers that lie in a workspace root (a command that rewrote one would run as the
/// daemon's user at its next start), as root-relative names.
fn protected_names(config: &Config, roots: &Roots) -> Vec<PathBuf> {
    let mut out = config.workers.exec.protected.clone();
    let commands = config
        .mcp
        .servers
        .values()
        .map(|s| &s.command)
        .chain(config.workers.external.values().map(|g| &g.command));
    let each = [
        Some(&roots.private),
        roots.shared.as_ref(),
        roots.public.as_ref(),
    ];
    for word in commands.flatten() {
        let p = Path::new(word);
        for root in each.iter().flatten() {
            let abs = if p.is_absolute() {
                p.to_path_buf()
            } else {
                root.join(p)
            };
            let Ok(real) = abs.canonicalize() else {
                continue;
            };
            if let Ok(rel) = real.strip_prefix(root)
                && !rel.as_os_str().is_empty()
                && real.is_file()
                && !out.iter().any(|o| o == rel)
            {
                out.push(rel.to_path_buf());
            }
        }
    }
    out
}

/// The daemon's home directory (`~/` in `workers.exec.hidden`).
fn home() -> Option<PathBuf> {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|h| h.is_absolute())
}

/// [`DEFAULT_HIDDEN`](crate::config::DEFAULT_HIDDEN) and `extra` as absolute
/// patterns: `~/x` under `home` (dropped without one), a relative one under every root.
/// Globs stay globs: the sandbox matches them when it builds each command's view.
pub fn hidden_paths(extra: &[String], roots: &Roots, home: Option<&Path>) -> Vec<PathBuf> {
    let defaults = crate::config::DEFAULT_HIDDEN.iter().copied();
    let mut out = Vec::new();
    for h in defaults.chain(extra.iter().map(String::as_str)) {
        if let Some(rest) = h.strip_prefix("~/") {
            out.extend(home.map(|home| home.join(rest)));
        } else if Path::new(h).is_absolute() {
            out.push(PathBuf::from(h));
        } else {
            let each = [
                Some(&roots.private),
                roots.shared.as_ref(),
                roots.public.as_ref(),
            ];
            out.extend(each.into_iter().flatten().map(|r| r.join(h)));
        }
    }
    out.dedup();
    out
}

/// `p` with its directory resolved (the file itself may not exist yet: the socket).
fn canonical(p: &Path) -> PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    match (
        p.parent().and_then(|d| d.canonicalize().ok()),
        p.file_name(),
    ) {
        (Some(dir), Some(name)) => dir.join(name),
        _ => p.to_path_buf(),
    }
}

/// How commands are confined: namespaces unless `workers.exec.sandbox = "off"` or the
/// host refuses them; `required` and refused is an error (serve exits 78, a reload
/// fails).
fn sandbox_settings(
    paths: &Paths,
    config: &Config,
    config_file: Option<PathBuf>,
) -> Result<SandboxSettings, InitError> {
    let exec = &config.workers.exec;
    let namespaces = match (exec.exec_mode(), &paths.namespaces) {
        (SandboxMode::Off, _) => false,
        (_, Ok(())) => true,
        (SandboxMode::Required, Err(why)) => {
            return Err(InitError::SandboxRequired { why: why.clone() });
        }
        (SandboxMode::Auto | SandboxMode::On, Err(_)) => false,
    };
    let state = canonical(&paths.state_dir);
    let socket = canonical(&paths.socket);
    let mut hidden = vec![state.clone()];
    if !socket.starts_with(&state) {
        hidden.push(socket);
    }
    let unrevealable = hidden.clone();
    let roots = workspace_roots(&paths.workspace, config)?;
    hidden.extend(hidden_paths(&exec.hidden, &roots, home().as_deref()));
    Ok(SandboxSettings {
        namespaces,
        network: exec.network.allowed(),
        protected: protected_names(config, &roots),
        config_file,
        hidden,
        unrevealable,
        limits: exec.limits.clone(),
        refused: paths.namespaces.as_ref().err().map(|why| why.to_string()),
    })
}
