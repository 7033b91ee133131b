//! One loopback per session: the exec worker's side of the holders
//! ([`crate::reap::holder`]) that keep a session's network namespace alive, so that a
//! port one of the session's background processes listens on is reachable from the
//! session's later commands, and from no other session's (see docs/SANDBOX.md, "One
//! loopback per session").
//!
//! A holder is started the first time a session runs a command that may become a
//! background process (`background`, or a foreground command with a `yield_ms`); from
//! then on every command of that session joins its namespaces (without the host
//! network: a command a rule gives the host's network keeps it). A session that never
//! had a background process has nothing to reach, so its commands keep a namespace of
//! their own (and can use the spare sandbox). A holder is let go once its session has
//! no running background process and has made no call for [`IDLE`]; all of them end with
//! the worker (their parent-death signal, and killed when dropped).

use std::collections::{BTreeMap, HashMap};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::process::Child;
use tokio::time::Instant;

use super::{ChildSetup, Launcher, ShimArgs, ShimFds, ShimLauncher, high_fd, pre_exec};
use crate::ToolError;
use crate::exec::control::Control;
use crate::reap::control::{ACK, READY};
use crate::reap::holder::{CONNECT, FAILED, LISTEN};
use crate::sandbox::spec::{SandboxSpec, TEST_FAIL_VAR};

/// How long a session's holder is kept with no call and no running background process.
pub(crate) const IDLE: Duration = Duration::from_secs(600);
/// The most holders kept at once (beyond, idle ones go first, oldest first).
const MAX_HOLDERS: usize = 256;
/// How long a holder may take to set its namespaces up.
const READY_WAIT: Duration = Duration::from_secs(10);
/// How long a holder may take to answer a connection request.
const CONNECT_WAIT: Duration = Duration::from_secs(5);

/// The holders of one exec worker (none when commands get no namespaces of their own,
/// or all get the host's network).
#[derive(Clone, Debug, Default)]
pub(crate) struct Loopbacks {
    inner: Option<Arc<Inner>>,
}

#[derive(Debug)]
struct Inner {
    shim: ShimLauncher,
    /// Where a holder starts (it never looks at it).
    root: PathBuf,
    env: BTreeMap<String, String>,
    /// Test hook (`TOOLVISOR_SANDBOX_TEST_FAIL=holder`): every holder fails to set up.
    fail: bool,
    holders: Mutex<HashMap<String, Arc<Holder>>>,
    /// One holder started at a time: two calls of a new session get the same one.
    starting: tokio::sync::Mutex<()>,
}

/// One session's holder: its process, its channel, and its namespaces' descriptors.
#[derive(Debug)]
pub(crate) struct Holder {
    /// Killed when the holder is dropped (its namespaces live on while a command of
    /// the session still runs in them).
    _child: Child,
    /// The holder ends when this closes.
    channel: tokio::sync::Mutex<AsyncFd<OwnedFd>>,
    user: OwnedFd,
    net: OwnedFd,
    used: Mutex<Instant>,
}

impl Loopbacks {
    /// Holders for `launcher`'s commands when they get namespaces of their own, without
    /// the host's network for all, from the real binary (a test shim hosted in the test
    /// binary cannot be a holder); none otherwise.
    pub(crate) fn new(
        launcher: &Launcher,
        root: PathBuf,
        env: BTreeMap<String, String>,
    ) -> Loopbacks {
        let shim = match launcher {
            Launcher::Shim(s)
                if s.sandbox.as_ref().is_some_and(|t| !t.network) && s.args_env.is_none() =>
            {
                s
            }
            _ => return Loopbacks::default(),
        };
        let inner = Inner {
            shim: (**shim).clone(),
            root,
            env,
            fail: std::env::var(TEST_FAIL_VAR).is_ok_and(|v| v == "holder"),
            holders: Mutex::new(HashMap::new()),
            starting: tokio::sync::Mutex::new(()),
        };
        Loopbacks {
            inner: Some(Arc::new(inner)),
        }
    }

    /// The loopback of `session`: its holder, started now when `start` (the command may
    /// become a background process) and it has none. None without holders, for a call
    /// with no session, or when the session has none and `start` is false. A holder that
    /// cannot be started fails the call (the command must not run apart from the
    /// session's loopback).
    pub(crate) async fn get(
        &self,
        session: &str,
        start: bool,
    ) -> Result<Option<Arc<Holder>>, ToolError> {
        let Some(inner) = &self.inner else {
            return Ok(None);
        };
        if session.is_empty() {
            return Ok(None);
        }
        if let Some(h) = inner.find(session) {
            return Ok(Some(h));
        }
        if !start {
            return Ok(None);
        }
        let _one = inner.starting.lock().await;
        if let Some(h) = inner.find(session) {
            return Ok(Some(h));
        }
        let holder = Arc::new(Holder::start(inner).await.map_err(|e| {
            ToolError::internal(format!(
                "the session's shared loopback could not be set up, so the command did not \
                 run: {e}"
            ))
        })?);
        inner.lock().insert(session.to_owned(), Arc::clone(&holder));
        tracing::debug!("a loopback holder started for session {session}");
        Ok(Some(holder))
    }

    /// A loopback of one command's own, shared with no session: where a command whose
    /// network goes through the egress proxy runs, so that nothing but it reaches the
    /// proxy's port. Err without namespaces (the egress could not be enforced).
    pub(crate) async fn private(&self) -> Result<Holder, ToolError> {
        let Some(inner) = &self.inner else {
            return Err(ToolError::new(
                toolvisor_protocol::ErrorType::SandboxUnverified,
                "network by domain needs the command sandbox (a network namespace of the \
                 command's own), which commands here do not get: the command did not run",
            ));
        };
        Holder::start(inner).await.map_err(|e| {
            ToolError::internal(format!(
                "the command's own loopback could not be set up, so it did not run: {e}"
            ))
        })
    }

    /// Let go of the holders of sessions idle for [`IDLE`] that `busy` says run no
    /// background process; past [`MAX_HOLDERS`], of the least recently used such ones
    /// too, so that many short sessions cannot pile up processes.
    pub(crate) fn sweep(&self, busy: impl Fn(&str) -> bool) {
        let Some(inner) = &self.inner else { return };
        let now = Instant::now();
        let mut holders = inner.lock();
        holders.retain(|session, h| busy(session) || now.duration_since(h.last_used()) < IDLE);
        while holders.len() >= MAX_HOLDERS {
            let oldest = holders
                .iter()
                .filter(|(session, _)| !busy(session))
                .min_by_key(|(_, h)| h.last_used())
                .map(|(session, _)| session.clone());
            match oldest {
                Some(session) => holders.remove(&session),
                None => break,
            };
        }
    }

    /// Drop every holder (worker shutdown).
    pub(crate) fn close(&self) {
        if let Some(inner) = &self.inner {
            inner.lock().clear();
        }
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Holder>>> {
        self.holders.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn find(&self, session: &str) -> Option<Arc<Holder>> {
        let h = self.lock().get(session).cloned()?;
        *h.used.lock().unwrap_or_else(|e| e.into_inner()) = Instant::now();
        Some(h)
    }
}

impl Holder {
    /// The user and network namespaces' descriptors, for a shim to inherit.
    pub(crate) fn fds(&self) -> [i32; 2] {
        [self.user.as_raw_fd(), self.net.as_raw_fd()]
    }

    fn last_used(&self) -> Instant {
        *self.used.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `toolvisor reap --holder`, and its [`READY`] with the namespaces.
    async fn start(inner: &Inner) -> Result<Holder, String> {
        let root = std::fs::File::open(&inner.root)
            .map(OwnedFd::from)
            .map_err(|e| format!("cannot open the workspace: {e}"))?;
        let (control, end) = Control::pair().map_err(|e| format!("cannot make a socket: {e}"))?;
        let end = high_fd(end).map_err(|e| format!("cannot make a socket: {e}"))?;
        let Control::Channel(channel) = control else {
            return Err("no channel".into());
        };
        let fds = ShimFds {
            report: None,
            control: Some(end.as_raw_fd()),
            netns: None,
        };
        let a = ShimArgs {
            ppid: Some(std::process::id() as i32),
            grace: super::GRACE,
            control_fd: fds.control,
            holder: true,
            sandbox: inner.fail.then(|| SandboxSpec {
                fail: true,
                ..SandboxSpec::default()
            }),
            ..ShimArgs::default()
        };
        let mut cmd = inner.shim.detached(&a, &inner.env).map_err(|e| e.message)?;
        let setup = ChildSetup {
            cwd: root.as_raw_fd(),
            keep: fds.keep(),
            cgroup: None,
            terminal: false,
        };
        pre_exec(&mut cmd, setup, false);
        let child = cmd
            .spawn()
            .map_err(|e| format!("cannot start the holder: {e}"))?;
        drop((cmd, end));
        let channel = channel.into_inner();
        let ready = tokio::time::timeout(READY_WAIT, recv(&channel)).await;
        let (packet, fds) = match ready {
            Ok(Some(p)) => p,
            Ok(None) => return Err("the holder ended before it was ready".into()),
            Err(_) => return Err("the holder did not get ready in time".into()),
        };
        match (packet.split_first(), <[OwnedFd; 2]>::try_from(fds)) {
            (Some((&READY, _)), Ok([user, net])) => Ok(Holder {
                _child: child,
                channel: tokio::sync::Mutex::new(channel),
                user: high_fd(user).map_err(|e| e.to_string())?,
                net: high_fd(net).map_err(|e| e.to_string())?,
                used: Mutex::new(Instant::now()),
            }),
            (Some((&FAILED, why)), _) => Err(String::from_utf8_lossy(why).into_owned()),
            _ => Err("the holder answered something else than ready".into()),
        }
    }

    /// A TCP socket connected to `127.0.0.1:port` inside the session's namespace, made
    /// by the holder (the worker itself is outside it).
    pub(crate) async fn connect(&self, port: u16) -> Result<std::net::TcpStream, String> {
        self.socket(CONNECT, port)
            .await
            .map(std::net::TcpStream::from)
    }

    /// A TCP socket listening on `127.0.0.1:port` (0: any free port) inside the
    /// namespace, made by the holder.
    pub(crate) async fn listen(&self, port: u16) -> Result<std::net::TcpListener, String> {
        self.socket(LISTEN, port)
            .await
            .map(std::net::TcpListener::from)
    }

    /// The socket the holder made for request `op` on `port`.
    async fn socket(&self, op: u8, port: u16) -> Result<OwnedFd, String> {
        let channel = self.channel.lock().await;
        let request = format!("{}{port}", op as char);
        crate::exec::control::send_request(&channel, request.as_bytes())
            .await
            .map_err(|e| format!("the session's loopback holder is gone: {e}"))?;
        let answer = tokio::time::timeout(CONNECT_WAIT, recv(&channel))
            .await
            .map_err(|_| "the session's loopback holder did not answer".to_owned())?
            .ok_or_else(|| "the session's loopback holder is gone".to_owned())?;
        match (answer.0.split_first(), answer.1.into_iter().next()) {
            (Some((&ACK, b"0")), Some(fd)) => Ok(fd),
            (Some((&ACK, errno)), _) => {
                let errno = std::str::from_utf8(errno)
                    .ok()
                    .and_then(|e| e.parse().ok())
                    .unwrap_or(libc::EIO);
                Err(std::io::Error::from_raw_os_error(errno).to_string())
            }
            _ => Err("the session's loopback holder answered something else".into()),
        }
    }
}

/// One packet and the descriptors it carried; None when the holder's end is closed.
async fn recv(fd: &AsyncFd<OwnedFd>) -> Option<(Vec<u8>, Vec<OwnedFd>)> {
    fd.async_io(Interest::READABLE, |f| {
        crate::exec::control::recv_with_fds(f.as_raw_fd(), 4096)
            .ok_or_else(|| std::io::ErrorKind::WouldBlock.into())
    })
    .await
    .ok()
    .flatten()
}
