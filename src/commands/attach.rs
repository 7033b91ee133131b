//! A person's terminal attached to a background process that runs in a terminal:
//! `toolvisor call run_command '{"command":"python3","tty":true}' --interactive`
//! starts one and attaches; `toolvisor attach PROCESS` takes over one an agent started.
//!
//! The person's terminal goes into raw mode: every key, Ctrl-C included, is typed into
//! the process (`write_input`), what the process shows is written back as the terminal
//! wrote it (`read_output`'s `meta.raw`, long-polled), and a resize of the person's
//! window resizes the process's terminal. Ctrl-] detaches (the process keeps running).
//! The terminal's settings are restored on every way out: detach, the process's end,
//! an error, SIGTERM or SIGHUP, a panic.
//!
//! Typing needs a person's grant: the attach asks the daemon for one (`grant`, which
//! commands and models cannot send) covering `write_input` for this attach only, so a
//! person's keystrokes are not put to the policy one by one, and it may type into a
//! process another session started. A `deny` rule still stops it.

use std::io::{IsTerminal, Read, Write};
use std::os::fd::AsFd;
use std::path::Path;

use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};
use serde_json::{Value, json};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::mpsc;
use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Status};

use super::call::Options;
use super::plain_call::run_to_result;
use super::{CLIENT, parse_args};
use crate::workspace::Resolved;

/// The key that detaches: Ctrl-] (as telnet and virsh use it).
pub const DETACH_KEY: u8 = 0x1d;
/// How long one long poll for output waits.
const POLL_MS: u64 = 30_000;
/// How long the attach's grant lives.
const GRANT_TTL_MS: u64 = 24 * 3600 * 1000;
/// How much of an existing process's output is shown again on attach.
const REPLAY_BYTES: u64 = 16 * 1024;

/// The person's terminal in raw mode; its settings come back when this drops.
struct RawMode {
    saved: Termios,
}

impl RawMode {
    fn enter() -> Result<RawMode, String> {
        let stdin = std::io::stdin();
        let saved =
            tcgetattr(stdin.as_fd()).map_err(|e| format!("cannot read the terminal: {e}"))?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(stdin.as_fd(), SetArg::TCSAFLUSH, &raw)
            .map_err(|e| format!("cannot set the terminal to raw mode: {e}"))?;
        Ok(RawMode { saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSAFLUSH, &self.saved);
    }
}

/// The person's terminal size (rows, columns), when stdout is one.
pub fn terminal_size() -> Option<(u16, u16)> {
    // SAFETY: an all-zero winsize is valid; TIOCGWINSZ fills it.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a valid winsize pointer for the call.
    let r = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    (r == 0 && ws.ws_row > 0 && ws.ws_col > 0).then_some((ws.ws_row, ws.ws_col))
}

/// `call run_command … --interactive`: start the command in a terminal of the person's
/// size, in the background, and attach to it.
pub async fn call_interactive(r: &Resolved, o: Options) -> Result<i32, ClientError> {
    if !std::io::stdin().is_terminal() {
        eprintln!("toolvisor: --interactive needs a terminal on stdin");
        return Ok(2);
    }
    let args = match parse_args(o.args.as_deref()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return Ok(2);
        }
    };
    let mut req = CallRequest::new("cli-1", o.tool, args);
    req.timeout_ms = o.timeout_ms;
    req.trace_id = o.trace;
    req.confirm_token = o.token;
    let mut client = Client::connect(&r.socket, CLIENT, true).await?;
    let (c, socket) = (&mut client, r.socket.as_path());
    let Some(args) = req
        .args
        .as_object_mut()
        .filter(|_| req.tool == "run_command")
    else {
        eprintln!("toolvisor: --interactive runs run_command (in a terminal) and attaches to it");
        return Ok(2);
    };
    args.insert("tty".into(), json!(true));
    args.insert("background".into(), json!(true));
    if let Some((rows, cols)) = terminal_size() {
        args.entry("rows").or_insert(json!(rows));
        args.entry("cols").or_insert(json!(cols));
    }
    req.stream = None;
    let r = run_to_result(c, req).await?;
    let handle = r
        .meta
        .get("process")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let Some(handle) = handle.filter(|_| r.status == Status::Ok) else {
        if let Some(e) = &r.error {
            eprintln!(
                "toolvisor: {} ({}): {}",
                r.status.as_str(),
                e.kind,
                e.message
            );
        }
        return Ok(1);
    };
    attach(c, socket, &handle, 0).await
}

/// `toolvisor attach PROCESS`: take over a process that runs in a terminal.
pub async fn attach_existing(
    c: &mut Client,
    socket: &Path,
    handle: &str,
) -> Result<i32, ClientError> {
    if !std::io::stdin().is_terminal() {
        eprintln!("toolvisor: attach needs a terminal on stdin");
        return Ok(2);
    }
    let req = CallRequest::new(
        "peek",
        "read_output",
        json!({"process": handle, "since": 0}),
    );
    let r = run_to_result(c, req).await?;
    if r.status != Status::Ok {
        let why = r.error.map(|e| e.message).unwrap_or_default();
        eprintln!("toolvisor: cannot attach to {handle}: {why}");
        return Ok(1);
    }
    if r.meta.get("tty") != Some(&json!(true)) {
        eprintln!("toolvisor: {handle} does not run in a terminal (run_command tty: true)");
        return Ok(2);
    }
    let end = r
        .meta
        .get("output_bytes")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    attach(c, socket, handle, end.saturating_sub(REPLAY_BYTES)).await
}

/// What the loop reacts to.
enum Event {
    Keys(Vec<u8>),
    Output(Vec<u8>),
    /// The process ended (its exit code, or None when killed by a signal).
    Ended(Option<i64>),
    Failed(String),
}

/// Attach the terminal to `handle`, showing its output from byte `since`.
async fn attach(
    c: &mut Client,
    socket: &Path,
    handle: &str,
    since: u64,
) -> Result<i32, ClientError> {
    let trace = format!("attach-{}-{handle}", std::process::id());
    let token = match grant(c, &trace).await? {
        Ok(t) => t,
        Err(why) => {
            eprintln!("toolvisor: cannot type into {handle}: {why}");
            return Ok(1);
        }
    };
    // Reads go over a connection of their own, so a long poll never holds up a key.
    let reader = Client::connect(socket, "toolvisor-attach", false).await?;
    eprintln!("[attached to {handle}: Ctrl-] detaches, the process keeps running]\r");
    let raw = match RawMode::enter() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return Ok(1);
        }
    };
    let (tx, mut rx) = mpsc::channel::<Event>(64);
    spawn_keys(tx.clone());
    let poll = tokio::spawn(poll_output(reader, handle.to_owned(), since, tx));
    let mut winch = signal(SignalKind::window_change()).ok();
    let mut term = signal(SignalKind::terminate()).ok();
    let mut hup = signal(SignalKind::hangup()).ok();
    let typing = Typing {
        handle,
        token: &token,
        trace: &trace,
    };
    let mut out = std::io::stdout();
    let end = loop {
        tokio::select! {
            ev = rx.recv() => match ev {
                Some(Event::Output(bytes)) => {
                    let _ = out.write_all(&bytes);
                    let _ = out.flush();
                }
                Some(Event::Keys(keys)) => {
                    let (keys, detach) = split_detach(&keys);
                    if !keys.is_empty() && let Err(why) = typing.send(c, keys, None).await? {
                        break Ending::Failed(why);
                    }
                    if detach {
                        break Ending::Detached;
                    }
                }
                Some(Event::Ended(code)) => break Ending::Exited(code),
                Some(Event::Failed(why)) => break Ending::Failed(why),
                None => break Ending::Failed("the terminal closed".into()),
            },
            _ = recv_signal(&mut winch) => {
                if let Some(size) = terminal_size()
                    && let Err(why) = typing.send(c, &[], Some(size)).await?
                {
                    break Ending::Failed(why);
                }
            }
            _ = recv_signal(&mut term) => break Ending::Detached,
            _ = recv_signal(&mut hup) => break Ending::Detached,
        }
    };
    poll.abort();
    drop(raw);
    Ok(end.report(handle))
}

/// How an attach ended.
enum Ending {
    Detached,
    Exited(Option<i64>),
    Failed(String),
}

impl Ending {
    /// Say it on the restored terminal; the exit code of the CLI.
    fn report(self, handle: &str) -> i32 {
        match self {
            Ending::Detached => {
                eprintln!(
                    "\n[detached from {handle}: it keeps running; `toolvisor attach {handle}` comes back]"
                );
                0
            }
            Ending::Exited(code) => {
                let how = code.map_or("was killed by a signal".into(), |c| {
                    format!("exited with code {c}")
                });
                eprintln!("\n[{handle} {how}]");
                match code {
                    Some(c) => i32::try_from(c).unwrap_or(1),
                    None => 1,
                }
            }
            Ending::Failed(why) => {
                eprintln!("\ntoolvisor: {why}");
                1
            }
        }
    }
}

/// Keys up to the detach key, and whether it came.
fn split_detach(keys: &[u8]) -> (&[u8], bool) {
    match keys.iter().position(|&k| k == DETACH_KEY) {
        Some(i) => (&keys[..i], true),
        None => (keys, false),
    }
}

async fn recv_signal(s: &mut Option<tokio::signal::unix::Signal>) {
    match s {
        Some(s) => {
            s.recv().await;
        }
        None => std::future::pending().await,
    }
}

/// A grant that lets this attach type into any process (`write_input`, bound to the
/// attach's own trace id); `Err` says why there is none.
async fn grant(c: &mut Client, trace: &str) -> Result<Result<String, String>, ClientError> {
    let msg = ClientMessage::Grant {
        id: "attach-grant".into(),
        tools: vec!["write_input".into()],
        trace_id: Some(trace.to_owned()),
        paths: None,
        ttl_ms: GRANT_TTL_MS,
        reusable: Some(true),
    };
    Ok(match c.request(&msg, &"attach-grant".into()).await? {
        ServerMessage::Token { token, .. } => Ok(token),
        ServerMessage::Error { error, .. } => Err(format!("{}: {}", error.kind, error.message)),
        other => Err(format!("unexpected answer {other:?}")),
    })
}

/// Typing into the process with the attach's grant.
struct Typing<'a> {
    handle: &'a str,
    token: &'a str,
    trace: &'a str,
}

impl Typing<'_> {
    /// One `write_input`; `Ok(Err(why))` when the process refused it for good.
    async fn send(
        &self,
        c: &mut Client,
        keys: &[u8],
        size: Option<(u16, u16)>,
    ) -> Result<Result<(), String>, ClientError> {
        let mut args = json!({
            "process": self.handle,
            "data": String::from_utf8_lossy(keys),
        });
        if let Some((rows, cols)) = size {
            args["rows"] = json!(rows);
            args["cols"] = json!(cols);
        }
        let mut req = CallRequest::new("keys", "write_input", args);
        req.confirm_token = Some(self.token.to_owned());
        req.trace_id = Some(self.trace.to_owned());
        let r = run_to_result(c, req).await?;
        Ok(match (r.status, r.error) {
            (Status::Ok, _) => Ok(()),
            // The process ended meanwhile: the output side says how.
            (_, Some(e)) if e.message.contains("has ended") => Ok(()),
            (_, Some(e)) => Err(format!("{}: {}", e.kind, e.message)),
            (s, None) => Err(s.as_str().to_owned()),
        })
    }
}

/// Read the person's keys on a thread of their own (stdin blocks) into `tx`.
fn spawn_keys(tx: mpsc::Sender<Event>) {
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        let mut stdin = std::io::stdin();
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => {
                    let _ = tx.blocking_send(Event::Failed("the terminal closed".into()));
                    return;
                }
                Ok(n) => {
                    if tx.blocking_send(Event::Keys(buf[..n].to_vec())).is_err() {
                        return;
                    }
                }
            }
        }
    });
}

/// Long-poll the process's output from `since` on, as the terminal wrote it.
async fn poll_output(mut c: Client, handle: String, mut since: u64, tx: mpsc::Sender<Event>) {
    let mut n = 0u64;
    loop {
        n += 1;
        let args = json!({"process": handle, "since": since, "wait_ms": POLL_MS});
        let req = CallRequest::new(format!("out-{n}"), "read_output", args);
        let r = match run_to_result(&mut c, req).await {
            Ok(r) => r,
            Err(e) => {
                let _ = tx.send(Event::Failed(e.to_string())).await;
                return;
            }
        };
        if r.status != Status::Ok {
            let why = r.error.map(|e| e.message).unwrap_or_default();
            let _ = tx.send(Event::Failed(why)).await;
            return;
        }
        let meta = &r.meta;
        let raw = meta
            .get("raw")
            .and_then(Value::as_str)
            .unwrap_or(&r.content);
        if !raw.is_empty()
            && tx
                .send(Event::Output(raw.as_bytes().to_vec()))
                .await
                .is_err()
        {
            return;
        }
        let next = meta.get("next").and_then(Value::as_u64).unwrap_or(since);
        let running = meta.get("running") != Some(&json!(false));
        if !running && next == since {
            let code = meta.get("exit_code").and_then(Value::as_i64);
            let _ = tx.send(Event::Ended(code)).await;
            return;
        }
        since = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_detach_key_ends_the_keys() {
        assert_eq!(split_detach(b"ab\x1dcd"), (&b"ab"[..], true));
        assert_eq!(split_detach(b"abc"), (&b"abc"[..], false));
        assert_eq!(split_detach(b"\x1d"), (&b""[..], true));
    }
}
