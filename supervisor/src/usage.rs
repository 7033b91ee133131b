//! What each worker costs, for `status`: CPU and RSS over its whole process tree — the
//! worker, the `toolvisor reap` shims under it and every command they run (sandboxed
//! commands sit in their own PID namespace, but the host's `/proc` still shows them
//! under their shim). A worker whose command burns a core shows about 100 %.
//!
//! CPU is a rate between two samples of the same processes, each known by pid and start
//! time (a reused pid is a new process). The baseline is the newest earlier sample at
//! least [`MIN_WINDOW`] old, so two `status` calls in a row still measure a useful
//! window; a process the baseline does not know is measured over its lifetime. The
//! arithmetic is [`Sampler::compute`], pure, so it is tested on made-up tables.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, OnceLock};

use toolvisor_os::procfs::{self, Stat};

/// The shortest window a CPU rate is measured over (a shorter one is mostly noise:
/// CPU time advances in ticks of 10 ms).
pub const MIN_WINDOW: f64 = 1.0;

/// One worker's tree: resident memory in bytes and CPU in percent of one core.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Resident memory of the whole tree, in bytes.
    pub rss_bytes: u64,
    /// CPU since the last sample, in percent of one core.
    pub cpu_percent: f32,
}

/// What a sample saw of one process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Seen {
    start_ticks: u64,
    cpu_ticks: u64,
}

/// A sample: when (seconds since boot) and what it saw.
struct Snapshot {
    at: f64,
    seen: HashMap<i32, Seen>,
}

/// The units of the host (`/proc` counts in ticks and pages).
#[derive(Clone, Copy, Debug)]
pub struct Units {
    /// Clock ticks per second.
    pub ticks_per_sec: u64,
    /// Bytes per memory page.
    pub page_size: u64,
}

/// Keeps the last samples, to measure CPU between them.
#[derive(Default)]
pub struct Sampler {
    history: VecDeque<Snapshot>,
}

impl Sampler {
    /// The usage of the tree under each root pid (0: no process, zeros), now.
    pub fn sample(&mut self, roots: &[u32]) -> Vec<Usage> {
        let units = Units {
            ticks_per_sec: procfs::clock_ticks(),
            page_size: procfs::page_size(),
        };
        self.compute(&procfs::all_stats(), roots, procfs::uptime_secs(), units)
    }

    /// [`Sampler::sample`] over a given process table at time `now` (seconds since boot).
    pub fn compute(&mut self, stats: &[Stat], roots: &[u32], now: f64, units: Units) -> Vec<Usage> {
        let children = children_of(stats);
        let by_pid: HashMap<i32, &Stat> = stats.iter().map(|s| (s.pid, s)).collect();
        let base = self.history.iter().rev().find(|s| now - s.at >= MIN_WINDOW);
        let hz = units.ticks_per_sec.max(1) as f64;
        let mut seen = HashMap::new();
        let usage = roots
            .iter()
            .map(|&root| {
                let tree = tree(root as i32, &by_pid, &children);
                let mut u = Usage::default();
                let mut rate = 0.0f64;
                for s in tree {
                    u.rss_bytes += s.rss_pages.saturating_mul(units.page_size);
                    rate += cpu_rate(s, base, now, hz);
                    seen.insert(
                        s.pid,
                        Seen {
                            start_ticks: s.start_ticks,
                            cpu_ticks: s.cpu_ticks,
                        },
                    );
                }
                u.cpu_percent = (rate * 100.0) as f32;
                u
            })
            .collect();
        self.remember(Snapshot { at: now, seen });
        usage
    }

    /// Keep a sample as a future baseline when it is at least [`MIN_WINDOW`] newer
    /// than the last kept one; two are enough.
    fn remember(&mut self, snap: Snapshot) {
        let newer = self
            .history
            .back()
            .is_none_or(|last| snap.at - last.at >= MIN_WINDOW);
        if newer {
            self.history.push_back(snap);
            while self.history.len() > 2 {
                self.history.pop_front();
            }
        }
    }
}

/// CPU seconds per second of one process: since the baseline when it knew this very
/// process, else over the process's lifetime.
fn cpu_rate(s: &Stat, base: Option<&Snapshot>, now: f64, hz: f64) -> f64 {
    let known = base.and_then(|b| {
        b.seen
            .get(&s.pid)
            .filter(|p| p.start_ticks == s.start_ticks && p.cpu_ticks <= s.cpu_ticks)
            .map(|p| (s.cpu_ticks - p.cpu_ticks, b.at))
    });
    let (ticks, since) = known.unwrap_or((s.cpu_ticks, s.start_ticks as f64 / hz));
    let window = (now - since).max(1.0 / hz);
    ticks as f64 / hz / window
}

fn children_of(stats: &[Stat]) -> HashMap<i32, Vec<i32>> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for s in stats {
        children.entry(s.ppid).or_default().push(s.pid);
    }
    children
}

/// `root` and every descendant in the table (none when `root` is not in it).
fn tree<'a>(
    root: i32,
    by_pid: &HashMap<i32, &'a Stat>,
    children: &HashMap<i32, Vec<i32>>,
) -> Vec<&'a Stat> {
    let mut out = Vec::new();
    let mut visited = HashSet::new();
    let mut todo = vec![root];
    while let Some(pid) = todo.pop() {
        if pid <= 0 || !visited.insert(pid) {
            continue;
        }
        if let Some(s) = by_pid.get(&pid) {
            out.push(*s);
            todo.extend(children.get(&pid).into_iter().flatten());
        }
    }
    out
}

/// The one sampler of this process (`status` calls share the baselines).
pub fn sampler() -> &'static Mutex<Sampler> {
    static SAMPLER: OnceLock<Mutex<Sampler>> = OnceLock::new();
    SAMPLER.get_or_init(|| Mutex::new(Sampler::default()))
}

/// The resident set of one process alone, in bytes (0 when it is gone): the memory
/// watchdog's measure, which leaves the commands out (their memory ends with them, and
/// `[workers.exec.limits]` bounds it).
pub fn own_rss(pid: u32) -> u64 {
    procfs::stat(pid as i32).map_or(0, |s| s.rss_pages.saturating_mul(procfs::page_size()))
}

/// The process that is the worker: `pid` itself, or — for a worker started under the
/// `toolvisor reap` shim (an external worker in the command sandbox) — the one process
/// the shim and its namespace's first process run.
pub fn worker_process(pid: u32) -> u32 {
    let mut p = pid as i32;
    // The shim, then the namespace's first process (a fork of it): two at most.
    for _ in 0..2 {
        if !is_shim(p) {
            break;
        }
        match procfs::children(p).as_deref() {
            Some(&[only]) => p = only,
            _ => break,
        }
    }
    p as u32
}

/// Whether `pid` runs `toolvisor reap` (its second argument is `reap`).
fn is_shim(pid: i32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.split(|b| *b == 0).nth(1) == Some(b"reap".as_slice()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_not_under_the_shim_is_its_own_worker() {
        let me = std::process::id();
        assert_eq!(worker_process(me), me);
        assert!(!is_shim(me as i32));
    }

    const UNITS: Units = Units {
        ticks_per_sec: 100,
        page_size: 4096,
    };

    fn st(pid: i32, ppid: i32, cpu_ticks: u64, start_ticks: u64, rss_pages: u64) -> Stat {
        Stat {
            pid,
            ppid,
            cpu_ticks,
            start_ticks,
            rss_pages,
        }
    }

    #[test]
    fn a_busy_grandchild_counts_in_its_worker() {
        let mut s = Sampler::default();
        // Worker 10 started at 100 s; its shim 11 and the busy command 12 at 200 s.
        let t0 = [
            st(1, 0, 0, 0, 10),
            st(10, 1, 500, 10_000, 100),
            st(11, 10, 1, 20_000, 10),
            st(12, 11, 0, 20_000, 50),
            st(20, 1, 9_999, 10_000, 1),
        ];
        let first = s.compute(&t0, &[10, 0, 99], 200.0, UNITS);
        assert_eq!(first[0].rss_bytes, 160 * 4096);
        assert_eq!(first[1], Usage::default(), "no process");
        assert_eq!(first[2], Usage::default(), "a pid that is gone");
        // Two seconds later the command used 2 s of CPU: one core.
        let t1 = [
            st(1, 0, 0, 0, 10),
            st(10, 1, 500, 10_000, 100),
            st(11, 10, 1, 20_000, 10),
            st(12, 11, 200, 20_000, 50),
            st(20, 1, 99_999, 10_000, 1),
        ];
        let u = s.compute(&t1, &[10], 202.0, UNITS);
        assert!((u[0].cpu_percent - 100.0).abs() < 0.5, "{u:?}");
    }

    #[test]
    fn a_new_process_is_measured_over_its_life() {
        let mut s = Sampler::default();
        // No baseline: a command half a second old that used 0.5 s is at 100 %.
        let t = [st(10, 1, 0, 0, 1), st(12, 10, 50, 19_950, 1)];
        let u = s.compute(&t, &[10], 200.0, UNITS);
        assert!((u[0].cpu_percent - 100.0).abs() < 0.5, "{u:?}");
    }

    #[test]
    fn a_reused_pid_is_a_new_process() {
        let mut s = Sampler::default();
        s.compute(
            &[st(10, 1, 0, 0, 1), st(12, 10, 1_000, 100, 1)],
            &[10],
            100.0,
            UNITS,
        );
        // Pid 12 now names a process started at 199 s that used 0.1 s: 10 %.
        let u = s.compute(
            &[st(10, 1, 0, 0, 1), st(12, 10, 10, 19_900, 1)],
            &[10],
            200.0,
            UNITS,
        );
        assert!((u[0].cpu_percent - 10.0).abs() < 0.5, "{u:?}");
    }

    #[test]
    fn quick_samples_keep_a_useful_baseline() {
        let mut s = Sampler::default();
        let at = |cpu| [st(10, 1, cpu, 0, 1)];
        s.compute(&at(0), &[10], 100.0, UNITS);
        let u = s.compute(&at(100), &[10], 101.0, UNITS);
        assert!((u[0].cpu_percent - 100.0).abs() < 0.5, "{u:?}");
        // 10 ms later: measured against the sample of 100 s, not the one of 101 s.
        let u = s.compute(&at(101), &[10], 101.01, UNITS);
        assert!((u[0].cpu_percent - 100.0).abs() < 1.5, "{u:?}");
    }

    #[test]
    fn a_cycle_in_a_torn_table_ends() {
        let mut s = Sampler::default();
        let u = s.compute(
            &[st(10, 11, 0, 0, 1), st(11, 10, 0, 0, 1)],
            &[10],
            1.0,
            UNITS,
        );
        assert_eq!(u[0].rss_bytes, 2 * 4096);
    }

    #[test]
    fn this_process_is_sampled() {
        let me = std::process::id();
        let u = sampler().lock().unwrap().sample(&[me]);
        assert!(u[0].rss_bytes > 0);
        assert!(own_rss(me) > 0);
    }
}
