//! The namespace side of a command's sandbox, as the reap shim uses it:
//! [`unshare`] in the shim (single-threaded: a new user namespace needs that), then in
//! the first process of the new PID namespace [`setup`] (the file system view, the
//! host name, `lo`) and, last before the command starts, [`drop_privileges`].

use std::os::fd::AsRawFd;
use std::path::Path;

use rustix::thread::{CapabilitySet, CapabilitySets, UnshareFlags};

use super::SandboxError;
use super::observe::{Observations, Recording};
use super::plan::{self, HostView, Inputs};
use super::spec::SandboxSpec;

/// The namespaces every sandboxed command gets (the network one unless allowed, or
/// joined: its session's).
fn flags(network: bool) -> UnshareFlags {
    let mut f = UnshareFlags::NEWUSER
        | UnshareFlags::NEWNS
        | UnshareFlags::NEWPID
        | UnshareFlags::NEWIPC
        | UnshareFlags::NEWUTS
        | UnshareFlags::NEWCGROUP;
    if !network {
        f |= UnshareFlags::NEWNET;
    }
    f
}

/// Enter new namespaces (the PID one applies to the children started next) and map
/// our own uid and gid into the user namespace, unchanged. Call it single-threaded.
pub fn unshare(spec: &SandboxSpec) -> Result<(), SandboxError> {
    if spec.fail {
        return Err(SandboxError::Refused(format!(
            "new user namespaces are refused (test hook {})",
            super::spec::TEST_FAIL_VAR
        )));
    }
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    let counters = user_counters();
    if let Some([user, net]) = spec.netns {
        join_loopback(user, net)?;
    }
    // SAFETY: no `FILES` flag, and the shim has one thread: nothing shares fds with us.
    unsafe { rustix::thread::unshare_unsafe(flags(spec.network || spec.netns.is_some())) }
        .map_err(|e| SandboxError::step("cannot create namespaces", e))?;
    map_ids(uid.as_raw(), gid.as_raw())?;
    bound_user_counters(&counters)
}

fn map_ids(uid: u32, gid: u32) -> Result<(), SandboxError> {
    write_proc("setgroups", "deny")?;
    write_proc("uid_map", &format!("{uid} {uid} 1\n"))?;
    write_proc("gid_map", &format!("{gid} {gid} 1\n"))
}

/// Join a session's loopback: the holder's user namespace, then its network namespace
/// (inherited descriptors, closed here). In that order because `setns` into a network
/// namespace needs CAP_SYS_ADMIN over the user namespace owning it, which joining the
/// owner gives (the caller's euid owns it); the user namespace the command gets next is
/// nested in it and uses the network namespace without any capability over it. Any
/// failure fails the command: it never runs with a network namespace it should not.
fn join_loopback(user: i32, net: i32) -> Result<(), SandboxError> {
    use std::os::fd::FromRawFd;
    if user <= 2 || net <= 2 || user == net {
        return Err(SandboxError::Refused(format!(
            "bad descriptors for the session's loopback ({user}, {net})"
        )));
    }
    // SAFETY: the worker passed these two descriptors to us for this purpose alone.
    let (user, net) = unsafe {
        (
            std::os::fd::OwnedFd::from_raw_fd(user),
            std::os::fd::OwnedFd::from_raw_fd(net),
        )
    };
    for (fd, kind, what) in [
        (&user, libc::CLONE_NEWUSER, "user"),
        (&net, libc::CLONE_NEWNET, "network"),
    ] {
        // SAFETY: setns on a descriptor we own; the namespace type is checked by the
        // kernel against the descriptor (a wrong one fails with EINVAL).
        if unsafe { libc::setns(fd.as_raw_fd(), kind) } != 0 {
            return Err(SandboxError::step(
                format!("cannot join the session's {what} namespace"),
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(())
}

/// For a session's loopback holder: new user and network namespaces only (uid and gid
/// mapped unchanged), with `lo` up. Call it single-threaded.
pub fn unshare_loopback() -> Result<(), SandboxError> {
    let (uid, gid) = (rustix::process::getuid(), rustix::process::getgid());
    // SAFETY: no `FILES` flag, and the holder has one thread.
    unsafe { rustix::thread::unshare_unsafe(UnshareFlags::NEWUSER | UnshareFlags::NEWNET) }
        .map_err(|e| SandboxError::step("cannot create the session's namespaces", e))?;
    map_ids(uid.as_raw(), gid.as_raw())?;
    loopback_up()
}

/// The per-user kernel counters a command could use up for every process of the
/// daemon's user (inotify instances and watches: an editor or watcher on the host then
/// gets `EMFILE`; fanotify groups; namespaces of each kind).
const USER_COUNTERS: [&str; 12] = [
    "max_inotify_instances",
    "max_inotify_watches",
    "max_fanotify_groups",
    "max_fanotify_marks",
    "max_user_namespaces",
    "max_mnt_namespaces",
    "max_pid_namespaces",
    "max_net_namespaces",
    "max_ipc_namespaces",
    "max_uts_namespaces",
    "max_cgroup_namespaces",
    "max_time_namespaces",
];

/// A command's share of each counter: a quarter of what the daemon's user has.
const COUNTER_SHARE: u64 = 4;

/// The limits the daemon's user has now, for the counters this kernel has.
fn user_counters() -> Vec<(&'static str, u64)> {
    USER_COUNTERS
        .iter()
        .filter_map(|name| {
            let text = std::fs::read_to_string(format!("/proc/sys/user/{name}")).ok()?;
            Some((*name, text.trim().parse().ok()?))
        })
        .collect()
}

/// In the new user namespace: its own limit of each counter, a share of the daemon
/// user's. The kernel charges a namespace's use to its parent's too, so the command can
/// never take more than its share of what the daemon's user has (and the rest stays for
/// the person's own tools). Also bounds the bytes of POSIX message queues.
fn bound_user_counters(counters: &[(&str, u64)]) -> Result<(), SandboxError> {
    for (name, limit) in counters {
        let share = (limit / COUNTER_SHARE).max(1);
        std::fs::write(format!("/proc/sys/user/{name}"), share.to_string())
            .map_err(|e| SandboxError::step(format!("cannot bound /proc/sys/user/{name}"), e))?;
    }
    let now = rustix::process::getrlimit(rustix::process::Resource::Msgqueue);
    let bytes = now
        .maximum
        .map_or(MSGQUEUE_BYTES, |m| m.min(MSGQUEUE_BYTES));
    let queue = rustix::process::Rlimit {
        current: Some(bytes),
        maximum: Some(bytes),
    };
    rustix::process::setrlimit(rustix::process::Resource::Msgqueue, queue)
        .map_err(|e| SandboxError::step("cannot bound RLIMIT_MSGQUEUE", e))
}

/// Bytes of POSIX message queues a command may hold (a quarter of Linux's default).
const MSGQUEUE_BYTES: u64 = 200 * 1024;

fn write_proc(name: &str, text: &str) -> Result<(), SandboxError> {
    std::fs::write(format!("/proc/self/{name}"), text)
        .map_err(|e| SandboxError::step(format!("cannot write /proc/self/{name}"), e))
}

/// In the PID namespace's first process: build and enter the command's root, go to
/// its working directory (the same directory as before, checked by device and inode),
/// name the host, and bring up `lo` in a new network namespace. Returns what the plan
/// saw of the host (a spare is checked against it when it is claimed).
pub fn setup(spec: &SandboxSpec) -> Result<Observations, SandboxError> {
    let before = rustix::fs::stat(".").map_err(|e| SandboxError::step("cannot stat the cwd", e))?;
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    let inputs = Inputs {
        roots: &spec.roots,
        writable: &spec.writable,
        protected: &spec.protected,
        read_only: &spec.read_only,
        hidden: &spec.hidden,
        network: spec.network,
        home: home.as_deref(),
        stage: spec.stage.as_deref(),
        shown: &spec.shown,
        reveal: &spec.reveal,
    };
    let seen = Recording::new(&HostView);
    let steps = plan::plan(&inputs, &seen);
    if spec.stage.is_some() {
        let host = rustix::fs::stat(&spec.cwd)
            .map_err(|e| SandboxError::step("cannot stat the cwd", e))?;
        if (host.st_dev, host.st_ino) != (before.st_dev, before.st_ino) {
            return Err(SandboxError::Refused(format!(
                "{} changed while the sandbox was set up",
                spec.cwd.display()
            )));
        }
    }
    super::mount::build(&steps)?;
    if spec.stage.is_some() {
        // Inside the overlay the directory has the overlay's identity: it was checked
        // on the host view before the overlay was made over it.
        enter_staged_cwd(&spec.cwd)?;
    } else {
        enter_cwd(&spec.cwd, (before.st_dev, before.st_ino))?;
    }
    rustix::system::sethostname(b"toolvisor")
        .map_err(|e| SandboxError::step("cannot set the host name", e))?;
    // A joined session loopback is up already (and not ours to configure).
    if !spec.network && spec.netns.is_none() {
        loopback_up()?;
    }
    Ok(seen.into_observations())
}

/// `chdir` to `cwd` inside the new root; it must be the directory we started in (by
/// device and inode).
pub fn enter_cwd(cwd: &Path, was: (u64, u64)) -> Result<(), SandboxError> {
    rustix::process::chdir(cwd).map_err(|e| {
        SandboxError::step(format!("cannot enter {} in the sandbox", cwd.display()), e)
    })?;
    let now = rustix::fs::stat(".").map_err(|e| SandboxError::step("cannot stat the cwd", e))?;
    if (now.st_dev, now.st_ino) != was {
        return Err(SandboxError::Refused(format!(
            "{} changed while the sandbox was set up",
            cwd.display()
        )));
    }
    Ok(())
}

/// [`enter_cwd`] for a staged command, whose workspace is an overlay (the directory's
/// identity was checked on the host view before): it must be on the overlay.
fn enter_staged_cwd(cwd: &Path) -> Result<(), SandboxError> {
    const OVERLAYFS_SUPER_MAGIC: i64 = 0x794c_7630;
    rustix::process::chdir(cwd).map_err(|e| {
        SandboxError::step(format!("cannot enter {} in the sandbox", cwd.display()), e)
    })?;
    let fs = rustix::fs::statfs(".").map_err(|e| SandboxError::step("cannot statfs the cwd", e))?;
    if fs.f_type as i64 != OVERLAYFS_SUPER_MAGIC {
        return Err(SandboxError::Refused(format!(
            "{} is not on the staging overlay",
            cwd.display()
        )));
    }
    Ok(())
}

/// `ip link set lo up`, with the two ioctls it amounts to.
fn loopback_up() -> Result<(), SandboxError> {
    use std::os::fd::FromRawFd;
    let fail = |what: &str| {
        let e = std::io::Error::last_os_error();
        SandboxError::step(format!("cannot bring up lo ({what})"), e)
    };
    // SAFETY: a plain socket call; the result is checked before it is owned.
    let raw = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        return Err(fail("socket"));
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(raw) };
    // SAFETY: an all-zero `ifreq` is valid (a name of NULs and a zero union).
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
        *d = *s as libc::c_char;
    }
    // SAFETY: the ioctls read and write a valid `ifreq` that outlives them; the union
    // member used is the one these requests define.
    unsafe {
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFFLAGS, &mut ifr) < 0 {
            return Err(fail("get flags"));
        }
        ifr.ifr_ifru.ifru_flags |= (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        if libc::ioctl(fd.as_raw_fd(), libc::SIOCSIFFLAGS, &ifr) < 0 {
            return Err(fail("set flags"));
        }
    }
    Ok(())
}

/// Give up every capability for good: the bounding and ambient sets emptied, the
/// effective, permitted and inheritable sets cleared, root's automatic capabilities
/// on `execve` disabled and locked, no new privileges. The command, even as uid 0 of
/// its user namespace, can then mount, unmount and remount nothing.
pub fn drop_privileges() -> Result<(), SandboxError> {
    use rustix::thread::{CapabilitiesSecureBits as B, set_capabilities_secure_bits};
    let bits =
        B::NO_ROOT | B::NO_ROOT_LOCKED | B::NO_CAP_AMBIENT_RAISE | B::NO_CAP_AMBIENT_RAISE_LOCKED;
    set_capabilities_secure_bits(bits)
        .map_err(|e| SandboxError::step("cannot set securebits", e))?;
    for cap in 0..64u32 {
        // SAFETY: prctl with integer arguments; EINVAL past the last capability.
        let r = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if r != 0 && std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL) {
            return Err(SandboxError::step(
                format!("cannot drop capability {cap} from the bounding set"),
                std::io::Error::last_os_error(),
            ));
        }
    }
    rustix::thread::clear_ambient_capability_set()
        .map_err(|e| SandboxError::step("cannot clear the ambient capabilities", e))?;
    let none = CapabilitySets {
        effective: CapabilitySet::empty(),
        permitted: CapabilitySet::empty(),
        inheritable: CapabilitySet::empty(),
    };
    rustix::thread::set_capabilities(None, none)
        .map_err(|e| SandboxError::step("cannot drop capabilities", e))?;
    rustix::thread::set_no_new_privs(true)
        .map_err(|e| SandboxError::step("cannot set no_new_privs", e))
}
