//! One cgroup per command, for `[workers.exec.limits]`: memory and process count
//! enforced by the kernel, CPU time measured, and the whole group killed at the end.
//!
//! cgroup v2 where this worker can make child groups with the `memory` and `pids`
//! controllers (a delegated subtree: the worker's own group's parent, which `serve`
//! prepares when it can); else the v1 `memory` and `pids` hierarchies (and `cpuacct`
//! when mounted) where they are writable; else none (the shim's rlimits remain). Groups
//! are named `toolvisor-<worker pid>-<n>` beside the worker's own; a worker removes each
//! when its command ends, and at start removes those of workers that died (`kill -9`).

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use toolvisor_protocol::worker::ExecLimits;

mod detect;

pub use detect::prepare_delegated_v2;
use detect::{detect_v1, detect_v2};

/// Name prefix of every command group.
pub use toolvisor_protocol::worker::COMMAND_CGROUP_PREFIX as PREFIX;
/// Processes of ours inside each group besides the command's: the shim and the PID
/// namespace's first process.
const OWN_PROCESSES: u64 = 2;

/// A limit that stopped a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Limit {
    /// `memory_mb`.
    Memory,
    /// `pids`.
    Pids,
    /// `cpu_s`.
    Cpu,
    /// `file_mb`.
    FileSize,
}

impl Limit {
    /// The config key that sets it.
    pub fn key(self) -> &'static str {
        match self {
            Limit::Memory => "memory_mb",
            Limit::Pids => "pids",
            Limit::Cpu => "cpu_s",
            Limit::FileSize => "file_mb",
        }
    }
}

/// Which cgroup interface commands get.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Mechanism {
    /// Command groups are children of `base` (v2).
    V2 {
        base: PathBuf,
    },
    /// Command groups are children of these v1 directories.
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        cpuacct: Option<PathBuf>,
    },
    None,
}

/// The worker's cgroup setup.
#[derive(Debug)]
pub struct Cgroups {
    mech: Mechanism,
    limits: ExecLimits,
    next: AtomicU64,
}

impl Cgroups {
    /// Find what this worker may use, and remove groups dead workers left.
    pub fn detect(limits: &ExecLimits) -> Cgroups {
        let mech = detect_v2().or_else(detect_v1).unwrap_or(Mechanism::None);
        let me = Cgroups {
            mech,
            limits: limits.clone(),
            next: AtomicU64::new(0),
        };
        for base in me.bases() {
            sweep(&base);
        }
        me
    }

    /// Commands get no cgroup (the rlimits apply instead).
    pub fn none(limits: &ExecLimits) -> Cgroups {
        Cgroups {
            mech: Mechanism::None,
            limits: limits.clone(),
            next: AtomicU64::new(0),
        }
    }

    /// `status.guards.limits`: `cgroup2` or `cgroup1`; None without cgroups.
    pub fn mechanism(&self) -> Option<&'static str> {
        match self.mech {
            Mechanism::V2 { .. } => Some("cgroup2"),
            Mechanism::V1 { .. } => Some("cgroup1"),
            Mechanism::None => None,
        }
    }

    /// The directories command groups are made in.
    pub fn bases(&self) -> Vec<PathBuf> {
        match &self.mech {
            Mechanism::V2 { base } => vec![base.clone()],
            Mechanism::V1 {
                memory,
                pids,
                cpuacct,
            } => [Some(memory.clone()), Some(pids.clone()), cpuacct.clone()]
                .into_iter()
                .flatten()
                .collect(),
            Mechanism::None => Vec::new(),
        }
    }

    /// A new group for one command, with the limits written; None without cgroups.
    pub fn create(&self) -> std::io::Result<Option<CommandCgroup>> {
        if self.mech == Mechanism::None {
            return Ok(None);
        }
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("{PREFIX}{}-{n}", std::process::id());
        let mut group = CommandCgroup {
            v2: matches!(self.mech, Mechanism::V2 { .. }),
            dirs: Vec::new(),
            procs: Vec::new(),
            memory: None,
            pids: None,
            cpu: None,
        };
        match &self.mech {
            Mechanism::V2 { base } => {
                let dir = group.make(&base.join(&name))?;
                group.memory = Some(dir.clone());
                group.pids = Some(dir.clone());
                group.cpu = Some(dir);
            }
            Mechanism::V1 {
                memory,
                pids,
                cpuacct,
            } => {
                group.memory = Some(group.make(&memory.join(&name))?);
                group.pids = Some(group.make(&pids.join(&name))?);
                if let Some(c) = cpuacct {
                    group.cpu = group.make(&c.join(&name)).ok();
                }
            }
            Mechanism::None => {}
        }
        group.set_limits(&self.limits)?;
        Ok(Some(group))
    }
}

/// One command's group (a directory per v1 hierarchy, or one v2 directory).
#[derive(Debug)]
pub struct CommandCgroup {
    v2: bool,
    dirs: Vec<PathBuf>,
    /// `cgroup.procs` of each directory, ready for the forked child.
    procs: Vec<CString>,
    memory: Option<PathBuf>,
    pids: Option<PathBuf>,
    cpu: Option<PathBuf>,
}

impl CommandCgroup {
    fn make(&mut self, dir: &Path) -> std::io::Result<PathBuf> {
        std::fs::create_dir(dir)?;
        self.dirs.push(dir.to_path_buf());
        let procs = dir.join("cgroup.procs");
        self.procs
            .push(CString::new(procs.as_os_str().as_bytes()).map_err(std::io::Error::other)?);
        Ok(dir.to_path_buf())
    }

    fn set_limits(&self, l: &ExecLimits) -> std::io::Result<()> {
        let write = |dir: &Option<PathBuf>, file: &str, value: String| match dir {
            Some(d) => std::fs::write(d.join(file), value),
            None => Ok(()),
        };
        if l.memory_mb > 0 {
            let bytes = (l.memory_mb << 20).to_string();
            if self.v2 {
                write(&self.memory, "memory.max", bytes)?;
                let _ = write(&self.memory, "memory.swap.max", "0".into());
                let _ = write(&self.memory, "memory.oom.group", "1".into());
            } else {
                write(&self.memory, "memory.limit_in_bytes", bytes.clone())?;
                // Without swap: the limit stops the command instead of swapping it.
                let _ = write(&self.memory, "memory.memsw.limit_in_bytes", bytes);
            }
        }
        if l.pids > 0 {
            write(&self.pids, "pids.max", (l.pids + OWN_PROCESSES).to_string())?;
        }
        Ok(())
    }

    /// What a forked child needs to join the group.
    pub fn joiner(&self) -> Joiner {
        Joiner {
            procs: self.procs.clone(),
        }
    }

    /// CPU time of the group so far.
    pub fn cpu_ms(&self) -> Option<u64> {
        let dir = self.cpu.as_ref()?;
        if self.v2 {
            let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
            field(&stat, "usage_usec").map(|us| us / 1000)
        } else {
            let ns: u64 = std::fs::read_to_string(dir.join("cpuacct.usage"))
                .ok()?
                .trim()
                .parse()
                .ok()?;
            Some(ns / 1_000_000)
        }
    }

    /// The limit the kernel enforced on the command, if any: the OOM killer ran, or a
    /// fork was refused at `pids.max`.
    pub fn hit(&self) -> Option<Limit> {
        if let Some(d) = &self.memory {
            let file = if self.v2 {
                "memory.events"
            } else {
                "memory.oom_control"
            };
            let text = std::fs::read_to_string(d.join(file)).unwrap_or_default();
            if field(&text, "oom_kill").is_some_and(|n| n > 0) {
                return Some(Limit::Memory);
            }
        }
        if let Some(d) = &self.pids {
            let text = std::fs::read_to_string(d.join("pids.events")).unwrap_or_default();
            if field(&text, "max").is_some_and(|n| n > 0) {
                return Some(Limit::Pids);
            }
        }
        None
    }

    /// Kill what is left in the group and remove it.
    fn remove(&mut self) {
        for dir in self.dirs.drain(..).rev() {
            remove_group(&dir, self.v2);
        }
    }
}

/// The `cgroup.procs` files of a group, for a forked child to write its pid to.
#[derive(Clone, Debug)]
pub struct Joiner {
    procs: Vec<CString>,
}

impl Joiner {
    /// Join every directory of the group: called in the forked child before `exec`.
    /// Async-signal-safe: `open`, `write`, `close` and no allocation.
    pub fn join_in_child(&self) -> std::io::Result<()> {
        let mut digits = [0u8; 12];
        // SAFETY: getpid has no preconditions.
        let pid = itoa(unsafe { libc::getpid() } as u64, &mut digits);
        for p in &self.procs {
            // SAFETY: a valid C string; the descriptor is closed before returning.
            unsafe {
                let fd = libc::open(p.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let n = libc::write(fd, pid.as_ptr().cast(), pid.len());
                let err = std::io::Error::last_os_error();
                libc::close(fd);
                if n < 0 {
                    return Err(err);
                }
            }
        }
        Ok(())
    }
}

impl Drop for CommandCgroup {
    fn drop(&mut self) {
        self.remove();
    }
}

/// SIGKILL every process of a group (v2: `cgroup.kill`), then `rmdir` it, retrying
/// briefly while the killed processes leave it.
fn remove_group(dir: &Path, v2: bool) {
    let end = Instant::now() + Duration::from_secs(2);
    loop {
        match std::fs::remove_dir(dir) {
            Ok(()) => return,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return,
            Err(_) if Instant::now() >= end => {
                tracing::warn!("cannot remove cgroup {}", dir.display());
                return;
            }
            Err(_) => {}
        }
        if !v2 || std::fs::write(dir.join("cgroup.kill"), "1").is_err() {
            for pid in members(dir) {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(pid),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
        }
        // Killed processes leave the group when they are reaped, which another process
        // does; nothing to wait on here but the group itself.
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn members(dir: &Path) -> Vec<i32> {
    std::fs::read_to_string(dir.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Remove the groups of workers that are gone.
fn sweep(base: &Path) {
    let Ok(rd) = std::fs::read_dir(base) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(owner) = name
            .to_str()
            .and_then(|n| n.strip_prefix(PREFIX))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(owner), None).is_ok();
        if !alive {
            remove_group(&e.path(), is_v2(base));
        }
    }
}

fn is_v2(dir: &Path) -> bool {
    dir.join("cgroup.controllers").exists()
}

/// `name N` in a flat keyed file (`memory.events`, `pids.events`, `cpu.stat`, v1's
/// `memory.oom_control`).
fn field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == name).then(|| v.trim().parse().ok()).flatten()
    })
}

/// Decimal digits of `n` in `buf` (no allocation: used after fork).
fn itoa(mut n: u64, buf: &mut [u8; 12]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 || i == 0 {
            return &buf[i..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use detect::{parse_mountinfo, unescape};

    #[test]
    fn parsing() {
        let line =
            "36 25 0:31 / /sys/fs/cgroup/memory rw,relatime shared:14 - cgroup cgroup rw,memory";
        let (p, t, o) = parse_mountinfo(line).unwrap();
        assert_eq!(
            (p, t.as_str(), o.as_str()),
            (
                PathBuf::from("/sys/fs/cgroup/memory"),
                "cgroup",
                "rw,memory"
            )
        );
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(
            field("oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill"),
            Some(3)
        );
        assert_eq!(field("max 0\n", "max"), Some(0));
        assert_eq!(field("usage_usec 1500\n", "usage_usec"), Some(1500));
        let mut b = [0u8; 12];
        assert_eq!(itoa(0, &mut b), b"0");
        assert_eq!(itoa(4_194_304, &mut b), b"4194304");
        assert_eq!(Limit::Memory.key(), "memory_mb");
    }

    /// On a host with writable cgroups: a group is made, joined, limited, measured and
    /// removed (no leak).
    #[test]
    fn a_group_is_made_used_and_removed() {
        let limits = ExecLimits {
            memory_mb: 64,
            pids: 8,
            ..ExecLimits::default()
        };
        let cg = Cgroups::detect(&limits);
        let Some(name) = cg.mechanism() else {
            eprintln!("no writable cgroups here: skipping");
            return;
        };
        let group = cg.create().unwrap().unwrap();
        let dirs = group.dirs.clone();
        assert!(dirs.iter().all(|d| d.is_dir()), "{name}: {dirs:?}");
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c")
            .arg("for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 0.2 & done; wait");
        {
            use std::os::unix::process::CommandExt;
            let j = group.joiner();
            // SAFETY: join_in_child is async-signal-safe.
            unsafe {
                cmd.pre_exec(move || j.join_in_child());
            }
        }
        // The shell fails once a fork is refused; that is the point.
        let _ = cmd.status().unwrap();
        assert_eq!(group.hit(), Some(Limit::Pids), "{name}: fork past pids.max");
        drop(group);
        assert!(dirs.iter().all(|d| !d.exists()), "left behind: {dirs:?}");
    }
}
