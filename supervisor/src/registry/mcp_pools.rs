//! One pool per MCP server: group `mcp:NAME` with one worker (`toolvisor worker --group
//! mcp:NAME`, which starts the server or opens its HTTP session), supervised like every
//! other group. The worker's announced tools go to the [`McpRegistry`]; a change is
//! published as `tools_changed` on the `workers` topic and recorded in the audit log.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use toolvisor_protocol::message::Topic;
use toolvisor_protocol::worker::{AnnouncedTool, WorkerInit};

use crate::audit::Audit;
use crate::config::{Config, GroupConfig};
use crate::registry::mcp::{McpRegistry, group_of, server_init};
use crate::service::{Paths, Service};
use crate::session::events::{Events, obj};
use crate::workers::pool::{Pool, PoolSpec};
use crate::workers::restart::RestartPolicy;
use crate::workers::spawn::{SpawnSpec, Spawner};
use crate::workers::worker::{Reconfig, ToolsHook, WorkerShared};

/// What an MCP worker gets past its server's start-up deadline to say `ready`.
const READY_SLACK: Duration = Duration::from_secs(5);

/// Everything [`start`] needs from the service being built.
pub struct Start<'a> {
    pub config: &'a Config,
    pub init: &'a WorkerInit,
    pub paths: &'a Paths,
    pub spawner: &'a Spawner,
    pub events: &'a Events,
    pub audit: &'a Audit,
    pub registry: &'a Arc<McpRegistry>,
}

/// Start the pool of every configured server.
pub async fn start(s: Start<'_>) -> Result<HashMap<String, Arc<Pool>>, String> {
    let mut pools = HashMap::new();
    let defaults = GroupConfig::default();
    for (name, server) in &s.config.mcp.servers {
        let group = group_of(name);
        let spec = PoolSpec {
            group: group.clone(),
            count: 1,
            queue_max: defaults.queue_max,
            max_in_flight: defaults.max_in_flight,
            spawner: s.spawner.clone(),
            spawn: SpawnSpec {
                exe: s.paths.exe.clone(),
                group: group.clone(),
                cwd: s.paths.workspace.clone(),
                passthrough: Vec::new(),
                nice: 0,
                ready_timeout: Duration::from_millis(server.startup_timeout_ms) + READY_SLACK,
            },
            init: WorkerInit {
                group: group.clone(),
                mcp: Some(server_init(name, server)),
                ..s.init.clone()
            },
            policy: RestartPolicy::new(s.config.supervisor.clone()),
            events: s.events.clone(),
            deadline_grace: Duration::ZERO,
            tools_hook: Some(hook(s.registry.clone(), s.events.clone(), s.audit.clone())),
        };
        let pool = Pool::start(spec)
            .await
            .map_err(|e| format!("cannot start the {group} pool: {e}"))?;
        pools.insert(group, pool);
    }
    Ok(pools)
}

/// Announced tools into the registry; a change is told and recorded.
fn hook(registry: Arc<McpRegistry>, events: Events, audit: Audit) -> ToolsHook {
    Arc::new(
        move |w: &WorkerShared, tools: Vec<AnnouncedTool>, list_changed: bool| {
            let out = registry.replace(&w.group, tools);
            for warning in &out.warnings {
                tracing::warn!(group = %w.group, "{warning}");
            }
            if !out.changed {
                return;
            }
            tracing::info!(group = %w.group, tools = out.tools.len(), list_changed, "MCP tools changed");
            let fields = obj(json!({
                "group": w.group, "index": w.index, "pid": w.pid(), "tools": out.tools,
            }));
            audit.append_detached("tools_changed", fields.clone());
            events.publish(Topic::Workers, "tools_changed", fields);
        },
    )
}

/// SIGHUP: the servers that stay get their new settings (command, url, env, risk,
/// allow-list, timeout) from their next start on, and are restarted like every other
/// worker. Adding or removing a server takes a restart of the daemon (said in the log).
pub fn reload_plans(
    service: &Service,
    cfg: &Config,
    init: &WorkerInit,
) -> Vec<(Arc<Pool>, usize, Reconfig)> {
    let running = cfg
        .mcp
        .servers
        .iter()
        .filter(|(n, _)| service.pools.contains_key(&group_of(n)));
    service.mcp.reconfigure(&crate::config::mcp::McpConfig {
        servers: running.map(|(n, s)| (n.clone(), s.clone())).collect(),
    });
    crate::audit::redact::add_secrets(crate::registry::mcp::secrets(&cfg.mcp));
    for name in cfg.mcp.servers.keys() {
        if !service.pools.contains_key(&group_of(name)) {
            tracing::warn!(
                "SIGHUP: MCP server `{name}` is new; it starts with the next start of toolvisor"
            );
        }
    }
    let mut plans = Vec::new();
    for (group, pool) in &service.pools {
        let Some(name) = group.strip_prefix(crate::config::mcp::GROUP_PREFIX) else {
            continue;
        };
        let Some(server) = cfg.mcp.servers.get(name) else {
            tracing::warn!(
                "SIGHUP: MCP server `{name}` was removed from the configuration; it keeps running until toolvisor restarts"
            );
            continue;
        };
        let reconfig = Reconfig {
            init: WorkerInit {
                group: group.clone(),
                mcp: Some(server_init(name, server)),
                ..init.clone()
            },
            passthrough: Vec::new(),
            supervisor: cfg.supervisor.clone(),
        };
        pool.reconfigure(&reconfig);
        plans.push((pool.clone(), 1, reconfig));
    }
    plans
}
