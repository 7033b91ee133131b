//! What the shim tells its worker after the command: the resources the command's
//! processes used, or why the sandbox could not be set up (then the command never ran).
//! One JSON line on an inherited pipe (`--report-fd`), written just before the shim
//! exits; short enough to be written atomically.

use std::os::fd::{FromRawFd, OwnedFd};

use serde::{Deserialize, Serialize};

/// The shim's report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Report {
    /// The sandbox (or a limit) could not be set up; the command did not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub setup_error: Option<String>,
    /// The largest resident set of any of the command's processes.
    pub peak_rss_bytes: u64,
    /// User and system CPU time of all of them.
    pub cpu_ms: u64,
    /// How the command ended, when the shim knows before it exits that nothing the
    /// command started is left (its PID namespace's first process was reaped): the
    /// worker need not wait for the shim's own exit (and the namespaces' teardown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit: Option<Exit>,
}

/// A command's end, as the shim's exit will mirror it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Exit {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal.
    Signal(i32),
}

impl Exit {
    /// The wait status the shim's exit would give.
    pub fn status(self) -> std::process::ExitStatus {
        use std::os::unix::process::ExitStatusExt;
        match self {
            Exit::Code(c) => std::process::ExitStatus::from_raw((c & 0xff) << 8),
            Exit::Signal(s) => std::process::ExitStatus::from_raw(s & 0x7f),
        }
    }
}

impl Report {
    /// Parse what the shim wrote (None when it wrote nothing usable: it was killed).
    pub fn parse(bytes: &[u8]) -> Option<Report> {
        let line = bytes.split(|&b| b == b'\n').next()?;
        serde_json::from_slice(line).ok()
    }

    /// The resources of every child this process reaped (and their reaped
    /// descendants): `getrusage(RUSAGE_CHILDREN)`.
    fn of_children() -> Report {
        let Ok(u) = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN)
        else {
            return Report::default();
        };
        let ms = |t: nix::sys::time::TimeVal| {
            (t.tv_sec().max(0) as u64) * 1000 + (t.tv_usec().max(0) as u64) / 1000
        };
        Report {
            setup_error: None,
            peak_rss_bytes: (u.max_rss().max(0) as u64) * 1024,
            cpu_ms: ms(u.user_time()) + ms(u.system_time()),
            exit: None,
        }
    }
}

/// The shim's end of the report pipe (nothing when the worker passed none).
pub struct Writer {
    fd: Option<OwnedFd>,
}

impl Writer {
    /// Take `fd` (inherited from the worker) and keep it from the command: close-on-exec.
    pub fn new(fd: Option<i32>) -> Writer {
        let fd = fd.filter(|&fd| fd > 2).map(|fd| {
            // SAFETY: the worker passed this descriptor to us for this purpose alone.
            let owned = unsafe { OwnedFd::from_raw_fd(fd) };
            let _ = rustix::io::fcntl_setfd(&owned, rustix::io::FdFlags::CLOEXEC);
            owned
        });
        Writer { fd }
    }

    /// Close our copy without writing (the PID namespace's first process: the shim
    /// above it reports).
    pub fn close(self) {
        drop(self.fd);
    }

    fn write(&self, r: &Report) {
        let Some(fd) = &self.fd else { return };
        let Ok(mut line) = serde_json::to_vec(r) else {
            return;
        };
        line.push(b'\n');
        let mut rest = &line[..];
        while !rest.is_empty() {
            match rustix::io::write(fd, rest) {
                Ok(0) => return,
                Ok(n) => rest = &rest[n..],
                Err(rustix::io::Errno::INTR) => {}
                Err(_) => return,
            }
        }
    }

    /// Report the resources the reaped processes used.
    pub fn resources(&self) {
        self.write(&Report::of_children());
    }

    /// Report the resources, and how the command ended (everything it started is
    /// dead: see [`Report::exit`]).
    pub fn ended(&self, exit: Exit) {
        self.write(&Report {
            exit: Some(exit),
            ..Report::of_children()
        });
    }

    /// Report a setup failure (also on stderr, for a person reading the output) and
    /// return the shim's exit code for it.
    pub fn setup_failed(&self, why: &str) -> i32 {
        eprintln!("toolvisor reap: the command sandbox could not be set up: {why}");
        self.write(&Report {
            setup_error: Some(why.to_owned()),
            ..Report::default()
        });
        super::EX_SETUP
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        let r = Report {
            setup_error: None,
            peak_rss_bytes: 4096,
            cpu_ms: 12,
            exit: Some(Exit::Signal(9)),
        };
        assert_eq!(Exit::Code(3).status().code(), Some(3));
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&Exit::Signal(9).status()),
            Some(9)
        );
        let mut bytes = serde_json::to_vec(&r).unwrap();
        bytes.push(b'\n');
        assert_eq!(Report::parse(&bytes), Some(r));
        assert_eq!(Report::parse(b""), None);
        assert_eq!(Report::parse(b"{\"cpu_ms\""), None);
        let e = Report::parse(b"{\"setup_error\":\"no\"}\n").unwrap();
        assert_eq!(e.setup_error.as_deref(), Some("no"));
    }
}
