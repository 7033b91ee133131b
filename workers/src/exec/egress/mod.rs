//! Network by domain: a command's egress proxy (docs/SANDBOX.md, "Network by domain").
//!
//! A command whose network is a domain list runs in a network namespace of its own
//! that has nothing but `lo` (a private loopback holder, [`super::launch::Loopbacks`]).
//! The holder makes a socket listening on that loopback and hands it to the worker,
//! which serves it here: an HTTP proxy (absolute-form requests and `CONNECT`), the
//! only way out of the namespace. `HTTP_PROXY`, `HTTPS_PROXY`, `ALL_PROXY` (and their
//! lower-case forms) point at it; a direct connection has no route, so it fails closed.
//!
//! Each connection names a host: a listed one connects; another is asked about (a
//! `connect` frame to the supervisor, which asks the call's session) when the session
//! is interactive, and refused otherwise (a `403` whose body says `NetworkDenied`, and
//! the host joins the result's `meta.network_denied`). Raw addresses are refused: lists
//! name hosts. Every connection, refused or carried, is reported (`connection` frame)
//! for the audit log, with the bytes each way.

mod proxy;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::sync::{oneshot, watch};
use toolvisor_protocol::Status;
use toolvisor_protocol::egress::Egress;
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::worker::{Connection, FromWorker};

use super::launch::Holder;
use crate::ToolError;
use crate::context::Outgoing;

/// The questions this worker's proxies wait on, by number (answers come in
/// `connect_answer` frames).
#[derive(Debug, Default)]
pub struct Asks {
    next: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<bool>>>,
}

impl Asks {
    /// Ask the supervisor whether `call`'s command may connect to `host:port`; false
    /// when the frame cannot be sent or the answer never comes.
    async fn ask(&self, out: &Outgoing, call: u64, host: &str, port: u16) -> bool {
        let ask = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (tx, rx) = oneshot::channel();
        self.lock().insert(ask, tx);
        let msg = FromWorker::Connect {
            call,
            ask,
            host: host.to_owned(),
            port,
        };
        if !out.send(&msg).await {
            self.lock().remove(&ask);
            return false;
        }
        rx.await.unwrap_or(false)
    }

    /// The supervisor's answer to question `ask` (an unknown one is ignored).
    pub fn answer(&self, ask: u64, allow: bool) {
        if let Some(tx) = self.lock().remove(&ask) {
            let _ = tx.send(allow);
        }
    }

    /// Answer every question "no" (the worker is stopping).
    pub fn refuse_all(&self) {
        for (_, tx) in self.lock().drain() {
            let _ = tx.send(false);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, oneshot::Sender<bool>>> {
        self.waiting.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How a connection was decided.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Verdict {
    /// On the list.
    Allowed,
    /// A person said yes (for this command, for this host and port).
    Approved,
    /// Refused, and why.
    Denied(String),
}

impl Verdict {
    fn word(&self) -> &'static str {
        match self {
            Verdict::Allowed => "allowed",
            Verdict::Approved => "approved",
            Verdict::Denied(_) => "denied",
        }
    }
}

/// What one command's proxy shares between its connections.
struct Shared {
    egress: Egress,
    call: u64,
    out: Outgoing,
    asks: Arc<Asks>,
    /// `host:port` a person approved or refused for this command: asked once.
    approved: Mutex<HashSet<String>>,
    refused: Mutex<BTreeSet<String>>,
    /// One question at a time per command (a burst of connections to one new host
    /// asks once).
    asking: tokio::sync::Mutex<()>,
    /// Connections the proxy took (a command that failed without any probably
    /// ignores the proxy variables: its result says so).
    taken: AtomicU64,
}

impl Shared {
    /// Decide a connection to `host:port`.
    async fn decide(&self, host: &str, port: u16) -> Verdict {
        let target = format!("{host}:{port}");
        if host.parse::<std::net::IpAddr>().is_ok() || host.contains(':') {
            return Verdict::Denied(format!(
                "{target} is an address: the network list names hosts"
            ));
        }
        if self.egress.permits(host) {
            return Verdict::Allowed;
        }
        let _one = self.asking.lock().await;
        if lock(&self.approved).contains(&target) {
            return Verdict::Approved;
        }
        if lock(&self.refused).contains(&target) || !self.egress.ask {
            return Verdict::Denied(format!("{host} is not on the command's network list"));
        }
        if self.asks.ask(&self.out, self.call, host, port).await {
            lock(&self.approved).insert(target);
            Verdict::Approved
        } else {
            Verdict::Denied(format!("a person declined the connection to {target}"))
        }
    }

    /// Report a connection for the audit log; a refused one joins `network_denied`.
    async fn report(&self, host: &str, port: u16, verdict: &Verdict, bytes: (u64, u64)) {
        let reason = match verdict {
            Verdict::Denied(why) => {
                lock(&self.refused).insert(format!("{host}:{port}"));
                Some(why.clone())
            }
            _ => None,
        };
        let msg = FromWorker::Connection(Connection {
            call: self.call,
            host: host.to_owned(),
            port,
            decision: verdict.word().to_owned(),
            sent: bytes.0,
            received: bytes.1,
            reason,
        });
        self.out.send(&msg).await;
    }
}

use toolvisor_os::sync::lock;

/// One command's running egress proxy; it stops taking connections when dropped
/// (connections under way go on until either end closes).
pub(crate) struct Proxy {
    shared: Arc<Shared>,
    port: u16,
    _stop: watch::Sender<bool>,
}

impl Proxy {
    /// Listen on the loopback of `holder`'s namespace and serve `egress` for `call`.
    pub(crate) async fn start(
        holder: &Holder,
        egress: Egress,
        call: u64,
        out: Outgoing,
        asks: Arc<Asks>,
    ) -> Result<Proxy, ToolError> {
        let listener = holder.listen(0).await.map_err(|e| {
            ToolError::internal(format!(
                "the command's egress proxy could not listen, so it did not run: {e}"
            ))
        })?;
        let port = listener.local_addr().map(|a| a.port()).unwrap_or(0);
        listener
            .set_nonblocking(true)
            .map_err(|e| ToolError::internal(format!("egress proxy: {e}")))?;
        let listener = tokio::net::TcpListener::from_std(listener)
            .map_err(|e| ToolError::internal(format!("egress proxy: {e}")))?;
        let shared = Arc::new(Shared {
            egress,
            call,
            out,
            asks,
            approved: Mutex::default(),
            refused: Mutex::default(),
            asking: tokio::sync::Mutex::new(()),
            taken: AtomicU64::new(0),
        });
        let (stop, stopped) = watch::channel(false);
        tokio::spawn(proxy::serve(listener, Arc::clone(&shared), stopped));
        Ok(Proxy {
            shared,
            port,
            _stop: stop,
        })
    }

    /// The variables that point the command's programs at the proxy.
    pub(crate) fn env(&self) -> Vec<(String, String)> {
        let url = format!("http://127.0.0.1:{}", self.port);
        let mut out = Vec::new();
        for name in ["http_proxy", "https_proxy", "all_proxy"] {
            out.push((name.to_owned(), url.clone()));
            out.push((name.to_ascii_uppercase(), url.clone()));
        }
        for name in ["no_proxy", "NO_PROXY"] {
            out.push((name.to_owned(), "localhost,127.0.0.1,::1".to_owned()));
        }
        out
    }

    /// Whether no connection reached the proxy.
    pub(crate) fn unused(&self) -> bool {
        self.shared.taken.load(Ordering::Relaxed) == 0
    }

    /// The `host:port`s refused so far (`meta.network_denied`).
    pub(crate) fn denied(&self) -> Vec<String> {
        lock(&self.shared.refused).iter().cloned().collect()
    }
}

/// `meta.network_denied`: the hosts the command's egress proxy refused, said after
/// the output too (the command's own error is whatever its program made of a `403`).
pub(crate) fn add_network_denied(out: &mut Outcome, proxy: Option<&Proxy>) {
    let Some(proxy) = proxy else { return };
    let denied = proxy.denied();
    let failed = out.status != Status::Ok;
    let note = match (denied.is_empty(), failed && proxy.unused()) {
        (false, _) => format!(
            "[NetworkDenied: the connection to {} was refused: not on the command's network list]",
            denied.join(", ")
        ),
        // It failed and never asked the proxy: a program that connects directly has no
        // route out of the command's namespace.
        (true, true) => "[network: this command's only way out is its egress proxy \
             (HTTP_PROXY, HTTPS_PROXY); a program that connects directly, or to an \
             address, has no route]"
            .to_owned(),
        (true, false) => return,
    };
    for text in [&mut out.content, &mut out.display] {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&note);
    }
    if !denied.is_empty() {
        out.meta.insert("network_denied".into(), json!(denied));
    }
}

#[cfg(test)]
mod tests;
