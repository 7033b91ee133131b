//! `/proc`: the live processes, a process's parent, children, environment, cgroups
//! and CPU and memory use, and what this process's own descriptors name. Every reader
//! answers `None` (or nothing) for a process that is gone or unreadable: the caller
//! decides what an unknown process means.

use std::fs;
use std::os::fd::RawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

/// Every live process id, in the order `/proc` lists them.
pub fn pids() -> impl Iterator<Item = i32> {
    fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
}

/// The parent pid from `/proc/<pid>/stat`: the field after the state, counted after
/// the last `)`, since the command name may contain spaces and parentheses.
pub fn ppid(pid: i32) -> Option<i32> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_ppid(&stat)
}

fn parse_ppid(stat: &str) -> Option<i32> {
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The `NAME=VALUE` entries of a process's environment (empty when unreadable: a
/// process of another user, a non-dumpable one, or one that is gone).
pub fn environ(pid: i32) -> Vec<Vec<u8>> {
    let raw = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
    raw.split(|b| *b == 0)
        .filter(|v| !v.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

/// The lines of `/proc/<pid>/cgroup` (`ID:CONTROLLERS:PATH`), empty when unreadable.
pub fn cgroups(pid: i32) -> Vec<String> {
    fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .map(|t| t.lines().map(str::to_owned).collect())
        .unwrap_or_default()
}

/// The children of every thread of `pid`, from the kernel's own lists
/// (`/proc/<pid>/task/*/children`): cheaper than a scan of every process when the
/// answer is usually "none". `None` when a list cannot be read (the kernel lacks them,
/// or the process is gone): then only a scan of [`pids`] can tell.
pub fn children(pid: i32) -> Option<Vec<i32>> {
    let mut out = Vec::new();
    for task in fs::read_dir(format!("/proc/{pid}/task")).ok()? {
        let list = fs::read_to_string(task.ok()?.path().join("children")).ok()?;
        out.extend(
            list.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok()),
        );
    }
    Some(out)
}

/// The path an open descriptor of this process names now (`/proc/self/fd/<fd>`), for
/// checking where an open really landed. `None` without `/proc`, for a deleted file,
/// or for an object with no path (a pipe, a socket).
pub fn fd_path(fd: RawFd) -> Option<PathBuf> {
    let target = fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    // Deleted files read as "/x (deleted)"; anything not absolute is an anonymous object.
    (target.is_absolute() && !target.as_os_str().as_bytes().ends_with(b" (deleted)"))
        .then_some(target)
}

/// The pid a pidfd of this process names now (the `Pid:` line of its fdinfo); `None`
/// once the process has exited (the kernel then reports -1) or without `/proc`.
pub fn pidfd_pid(fd: RawFd) -> Option<i32> {
    let info = fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    let pid: i32 = info
        .lines()
        .find_map(|l| l.strip_prefix("Pid:"))?
        .trim()
        .parse()
        .ok()?;
    (pid > 0).then_some(pid)
}

/// What `/proc/<pid>/stat` says about a process's place and cost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stat {
    /// The process id.
    pub pid: i32,
    /// Its parent's process id.
    pub ppid: i32,
    /// User plus system CPU time, in clock ticks ([`clock_ticks`] per second).
    pub cpu_ticks: u64,
    /// When it started, in clock ticks since boot: with the pid, it names one process
    /// (a pid may be reused, a start time with it may not).
    pub start_ticks: u64,
    /// Resident set, in pages ([`page_size`] bytes each).
    pub rss_pages: u64,
}

/// The stat of `pid`, or `None` when it is gone or unreadable.
pub fn stat(pid: i32) -> Option<Stat> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(pid, &text)
}

/// Fields after the last `)`: state is 0, ppid 1, utime 11, stime 12, starttime 19,
/// rss 21 (proc(5), counted from 3 less).
fn parse_stat(pid: i32, text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let num = |i: usize| f.get(i)?.parse::<u64>().ok();
    Some(Stat {
        pid,
        ppid: f.get(1)?.parse().ok()?,
        cpu_ticks: num(11)? + num(12)?,
        start_ticks: num(19)?,
        rss_pages: num(21)?,
    })
}

/// Every live process's stat (those that vanish while read are left out).
pub fn all_stats() -> Vec<Stat> {
    pids().filter_map(stat).collect()
}

/// Clock ticks per second (`_SC_CLK_TCK`, 100 on every Linux in use).
pub fn clock_ticks() -> u64 {
    // SAFETY: sysconf reads a constant of the system; no memory is passed.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 { n as u64 } else { 100 }
}

/// The size of a memory page in bytes.
pub fn page_size() -> u64 {
    // SAFETY: as above.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u64 } else { 4096 }
}

/// Seconds since boot, as the start times in [`Stat`] count them (`CLOCK_BOOTTIME`).
pub fn uptime_secs() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    if rc == 0 {
        ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_after_the_name() {
        let line = "77 (a) b (c)) R 7 77 77 0 -1 4194304 10 0 0 0 150 25 0 0 20 0 1 0 4242 1000 321 18446744073709551615";
        let s = parse_stat(77, line).unwrap();
        assert_eq!(
            s,
            Stat {
                pid: 77,
                ppid: 7,
                cpu_ticks: 175,
                start_ticks: 4242,
                rss_pages: 321
            }
        );
        assert_eq!(parse_stat(1, "1 (x) S 0"), None);
    }

    #[test]
    fn this_process_has_a_stat() {
        let me = std::process::id() as i32;
        let s = stat(me).unwrap();
        assert_eq!(Some(s.ppid), ppid(me));
        assert!(s.rss_pages > 0);
        assert!(s.start_ticks as f64 / clock_ticks() as f64 <= uptime_secs() + 1.0);
        assert!(all_stats().iter().any(|s| s.pid == me));
    }

    #[test]
    fn ppid_is_read_after_a_name_with_spaces_and_parentheses() {
        assert_eq!(parse_ppid("42 (a) b (c)) S 7 42 42 0"), Some(7));
        assert_eq!(parse_ppid("garbage"), None);
    }

    #[test]
    fn this_process_is_listed_with_its_parent() {
        let me = std::process::id() as i32;
        assert!(pids().any(|p| p == me));
        assert!(ppid(me).is_some_and(|p| p > 0));
        assert!(!environ(me).is_empty());
    }

    #[test]
    fn a_spawned_child_is_listed_among_the_children() {
        let me = std::process::id() as i32;
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let listed = children(me).map(|c| c.contains(&(child.id() as i32)));
        child.kill().unwrap();
        child.wait().unwrap();
        // Kernels built without the children lists answer None: only a scan can tell.
        assert_ne!(listed, Some(false));
    }

    #[test]
    fn an_open_file_names_its_real_path() {
        use std::os::fd::AsRawFd;
        let exe = std::env::current_exe().unwrap().canonicalize().unwrap();
        let f = std::fs::File::open(&exe).unwrap();
        assert_eq!(fd_path(f.as_raw_fd()), Some(exe));
        let (r, _w) = std::io::pipe().unwrap();
        assert_eq!(fd_path(r.as_raw_fd()), None, "a pipe has no path");
    }
}
