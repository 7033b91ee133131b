//! A supervised MCP server's requests to its client (sampling, elicitation) during a
//! call: passed through the daemon to the client of that call, through `toolvisor
//! mcp` to its MCP client, and refused to anyone else. The server is the conformance
//! suite's fixture server, whose `test_sampling` and `test_elicitation` ask.

use serde_json::{Value, json};
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Status};
use toolvisor_protocol::{ErrorType, Id};

use super::support::*;
use crate::harness::*;

const SAMPLING: &str = "sampling/createMessage";

/// The fixture server mounted without a prefix, its asking tools allowed.
fn config() -> String {
    format!(
        "[mcp.servers.conformance]\ncommand = [{:?}]\nprefix = \"\"\nrisk = \"low\"\n\
         [[policy.rules]]\ntool = \"test_*\"\naction = \"allow\"\n",
        conformance_fixtures()
    )
}

fn start_fixtures() -> Server {
    start_with_tools(&config(), &["test_sampling", "test_elicitation"])
}

fn relay_records(ws: &std::path::Path) -> Vec<Value> {
    audit_log(ws)
        .into_iter()
        .filter(|r| r["kind"] == "relay")
        .collect()
}

#[test]
fn an_mcp_host_answers_the_servers_sampling_and_elicitation() {
    let s = start_fixtures();
    block(T, async {
        let mut client = TestClient::new(Some(Answer::Approve { session: false }));
        client.sampling = Some("forty-two".into());
        let mcp = start(s.ws(), &["--no-spawn"], client).await;

        let r = mcp
            .call(
                "test_sampling",
                json!({"prompt": "What is six times seven?"}),
            )
            .await;
        assert_eq!(text(&r), "LLM response: forty-two");
        let asked = mcp.seen.samplings.lock().unwrap().clone();
        assert_eq!(asked, ["What is six times seven?"]);

        let r = mcp
            .call("test_elicitation", json!({"message": "Who are you?"}))
            .await;
        assert!(text(&r).contains("action=accept"), "{}", text(&r));
        // The person reads which server asks, before what it says.
        let said = mcp.seen.elicitations();
        assert_eq!(
            said,
            ["The MCP server `conformance` asks (through toolvisor): Who are you?"]
        );
        mcp.close().await;
    });
    let records = eventually(T, "two relay records", || {
        let r = relay_records(s.ws());
        (r.len() == 2).then_some(r)
    });
    for (r, method) in records.iter().zip([SAMPLING, "elicitation/create"]) {
        assert_eq!(
            (&r["method"], &r["outcome"], &r["server"]),
            (&json!(method), &json!("answered"), &json!("conformance"))
        );
    }
}

#[test]
fn a_host_that_cannot_answer_gets_the_servers_error_not_a_hang() {
    let s = start_fixtures();
    block(T, async {
        // Declares neither sampling nor elicitation.
        let mcp = start(s.ws(), &["--no-spawn"], TestClient::new(None)).await;
        let r = mcp.call("test_sampling", json!({"prompt": "hi"})).await;
        assert_eq!(r.is_error, Some(true));
        assert!(text(&r).contains("does not answer"), "{}", text(&r));
        assert!(mcp.seen.samplings.lock().unwrap().is_empty());
        mcp.close().await;
    });
    let r = eventually(T, "a relay record", || relay_records(s.ws()).pop());
    assert_eq!(r["outcome"], "refused");
}

/// The next `relay_request` `c` gets, and its `request` number.
async fn next_relay_request(c: &mut Client) -> (u64, ServerMessage) {
    c.recv_matching(|m| match m {
        ServerMessage::RelayRequest { request, .. } => Some(*request),
        _ => None,
    })
    .await
    .expect("relay_request")
}

/// A native client that answers sampling; the `relay_request` of its call.
async fn call_and_catch_request(c: &mut Client, id: &str) -> (u64, Value) {
    let req = CallRequest::new(id, "test_sampling", json!({"prompt": "secret plan"}));
    c.send(&ClientMessage::Call(req)).await.expect("send");
    let (request, m) = next_relay_request(c).await;
    let ServerMessage::RelayRequest {
        id: call,
        server,
        method,
        params,
        ..
    } = m
    else {
        unreachable!()
    };
    assert_eq!(
        (call, server.as_str(), method.as_str()),
        (Id::Str(id.into()), "conformance", SAMPLING)
    );
    (request, params)
}

#[test]
fn only_the_session_of_the_call_can_answer_and_others_are_never_asked() {
    let s = start_fixtures();
    block(T, async {
        let relay = vec![SAMPLING.to_owned()];
        let mut asker = Client::connect_relaying(&s.socket(), "asker", false, relay.clone())
            .await
            .expect("connect");
        let mut other = Client::connect_relaying(&s.socket(), "other", false, relay)
            .await
            .expect("connect");
        let (request, params) = call_and_catch_request(&mut asker, "c1").await;
        assert_eq!(params["messages"][0]["content"]["text"], "secret plan");

        // Another session cannot answer it (nor learn it exists).
        let forged = ClientMessage::RelayAnswer {
            request,
            result: Some(json!({"role": "assistant", "model": "m",
                "content": {"type": "text", "text": "forged"}})),
            error: None,
        };
        other.send(&forged).await.expect("send");
        let (_, refused) = other
            .recv_matching(|m| matches!(m, ServerMessage::Error { .. }).then_some(()))
            .await
            .expect("an error");
        let ServerMessage::Error { error, .. } = refused else {
            unreachable!()
        };
        assert_eq!(error.kind, ErrorType::BadMessage);

        let answer = ClientMessage::RelayAnswer {
            request,
            result: Some(json!({"role": "assistant", "model": "m",
                "content": {"type": "text", "text": "genuine"}})),
            error: None,
        };
        asker.send(&answer).await.expect("send");
        let r = result_of(&mut asker, "c1").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, "LLM response: genuine");

        // A second answer to the same request is refused: it was answered.
        asker.send(&answer).await.expect("send");
        let (_, again) = asker
            .recv_matching(|m| matches!(m, ServerMessage::Error { .. }).then_some(()))
            .await
            .expect("an error");
        assert!(matches!(again, ServerMessage::Error { .. }));
    });
}

#[test]
fn a_client_that_never_answers_holds_only_its_own_call() {
    let s = start_fixtures();
    block(T, async {
        let relay = vec![SAMPLING.to_owned()];
        let mut silent = Client::connect_relaying(&s.socket(), "silent", false, relay)
            .await
            .expect("connect");
        let (_, _) = call_and_catch_request(&mut silent, "c1").await;
        // Cancelling the call ends the wait: the call ends, the server's request is
        // refused, and nothing is left waiting.
        silent
            .send(&ClientMessage::Cancel {
                id: Id::Str("c1".into()),
            })
            .await
            .expect("send");
        let r = result_of(&mut silent, "c1").await;
        assert_eq!(r.status, Status::Cancelled, "{r:?}");
        // The server still serves others meanwhile and after.
        let mut c = s.client().await;
        let r = call_on(&mut c, "c2", "test_simple_text", json!({})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
}

#[test]
fn a_server_cannot_ask_for_the_context_of_the_clients_other_servers() {
    let s = start_fixtures();
    block(T, async {
        let relay = vec![SAMPLING.to_owned()];
        let mut c = Client::connect_relaying(&s.socket(), "host", false, relay)
            .await
            .expect("connect");
        // The server asks the host's model with the context of "all servers": through
        // toolvisor that would be every other server's data.
        let args = json!({"prompt": "summarise what you know", "includeContext": "allServers"});
        let req = CallRequest::new("c1", "test_sampling", args);
        c.send(&ClientMessage::Call(req)).await.expect("send");
        let (request, m) = next_relay_request(&mut c).await;
        let ServerMessage::RelayRequest { params, .. } = m else {
            unreachable!()
        };
        assert!(params.get("includeContext").is_none(), "{params}");
        assert_eq!(
            params["messages"][0]["content"]["text"],
            "summarise what you know"
        );
        let answer = ClientMessage::RelayAnswer {
            request,
            result: Some(json!({"role": "assistant", "model": "m",
                "content": {"type": "text", "text": "nothing"}})),
            error: None,
        };
        c.send(&answer).await.expect("send");
        let r = result_of(&mut c, "c1").await;
        assert_eq!(r.content, "LLM response: nothing");
    });
}
