//! One worker process, owned by one actor: the process's life in [`actor`] (spawn,
//! `init`, `ready`, death, backoff, restart; planned replacements in
//! `actor/replace.rs`), the control socket in [`link`] (the calls in flight, the
//! frames both ways), and what calls read of the worker without asking its actor in
//! [`shared`].
//!
//! A call never passes through the actor's mailbox: the pool picks a worker by its
//! [`WorkerShared`], which registers the call on the current [`Link`] and writes its
//! `run` frame; the link's reader hands the `done` straight back.

use std::time::Duration;

mod actor;
mod link;
mod shared;

pub use actor::{
    Announce, Reconfig, RestartReason, WorkerActor, WorkerActorState, WorkerArgs, WorkerMsg,
};
pub use link::{Link, Reply, run_frame};
pub use shared::{WorkerShared, WorkerState};

/// How long a started worker has to say `ready`.
pub const READY_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a worker may ignore a cancel before it is killed.
pub const CANCEL_GRACE: Duration = Duration::from_secs(2);
/// The same for an exec worker: a command that ignores SIGTERM is killed by its shim
/// 2 s after it (the worker's own backstop kills the shim 6 s later) and the worker
/// then drains its pipes; a call never costs the other calls their worker.
pub const EXEC_PATIENCE: Duration = Duration::from_secs(12);

/// What an MCP server's worker gets past its server's `startup_timeout_ms` to say
/// `ready` (it starts the server, then lists its tools, each within that deadline).
const MCP_READY_SLACK: Duration = Duration::from_secs(5);

/// How long a worker started with `init` has to say `ready`: [`READY_TIMEOUT`], or for
/// an MCP server's worker its server's start-up deadline and some slack.
pub fn ready_timeout(init: &toolvisor_protocol::worker::WorkerInit) -> Duration {
    match &init.mcp {
        Some(m) => Duration::from_millis(m.startup_timeout_ms) + MCP_READY_SLACK,
        None => READY_TIMEOUT,
    }
}

/// How long the supervisor waits for a worker of `group` to answer a cancel, or a call
/// past its deadline, before it gives up on the process.
pub fn patience(group: &str) -> Duration {
    if group == "exec" {
        EXEC_PATIENCE
    } else {
        CANCEL_GRACE
    }
}

/// SIGKILL a worker's process group (it leads its own group).
pub fn kill_group(pid: u32) {
    let _ = nix::sys::signal::killpg(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    );
}

// A lock that survives a panicked holder: the data behind these locks (a map of
// calls, a link, a time) stays consistent at every await point, so a panic elsewhere
// must not take the worker down with it.
use toolvisor_os::sync::lock;
