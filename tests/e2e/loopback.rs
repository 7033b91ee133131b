//! One loopback per session: a port a session's background process listens on is
//! reachable from that session's later commands, and not from another session's
//! commands nor from the host (unless the call `expose`s it).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::time::Duration;

use serde_json::json;
use toolvisor_protocol::Status;

use crate::harness::*;

/// A port free on the host now (the sessions' namespaces have nothing on it).
fn free_port() -> u16 {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    l.local_addr().unwrap().port()
}

/// Serve the workspace on `port` of the session's loopback, in the background, and
/// return once it listens.
fn serve_command(port: u16) -> serde_json::Value {
    json!({
        "command": format!("exec python3 -m http.server {port} --bind 127.0.0.1"),
        "background": true,
        "ready": { "port": port },
    })
}

/// A command that fetches `/page.txt` from `port` and prints it, or `refused`.
fn fetch_command(port: u16) -> serde_json::Value {
    let script = format!(
        "import urllib.request\n\
         try:\n    print(urllib.request.urlopen('http://127.0.0.1:{port}/page.txt', timeout=5).read().decode())\n\
         except OSError as e:\n    print('refused', e)\n"
    );
    json!({ "command": format!("python3 -c \"$SCRIPT\""), "env": { "SCRIPT": script } })
}

/// What the host gets from `127.0.0.1:port` (None: it cannot connect).
fn host_fetch(port: u16) -> Option<String> {
    let mut s =
        TcpStream::connect_timeout(&(Ipv4Addr::LOCALHOST, port).into(), Duration::from_secs(5))
            .ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(b"GET /page.txt HTTP/1.0\r\nHost: x\r\n\r\n")
        .ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

#[test]
fn a_sessions_later_command_reaches_its_background_server_and_no_one_else_does() {
    let s = Server::start(ALLOW_ALL);
    s.write("page.txt", "hello from the session");
    let port = free_port();
    block(T, async {
        if !s.guards().await.namespaces {
            eprintln!("this host refuses namespaces to commands: skipping");
            return;
        }
        let mut mine = s.client().await;
        let r = call_on(&mut mine, "serve", "run_command", serve_command(port)).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        // The same session's next command reaches it.
        let r = call_on(&mut mine, "fetch", "run_command", fetch_command(port)).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(
            r.content.contains("hello from the session"),
            "the session's own command could not reach its server: {}",
            r.content
        );
        // Another session's command does not.
        let mut other = s.client().await;
        let r = call_on(&mut other, "peek", "run_command", fetch_command(port)).await;
        assert!(
            r.content.contains("refused") && !r.content.contains("hello"),
            "another session reached the server: {r:?}"
        );
        // Nor does the host.
        assert_eq!(host_fetch(port), None, "the host reached the server");
        // The first session still does (its loopback outlives a call of another).
        let r = call_on(&mut mine, "again", "run_command", fetch_command(port)).await;
        assert!(r.content.contains("hello from the session"), "{r:?}");
    });
}

#[test]
fn a_foreground_command_that_yields_serves_the_sessions_later_commands() {
    let s = Server::start(ALLOW_ALL);
    s.write("page.txt", "hello from the session");
    let port = free_port();
    block(T, async {
        if !s.guards().await.namespaces {
            return;
        }
        let mut c = s.client().await;
        let serve = json!({
            "command": format!("exec python3 -m http.server {port} --bind 127.0.0.1"),
            "yield_ms": 1000,
        });
        let r = call_on(&mut c, "serve", "run_command", serve).await;
        assert_eq!(r.meta["running"], json!(true), "it did not yield: {r:?}");
        // It was up well before it yielded; retry a little anyway (a slow host).
        let mut got = String::new();
        for _ in 0..20 {
            let r = call_on(&mut c, "fetch", "run_command", fetch_command(port)).await;
            got = r.content;
            if got.contains("hello from the session") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert!(got.contains("hello from the session"), "{got}");
    });
}

#[test]
fn a_command_with_the_host_network_keeps_it_in_a_session_with_a_loopback() {
    let config = r#"
[[policy.rules]]
tool = "run_command"
action = "allow"
network = true
conditions = [{ param = "cwd", operator = "equals", value = "net" }]

[[policy.rules]]
tool = "*"
action = "allow"
"#;
    let s = Server::start(config);
    std::fs::create_dir(s.ws().join("net")).unwrap();
    // A listener on the host: only a command with the host's network reaches it.
    let host = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = host.local_addr().unwrap().port();
    let probe = format!(
        "python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {port}), 5); print(\"connected\")' || echo refused"
    );
    block(T, async {
        if !s.guards().await.namespaces {
            return;
        }
        let mut c = s.client().await;
        // The session gets its loopback with its first background process.
        let bg = json!({ "command": "sleep 30", "background": true });
        let r = call_on(&mut c, "bg", "run_command", bg).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let r = call_on(&mut c, "lo", "run_command", json!({ "command": probe })).await;
        assert!(r.content.contains("refused"), "{r:?}");
        let granted = json!({ "command": probe, "cwd": "net" });
        let r = call_on(&mut c, "host", "run_command", granted).await;
        assert!(r.content.contains("connected"), "{r:?}");
    });
    drop(host);
}

#[test]
fn expose_under_a_granting_rule_publishes_the_port_on_the_host_until_the_process_ends() {
    let config = r#"
[[policy.rules]]
tool = "run_command"
action = "allow"
expose = true

[[policy.rules]]
tool = "*"
action = "allow"
"#;
    let s = Server::start(config);
    s.write("page.txt", "hello from the session");
    let port = free_port();
    block(T, async {
        if !s.guards().await.namespaces {
            return;
        }
        let mut c = s.client().await;
        let mut args = serve_command(port);
        args["expose"] = json!([port]);
        let r = call_on(&mut c, "serve", "run_command", args).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            r.meta["exposed"],
            json!([format!("127.0.0.1:{port}")]),
            "{r:?}"
        );
        let process = r.meta["process"].as_str().unwrap().to_owned();
        let page = tokio::task::spawn_blocking(move || host_fetch(port))
            .await
            .unwrap();
        assert!(
            page.as_deref()
                .is_some_and(|p| p.contains("hello from the session")),
            "the host did not get the page: {page:?}"
        );
        // The session's own commands still reach it on their loopback.
        let r = call_on(&mut c, "fetch", "run_command", fetch_command(port)).await;
        assert!(r.content.contains("hello from the session"), "{r:?}");
        // Once the process ends, the port is no longer published.
        let r = call_on(
            &mut c,
            "kill",
            "kill_process",
            json!({ "process": process }),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let end = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let gone = tokio::task::spawn_blocking(move || host_fetch(port).is_none())
                .await
                .unwrap();
            if gone {
                break;
            }
            assert!(
                std::time::Instant::now() < end,
                "still published after the end"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

#[test]
fn expose_without_a_rule_granting_it_needs_confirmation() {
    let s = Server::start(ALLOW_ALL);
    let port = free_port();
    block(T, async {
        let mut c = s.client().await;
        let mut args = serve_command(port);
        args["expose"] = json!([port]);
        let r = call_on(&mut c, "serve", "run_command", args).await;
        assert_eq!(
            r.error.as_ref().map(|e| e.kind),
            Some(toolvisor_protocol::ErrorType::ConfirmationRequired),
            "{r:?}"
        );
        assert!(r.content.contains("expose"), "{r:?}");
    });
    // Nothing was started, nothing published.
    assert_eq!(host_fetch(port), None);
}

#[test]
fn a_session_loopback_that_cannot_be_set_up_fails_the_call_and_runs_nothing() {
    let s = Server::start_with_env(ALLOW_ALL, &[("TOOLVISOR_SANDBOX_TEST_FAIL", "holder")]);
    block(T, async {
        if !s.guards().await.namespaces {
            return;
        }
        let mut c = s.client().await;
        let bg = json!({ "command": "touch ran-bg", "background": true });
        let r = call_on(&mut c, "bg", "run_command", bg).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        let msg = &r.error.as_ref().unwrap().message;
        assert!(
            msg.contains("loopback could not be set up")
                && msg.contains("did not run")
                && msg.contains("refused"),
            "{msg}"
        );
        // A session with nothing to share still runs its commands (their own lo).
        let r = call_on(
            &mut c,
            "fg",
            "run_command",
            json!({ "command": "touch ran" }),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
    assert!(!s.ws().join("ran-bg").exists(), "the command ran");
    assert!(s.ws().join("ran").exists());
}
