//! Whether this host lets commands have their namespaces: `serve` runs the reap shim
//! once, with a minimal sandbox around `/bin/sh -c 'exit 0'`, before any worker starts.
//! Unprivileged user namespaces are often refused (Docker's default seccomp profile,
//! AppArmor's `restrict_unprivileged_userns`, `user.max_user_namespaces = 0`), and some
//! refusals only show at a later step (mounting `/proc`), so the real path is tried.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use super::SandboxError;
use super::spec::{SandboxSpec, TEST_FAIL_VAR};
use crate::reap::ShimArgs;
use crate::reap::report::Report;

/// How long the probe may take.
const PROBE_DEADLINE: Duration = Duration::from_secs(10);

/// `Ok` when a command could run in its namespaces here, else why not.
pub fn probe(exe: &Path, workspace: &Path, hidden: &[PathBuf]) -> Result<(), SandboxError> {
    let root = workspace
        .canonicalize()
        .map_err(|e| SandboxError::step("workspace", e))?;
    let spec = SandboxSpec {
        roots: vec![root.clone()],
        hidden: hidden.to_vec(),
        cwd: root.clone(),
        fail: std::env::var(TEST_FAIL_VAR).is_ok_and(|v| v == "probe"),
        ..SandboxSpec::default()
    };
    let (read, write) = std::io::pipe().map_err(|e| SandboxError::step("cannot make a pipe", e))?;
    let write = OwnedFd::from(write);
    let args = ShimArgs {
        grace: crate::reap::DEFAULT_GRACE,
        sandbox: Some(spec),
        report_fd: Some(write.as_raw_fd()),
        argv: ["/bin/sh", "-c", "exit 0"].map(String::from).to_vec(),
        ..ShimArgs::default()
    };
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("reap")
        .args(args.to_args()?)
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let fd = write.as_raw_fd();
    // SAFETY: fcntl on an integer descriptor between fork and exec (async-signal-safe).
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| SandboxError::step("cannot run the reap shim", e))?;
    drop(write);
    let report = read_until_eof(OwnedFd::from(read), PROBE_DEADLINE);
    if report.is_none() {
        let _ = child.kill();
    }
    let status = child.wait()?;
    match report.as_deref().and_then(Report::parse) {
        Some(Report {
            setup_error: Some(why),
            ..
        }) => Err(SandboxError::Refused(why)),
        _ if status.success() => Ok(()),
        _ => Err(SandboxError::Refused(format!(
            "the probe command ended with {status}"
        ))),
    }
}

/// Read `fd` to its end, giving up after `deadline` (None then).
fn read_until_eof(fd: OwnedFd, deadline: Duration) -> Option<Vec<u8>> {
    let end = std::time::Instant::now() + deadline;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        let mut p = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        let ts = rustix::event::Timespec {
            tv_sec: left.as_secs() as i64,
            tv_nsec: i64::from(left.subsec_nanos()),
        };
        match rustix::event::poll(&mut p, Some(&ts)) {
            Ok(0) => return None,
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(_) => return None,
        }
        match rustix::io::read(&fd, &mut buf) {
            Ok(0) => return Some(out),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(rustix::io::Errno::INTR) => {}
            Err(_) => return Some(out),
        }
    }
}
