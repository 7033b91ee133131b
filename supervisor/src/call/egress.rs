//! Network by domain, the supervisor's side: which calls' commands go through an
//! egress proxy (kept from their dispatch on, so a background process's connections
//! still find their call), the question a person gets when such a command connects to
//! a host its list does not name, and the `connection` audit record of every
//! connection the proxy refused or carried.
//!
//! The proxy itself runs in the exec worker (`workers::exec::egress`); the worker's
//! link hands its `connect` and `connection` frames here through
//! [`crate::session::events::Events::egress`], after checking they name a call that
//! worker was given.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use serde_json::json;
use toolvisor_protocol::Id;
use toolvisor_protocol::egress::Egress;
use toolvisor_protocol::tools::Risk;

use crate::audit::record::{ConfirmAnswered, ConfirmRequested, Connection};
use crate::call::confirm::{Answer, ConfirmDetails};
use crate::call::router::{Call, SessionInfo};
use crate::policy::widen::NetworkGrant;
use crate::service::Service;
use crate::session::events::{ConnectionRecord, EgressEvent};

/// How many calls with an egress the book keeps (the oldest are forgotten: their
/// background processes' connections are then refused).
const KEPT: usize = 4096;

/// A call whose command goes through an egress proxy.
#[derive(Clone, Debug)]
pub struct EgressCall {
    /// The session that made it (asked when its command connects elsewhere).
    pub session: SessionInfo,
    /// `<session>:<client id>`, as its audit records name it.
    pub call_id: String,
    /// The client's id of the call (a `confirm_required` carries it).
    pub req_id: Id,
    /// The client's trace id (empty when none).
    pub trace_id: String,
    /// The command, shown to the person asked.
    pub command: String,
}

/// The calls with an egress, by the supervisor's call number.
#[derive(Default)]
pub struct EgressBook(Mutex<Book>);

/// The calls, and their numbers oldest first (the oldest are forgotten first).
#[derive(Default)]
struct Book {
    calls: HashMap<u64, Arc<EgressCall>>,
    order: VecDeque<u64>,
}

impl EgressBook {
    fn register(&self, call: u64, c: EgressCall) {
        let mut book = self.0.lock().unwrap_or_else(|p| p.into_inner());
        book.calls.insert(call, Arc::new(c));
        book.order.push_back(call);
        while book.order.len() > KEPT {
            if let Some(old) = book.order.pop_front() {
                book.calls.remove(&old);
            }
        }
    }

    fn get(&self, call: u64) -> Option<Arc<EgressCall>> {
        let book = self.0.lock().unwrap_or_else(|p| p.into_inner());
        book.calls.get(&call).cloned()
    }
}

/// The `run` frame's network for a grant: the host's (`true`), or an egress whose
/// off-list hosts are asked about when someone can answer.
pub fn run_network(grant: &NetworkGrant, interactive: bool) -> (bool, Option<Egress>) {
    match grant {
        NetworkGrant::None => (false, None),
        NetworkGrant::Host => (true, None),
        NetworkGrant::Egress(allow) => (
            false,
            Some(Egress {
                allow: allow.clone(),
                ask: interactive,
            }),
        ),
    }
}

impl Service {
    /// Keep `call` (number `number`) for its command's connection questions and records.
    pub(crate) fn register_egress(&self, number: u64, call: &Call<'_>) {
        let command = call
            .req
            .args
            .get("command")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        self.egress_book().register(
            number,
            EgressCall {
                session: call.session.clone(),
                call_id: format!("{}:{}", call.session.id, call.req.id),
                req_id: call.req.id.clone(),
                trace_id: call.req.trace_id.clone().unwrap_or_default(),
                command: command.to_owned(),
            },
        );
    }

    /// Take a worker's egress event: a question is answered from a task of its own
    /// (a person may take a while), a record is written at once.
    pub(crate) fn on_egress(self: &Arc<Self>, event: EgressEvent) {
        match event {
            EgressEvent::Ask {
                call,
                host,
                port,
                reply,
            } => {
                let service = Arc::clone(self);
                tokio::spawn(async move {
                    let allow = service.ask_connect(call, &host, port).await;
                    let _ = reply.send(allow);
                });
            }
            EgressEvent::Closed(rec) => self.record_connection(&rec),
        }
    }

    /// Ask the call's session whether its command may connect to `host:port`.
    async fn ask_connect(&self, number: u64, host: &str, port: u16) -> bool {
        let Some(c) = self.egress_book().get(number) else {
            return false;
        };
        if !c.session.interactive {
            return false;
        }
        let target = format!("{host}:{port}");
        let args_sha256 = crate::audit::canonical::args_sha256(&json!({"connect": target}));
        let confirmations = self.confirmations();
        if confirmations.is_remembered(&c.session.id, "run_command", &args_sha256) {
            return true;
        }
        let reason = format!(
            "a command connects to {target}, which its network list does not name (to let \
             every command reach it: [network] allow = [{host:?}])"
        );
        let details = ConfirmDetails {
            session: c.session.id.clone(),
            client: c.session.client.clone(),
            call_id: c.call_id.clone(),
            tool: "run_command".into(),
            description: format!("Connect to {target}: {reason}"),
            risk: Risk::High,
            locations: vec![target.clone()],
            preview: Some(c.command.clone()),
            args_sha256,
        };
        let (interaction, rx) = confirmations.register(details.clone(), Instant::now());
        let msg = crate::call::gate::confirm_required(
            &c.req_id,
            &interaction,
            &details,
            confirmations.timeout(),
        );
        c.session.out.send(&msg);
        self.publish_confirmation(&msg, &details);
        self.audit().record_detached(&ConfirmRequested {
            trace_id: &c.trace_id,
            call_id: &c.call_id,
            tool: "run_command",
            reason: &reason,
            rule: None,
        });
        let answer = confirmations.wait(&interaction, rx).await;
        let word = match answer {
            Answer::Approved => "approved",
            Answer::Rejected => "denied",
            Answer::TimedOut => "timeout",
            Answer::Withdrawn => "withdrawn",
        };
        let by = confirmations.answered_by(&interaction);
        self.audit().record_detached(&ConfirmAnswered {
            call_id: &c.call_id,
            answer: word,
            by: by.as_ref().map_or(word, |a| a.session.as_str()),
            by_client: by.as_ref().map(|a| a.client.as_str()),
        });
        answer == Answer::Approved
    }

    /// The `connection` audit record of one connection.
    fn record_connection(&self, rec: &ConnectionRecord) {
        let call_id = self
            .egress_book()
            .get(rec.call)
            .map_or_else(|| format!("call {}", rec.call), |c| c.call_id.clone());
        self.audit().record_detached(&Connection {
            call_id: &call_id,
            host: &rec.host,
            port: rec.port,
            decision: &rec.decision,
            sent: rec.sent,
            received: rec.received,
            reason: rec.reason.as_deref(),
        });
    }
}

/// The hook a service sets on its event bus: egress events reach it while it lives.
pub fn hook(service: Weak<Service>) -> crate::session::events::EgressHook {
    Arc::new(move |event| match service.upgrade() {
        Some(s) => s.on_egress(event),
        None => {
            if let EgressEvent::Ask { reply, .. } = event {
                let _ = reply.send(false);
            }
        }
    })
}
