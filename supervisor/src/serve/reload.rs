//! SIGHUP: read the configuration again (a bad one keeps the old one and the running
//! workers), apply every key that can change while serving (the policy with its
//! `confirm_timeout_ms`, limits, timeouts, queue sizes, worker counts, restart policy,
//! `[audit]`, `[edit]`, the drain grace and open-call limit, the workspace roots), then
//! restart every worker after its calls end, one worker of a group at a time — except
//! an exec worker the reload changed nothing for, which keeps its background processes
//! (`WorkerActorState::reload_changes_nothing`). A changed
//! `count` grows the group (new workers start with the new configuration) or shrinks it
//! (the highest indices retire once their calls end).

use std::sync::Arc;

use crate::audit::record::{ConfigReloadFailed, ConfigReloaded};
use crate::call::service::Service;
use crate::config::Config;
use crate::policy::Policy;
use crate::workers::worker::Reconfig;
use toolvisor_protocol::worker::WorkerInit;

/// Read and check the configuration file again, policy included.
fn load(service: &Service) -> Result<(Config, Policy, WorkerInit), String> {
    let paths = service.paths();
    let cfg = Config::load(&paths.config_file).map_err(|e| e.to_string())?;
    let init = crate::workers::init::worker_init(paths, &cfg, service.instance())
        .map_err(|e| e.to_string())?;
    let names = service.tool_names(&cfg);
    let policy = crate::policy::for_config(&cfg, &init.roots, &names)
        .map_err(|e| format!("bad [policy]: {e}"))?;
    Ok((cfg, policy, init))
}

/// SIGHUP. A bad configuration keeps the old one and leaves the workers alone (same
/// pids): nothing they run would change. A good one is swapped in, then every worker is
/// replaced after its calls end, one worker of a group at a time, in the background so
/// the signal loop stays responsive (a SIGTERM meanwhile still drains at once).
pub async fn reload_and_restart(service: &Arc<Service>) {
    let path = service.paths().config_file.display().to_string();
    let (cfg, policy, init) = match load(service) {
        Ok(loaded) => loaded,
        Err(e) => {
            service.audit().record_detached(&ConfigReloadFailed {
                path: &path,
                error: &e,
            });
            tracing::error!("SIGHUP: keeping the old configuration and the running workers: {e}");
            return;
        }
    };
    crate::registry::mcp::secrets(&cfg);
    for note in crate::registry::mcp::reload_notes(service.pools().keys(), &cfg) {
        tracing::warn!("SIGHUP: {note}");
    }
    for w in cfg.warnings() {
        tracing::warn!("SIGHUP: {w}");
    }
    let mut plans = Vec::new();
    for (group, pool) in service.pools() {
        if let Some(g) = cfg.group_settings(group) {
            pool.set_limits(g.queue_max, g.max_in_flight);
            let reconfig = Reconfig {
                // An MCP server's worker restarts with its server's new settings.
                init: WorkerInit {
                    mcp: cfg.mcp.server_init(group),
                    ..init.clone()
                },
                passthrough: g.env_passthrough.clone(),
                supervisor: cfg.supervisor.clone(),
            };
            pool.reconfigure(&reconfig);
            plans.push((pool.clone(), cfg.workers.count(group), reconfig));
        }
    }
    service.grants().set_scopes(policy.scopes().clone());
    service.audit().reconfigure(&cfg.audit);
    service.undo().reconfigure(&cfg);
    service.replace_config(cfg, policy);
    let digest = file_sha256(&service.paths().config_file);
    service.audit().record_detached(&ConfigReloaded {
        path: &path,
        config_sha256: &digest,
    });
    tracing::info!("SIGHUP: configuration reloaded; restarting the workers as their calls end");
    let verifying = service.clone();
    tokio::spawn(async move {
        futures::future::join_all(plans.iter().map(|(p, count, r)| p.reload(*count, r))).await;
        tracing::info!("SIGHUP: every worker restarted");
        crate::serve::verify::verify(&verifying).await;
    });
}

/// SHA-256 of the config file as read (empty when there is none).
fn file_sha256(path: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    std::fs::read(path)
        .map(|b| {
            Sha256::digest(&b)
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect()
        })
        .unwrap_or_default()
}
