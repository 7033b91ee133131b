//! The proxy on a real socket: a listed host connects and its bytes are counted, an
//! unlisted one is refused (or asked about), an address is refused.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use toolvisor_protocol::egress::Egress;
use toolvisor_protocol::worker::{Connection, FromWorker};

use super::*;

const WAIT: Duration = Duration::from_secs(10);

/// A proxy for `egress` on a host port, the frames it sends, and its asks.
async fn proxy(
    egress: Egress,
) -> (
    u16,
    mpsc::Receiver<FromWorker>,
    Arc<Asks>,
    watch::Sender<bool>,
) {
    let (out, frames) = Outgoing::pair(64);
    let asks = Arc::new(Asks::default());
    let shared = Arc::new(Shared {
        egress,
        call: 7,
        out,
        asks: Arc::clone(&asks),
        approved: Mutex::default(),
        refused: Mutex::default(),
        asking: tokio::sync::Mutex::new(()),
        taken: AtomicU64::new(0),
    });
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (stop, stopped) = watch::channel(false);
    tokio::spawn(proxy::serve(listener, shared, stopped));
    (port, frames, asks, stop)
}

/// An upstream that answers each connection with `hello ` and what it read first.
async fn upstream() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                let n = c.read(&mut buf).await.unwrap_or(0);
                let _ = c.write_all(b"hello ").await;
                let _ = c.write_all(&buf[..n]).await;
            });
        }
    });
    port
}

/// Send `head` (and `body`) to the proxy; everything it answers.
async fn exchange(port: u16, head: String, body: &[u8]) -> String {
    let mut c = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    c.write_all(head.as_bytes()).await.unwrap();
    c.write_all(body).await.unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let read = tokio::time::timeout(WAIT, c.read(&mut buf))
            .await
            .expect("answer in time");
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
        if got.ends_with(b"ping") {
            break;
        }
    }
    String::from_utf8_lossy(&got).into_owned()
}

async fn connection(frames: &mut mpsc::Receiver<FromWorker>) -> Connection {
    loop {
        let f = tokio::time::timeout(WAIT, frames.recv())
            .await
            .expect("a frame")
            .expect("open");
        if let FromWorker::Connection(c) = f {
            return c;
        }
    }
}

#[tokio::test]
async fn a_listed_host_connects_and_its_bytes_are_counted() {
    let up = upstream().await;
    let (port, mut frames, _, _stop) = proxy(Egress {
        allow: vec!["localhost".into()],
        ask: false,
    })
    .await;
    let got = exchange(
        port,
        format!("CONNECT localhost:{up} HTTP/1.1\r\n\r\n"),
        b"ping",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 200"), "{got}");
    assert!(got.ends_with("hello ping"), "{got}");
    let c = connection(&mut frames).await;
    assert_eq!(
        (c.call, c.host.as_str(), c.decision.as_str()),
        (7, "localhost", "allowed")
    );
    assert_eq!((c.sent, c.received), (4, 10));
}

#[tokio::test]
async fn unlisted_hosts_and_addresses_are_refused_without_anyone_to_ask() {
    let up = upstream().await;
    let (port, mut frames, _, _stop) = proxy(Egress {
        allow: vec!["*.localhost".into()],
        ask: false,
    })
    .await;
    for target in [
        format!("localhost:{up}"),
        format!("127.0.0.1:{up}"),
        format!("[::1]:{up}"),
    ] {
        let got = exchange(port, format!("CONNECT {target} HTTP/1.1\r\n\r\n"), b"").await;
        assert!(got.starts_with("HTTP/1.1 403"), "{target}: {got}");
        assert!(got.contains("NetworkDenied"), "{got}");
        assert_eq!(connection(&mut frames).await.decision, "denied");
    }
    // Plain HTTP names its host in the URL: the same list decides.
    let got = exchange(
        port,
        format!("GET http://localhost:{up}/ HTTP/1.1\r\nHost: x\r\n\r\n"),
        b"",
    )
    .await;
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
}

#[tokio::test]
async fn a_wildcard_never_reaches_a_private_address() {
    let up = upstream().await;
    // `*.localhost` covers `a.localhost`, which resolves to loopback on most hosts: a
    // wildcard match is refused there (the person named no such host).
    let (port, _frames, _, _stop) = proxy(Egress {
        allow: vec!["*.localhost".into()],
        ask: false,
    })
    .await;
    let got = exchange(
        port,
        format!("CONNECT a.localhost:{up} HTTP/1.1\r\n\r\n"),
        b"",
    )
    .await;
    assert!(!got.starts_with("HTTP/1.1 200"), "{got}");
}

#[tokio::test]
async fn an_unlisted_host_is_asked_about_once_and_the_answer_holds() {
    let up = upstream().await;
    let (port, mut frames, asks, _stop) = proxy(Egress {
        allow: Vec::new(),
        ask: true,
    })
    .await;
    let head = format!("GET http://localhost:{up}/x HTTP/1.1\r\nHost: localhost\r\n\r\n");
    let client = tokio::spawn(exchange(port, head.clone(), b""));
    let ask = match tokio::time::timeout(WAIT, frames.recv())
        .await
        .unwrap()
        .unwrap()
    {
        FromWorker::Connect {
            call,
            ask,
            host,
            port: p,
        } => {
            assert_eq!((call, host.as_str(), p), (7, "localhost", up));
            ask
        }
        other => panic!("{other:?}"),
    };
    asks.answer(ask, false);
    let got = client.await.unwrap();
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    assert!(got.contains("declined"), "{got}");
    // Refused once: not asked again for this command.
    let got = exchange(port, head, b"").await;
    assert!(got.starts_with("HTTP/1.1 403"), "{got}");
    let mut asked = 0;
    while let Ok(f) = frames.try_recv() {
        asked += usize::from(matches!(f, FromWorker::Connect { .. }));
    }
    assert_eq!(asked, 0);
}
