//! SIGHUP: read the configuration again (a bad one keeps the old), then restart every
//! worker after its calls end, one worker of a group at a time.

use std::sync::Arc;

use crate::config::Config;
use crate::service::Service;

pub async fn reload_and_restart(service: &Arc<Service>) {
    match Config::load(&service.paths.config_file) {
        Ok(cfg) => {
            for (group, pool) in &service.pools {
                if let Some(g) = cfg.workers.group(group) {
                    pool.set_queue_max(g.queue_max);
                }
            }
            *service.config.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(cfg);
            tracing::info!("SIGHUP: configuration reloaded");
        }
        Err(e) => tracing::error!("SIGHUP: keeping the old configuration: {e}"),
    }
    let restarts = service.pools.values().map(|p| p.restart());
    futures::future::join_all(restarts).await;
    tracing::info!("SIGHUP: every worker restarted");
}
