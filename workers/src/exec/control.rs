//! The worker's side of a command's control channel (the shim's side and the packets
//! are in `reap::control`): receiving the command's terminal, and sending a signal to
//! its process group — which lives in a PID namespace the worker cannot see into, so
//! the process that started it (the shim, or the namespace's first process) sends it.

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::sys::socket::{
    AddressFamily, ControlMessage, ControlMessageOwned, MsgFlags, SockFlag, SockType, recvmsg,
    send, sendmsg, socketpair,
};
use nix::unistd::Pid;
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::time::Instant;

use toolvisor_sandbox::reap::control::{
    GO, MAX_PACKET, READY, REFUSED, SIGNAL, STARTED, TERMINAL, parse_ack,
};

/// How long a signal request waits for the runner's answer.
const ANSWER_WAIT: Duration = Duration::from_secs(5);

/// How the worker reaches a running command.
#[derive(Debug)]
pub(crate) enum Control {
    /// Through the runner's end of a socket pair (under the shim).
    Channel(tokio::sync::Mutex<AsyncFd<OwnedFd>>),
    /// No shim: the command's own process group, signalled directly.
    Direct(Pid),
}

/// Why a signal did not reach the command.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SignalError {
    #[error("the process has ended")]
    Gone,
    #[error("the signal could not be delivered: {0}")]
    Refused(nix::errno::Errno),
    #[error("the command's shim did not answer within {} s", ANSWER_WAIT.as_secs())]
    NoAnswer,
}

impl Control {
    /// A new channel: the worker's side, and the runner's end to pass to the shim
    /// (close-on-exec; the launcher keeps it open across `exec`).
    pub(crate) fn pair() -> std::io::Result<(Control, OwnedFd)> {
        let (ours, theirs) = socketpair(
            AddressFamily::Unix,
            SockType::SeqPacket,
            None,
            SockFlag::SOCK_CLOEXEC,
        )?;
        rustix::io::ioctl_fionbio(&ours, true)?;
        // SAFETY: an `OwnedFd` stays open, on the same description, for as long as the
        // `AsyncFd` owns it.
        let ours = unsafe { AsyncFd::register(ours) }.map_err(std::io::Error::from)?;
        Ok((Control::Channel(tokio::sync::Mutex::new(ours)), theirs))
    }

    /// The master side of the command's terminal, as the runner sends it before the
    /// command starts; None when the runner ended first (its sandbox could not be set
    /// up) or `deadline` passed.
    pub(crate) async fn terminal(&self, deadline: Instant) -> Option<OwnedFd> {
        let Control::Channel(fd) = self else {
            return None;
        };
        let fd = fd.lock().await;
        let wait = async {
            loop {
                match recv_packet(&fd).await {
                    Packet::Terminal(t) => return Some(t),
                    Packet::Closed => return None,
                    Packet::Other(_) => {}
                }
            }
        };
        tokio::time::timeout_at(deadline, wait).await.ok().flatten()
    }

    /// Send `sig` to the command's process group; Ok once it was delivered.
    pub(crate) async fn signal(&self, sig: Signal) -> Result<(), SignalError> {
        let fd = match self {
            Control::Direct(group) => return killpg(*group, sig).map_err(refused),
            Control::Channel(fd) => fd.lock().await,
        };
        let request = format!("{}{}", SIGNAL as char, sig as i32);
        let sent = send_request(&fd, request.as_bytes()).await;
        if sent.is_err() {
            return Err(SignalError::Gone);
        }
        let answer = async {
            loop {
                match recv_packet(&fd).await {
                    Packet::Other(p) => match parse_ack(&p) {
                        Some(0) => return Ok(()),
                        Some(e) => return Err(refused(nix::errno::Errno::from_raw(e))),
                        None => {}
                    },
                    Packet::Terminal(_) => {}
                    Packet::Closed => return Err(SignalError::Gone),
                }
            }
        };
        tokio::time::timeout(ANSWER_WAIT, answer)
            .await
            .unwrap_or(Err(SignalError::NoAnswer))
    }
}

/// How a spare answered its command.
#[derive(Debug)]
pub(crate) enum Answer {
    /// It took the command (and is starting it).
    Started,
    /// It did not (why); the command did not run.
    Refused(String),
    /// Its end closed before it answered: it died, and did not start the command.
    Gone,
}

impl Control {
    fn channel(&self) -> Option<&tokio::sync::Mutex<AsyncFd<OwnedFd>>> {
        match self {
            Control::Channel(fd) => Some(fd),
            Control::Direct(_) => None,
        }
    }

    /// A spare's [`READY`] packet (what its mount plan saw, JSON); None when it ended
    /// first.
    pub(crate) async fn spare_ready(&self) -> Option<Vec<u8>> {
        let fd = self.channel()?.lock().await;
        loop {
            match recv_packet_max(&fd, MAX_PACKET).await {
                Packet::Other(p) if p.first() == Some(&READY) => return Some(p[1..].to_vec()),
                Packet::Other(_) | Packet::Terminal(_) => {}
                Packet::Closed => return None,
            }
        }
    }

    /// Give a spare its command: the [`GO`] packet with `body` and the three standard
    /// streams; then its answer.
    pub(crate) async fn go(&self, body: &[u8], stdio: [BorrowedFd<'_>; 3]) -> Answer {
        let Some(fd) = self.channel() else {
            return Answer::Gone;
        };
        let fd = fd.lock().await;
        let mut packet = Vec::with_capacity(1 + body.len());
        packet.push(GO);
        packet.extend_from_slice(body);
        let raw = stdio.map(|f| f.as_raw_fd());
        let sent = fd
            .async_io(Interest::WRITABLE, |f| {
                sendmsg::<()>(
                    f.as_raw_fd(),
                    &[IoSlice::new(&packet)],
                    &[ControlMessage::ScmRights(&raw)],
                    MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
                    None,
                )
                .map_err(std::io::Error::from)
            })
            .await;
        if sent.is_err() {
            return Answer::Gone;
        }
        loop {
            match recv_packet_max(&fd, MAX_PACKET).await {
                Packet::Other(p) => match p.split_first() {
                    Some((&STARTED, _)) => return Answer::Started,
                    Some((&REFUSED, why)) => {
                        return Answer::Refused(String::from_utf8_lossy(why).into_owned());
                    }
                    _ => {}
                },
                Packet::Terminal(_) => {}
                Packet::Closed => return Answer::Gone,
            }
        }
    }
}

fn refused(e: nix::errno::Errno) -> SignalError {
    match e {
        nix::errno::Errno::ESRCH => SignalError::Gone,
        e => SignalError::Refused(e),
    }
}

/// One packet from the runner.
enum Packet {
    Terminal(OwnedFd),
    Other(Vec<u8>),
    /// The runner's end is closed (it exited), or the socket failed.
    Closed,
}

/// The largest packet the runner sends besides [`READY`].
const SMALL_PACKET: usize = 64;

async fn recv_packet(fd: &AsyncFd<OwnedFd>) -> Packet {
    recv_packet_max(fd, SMALL_PACKET).await
}

async fn recv_packet_max(fd: &AsyncFd<OwnedFd>, max: usize) -> Packet {
    fd.async_io(Interest::READABLE, |f| {
        recv_one(f.as_raw_fd(), max).ok_or_else(|| std::io::ErrorKind::WouldBlock.into())
    })
    .await
    .unwrap_or(Packet::Closed)
}

/// Read one packet of at most `max` bytes without blocking: None when it would block,
/// Closed at EOF.
fn recv_one(fd: RawFd, max: usize) -> Option<Packet> {
    let (packet, mut passed) = match recv_with_fds(fd, max)? {
        Some(p) => p,
        None => return Some(Packet::Closed),
    };
    Some(match (packet.first(), passed.pop()) {
        (Some(&TERMINAL), Some(t)) => Packet::Terminal(t),
        _ => Packet::Other(packet),
    })
}

/// Send one request packet on a shim's channel (without SIGPIPE when it is gone).
pub(crate) async fn send_request(fd: &AsyncFd<OwnedFd>, request: &[u8]) -> std::io::Result<()> {
    fd.async_io(Interest::WRITABLE, |f| {
        send(
            f.as_raw_fd(),
            request,
            MsgFlags::MSG_NOSIGNAL | MsgFlags::MSG_DONTWAIT,
        )
        .map(drop)
        .map_err(std::io::Error::from)
    })
    .await
}

/// One packet of at most `max` bytes and the descriptors passed with it (up to two),
/// without blocking: None when it would block, `Some(None)` at the end (or a failed
/// socket). The descriptors arrive close-on-exec.
#[allow(clippy::option_option)]
pub(crate) fn recv_with_fds(fd: RawFd, max: usize) -> Option<Option<(Vec<u8>, Vec<OwnedFd>)>> {
    let mut buf = vec![0u8; max];
    let mut iov = [IoSliceMut::new(&mut buf)];
    let mut space = nix::cmsg_space!([RawFd; 2]);
    let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_CMSG_CLOEXEC;
    let msg = match recvmsg::<()>(fd, &mut iov, Some(&mut space), flags) {
        Ok(m) => m,
        Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return None,
        Err(_) => return Some(None),
    };
    let mut passed = Vec::new();
    if let Ok(cmsgs) = msg.cmsgs() {
        for c in cmsgs {
            if let ControlMessageOwned::ScmRights(fds) = c {
                // SAFETY: the kernel just installed these descriptors for us.
                passed.extend(fds.into_iter().map(|f| unsafe { OwnedFd::from_raw_fd(f) }));
            }
        }
    }
    let n = msg.bytes;
    if n == 0 {
        return Some(None);
    }
    Some(Some((buf[..n].to_vec(), passed)))
}
