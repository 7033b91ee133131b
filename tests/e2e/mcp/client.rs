//! MCP servers (`[mcp.servers.NAME]`) as supervised workers, seen over the daemon's
//! socket: their tools join the catalog, are validated, policed, audited, time out,
//! cancel, and survive their server's crashes, hangs, garbage and floods.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Status, Topic};
use toolvisor_protocol::{ErrorType, Id};

use super::support::*;
use crate::harness::*;

#[path = "../../mcp_server/tools.rs"]
#[allow(dead_code)]
mod test_tools;

fn kind(r: &toolvisor_protocol::ToolResult) -> Option<ErrorType> {
    r.error.as_ref().map(|e| e.kind)
}

/// The next event named `name` whose fields satisfy `pick`.
async fn event(
    c: &mut toolvisor_protocol::client::Client,
    name: &str,
    pick: impl Fn(&serde_json::Map<String, Value>) -> bool,
) -> serde_json::Map<String, Value> {
    let (_, m) = c
        .recv_matching(|m| match m {
            ServerMessage::Event { event, fields, .. } if event == name && pick(fields) => Some(()),
            _ => None,
        })
        .await
        .unwrap();
    match m {
        ServerMessage::Event { fields, .. } => fields,
        _ => unreachable!(),
    }
}

/// Wait until `path` holds `needle` `n` times. The server writes the file from its own
/// process: no event reaches the test, so look again with short pauses.
async fn wait_file_count(path: &std::path::Path, needle: &str, n: usize) {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        if text.matches(needle).count() >= n {
            return;
        }
        assert!(
            Instant::now() < end,
            "{needle:?} ×{n} not in {path:?}: {text:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn mcp_tools_join_the_catalog_validated_and_checked() {
    let config = with_server("test", &[], "risk = \"low\"");
    let mut s = Server::start(&config);
    s.wait_log("`test__bad_schema` does not compile", START_DEADLINE);
    block(T, async {
        let tools = listing(&s).await;
        let names: Vec<&str> = tools.iter().filter_map(|t| t["name"].as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        assert_eq!(
            names, sorted,
            "one sorted list, built-in and MCP tools together"
        );
        for name in [
            "test__add",
            "test__echo",
            "test__delete_everything",
            "read_file",
        ] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        assert!(!names.iter().any(|n| n.contains("bad")), "{names:?}");
        let tool = |n: &str| tools.iter().find(|t| t["name"] == n).unwrap().clone();
        assert_eq!(tool("test__add")["group"], "mcp:test");
        assert_eq!(tool("test__add")["risk"], "low");
        assert_eq!(
            tool("test__delete_everything")["risk"],
            "high",
            "destructiveHint raises it"
        );

        let r = s.call("test__add", json!({"a": 2, "b": 3})).await;
        assert_eq!((r.status, r.content.as_str()), (Status::Ok, "5"));
        assert_eq!(r.meta["structured"], json!({"sum": 5}));
        let r = s.call("test__add", json!({"a": "two"})).await;
        assert_eq!(kind(&r), Some(ErrorType::InvalidParams), "{r:?}");
        assert!(r.content.contains("/a"), "{}", r.content);
        let r = s.call("test__fail", json!({})).await;
        assert_eq!(kind(&r), Some(ErrorType::McpToolError));
        assert_eq!(r.error.unwrap().message, "it failed on purpose");
        assert!(r.content.contains("second line"));
        let r = s.call("test__lie", json!({})).await;
        assert_eq!(kind(&r), Some(ErrorType::McpToolError));
        assert!(r.content.contains("outputSchema"), "{}", r.content);
        // Audited like any call.
        let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
        assert!(audit.contains("\"tool\":\"test__add\""));
        assert!(audit.contains("\"kind\":\"tools_changed\""));
        let status = s.worker_status().await;
        let w = status
            .iter()
            .find(|w| w.group == "mcp:test")
            .expect("status lists it");
        assert_eq!(w.state, "ready");
        assert_eq!(
            status.last().unwrap().group,
            "mcp:test",
            "MCP groups come after the built-in ones"
        );
    });
}

#[test]
fn env_goes_to_its_server_only_and_is_masked_in_the_audit() {
    let secret = "e2e-mcp-value-7f3a9c1d";
    let config = format!(
        "{}{}[[policy.rules]]\ntool = \"*\"\naction = \"allow\"\n[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\n",
        with_server(
            "a",
            &[],
            &format!("env = {{ E2E_MCP_VALUE = \"{secret}\" }}")
        ),
        with_server("b", &[], ""),
    );
    let s = start_with_tools(&config, &["a__env", "b__env"]);
    block(T, async {
        let r = s.call("a__env", json!({"name": "E2E_MCP_VALUE"})).await;
        assert_eq!(r.content, secret);
        let r = s.call("b__env", json!({"name": "E2E_MCP_VALUE"})).await;
        assert_eq!(r.content, "<unset>");
        let r = s
            .call(
                "run_command",
                json!({"command": "printf '%s' \"$E2E_MCP_VALUE\""}),
            )
            .await;
        assert_eq!(r.content, "");
        let r = s
            .call("a__echo", json!({"text": format!("it is {secret}")}))
            .await;
        assert_eq!(r.content, format!("it is {secret}"));
        let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
        assert!(audit.contains("a__echo"));
        assert!(!audit.contains(secret), "the value reached the audit log");
    });
}

#[test]
fn rules_name_mcp_tools_by_name_and_pattern() {
    let config = format!(
        "{}[[policy.rules]]\ntool = \"test__echo\"\naction = \"allow\"\n\
         [[policy.rules]]\ntool = \"test__f*\"\naction = \"deny\"\n",
        with_server("test", &[], "")
    );
    let s = start_with_tools(&config, &["test__echo"]);
    block(T, async {
        assert_eq!(
            s.call("test__echo", json!({"text": "x"})).await.status,
            Status::Ok
        );
        let r = s.call("test__flood", json!({"n": 1})).await;
        assert_eq!(kind(&r), Some(ErrorType::PolicyDenied), "{r:?}");
        // `explain` knows them too.
        let mut c = s.client().await;
        let explain = |tool: &str, args: Value| ClientMessage::Explain {
            id: "e".into(),
            tool: tool.into(),
            args,
        };
        match c
            .request(&explain("test__flood", json!({"n": 1})), &"e".into())
            .await
            .unwrap()
        {
            ServerMessage::Explanation { decision, rule, .. } => {
                assert_eq!((decision.as_str(), rule), ("deny", Some(1)));
            }
            other => panic!("{other:?}"),
        }
        match c
            .request(&explain("test__add", json!({"a": "x"})), &"e".into())
            .await
            .unwrap()
        {
            ServerMessage::Explanation {
                decision, error, ..
            } => {
                assert_eq!(decision, "error");
                assert_eq!(error.unwrap().kind, ErrorType::InvalidParams);
            }
            other => panic!("{other:?}"),
        }
        // No rule: medium risk asks in mode auto; a non-interactive session is told how.
        let r = s.call("test__add", json!({"a": 1, "b": 1})).await;
        assert_eq!(kind(&r), Some(ErrorType::ConfirmationRequired));
        assert!(
            r.content.contains("toolvisor grant --tool test__add"),
            "{}",
            r.content
        );
        let mut c = s.client().await;
        let (token, _) = crate::policy::grant(&mut c, "g", &["test__add"], false).await;
        let mut req = CallRequest::new("g1", "test__add", json!({"a": 1, "b": 1}));
        req.confirm_token = Some(token);
        let r = c.call(req, |_, _| {}).await.unwrap().result.unwrap();
        assert_eq!(r.content, "2");
        // A person asked about an MCP tool's call sees its arguments.
        let mut person = toolvisor_protocol::client::Client::connect(&s.socket(), "agent", true)
            .await
            .unwrap();
        let req = CallRequest::new("asked", "test__add", json!({"a": 40, "b": 2}));
        person.send(&ClientMessage::Call(req)).await.unwrap();
        let ((preview, _), _) = person
            .recv_matching(|m| match m {
                ServerMessage::ConfirmRequired {
                    interaction,
                    preview,
                    ..
                } => Some((preview.clone(), interaction.clone())),
                _ => None,
            })
            .await
            .unwrap();
        let preview = preview.expect("a preview");
        assert!(preview.contains("\"a\": 40"), "{preview}");
    });
}

#[test]
fn rules_may_name_only_configured_servers() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!(
        "{}[[policy.rules]]\ntool = \"other__*\"\naction = \"allow\"\n",
        with_server("test", &[], "")
    );
    let err = serve_refuses_with(dir.path(), &config, &[], &[]);
    assert!(err.contains("other__*"), "{err}");
    let config = format!(
        "{}[[policy.rules]]\ntool = \"test__anything\"\naction = \"deny\"\n",
        with_server("test", &[], "")
    );
    // A tool the server does not (yet) have may be named: serve starts.
    let _s = start_with_tools(&config, &["test__echo"]);
}

#[test]
fn mcp_calls_time_out_and_cancel_on_the_server_too() {
    // The server's log lies in the workspace: a sandboxed server writes nowhere else
    // (its /tmp is its own).
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let config = format!(
        "{}[[policy.rules]]\ntool = \"test__*\"\naction = \"allow\"\n",
        with_server(
            "test",
            &[],
            &format!(
                "timeout_ms = 1500\nenv = {{ TEST_MCP_LOG = {:?} }}",
                log.display().to_string()
            )
        )
    );
    std::fs::write(dir.path().join("toolvisor.toml"), &config).unwrap();
    let s = Server::start_in(dir);
    block(T, super::support::wait_listed(&s, &["test__sleep"]));
    block(T, async {
        let started = Instant::now();
        let r = s.call("test__sleep", json!({"ms": 30_000})).await;
        assert_eq!(r.status, Status::Timeout, "{r:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        wait_file_count(&log, "sleep cancelled", 1).await;

        let mut c = s.client().await;
        let mut req = CallRequest::new("short", "test__sleep", json!({"ms": 30_000}));
        req.timeout_ms = Some(200);
        let r = c.call(req, |_, _| {}).await.unwrap().result.unwrap();
        assert_eq!(r.status, Status::Timeout);
        wait_file_count(&log, "sleep cancelled", 2).await;

        let req = CallRequest::new("c1", "test__sleep", json!({"ms": 30_000}));
        c.send(&ClientMessage::Call(req)).await.unwrap();
        wait_file_count(&log, "sleep started", 3).await;
        c.send(&ClientMessage::Cancel { id: "c1".into() })
            .await
            .unwrap();
        let (_, m) = c
            .recv_matching(|m| {
                matches!(m, ServerMessage::Result(r) if r.id == Id::from("c1")).then_some(())
            })
            .await
            .unwrap();
        let ServerMessage::Result(r) = m else {
            unreachable!()
        };
        assert_eq!(r.status, Status::Cancelled);
        wait_file_count(&log, "sleep cancelled", 3).await;
    });
}

#[test]
fn a_crashing_server_is_restarted_and_an_operator_can_restart_it() {
    let config = format!(
        "{}[[policy.rules]]\ntool = \"test__*\"\naction = \"allow\"\n",
        with_server("test", &[], "")
    );
    let s = start_with_tools(&config, &["test__crash"]);
    block(T, async {
        let mut events = crate::batch::subscriber(&s, vec![Topic::Workers]).await;
        let before = s.worker_pids("mcp:test").await;
        let r = s.call("test__crash", json!({})).await;
        assert_eq!(r.status, Status::Crashed, "{r:?}");
        assert_eq!(kind(&r), Some(ErrorType::WorkerCrashed));
        let exited = event(&mut events, "worker_exited", |f| f["group"] == "mcp:test").await;
        assert_eq!(exited["reason"], "crashed");
        event(&mut events, "worker_started", |f| f["group"] == "mcp:test").await;
        let after = s
            .wait_group_back("mcp:test", &before, Duration::from_secs(30))
            .await;
        assert_ne!(before, after);
        assert_eq!(
            s.call("test__echo", json!({"text": "back"})).await.content,
            "back"
        );

        s.restart("mcp:test").await;
        let again = s
            .wait_group_back("mcp:test", &after, Duration::from_secs(30))
            .await;
        assert_ne!(after, again);
        let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
        assert!(audit.contains("\"kind\":\"worker_exited\"") && audit.contains("operator_restart"));
    });
}

#[test]
fn servers_that_hang_spew_garbage_or_flood_never_take_the_daemon_down() {
    let marker = unique_marker("mcp-hang");
    let config = format!(
        "[supervisor]\nrestart_max = 2\nrestart_window_ms = 60000\nbackoff_initial_ms = 50\n\
         backoff_max_ms = 100\ncooldown_ms = 600000\n\
         [mcp.servers.hang]\ncommand = [\"env\", \"E2E_MARK={marker}\", \"sleep\", \"1000\"]\nstartup_timeout_ms = 400\n\
         [mcp.servers.junk]\ncommand = [\"yes\", \"this is not JSON\"]\nstartup_timeout_ms = 400\n\
         {}[[policy.rules]]\ntool = \"*\"\naction = \"allow\"\n",
        with_server("noisy", &["--noise"], "")
    );
    let s = Server::start_serving(&config);
    s.write("f.txt", "fine\n");
    block(T, async {
        // The other groups serve while the bad servers are restarted and failed.
        s.wait_group_back("search", &[], Duration::from_secs(30))
            .await;
        assert_eq!(
            s.call("read_file", json!({"path": "f.txt"})).await.content,
            "fine\n"
        );
        let end = Instant::now() + Duration::from_secs(60);
        loop {
            let ws = s.workers().await;
            let failed = |g: &str| ws.iter().any(|w| w.0 == g && w.2 == "failed");
            if failed("mcp:hang") && failed("mcp:junk") {
                break;
            }
            assert!(
                Instant::now() < end,
                "not failed within the deadline: {ws:?}"
            );
            // Failing has no event a test can wait on without racing it: look again.
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        wait_no_procs_with_env(&marker, Duration::from_secs(10))
            .await
            .expect("the hung server's process is gone");
        let r = s.call("hang__anything", json!({})).await;
        assert_eq!(kind(&r), Some(ErrorType::ToolNotFound));
        // Garbage before the first message is skipped; the server works.
        wait_listed(&s, &["noisy__echo"]).await;
        assert_eq!(
            s.call("noisy__echo", json!({"text": "hi"})).await.content,
            "hi"
        );
        // A flood of notifications costs the daemon nothing.
        let r = s.call("noisy__flood", json!({"n": 3000})).await;
        assert_eq!(r.content, "flooded", "{r:?}");
        let mut c = s.client().await;
        let pong = c
            .request(&ClientMessage::Ping { id: "p".into() }, &"p".into())
            .await
            .unwrap();
        assert!(matches!(pong, ServerMessage::Pong { .. }));
        assert_eq!(
            s.call("noisy__echo", json!({"text": "still"}))
                .await
                .content,
            "still"
        );
        assert_eq!(
            s.call("read_file", json!({"path": "f.txt"})).await.content,
            "fine\n"
        );
    });
}

#[test]
fn list_changed_refreshes_the_catalog_and_tells_subscribers() {
    let config = format!(
        "{}[[policy.rules]]\ntool = \"test__*\"\naction = \"allow\"\n",
        with_server("test", &[], "")
    );
    let s = start_with_tools(&config, &["test__add_tool"]);
    block(T, async {
        let mut events = crate::batch::subscriber(&s, vec![Topic::Workers]).await;
        assert_eq!(
            kind(&s.call("test__extra", json!({})).await),
            Some(ErrorType::ToolNotFound)
        );
        assert_eq!(s.call("test__add_tool", json!({})).await.content, "added");
        let changed = event(&mut events, "tools_changed", |f| f["group"] == "mcp:test").await;
        assert!(
            changed["tools"]
                .as_array()
                .unwrap()
                .contains(&json!("test__extra"))
        );
        assert_eq!(s.call("test__extra", json!({})).await.content, "extra");
        let names: Vec<Value> = listing(&s)
            .await
            .iter()
            .map(|t| t["name"].clone())
            .collect();
        assert!(names.contains(&json!("test__extra")));
    });
}

/// Serve the test server over Streamable HTTP on a loopback port, from a thread of
/// its own (the test's runtime only lives while it runs).
fn serve_http() -> u16 {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            let service = StreamableHttpService::new(
                || Ok(test_tools::TestServer::default()),
                LocalSessionManager::default().into(),
                StreamableHttpServerConfig::default(),
            );
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let svc = hyper_util::service::TowerToHyperService::new(service.clone());
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                });
            }
        });
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap()
}

#[test]
fn a_streamable_http_server_is_a_worker_too() {
    let port = serve_http();
    let config =
        format!("[mcp.servers.web]\nurl = \"http://127.0.0.1:{port}/mcp\"\nrisk = \"low\"\n");
    let s = start_with_tools(&config, &["web__add"]);
    block(T, async {
        let r = s.call("web__add", json!({"a": 20, "b": 22})).await;
        assert_eq!((r.status, r.content.as_str()), (Status::Ok, "42"), "{r:?}");
        let r = s.call("web__fail", json!({})).await;
        assert_eq!(kind(&r), Some(ErrorType::McpToolError));
    });
}

#[test]
fn sighup_restarts_mcp_servers_with_their_new_settings() {
    let config = |value: &str| {
        format!(
            "{}[[policy.rules]]\ntool = \"test__*\"\naction = \"allow\"\n",
            with_server(
                "test",
                &[],
                &format!("env = {{ E2E_MCP_VALUE = \"{value}\" }}")
            )
        )
    };
    let s = start_with_tools(&config("first"), &["test__env"]);
    block(T, async {
        let r = s.call("test__env", json!({"name": "E2E_MCP_VALUE"})).await;
        assert_eq!(r.content, "first");
        let before = s.worker_pids("mcp:test").await;
        std::fs::write(s.ws().join("toolvisor.toml"), config("second")).unwrap();
        crate::supervision::signal(s.pid(), nix::sys::signal::Signal::SIGHUP);
        s.wait_group_back("mcp:test", &before, Duration::from_secs(30))
            .await;
        let r = s.call("test__env", json!({"name": "E2E_MCP_VALUE"})).await;
        assert_eq!(r.content, "second");
    });
}
