//! The running service: what every call path shares, each piece owned by the module
//! that knows it — the configuration and policy (swapped on SIGHUP, [`crate::serve::reload`]),
//! the tool registry ([`crate::registry::live`]), one pool per group
//! ([`crate::workers`]), grants, confirmations and previews ([`crate::call`]), the
//! event bus, the audit log, and the drain bookkeeping ([`crate::drain`]).
//! Fields are private; the accessors below are the only way in.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::Topic;
use toolvisor_protocol::tools::{self, Risk};
use toolvisor_protocol::worker::{AnnouncedTool, WorkerInit};

use crate::audit::Audit;
use crate::audit::record::ToolsChanged;
use crate::call::confirm::Confirmations;
use crate::call::grants::Grants;
use crate::call::previews::PreviewStore;
use crate::config::Config;
use crate::drain::{ActiveCall, Drain};
use crate::events::{Events, obj};
use crate::policy::{Policy, ToolNames};
use crate::registry::Registry;
use crate::registry::live::LiveRegistry;
use crate::workers::groups::{self, Group, Kind};
use crate::workers::init::worker_init;
pub use crate::workers::paths::Paths;
use crate::workers::pool::{Pool, PoolSpec};
use crate::workers::restart::RestartPolicy;
use crate::workers::spawn::{SpawnSpec, Spawner};
use crate::workers::worker::Announce;

mod pools;

use pools::{Source, first_announcement, follow_announcements, pool_spec};

/// Why the service could not start (serve exits 78: the configuration cannot work).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The workers' `init` cannot be made (a root, the sandbox).
    #[error("{0}")]
    Workers(#[from] crate::workers::init::InitError),
    /// The `[policy]` table does not compile (a rule names no tool, a bad regex).
    #[error("bad [policy]: {0}")]
    Policy(String),
    /// A built-in definition is broken: a bug, caught before anything runs.
    #[error("the built-in tools do not load: {0}")]
    Registry(#[from] crate::registry::RegistryError),
    /// A group's pool actor could not start.
    #[error("cannot start the {group} pool: {message}")]
    Pool {
        /// The group.
        group: String,
        /// Why.
        message: String,
    },
}

/// The running service: what every session and call shares. Each piece of state has
/// one owner module (policy, grants, confirmations, pools, audit); this only holds
/// them and hands out access.
pub struct Service {
    paths: Paths,
    config: RwLock<Arc<Config>>,
    registry: LiveRegistry,
    policy: RwLock<Arc<Policy>>,
    grants: Grants,
    confirmations: Confirmations,
    /// Changes shown by a preview, waiting to be applied.
    pub(crate) previews: std::sync::Mutex<PreviewStore>,
    /// Staged commands' held changes, waiting to be applied.
    pub(crate) staged: std::sync::Mutex<PreviewStore<crate::call::staged::Staged>>,
    pools: HashMap<String, Arc<Pool>>,
    /// The groups in the order they started (built-in first, then external by name).
    order: Vec<String>,
    events: Events,
    audit: Audit,
    started: Instant,
    /// The marker every command carries in its environment.
    instance: String,
    next_call: AtomicU64,
    next_session: AtomicU64,
    drain: Drain,
    /// The calls dispatched to a worker and not yet ended (`status.calls`).
    running: crate::call::running::Running,
    /// What the last guard canary found (`status.guards.verified`; empty until the
    /// first one ends).
    verified: std::sync::Mutex<std::collections::BTreeMap<String, serde_json::Value>>,
    /// The undo journal of what calls changed in the workspace.
    undo: crate::call::journaling::Undo,
    /// The calls whose commands go through an egress proxy.
    egress: crate::call::egress::EgressBook,
    /// The calls running on MCP servers, and their servers' requests to clients.
    relay: crate::call::relay::RelayBook,
}

impl Service {
    /// Load the built-in tools, compile the policy, and start the pools of every
    /// group; external groups' tools join the registry as their workers announce them.
    pub async fn start(
        paths: Paths,
        config: Config,
        spawner: Spawner,
        instance: String,
        audit: Audit,
    ) -> Result<Arc<Service>, StartError> {
        let events = Events::new();
        let hook_audit = audit.clone();
        events.set_audit(Arc::new(move |kind, fields| {
            hook_audit.append_detached(kind, fields);
        }));
        let init = worker_init(&paths, &config, &instance).map_err(StartError::Workers)?;
        crate::registry::mcp::secrets(&config);
        for w in config.warnings() {
            tracing::warn!("{w}");
        }
        let registry = Registry::new(tools::builtin())?;
        let policy =
            crate::policy::for_config(&config, &init.roots, &tool_names(&config, &registry))
                .map_err(StartError::Policy)?;
        let mut pools = HashMap::new();
        let mut order = Vec::new();
        let mut announced = Vec::new();
        for group in groups::plan(&config, &registry) {
            let source = match &group.kind {
                Kind::External { risk, .. } => Some(Source::External(*risk)),
                Kind::Mcp { .. } => Some(Source::Mcp),
                Kind::Builtin if group.announces_builtin() => Some(Source::Builtin),
                Kind::Builtin => None,
            };
            let (announce, rx) = match source {
                Some(source) => {
                    let (tx, rx) = watch::channel(None);
                    let hook: Announce = Arc::new(move |tools| {
                        let _ = tx.send(Some(tools));
                    });
                    (Some(hook), Some((group.name.clone(), source, rx)))
                }
                None => (None, None),
            };
            announced.extend(rx);
            let spec = pool_spec(&group, &paths, &config, &init, &spawner, &events, announce);
            let pool = Pool::start(spec).await.map_err(|e| StartError::Pool {
                group: group.name.clone(),
                message: e.to_string(),
            })?;
            order.push(group.name.clone());
            pools.insert(group.name, pool);
        }
        let undo =
            crate::call::journaling::Undo::open(&paths.state_dir, init.roots.clone(), &config);
        let service = Arc::new(Service {
            undo,
            paths,
            config: RwLock::new(Arc::new(config)),
            registry: LiveRegistry::new(registry),
            grants: Grants::new(policy.scopes().clone()),
            confirmations: Confirmations::new(policy.confirm_timeout()),
            policy: RwLock::new(Arc::new(policy)),
            previews: std::sync::Mutex::new(PreviewStore::new()),
            staged: std::sync::Mutex::new(PreviewStore::new()),
            pools,
            order,
            events,
            audit,
            started: Instant::now(),
            instance,
            next_call: AtomicU64::new(1),
            next_session: AtomicU64::new(1),
            drain: Drain::new(),
            running: Default::default(),
            verified: Default::default(),
            egress: Default::default(),
            relay: Default::default(),
        });
        service
            .events
            .set_egress(crate::call::egress::hook(Arc::downgrade(&service)));
        service
            .events
            .set_relay(crate::call::relay::hook(Arc::downgrade(&service)));
        for (group, source, mut rx) in announced {
            if source == Source::Builtin {
                // A built-in group's tools are part of what a client sees at once: wait
                // (bounded) for its worker's first word before serving.
                first_announcement(&service, &group, &mut rx).await;
            }
            tokio::spawn(follow_announcements(
                Arc::downgrade(&service),
                group,
                source,
                rx,
            ));
        }
        Ok(service)
    }

    /// Where things are.
    pub fn paths(&self) -> &Paths {
        &self.paths
    }

    /// The policy in force now (a reload may replace it; a call keeps the one it got).
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The configuration in force now.
    pub fn config(&self) -> Arc<Config> {
        self.config
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Put a reloaded configuration and its policy in force (SIGHUP).
    pub fn replace_config(&self, config: Config, mut policy: Policy) {
        policy.share_boundary(&self.policy());
        self.confirmations.set_timeout(policy.confirm_timeout());
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
        *self.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(config);
    }

    /// The tool registry now.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.get()
    }

    /// The names rules may use under `config`.
    pub fn tool_names(&self, config: &Config) -> ToolNames {
        tool_names(config, &self.registry())
    }

    /// The grant tokens issued.
    pub fn grants(&self) -> &Grants {
        &self.grants
    }

    /// The calls waiting for a person's answer.
    pub fn confirmations(&self) -> &Confirmations {
        &self.confirmations
    }

    /// The undo journal and the captures still open.
    pub fn undo(&self) -> &crate::call::journaling::Undo {
        &self.undo
    }

    /// The calls running now (`status.calls`).
    pub fn running(&self) -> &crate::call::running::Running {
        &self.running
    }

    /// Every group's pool, by group.
    pub fn pools(&self) -> &HashMap<String, Arc<Pool>> {
        &self.pools
    }

    /// The pools in the order their groups started.
    pub fn pools_in_order(&self) -> Vec<&Arc<Pool>> {
        self.order
            .iter()
            .filter_map(|g| self.pools.get(g))
            .collect()
    }

    /// One group's pool.
    pub fn pool(&self, group: &str) -> Option<&Arc<Pool>> {
        self.pools.get(group)
    }

    /// Where events go (subscribers, and the audit log for worker events).
    pub fn events(&self) -> &Events {
        &self.events
    }

    /// The calls whose commands go through an egress proxy.
    pub(crate) fn egress_book(&self) -> &crate::call::egress::EgressBook {
        &self.egress
    }

    /// The calls running on MCP servers, for their servers' requests to clients.
    pub(crate) fn relay_book(&self) -> &crate::call::relay::RelayBook {
        &self.relay
    }

    /// What the last guard canary found, guard by guard.
    pub fn verified(&self) -> std::collections::BTreeMap<String, serde_json::Value> {
        self.verified
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Keep what a guard canary found.
    pub fn set_verified(&self, v: std::collections::BTreeMap<String, serde_json::Value>) {
        *self.verified.lock().unwrap_or_else(|p| p.into_inner()) = v;
    }

    /// The audit log.
    pub fn audit(&self) -> &Audit {
        &self.audit
    }

    /// When the service started (for `uptime_ms`).
    pub fn started(&self) -> Instant {
        self.started
    }

    /// The marker every command of this run carries.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// A new number for a call, unique in this run (workers know calls by it).
    pub fn next_call(&self) -> u64 {
        self.next_call.fetch_add(1, Ordering::SeqCst)
    }

    /// A new session id (`s1`, `s2`, …).
    pub fn next_session(&self) -> String {
        format!("s{}", self.next_session.fetch_add(1, Ordering::SeqCst))
    }

    /// Count a call as open until the guard drops.
    pub fn open_call(&self) -> ActiveCall {
        self.drain.open()
    }

    /// Calls open now, every session together.
    pub fn active_calls(&self) -> usize {
        self.drain.active()
    }

    /// Cancelled when the drain gives up on the calls still open.
    pub fn shutdown(&self) -> &CancellationToken {
        self.drain.shutdown()
    }

    /// Wait until no call is open, or `grace` passes; then cancel the rest and wait
    /// (bounded) for them to answer.
    pub async fn drain(&self, grace: std::time::Duration) {
        self.drain.run(grace).await;
    }

    /// The exec worker processes now (commands run under them).
    pub fn exec_worker_pids(&self) -> Vec<u32> {
        self.pools
            .get(tools::EXEC)
            .map(|p| p.workers().iter().filter_map(|w| w.pid()).collect())
            .unwrap_or_default()
    }

    /// Stop every group's workers (service shutdown).
    pub async fn stop_workers(&self) {
        for pool in self.pools.values() {
            pool.stop().await;
        }
    }

    /// A group's worker announced its tools: the registry takes them, and
    /// `tools_changed` tells `workers` subscribers when the set changed.
    fn take_announcement(&self, group: &str, source: Source, tools: Vec<AnnouncedTool>) {
        let mut warnings = Vec::new();
        let change = match source {
            Source::External(floor) => self.registry.announce(group, floor, tools),
            Source::Builtin => self.registry.announce_builtin(group, tools),
            Source::Mcp => {
                let admitted = crate::registry::mcp::admit(&self.config(), group, tools);
                warnings = admitted.warnings;
                self.registry.announce(group, admitted.risk, admitted.tools)
            }
        };
        for w in warnings.iter().chain(&change.warnings) {
            tracing::warn!(group, "{w}");
        }
        if change.changed {
            tracing::info!(group, tools = change.tools.len(), "tools announced");
            self.audit.record_detached(&ToolsChanged {
                group,
                tools: &change.tools,
            });
            self.events.publish(
                Topic::Workers,
                "tools_changed",
                obj(serde_json::json!({"group": group, "tools": change.tools})),
            );
        }
    }
}

/// The names rules may use: every registered tool, the names an MCP server's tools
/// will have (`NAME__…`, or their `prefix`), and any name when an external group or a
/// server mounted with `prefix = ""` will announce its own.
pub fn tool_names(config: &Config, registry: &Registry) -> ToolNames {
    // Built-in tools a worker announces may be absent now (no skills yet) and come later.
    let templates = tools::announced();
    let mut names = ToolNames::of(
        registry
            .entries()
            .map(|e| e.def.as_ref())
            .chain(templates.iter()),
    );
    let mut open = !config.workers.external.is_empty();
    for (server, s) in &config.mcp.servers {
        match s.prefix.as_deref() {
            // Mounted without a prefix: its tools may have any name.
            Some("") => open = true,
            Some(p) => names = names.with_prefix(p.to_owned()),
            None => names = names.with_prefix(format!("{server}__")),
        }
    }
    if !open { names } else { names.open() }
}
