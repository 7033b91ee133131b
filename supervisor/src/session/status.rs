//! The `status` answer: per worker its group, pid, state, restarts, calls in flight,
//! and the RSS and CPU of its whole process tree ([`crate::usage`]); the calls
//! running now; the audit position and the active guards.

use std::sync::Arc;
use std::time::Instant;

use toolvisor_protocol::Id;
use toolvisor_protocol::message::{AuditStatus, Guards, ServerMessage, WorkerStatus};

use crate::call::service::Service;
use crate::usage::{Usage, sampler};

/// The usage of the tree under each pid (0: none), off the async threads.
async fn sample(pids: Vec<u32>) -> Vec<Usage> {
    let n = pids.len();
    tokio::task::spawn_blocking(move || {
        sampler()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .sample(&pids)
    })
    .await
    .unwrap_or_else(|_| vec![Usage::default(); n])
}

/// The status message for request `id`.
pub async fn status(svc: &Arc<Service>, id: Id) -> ServerMessage {
    let mut workers = Vec::new();
    let mut guards = Guards::default();
    for pool in svc.pools_in_order() {
        for w in pool.workers().iter() {
            let g = w.guards.lock().unwrap_or_else(|p| p.into_inner()).clone();
            guards.landlock = guards.landlock.max(g.landlock);
            guards.openat2 |= g.openat2;
            guards.subreaper |= g.subreaper;
            guards.cgroup |= g.cgroup;
            merge_sandbox_guards(&mut guards, &g);
            workers.push(WorkerStatus {
                group: w.group.clone(),
                index: w.index,
                pid: w.pid(),
                state: w.state().as_str().to_owned(),
                restarts: w.restarts.load(std::sync::atomic::Ordering::SeqCst),
                in_flight: w.in_flight() as u32,
                rss_bytes: 0,
                cpu_percent: 0.0,
            });
        }
    }
    guards.verified = svc.verified();
    let pids: Vec<u32> = workers.iter().map(|w| w.pid.unwrap_or(0)).collect();
    for (w, u) in workers.iter_mut().zip(sample(pids).await) {
        w.rss_bytes = u.rss_bytes;
        w.cpu_percent = u.cpu_percent;
    }
    ServerMessage::Status {
        id,
        uptime_ms: svc.started().elapsed().as_millis() as u64,
        workers,
        audit: svc.audit_status(),
        guards,
        calls: svc.running().list(Instant::now()),
    }
}

/// Log a status answer (SIGUSR1) as structured fields: one `status` line, then one
/// line per worker and per call in flight (JSON objects under `--log-format json`).
pub fn log(status: &ServerMessage) {
    let ServerMessage::Status {
        uptime_ms,
        workers,
        audit,
        guards,
        calls,
        ..
    } = status
    else {
        return;
    };
    let g = guards;
    tracing::info!(
        uptime_ms,
        audit_path = %audit.path,
        audit_seq = audit.seq,
        landlock = g.landlock,
        openat2 = g.openat2,
        subreaper = g.subreaper,
        cgroup = g.cgroup,
        namespaces = g.namespaces,
        network = g.network,
        limits = g.limits.as_deref().unwrap_or("none"),
        protected = %g.protected.join(" "),
        workers = workers.len(),
        calls = calls.len(),
        "status"
    );
    for w in workers {
        tracing::info!(
            group = %w.group,
            index = w.index,
            pid = w.pid,
            state = %w.state,
            restarts = w.restarts,
            in_flight = w.in_flight,
            rss_bytes = w.rss_bytes,
            cpu_percent = w.cpu_percent,
            "status: worker"
        );
    }
    for c in calls {
        tracing::info!(
            id = %c.id,
            session = %c.session,
            tool = %c.tool,
            running_ms = c.running_ms,
            "status: call"
        );
    }
}

/// The command sandbox's guards come from the exec workers (others report none).
fn merge_sandbox_guards(all: &mut Guards, g: &Guards) {
    all.namespaces |= g.namespaces;
    all.network |= g.network;
    if all.protected.is_empty() {
        all.protected = g.protected.clone();
    }
    if all.limits.is_none() {
        all.limits = g.limits.clone();
    }
}

impl Service {
    /// Where the audit log is and the last seq written.
    pub fn audit_status(&self) -> AuditStatus {
        AuditStatus {
            path: self.audit().path().display().to_string(),
            seq: self.audit().last_seq(),
        }
    }
}
