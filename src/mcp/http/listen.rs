//! The TCP side: accept connections (a bounded number at once) and serve HTTP/1.1 on
//! each through the [`Guard`].

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::mcp::http::guard::Guard;

/// Connections served at once; more wait in the kernel's backlog.
const MAX_CONNECTIONS: usize = 256;
/// A client has this long to send a request's headers.
const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (out of descriptors), so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serve until `stop` is cancelled.
pub async fn serve(listener: TcpListener, guard: Arc<Guard>, stop: CancellationToken) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let permit = tokio::select! {
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            _ = stop.cancelled() => return,
        };
        let stream = tokio::select! {
            a = listener.accept() => match a {
                Ok((s, _)) => s,
                Err(e) => {
                    tracing::warn!("accept: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = stop.cancelled() => return,
        };
        let guard = guard.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let svc = service_fn(move |req| {
                let guard = guard.clone();
                async move { Ok::<_, Infallible>(guard.handle(req).await) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => if let Err(e) = r {
                    tracing::debug!("HTTP connection: {e}");
                },
                _ = stop.cancelled() => conn.as_mut().graceful_shutdown(),
            }
            drop(permit);
        });
    }
}
