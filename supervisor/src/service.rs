//! The running service: configuration, the tool catalog, one pool per group, the
//! event bus, and the bookkeeping that lets a drain wait for every open call.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::tools::{self, ToolSpec};
use toolvisor_protocol::worker::{ExecSettings, Roots, SandboxSettings, WorkerInit};

use crate::audit::Audit;
use crate::call::confirm::Confirmations;
use crate::call::grants::Grants;
use crate::call::previews::PreviewStore;
use crate::config::{Config, SandboxMode};
use crate::policy::Policy;
use crate::registry::validate::Validators;
use crate::session::events::Events;
use crate::workers::pool::{Pool, PoolSpec};
use crate::workers::restart::RestartPolicy;
use crate::workers::spawn::{SpawnSpec, Spawner};

/// Where things are, fixed for the life of the process.
#[derive(Clone, Debug)]
pub struct Paths {
    pub workspace: PathBuf,
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    /// The config file in use, if one exists (protected from the tools).
    pub config_file: PathBuf,
    pub exe: PathBuf,
    /// Whether commands can have their own namespaces here (probed once at start),
    /// or why not.
    pub namespaces: Result<(), String>,
}

/// Niceness of search workers: below the supervisor, so pings and other groups' calls
/// are not queued behind CPU-bound walks.
const SEARCH_NICE: i32 = 10;

pub struct Service {
    pub paths: Paths,
    pub config: RwLock<Arc<Config>>,
    pub tools: Vec<ToolSpec>,
    pub validators: Validators,
    pub policy: RwLock<Arc<Policy>>,
    pub grants: Grants,
    pub confirmations: Confirmations,
    /// Changes shown by a preview, waiting for `apply_file_change`.
    pub previews: std::sync::Mutex<PreviewStore>,
    pub pools: HashMap<String, Arc<Pool>>,
    /// The tools of the configured MCP servers (`[mcp.servers.NAME]`).
    pub mcp: Arc<crate::registry::mcp::McpRegistry>,
    pub events: Events,
    pub audit: Audit,
    pub started: Instant,
    /// The marker every command carries in its environment.
    pub instance: String,
    next_call: AtomicU64,
    next_session: AtomicU64,
    active: AtomicUsize,
    idle: Notify,
    /// Parent of every call's cancellation token: cancelling it cancels them all.
    pub shutdown: CancellationToken,
}

impl Service {
    /// Start the pools of every group.
    pub async fn start(
        paths: Paths,
        config: Config,
        spawner: Spawner,
        instance: String,
        audit: Audit,
    ) -> Result<Arc<Service>, String> {
        let events = Events::new();
        let hook_audit = audit.clone();
        events.set_audit(Arc::new(move |kind, fields| {
            hook_audit.append_detached(kind, fields);
        }));
        let init = worker_init(&paths, &config, &instance)?;
        let policy =
            Policy::new(&config.policy, &init.roots).map_err(|e| format!("bad [policy]: {e}"))?;
        let mut pools = HashMap::new();
        for group in tools::GROUPS {
            let Some(gcfg) = config.workers.group(group) else {
                continue;
            };
            let spec = PoolSpec {
                group: (*group).to_owned(),
                count: config.workers.count(group),
                queue_max: gcfg.queue_max,
                max_in_flight: gcfg.max_in_flight,
                spawner: spawner.clone(),
                spawn: SpawnSpec {
                    exe: paths.exe.clone(),
                    group: (*group).to_owned(),
                    cwd: paths.workspace.clone(),
                    passthrough: gcfg.env_passthrough.clone(),
                    nice: if *group == "search" { SEARCH_NICE } else { 0 },
                    ready_timeout: crate::workers::worker::READY_TIMEOUT,
                },
                init: WorkerInit {
                    group: (*group).to_owned(),
                    ..init.clone()
                },
                policy: RestartPolicy::new(config.supervisor.clone()),
                events: events.clone(),
                deadline_grace: if *group == "exec" {
                    crate::workers::worker::EXEC_PATIENCE
                } else {
                    Duration::ZERO
                },
                tools_hook: None,
            };
            let pool = Pool::start(spec)
                .await
                .map_err(|e| format!("cannot start the {group} pool: {e}"))?;
            pools.insert((*group).to_owned(), pool);
        }
        let mcp = Arc::new(crate::registry::mcp::McpRegistry::new(&config.mcp));
        crate::audit::redact::add_secrets(crate::registry::mcp::secrets(&config.mcp));
        let mcp_pools = crate::registry::mcp_pools::start(crate::registry::mcp_pools::Start {
            config: &config,
            init: &init,
            paths: &paths,
            spawner: &spawner,
            events: &events,
            audit: &audit,
            registry: &mcp,
        })
        .await?;
        pools.extend(mcp_pools);
        Ok(Arc::new(Service {
            paths,
            config: RwLock::new(Arc::new(config)),
            validators: Validators::new(&tools::catalog()).map_err(|e| e.to_string())?,
            grants: Grants::new(policy.scopes().clone()),
            confirmations: Confirmations::new(policy.confirm_timeout()),
            policy: RwLock::new(Arc::new(policy)),
            previews: std::sync::Mutex::new(PreviewStore::new()),
            tools: tools::catalog(),
            pools,
            mcp,
            events,
            audit,
            started: Instant::now(),
            instance,
            next_call: AtomicU64::new(1),
            next_session: AtomicU64::new(1),
            active: AtomicUsize::new(0),
            idle: Notify::new(),
            shutdown: CancellationToken::new(),
        }))
    }

    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    pub fn next_call(&self) -> u64 {
        self.next_call.fetch_add(1, Ordering::SeqCst)
    }

    pub fn next_session(&self) -> String {
        format!("s{}", self.next_session.fetch_add(1, Ordering::SeqCst))
    }

    /// Count a call as open until the guard drops.
    pub fn open_call(self: &Arc<Self>) -> ActiveCall {
        self.active.fetch_add(1, Ordering::SeqCst);
        ActiveCall(self.clone())
    }

    pub fn active_calls(&self) -> usize {
        self.active.load(Ordering::SeqCst)
    }

    /// Wait until no call is open, or `grace` passes; then cancel the rest and wait
    /// (bounded) for them to answer.
    pub async fn drain(&self, grace: Duration) {
        if tokio::time::timeout(grace, self.until_no_calls())
            .await
            .is_err()
        {
            tracing::warn!(
                open = self.active_calls(),
                "drain grace over; cancelling the calls still open"
            );
            self.shutdown.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(5), self.until_no_calls()).await;
        }
    }

    /// Resolves once no call is open.
    async fn until_no_calls(&self) {
        loop {
            let notified = self.idle.notified();
            if self.active_calls() == 0 {
                return;
            }
            notified.await;
        }
    }

    /// The exec worker processes now (commands run under them).
    pub fn exec_worker_pids(&self) -> Vec<u32> {
        self.pools
            .get("exec")
            .map(|p| p.workers().iter().filter_map(|w| w.pid()).collect())
            .unwrap_or_default()
    }

    pub async fn stop_workers(&self) {
        for pool in self.pools.values() {
            pool.stop().await;
        }
    }
}

/// An open call; dropping it lets a drain go on.
pub struct ActiveCall(Arc<Service>);

impl Drop for ActiveCall {
    fn drop(&mut self) {
        if self.0.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// The roots of `workspace` as `config` names them, canonical.
pub fn workspace_roots(workspace: &Path, config: &Config) -> Result<Roots, String> {
    let root = |p: &Path| {
        let p = if p.is_absolute() {
            p.to_owned()
        } else {
            workspace.join(p)
        };
        p.canonicalize()
            .map_err(|e| format!("workspace root {}: {e}", p.display()))
    };
    Ok(Roots {
        private: root(&config.workspace.private)?,
        shared: config.workspace.shared.as_deref().map(root).transpose()?,
        public: config.workspace.public.as_deref().map(root).transpose()?,
    })
}

/// The `init` every worker gets (its group filled in per pool).
pub fn worker_init(paths: &Paths, config: &Config, instance: &str) -> Result<WorkerInit, String> {
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
            instance: instance.to_owned(),
            exe: paths.exe.clone(),
            sandbox,
        },
        generation: 0,
        mcp: None,
    })
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
) -> Result<SandboxSettings, String> {
    let exec = &config.workers.exec;
    let namespaces = match (exec.sandbox, &paths.namespaces) {
        (SandboxMode::Off, _) => false,
        (_, Ok(())) => true,
        (SandboxMode::Required, Err(why)) => {
            return Err(format!(
                "workers.exec.sandbox = \"required\", but commands cannot have their own namespaces here: {why}"
            ));
        }
        (SandboxMode::Auto, Err(_)) => false,
    };
    let state = canonical(&paths.state_dir);
    let socket = canonical(&paths.socket);
    let mut hidden = vec![state.clone()];
    if !socket.starts_with(&state) {
        hidden.push(socket);
    }
    Ok(SandboxSettings {
        namespaces,
        network: exec.network,
        protected: exec.protected.clone(),
        config_file,
        hidden,
        limits: exec.limits.clone(),
    })
}
