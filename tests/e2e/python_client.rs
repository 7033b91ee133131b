//! `scripts/example_client.py`, a client written from docs/PROTOCOL.md alone with its own
//! MessagePack codec, against the real server: the protocol as another language sees it.
//! Skipped (with a note) where `python3` is not on PATH.

use std::ffi::OsStr;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::harness::*;

/// How long one run of the Python client may take, start-up included.
const CLIENT_DEADLINE: Duration = Duration::from_secs(60);

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/example_client.py")
}

fn have_python() -> bool {
    let ok = Command::new("python3")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("python_client: python3 is not on PATH; skipping");
    }
    ok
}

/// Run the client to its exit, by the exit itself, with a deadline (then SIGKILL).
fn run_client<I, S>(args: I) -> Output
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let child = Command::new("python3")
        .arg(script())
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env_remove("TOOLVISOR_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn python3");
    let pid = child.id();
    let (tx, rx) = mpsc::channel();
    let waiter = std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(CLIENT_DEADLINE) {
        Ok(out) => {
            let _ = waiter.join();
            out.expect("wait for python3")
        }
        Err(_) => {
            // Not reaped yet (the waiter is still in wait), so the pid is still ours.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
            let _ = waiter.join();
            panic!("the Python client did not finish within {CLIENT_DEADLINE:?}");
        }
    }
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn workspace(s: &Server) {
    s.write("README.md", "# demo\nhello from the readme\n");
    s.write("src/main.rs", "fn main() {\n    println!(\"hello\");\n}\n");
    s.write("notes/todo.txt", "- try the python client\n");
}

#[test]
fn selftest_passes_against_a_real_server() {
    if !have_python() {
        return;
    }
    let s = Server::start("");
    workspace(&s);
    let out = run_client([
        OsStr::new("--socket"),
        s.socket().as_os_str(),
        OsStr::new("selftest"),
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    for tool in ["read_file", "read_many_files", "ls", "glob", "grep"] {
        assert!(
            stdout
                .lines()
                .any(|l| l.starts_with("ok") && l.split_whitespace().nth(1) == Some(tool)),
            "no ok line for {tool}\n{}",
            describe(&out)
        );
    }
}

#[test]
fn call_finds_the_socket_from_the_workspace_and_prints_json() {
    if !have_python() {
        return;
    }
    let s = Server::start("");
    workspace(&s);
    let out = run_client([
        OsStr::new("--workspace"),
        s.ws().as_os_str(),
        OsStr::new("call"),
        OsStr::new("read_file"),
        OsStr::new(r#"{"path":"README.md"}"#),
    ]);
    assert!(out.status.success(), "{}", describe(&out));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON result");
    assert_eq!(result["type"], "result", "{result}");
    assert_eq!(result["id"], "call-1", "{result}");
    assert_eq!(result["status"], "ok", "{result}");
    assert_eq!(result["content"], "# demo\nhello from the readme\n");

    // A failing call: status error, exit 1, the error type in the JSON.
    let out = run_client([
        OsStr::new("--socket"),
        s.socket().as_os_str(),
        OsStr::new("call"),
        OsStr::new("read_file"),
        OsStr::new(r#"{"path":"../outside"}"#),
    ]);
    assert_eq!(out.status.code(), Some(1), "{}", describe(&out));
    let result: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON result");
    assert_eq!(result["status"], "error", "{result}");
    assert_eq!(result["error"]["type"], "PathOutsideWorkspace", "{result}");
}
