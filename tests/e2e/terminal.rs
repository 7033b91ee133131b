//! Processes that behave like a terminal (docs/PROTOCOL.md, "Processes that behave
//! like a terminal"): `run_command`'s `stdin`, `tty`, `yield_ms` and `ready`;
//! `write_input`; `read_output`'s `wait_ms` and `until`; `kill_process`'s `signal`;
//! what `list_processes` says of them; who may write to a job; bad input; and memory
//! that stays bounded when a job floods its terminal or never reads its input.
//!
//! The commands are small scripts the tests write: a line echoer, a signal trapper, a
//! slow printer, a tiny HTTP server on 127.0.0.1 (inside the command's own network
//! namespace, where `ready.port` must see it).

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage};
use toolvisor_protocol::{ErrorType, Status, ToolResult};

use crate::harness::*;

/// Reads its input line by line, answers each, says `eof` at the end.
const ECHOER: &str = "while IFS= read -r l; do echo \"echo:$l\"; done; echo eof\n";
/// Reports the signals it gets; `armed` once the traps are set.
const TRAPPER: &str = "trap 'echo caught-INT' INT\ntrap 'echo caught-USR1' USR1\n\
trap 'echo size $(stty size)' WINCH\necho armed\nwhile :; do sleep 0.1; done\n";
/// `slow.sh N S`: N numbered lines, S seconds apart.
const SLOW: &str = "for i in $(seq 1 \"$1\"); do echo \"line $i\"; sleep \"$2\"; done\n";
/// `server.py PORT DELAY`: after DELAY seconds, serves HTTP on 127.0.0.1:PORT.
const SERVER: &str = "import http.server, socketserver, sys, time\n\
port, delay = int(sys.argv[1]), float(sys.argv[2])\n\
print('starting', flush=True)\n\
time.sleep(delay)\n\
srv = socketserver.TCPServer(('127.0.0.1', port), http.server.SimpleHTTPRequestHandler)\n\
print(f'serving on {port}', flush=True)\n\
srv.serve_forever()\n";

fn scripts(s: &Server) {
    s.write("echoer.sh", ECHOER);
    s.write("trapper.sh", TRAPPER);
    s.write("slow.sh", SLOW);
    s.write("server.py", SERVER);
}

fn kind(r: &ToolResult) -> Option<ErrorType> {
    r.error.as_ref().map(|e| e.kind)
}

fn message(r: &ToolResult) -> &str {
    r.error.as_ref().map_or("", |e| e.message.as_str())
}

/// Start a background job on `c`; its handle.
async fn start(c: &mut Client, id: &str, args: Value) -> String {
    let r = call_on(c, id, "run_command", args).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    r.meta["process"].as_str().expect("meta.process").to_owned()
}

/// Long-poll `handle`'s output (from where the last read stopped) until it contains
/// `needle`; everything read.
async fn read_until(c: &mut Client, handle: &str, needle: &str) -> String {
    let end = Instant::now() + Duration::from_secs(30);
    let mut got = String::new();
    while !got.contains(needle) {
        assert!(Instant::now() < end, "{needle:?} never came: {got:?}");
        let args = json!({"process": handle, "wait_ms": 5000});
        let r = call_on(c, "ro", "read_output", args).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        got.push_str(&r.content);
        if r.meta["running"] == json!(false) && r.content.is_empty() {
            assert!(
                got.contains(needle),
                "{handle} ended without {needle:?}: {got:?}"
            );
        }
    }
    got
}

/// The `list_processes` row of `handle`.
async fn row(c: &mut Client, handle: &str) -> Value {
    let r = call_on(c, "ls", "list_processes", json!({})).await;
    assert_eq!(r.status, Status::Ok, "{r:?}");
    r.meta["processes"]
        .as_array()
        .expect("meta.processes")
        .iter()
        .find(|p| p["process"] == json!(handle))
        .cloned()
        .unwrap_or_else(|| panic!("{handle} not listed: {}", r.content))
}

/// Wait until `handle` has ended; its last read.
async fn wait_end(c: &mut Client, handle: &str) -> ToolResult {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let args = json!({"process": handle, "wait_ms": 5000});
        let r = call_on(c, "we", "read_output", args).await;
        if r.meta["running"] == json!(false) {
            return r;
        }
        assert!(Instant::now() < end, "{handle} did not end: {r:?}");
    }
}

#[test]
fn stdin_and_a_terminal_in_the_foreground() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mut c = s.client().await;
        // stdin is written, then closed.
        let r = call_on(
            &mut c,
            "a",
            "run_command",
            json!({"command": "cat; echo end", "stdin": "one\ntwo\n"}),
        )
        .await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "one\ntwo\nend\n"),
            "{r:?}"
        );
        // Without it, /dev/null: a reader sees the end at once.
        let r = call_on(
            &mut c,
            "b",
            "run_command",
            json!({"command": "cat; echo nothing"}),
        )
        .await;
        assert_eq!(r.content, "nothing\n", "{r:?}");
        // A terminal of its own, in the sandbox: its own devpts, its controlling
        // terminal, the size asked for, TERM, escape sequences gone from content.
        let cmd = "tty; stty size; echo $TERM; test -t 0 && test -t 1 && echo both-ttys; \
                   echo via-dev-tty > /dev/tty; printf '\\033[1;31mred\\033[0m\\n'; ls /dev/pts | tr '\\n' ' '; echo";
        let r = call_on(
            &mut c,
            "c",
            "run_command",
            json!({"command": cmd, "tty": true, "rows": 30, "cols": 100}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let lines: Vec<&str> = r.content.lines().collect();
        assert!(lines[0].starts_with("/dev/pts/"), "{:?}", r.content);
        assert_eq!(
            &lines[1..6],
            [
                "30 100",
                "xterm-256color",
                "both-ttys",
                "via-dev-tty",
                "red"
            ],
            "{:?}",
            r.content
        );
        assert!(
            !r.content.contains('\u{1b}') && !r.content.contains('\r'),
            "{:?}",
            r.content
        );
        if s.guards().await.namespaces {
            assert_eq!(
                lines[6].trim(),
                "0 ptmx",
                "a devpts of its own: {:?}",
                r.content
            );
        }
        // stdin into a terminal: typed (the terminal echoes it), then end-of-file,
        // which `cat` must see to end before the timeout.
        let args = json!({"command": "read x; echo got:$x; cat; echo eof", "tty": true, "stdin": "abc\nrest", "timeout": 10000});
        let r = call_on(&mut c, "d", "run_command", args).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(r.content.contains("got:abc\n"), "{:?}", r.content);
        assert!(r.content.ends_with("resteof\n"), "{:?}", r.content);
        // Streamed, a terminal's output is text too.
        let mut req = CallRequest::new(
            "e",
            "run_command",
            json!({"command": "printf '\\033[32mgreen\\033[0m\\n'", "tty": true}),
        );
        req.stream = Some(true);
        let t = c.call(req, |_, _| {}).await.expect("call");
        let streamed: String = t.outputs.iter().map(|o| o.1.as_str()).collect();
        assert_eq!(streamed, "green\n", "{t:?}");
        // rows without tty, and input over 1 MiB, are refused before they run.
        let r = call_on(
            &mut c,
            "f",
            "run_command",
            json!({"command": "true", "rows": 10}),
        )
        .await;
        assert_eq!(kind(&r), Some(ErrorType::InvalidParams), "{r:?}");
        let big = "é".repeat((1 << 19) + 1);
        let r = call_on(
            &mut c,
            "g",
            "run_command",
            json!({"command": "cat", "stdin": big}),
        )
        .await;
        assert_eq!(kind(&r), Some(ErrorType::InvalidParams), "{r:?}");
        assert!(message(&r).contains("1 MiB"), "{r:?}");
    });
}

#[test]
fn a_background_job_reads_what_is_written_until_its_input_closes() {
    let s = Server::start(ALLOW_ALL);
    scripts(&s);
    block(T, async {
        let mut c = s.client().await;
        let h = start(
            &mut c,
            "s",
            json!({"command": "bash echoer.sh", "background": true}),
        )
        .await;
        let r = row(&mut c, &h).await;
        assert_eq!(
            (&r["tty"], &r["stdin_open"], &r["ready"], &r["listening"]),
            (&json!(false), &json!(true), &Value::Null, &json!([])),
            "{r}"
        );
        let w = call_on(
            &mut c,
            "w1",
            "write_input",
            json!({"process": h, "data": "a\nb\n"}),
        )
        .await;
        assert_eq!(
            (w.status, &w.meta["written"]),
            (Status::Ok, &json!(4)),
            "{w:?}"
        );
        let got = read_until(&mut c, &h, "echo:b").await;
        assert_eq!(got, "echo:a\necho:b\n");
        let w = call_on(
            &mut c,
            "w2",
            "write_input",
            json!({"process": h, "data": "c\n", "close": true}),
        )
        .await;
        assert_eq!(w.status, Status::Ok, "{w:?}");
        assert_eq!(w.meta["stdin_open"], json!(false), "{w:?}");
        let got = read_until(&mut c, &h, "eof").await;
        assert_eq!(got, "echo:c\neof\n");
        let end = wait_end(&mut c, &h).await;
        assert_eq!(end.meta["exit_code"], json!(0), "{end:?}");
        // To a finished job: a clear InvalidParams.
        let w = call_on(
            &mut c,
            "w3",
            "write_input",
            json!({"process": h, "data": "x"}),
        )
        .await;
        assert_eq!(kind(&w), Some(ErrorType::InvalidParams), "{w:?}");
        assert!(message(&w).contains("has ended"), "{w:?}");

        // A closed input, with the job still running.
        let h = start(
            &mut c,
            "s2",
            json!({"command": "sleep 300", "background": true}),
        )
        .await;
        let w = call_on(
            &mut c,
            "w4",
            "write_input",
            json!({"process": h, "data": "", "close": true}),
        )
        .await;
        assert_eq!(
            w.status,
            Status::Ok,
            "empty data with close just closes: {w:?}"
        );
        let w = call_on(
            &mut c,
            "w5",
            "write_input",
            json!({"process": h, "data": "late"}),
        )
        .await;
        assert_eq!(kind(&w), Some(ErrorType::InvalidParams), "{w:?}");
        assert!(message(&w).contains("closed"), "{w:?}");
        // Started with stdin: written and closed, not writable.
        let h2 = start(
            &mut c,
            "s3",
            json!({"command": "cat; sleep 300", "background": true, "stdin": "given\n"}),
        )
        .await;
        assert_eq!(read_until(&mut c, &h2, "given").await, "given\n");
        let w = call_on(
            &mut c,
            "w6",
            "write_input",
            json!({"process": h2, "data": "more"}),
        )
        .await;
        assert_eq!(kind(&w), Some(ErrorType::InvalidParams), "{w:?}");
        // A process that closes its own input.
        let h3 = start(
            &mut c,
            "s4",
            json!({"command": "exec 0<&-; sleep 300", "background": true}),
        )
        .await;
        let end = Instant::now() + Duration::from_secs(20);
        loop {
            let w = call_on(
                &mut c,
                "w7",
                "write_input",
                json!({"process": h3, "data": "x"}),
            )
            .await;
            if w.status != Status::Ok {
                assert_eq!(kind(&w), Some(ErrorType::InvalidParams), "{w:?}");
                assert!(message(&w).contains("no longer reads"), "{w:?}");
                break;
            }
            // The shell may not have closed it yet.
            assert!(
                Instant::now() < end,
                "writes to a closed input kept succeeding"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for (i, job) in [h, h2, h3].iter().enumerate() {
            let r = call_on(
                &mut c,
                &format!("k{i}"),
                "kill_process",
                json!({"process": job}),
            )
            .await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
    });
}

#[test]
fn a_terminal_job_takes_ctrl_c_signals_and_a_new_size() {
    let s = Server::start(ALLOW_ALL);
    scripts(&s);
    let marker = unique_marker("tty");
    block(T, async {
        let mut c = s.client().await;
        let h = start(&mut c, "s", json!({"command": "bash trapper.sh", "tty": true, "background": true, "env": {"E2E_MARK": marker}})).await;
        read_until(&mut c, &h, "armed").await;
        let r = row(&mut c, &h).await;
        assert_eq!(
            (&r["tty"], &r["stdin_open"]),
            (&json!(true), &json!(true)),
            "{r}"
        );
        // Ctrl-C typed into the terminal: SIGINT to its foreground process group.
        let w = call_on(
            &mut c,
            "ctrl-c",
            "write_input",
            json!({"process": h, "data": "\u{3}"}),
        )
        .await;
        assert_eq!(w.status, Status::Ok, "{w:?}");
        read_until(&mut c, &h, "caught-INT").await;
        // A signal by name.
        let k = call_on(
            &mut c,
            "usr1",
            "kill_process",
            json!({"process": h, "signal": "USR1"}),
        )
        .await;
        assert_eq!(k.status, Status::Ok, "{k:?}");
        assert_eq!(k.meta["running"], json!(true), "a signal only: {k:?}");
        read_until(&mut c, &h, "caught-USR1").await;
        // A new size: the program learns it (SIGWINCH).
        let w = call_on(
            &mut c,
            "size",
            "write_input",
            json!({"process": h, "data": "", "rows": 40, "cols": 100}),
        )
        .await;
        assert_eq!(w.status, Status::Ok, "{w:?}");
        read_until(&mut c, &h, "size 40 100").await;
        // The artifact keeps what the terminal wrote; content has the text.
        let w = call_on(
            &mut c,
            "p",
            "write_input",
            json!({"process": h, "data": "\u{3}"}),
        )
        .await;
        assert_eq!(w.status, Status::Ok, "{w:?}");
        let args = json!({"process": h, "since": 0, "until": "caught-INT"});
        let r = call_on(&mut c, "raw", "read_output", args).await;
        assert!(
            r.meta["raw"]
                .as_str()
                .is_some_and(|raw| raw.contains("\r\n")),
            "{r:?}"
        );
        assert!(!r.content.contains('\r'), "{r:?}");
        let log = s.ws().join(format!(".toolvisor/artifacts/job-{h}.log"));
        let bytes = std::fs::read(&log).expect("the job's log");
        assert!(
            bytes.windows(2).any(|w| w == b"\r\n"),
            "the artifact keeps the terminal's bytes"
        );
        // A bad signal name is refused; KILL ends it, nothing left behind.
        let k = call_on(
            &mut c,
            "bad",
            "kill_process",
            json!({"process": h, "signal": "STOP"}),
        )
        .await;
        assert_eq!(kind(&k), Some(ErrorType::InvalidParams), "{k:?}");
        let k = call_on(
            &mut c,
            "kill",
            "kill_process",
            json!({"process": h, "signal": "KILL"}),
        )
        .await;
        assert_eq!(k.status, Status::Ok, "{k:?}");
        let end = wait_end(&mut c, &h).await;
        assert_eq!(end.meta["signal"], json!(9), "{end:?}");
        if let Err(left) = wait_no_procs_with_env(&marker, Duration::from_secs(20)).await {
            panic!("the job's processes outlived it: {left:?}");
        }
        // INT by name to a job without a terminal: its process group gets it.
        let h = start(
            &mut c,
            "s2",
            json!({"command": "bash trapper.sh", "background": true}),
        )
        .await;
        read_until(&mut c, &h, "armed").await;
        let k = call_on(
            &mut c,
            "int",
            "kill_process",
            json!({"process": h, "signal": "INT"}),
        )
        .await;
        assert_eq!(k.status, Status::Ok, "{k:?}");
        read_until(&mut c, &h, "caught-INT").await;
        let k = call_on(&mut c, "term", "kill_process", json!({"process": h})).await;
        assert_eq!(
            (k.status, &k.meta["running"]),
            (Status::Ok, &json!(false)),
            "{k:?}"
        );
        // Resizing a job without a terminal makes no sense.
        let w = call_on(
            &mut c,
            "sz2",
            "write_input",
            json!({"process": h, "data": "", "rows": 5, "cols": 5}),
        )
        .await;
        assert_eq!(kind(&w), Some(ErrorType::InvalidParams), "{w:?}");
    });
}

#[test]
fn yield_ms_turns_a_slow_command_into_a_job_without_losing_a_byte() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\nyield_ms = 1500\n"));
    scripts(&s);
    block(T, async {
        let mut c = s.client().await;
        let expected: String = (1..=8).map(|i| format!("line {i}\n")).collect();
        // Streamed, then yielded: the frames come before the result.
        let mut req = CallRequest::new(
            "y",
            "run_command",
            json!({"command": "bash slow.sh 8 0.3", "yield_ms": 800}),
        );
        req.stream = Some(true);
        let t0 = Instant::now();
        let t = c.call(req, |_, _| {}).await.expect("call");
        let r = t.result.expect("result");
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(
            t0.elapsed() < Duration::from_secs(8),
            "it did not yield: {:?}",
            t0.elapsed()
        );
        assert_eq!(r.meta["running"], json!(true), "{r:?}");
        let h = r.meta["process"].as_str().expect("meta.process").to_owned();
        let streamed: String = t.outputs.iter().map(|o| o.1.as_str()).collect();
        assert_eq!(
            streamed, r.content,
            "what was streamed is what the result says"
        );
        assert!(expected.starts_with(&r.content), "{:?}", r.content);
        // What was returned counts as read: the next reads continue right after it.
        let mut got = r.content.clone();
        loop {
            let rr = call_on(
                &mut c,
                "r",
                "read_output",
                json!({"process": h, "wait_ms": 5000}),
            )
            .await;
            got.push_str(&rr.content);
            if rr.meta["running"] == json!(false) && rr.content.is_empty() {
                assert_eq!(rr.meta["exit_code"], json!(0), "{rr:?}");
                break;
            }
        }
        assert_eq!(got, expected);
        // The job is the calling session's (it may write to it and stop it).
        let k = call_on(&mut c, "k", "kill_process", json!({"process": h})).await;
        assert_eq!(k.status, Status::Ok, "{k:?}");

        // workers.exec.yield_ms applies when the call gives none; a job that yielded
        // keeps the call's deadline (timeout 4 s) as its own.
        let t0 = Instant::now();
        let r = call_on(
            &mut c,
            "d",
            "run_command",
            json!({"command": "echo started; sleep 60", "timeout": 4000}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
        assert_eq!(
            (r.content.as_str(), &r.meta["running"]),
            ("started\n", &json!(true)),
            "{r:?}"
        );
        let h = r.meta["process"].as_str().expect("meta.process").to_owned();
        let end = wait_end(&mut c, &h).await;
        assert!(
            end.meta["signal"].is_number() || end.meta["exit_code"] != json!(0),
            "{end:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        // A command that ends before its yield time is an ordinary result.
        let r = call_on(&mut c, "q", "run_command", json!({"command": "echo quick"})).await;
        assert_eq!(
            (r.content.as_str(), r.meta.get("process")),
            ("quick\n", None),
            "{r:?}"
        );
        // yield_ms on a background command is refused.
        let r = call_on(
            &mut c,
            "b",
            "run_command",
            json!({"command": "true", "background": true, "yield_ms": 5}),
        )
        .await;
        assert_eq!(kind(&r), Some(ErrorType::InvalidParams), "{r:?}");
    });
}

#[test]
fn ready_waits_for_a_line_or_a_port_in_the_commands_own_network() {
    let s = Server::start(ALLOW_ALL);
    scripts(&s);
    block(T, async {
        let mut c = s.client().await;
        let port = 18_000 + (std::process::id() % 1000) as u16;
        // A port: listening inside the command's network namespace (lo of its own).
        let t0 = Instant::now();
        let args = json!({"command": format!("python3 server.py {port} 0.5"), "background": true, "ready": {"port": port, "timeout_ms": 20000}});
        let r = call_on(&mut c, "p", "run_command", args).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            (&r.meta["ready"], &r.meta["running"]),
            (&json!(true), &json!(true)),
            "{r:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(20), "{:?}", t0.elapsed());
        let h = r.meta["process"].as_str().expect("process").to_owned();
        assert!(r.content.contains("starting"), "output so far: {r:?}");
        let row = row(&mut c, &h).await;
        assert_eq!(
            (&row["listening"], &row["ready"]),
            (&json!([port]), &json!(true)),
            "{row}"
        );
        // The output returned counts as read.
        let next = call_on(&mut c, "n", "read_output", json!({"process": h})).await;
        assert!(!next.content.contains("starting"), "{next:?}");
        let k = call_on(&mut c, "k", "kill_process", json!({"process": h})).await;
        assert_eq!(k.status, Status::Ok, "{k:?}");

        // A line: the same port again (the first server's namespace is gone with it).
        let args = json!({"command": format!("python3 server.py {port} 0.2"), "background": true, "ready": {"regex": "^serving on \\d+$"}});
        let r = call_on(&mut c, "r", "run_command", args).await;
        assert_eq!(r.meta["ready"], json!(true), "{r:?}");
        assert!(r.content.contains(&format!("serving on {port}")), "{r:?}");
        let h = r.meta["process"].as_str().expect("process").to_owned();
        let k = call_on(&mut c, "k2", "kill_process", json!({"process": h})).await;
        assert_eq!(k.status, Status::Ok, "{k:?}");

        // Never ready: ready false at the timeout, still running.
        let t0 = Instant::now();
        let args = json!({"command": "echo up-but-not-listening; sleep 300", "background": true, "ready": {"port": port, "timeout_ms": 800}});
        let r = call_on(&mut c, "t", "run_command", args).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            (&r.meta["ready"], &r.meta["running"]),
            (&json!(false), &json!(true)),
            "{r:?}"
        );
        assert!(
            t0.elapsed() >= Duration::from_millis(700) && t0.elapsed() < Duration::from_secs(15),
            "{:?}",
            t0.elapsed()
        );
        let h = r.meta["process"].as_str().expect("process").to_owned();
        let k = call_on(&mut c, "k3", "kill_process", json!({"process": h})).await;
        assert_eq!(k.status, Status::Ok, "{k:?}");

        // It exits first: ready false, not running, its exit code.
        let args = json!({"command": "echo giving up; exit 3", "background": true, "ready": {"regex": "never", "timeout_ms": 20000}});
        let t0 = Instant::now();
        let r = call_on(&mut c, "x", "run_command", args).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            (&r.meta["ready"], &r.meta["running"], &r.meta["exit_code"]),
            (&json!(false), &json!(false), &json!(3)),
            "{r:?}"
        );
        assert_eq!(r.content, "giving up\n");
        assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());

        // ready without background, or with a regex that does not compile: refused.
        for (id, args) in [
            ("f", json!({"command": "true", "ready": {"regex": "x"}})),
            (
                "g",
                json!({"command": "true", "background": true, "ready": {"regex": "(unclosed"}}),
            ),
            (
                "h",
                json!({"command": "true", "background": true, "ready": {}}),
            ),
        ] {
            let r = call_on(&mut c, id, "run_command", args).await;
            assert_eq!(kind(&r), Some(ErrorType::InvalidParams), "{r:?}");
        }
    });
}

#[test]
fn read_output_waits_for_output_and_for_a_matching_line() {
    // A short default timeout: a long poll must not be cut by it.
    let s = Server::start(&format!(
        "{ALLOW_ALL}\n[workers.exec]\ndefault_timeout_ms = 1500\n"
    ));
    block(T, async {
        let mut c = s.client().await;
        let cmd = "sleep 2.5; echo late; sleep 1; echo 'step two'; echo done; sleep 300";
        let h = start(&mut c, "s", json!({"command": cmd, "background": true})).await;
        // Nothing yet: without wait_ms it answers at once, empty.
        let r = call_on(&mut c, "now", "read_output", json!({"process": h})).await;
        assert_eq!((r.status, r.content.as_str()), (Status::Ok, ""), "{r:?}");
        // A long poll past the group's default timeout: it answers with the output.
        let t0 = Instant::now();
        let r = call_on(
            &mut c,
            "w",
            "read_output",
            json!({"process": h, "wait_ms": 20000}),
        )
        .await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "late\n"),
            "{r:?}"
        );
        assert!(t0.elapsed() < Duration::from_secs(15), "{:?}", t0.elapsed());
        // until: the page ends with the matching line (not past it).
        let r = call_on(
            &mut c,
            "u",
            "read_output",
            json!({"process": h, "until": "^step", "wait_ms": 20000}),
        )
        .await;
        assert_eq!(
            (r.content.as_str(), &r.meta["matched"]),
            ("step two\n", &json!(true)),
            "{r:?}"
        );
        let r = call_on(
            &mut c,
            "u2",
            "read_output",
            json!({"process": h, "until": "^done$"}),
        )
        .await;
        assert_eq!(
            (r.content.as_str(), &r.meta["matched"]),
            ("done\n", &json!(true)),
            "{r:?}"
        );
        // An explicit timeout_ms stands: the wait ends in time, ok and empty.
        let mut req = CallRequest::new(
            "short",
            "read_output",
            json!({"process": h, "wait_ms": 20000}),
        );
        req.timeout_ms = Some(1000);
        let t0 = Instant::now();
        let t = c.call(req, |_, _| {}).await.expect("call");
        let r = t.result.expect("result");
        assert_eq!((r.status, r.content.as_str()), (Status::Ok, ""), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        // until that never matches waits wait_ms, then says so.
        let r = call_on(
            &mut c,
            "nm",
            "read_output",
            json!({"process": h, "until": "never", "wait_ms": 300}),
        )
        .await;
        assert_eq!(
            (r.status, &r.meta["matched"]),
            (Status::Ok, &json!(false)),
            "{r:?}"
        );
        // A regex that does not compile.
        let r = call_on(
            &mut c,
            "bad",
            "read_output",
            json!({"process": h, "until": "[a-"}),
        )
        .await;
        assert_eq!(kind(&r), Some(ErrorType::InvalidParams), "{r:?}");
        let k = call_on(&mut c, "k", "kill_process", json!({"process": h})).await;
        assert_eq!(k.status, Status::Ok, "{k:?}");
        // A finished job: the wait ends at once.
        let t0 = Instant::now();
        let r = call_on(
            &mut c,
            "f",
            "read_output",
            json!({"process": h, "wait_ms": 20000}),
        )
        .await;
        assert_eq!(r.meta["running"], json!(false), "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    });
}

#[test]
fn only_the_session_that_started_a_job_writes_to_it_or_a_person_with_a_grant() {
    let s = Server::start(ALLOW_ALL);
    scripts(&s);
    block(T, async {
        let mut owner = s.client().await;
        let mut other = s.client().await;
        let h = start(
            &mut owner,
            "s",
            json!({"command": "bash echoer.sh", "background": true}),
        )
        .await;
        // Another session reads and lists it...
        let r = call_on(&mut other, "l", "list_processes", json!({})).await;
        assert!(r.content.contains(&h), "{r:?}");
        let r = call_on(
            &mut other,
            "r",
            "read_output",
            json!({"process": h, "since": 0}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        // ...but cannot type into it or signal it.
        let w = call_on(
            &mut other,
            "w",
            "write_input",
            json!({"process": h, "data": "rm -rf ~\n"}),
        )
        .await;
        assert_eq!(kind(&w), Some(ErrorType::InvalidParams), "{w:?}");
        assert!(message(&w).contains("another session"), "{w:?}");
        let k = call_on(
            &mut other,
            "k",
            "kill_process",
            json!({"process": h, "signal": "KILL"}),
        )
        .await;
        assert_eq!(kind(&k), Some(ErrorType::InvalidParams), "{k:?}");
        assert_eq!(row(&mut owner, &h).await["state"], json!("running"));
        // A person's grant lets another session take over (what `toolvisor attach` does).
        let grant = ClientMessage::Grant {
            id: "g".into(),
            tools: vec!["write_input".into()],
            trace_id: None,
            paths: None,
            ttl_ms: 60_000,
            reusable: Some(true),
        };
        let mut person = s.client().await;
        let token = match person.request(&grant, &"g".into()).await.expect("grant") {
            ServerMessage::Token { token, .. } => token,
            other => panic!("{other:?}"),
        };
        let mut req = CallRequest::new("wt", "write_input", json!({"process": h, "data": "hi\n"}));
        req.confirm_token = Some(token.clone());
        let t = other.call(req, |_, _| {}).await.expect("call");
        assert_eq!(
            t.result.as_ref().map(|r| r.status),
            Some(Status::Ok),
            "{t:?}"
        );
        assert_eq!(read_until(&mut owner, &h, "echo:hi").await, "echo:hi\n");
        // The grant is for write_input only.
        let mut req = CallRequest::new("kt", "kill_process", json!({"process": h}));
        req.confirm_token = Some(token);
        let t = other.call(req, |_, _| {}).await.expect("call");
        let r = t.result.expect("result");
        assert_eq!(kind(&r), Some(ErrorType::InvalidParams), "{r:?}");
        let k = call_on(&mut owner, "k2", "kill_process", json!({"process": h})).await;
        assert_eq!(k.status, Status::Ok, "{k:?}");
    });
}

#[test]
fn bad_input_gets_clear_invalid_params() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mut c = s.client().await;
        let h = start(
            &mut c,
            "s",
            json!({"command": "sleep 300", "background": true}),
        )
        .await;
        let over = "x".repeat((1 << 20) + 1);
        let cases = [
            ("write_input", json!({"process": h, "data": over})),
            ("write_input", json!({"process": "w0-999", "data": "x"})),
            ("write_input", json!({"process": h, "data": "x", "rows": 5})),
            ("kill_process", json!({"process": h, "signal": "SEGV"})),
            ("kill_process", json!({"process": h, "signal": 9})),
            ("read_output", json!({"process": h, "until": "(("})),
            ("read_output", json!({"process": h, "wait_ms": 60001})),
            (
                "run_command",
                json!({"command": "true", "ready": {"port": 80}}),
            ),
            (
                "run_command",
                json!({"command": "true", "background": true, "ready": {"port": 70000}}),
            ),
        ];
        for (i, (tool, args)) in cases.into_iter().enumerate() {
            let r = call_on(&mut c, &format!("b{i}"), tool, args.clone()).await;
            assert_eq!(
                kind(&r),
                Some(ErrorType::InvalidParams),
                "{tool} {args}: {r:?}"
            );
            assert!(!message(&r).is_empty());
        }
        assert_eq!(
            row(&mut c, &h).await["state"],
            json!("running"),
            "nothing touched the job"
        );
        let k = call_on(&mut c, "k", "kill_process", json!({"process": h})).await;
        assert_eq!(k.status, Status::Ok, "{k:?}");
    });
}

#[test]
fn a_flooding_terminal_and_a_job_that_never_reads_keep_the_worker_bounded() {
    let config = format!(
        "{ALLOW_ALL}\n[workers.exec]\ncount = 1\n[limits]\nartifacts_max_bytes = 8388608\n"
    );
    let s = Server::start(&config);
    let marker = unique_marker("flood");
    block(Duration::from_secs(120), async {
        let mut c = s.client().await;
        let worker = s.worker_pids("exec").await[0];
        let rss0 = rss_bytes(worker).unwrap_or(0);
        let env = json!({"E2E_MARK": marker});
        let flood = start(&mut c, "f", json!({"command": "yes 0123456789abcdefghijklmnopqrstuvwxyz", "tty": true, "background": true, "env": env})).await;
        let deaf = start(
            &mut c,
            "d",
            json!({"command": "sleep 300", "background": true, "env": env}),
        )
        .await;
        // While the terminal floods, the worker answers quickly.
        for i in 0..10 {
            let t0 = Instant::now();
            let r = call_on(&mut c, &format!("l{i}"), "list_processes", json!({})).await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
            let r = call_on(
                &mut c,
                &format!("r{i}"),
                "read_output",
                json!({"process": flood}),
            )
            .await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
            assert!(
                r.content.len() <= 10240,
                "a page is bounded: {}",
                r.content.len()
            );
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "slow answer: {:?}",
                t0.elapsed()
            );
        }
        // A write to a process that never reads gives up, says so, and holds nothing.
        let mut other = s.client().await;
        let big = "y".repeat(1 << 20);
        let mut req = CallRequest::new("big", "write_input", json!({"process": deaf, "data": big}));
        req.stream = None;
        c.send(&ClientMessage::Call(req)).await.expect("send");
        // Meanwhile another session is served at once.
        let t0 = Instant::now();
        let r = call_on(&mut other, "o", "list_processes", json!({})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        let r = result_of(&mut c, "big").await;
        assert_eq!(kind(&r), Some(ErrorType::Timeout), "{r:?}");
        assert!(message(&r).contains("took no input"), "{r:?}");
        for i in 0..3 {
            let r = call_on(
                &mut c,
                &format!("again{i}"),
                "write_input",
                json!({"process": deaf, "data": "z".repeat(1 << 20)}),
            )
            .await;
            assert_eq!(kind(&r), Some(ErrorType::Timeout), "{r:?}");
        }
        let rss1 = rss_bytes(worker).unwrap_or(0);
        assert!(
            rss1 < rss0 + (64 << 20),
            "the worker grew from {rss0} to {rss1} bytes"
        );
        let flooded = row(&mut c, &flood).await["output_bytes"]
            .as_u64()
            .unwrap_or(0);
        assert!(flooded > 1 << 20, "it flooded only {flooded} bytes");
        let log = std::fs::metadata(s.ws().join(format!(".toolvisor/artifacts/job-{flood}.log")))
            .map(|m| m.len())
            .unwrap_or(0);
        assert!(log <= 8 << 20, "the log is capped: {log}");
        for (i, h) in [flood, deaf].iter().enumerate() {
            let k = call_on(
                &mut c,
                &format!("k{i}"),
                "kill_process",
                json!({"process": h}),
            )
            .await;
            assert_eq!(k.status, Status::Ok, "{k:?}");
        }
        if let Err(left) = wait_no_procs_with_env(&marker, Duration::from_secs(20)).await {
            panic!("left behind: {left:?}");
        }
    });
}

/// `read_output` with any mix of `wait_ms` and `until`, against a job that prints in
/// bursts (in a terminal or not): the pages, each read where the last stopped, are the
/// job's output — no byte lost, none repeated.
#[test]
fn read_output_pages_never_lose_or_repeat_a_byte() {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};
    let s = Server::start(ALLOW_ALL);
    let chunk = ("[a-z0-9é€ ]{0,40}(\n|)", 0u64..40);
    let read = (proptest::option::of(0u64..300), any::<bool>());
    let strategy = (
        proptest::collection::vec(chunk, 1..12),
        proptest::collection::vec(read, 1..6),
        any::<bool>(),
    );
    let mut runner = TestRunner::new(Config {
        cases: 6,
        failure_persistence: None,
        ..Config::default()
    });
    let cases = std::sync::atomic::AtomicUsize::new(0);
    runner
        .run(&strategy, |(chunks, reads, tty)| {
            let case = cases.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let mut payload = String::new();
            let mut cmd = String::new();
            for (i, (text, delay)) in chunks.iter().enumerate() {
                let name = format!("p{case}-{i:03}");
                s.write(&name, text);
                payload.push_str(text);
                cmd.push_str(&format!("cat {name}; sleep 0.0{delay:02}; "));
            }
            let (got, h) = block(T, async {
                let mut c = s.client().await;
                let h = start(
                    &mut c,
                    "s",
                    json!({"command": cmd, "tty": tty, "background": true}),
                )
                .await;
                let mut got = String::new();
                let mut specs = reads.iter().cycle();
                loop {
                    let (wait, until) = specs.next().copied().unwrap_or((None, false));
                    let mut args = json!({"process": h});
                    if let Some(w) = wait {
                        args["wait_ms"] = json!(w);
                    }
                    if until {
                        args["until"] = json!("^[a-d]");
                    }
                    let r = call_on(&mut c, "r", "read_output", args).await;
                    assert_eq!(r.status, Status::Ok, "{r:?}");
                    let page = r
                        .meta
                        .get("raw")
                        .and_then(Value::as_str)
                        .unwrap_or(&r.content);
                    got.push_str(page);
                    if r.meta["running"] == json!(false) && page.is_empty() {
                        return (got, h);
                    }
                }
            });
            let want = if tty {
                let log = s
                    .ws()
                    .join(".toolvisor/artifacts")
                    .join(format!("job-{h}.log"));
                std::fs::read_to_string(log).unwrap_or_default()
            } else {
                payload
            };
            prop_assert_eq!(got, want);
            Ok(())
        })
        .unwrap();
}

/// A person's terminal, for the CLI under test: a pseudo-terminal the test opens, the
/// CLI's controlling terminal on its standard streams; what the CLI writes arrives on
/// a channel.
struct PersonTerminal {
    master: std::os::fd::OwnedFd,
    slave: std::os::fd::OwnedFd,
    screen: std::sync::mpsc::Receiver<Vec<u8>>,
    seen: String,
}

impl PersonTerminal {
    fn open(rows: u16, cols: u16) -> PersonTerminal {
        let size = nix::pty::Winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        let pty = nix::pty::openpty(&size, None).expect("openpty");
        let reader = pty.master.try_clone().expect("dup");
        let (tx, screen) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once no process holds the terminal any more.
            while let Ok(n @ 1..) = nix::unistd::read(&reader, &mut buf) {
                if tx.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
        });
        PersonTerminal {
            master: pty.master,
            slave: pty.slave,
            screen,
            seen: String::new(),
        }
    }

    /// `toolvisor ARGS…` with this terminal as its controlling terminal.
    fn spawn(&self, s: &Server, args: &[&str]) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let fd = |f: &std::os::fd::OwnedFd| std::process::Stdio::from(f.try_clone().expect("dup"));
        let mut cmd = std::process::Command::new(BIN);
        cmd.arg("--socket")
            .arg(s.socket())
            .args(args)
            .stdin(fd(&self.slave))
            .stdout(fd(&self.slave))
            .stderr(fd(&self.slave));
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        cmd.spawn().expect("spawn the CLI")
    }

    fn type_keys(&self, keys: &[u8]) {
        assert_eq!(
            nix::unistd::write(&self.master, keys).expect("type"),
            keys.len()
        );
    }

    /// Wait until the screen shows `needle` after what was awaited before.
    fn wait_for(&mut self, needle: &str) {
        let end = Instant::now() + Duration::from_secs(30);
        while !self.seen.contains(needle) {
            let left = end.saturating_duration_since(Instant::now());
            match self.screen.recv_timeout(left) {
                Ok(b) => self.seen.push_str(&String::from_utf8_lossy(&b)),
                Err(_) => panic!("{needle:?} never showed; the screen: {:?}", self.seen),
            }
        }
        let at = self.seen.find(needle).unwrap_or(0) + needle.len();
        self.seen.drain(..at);
    }

    fn mode(&self) -> nix::sys::termios::LocalFlags {
        nix::sys::termios::tcgetattr(&self.slave)
            .expect("tcgetattr")
            .local_flags
    }

    fn resize(&self, rows: u16, cols: u16) {
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        use std::os::fd::AsRawFd;
        // SAFETY: a valid descriptor and winsize; the kernel tells the foreground
        // process group of the terminal (the CLI) with SIGWINCH.
        assert_eq!(
            unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) },
            0
        );
    }
}

/// Wait (bounded) for the CLI to exit; its exit code.
fn exit_code(child: &mut std::process::Child) -> Option<i32> {
    wait_child(child, Duration::from_secs(30)).and_then(|s| s.code())
}

#[test]
fn a_person_attaches_types_presses_ctrl_c_resizes_and_detaches() {
    use nix::sys::termios::LocalFlags;
    let s = Server::start(ALLOW_ALL);
    s.write(
        "attached.sh",
        "trap 'echo caught-INT' INT\necho \"ready $(stty size)\"\n\
         while :; do IFS= read -r l || continue; [ \"$l\" = quit ] && exit 5\n         [ \"$l\" = size ] && echo \"rows-cols $(stty size)\"; echo \"echo:$l\"; done\n",
    );
    let mut t = PersonTerminal::open(30, 90);
    let cooked = t.mode();
    assert!(cooked.contains(LocalFlags::ICANON | LocalFlags::ECHO));
    let mut cli = t.spawn(
        &s,
        &[
            "call",
            "run_command",
            r#"{"command":"bash attached.sh"}"#,
            "--interactive",
        ],
    );
    t.wait_for("attached to w");
    // The process's terminal has the person's size.
    t.wait_for("ready 30 90");
    assert!(
        !t.mode()
            .intersects(LocalFlags::ICANON | LocalFlags::ECHO | LocalFlags::ISIG),
        "raw while attached"
    );
    t.type_keys(b"hello\r");
    t.wait_for("echo:hello");
    // Ctrl-C goes through to the process.
    t.type_keys(b"\x03");
    t.wait_for("caught-INT");
    // A resize of the person's window reaches the process (asked until it has: the
    // CLI learns of it by a signal, which may come after keys typed meanwhile).
    t.resize(40, 120);
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        t.type_keys(b"size\r");
        t.wait_for("rows-cols ");
        if t.seen.starts_with("40 120") {
            break;
        }
        assert!(Instant::now() < end, "the size never changed: {:?}", t.seen);
    }
    // Ctrl-] detaches: the CLI ends, the terminal is as it was, the process runs on.
    t.type_keys(b"\x1d");
    t.wait_for("detached from");
    assert_eq!(exit_code(&mut cli), Some(0));
    assert_eq!(t.mode(), cooked, "the terminal's settings are restored");
    let handle = block(T, async {
        let mut c = s.client().await;
        let r = call_on(&mut c, "l", "list_processes", json!({})).await;
        let row = r.meta["processes"][0].clone();
        assert_eq!(
            (&row["state"], &row["tty"]),
            (&json!("running"), &json!(true)),
            "{r:?}"
        );
        row["process"].as_str().expect("process").to_owned()
    });
    // Someone takes it over again (another session than the one that started it);
    // the process's end ends the attach, with its exit code.
    let mut again = t.spawn(&s, &["attach", &handle]);
    t.wait_for("echo:hello");
    t.type_keys(b"again\r");
    t.wait_for("echo:again");
    // SIGTERM to the CLI: it lets go, and the terminal is restored.
    let pid = nix::unistd::Pid::from_raw(again.id() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).expect("kill");
    t.wait_for("detached from");
    assert_eq!(exit_code(&mut again), Some(0));
    assert_eq!(t.mode(), cooked, "restored after SIGTERM");
    let mut again = t.spawn(&s, &["attach", &handle]);
    t.wait_for("echo:again");
    t.type_keys(b"quit\r");
    t.wait_for("exited with code 5");
    assert_eq!(exit_code(&mut again), Some(5));
    assert_eq!(t.mode(), cooked);
    // Without a terminal, --interactive is refused.
    let out = toolvisor(
        s.ws(),
        &[
            "call",
            "run_command",
            r#"{"command":"true"}"#,
            "--interactive",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// With the host's network, `ready.port` and `listening` count only the job's own
/// sockets: a port someone else listens on is not the job being up.
#[test]
fn with_the_hosts_network_only_the_jobs_own_sockets_count() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\nnetwork = true\n"));
    scripts(&s);
    let theirs = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let their_port = theirs.local_addr().expect("addr").port();
    let mine = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let my_port = mine.local_addr().expect("addr").port();
    drop(mine);
    block(T, async {
        let mut c = s.client().await;
        let args = json!({"command": "sleep 300", "background": true, "ready": {"port": their_port, "timeout_ms": 1000}});
        let r = call_on(&mut c, "t", "run_command", args).await;
        assert_eq!(r.meta["ready"], json!(false), "someone else's port: {r:?}");
        let h = r.meta["process"].as_str().expect("process").to_owned();
        let k = call_on(&mut c, "k", "kill_process", json!({"process": h})).await;
        assert_eq!(k.status, Status::Ok, "{k:?}");
        let args = json!({"command": format!("python3 server.py {my_port} 0"), "background": true, "ready": {"port": my_port, "timeout_ms": 20000}});
        let r = call_on(&mut c, "m", "run_command", args).await;
        assert_eq!(r.meta["ready"], json!(true), "{r:?}");
        let h = r.meta["process"].as_str().expect("process").to_owned();
        assert_eq!(row(&mut c, &h).await["listening"], json!([my_port]));
        let k = call_on(&mut c, "k2", "kill_process", json!({"process": h})).await;
        assert_eq!(k.status, Status::Ok, "{k:?}");
    });
    drop(theirs);
}

/// The error for another session's process says a person's grant lifts it; a
/// single-use grant does both things at once — passes the question `kill_process`
/// asks and vouches for the takeover — instead of being spent on the first.
#[test]
fn a_single_use_grant_both_passes_the_question_and_takes_over_the_process() {
    let s = Server::start("[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\n");
    block(T, async {
        let mut owner = s.client().await;
        let mut other = s.client().await;
        let h = start(
            &mut owner,
            "s",
            json!({"command": "sleep 300", "background": true}),
        )
        .await;
        let grant = ClientMessage::Grant {
            id: "g".into(),
            tools: vec!["kill_process".into()],
            trace_id: None,
            paths: None,
            ttl_ms: 60_000,
            reusable: Some(false),
        };
        let mut person = s.client().await;
        let token = match person.request(&grant, &"g".into()).await.expect("grant") {
            ServerMessage::Token { token, .. } => token,
            other => panic!("{other:?}"),
        };
        let mut req = CallRequest::new("k", "kill_process", json!({"process": h}));
        req.confirm_token = Some(token);
        let r = other
            .call(req, |_, _| {})
            .await
            .expect("call")
            .result
            .expect("result");
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let reason = r.meta["policy"]["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("passed by a grant token"),
            "it asked: {r:?}"
        );
        assert_ne!(row(&mut owner, &h).await["state"], json!("running"));
    });
}
