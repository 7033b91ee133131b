//! Who is on the other end of a connection: a person's program, or a command this
//! daemon runs (or something such a command started). Commands may call tools like any
//! client, but `grant`, `confirm`, `restart` and `hook` (which writes audit records for an agent host) come from people only (docs/SANDBOX.md).
//!
//! Decided once, when the connection is accepted, from the peer's process as the kernel
//! names it (`SO_PEERPIDFD`, so a reused pid cannot stand in for it; `SO_PEERCRED` on
//! older kernels). The peer is a command when any of:
//! - its parent chain reaches an exec worker (a command's shim is a subreaper, so a
//!   double-forked or `setsid` process still hangs under it);
//! - its environment carries this instance's marker (`TOOLVISOR_INSTANCE`);
//! - it sits in a command's cgroup.
//!
//! A peer that is gone, or whose process cannot be read, is treated as a command: the
//! privileged messages need a peer that proves it is not one.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use toolvisor_os::procfs;
use toolvisor_protocol::worker::{COMMAND_CGROUP_PREFIX, MARKER_VAR};

use toolvisor_protocol::ErrorType;
use toolvisor_protocol::message::{ClientMessage, ServerMessage};

/// `SO_PEERPIDFD` (Linux 6.5): a pidfd of the peer that connected.
const SO_PEERPIDFD: libc::c_int = 77;
/// How far up a parent chain is followed.
const MAX_DEPTH: usize = 256;

/// What the peer is, with the reason when it is not trusted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Someone outside toolvisor's commands (a person, an agent host).
    Person,
    /// A command toolvisor runs, or a process that could not be told apart from one.
    Command(String),
}

impl Peer {
    /// Whether privileged messages (`grant`, `confirm`, `restart`) are refused.
    pub fn is_command(&self) -> bool {
        matches!(self, Peer::Command(_))
    }
}

/// The connection-level `PermissionError` for `m` when it is `grant`, `confirm` or
/// `restart` and `peer` is a command (None: let it through). `session` is for the log.
pub fn refusal(peer: &Peer, m: &ClientMessage, session: &str) -> Option<ServerMessage> {
    let Peer::Command(why) = peer else {
        return None;
    };
    let (what, id) = match m {
        ClientMessage::Grant { id, .. } => ("grant", Some(id.clone())),
        ClientMessage::Restart { id, .. } => ("restart", Some(id.clone())),
        ClientMessage::Confirm { .. } => ("confirm", None),
        ClientMessage::Hook { id, .. } => ("hook", Some(id.clone())),
        _ => return None,
    };
    tracing::warn!(session, why = %why, "refused `{what}` from a command");
    Some(ServerMessage::error(
        id,
        ErrorType::PermissionError,
        format!("`{what}` comes from people, not from commands toolvisor runs ({why})"),
    ))
}

/// Classify the peer of `stream` (`pid` from `SO_PEERCRED`); `exec_workers` are the
/// exec worker processes now, `instance` this daemon's marker value.
pub fn classify(
    stream: &impl AsRawFd,
    pid: Option<i32>,
    exec_workers: &[u32],
    instance: &str,
) -> Peer {
    let pidfd = peer_pidfd(stream);
    let pid = match (&pidfd, pid) {
        (Some(fd), _) => pidfd_pid(fd),
        (None, p) => p,
    };
    let Some(pid) = pid.filter(|&p| p > 0) else {
        return Peer::Command("the peer process is gone".into());
    };
    let verdict = inspect(pid, exec_workers, instance);
    // The pid named the peer all along only if the peer is still alive now.
    if let Some(fd) = &pidfd
        && pidfd_pid(fd) != Some(pid)
    {
        return Peer::Command("the peer process is gone".into());
    }
    verdict
}

/// The checks, on a live pid. Its environment may be unreadable (a non-dumpable
/// process): then the parent chain and the cgroup decide.
fn inspect(pid: i32, exec_workers: &[u32], instance: &str) -> Peer {
    if procfs::ppid(pid).is_none() {
        return Peer::Command(format!("process {pid} cannot be inspected"));
    }
    if let Some(w) = ancestor_in(pid, exec_workers) {
        return Peer::Command(format!("process {pid} runs under exec worker {w}"));
    }
    let marker = format!("{MARKER_VAR}={instance}");
    if procfs::environ(pid).iter().any(|v| v == marker.as_bytes()) {
        return Peer::Command(format!("process {pid} carries a command's marker"));
    }
    let own = format!("/{COMMAND_CGROUP_PREFIX}");
    if procfs::cgroups(pid)
        .iter()
        .any(|l| l.contains(&own) && !l.ends_with("daemon"))
    {
        return Peer::Command(format!("process {pid} is in a command's cgroup"));
    }
    Peer::Person
}

/// The first of `workers` on `pid`'s parent chain (itself included).
fn ancestor_in(pid: i32, workers: &[u32]) -> Option<u32> {
    let mut cur = pid;
    for _ in 0..MAX_DEPTH {
        if let Ok(c) = u32::try_from(cur)
            && workers.contains(&c)
        {
            return Some(c);
        }
        match procfs::ppid(cur) {
            Some(p) if p > 0 && p != cur => cur = p,
            _ => return None,
        }
    }
    None
}

/// `getsockopt(SO_PEERPIDFD)`; None on kernels without it.
fn peer_pidfd(stream: &impl AsRawFd) -> Option<OwnedFd> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid socket descriptor and an int-sized out parameter.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERPIDFD,
            (&mut fd as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    // SAFETY: on success the kernel gave us a new descriptor we now own.
    (r == 0 && fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The pid a pidfd names now; None once the process has exited.
fn pidfd_pid(fd: &OwnedFd) -> Option<i32> {
    procfs::pidfd_pid(fd.as_raw_fd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn this_test_process_is_a_person_unless_under_a_worker() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let me = std::process::id() as i32;
        assert_eq!(classify(&a, Some(me), &[], "nobody-1"), Peer::Person);
        let parent = nix::unistd::getppid().as_raw() as u32;
        assert!(classify(&a, Some(me), &[parent], "nobody-1").is_command());
        assert!(classify(&a, Some(-1), &[], "nobody-1").is_command() || peer_pidfd(&a).is_some());
    }

    #[test]
    fn commands_get_a_permission_error_for_privileged_messages_only() {
        let cmd = Peer::Command("test".into());
        let grant = ClientMessage::Grant {
            id: "g".into(),
            tools: vec!["run_command".into()],
            trace_id: None,
            paths: None,
            ttl_ms: 1000,
            reusable: None,
        };
        let restart = ClientMessage::Restart {
            id: "r".into(),
            group: None,
        };
        let confirm = ClientMessage::Confirm {
            interaction: "i".into(),
            approve: true,
            remember: None,
        };
        for (m, id) in [(&grant, Some("g")), (&restart, Some("r")), (&confirm, None)] {
            match refusal(&cmd, m, "s1") {
                Some(ServerMessage::Error { id: got, error }) => {
                    assert_eq!(error.kind, ErrorType::PermissionError);
                    assert_eq!(got, id.map(Into::into));
                }
                other => panic!("{other:?}"),
            }
            assert!(refusal(&Peer::Person, m, "s1").is_none());
        }
        assert!(refusal(&cmd, &ClientMessage::Ping { id: "p".into() }, "s1").is_none());
    }

    #[test]
    fn a_marked_child_is_a_command() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env(MARKER_VAR, "inst-7")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // Until it has exec'd, the child still has this process's environment: wait for
        // the exec to finish (no event to wait on but /proc; bounded). The name changes
        // before the kernel records where the new environment is, so wait for both.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let execd = || {
            std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep")
                && !procfs::environ(pid).is_empty()
        };
        while !execd() {
            assert!(std::time::Instant::now() < end, "sleep never started");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(inspect(pid, &[], "inst-7").is_command());
        assert_eq!(inspect(pid, &[], "inst-8"), Peer::Person);
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            inspect(pid, &[], "inst-8").is_command(),
            "a gone process is not trusted"
        );
    }
}
