//! Network by domain, end to end: a command whose network is a domain list reaches a
//! listed host through its egress proxy and nothing else — an unlisted host or a raw
//! address is refused (`meta.network_denied`), a direct connection has no route, an
//! interactive session is asked at connect time — and every connection is an audit
//! record. The "remote" host is a server of the test on the host's 127.0.0.1, named
//! `localhost` (listed as it is, so the proxy may reach it; the command's own
//! `localhost` is its private loopback, so it goes through the proxy with
//! `--noproxy ''`).

use std::io::{Read, Write};
use std::net::TcpListener;

use serde_json::{Value, json};
use toolvisor_protocol::message::{ClientMessage, ServerMessage};
use toolvisor_protocol::{CallRequest, ErrorType, Status};

use crate::harness::*;

/// A server on the host's loopback that answers every request `200 remote-ok`.
fn remote() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf);
                let _ = c.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\nConnection: close\r\n\r\nremote-ok",
                );
            });
        }
    });
    port
}

fn curl(port: u16, host: &str) -> String {
    format!("curl -sS --max-time 20 --noproxy '' http://{host}:{port}/x")
}

fn connections(ws: &std::path::Path) -> Vec<Value> {
    audit_log(ws)
        .into_iter()
        .filter(|r| r["kind"] == "connection")
        .collect()
}

#[test]
fn a_listed_host_connects_and_nothing_else_does() {
    let port = remote();
    let s = Server::start("[network]\nallow = [\"localhost\"]\n");
    let r = block(
        T,
        s.call("run_command", json!({"command": curl(port, "localhost")})),
    );
    assert_eq!(r.status, Status::Ok, "{}", r.content);
    assert_eq!(r.content.trim(), "remote-ok");
    assert_eq!(r.meta["policy"]["decision"], "confined", "{}", r.meta);
    // A raw address through the proxy: refused, and said so.
    let r = block(
        T,
        s.call("run_command", json!({"command": curl(port, "127.0.0.1")})),
    );
    assert_eq!(
        r.meta["network_denied"],
        json!([format!("127.0.0.1:{port}")]),
        "{r:?}"
    );
    assert!(r.content.contains("NetworkDenied"), "{}", r.content);
    // Around the proxy: no route out of the command's own namespace.
    let direct = format!("curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{port}/x");
    let r = block(T, s.call("run_command", json!({"command": direct})));
    assert_ne!(r.meta["exit_code"], json!(0), "{}", r.content);
    assert!(!r.content.contains("remote-ok"), "{}", r.content);
    assert!(
        r.content.contains("only way out is its egress proxy"),
        "{}",
        r.content
    );
    // Every connection through the proxy is a record, with its bytes.
    let ws = s.ws().to_path_buf();
    let recs = eventually(T, "two connection records", || {
        let c = connections(&ws);
        (c.len() >= 2).then_some(c)
    });
    let allowed = recs
        .iter()
        .find(|r| r["decision"] == "allowed")
        .expect("allowed");
    assert_eq!(allowed["host"], "localhost");
    assert_eq!(allowed["port"], json!(port));
    assert!(allowed["received"].as_u64().unwrap() > 9, "{allowed}");
    assert!(
        allowed["call_id"].as_str().unwrap().ends_with(":c1"),
        "{allowed}"
    );
    let denied = recs
        .iter()
        .find(|r| r["decision"] == "denied")
        .expect("denied");
    assert_eq!(denied["host"], "127.0.0.1");
}

#[test]
fn a_domain_list_the_config_does_not_grant_asks_and_a_rule_can_grant_it() {
    let port = remote();
    let s = Server::start(
        r#"
[[policy.rules]]
tool = "run_command"
action = "allow"
network = ["localhost"]
conditions = [{ param = "command", operator = "startsWith", value = "curl " }]
"#,
    );
    // Not a curl: no rule grants the list, and nobody can be asked.
    let wc = format!("{} | wc -c", curl(port, "localhost"));
    let r = block(
        T,
        s.call(
            "run_command",
            json!({"command": wc, "network": ["localhost"]}),
        ),
    );
    assert_eq!(r.status, Status::Denied, "{}", r.content);
    let e = r.error.expect("error");
    assert_eq!(e.kind, ErrorType::ConfirmationRequired);
    assert!(e.message.contains("network"), "{}", e.message);
    // The rule's own list, asked for or not.
    for args in [
        json!({"command": curl(port, "localhost"), "network": ["localhost"]}),
        json!({"command": curl(port, "localhost")}),
    ] {
        let r = block(T, s.call("run_command", args));
        assert_eq!(r.content.trim(), "remote-ok", "{r:?}");
    }
    // More than the rule grants asks.
    let args = json!({"command": curl(port, "localhost"), "network": ["localhost", "a.example"]});
    let r = block(T, s.call("run_command", args));
    assert_eq!(r.status, Status::Denied, "{}", r.content);
    // Bad lists are refused before anything runs.
    for bad in [json!(["1.2.3.4"]), json!(["a b"]), json!([])] {
        let r = block(
            T,
            s.call("run_command", json!({"command": "true", "network": bad})),
        );
        assert_eq!(r.error.map(|e| e.kind), Some(ErrorType::InvalidParams));
    }
}

#[test]
fn an_interactive_session_is_asked_at_connect_time() {
    let port = remote();
    // The test hook that lets a test's own server on 127.0.0.1 stand for a public host
    // (a host approved at connect time never reaches a private address otherwise).
    let exempt = format!("127.0.0.1:{port}");
    let s = Server::start_with_env(
        "[network]\nallow = [\"nothing.example\"]\n",
        &[("TOOLVISOR_WEB_TEST_ALLOW", &exempt)],
    );
    block(T, async {
        let mut c = toolvisor_protocol::client::Client::connect(&s.socket(), "e2e", true)
            .await
            .expect("connect");
        let req = CallRequest::new(
            "net1",
            "run_command",
            json!({"command": curl(port, "localhost")}),
        );
        c.send(&ClientMessage::Call(req)).await.unwrap();
        let (ix, locations) = c
            .recv_matching(|m| match m {
                ServerMessage::ConfirmRequired {
                    interaction,
                    locations,
                    ..
                } => Some((interaction.clone(), locations.clone())),
                _ => None,
            })
            .await
            .unwrap()
            .0;
        assert_eq!(locations, vec![format!("localhost:{port}")]);
        c.send(&ClientMessage::Confirm {
            interaction: ix,
            approve: true,
            remember: None,
        })
        .await
        .unwrap();
        let r = next_result(&mut c).await;
        assert_eq!(r.content.trim(), "remote-ok", "{r:?}");
    });
    let ws = s.ws().to_path_buf();
    let rec = eventually(T, "an approved connection", || {
        connections(&ws)
            .into_iter()
            .find(|r| r["decision"] == "approved")
    });
    assert_eq!(rec["host"], "localhost");
}

/// `writable` and `reveal`: each asks unless a rule grants it, the granted one works,
/// and neither reaches toolvisor's own state whatever a rule says.
#[test]
fn writable_and_reveal_widen_only_what_was_granted() {
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    let home = ws.join("home");
    std::fs::create_dir_all(home.join(".ssh")).unwrap();
    std::fs::write(home.join(".ssh/id_ed25519"), "DECOY-SSH\n").unwrap();
    let outside = tempfile::tempdir_in(host_base()).unwrap();
    let out = outside.path().canonicalize().unwrap();
    let rules = format!(
        r#"
[[policy.rules]]
tool = "run_command"
action = "allow"
hazards = "allow"
writable = [{out:?}, "/"]
conditions = [{{ param = "command", operator = "startsWith", value = "bash w.sh" }}]

[[policy.rules]]
tool = "run_command"
action = "allow"
reveal = ["~/.ssh", "/"]
conditions = [{{ param = "command", operator = "startsWith", value = "cat " }}]
"#,
        out = out.display().to_string()
    );
    std::fs::write(ws.join("toolvisor.toml"), rules).unwrap();
    let s = Server::start_in_with_env(dir, &[("HOME", home.to_str().unwrap())]);
    if !block(T, async { s.guards().await.namespaces }) {
        eprintln!("widen: no command namespaces on this host; skipping");
        return;
    }
    let f = out.join("f");
    // The write is the script's: a redirection outside the workspace in the command
    // line itself is a hazard no rule vouches for.
    s.write(
        "w.sh",
        &format!("echo hi > {} && echo wrote\n", f.display()),
    );
    let write = "bash w.sh";
    // Not granted (no rule that allows these commands grants it): asks, refused here.
    for args in [
        json!({"command": format!("printf hi > {}", f.display()), "writable": [out]}),
        json!({"command": "head ~/.ssh/id_ed25519", "reveal": ["~/.ssh"]}),
    ] {
        let r = block(T, s.call("run_command", args));
        assert_eq!(
            r.error.map(|e| e.kind),
            Some(ErrorType::ConfirmationRequired)
        );
    }
    // Without the widening, the sandbox holds.
    let r = block(T, s.call("run_command", json!({"command": write})));
    assert!(!r.content.contains("wrote"), "{}", r.content);
    assert!(!f.exists());
    let r = block(
        T,
        s.call("run_command", json!({"command": "cat ~/.ssh/id_ed25519"})),
    );
    assert!(!r.content.contains("DECOY"), "{}", r.content);
    // Granted: exactly what was asked for.
    let r = block(
        T,
        s.call("run_command", json!({"command": write, "writable": [out]})),
    );
    assert!(r.content.contains("wrote"), "{}", r.content);
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "hi\n");
    let cat = "cat ~/.ssh/id_ed25519";
    let r = block(
        T,
        s.call("run_command", json!({"command": cat, "reveal": ["~/.ssh"]})),
    );
    assert_eq!(r.content.trim(), "DECOY-SSH", "{r:?}");
    // The state directory stays hidden and unwritable whatever a rule grants.
    let state = ws.join(".toolvisor");
    let r = block(
        T,
        s.call(
            "run_command",
            json!({"command": "cat x", "reveal": [state]}),
        ),
    );
    assert_eq!(
        r.error.map(|e| e.kind),
        Some(ErrorType::PermissionError),
        "{}",
        r.content
    );
    let r = block(
        T,
        s.call("run_command", json!({"command": write, "writable": ["/"]})),
    );
    assert_eq!(
        r.error.map(|e| e.kind),
        Some(ErrorType::PermissionError),
        "{}",
        r.content
    );
}

/// Outside `/tmp` (commands get a private one): the target directory's, or `/var/tmp`.
fn host_base() -> std::path::PathBuf {
    let target = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"));
    if target.starts_with("/tmp") && std::path::Path::new("/var/tmp").is_dir() {
        "/var/tmp".into()
    } else {
        target.to_path_buf()
    }
}
