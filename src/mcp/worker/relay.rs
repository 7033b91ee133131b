//! The server's requests to its client (`sampling/createMessage`, `elicitation/create`),
//! the worker's side: each becomes a `relay` frame naming the call running on the
//! server, and its `relay_answer` the server's answer. The supervisor passes it to that
//! call's client when the client answers such requests, and refuses it otherwise.
//!
//! A request names no call (MCP's stdio has no way to), so it is put on the oldest
//! call running on the server, provided every running call comes from one session: a
//! server can never reach one client's model or person during another client's call.
//! With no call running, or calls of several sessions, the request is refused.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};
use toolvisor_protocol::worker::FromWorker;
use toolvisor_workers::context::Outgoing;

use super::{Running, lock};

/// One request of the server, waiting for the client's answer.
pub struct Ask {
    /// The MCP method.
    pub method: String,
    /// Its params, as the server sent them.
    pub params: Value,
    /// The client's MCP result, or why there is none.
    pub reply: Reply,
}

/// Where the client's MCP result (or why there is none) goes.
pub type Reply = oneshot::Sender<Result<Value, String>>;

/// Requests sent on and not answered yet, by their number.
#[derive(Clone, Default)]
pub struct Pending {
    next: Arc<AtomicU64>,
    waiting: Arc<Mutex<HashMap<u64, Reply>>>,
}

impl Pending {
    /// The supervisor's `relay_answer` for request `ask` (an unknown number is ignored:
    /// its server stopped waiting).
    pub fn answer(&self, ask: u64, result: Option<Value>, error: Option<String>) {
        let Some(reply) = lock(&self.waiting).remove(&ask) else {
            return;
        };
        let _ = reply.send(toolvisor_protocol::message::relay_outcome(result, error));
    }
}

/// Pass each request on as a `relay` frame until the server's session ends.
pub async fn route(mut rx: mpsc::Receiver<Ask>, running: Running, pending: Pending, tx: Outgoing) {
    while let Some(ask) = rx.recv().await {
        let call = asker(&running);
        let call = match call {
            Ok(c) => c,
            Err(why) => {
                let _ = ask.reply.send(Err(why));
                continue;
            }
        };
        let number = pending.next.fetch_add(1, Ordering::Relaxed) + 1;
        lock(&pending.waiting).insert(number, ask.reply);
        let frame = FromWorker::Relay {
            call,
            ask: number,
            method: ask.method,
            params: ask.params,
        };
        if !tx.send(&frame).await {
            lock(&pending.waiting).remove(&number);
        }
    }
}

/// The call a request is put on: the oldest running, when every running call comes
/// from one session.
fn asker(running: &Running) -> Result<u64, String> {
    let calls = lock(running);
    let Some((&oldest, first)) = calls.iter().min_by_key(|(n, _)| **n) else {
        return Err("no call is running on this server: it can only ask during a call".into());
    };
    if calls.values().any(|c| c.session != first.session) {
        return Err(
            "calls of several clients are running on this server: toolvisor cannot tell \
             which of them asks"
                .into(),
        );
    }
    Ok(oldest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::worker::RunningCall;
    use tokio_util::sync::CancellationToken;

    fn running(calls: &[(u64, &str)]) -> Running {
        let map = calls
            .iter()
            .map(|(n, s)| {
                let c = RunningCall {
                    cancel: CancellationToken::new(),
                    session: (*s).to_owned(),
                };
                (*n, c)
            })
            .collect();
        Arc::new(Mutex::new(map))
    }

    #[test]
    fn a_request_goes_to_the_oldest_call_of_one_session_only() {
        assert!(asker(&running(&[])).is_err());
        assert_eq!(asker(&running(&[(7, "s1"), (3, "s1"), (9, "s1")])), Ok(3));
        assert!(asker(&running(&[(7, "s1"), (3, "s2")])).is_err());
    }

    #[test]
    fn an_answer_reaches_its_request_once() {
        let pending = Pending::default();
        let (tx, mut rx) = oneshot::channel();
        lock(&pending.waiting).insert(5, tx);
        pending.answer(6, Some(Value::Null), None);
        assert!(rx.try_recv().is_err(), "another request's answer");
        pending.answer(5, None, Some("no".into()));
        assert_eq!(rx.try_recv(), Ok(Err("no".to_owned())));
        pending.answer(5, Some(Value::Null), None); // a second answer is ignored
    }
}
