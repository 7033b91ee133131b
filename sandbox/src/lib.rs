//! toolvisor's boundary, the only code that sets it up: the confinement of worker
//! processes (Landlock, at their start) and of the commands the exec worker runs, and
//! the `toolvisor reap` shim ([`reap`]) that builds a command's sandbox and reaps its
//! tree (see docs/SANDBOX.md). A security reviewer reads this crate whole.
//!
//! Its callers: the worker confines itself with [`confine`] (passing the directories
//! its group writes under the state directory); the exec worker's launcher
//! (`workers/src/exec/launch/`) writes a [`spec::SandboxSpec`] and starts the shim
//! with it; `toolvisor reap` is [`reap::main`]; `serve` asks [`probe::probe`] whether the
//! host allows namespaces. The cgroups a command is bounded and accounted in are the
//! exec worker's (`workers/src/exec/cgroup/`): it makes them and its forked child
//! joins them before it becomes the shim; they are resource limits, not the boundary.
//!
//! A command runs, where the host allows it, in new user, mount, PID, network, IPC,
//! UTS and cgroup namespaces that the reap shim builds ([`ns`], [`plan`], [`mount`]):
//! the host file system read-only, the workspace roots and `workers.exec.writable`
//! writable, the [`protect`]ed paths inside them read-only (pinned against renames),
//! the state directory, the socket and the [`hidden`] credential stores covered up, a private `/tmp`, a fresh `/proc`, and
//! only `lo` unless the network is allowed. [`probe`] tells `serve` whether the host
//! allows it; where it does not, commands run under [`landlock`] and the shim only.

mod error;
pub mod gitcfg;

pub mod hidden;
pub mod landlock;
pub mod mount;
pub mod ns;
pub mod observe;
pub mod overlay;
pub mod plan;
pub mod probe;
pub mod protect;
pub mod reap;
pub mod spec;

pub use error::SandboxError;
pub use landlock::{command_writable, confine, restrict_writes};

/// Where unit tests make their workspaces: not under `/tmp`, which the plan treats as
/// the command's own (a checkout under `/tmp` would make those tests prove nothing, or
/// fail); the crate's directory when it is not there, else `/var/tmp`, else `$HOME`.
#[cfg(test)]
pub(crate) fn test_base() -> std::path::PathBuf {
    let shared = |p: &std::path::Path| !p.starts_with("/tmp") && p.is_dir();
    let manifest = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if shared(&manifest) {
        return manifest;
    }
    let var_tmp = std::path::PathBuf::from("/var/tmp");
    if shared(&var_tmp) {
        return var_tmp;
    }
    std::env::var_os("HOME").map_or(manifest, std::path::PathBuf::from)
}
