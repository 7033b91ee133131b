//! The event bus behind `subscribe`: calls, confirmations and workers.
//!
//! A `broadcast` channel of bounded capacity: a subscriber that reads too slowly
//! misses events (and is told how many in `dropped`) instead of growing our memory.

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;
use toolvisor_protocol::message::Topic;

/// Which worker a life event is about: its group and its slot in the group.
#[derive(Clone, Copy, Debug)]
pub struct WorkerId<'a> {
    /// Its group.
    pub group: &'a str,
    /// Its slot in the group.
    pub index: u32,
}

/// Events kept for slow subscribers before they start losing them.
const CAPACITY: usize = 1024;

/// One event for the subscribers of its topic.
#[derive(Clone, Debug)]
pub struct Event {
    /// The topic it is sent on.
    pub topic: Topic,
    /// The `event` name (`call_started`, `worker_exited`, …).
    pub name: &'static str,
    /// Its fields, flattened into the `event` message.
    pub fields: Map<String, Value>,
}

/// A worker life event that is also an audit record.
#[derive(Clone, Copy, Debug)]
pub enum WorkerEvent {
    /// A process said `ready`.
    Started,
    /// A worker was restarted too often and gave up.
    Failed,
}

/// Also the hook by which worker life events reach the audit log.
pub type AuditHook = std::sync::Arc<dyn Fn(&'static str, Map<String, Value>) + Send + Sync>;

/// A worker's egress proxy reports a connection a command made, or asks whether one
/// may be made (the supervisor's [`crate::call::egress`] answers).
pub enum EgressEvent {
    /// May `call`'s command connect to `host:port`, which its list does not name?
    Ask {
        /// The supervisor's number of the call that started the command.
        call: u64,
        /// The host asked for.
        host: String,
        /// Its port.
        port: u16,
        /// The answer (dropped: no).
        reply: tokio::sync::oneshot::Sender<bool>,
    },
    /// A connection was refused or has ended.
    Closed(ConnectionRecord),
}

/// One connection through a command's egress proxy, as the worker reports it.
pub use toolvisor_protocol::worker::Connection as ConnectionRecord;

/// Receives [`EgressEvent`]s.
pub type EgressHook = std::sync::Arc<dyn Fn(EgressEvent) + Send + Sync>;

/// An MCP server asks the client of `call` something (the supervisor's
/// [`crate::call::relay`] passes it on).
pub struct RelayEvent {
    /// The supervisor's number of the call running on the server.
    pub call: u64,
    /// The MCP method.
    pub method: String,
    /// Its params.
    pub params: Value,
    /// The client's MCP result, or why there is none (dropped: an error).
    pub reply: tokio::sync::oneshot::Sender<Result<Value, String>>,
}

/// Receives [`RelayEvent`]s.
pub type RelayHook = std::sync::Arc<dyn Fn(RelayEvent) + Send + Sync>;

/// The service's event bus: a broadcast channel, so a slow subscriber loses events (and is
/// told how many) instead of growing the server's memory.
#[derive(Clone)]
pub struct Events {
    tx: broadcast::Sender<Event>,
    audit: std::sync::Arc<std::sync::OnceLock<AuditHook>>,
    egress: std::sync::Arc<std::sync::OnceLock<EgressHook>>,
    relay: std::sync::Arc<std::sync::OnceLock<RelayHook>>,
}

impl Default for Events {
    fn default() -> Self {
        Self::new()
    }
}

impl Events {
    /// A bus with no subscriber and no audit hook yet.
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(CAPACITY);
        Events {
            tx,
            audit: Default::default(),
            egress: Default::default(),
            relay: Default::default(),
        }
    }

    /// Where egress questions and connection records go.
    pub fn set_egress(&self, hook: EgressHook) {
        let _ = self.egress.set(hook);
    }

    /// Hand a worker's egress event on; with nobody to take it, a question is "no".
    pub fn egress(&self, event: EgressEvent) {
        match self.egress.get() {
            Some(hook) => hook(event),
            None => {
                if let EgressEvent::Ask { reply, .. } = event {
                    let _ = reply.send(false);
                }
            }
        }
    }

    /// Where MCP servers' requests to the client go.
    pub fn set_relay(&self, hook: RelayHook) {
        let _ = self.relay.set(hook);
    }

    /// Hand an MCP server's request on; with nobody to take it, it is refused.
    pub fn relay(&self, event: RelayEvent) {
        match self.relay.get() {
            Some(hook) => hook(event),
            None => {
                let _ = event.reply.send(Err("nobody can answer it".into()));
            }
        }
    }

    /// Route worker life events to the audit log too.
    pub fn set_audit(&self, hook: AuditHook) {
        let _ = self.audit.set(hook);
    }

    /// A new subscriber; it hears events published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.tx.subscribe()
    }

    /// Send an event to every subscriber (none listening is fine).
    pub fn publish(&self, topic: Topic, name: &'static str, fields: Map<String, Value>) {
        let _ = self.tx.send(Event {
            topic,
            name,
            fields,
        });
    }

    fn audit(&self, kind: &'static str, fields: &Map<String, Value>) {
        if let Some(hook) = self.audit.get() {
            hook(kind, fields.clone());
        }
    }

    /// A worker life event: published, and recorded in the audit log.
    pub fn worker(&self, what: WorkerEvent, w: WorkerId<'_>, pid: Option<u32>) {
        let fields = obj(json!({"group": w.group, "index": w.index, "pid": pid}));
        let name = match what {
            WorkerEvent::Started => "worker_started",
            WorkerEvent::Failed => "worker_failed",
        };
        if matches!(what, WorkerEvent::Started) {
            self.audit("worker_started", &fields);
        }
        self.publish(Topic::Workers, name, fields);
    }

    /// A worker process ended. `reason` says whether on purpose (`operator_restart`,
    /// `reload`, `memory`, `shutdown`) or not (`crashed`, `not_ready`,
    /// `protocol_violation`); the fields are those of
    /// [`crate::audit::record::WorkerExited`].
    pub fn worker_exited(
        &self,
        w: WorkerId<'_>,
        pid: Option<u32>,
        code: Option<i32>,
        signal: Option<i32>,
        reason: &str,
    ) {
        let fields = obj(json!({
            "group": w.group, "index": w.index, "pid": pid, "code": code, "signal": signal,
            "reason": reason,
        }));
        self.audit("worker_exited", &fields);
        self.publish(Topic::Workers, "worker_exited", fields);
    }
}

/// The map inside a JSON object (empty for anything else), for building event fields.
pub fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
