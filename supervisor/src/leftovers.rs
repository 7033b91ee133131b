//! At start, kill what a killed previous instance left running: processes whose
//! environment carries our state directory's marker but not this run's.

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// The environment variable commands carry (set by the exec worker's shim).
pub use toolvisor_workers::reap::MARKER_VAR as MARKER;

/// Kill every process marked by an earlier run of this state directory.
pub fn kill(instance: &str) {
    let Some((dir_id, _)) = instance.split_once('-') else {
        return;
    };
    let prefix = format!("{MARKER}={dir_id}-");
    let ours = format!("{MARKER}={instance}");
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    let mut killed = 0;
    for entry in entries.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(env) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let marked = env
            .split(|b| *b == 0)
            .any(|var| var.starts_with(prefix.as_bytes()) && var != ours.as_bytes());
        if marked && signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
            killed += 1;
        }
    }
    if killed > 0 {
        tracing::warn!(killed, "killed processes left by a previous instance");
    }
}
