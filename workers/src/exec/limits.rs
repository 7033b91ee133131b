//! `[workers.exec.limits]` for one command: which rlimits the shim sets beside the
//! cgroup (if any), which limit stopped a command, and how that reads in a result.
//!
//! Memory and processes: the cgroup where there is one; else `RLIMIT_AS` (address
//! space, a rougher bound) and `RLIMIT_NPROC` (only inside a user namespace, where it
//! counts the sandbox's own processes; outside one it would count every process of the
//! user). CPU time: the cgroup's total, polled, where there is one, and `RLIMIT_CPU`
//! per process always. File size: `RLIMIT_FSIZE` always.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

use toolvisor_protocol::worker::ExecLimits;
use toolvisor_protocol::{ErrorBody, ErrorType};

use super::cgroup::{CommandCgroup, Limit};
use super::launch::{Ended, Stop};
use toolvisor_sandbox::spec::Rlimits;

/// Processes of ours counted in `RLIMIT_NPROC` besides the command's (the shim, the
/// PID namespace's first process).
const OWN_PROCESSES: u64 = 2;

/// The rlimits the shim sets, given whether cgroups and namespaces are in use.
pub(crate) fn rlimits(l: &ExecLimits, cgroups: bool, namespaces: bool) -> Rlimits {
    let on = |v: u64| (v > 0).then_some(v);
    Rlimits {
        as_bytes: on(l.memory_mb).filter(|_| !cgroups).map(|mb| mb << 20),
        nproc: on(l.pids)
            .filter(|_| !cgroups && namespaces)
            .map(|n| n + OWN_PROCESSES),
        cpu_s: on(l.cpu_s),
        fsize: on(l.file_mb).map(|mb| mb << 20),
    }
}

/// The limit that stopped a finished command, if one did. A command that exited 0 was
/// not stopped (whatever a child of it met); a timeout or cancel stays one.
pub(crate) fn stopped_by(
    ended: &Ended,
    cgroup: Option<&CommandCgroup>,
    l: &ExecLimits,
) -> Option<Limit> {
    match ended.stop {
        Some(Stop::Limit(limit)) => return Some(limit),
        Some(Stop::Timeout | Stop::Cancelled) => return None,
        None => {}
    }
    let status = ended.status?;
    if status.success() {
        return None;
    }
    if let Some(hit) = cgroup.and_then(CommandCgroup::hit) {
        return Some(hit);
    }
    by_signal(status, l)
}

/// SIGXCPU (`RLIMIT_CPU`) or SIGXFSZ (`RLIMIT_FSIZE`), also as a shell reports a
/// child's death by them (128 + the signal).
fn by_signal(status: ExitStatus, l: &ExecLimits) -> Option<Limit> {
    let sig = status
        .signal()
        .or_else(|| status.code().filter(|c| *c > 128).map(|c| c - 128))?;
    match sig {
        libc::SIGXCPU if l.cpu_s > 0 => Some(Limit::Cpu),
        libc::SIGXFSZ if l.file_mb > 0 => Some(Limit::FileSize),
        _ => None,
    }
}

/// The `ResourceLimit` error naming the limit and its setting.
pub(crate) fn error(limit: Limit, l: &ExecLimits) -> ErrorBody {
    let (value, unit) = match limit {
        Limit::Memory => (l.memory_mb, " MiB"),
        Limit::Pids => (l.pids, " processes"),
        Limit::Cpu => (l.cpu_s, " s of CPU time"),
        Limit::FileSize => (l.file_mb, " MiB per file"),
    };
    ErrorBody::new(
        ErrorType::ResourceLimit,
        format!(
            "the command was stopped by its {} limit of {value}{unit} (workers.exec.limits.{})",
            limit_name(limit),
            limit.key()
        ),
    )
}

fn limit_name(limit: Limit) -> &'static str {
    match limit {
        Limit::Memory => "memory",
        Limit::Pids => "process count",
        Limit::Cpu => "CPU time",
        Limit::FileSize => "file size",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(raw: i32, stop: Option<Stop>) -> Ended {
        Ended {
            status: Some(ExitStatus::from_raw(raw)),
            stop,
            yielded: false,
        }
    }

    #[test]
    fn rlimits_fill_in_for_missing_cgroups() {
        let l = ExecLimits {
            memory_mb: 10,
            pids: 5,
            cpu_s: 3,
            file_mb: 1,
        };
        let r = rlimits(&l, true, true);
        assert_eq!((r.as_bytes, r.nproc), (None, None));
        assert_eq!((r.cpu_s, r.fsize), (Some(3), Some(1 << 20)));
        let r = rlimits(&l, false, true);
        assert_eq!((r.as_bytes, r.nproc), (Some(10 << 20), Some(7)));
        let r = rlimits(&l, false, false);
        assert_eq!(
            r.nproc, None,
            "outside a user namespace NPROC counts the whole user"
        );
        let off = rlimits(
            &ExecLimits {
                memory_mb: 0,
                pids: 0,
                cpu_s: 0,
                file_mb: 0,
            },
            false,
            true,
        );
        assert!(off.is_empty());
    }

    #[test]
    fn signals_and_stops_name_their_limit() {
        let l = ExecLimits {
            cpu_s: 1,
            file_mb: 1,
            ..ExecLimits::default()
        };
        assert_eq!(
            stopped_by(&ended(libc::SIGXFSZ, None), None, &l),
            Some(Limit::FileSize)
        );
        assert_eq!(
            stopped_by(&ended((128 + libc::SIGXCPU) << 8, None), None, &l),
            Some(Limit::Cpu)
        );
        assert_eq!(stopped_by(&ended(0, None), None, &l), None);
        assert_eq!(stopped_by(&ended(1 << 8, None), None, &l), None);
        assert_eq!(
            stopped_by(&ended(9, Some(Stop::Limit(Limit::Cpu))), None, &l),
            Some(Limit::Cpu)
        );
        assert_eq!(
            stopped_by(&ended(libc::SIGXFSZ, Some(Stop::Timeout)), None, &l),
            None
        );
        let e = error(Limit::Memory, &ExecLimits::default());
        assert_eq!(e.kind, ErrorType::ResourceLimit);
        assert!(
            e.message
                .contains("memory limit of 4096 MiB (workers.exec.limits.memory_mb)"),
            "{}",
            e.message
        );
    }
}
