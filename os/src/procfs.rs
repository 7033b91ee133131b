//! `/proc`: the live processes, a process's parent, environment and cgroups. Every
//! reader answers `None` (or nothing) for a process that is gone or unreadable: the
//! caller decides what an unknown process means.

use std::fs;

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

#[cfg(test)]
mod tests {
    use super::*;

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
}
