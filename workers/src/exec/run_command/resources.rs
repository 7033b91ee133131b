//! What a command used: its CPU watch and the resources of its report.

use super::*;

/// The CPU budget to watch on the command's cgroup, when both exist.
pub(crate) fn cpu_watch(cgroup: Option<&CommandCgroup>, cpu_s: u64) -> Option<CpuWatch<'_>> {
    let cgroup = cgroup.filter(|_| cpu_s > 0)?;
    Some(CpuWatch {
        cgroup,
        limit_ms: cpu_s * 1000,
    })
}

/// `meta.resources`: from the shim's report, else (it was killed) the CPU time the
/// cgroup measured; zeros when neither is known.
pub(super) fn resources(report: Option<&Report>, cgroup: Option<&CommandCgroup>) -> Value {
    let (rss, cpu) = match report {
        Some(r) => (r.peak_rss_bytes, r.cpu_ms),
        None => (0, cgroup.and_then(CommandCgroup::cpu_ms).unwrap_or(0)),
    };
    json!({ "peak_rss_bytes": rss, "cpu_ms": cpu })
}
