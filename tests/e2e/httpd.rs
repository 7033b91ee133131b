//! A tiny HTTP/1.1 server on 127.0.0.1 for the web tool tests: pages registered by
//! path, redirects, statuses, and bodies made as they are sent (a 2 GiB body is never
//! allocated; an endless stream stops when the client goes, or after a minute).
//! It serves only loopback and stops when dropped.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// What a path answers.
#[derive(Clone, Debug)]
pub enum Reply {
    /// Status, content type, body.
    Page(u16, String, Vec<u8>),
    /// `302` to this location.
    Redirect(String),
    /// `len` bytes of `a`, with a `Content-Length` (`declared`) or chunked (`!declared`).
    Lazy { len: u64, declared: bool },
    /// Chunks for ever (until the client leaves, or a minute has passed).
    Endless,
    /// Headers, then nothing for 30 s (a server that hangs).
    Stall,
}

impl Reply {
    pub fn html(body: &str) -> Reply {
        Reply::Page(
            200,
            "text/html; charset=utf-8".into(),
            body.as_bytes().to_vec(),
        )
    }
    pub fn text(body: &str) -> Reply {
        Reply::Page(
            200,
            "text/plain; charset=utf-8".into(),
            body.as_bytes().to_vec(),
        )
    }
    pub fn json(body: &serde_json::Value) -> Reply {
        Reply::Page(
            200,
            "application/json".into(),
            body.to_string().into_bytes(),
        )
    }
}

pub struct Httpd {
    pub addr: SocketAddr,
    pages: Arc<Mutex<HashMap<String, Reply>>>,
    stop: Arc<AtomicBool>,
    /// Requests served, in total.
    pub hits: Arc<AtomicUsize>,
    /// Bytes of bodies written, in total.
    pub sent: Arc<std::sync::atomic::AtomicU64>,
}

impl Httpd {
    pub fn start() -> Httpd {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().expect("addr");
        let pages: Arc<Mutex<HashMap<String, Reply>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let hits = Arc::new(AtomicUsize::new(0));
        let sent = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (p, st, h, se) = (pages.clone(), stop.clone(), hits.clone(), sent.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (p, h, se) = (p.clone(), h.clone(), se.clone());
                std::thread::spawn(move || serve(conn, &p, &h, &se));
            }
        });
        Httpd {
            addr,
            pages,
            stop,
            hits,
            sent,
        }
    }

    /// Answer `path` (with its query) with `reply`.
    pub fn page(&self, path: &str, reply: Reply) {
        self.pages
            .lock()
            .expect("pages")
            .insert(path.to_owned(), reply);
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Httpd {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wake the accept loop
    }
}

fn serve(
    conn: TcpStream,
    pages: &Mutex<HashMap<String, Reply>>,
    hits: &AtomicUsize,
    sent: &std::sync::atomic::AtomicU64,
) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(match conn.try_clone() {
        Ok(c) => c,
        Err(_) => return,
    });
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) if line == "\r\n" || line == "\n" => break,
            Ok(_) => {}
        }
    }
    hits.fetch_add(1, Ordering::SeqCst);
    let path = first.split_whitespace().nth(1).unwrap_or("/").to_owned();
    let reply = pages.lock().expect("pages").get(&path).cloned();
    let mut w = conn;
    let _ = match reply {
        None => respond(&mut w, 404, "text/plain", b"not found", sent),
        Some(Reply::Page(status, ctype, body)) => respond(&mut w, status, &ctype, &body, sent),
        Some(Reply::Redirect(to)) => write!(
            w,
            "HTTP/1.1 302 Found\r\nLocation: {to}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        Some(Reply::Lazy { len, declared }) => lazy(&mut w, len, declared, sent),
        Some(Reply::Endless) => endless(&mut w, sent),
        Some(Reply::Stall) => {
            let r = write!(
                w,
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\n"
            );
            // The server hanging is what is tested: it holds the connection open.
            std::thread::sleep(Duration::from_secs(30));
            r
        }
    };
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        404 => "Not Found",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Whatever",
    }
}

fn respond(
    w: &mut TcpStream,
    status: u16,
    ctype: &str,
    body: &[u8],
    sent: &std::sync::atomic::AtomicU64,
) -> std::io::Result<()> {
    write!(
        w,
        "HTTP/1.1 {status} {}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        reason(status),
        body.len()
    )?;
    w.write_all(body)?;
    sent.fetch_add(body.len() as u64, Ordering::SeqCst);
    Ok(())
}

static CHUNK: [u8; 64 * 1024] = [b'a'; 64 * 1024];

fn lazy(
    w: &mut TcpStream,
    len: u64,
    declared: bool,
    sent: &std::sync::atomic::AtomicU64,
) -> std::io::Result<()> {
    if declared {
        write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {len}\r\nConnection: close\r\n\r\n"
        )?;
    } else {
        write!(
            w,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        )?;
    }
    let mut left = len;
    while left > 0 {
        let n = left.min(CHUNK.len() as u64) as usize;
        if declared {
            w.write_all(&CHUNK[..n])?;
        } else {
            write!(w, "{n:x}\r\n")?;
            w.write_all(&CHUNK[..n])?;
            w.write_all(b"\r\n")?;
        }
        sent.fetch_add(n as u64, Ordering::SeqCst);
        left -= n as u64;
    }
    if !declared {
        w.write_all(b"0\r\n\r\n")?;
    }
    Ok(())
}

fn endless(w: &mut TcpStream, sent: &std::sync::atomic::AtomicU64) -> std::io::Result<()> {
    write!(
        w,
        "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
    )?;
    let end = Instant::now() + Duration::from_secs(60);
    while Instant::now() < end {
        write!(w, "{:x}\r\n", CHUNK.len())?;
        w.write_all(&CHUNK)?;
        w.write_all(b"\r\n")?;
        sent.fetch_add(CHUNK.len() as u64, Ordering::SeqCst);
    }
    Ok(())
}
