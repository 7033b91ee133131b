//! A connection's open calls: their ids (each counts against `max_open_calls`, and a
//! new call may not reuse one) and cancel tokens. Shared by the session actor, which
//! opens calls, and the call tasks, which close their own id and queue their result
//! straight into the outbox, in that order: a client that reuses an id the moment it
//! reads the result finds it free, and no hop through the actor delays the result.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;
use toolvisor_protocol::Id;
use toolvisor_protocol::message::{ServerMessage, ToolResult};

use crate::outbox::Outbox;

/// The open calls of one connection.
#[derive(Clone, Default)]
pub(super) struct OpenCalls(Arc<Mutex<HashMap<Id, CancellationToken>>>);

impl OpenCalls {
    fn lock(&self) -> MutexGuard<'_, HashMap<Id, CancellationToken>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn insert(&self, id: Id, token: CancellationToken) {
        self.lock().insert(id, token);
    }

    pub(super) fn contains(&self, id: &Id) -> bool {
        self.lock().contains_key(id)
    }

    pub(super) fn len(&self) -> usize {
        self.lock().len()
    }

    /// The token of an open call.
    pub(super) fn token(&self, id: &Id) -> Option<CancellationToken> {
        self.lock().get(id).cloned()
    }

    /// Cancel every open call (the connection ended).
    pub(super) fn cancel_all(&self) {
        self.lock().values().for_each(CancellationToken::cancel);
    }

    /// A call ended: free its id, then queue its result.
    pub(super) fn finish(&self, out: &Outbox, result: ToolResult) {
        self.lock().remove(&result.id);
        out.send(&ServerMessage::Result(result));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_protocol::frame;

    #[tokio::test]
    async fn an_id_is_free_before_its_result_is_sent() {
        let (a, mut b) = tokio::net::UnixStream::pair().unwrap();
        let (_rd, wr) = a.into_split();
        let (out, drain) = Outbox::new(wr);
        tokio::spawn(drain.run());
        let open = OpenCalls::default();
        let id = Id::from("c1");
        open.insert(id.clone(), CancellationToken::new());
        assert!(open.contains(&id));
        let result = super::super::actor::overloaded(id.clone(), "test");
        open.finish(&out, result);
        assert!(!open.contains(&id), "freed");
        let body = frame::read_frame(&mut b, 1 << 20).await.unwrap().unwrap();
        let msg = frame::decode_value(&body).unwrap();
        assert_eq!(msg["type"].as_str(), Some("result"));
        assert_eq!(msg["id"].as_str(), Some("c1"));
    }
}
