//! Signals as readable bytes (the self-pipe trick), so one `poll` waits for child exits,
//! termination requests, another descriptor and timeouts together.
//!
//! Not a blocked mask and `sigwait`: a signal mask is per thread, and the handlers must
//! work whatever threads the hosting process has (the unit tests host the shim inside
//! the multi-threaded test binary).

use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, sigaction};

/// Write end of the self-pipe, for the signal handler.
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);

/// Async-signal-safe handler: one byte naming the signal into the self-pipe.
extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_WRITE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = sig as u8;
        // SAFETY: write(2) is async-signal-safe; errno is saved and restored.
        unsafe {
            let saved = *libc::__errno_location();
            libc::write(fd, (&byte as *const u8).cast(), 1);
            *libc::__errno_location() = saved;
        }
    }
}

/// How many extra descriptors [`SelfPipe::wait_with`] polls at most.
pub const EXTRA: usize = 2;

/// What [`SelfPipe::wait`] saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct Woken {
    /// SIGTERM, SIGINT or SIGHUP arrived: time to kill the tree.
    pub terminate: bool,
    /// Which extra descriptors polled are readable or hung up (in the order given).
    pub extra: [bool; EXTRA],
}

/// Signals turned into readable bytes on a pipe.
pub struct SelfPipe {
    read: OwnedFd,
    _write: OwnedFd,
}

impl SelfPipe {
    /// Create the pipe and install handlers for SIGCHLD, SIGTERM, SIGINT, SIGHUP. A
    /// second call (in a forked child) replaces the first's pipe for this process.
    pub fn install() -> nix::Result<Self> {
        let flags = nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK;
        let (read, write) = nix::unistd::pipe2(flags)?;
        PIPE_WRITE.store(write.as_raw_fd(), Ordering::SeqCst);
        let act = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::SA_RESTART | SaFlags::SA_NOCLDSTOP,
            SigSet::empty(),
        );
        for sig in [
            Signal::SIGCHLD,
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
        ] {
            // SAFETY: the handler only calls write(2) on a pipe (async-signal-safe).
            unsafe { sigaction(sig, &act) }?;
        }
        Ok(SelfPipe {
            read,
            _write: write,
        })
    }

    /// Wait until a signal arrives (or `timeout` passes) and drain the pipe.
    pub fn wait(&self, timeout: Option<Duration>) -> Woken {
        self.wait_with(timeout, [None, None])
    }

    /// [`SelfPipe::wait`], also waking when one of `extra` is readable or hung up.
    pub fn wait_with(
        &self,
        timeout: Option<Duration>,
        extra: [Option<BorrowedFd<'_>>; EXTRA],
    ) -> Woken {
        // Round up so a sub-millisecond remainder does not spin.
        let ms = timeout.map_or(-1, |d| {
            d.as_micros().div_ceil(1000).min(60_000) as libc::c_int
        });
        let poll_fd = |fd: i32| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let mut fds = [poll_fd(self.read.as_raw_fd()); 1 + EXTRA];
        for (slot, e) in fds[1..].iter_mut().zip(extra) {
            *slot = poll_fd(e.map_or(-1, |e| e.as_raw_fd()));
        }
        // SAFETY: valid pollfds for the duration of the call (a negative fd is
        // ignored by poll).
        let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if r < 0 && Errno::last() != Errno::EINTR {
            return Woken::default();
        }
        let mut woken = self.drain();
        for (seen, f) in woken.extra.iter_mut().zip(&fds[1..]) {
            *seen = f.revents != 0;
        }
        woken
    }

    fn drain(&self) -> Woken {
        let mut woken = Woken::default();
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = nix::unistd::read(&self.read, &mut buf) {
            for &b in &buf[..n] {
                let b = i32::from(b);
                if b == libc::SIGTERM || b == libc::SIGINT || b == libc::SIGHUP {
                    woken.terminate = true;
                }
            }
        }
        woken
    }
}
