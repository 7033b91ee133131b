//! `run_command`'s `expose`: a background process's ports published on the host's
//! loopback. The policy asked (or a rule's `expose` granted it) before the call came.
//!
//! The process listens on its session's loopback, in a network namespace the worker is
//! not in; so the worker listens on `127.0.0.1:PORT` on the host, and for each
//! connection asks the session's holder (which is in the namespace) for a socket
//! connected to the same port there, and copies bytes both ways. The listeners are
//! bound before the process starts (a port taken on the host fails the call, not the
//! process) and closed when it ends.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::launch::Holder;
use crate::ToolError;

/// The host side of the ports to publish, bound.
pub(crate) struct Listeners(Vec<(u16, TcpListener)>);

/// `127.0.0.1:PORT`, as the result names it.
fn address(port: u16) -> String {
    SocketAddr::from((Ipv4Addr::LOCALHOST, port)).to_string()
}

/// The result's `meta.exposed` for `ports`.
pub(crate) fn addresses(ports: &[u16]) -> Vec<String> {
    ports.iter().copied().map(address).collect()
}

impl Listeners {
    /// Listen on `127.0.0.1:PORT` of the host for each of `ports`.
    pub(crate) async fn bind(ports: &[u16]) -> Result<Listeners, ToolError> {
        let mut out = Vec::with_capacity(ports.len());
        for &port in ports {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
                .await
                .map_err(|e| {
                    ToolError::invalid(format!(
                        "cannot expose port {port}: {} on the host: {e}",
                        address(port)
                    ))
                })?;
            out.push((port, l));
        }
        Ok(Listeners(out))
    }

    /// Forward each connection into the session's namespace through `holder`, until
    /// `done` turns true (the process ended).
    pub(crate) fn forward(self, holder: Arc<Holder>, done: watch::Receiver<bool>) {
        for (port, listener) in self.0 {
            let (holder, mut done) = (Arc::clone(&holder), done.clone());
            tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = done.wait_for(|d| *d) => break,
                        accepted = listener.accept() => match accepted {
                            Ok((conn, _)) => {
                                tokio::spawn(relay(conn, port, Arc::clone(&holder)));
                            }
                            Err(e) => {
                                tracing::warn!("exposed port {port}: accept failed: {e}");
                                break;
                            }
                        },
                    }
                }
            });
        }
    }
}

/// Copy between a host connection and a socket connected to `port` in the namespace.
async fn relay(mut host: TcpStream, port: u16, holder: Arc<Holder>) {
    let inner = match holder.connect(port).await {
        Ok(s) => s,
        Err(e) => {
            tracing::debug!("exposed port {port}: cannot connect inside the session: {e}");
            return;
        }
    };
    let inner = inner
        .set_nonblocking(true)
        .and_then(|()| TcpStream::from_std(inner));
    match inner {
        Ok(mut inner) => {
            let _ = tokio::io::copy_bidirectional(&mut host, &mut inner).await;
        }
        Err(e) => tracing::debug!("exposed port {port}: {e}"),
    }
}
