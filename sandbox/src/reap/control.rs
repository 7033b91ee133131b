//! The command's control channel, the shim's side: how the exec worker reaches a
//! running command through its shim without knowing where the command's processes are
//! (its PID namespace hides them from the worker).
//!
//! A `SOCK_SEQPACKET` socket pair made by the worker; the shim gets one end as
//! `--control-fd`. Whoever starts the command — the shim itself, or the PID namespace's
//! first process — serves it, one packet per message:
//! - runner → worker, once, before the command starts: [`TERMINAL`] carrying the master
//!   side of the command's terminal (`SCM_RIGHTS`), when it runs in one. The terminal is
//!   opened by the runner so that it belongs to the command's own `devpts` instance.
//! - worker → runner: [`SIGNAL`] and the signal's number in decimal; the runner sends
//!   it to the command's process group and answers [`ACK`] and the `errno` (0:
//!   delivered).
//! - a spare (`--spare`, see [`super::spare`]) first: runner → worker [`READY`] and
//!   what its mount plan saw of the host (JSON), once its sandbox is built; worker →
//!   runner [`GO`], the command (JSON) and its standard input, output and error
//!   (`SCM_RIGHTS`); runner → worker [`STARTED`] when it took it, or [`REFUSED`] and
//!   why (the worker then starts the command the ordinary way).
//!
//! The worker's side is `exec::control`.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::sys::signal::{Signal, killpg};
use nix::sys::socket::{ControlMessage, MsgFlags, send, sendmsg};
use nix::unistd::Pid;

use crate::SandboxError;

/// The packet that carries the terminal's master side.
pub const TERMINAL: u8 = b'T';
/// A request to signal the command's process group.
pub const SIGNAL: u8 = b'S';
/// The answer to [`SIGNAL`].
pub const ACK: u8 = b'A';
/// A spare's sandbox is ready (with what its plan saw).
pub const READY: u8 = b'R';
/// A spare's command, with its standard streams.
pub const GO: u8 = b'G';
/// The spare took the command.
pub const STARTED: u8 = b'O';
/// The spare did not take the command (and why).
pub const REFUSED: u8 = b'N';
/// The largest [`READY`] or [`GO`] packet (a larger command starts the ordinary way).
pub const MAX_PACKET: usize = 64 * 1024;

/// A packet's bytes and the descriptors it carried.
pub type Packet = (Vec<u8>, Vec<OwnedFd>);

/// The runner's end of the channel.
pub struct Channel {
    fd: OwnedFd,
}

impl Channel {
    /// Take `fd` (inherited from the worker) and keep it from the command.
    pub fn from_raw(fd: i32) -> Option<Channel> {
        if fd <= 2 {
            return None;
        }
        // SAFETY: the worker passed this descriptor to us for this purpose alone.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let _ = rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC);
        Some(Channel { fd })
    }

    /// Hand the terminal's master side to the worker.
    pub fn send_terminal(&self, master: &OwnedFd) -> Result<(), SandboxError> {
        let fds = [master.as_raw_fd()];
        let msg = [TERMINAL];
        sendmsg::<()>(
            self.fd.as_raw_fd(),
            &[IoSlice::new(&msg)],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::MSG_NOSIGNAL,
            None,
        )
        .map(|_| ())
        .map_err(|e| {
            SandboxError::step(
                "cannot hand the terminal to the worker",
                std::io::Error::other(e),
            )
        })
    }

    /// Send one packet: `kind` then `body`.
    pub fn send_packet(&self, kind: u8, body: &[u8]) -> Result<(), SandboxError> {
        let mut p = Vec::with_capacity(1 + body.len());
        p.push(kind);
        p.extend_from_slice(body);
        send(self.fd.as_raw_fd(), &p, MsgFlags::MSG_NOSIGNAL)
            .map(|_| ())
            .map_err(|e| SandboxError::step("cannot write to the worker", std::io::Error::other(e)))
    }

    /// Read one packet with the descriptors it carries (close-on-exec), when the channel
    /// is readable: None when it would block; an error when the worker's end is gone.
    pub fn recv_packet(&self) -> Result<Option<Packet>, SandboxError> {
        let gone = || SandboxError::Refused("the worker closed the control channel".into());
        let mut buf = vec![0u8; MAX_PACKET];
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 3]);
        let (n, fds) = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC;
            let msg = match nix::sys::socket::recvmsg::<()>(
                self.fd.as_raw_fd(),
                &mut iov,
                Some(&mut space),
                flags,
            ) {
                Ok(m) => m,
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return Ok(None),
                Err(_) => return Err(gone()),
            };
            let mut fds = Vec::new();
            for c in msg.cmsgs().into_iter().flatten() {
                if let nix::sys::socket::ControlMessageOwned::ScmRights(raw) = c {
                    // SAFETY: the kernel just installed these descriptors for us.
                    fds.extend(raw.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
                }
            }
            (msg.bytes, fds)
        };
        if n == 0 {
            return Err(gone());
        }
        buf.truncate(n);
        Ok(Some((buf, fds)))
    }

    /// Serve one request (the channel is readable). False when the worker's end is
    /// gone: stop polling it (a hung-up socket stays readable).
    pub fn serve(&self, group: Pid) -> bool {
        let mut buf = [0u8; 16];
        let n = {
            let mut iov = [IoSliceMut::new(&mut buf)];
            let flags = MsgFlags::MSG_DONTWAIT;
            match nix::sys::socket::recvmsg::<()>(self.fd.as_raw_fd(), &mut iov, None, flags) {
                Ok(m) => m.bytes,
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return true,
                Err(_) => return false,
            }
        };
        if n == 0 {
            return false;
        }
        if let Some(sig) = parse_signal(&buf[..n]) {
            let errno = match killpg(group, sig) {
                Ok(()) => 0,
                Err(e) => e as i32,
            };
            let answer = format!("{}{errno}", ACK as char);
            let _ = send(
                self.fd.as_raw_fd(),
                answer.as_bytes(),
                MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
            );
        }
        true
    }

    /// The channel's descriptor, for the shim's poll loop.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// The signal a [`SIGNAL`] packet names (None: not such a packet, or a bad number).
pub fn parse_signal(packet: &[u8]) -> Option<Signal> {
    let (&kind, num) = packet.split_first()?;
    if kind != SIGNAL {
        return None;
    }
    let n: i32 = std::str::from_utf8(num).ok()?.parse().ok()?;
    Signal::try_from(n).ok()
}

/// The errno an [`ACK`] packet carries (None: not such a packet).
pub fn parse_ack(packet: &[u8]) -> Option<i32> {
    let (&kind, num) = packet.split_first()?;
    if kind != ACK {
        return None;
    }
    std::str::from_utf8(num).ok()?.parse().ok()
}

/// A new pseudo-terminal of `rows` × `cols` from this process's `/dev/ptmx` (inside
/// the sandbox: the command's own `devpts` instance). Both sides close-on-exec: the
/// slave reaches the command only as its standard streams.
pub fn open_terminal(rows: u16, cols: u16) -> Result<(OwnedFd, OwnedFd), SandboxError> {
    let size = nix::pty::Winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // nix's own wording of the errno is kept, as for the other set-up steps.
    let pty = nix::pty::openpty(&size, None)
        .map_err(|e| SandboxError::step("cannot open a terminal", std::io::Error::other(e)))?;
    for fd in [&pty.master, &pty.slave] {
        rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)
            .map_err(|e| SandboxError::step("cannot set up the terminal", e))?;
    }
    Ok((pty.master, pty.slave))
}

/// Make the terminal on fd 0 the calling process's controlling terminal, in a new
/// session: Ctrl-C typed into it then reaches the command's foreground process group.
/// Runs in the forked child before `exec` (async-signal-safe calls only).
pub fn take_terminal() -> std::io::Result<()> {
    // SAFETY: setsid and ioctl are async-signal-safe; TIOCSCTTY takes an int argument.
    unsafe {
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_parse() {
        assert_eq!(parse_signal(b"S2"), Some(Signal::SIGINT));
        assert_eq!(parse_signal(b"S999"), None);
        assert_eq!(parse_signal(b"A0"), None);
        assert_eq!(parse_signal(b""), None);
        assert_eq!(parse_ack(b"A0"), Some(0));
        assert_eq!(parse_ack(b"A3"), Some(3));
        assert_eq!(parse_ack(b"S2"), None);
    }

    #[test]
    fn a_terminal_opens_with_its_size() {
        let (master, slave) = open_terminal(30, 100).unwrap();
        // SAFETY: an all-zero winsize is valid; TIOCGWINSZ fills it.
        let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
        // SAFETY: a valid fd and a valid winsize pointer for the call.
        let r = unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) };
        assert_eq!(r, 0);
        assert_eq!((ws.ws_row, ws.ws_col), (30, 100));
        drop(master);
    }
}
