use std::time::Duration;

use serde_json::json;
use tokio::io::AsyncReadExt;
use toolvisor_protocol::frame;
use toolvisor_protocol::message::KNOWN_SERVER_TYPES;

use super::*;

const SAMPLING: &str = "sampling/createMessage";
const DEADLINE: Duration = Duration::from_secs(10);

/// A session answering `relay`, and the far end of its connection.
fn session(id: &str, relay: &[&str]) -> (SessionInfo, tokio::net::UnixStream) {
    let (ours, theirs) = tokio::net::UnixStream::pair().expect("socket pair");
    let (_, wr) = ours.into_split();
    let (out, drain) = crate::outbox::Outbox::new(wr);
    tokio::spawn(drain.run());
    let info = SessionInfo {
        id: id.into(),
        client: "test".into(),
        interactive: false,
        uid: 0,
        out,
        familiar: Default::default(),
        exec_home: Default::default(),
        relay: relay.iter().map(|m| (*m).to_owned()).collect(),
    };
    (info, theirs)
}

async fn next_message(peer: &mut tokio::net::UnixStream) -> ServerMessage {
    let mut len = [0u8; 4];
    peer.read_exact(&mut len).await.expect("length");
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    peer.read_exact(&mut body).await.expect("body");
    frame::decode(&body, KNOWN_SERVER_TYPES).expect("a server message")
}

fn event(call: u64) -> (RelayEvent, oneshot::Receiver<Result<Value, String>>) {
    let (reply, rx) = oneshot::channel();
    let e = RelayEvent {
        call,
        method: SAMPLING.into(),
        params: json!({"maxTokens": 1}),
        reply,
    };
    (e, rx)
}

#[tokio::test]
async fn only_calls_to_mcp_servers_are_entered() {
    let book = RelayBook::default();
    let (s, _peer) = session("s1", &[SAMPLING]);
    assert!(book.enter(1, "exec", &s, &Id::Int(1)).is_none());
    let (e, _) = event(1);
    let (call, outcome, answer) = book.ask(&e).await;
    assert!(call.is_none() && outcome == "refused" && answer.is_err());
}

#[tokio::test]
async fn a_session_that_does_not_answer_the_method_is_not_asked() {
    let book = RelayBook::default();
    let (s, _peer) = session("s1", &[]);
    let _entered = book.enter(1, "mcp:gh", &s, &Id::Int(1));
    let (e, _) = event(1);
    let (_, outcome, answer) = book.ask(&e).await;
    assert_eq!(outcome, "refused");
    assert!(answer.is_err_and(|w| w.contains("does not answer")));
    assert!(lock(&book.waiting).is_empty());
}

#[tokio::test]
async fn the_answer_comes_from_the_calls_session_only() {
    let book = Arc::new(RelayBook::default());
    let (s, mut peer) = session("s1", &[SAMPLING]);
    let entered = book.enter(7, "mcp:gh", &s, &Id::Str("c1".into()));
    let asking = {
        let book = book.clone();
        tokio::spawn(async move {
            let (e, _) = event(7);
            book.ask(&e).await
        })
    };
    let m = tokio::time::timeout(DEADLINE, next_message(&mut peer))
        .await
        .expect("the request in time");
    let ServerMessage::RelayRequest {
        id,
        request,
        server,
        ..
    } = m
    else {
        panic!("not a relay_request: {m:?}");
    };
    assert_eq!((id, server.as_str()), (Id::Str("c1".into()), "gh"));
    assert!(!book.answer("s2", request, Ok(json!("forged"))));
    assert!(book.answer("s1", request, Ok(json!("ok"))));
    let (_, outcome, answer) = asking.await.expect("the task");
    assert_eq!((outcome, answer), ("answered", Ok(json!("ok"))));
    drop(entered);
}

#[tokio::test]
async fn the_end_of_the_call_ends_the_wait() {
    let book = Arc::new(RelayBook::default());
    let (s, mut peer) = session("s1", &[SAMPLING]);
    let entered = book.enter(3, "mcp:gh", &s, &Id::Int(3));
    let asking = {
        let book = book.clone();
        tokio::spawn(async move {
            let (e, _) = event(3);
            book.ask(&e).await
        })
    };
    let _ = tokio::time::timeout(DEADLINE, next_message(&mut peer)).await;
    drop(entered);
    let (_, outcome, answer) = tokio::time::timeout(DEADLINE, asking)
        .await
        .expect("the wait ends")
        .expect("the task");
    assert_eq!(outcome, "error");
    assert!(answer.is_err());
    assert!(lock(&book.waiting).is_empty());
}

#[tokio::test]
async fn a_call_cannot_pile_up_requests() {
    let book = Arc::new(RelayBook::default());
    let (s, _peer) = session("s1", &[SAMPLING]);
    let _entered = book.enter(5, "mcp:gh", &s, &Id::Int(5));
    let waiting: Vec<_> = (0..PER_CALL)
        .map(|_| {
            let book = book.clone();
            tokio::spawn(async move {
                let (e, _) = event(5);
                book.ask(&e).await
            })
        })
        .collect();
    // Each of them is waiting once the book holds them all.
    let end = tokio::time::Instant::now() + DEADLINE;
    while lock(&book.waiting).len() < PER_CALL {
        assert!(
            tokio::time::Instant::now() < end,
            "the requests never waited"
        );
        tokio::task::yield_now().await;
    }
    let (e, _) = event(5);
    let (_, outcome, answer) = book.ask(&e).await;
    assert_eq!(outcome, "refused");
    assert!(answer.is_err_and(|w| w.contains("at once")));
    for w in waiting {
        w.abort();
    }
}
