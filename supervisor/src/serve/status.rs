//! The `status` answer: per worker its group, pid, state, restarts, calls in flight,
//! RSS and CPU (sampled with `sysinfo`), the audit position and the active guards.

use std::sync::{Arc, Mutex, OnceLock};

use sysinfo::{Pid, ProcessRefreshKind, ProcessesToUpdate, System};
use toolvisor_protocol::Id;
use toolvisor_protocol::message::{AuditStatus, Guards, ServerMessage, WorkerStatus};

use crate::service::Service;

/// One sampler for the process: CPU percentages are deltas between refreshes.
fn sampler() -> &'static Mutex<Option<System>> {
    static SYS: OnceLock<Mutex<Option<System>>> = OnceLock::new();
    SYS.get_or_init(|| Mutex::new(System::new().ok()))
}

/// RSS bytes and CPU percent of each pid (zeros when unknown).
pub fn sample(pids: &[u32]) -> Vec<(u64, f32)> {
    let mut guard = sampler().lock().unwrap_or_else(|p| p.into_inner());
    let Some(sys) = guard.as_mut() else {
        return vec![(0, 0.0); pids.len()];
    };
    let list: Vec<Pid> = pids.iter().map(|p| Pid::from_u32(*p)).collect();
    let kind = ProcessRefreshKind::nothing().with_memory().with_cpu();
    sys.refresh_processes_specifics(ProcessesToUpdate::Some(&list), true, kind);
    list.iter()
        .map(|p| {
            sys.process(*p)
                .map_or((0, 0.0), |p| (p.memory(), p.cpu_usage()))
        })
        .collect()
}

/// The status message for request `id`.
pub async fn status(svc: &Arc<Service>, id: Id) -> ServerMessage {
    let mut workers = Vec::new();
    let mut guards = Guards::default();
    let mut groups: Vec<_> = svc.pools.values().collect();
    // Built-in groups in their order, then the others (MCP servers) by name.
    groups.sort_by_key(|p| {
        let builtin = toolvisor_protocol::tools::GROUPS
            .iter()
            .position(|g| *g == p.group);
        (builtin.unwrap_or(usize::MAX), p.group.clone())
    });
    for pool in groups {
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
    let pids: Vec<u32> = workers.iter().map(|w| w.pid.unwrap_or(0)).collect();
    let samples = tokio::task::spawn_blocking(move || sample(&pids))
        .await
        .unwrap_or_default();
    for (w, (rss, cpu)) in workers.iter_mut().zip(samples) {
        if w.pid.is_some() {
            w.rss_bytes = rss;
            w.cpu_percent = cpu;
        }
    }
    ServerMessage::Status {
        id,
        uptime_ms: svc.started.elapsed().as_millis() as u64,
        workers,
        audit: svc.audit_status(),
        guards,
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
            path: self.audit.path().display().to_string(),
            seq: self.audit.last_seq(),
        }
    }
}
