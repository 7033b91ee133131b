//! What MCP servers behind the daemon offer besides tools, through `toolvisor mcp
//! --http`: resources (10,000 of them, and one too large to pass), prompts, and tool
//! names kept within 64 characters; a server mounted with `prefix = ""`.

use std::time::Duration;

use rmcp::model::{GetPromptRequestParams, ReadResourceRequestParams, ResourceContents};
use serde_json::{Value, json};
use toolvisor_protocol::message::Status;

use super::http::{HttpMcp, until};
use super::support::*;
use crate::harness::*;

#[path = "../../mcp_server/resources.rs"]
#[allow(dead_code)]
mod test_resources;
use test_resources::{LONG_TOOL, MANY};

const ALLOW: &str = "[[policy.rules]]\ntool = \"*\"\naction = \"allow\"\n";

fn text_of(c: &ResourceContents) -> String {
    match c {
        ResourceContents::TextResourceContents { text, .. } => text.clone(),
        other => panic!("not text: {other:?}"),
    }
}

#[test]
fn long_names_are_shortened_and_prefixless_servers_mount_without_clashes() {
    let config = format!(
        "{}{}{}{ALLOW}",
        with_server("res", &["--resources"], ""),
        with_server("bare1", &["--resources"], "prefix = \"\""),
        with_server("bare2", &["--resources"], "prefix = \"\""),
    );
    let s = start_with_tools(&config, &["res__ping", "ping"]);
    block(T, async {
        let names: Vec<String> = listing(&s)
            .await
            .iter()
            .filter_map(|t| t["name"].as_str().map(str::to_owned))
            .collect();
        assert!(names.iter().all(|n| n.len() <= 64), "{names:?}");
        let long: Vec<&String> = names
            .iter()
            .filter(|n| n.starts_with("res__a_tool_whose_name"))
            .collect();
        assert_eq!(long.len(), 1, "{names:?}");
        assert_eq!(long[0].len(), 64);
        let r = s.call(long[0], json!({})).await;
        assert_eq!(
            (r.status, r.content.clone()),
            (Status::Ok, format!("called {LONG_TOOL}"))
        );
        // Both prefixless servers offer `ping`: one has it, the other is told.
        assert_eq!(names.iter().filter(|n| *n == "ping").count(), 1);
        assert_eq!(s.call("ping", json!({})).await.content, "called ping");
    });
    let mut s = s;
    s.wait_log("already has that name", Duration::from_secs(30));
}

#[test]
fn a_bad_prefix_is_refused_at_load() {
    let config = format!(
        "{}{ALLOW}",
        with_server("res", &["--resources"], "prefix = \"a b\"")
    );
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("toolvisor.toml"), config).expect("config");
    let out = toolvisor(dir.path(), &["serve"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("mcp.servers.res.prefix"), "{err}");
}

#[test]
fn resources_and_prompts_pass_through_http_audited() {
    let config = format!("{}{ALLOW}", with_server("res", &["--resources"], ""));
    let s = start_with_tools(&config, &["res__ping"]);
    let mcp = HttpMcp::start(s.ws(), &[]);
    block(T, async {
        let c = mcp.client(None).await;
        let tools = c.list_all_tools().await.expect("tools/list");
        assert!(tools.iter().all(|t| !t.name.ends_with("mcp-request")));

        // The server's log message during a call reaches the client.
        let ping = rmcp::model::CallToolRequestParams::new("res__ping");
        let r = c.call_tool(ping).await.expect("tools/call");
        assert_eq!(text(&r), "called ping");
        let seen = c.service().seen.clone();
        seen.wait("the server's log message", T, |s| {
            s.logs.lock().unwrap().iter().any(|l| l == "pinged")
        })
        .await;

        let resources = c.list_all_resources().await.expect("resources/list");
        assert_eq!(resources.len(), MANY + 1);
        let meta = resources[0].meta.as_ref().map(|m| json!(m));
        assert_eq!(
            meta.map(|m| m["toolvisor/server"].clone()),
            Some(json!("res"))
        );

        let read = ReadResourceRequestParams::new("test://many/7");
        let r = c.read_resource(read).await.expect("resources/read");
        assert_eq!(text_of(&r.contents[0]), "resource test://many/7");

        // Larger than a message toolvisor takes: an error, soon, and nothing kept.
        let huge = c
            .read_resource(ReadResourceRequestParams::new("test://huge"))
            .await;
        assert!(huge.is_err(), "{huge:?}");
        let rss = rss_bytes(s.pid()).unwrap_or(0);
        assert!(rss < 200 << 20, "the daemon holds {rss} bytes");

        let prompts = c.list_all_prompts().await.expect("prompts/list");
        assert_eq!(
            prompts.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            ["res__greet"]
        );
        let mut args = serde_json::Map::new();
        args.insert("who".into(), Value::from("ann"));
        let get = GetPromptRequestParams::new("res__greet").with_arguments(args);
        let p = c.get_prompt(get).await.expect("prompts/get");
        let said = serde_json::to_value(&p.messages[0].content).unwrap_or_default();
        assert_eq!(said["text"], "Hello, ann");
        drop(c.cancel().await);
    });
    let audit = s.ws().join(".toolvisor/audit.jsonl");
    block(
        T,
        until("the reads are audited", T, || {
            std::fs::read_to_string(&audit)
                .unwrap_or_default()
                .contains("\"tool\":\"res__mcp-request\"")
        }),
    );
}
