//! Resource subscriptions through `toolvisor mcp`: `resources/subscribe` reaches the
//! MCP server that has the resource (through the daemon: policy, audit), its
//! `notifications/resources/updated` come back to the client that subscribed and to
//! no other, and one session can never end another's subscription. The server is the
//! conformance fixture server: its `test://watched-resource` changes once, a moment
//! after each subscription.

use rmcp::model::{SubscribeRequestParams, UnsubscribeRequestParams};
use serde_json::json;
use toolvisor_protocol::message::Status;

use super::support::*;
use crate::harness::*;

const WATCHED: &str = "test://watched-resource";
const REQUEST_TOOL: &str = "conformance__mcp-request";

fn start_fixtures() -> Server {
    let config = format!(
        "[mcp.servers.conformance]\ncommand = [{:?}]\nprefix = \"\"\nrisk = \"low\"\n",
        conformance_fixtures()
    );
    start_with_tools(&config, &["test_simple_text"])
}

#[test]
fn updates_reach_the_client_that_subscribed_and_no_other() {
    let s = start_fixtures();
    block(T, async {
        let watcher = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let bystander = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let params = SubscribeRequestParams::new(WATCHED);
        #[allow(deprecated)]
        watcher
            .service
            .subscribe(params)
            .await
            .expect("resources/subscribe");
        watcher
            .seen
            .wait("the update notification", T, |s| {
                s.updated.lock().unwrap().iter().any(|u| u == WATCHED)
            })
            .await;

        // Another session cannot end the watcher's subscription through the daemon.
        let mut other = s.client().await;
        let args = json!({"method": "resources/unsubscribe", "params": {"uri": WATCHED}});
        let r = call_on(&mut other, "u1", REQUEST_TOOL, args).await;
        assert_ne!(r.status, Status::Ok, "{r:?}");
        assert!(r.content.contains("not subscribed"), "{}", r.content);

        #[allow(deprecated)]
        watcher
            .service
            .unsubscribe(UnsubscribeRequestParams::new(WATCHED))
            .await
            .expect("resources/unsubscribe");
        // The bystander subscribed to nothing and heard nothing (its bridge saw the
        // same event and kept it back).
        assert!(bystander.seen.updated.lock().unwrap().is_empty());
        watcher.close().await;
        bystander.close().await;
    });
    let audit = audit_log(s.ws());
    let requests = audit
        .iter()
        .filter(|r| r["kind"] == "requested" && r["tool"] == REQUEST_TOOL)
        .count();
    // The subscription, the refused unsubscribe, the unsubscription.
    assert!(requests >= 3, "the requests are not audited: {requests}");
}

#[test]
fn a_resource_no_server_has_cannot_be_subscribed() {
    let s = start_fixtures();
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        #[allow(deprecated)]
        let r = mcp
            .service
            .subscribe(SubscribeRequestParams::new("test://nowhere"))
            .await;
        assert!(r.is_err(), "{r:?}");
        mcp.close().await;
    });
}

/// The fixture server's templated resource `ID`.
fn templated(id: usize) -> String {
    format!("test://template/{id}/data")
}

#[test]
fn one_session_cannot_take_every_subscription_of_a_server() {
    let s = start_fixtures();
    block(T, async {
        // A session (a prompt-injected agent, say) subscribes as much as it may...
        let mut hog = s.client().await;
        let subscribe =
            |uri: String| json!({"method": "resources/subscribe", "params": {"uri": uri}});
        for i in 0..64 {
            let r = call_on(
                &mut hog,
                &format!("h{i}"),
                REQUEST_TOOL,
                subscribe(templated(i)),
            )
            .await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
        // ...and no more: the 65th is refused, subscribing again to one it has is not.
        let r = call_on(&mut hog, "h64", REQUEST_TOOL, subscribe(templated(64))).await;
        assert_ne!(r.status, Status::Ok, "{r:?}");
        assert!(r.content.contains("64 subscriptions"), "{}", r.content);
        let r = call_on(&mut hog, "again", REQUEST_TOOL, subscribe(templated(0))).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");

        // Another session still subscribes.
        let mut other = s.client().await;
        let r = call_on(&mut other, "o1", REQUEST_TOOL, subscribe(templated(64))).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
}

#[test]
fn a_session_that_ends_lets_go_of_its_subscriptions() {
    // The server's log lies in the workspace: a sandboxed server writes nowhere else.
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("server.log");
    let extra = format!(
        "risk = \"low\"\nenv = {{ TEST_MCP_LOG = {:?} }}",
        log.display().to_string()
    );
    let config = with_server("res", &["--resources"], &extra);
    std::fs::write(dir.path().join("toolvisor.toml"), &config).unwrap();
    let s = Server::start_in(dir);
    block(T, wait_listed(&s, &["res__ping"]));
    block(T, async {
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        #[allow(deprecated)]
        mcp.service
            .subscribe(SubscribeRequestParams::new("test://many/1"))
            .await
            .expect("resources/subscribe");
        // The client goes without unsubscribing: its daemon session ends, and the
        // server is unsubscribed, since nobody else was subscribed.
        mcp.close().await;
    });
    let said = eventually(T, "the server is unsubscribed", || {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("unsubscribe test://many/1").then_some(text)
    });
    assert_eq!(said, "subscribe test://many/1\nunsubscribe test://many/1\n");
}
