//! The memory watchdog: every [`INTERVAL`] it samples the RSS of each ready worker
//! process itself (not its commands: `status` counts those; for an external worker under
//! the reap shim, the worker below it) and has any worker above its group's
//! `workers.G.max_rss_mb` replaced once its calls are done. A leaking tool then costs
//! one planned restart (recorded as `worker_exited` with reason `memory`, counted in the
//! worker's `restarts`), never the machine's memory.
//!
//! The decision is the pure [`over_limit`]; the loop only samples and asks.

use std::sync::Arc;
use std::time::Duration;

use crate::call::service::Service;
use crate::workers::worker::{RestartReason, WorkerMsg, WorkerShared, WorkerState};

/// How often the workers are sampled. Internal on purpose: the limit is what operators
/// tune; the sampling period only bounds how long a worker may sit above it.
pub const INTERVAL: Duration = Duration::from_secs(5);

/// One worker's sample.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Its group.
    pub group: String,
    /// Its slot.
    pub index: u32,
    /// The process sampled.
    pub pid: u32,
    /// Only a ready worker is replaced (one being replaced already is left alone).
    pub ready: bool,
    /// Its resident memory (0: the sample failed).
    pub rss_bytes: u64,
}

/// The workers to restart: ready ones whose RSS passed their group's limit in MiB. A
/// limit of 0 (or a group without one) is no limit; an RSS of 0 means the sample failed
/// (the process just went away) and restarts nothing.
pub fn over_limit(samples: &[Sample], limit_mb: impl Fn(&str) -> Option<u64>) -> Vec<Sample> {
    samples
        .iter()
        .filter(|s| s.ready && s.rss_bytes > 0)
        .filter(|s| {
            limit_mb(&s.group)
                .filter(|mb| *mb > 0)
                .is_some_and(|mb| s.rss_bytes > mb.saturating_mul(1024 * 1024))
        })
        .cloned()
        .collect()
}

/// Run until the task is aborted (at drain).
pub async fn run(service: Arc<Service>) {
    let mut tick = tokio::time::interval(INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick.tick().await; // the first tick is immediate; workers are just starting
    loop {
        tick.tick().await;
        check(&service).await;
        // Staged changes whose token expired go with their staging directories.
        service.prune_staged();
    }
}

/// Sample every worker once and ask for the restarts [`over_limit`] picks.
pub async fn check(service: &Arc<Service>) {
    let workers: Vec<Arc<WorkerShared>> = service
        .pools()
        .values()
        .flat_map(|p| p.workers().iter().cloned().collect::<Vec<_>>())
        .collect();
    let pids: Vec<u32> = workers.iter().map(|w| w.pid().unwrap_or(0)).collect();
    let rss = {
        let pids = pids.clone();
        tokio::task::spawn_blocking(move || {
            pids.iter()
                .map(|p| crate::usage::own_rss(crate::usage::worker_process(*p)))
                .collect::<Vec<_>>()
        })
        .await
        .unwrap_or_default()
    };
    let samples: Vec<Sample> = workers
        .iter()
        .zip(pids)
        .zip(rss)
        .filter(|((_, pid), _)| *pid != 0)
        .map(|((w, pid), rss_bytes)| Sample {
            group: w.group.clone(),
            index: w.index,
            pid,
            ready: w.state() == WorkerState::Ready,
            rss_bytes,
        })
        .collect();
    let config = service.config();
    for s in over_limit(&samples, |g| config.workers.group(g).map(|c| c.max_rss_mb)) {
        let Some(w) = workers
            .iter()
            .find(|w| w.group == s.group && w.index == s.index)
        else {
            continue;
        };
        tracing::warn!(group = %s.group, index = s.index, pid = s.pid, rss_mb = s.rss_bytes / (1024 * 1024),
            "worker above max_rss_mb; restarting it once its calls are done");
        if let Some(actor) = w.actor_ref() {
            let _ = actor.cast(WorkerMsg::Restart {
                reason: RestartReason::Memory,
                reply: None,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024 * 1024;

    fn s(group: &str, index: u32, ready: bool, rss_mb: u64) -> Sample {
        Sample {
            group: group.into(),
            index,
            pid: 100 + index,
            ready,
            rss_bytes: rss_mb * MIB,
        }
    }

    fn limits(g: &str) -> Option<u64> {
        match g {
            "search" => Some(100),
            "exec" => Some(0),
            _ => None,
        }
    }

    #[test]
    fn only_ready_workers_above_their_limit() {
        let samples = [
            s("search", 0, true, 101),
            s("search", 1, true, 100),  // at the limit is fine
            s("search", 2, false, 500), // already restarting: the next sample decides
        ];
        let picked: Vec<_> = over_limit(&samples, limits)
            .into_iter()
            .map(|x| x.index)
            .collect();
        assert_eq!(picked, vec![0]);
    }

    #[test]
    fn zero_or_missing_limit_means_none() {
        let samples = [s("exec", 0, true, 10_000), s("edit", 0, true, 10_000)];
        assert!(over_limit(&samples, limits).is_empty());
    }

    #[test]
    fn a_failed_sample_restarts_nothing() {
        let samples = [s("search", 0, true, 0)];
        assert!(over_limit(&samples, |_| Some(1)).is_empty());
    }

    #[test]
    fn huge_limits_do_not_overflow() {
        let samples = [s("search", 0, true, 1)];
        assert!(over_limit(&samples, |_| Some(u64::MAX)).is_empty());
    }
}
