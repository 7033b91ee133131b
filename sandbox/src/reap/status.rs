//! The shim's own exit status: the command's, the same code or death by the same signal.

use super::*;

/// Exit like the command did: same code, or death by the same signal.
pub(super) fn finish(status: Option<WaitStatus>) -> i32 {
    match status {
        Some(WaitStatus::Exited(_, code)) => code,
        Some(WaitStatus::Signaled(_, sig, _)) => die_by(sig),
        _ => 128 + Signal::SIGKILL as i32,
    }
}

/// Re-raise `sig` on ourselves with its default action; the fallback code is the
/// shell's convention for a signal death.
pub(super) fn die_by(sig: Signal) -> i32 {
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    let dfl = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: restoring the default disposition installs no handler.
    let _ = unsafe { sigaction(sig, &dfl) };
    let mut set = SigSet::empty();
    set.add(sig);
    let _ = set.thread_unblock();
    let _ = kill(getpid(), sig);
    128 + sig as i32
}
