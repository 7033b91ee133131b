//! One HTTP/1.1 exchange with the address it was allowed to reach.
//!
//! The name is resolved here, each address is checked by the [`AddressRule`], and the
//! TCP connection goes to a checked address (never to the name again); the address
//! the socket is actually connected to is checked once more. TLS (rustls, Mozilla's
//! roots) verifies the certificate against the URL's host. No proxy is ever used: a
//! proxy would make the address check meaningless.

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use url::{Host, Url};

use super::address::AddressRule;
use crate::ToolError;

use super::fetch_error as fetch_err;

/// What every request says about itself.
const USER_AGENT: &str = concat!("toolvisor/", env!("CARGO_PKG_VERSION"));

/// The addresses `url` may be reached at, in the resolver's order; an error names the
/// first refused address and its range when none may.
pub async fn addresses(url: &Url, rule: &AddressRule) -> Result<Vec<SocketAddr>, ToolError> {
    let port = url
        .port_or_known_default()
        .ok_or_else(|| fetch_err("the URL has no port"))?;
    let found: Vec<SocketAddr> = match url.host() {
        Some(Host::Ipv4(a)) => vec![SocketAddr::new(IpAddr::V4(a), port)],
        Some(Host::Ipv6(a)) => vec![SocketAddr::new(IpAddr::V6(a), port)],
        Some(Host::Domain(name)) => {
            let name = name.trim_end_matches('.');
            tokio::net::lookup_host((name, port))
                .await
                .map_err(|e| fetch_err(format!("cannot resolve `{name}`: {e}")))?
                .collect()
        }
        None => return Err(fetch_err("the URL has no host")),
    };
    let mut allowed = Vec::new();
    let mut refused = None;
    for addr in found {
        match rule.refusal(addr) {
            None if !allowed.contains(&addr) => allowed.push(addr),
            None => {}
            Some(range) => {
                refused.get_or_insert((addr, range));
            }
        }
    }
    match (allowed.is_empty(), refused) {
        (false, _) => Ok(allowed),
        (true, Some((addr, range))) => Err(fetch_err(format!(
            "refused: `{}` is {} address {} ([web] allow_private = true allows it)",
            url.host_str().unwrap_or_default(),
            article(range),
            addr.ip()
        ))),
        (true, None) => Err(fetch_err(format!(
            "`{}` has no address",
            url.host_str().unwrap_or_default()
        ))),
    }
}

/// "a private (10.0.0.0/8)", "an unspecified (::)".
fn article(range: &str) -> String {
    let an = range.starts_with(['a', 'e', 'i', 'o', 'u', 'I']);
    format!("{} {range}", if an { "an" } else { "a" })
}

/// Connect to the first of `addrs` that answers, and check where the socket went.
pub async fn tcp(addrs: &[SocketAddr], rule: &AddressRule) -> Result<TcpStream, ToolError> {
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                let peer = stream
                    .peer_addr()
                    .map_err(|e| fetch_err(format!("connected to {addr}, but: {e}")))?;
                if let Some(range) = rule.refusal(peer) {
                    return Err(fetch_err(format!(
                        "refused: the connection reached {} address {}",
                        article(range),
                        peer.ip()
                    )));
                }
                return Ok(stream);
            }
            Err(e) => last = Some(format!("cannot connect to {addr}: {e}")),
        }
    }
    Err(fetch_err(
        last.unwrap_or_else(|| "no address to connect to".into()),
    ))
}

/// Send `GET url` over `stream` (TLS for https) and return the response head; the
/// body is read by the caller.
pub async fn get(stream: TcpStream, url: &Url) -> Result<Response<Incoming>, ToolError> {
    if url.scheme() == "https" {
        let host = url.host_str().unwrap_or_default();
        let name = server_name(url)?;
        let tls = tokio_rustls::TlsConnector::from(tls_config()?)
            .connect(name, stream)
            .await
            .map_err(|e| fetch_err(format!("TLS with `{host}` failed: {e}")))?;
        exchange(tls, url).await
    } else {
        exchange(stream, url).await
    }
}

async fn exchange<S>(io: S, url: &Url) -> Result<Response<Incoming>, ToolError>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(io))
        .await
        .map_err(|e| fetch_err(format!("HTTP handshake failed: {e}")))?;
    // The connection task ends when the response body is done or dropped.
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = request(url)?;
    sender
        .send_request(req)
        .await
        .map_err(|e| fetch_err(format!("the request failed: {e}")))
}

/// `GET <path?query>` with the headers a plain fetch needs.
fn request(url: &Url) -> Result<Request<http_body_util::Empty<hyper::body::Bytes>>, ToolError> {
    let mut target = url.path().to_owned();
    if let Some(q) = url.query() {
        target.push('?');
        target.push_str(q);
    }
    let host = match (url.host_str(), url.port()) {
        (Some(h), Some(p)) => format!("{h}:{p}"),
        (Some(h), None) => h.to_owned(),
        (None, _) => return Err(fetch_err("the URL has no host")),
    };
    Request::get(target)
        .header(hyper::header::HOST, host)
        .header(hyper::header::USER_AGENT, USER_AGENT)
        .header(
            hyper::header::ACCEPT,
            "text/html,application/xhtml+xml,text/plain,application/json;q=0.9,*/*;q=0.8",
        )
        .header(hyper::header::ACCEPT_ENCODING, "identity")
        .header(hyper::header::CONNECTION, "close")
        .body(http_body_util::Empty::new())
        .map_err(|e| fetch_err(format!("cannot build the request: {e}")))
}

/// The name the certificate must carry: the URL's host (a name or an IP address).
fn server_name(url: &Url) -> Result<rustls::pki_types::ServerName<'static>, ToolError> {
    use rustls::pki_types::ServerName;
    match url.host() {
        Some(Host::Domain(d)) => ServerName::try_from(d.trim_end_matches('.').to_owned())
            .map_err(|e| fetch_err(format!("`{d}` is not a valid TLS name: {e}"))),
        Some(Host::Ipv4(a)) => Ok(ServerName::IpAddress(IpAddr::V4(a).into())),
        Some(Host::Ipv6(a)) => Ok(ServerName::IpAddress(IpAddr::V6(a).into())),
        None => Err(fetch_err("the URL has no host")),
    }
}

/// The TLS client configuration, built once: rustls on *ring*, Mozilla's root
/// certificates (compiled in, so no file of the host is needed), HTTP/1.1 only.
pub fn tls_config() -> Result<Arc<rustls::ClientConfig>, ToolError> {
    static CONFIG: OnceLock<Result<Arc<rustls::ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let roots =
                rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS is not available: {e}"))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(fetch_err)
}
