//! The egress proxy's connections: read a request head, decide its host, and carry
//! the bytes. `CONNECT host:port` becomes a tunnel; an absolute-form request
//! (`GET http://host/path`) is sent on in origin form with `Connection: close`, so one
//! connection is one host.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::{Shared, Verdict};

/// The longest request head taken.
const MAX_HEAD: usize = 32 * 1024;
/// How long a client may take to send its request head.
const HEAD_WAIT: Duration = Duration::from_secs(30);
/// How long connecting to the host may take.
const CONNECT_WAIT: Duration = Duration::from_secs(15);
/// Connections one command may have open through its proxy at once.
const MAX_OPEN: usize = 256;

/// Take connections until `stopped` turns (or its sender goes).
pub(super) async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let open = Arc::new(tokio::sync::Semaphore::new(MAX_OPEN));
    loop {
        let conn = tokio::select! {
            _ = stopped.changed() => return,
            accepted = listener.accept() => match accepted {
                Ok((conn, _)) => conn,
                Err(e) => {
                    tracing::warn!("egress proxy: accept failed: {e}");
                    return;
                }
            },
        };
        let Ok(permit) = Arc::clone(&open).try_acquire_owned() else {
            drop(conn); // over the bound: the client sees the connection close
            continue;
        };
        let shared = Arc::clone(&shared);
        tokio::spawn(async move {
            one(conn, &shared).await;
            drop(permit);
        });
    }
}

/// What a request head asks for.
#[derive(Debug, PartialEq, Eq)]
struct Request {
    host: String,
    port: u16,
    /// `CONNECT`: a tunnel; else the head to send on (origin form).
    forward: Option<Vec<u8>>,
}

/// Serve one connection to its end.
async fn one(mut conn: TcpStream, shared: &Shared) {
    shared
        .taken
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let (head, rest) = match tokio::time::timeout(HEAD_WAIT, read_head(&mut conn)).await {
        Ok(Some(h)) => h,
        _ => return,
    };
    let req = match parse(&head) {
        Ok(r) => r,
        Err(why) => {
            let _ = reply(
                &mut conn,
                "400 Bad Request",
                &format!("toolvisor egress: {why}\n"),
            )
            .await;
            return;
        }
    };
    let verdict = shared.decide(&req.host, req.port).await;
    if let Verdict::Denied(why) = &verdict {
        let body = format!(
            "toolvisor: NetworkDenied: {why}; the connection to {}:{} was refused\n",
            req.host, req.port
        );
        let _ = reply(&mut conn, "403 Forbidden", &body).await;
        shared.report(&req.host, req.port, &verdict, (0, 0)).await;
        return;
    }
    let mut upstream = match open(&req, &verdict, shared).await {
        Ok(s) => s,
        Err(why) => {
            let _ = reply(
                &mut conn,
                "502 Bad Gateway",
                &format!("toolvisor egress: {why}\n"),
            )
            .await;
            let failed = Verdict::Denied(why);
            shared.report(&req.host, req.port, &failed, (0, 0)).await;
            return;
        }
    };
    let first = match &req.forward {
        None => conn
            .write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            .await
            .is_ok(),
        Some(head) => upstream.write_all(head).await.is_ok(),
    };
    let mut sent = req.forward.as_ref().map_or(0, |h| h.len() as u64);
    if first && !rest.is_empty() && upstream.write_all(&rest).await.is_ok() {
        sent += rest.len() as u64;
    }
    let (up, down) = match first {
        true => tokio::io::copy_bidirectional(&mut conn, &mut upstream)
            .await
            .unwrap_or((0, 0)),
        false => (0, 0),
    };
    shared
        .report(&req.host, req.port, &verdict, (sent + up, down))
        .await;
}

/// Connect to the host. A host reached through a `*.` pattern or a person's yes never
/// reaches a loopback, private or link-local address; a name listed as it is does
/// (the person named it).
async fn open(req: &Request, verdict: &Verdict, shared: &Shared) -> Result<TcpStream, String> {
    let exact = *verdict == Verdict::Allowed
        && shared
            .egress
            .allow
            .iter()
            .any(|p| !p.starts_with("*.") && toolvisor_protocol::egress::covers(p, &req.host));
    let addrs = tokio::net::lookup_host((req.host.as_str(), req.port))
        .await
        .map_err(|e| format!("cannot resolve {}: {e}", req.host))?;
    let rule = crate::web::address::AddressRule::from_settings(false);
    let mut last = format!("{} has no address", req.host);
    for addr in addrs {
        if !exact && let Some(range) = rule.refusal(addr) {
            last = format!("{} resolves to {} ({range})", req.host, addr.ip());
            continue;
        }
        match tokio::time::timeout(CONNECT_WAIT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => return Ok(s),
            Ok(Err(e)) => last = format!("cannot connect to {addr}: {e}"),
            Err(_) => last = format!("connecting to {addr} timed out"),
        }
    }
    Err(last)
}

/// Read up to the end of the head (`\r\n\r\n`): the head and what came after it.
async fn read_head(conn: &mut TcpStream) -> Option<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 4096];
    loop {
        let n = conn.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Some((buf, rest));
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
    }
}

/// Parse a proxy request head.
fn parse(head: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(head).map_err(|_| "the request head is not UTF-8".to_owned())?;
    let mut lines = text.split("\r\n");
    let line = lines.next().unwrap_or_default();
    let mut words = line.split(' ');
    let (method, target, version) = match (words.next(), words.next(), words.next(), words.next()) {
        (Some(m), Some(t), Some(v), None) if v.starts_with("HTTP/1.") => (m, t, v),
        _ => return Err(format!("not an HTTP/1 request line: {line:?}")),
    };
    if method == "CONNECT" {
        let (host, port) = host_port(target, None)?;
        return Ok(Request {
            host,
            port,
            forward: None,
        });
    }
    let rest = target.strip_prefix("http://").ok_or_else(|| {
        format!("a proxy request names an http:// URL, not {target:?} (https goes through CONNECT)")
    })?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    let (host, port) = host_port(authority, Some(80))?;
    let mut out = format!("{method} {path} {version}\r\n");
    for h in lines.filter(|l| !l.is_empty()) {
        let name = h
            .split(':')
            .next()
            .unwrap_or_default()
            .trim()
            .to_ascii_lowercase();
        if name.starts_with("proxy-") || name == "connection" || name == "keep-alive" {
            continue;
        }
        out.push_str(h);
        out.push_str("\r\n");
    }
    out.push_str("Connection: close\r\n\r\n");
    Ok(Request {
        host,
        port,
        forward: Some(out.into_bytes()),
    })
}

/// `host:port` (`default` when the port is left out), the host checked as a name.
fn host_port(authority: &str, default: Option<u16>) -> Result<(String, u16), String> {
    if authority.contains('@') {
        return Err("credentials in the proxy target are not taken".into());
    }
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => {
            let (h, p) = v6.split_once(']').ok_or("a bad [address]")?;
            (h, p.strip_prefix(':'))
        }
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let port = match (port, default) {
        (Some(p), _) => p
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("bad port in {authority:?}"))?,
        (None, Some(d)) => d,
        (None, None) => return Err(format!("{authority:?} has no port")),
    };
    if host.is_empty()
        || host.len() > 253
        || host
            .bytes()
            .any(|b| b.is_ascii_whitespace() || b.is_ascii_control())
    {
        return Err(format!("bad host in {authority:?}"));
    }
    Ok((toolvisor_protocol::egress::normal_host(host), port))
}

/// A short HTTP answer from the proxy itself.
async fn reply(conn: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let msg = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(msg.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_and_absolute_requests() {
        let r = parse(b"CONNECT Example.COM:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(
            (r.host.as_str(), r.port, r.forward.is_none()),
            ("example.com", 443, true)
        );
        let r = parse(b"GET http://a.org:8080/p?q=1 HTTP/1.1\r\nHost: a.org\r\nProxy-Connection: keep-alive\r\nProxy-Authorization: x\r\n\r\n").unwrap();
        assert_eq!((r.host.as_str(), r.port), ("a.org", 8080));
        let fwd = String::from_utf8(r.forward.unwrap()).unwrap();
        assert_eq!(
            fwd,
            "GET /p?q=1 HTTP/1.1\r\nHost: a.org\r\nConnection: close\r\n\r\n"
        );
        let r = parse(b"GET http://a.org?x HTTP/1.0\r\n\r\n").unwrap();
        assert!(
            String::from_utf8(r.forward.unwrap())
                .unwrap()
                .starts_with("GET /?x HTTP/1.0")
        );
    }

    #[test]
    fn bad_heads_are_refused() {
        for bad in [
            &b"GET /local HTTP/1.1\r\n\r\n"[..],
            b"GET https://a.org/ HTTP/1.1\r\n\r\n",
            b"CONNECT a.org HTTP/1.1\r\n\r\n",
            b"CONNECT a.org:0 HTTP/1.1\r\n\r\n",
            b"CONNECT user@a.org:443 HTTP/1.1\r\n\r\n",
            b"CONNECT a.org:443 HTTP/2\r\n\r\n",
            b"GET http://a b/ HTTP/1.1 x\r\n\r\n",
            b"\xff\xfe\r\n\r\n",
        ] {
            assert!(parse(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
