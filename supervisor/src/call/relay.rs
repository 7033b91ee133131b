//! An MCP server's requests to its client (`sampling/createMessage`,
//! `elicitation/create`), the supervisor's side: the server's worker names the call
//! running on it, and the request goes to that call's session as a `relay_request`
//! when the session's `hello` said it answers that method; its `relay_answer` goes
//! back. Anything else (a call of another kind, a session that does not answer the
//! method, a session gone, the call ended) is refused, and the server gets an error.
//! Each request is one `relay` audit record.
//!
//! Only calls to MCP servers' tools are entered here, from their dispatch until
//! they end: a request can only reach the session whose call is running on the server.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

use serde_json::Value;
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::Id;
use toolvisor_protocol::message::ServerMessage;

use crate::audit::record::Relayed;
use crate::call::router::SessionInfo;
use crate::call::service::Service;
use crate::events::RelayEvent;

/// Requests of one call that may wait for their answers at once; more are refused
/// (a server cannot flood its client through toolvisor).
const PER_CALL: usize = 4;

/// Refused requests of one call that are recorded; a server that goes on asking
/// cannot fill the audit log.
const REFUSALS_RECORDED: usize = 8;

/// The group name prefix of MCP servers' workers.
const MCP_GROUP: &str = "mcp:";

/// A call running on an MCP server.
struct RelayCall {
    session: SessionInfo,
    /// `<session>:<client id>`, as its audit records name it.
    call_id: String,
    req_id: Id,
    server: String,
    /// Cancelled when the call ends: its requests are then refused.
    ended: CancellationToken,
    /// Its requests waiting for an answer now.
    waiting: std::sync::atomic::AtomicUsize,
    /// Its requests refused so far.
    refused: std::sync::atomic::AtomicUsize,
}

/// What [`RelayBook::ask`] found: the call, the `relay` record's outcome, the answer.
type Asked = (Option<Arc<RelayCall>>, &'static str, Result<Value, String>);

/// A request passed to a session, waiting for its `relay_answer`.
struct Waiting {
    session: String,
    reply: oneshot::Sender<Result<Value, String>>,
}

/// The calls running on MCP servers, and the requests waiting for their clients.
#[derive(Default)]
pub struct RelayBook {
    calls: Mutex<HashMap<u64, Arc<RelayCall>>>,
    waiting: Mutex<HashMap<u64, Waiting>>,
    next: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A call entered in the book; it leaves (and its waiting requests are refused) when
/// this drops.
#[must_use = "the call leaves the book when this drops"]
pub struct Entered<'a> {
    book: &'a RelayBook,
    call: u64,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if let Some(c) = lock(&self.book.calls).remove(&self.call) {
            c.ended.cancel();
        }
    }
}

impl RelayBook {
    /// Enter call `number` of `session` (client id `req_id`) to the tool of `group`,
    /// when the group is an MCP server's.
    pub fn enter(
        &self,
        number: u64,
        group: &str,
        session: &SessionInfo,
        req_id: &Id,
    ) -> Option<Entered<'_>> {
        let server = group.strip_prefix(MCP_GROUP)?;
        let call = RelayCall {
            session: session.clone(),
            call_id: format!("{}:{}", session.id, req_id),
            req_id: req_id.clone(),
            server: server.to_owned(),
            ended: CancellationToken::new(),
            waiting: Default::default(),
            refused: Default::default(),
        };
        lock(&self.calls).insert(number, Arc::new(call));
        Some(Entered {
            book: self,
            call: number,
        })
    }

    /// Hand a session's `relay_answer` to the request it names; false when no request
    /// of that number waits for this session.
    pub fn answer(&self, session: &str, request: u64, answer: Result<Value, String>) -> bool {
        let mut waiting = lock(&self.waiting);
        if waiting.get(&request).is_none_or(|w| w.session != session) {
            return false;
        }
        match waiting.remove(&request) {
            Some(w) => w.reply.send(answer).is_ok(),
            None => false,
        }
    }

    /// Pass `event` to its call's session and wait for the answer (or the end of the
    /// call, or of the session); with the call (None: not one of ours) and the
    /// `relay` record's outcome.
    async fn ask(&self, event: &RelayEvent) -> Asked {
        let Some(c) = lock(&self.calls).get(&event.call).cloned() else {
            let why = "the call is not running on an MCP server".to_owned();
            return (None, "refused", Err(why));
        };
        if !c.session.relay.iter().any(|m| m == &event.method) {
            let why = format!(
                "the client of this call ({}) does not answer `{}`",
                c.session.client, event.method
            );
            return (Some(c), "refused", Err(why));
        }
        if c.waiting.fetch_add(1, Ordering::SeqCst) >= PER_CALL {
            c.waiting.fetch_sub(1, Ordering::SeqCst);
            let why = format!("more than {PER_CALL} requests of one call wait at once");
            return (Some(c), "refused", Err(why));
        }
        let answer = self.wait_for_session(&c, event).await;
        c.waiting.fetch_sub(1, Ordering::SeqCst);
        let outcome = if answer.is_ok() { "answered" } else { "error" };
        (Some(c), outcome, answer)
    }

    async fn wait_for_session(&self, c: &RelayCall, event: &RelayEvent) -> Result<Value, String> {
        let request = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let (reply, rx) = oneshot::channel();
        let w = Waiting {
            session: c.session.id.clone(),
            reply,
        };
        lock(&self.waiting).insert(request, w);
        c.session.out.send(&ServerMessage::RelayRequest {
            id: c.req_id.clone(),
            request,
            server: c.server.clone(),
            method: event.method.clone(),
            params: event.params.clone(),
        });
        let answer = tokio::select! {
            a = rx => a.unwrap_or_else(|_| Err("the request was dropped".into())),
            _ = c.ended.cancelled() => Err("the call ended before the client answered".into()),
            _ = c.session.out.closed.cancelled() => Err("the client went away".into()),
        };
        lock(&self.waiting).remove(&request);
        answer
    }
}

impl Service {
    /// Take an MCP server's request to the client of one of its calls: answered from
    /// a task of its own (a person or a model may take a while).
    pub(crate) fn on_relay(self: &Arc<Self>, event: RelayEvent) {
        let service = Arc::clone(self);
        tokio::spawn(async move {
            let (call, outcome, answer) = service.relay_book().ask(&event).await;
            let recorded = |c: &RelayCall| {
                outcome != "refused"
                    || c.refused.fetch_add(1, Ordering::Relaxed) < REFUSALS_RECORDED
            };
            if let Some(c) = call.filter(|c| recorded(c)) {
                service.audit().record_detached(&Relayed {
                    call_id: &c.call_id,
                    server: &c.server,
                    method: &event.method,
                    outcome,
                });
            }
            let _ = event.reply.send(answer);
        });
    }
}

impl Service {
    /// A client's session ended: the MCP servers' workers let go of what it held
    /// there (its resource subscriptions).
    pub fn session_ended(&self, session: &str) {
        let msg = toolvisor_protocol::worker::ToWorker::SessionEnded {
            session: session.to_owned(),
        };
        for (group, pool) in self.pools() {
            if group.starts_with(MCP_GROUP) {
                pool.tell_all(&msg);
            }
        }
    }
}

/// The hook a service sets on its event bus: requests reach it while it lives.
pub fn hook(service: Weak<Service>) -> crate::events::RelayHook {
    Arc::new(move |event| match service.upgrade() {
        Some(s) => s.on_relay(event),
        None => {
            let _ = event.reply.send(Err("toolvisor is stopping".into()));
        }
    })
}

#[cfg(test)]
mod tests;
