//! Which cgroup mechanism this worker can use: a delegated v2 subtree with the
//! `memory` and `pids` controllers, else writable v1 hierarchies, read from
//! `/proc/self/mountinfo` and `/proc/self/cgroup`; and `serve`'s preparation of the
//! delegated subtree.

use std::path::{Path, PathBuf};

use super::{Mechanism, PREFIX};

/// One mount of `/proc/self/mountinfo`: (mount point, fs type, super options).
fn mounts() -> Vec<(PathBuf, String, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines().filter_map(parse_mountinfo).collect()
}

pub(super) fn parse_mountinfo(line: &str) -> Option<(PathBuf, String, String)> {
    let (left, right) = line.split_once(" - ")?;
    let point = left.split(' ').nth(4)?;
    let mut r = right.split(' ');
    let fstype = r.next()?.to_owned();
    let _source = r.next()?;
    let opts = r.next().unwrap_or("").to_owned();
    Some((PathBuf::from(unescape(point)), fstype, opts))
}

/// mountinfo escapes spaces and such as `\040`.
pub(super) fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() && b[i + 1..i + 4].iter().all(u8::is_ascii_digit) {
            let v = (b[i + 1] - b'0') * 64 + (b[i + 2] - b'0') * 8 + (b[i + 3] - b'0');
            out.push(v);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// This process's group per hierarchy: (controllers, path) from `/proc/self/cgroup`.
fn own_groups() -> Vec<(String, String)> {
    let text = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let _id = parts.next()?;
            let ctrl = parts.next()?.to_owned();
            let path = parts.next()?.to_owned();
            Some((ctrl, path))
        })
        .collect()
}

/// Whether we can make (and remove) a group in `dir`.
fn writable(dir: &Path) -> bool {
    let probe = dir.join(format!("{PREFIX}{}-probe", std::process::id()));
    let made = std::fs::create_dir(&probe).is_ok();
    if made {
        let _ = std::fs::remove_dir(&probe);
    }
    made
}

pub(super) fn detect_v2() -> Option<Mechanism> {
    let mount = mounts().into_iter().find(|m| m.1 == "cgroup2")?.0;
    let own = own_groups().into_iter().find(|g| g.0.is_empty())?.1;
    let own = mount.join(own.trim_start_matches('/'));
    let base = if own == mount {
        own
    } else {
        own.parent()?.to_path_buf()
    };
    let control = std::fs::read_to_string(base.join("cgroup.subtree_control")).ok()?;
    let has = |c: &str| control.split_whitespace().any(|x| x == c);
    (has("memory") && has("pids") && writable(&base)).then_some(Mechanism::V2 { base })
}

pub(super) fn detect_v1() -> Option<Mechanism> {
    let all = mounts();
    let own = own_groups();
    let dir_of = |ctrl: &str| -> Option<PathBuf> {
        let point = all
            .iter()
            .find(|m| m.1 == "cgroup" && m.2.split(',').any(|o| o == ctrl))?
            .0
            .clone();
        let path = own
            .iter()
            .find(|g| g.0.split(',').any(|c| c == ctrl))?
            .1
            .clone();
        Some(point.join(path.trim_start_matches('/')))
    };
    let memory = dir_of("memory").filter(|d| writable(d))?;
    let pids = dir_of("pids").filter(|d| writable(d))?;
    let cpuacct = dir_of("cpuacct").filter(|d| writable(d));
    Some(Mechanism::V1 {
        memory,
        pids,
        cpuacct,
    })
}

/// For `serve`, before any worker starts: under cgroup v2, where our group may hand
/// controllers to children but holds processes (a delegated group, as systemd's
/// `Delegate=yes` gives), move this process into a leaf `toolvisor-daemon` and enable
/// `memory` and `pids` for the children, so workers can give each command a group.
/// Best effort: undone on any failure (another process in the group, no permission).
pub fn prepare_delegated_v2() {
    let Some(mount) = mounts().into_iter().find(|m| m.1 == "cgroup2").map(|m| m.0) else {
        return;
    };
    let Some(own) = own_groups()
        .into_iter()
        .find(|g| g.0.is_empty())
        .map(|g| g.1)
    else {
        return;
    };
    let own = mount.join(own.trim_start_matches('/'));
    if own == mount {
        return; // the root group may hold processes and hand out controllers at once
    }
    let read = |f: &str| std::fs::read_to_string(own.join(f)).unwrap_or_default();
    let listed = |text: &str, c: &str| text.split_whitespace().any(|x| x == c);
    let (controllers, control) = (read("cgroup.controllers"), read("cgroup.subtree_control"));
    if !listed(&controllers, "memory") || !listed(&controllers, "pids") {
        return;
    }
    if listed(&control, "memory") && listed(&control, "pids") {
        return;
    }
    let leaf = own.join(format!("{PREFIX}daemon"));
    if std::fs::create_dir(&leaf).is_err() && !leaf.is_dir() {
        return;
    }
    let me = std::process::id().to_string();
    if std::fs::write(leaf.join("cgroup.procs"), &me).is_err() {
        let _ = std::fs::remove_dir(&leaf);
        return;
    }
    if std::fs::write(own.join("cgroup.subtree_control"), "+memory +pids").is_err() {
        let _ = std::fs::write(own.join("cgroup.procs"), &me);
        let _ = std::fs::remove_dir(&leaf);
        return;
    }
    tracing::info!(group = %own.display(), "cgroup v2: commands get their own groups");
}
