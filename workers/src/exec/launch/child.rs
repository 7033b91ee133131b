//! The forked child before it becomes the shim or the command: descriptors kept and
//! closed, the cgroup joined, the terminal taken, the parent-death signal.

use super::*;

/// In the child before exec: enter the cwd, join the cgroup, let every descriptor but
/// the standard streams close at the exec except the report pipe and the control channel
/// (handed to the shim; without a shim, none: the command is exec'd here), take the
/// terminal (no shim), arm the
/// parent-death signal and check the worker did not die before it was armed.
/// Async-signal-safe calls only.
pub(super) fn pre_exec(cmd: &mut Command, setup: ChildSetup, shim: bool) {
    let parent = nix::unistd::getpid();
    // The shim turns SIGTERM into an orderly tree kill; a bare `sh` gets SIGKILL.
    let death = if shim {
        Signal::SIGTERM
    } else {
        Signal::SIGKILL
    };
    // SAFETY: fchdir, fcntl, open/write (the cgroup join), prctl and getppid are
    // async-signal-safe; no allocation.
    unsafe {
        cmd.pre_exec(move || {
            if libc::fchdir(setup.cwd) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // Nothing of the worker's past the standard streams (its link to the
            // supervisor, other commands' pipes) crosses the exec; then the two the
            // shim is handed are let through again.
            toolvisor_os::fds::cloexec_from(toolvisor_os::fds::FIRST_NON_STDIO)?;
            for fd in setup.keep.into_iter().flatten() {
                if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            if setup.terminal {
                toolvisor_sandbox::reap::control::take_terminal()?;
            }
            if let Some(j) = &setup.cgroup {
                j.join_in_child()?;
            }
            nix::sys::prctl::set_pdeathsig(death)?;
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// `fd` moved to a number of 10 or more, out of the way of anything a shim or a test
/// wrapper sets up at fixed small numbers (close-on-exec, like the original).
pub(super) fn high_fd(fd: OwnedFd) -> std::io::Result<OwnedFd> {
    rustix::io::fcntl_dupfd_cloexec(&fd, 10).map_err(std::io::Error::from)
}

/// The descriptors the shim gets (numbers in the child, kept across `exec`).
#[derive(Clone, Copy, Debug)]
pub(super) struct ShimFds {
    pub(super) report: Option<i32>,
    pub(super) control: Option<i32>,
    /// The session loopback's user and network namespaces.
    pub(super) netns: Option<[i32; 2]>,
}

impl ShimFds {
    /// Every descriptor to keep open across `exec`.
    pub(super) fn keep(&self) -> [Option<i32>; 4] {
        let [user, net] = self.netns.map_or([None, None], |[u, n]| [Some(u), Some(n)]);
        [self.report, self.control, user, net]
    }
}

/// What the forked child does before `exec` (see [`Launcher::pre_exec`]).
pub(super) struct ChildSetup {
    pub(super) cwd: i32,
    /// The report pipe's write end, the control channel and the session loopback's
    /// namespaces, to keep across `exec`.
    pub(super) keep: [Option<i32>; 4],
    pub(super) cgroup: Option<Joiner>,
    /// Make the terminal on the standard streams the controlling one (no shim).
    pub(super) terminal: bool,
}
