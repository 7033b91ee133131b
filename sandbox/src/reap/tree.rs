//! Killing a command's whole tree without a PID namespace: every process whose parent
//! chain leads to the shim (a subreaper, so orphans re-parent to it) gets SIGTERM, then
//! SIGKILL after the grace, found by scanning `/proc` until none is left.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use toolvisor_os::procfs;

use nix::sys::signal::{Signal, kill, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use super::signals::SelfPipe;

/// After SIGKILL, how long to keep trying before giving up on unkillable (D-state)
/// processes rather than hanging forever.
pub const KILL_CAP: Duration = Duration::from_secs(5);
/// How often the TERM phase rescans for processes forked after the last scan.
const RESCAN: Duration = Duration::from_millis(100);

/// Reap every exited child without blocking; record the command's status.
pub fn reap_all(command: Pid, status: &mut Option<WaitStatus>) {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(s) if s.pid() == Some(command) => *status = Some(s),
            Ok(_) => {}
        }
    }
}

/// Kill every descendant of `me` (TERM, then KILL after `grace`) and reap them all.
/// Returns once none is left, or after the KILL phase's cap.
pub fn kill_tree(
    me: Pid,
    command: Pid,
    grace: Duration,
    pipe: &SelfPipe,
    status: &mut Option<WaitStatus>,
) {
    let start = Instant::now();
    let kill_at = start + grace;
    let mut termed: HashSet<i32> = HashSet::new();
    reap_all(command, status);
    if has_no_children(me) {
        // The common case: nothing left. Every orphan is reparented to us (we are a
        // subreaper), so no child means no descendant: skip the scan of all of /proc.
        return;
    }
    loop {
        reap_all(command, status);
        let found = descendants(me.as_raw());
        if found.is_empty() {
            return;
        }
        let now = Instant::now();
        if now >= kill_at + KILL_CAP {
            eprintln!("toolvisor reap: {} processes survive SIGKILL", found.len());
            return;
        }
        let sig = if now >= kill_at {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        signal_all(command, &found, sig, &mut termed);
        let wait = if sig == Signal::SIGKILL {
            Duration::from_millis(20)
        } else {
            RESCAN.min(kill_at.saturating_duration_since(now))
        };
        pipe.wait(Some(wait));
    }
}

/// Send `sig` to the command's group and to each found process; TERM only once per
/// process (a handler may be cleaning up), followed by CONT so a stopped one sees it.
fn signal_all(command: Pid, found: &[i32], sig: Signal, termed: &mut HashSet<i32>) {
    if sig == Signal::SIGKILL || termed.insert(-command.as_raw()) {
        let _ = killpg(command, sig);
        let _ = killpg(command, Signal::SIGCONT);
    }
    for &pid in found {
        if sig == Signal::SIGKILL || termed.insert(pid) {
            let _ = kill(Pid::from_raw(pid), sig);
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }
}

/// Whether `me` has no child at all, per the kernel's own lists (one per thread);
/// `false` when a list cannot be read (then the caller scans).
fn has_no_children(me: Pid) -> bool {
    procfs::children(me.as_raw()).is_some_and(|c| c.is_empty())
}

/// Every process whose parent chain leads to `root` (zombies included), from /proc.
pub fn descendants(root: i32) -> Vec<i32> {
    descendants_in(root, &process_parents())
}

/// [`descendants`] of each of `roots`, from one read of /proc.
pub fn descendants_of_each(roots: &[i32]) -> Vec<Vec<i32>> {
    let parents = process_parents();
    roots.iter().map(|&r| descendants_in(r, &parents)).collect()
}

fn descendants_in(root: i32, parents: &HashMap<i32, i32>) -> Vec<i32> {
    let mut memo: HashMap<i32, bool> = HashMap::new();
    let mut out = Vec::new();
    for &pid in parents.keys() {
        if pid != root && leads_to(pid, root, parents, &mut memo) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// Whether `pid`'s ancestry reaches `root` (memoised; bounded against cycles).
fn leads_to(
    pid: i32,
    root: i32,
    parents: &HashMap<i32, i32>,
    memo: &mut HashMap<i32, bool>,
) -> bool {
    let mut chain = Vec::new();
    let mut cur = pid;
    let answer = loop {
        if let Some(&known) = memo.get(&cur) {
            break known;
        }
        match parents.get(&cur) {
            Some(&pp) if pp == root => break true,
            Some(&pp) if pp > 1 && chain.len() < 4096 => {
                chain.push(cur);
                cur = pp;
            }
            _ => break false,
        }
    };
    memo.insert(pid, answer);
    for p in chain {
        memo.insert(p, answer);
    }
    answer
}

/// pid → parent pid for every process in /proc.
fn process_parents() -> HashMap<i32, i32> {
    procfs::pids()
        .filter_map(|pid| Some((pid, procfs::ppid(pid)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ppid_is_parsed_after_parenthesised_names() {
        let me = std::process::id() as i32;
        assert_eq!(procfs::ppid(me), Some(nix::unistd::getppid().as_raw()));
        let parents = HashMap::from([(10, 5), (11, 10), (12, 1), (5, 1)]);
        let mut memo = HashMap::new();
        assert!(leads_to(11, 5, &parents, &mut memo));
        assert!(leads_to(10, 5, &parents, &mut memo));
        assert!(!leads_to(12, 5, &parents, &mut memo));
    }
}
