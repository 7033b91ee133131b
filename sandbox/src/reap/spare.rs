//! A spare (`toolvisor reap --spare`): the PID namespace's first process builds the
//! sandbox with no command yet, tells the worker it is ready (and what its mount plan
//! saw of the host), and waits on the control channel for the command — its argv,
//! environment, working directory and instance marker, and its standard streams
//! passed as descriptors. From there on it runs the command exactly like a shim started
//! for it (see docs/SANDBOX.md, "How a command starts").
//!
//! A spare never runs anything else: it takes one command, or ends when its worker
//! closes the channel, the shim above it dies, or it is told to terminate.

use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::control::{Channel, GO, READY, REFUSED, STARTED};
use super::signals::SelfPipe;
use crate::SandboxError;
use crate::observe::Observations;

/// The per-command part a spare gets (the [`GO`] packet's JSON; the standard input,
/// output and error travel beside it as descriptors, in that order).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Go {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// Its working directory (a host path, entered inside the sandbox's root)…
    pub cwd: PathBuf,
    /// …which must be this directory (device, inode), as the worker opened it.
    pub cwd_id: (u64, u64),
    /// `TOOLVISOR_INSTANCE` for the command.
    pub instance: Option<String>,
}

/// A command a spare took: its standard streams are already this process's 0, 1, 2.
pub struct Given {
    /// The command and its arguments.
    pub argv: Vec<String>,
    /// Its whole environment.
    pub env: Vec<(String, String)>,
    /// `TOOLVISOR_INSTANCE` for it.
    pub instance: Option<String>,
}

/// Tell the worker the sandbox is ready, with what its plan saw.
pub fn ready(channel: &Channel, seen: &Observations) -> Result<(), SandboxError> {
    let body = serde_json::to_vec(seen).map_err(|e| {
        SandboxError::Refused(format!("cannot encode the plan's observations: {e}"))
    })?;
    if body.len() + 1 > super::control::MAX_PACKET {
        return Err(SandboxError::Refused(
            "the plan saw too much of the host to be a spare".into(),
        ));
    }
    channel.send_packet(READY, &body)
}

/// Wait for the command. None: the worker closed the channel, the shim above died, a
/// termination request came, or the command could not be taken (the worker was told,
/// and starts it the ordinary way).
pub fn wait(channel: &Channel, life: &OwnedFd, pipe: &SelfPipe) -> Option<Given> {
    loop {
        let w = pipe.wait_with(None, [Some(life.as_fd()), Some(channel.as_fd())]);
        if w.terminate || w.extra[0] {
            return None;
        }
        if !w.extra[1] {
            continue;
        }
        match channel.recv_packet() {
            Ok(None) => {}
            Ok(Some((packet, fds))) if packet.first() == Some(&GO) => {
                return match take(&packet[1..], fds) {
                    Ok(given) => channel.send_packet(STARTED, b"").ok().map(|()| given),
                    Err(e) => {
                        let _ = channel.send_packet(REFUSED, e.to_string().as_bytes());
                        None
                    }
                };
            }
            Ok(Some(_)) => {} // nothing else is asked of a spare before its command
            Err(_) => return None,
        }
    }
}

/// Check and apply a [`GO`]: its working directory entered (the same directory the
/// worker opened), its streams made this process's 0, 1 and 2.
fn take(body: &[u8], fds: Vec<OwnedFd>) -> Result<Given, SandboxError> {
    let go: Go = serde_json::from_slice(body)
        .map_err(|e| SandboxError::Refused(format!("bad command for the spare: {e}")))?;
    let [stdin, stdout, stderr]: [OwnedFd; 3] = fds
        .try_into()
        .map_err(|_| SandboxError::Refused("the spare needs three standard streams".into()))?;
    if go.argv.is_empty() {
        return Err(SandboxError::Refused("no command for the spare".into()));
    }
    crate::ns::enter_cwd(&go.cwd, go.cwd_id)?;
    for (fd, to) in [(stdin, 0), (stdout, 1), (stderr, 2)] {
        // SAFETY: dup2 onto the standard descriptors of this single-threaded process.
        if unsafe { libc::dup2(std::os::fd::AsRawFd::as_raw_fd(&fd), to) } < 0 {
            return Err(SandboxError::step(
                "cannot take the command's standard streams",
                std::io::Error::last_os_error(),
            ));
        }
    }
    Ok(Given {
        argv: go.argv,
        env: go.env,
        instance: go.instance,
    })
}
