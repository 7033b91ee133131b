//! At start, kill what a killed previous instance left running: processes whose
//! environment carries our state directory's marker but not this run's.

use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;
use toolvisor_os::procfs;
use toolvisor_protocol::worker::MARKER_VAR;

/// Kill every process marked by an earlier run of this state directory.
pub fn kill(instance: &str) {
    let Some((dir_id, _)) = instance.split_once('-') else {
        return;
    };
    let prefix = format!("{MARKER_VAR}={dir_id}-");
    let ours = format!("{MARKER_VAR}={instance}");
    let mut killed = 0;
    for pid in procfs::pids() {
        let marked = procfs::environ(pid)
            .iter()
            .any(|var| var.starts_with(prefix.as_bytes()) && var != ours.as_bytes());
        if marked && signal::kill(Pid::from_raw(pid), Signal::SIGKILL).is_ok() {
            killed += 1;
        }
    }
    if killed > 0 {
        tracing::warn!(killed, "killed processes left by a previous instance");
    }
}
