//! What the bridge's and the MCP worker's children share: they die with their parent,
//! and they get their standard streams and no other descriptor of ours.

/// A `pre_exec` hook: `signal` when the parent dies (then a check that the parent is
/// still the one that forked, closing the race with its death before the `prctl`).
pub fn die_with_parent(signal: libc::c_int) -> impl FnMut() -> std::io::Result<()> + Send + Sync {
    let parent = std::process::id() as libc::pid_t;
    move || {
        // SAFETY: plain system calls on integers; async-signal-safe (runs between fork
        // and exec).
        unsafe {
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        Ok(())
    }
}

/// A `pre_exec` hook: every descriptor above the standard streams is closed by the
/// `exec` (an MCP server must not get the worker's link to the supervisor, nor anything
/// else this process holds: docs/SANDBOX.md, "Descriptors").
pub fn only_stdio() -> std::io::Result<()> {
    toolvisor_os::fds::cloexec_from(toolvisor_os::fds::FIRST_NON_STDIO)
}
