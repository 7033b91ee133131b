//! A session's loopback holder (`toolvisor reap --holder`): the process that keeps one
//! session's network namespace alive, so that every command of the session shares one
//! `lo` and a port a background process listens on is reachable from the session's
//! later commands (see docs/SANDBOX.md, "One loopback per session").
//!
//! It enters a new user namespace (its uid and gid mapped unchanged) and a new network
//! namespace owned by it, brings `lo` up, and sends the worker [`READY`] with both
//! namespaces as descriptors (`SCM_RIGHTS`): a command's shim joins them by those
//! descriptors, never by a pid that could be reused. It then serves its control channel
//! until the worker closes it: [`CONNECT`] and a port asks for a TCP socket connected to
//! `127.0.0.1:PORT` inside the namespace (how `expose` forwards a host connection into
//! it); the answer is [`ACK`] and the `errno` (0: the socket comes with it). It dies
//! with the worker (parent-death signal), and when the worker closes the channel.
//!
//! It runs no command and holds no capability over anything but its own namespaces.

use std::io::IoSlice;
use std::os::fd::{AsRawFd, OwnedFd};
use std::time::Duration;

use nix::sys::signal::Signal;
use nix::sys::socket::{ControlMessage, MsgFlags, sendmsg};

use super::control::{ACK, Channel, READY};
use super::{EX_SETUP, ShimArgs};
use crate::sandbox::{SandboxError, ns};

/// A request for a socket connected to a port of the namespace's loopback.
pub const CONNECT: u8 = b'C';
/// A request for a socket listening on a port of the namespace's loopback (`0`: any
/// free one): where a command's egress proxy takes its connections.
pub const LISTEN: u8 = b'L';
/// The holder could not set its namespace up (why follows); it exits.
pub const FAILED: u8 = b'E';
/// How long a [`CONNECT`] may take (a listener on loopback answers at once or refuses).
const CONNECT_WAIT: Duration = Duration::from_secs(2);

/// Run the holder; returns its exit code.
pub fn run(a: &ShimArgs) -> i32 {
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL);
    if a.ppid.is_some_and(|p| nix::unistd::getppid().as_raw() != p) {
        return 128 + Signal::SIGKILL as i32; // the worker is gone already
    }
    let Some(channel) = a.control_fd.and_then(Channel::from_raw) else {
        eprintln!("toolvisor reap --holder: no control channel (--control-fd)");
        return EX_SETUP;
    };
    // The test hook (`--sandbox` with `fail`): refuse like a host without namespaces.
    let namespaces = match a.sandbox.as_ref().filter(|s| s.fail) {
        Some(_) => Err(SandboxError::Refused(format!(
            "new network namespaces are refused (test hook {})",
            crate::sandbox::spec::TEST_FAIL_VAR
        ))),
        None => enter(),
    };
    let namespaces = match namespaces {
        Ok(n) => n,
        Err(e) => {
            let _ = channel.send_packet(FAILED, e.to_string().as_bytes());
            return EX_SETUP;
        }
    };
    if send_with(&channel, &[READY], &namespaces).is_err() {
        return EX_SETUP;
    }
    drop(namespaces);
    serve(&channel);
    0
}

/// New user and network namespaces with `lo` up; their descriptors (user, net).
fn enter() -> Result<[OwnedFd; 2], SandboxError> {
    ns::unshare_loopback()?;
    let open = |name: &str| {
        std::fs::File::open(format!("/proc/self/ns/{name}"))
            .map(OwnedFd::from)
            .map_err(|e| SandboxError::step(format!("cannot open /proc/self/ns/{name}"), e))
    };
    Ok([open("user")?, open("net")?])
}

/// Answer requests until the worker's end is gone.
fn serve(channel: &Channel) {
    let fd = channel.as_fd();
    loop {
        let mut fds = [rustix::event::PollFd::new(
            &fd,
            rustix::event::PollFlags::IN,
        )];
        match rustix::event::poll(&mut fds, None) {
            Ok(_) | Err(rustix::io::Errno::INTR) => {}
            Err(_) => return,
        }
        match channel.recv_packet() {
            Ok(None) => {}
            // Nothing but CONNECT and LISTEN is asked of a holder.
            Ok(Some((packet, _))) => match packet.split_first() {
                Some((&CONNECT, port)) => answer_connect(channel, port),
                Some((&LISTEN, port)) => answer_listen(channel, port),
                _ => {}
            },
            Err(_) => return,
        }
    }
}

/// Connect to the port named in `port` (decimal) on this namespace's loopback, and
/// send the socket (or the `errno`).
fn answer_connect(channel: &Channel, port: &[u8]) {
    let port: Option<u16> = std::str::from_utf8(port).ok().and_then(|p| p.parse().ok());
    let connected = match port {
        Some(p) if p > 0 => {
            let to = std::net::SocketAddr::from(([127, 0, 0, 1], p));
            std::net::TcpStream::connect_timeout(&to, CONNECT_WAIT)
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
        }
        _ => Err(libc::EINVAL),
    };
    let _ = match connected {
        Ok(s) => send_with(channel, b"A0", &[OwnedFd::from(s)]),
        Err(errno) => channel.send_packet(ACK, errno.to_string().as_bytes()),
    };
}

/// Listen on the port named in `port` (decimal; 0: any) of this namespace's loopback,
/// and send the listening socket (or the `errno`).
fn answer_listen(channel: &Channel, port: &[u8]) {
    let port: Option<u16> = std::str::from_utf8(port).ok().and_then(|p| p.parse().ok());
    let listening = match port {
        Some(p) => std::net::TcpListener::bind(std::net::SocketAddr::from(([127, 0, 0, 1], p)))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO)),
        None => Err(libc::EINVAL),
    };
    let _ = match listening {
        Ok(l) => send_with(channel, b"A0", &[OwnedFd::from(l)]),
        Err(errno) => channel.send_packet(ACK, errno.to_string().as_bytes()),
    };
}

/// Send `body` with `fds` (`SCM_RIGHTS`).
fn send_with(channel: &Channel, body: &[u8], fds: &[OwnedFd]) -> Result<(), SandboxError> {
    let raw: Vec<i32> = fds.iter().map(AsRawFd::as_raw_fd).collect();
    sendmsg::<()>(
        channel.as_fd().as_raw_fd(),
        &[IoSlice::new(body)],
        &[ControlMessage::ScmRights(&raw)],
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map(|_| ())
    .map_err(|e| SandboxError::step("cannot write to the worker", std::io::Error::other(e)))
}
