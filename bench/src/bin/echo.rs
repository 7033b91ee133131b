//! `toolvisor-echo`: the bare baseline toolvisor's latency is compared with. It speaks
//! the same framing (4-byte big-endian length + one MessagePack map) on a Unix socket,
//! on the same runtime shape as the supervisor and its workers (tokio, 2 threads).
//!
//! * `serve`: decode each frame, answer a map with the request's `type` and `id` (plus
//!   `content` of `--reply-bytes` bytes, e.g. 4096 to stand in for a 4 KB file).
//!   Client ↔ echo is **1 hop**.
//! * `relay`: for each client connection open one to `--upstream` and forward every
//!   frame (decoded and re-encoded, as the supervisor does between a client and a
//!   worker) there and the answer back. Client ↔ relay ↔ echo is **2 hops**.
//!
//! Usage: toolvisor-echo serve --socket PATH [--reply-bytes N]
//!        toolvisor-echo relay --socket PATH --upstream PATH

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::{UnixListener, UnixStream};
use toolvisor_protocol::frame::{self, FrameError};

/// The frame limit both roles apply (the protocol's default).
const MAX_FRAME: usize = toolvisor_protocol::DEFAULT_MAX_FRAME_BYTES;

enum Role {
    Serve { reply: Arc<String> },
    Relay { upstream: PathBuf },
}

fn parse_args() -> Result<(PathBuf, Role), String> {
    let mut it = std::env::args().skip(1);
    let cmd = it
        .next()
        .ok_or("usage: toolvisor-echo serve|relay --socket PATH …")?;
    let (mut socket, mut upstream, mut reply_bytes) = (None, None, 0usize);
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--socket" => socket = Some(PathBuf::from(val()?)),
            "--upstream" => upstream = Some(PathBuf::from(val()?)),
            "--reply-bytes" => {
                reply_bytes = val()?.parse().map_err(|e| format!("--reply-bytes: {e}"))?
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let socket = socket.ok_or("--socket is required")?;
    let role = match cmd.as_str() {
        "serve" => Role::Serve {
            reply: Arc::new("x".repeat(reply_bytes)),
        },
        "relay" => Role::Relay {
            upstream: upstream.ok_or("relay needs --upstream")?,
        },
        other => return Err(format!("unknown command {other} (serve or relay)")),
    };
    Ok((socket, role))
}

fn main() -> ExitCode {
    let (socket, role) = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("toolvisor-echo: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let result = match rt {
        Ok(rt) => rt.block_on(listen(socket, role)),
        Err(e) => Err(format!("runtime: {e}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolvisor-echo: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn listen(socket: PathBuf, role: Role) -> Result<(), String> {
    let _ = std::fs::remove_file(&socket);
    let listener =
        UnixListener::bind(&socket).map_err(|e| format!("bind {}: {e}", socket.display()))?;
    let role = Arc::new(role);
    loop {
        let (stream, _) = listener.accept().await.map_err(|e| e.to_string())?;
        let role = role.clone();
        tokio::spawn(async move {
            let r = match &*role {
                Role::Serve { reply } => echo(stream, reply).await,
                Role::Relay { upstream } => relay(stream, upstream).await,
            };
            if let Err(e) = r {
                eprintln!("toolvisor-echo: connection: {e}");
            }
        });
    }
}

/// Decode a body as the map every message is (the work a real server does first).
fn decode(body: &[u8]) -> Result<Map<String, Value>, String> {
    match rmp_serde::from_slice::<Value>(body) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err("not a map".into()),
        Err(e) => Err(format!("bad MessagePack: {e}")),
    }
}

async fn echo(stream: UnixStream, reply: &str) -> Result<(), String> {
    let (mut rd, mut wr) = stream.into_split();
    while let Some(body) = frame::read_frame(&mut rd, MAX_FRAME)
        .await
        .map_err(|e| e.to_string())?
    {
        let req = decode(&body)?;
        let mut ans = Map::new();
        for key in ["type", "id"] {
            if let Some(v) = req.get(key) {
                ans.insert(key.into(), v.clone());
            }
        }
        if !reply.is_empty() {
            ans.insert("content".into(), Value::String(reply.to_owned()));
        }
        let out = frame::encode(&Value::Object(ans)).map_err(|e| e.to_string())?;
        wr.write_all(&out).await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// One frame from `rd`, decoded and encoded again, written to `wr`; false at EOF.
async fn forward(
    rd: &mut tokio::net::unix::OwnedReadHalf,
    wr: &mut tokio::net::unix::OwnedWriteHalf,
) -> Result<bool, String> {
    let Some(body) = frame::read_frame(rd, MAX_FRAME)
        .await
        .map_err(|e: FrameError| e.to_string())?
    else {
        return Ok(false);
    };
    let msg = Value::Object(decode(&body)?);
    let out = frame::encode(&msg).map_err(|e| e.to_string())?;
    wr.write_all(&out).await.map_err(|e| e.to_string())?;
    Ok(true)
}

async fn relay(client: UnixStream, upstream: &std::path::Path) -> Result<(), String> {
    let up = UnixStream::connect(upstream)
        .await
        .map_err(|e| format!("connect {}: {e}", upstream.display()))?;
    let (mut crd, mut cwr) = client.into_split();
    let (mut urd, mut uwr) = up.into_split();
    // Clients of the benchmark have one request open at a time, so a request and its
    // answer alternate; the forwarding still crosses two sockets per direction.
    while forward(&mut crd, &mut uwr).await? {
        if !forward(&mut urd, &mut cwr).await? {
            return Err("upstream closed".into());
        }
    }
    Ok(())
}
