//! The path of one call, from its entry [`Service::run_call_guarded`]: find the tool in the registry, validate its arguments, ask
//! the policy ([`super::gate`]), record it, send it to its group's workers
//! ([`super::dispatch`]), record the end, and build the one `result` the client gets.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::{CallRequest, Status, ToolResult, Topic};
use toolvisor_protocol::tools::{Route, ToolDef};
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorBody, ErrorType, Id};

use crate::call::record::CallRecord;
use crate::call::service::Service;
use crate::outbox::Outbox;

/// Who is calling.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    /// The session's id (`s3`).
    pub id: String,
    /// The client's name from `hello`.
    pub client: String,
    /// Whether someone answers `confirm_required`.
    pub interactive: bool,
    /// The peer's uid.
    pub uid: u32,
    /// Where this session's messages go.
    pub out: Outbox,
    /// What this session already did successfully that lowers a call's risk.
    pub familiar: Arc<crate::call::familiar::Familiar>,
    /// The exec worker (index) where this session's background processes run, and with
    /// them its loopback (one network namespace per session, held by that worker): its
    /// later commands go there, so they reach what its jobs listen on. `u32::MAX`: none
    /// yet.
    pub exec_home: Arc<std::sync::atomic::AtomicU32>,
    /// The MCP servers' requests this client answers (`relay` of its `hello`).
    pub relay: Vec<String>,
}

/// An admitted call on its way: who asks, what, for which tool, and its cancel.
pub(crate) struct Call<'a> {
    pub session: &'a SessionInfo,
    pub req: &'a CallRequest,
    pub tool: &'a ToolDef,
    pub cancel: &'a CancellationToken,
    /// The call carries a person's grant that lets it act on another session's
    /// background process. Read before the gate, which may spend a single-use grant to
    /// skip a question: the same grant is what vouches for the takeover.
    pub takeover: bool,
}

/// Where a call ran: its group and the worker's pid.
pub(crate) type Ran = Option<(String, u32)>;

/// How often a running call says it is still running (`call_heartbeat`,
/// docs/PROTOCOL.md §7).
const HEARTBEAT: Duration = Duration::from_secs(5);

/// The fields every `calls` event carries.
pub(crate) fn call_fields(
    session: &SessionInfo,
    id: &Id,
    tool: &str,
    status: &str,
) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("id".into(), serde_json::to_value(id).unwrap_or(Value::Null));
    m.insert("session".into(), Value::String(session.id.clone()));
    m.insert("tool".into(), Value::String(tool.to_owned()));
    m.insert("status".into(), Value::String(status.to_owned()));
    m
}

pub(crate) fn fail(kind: ErrorType, message: impl Into<String>) -> Outcome {
    Outcome::err(ErrorBody::new(kind, message))
}

impl Service {
    /// The call's entry: [`Service::run_call`] in a task of its own, so that even a panic in it yields
    /// the call's one result.
    pub async fn run_call_guarded(
        self: Arc<Self>,
        session: Arc<SessionInfo>,
        req: CallRequest,
        cancel: CancellationToken,
    ) -> ToolResult {
        let id = req.id.clone();
        match tokio::spawn(self.run_call(session, req, cancel)).await {
            Ok(r) => r,
            Err(e) => internal_result(id, &format!("the call failed unexpectedly: {e}")),
        }
    }

    /// Run one call to its result. Never panics on client input; every path returns.
    /// Every call ends with a `call_finished` event, whether it ran or was rejected.
    pub async fn run_call(
        self: Arc<Self>,
        session: Arc<SessionInfo>,
        req: CallRequest,
        cancel: CancellationToken,
    ) -> ToolResult {
        let tool = self
            .registry()
            .find(&req.tool)
            .map_or_else(|| req.tool.clone(), |e| e.def.name.clone());
        let result = self.clone().call_to_end(session.clone(), req, cancel).await;
        let mut fields = call_fields(&session, &result.id, &tool, result.status.as_str());
        fields.insert("duration_ms".into(), Value::from(result.duration_ms));
        if let Some(e) = &result.error {
            fields.insert(
                "error_type".into(),
                Value::String(e.kind.as_str().to_owned()),
            );
        }
        self.events().publish(Topic::Calls, "call_finished", fields);
        result
    }

    async fn call_to_end(
        self: Arc<Self>,
        session: Arc<SessionInfo>,
        req: CallRequest,
        cancel: CancellationToken,
    ) -> ToolResult {
        let started = Instant::now();
        let _open = self.open_call();
        let mut rec = CallRecord {
            call_id: format!("{}:{}", session.id, req.id),
            trace_id: req.trace_id.clone().unwrap_or_default(),
            session: &session,
            tool: &req.tool,
            args: &req.args,
            // Replaced once the gate decides; a call refused before it (unknown tool, bad
            // arguments, cancelled) was never put to the policy.
            decision: "none",
            reason: "not evaluated: the call was refused before the policy was asked",
            rule: None,
            started_at: SystemTime::now(),
        };
        let mut extra = Map::new();
        let tool = match self.admit(&req) {
            Ok(tool) => tool,
            Err(o) => {
                let seq = rec.rejected(self.audit(), &o).await;
                return to_result(req.id, o, extra, started, seq);
            }
        };
        rec.tool = &tool.name;
        // Cancelled before it began (its batch was cancelled, or shutdown): it never runs.
        if cancel.is_cancelled() {
            let o = fail(
                ErrorType::Cancelled,
                "the call was cancelled before it started",
            );
            let seq = rec.rejected(self.audit(), &o).await;
            return to_result(req.id, o, extra, started, seq);
        }
        let call = Call {
            session: &session,
            req: &req,
            tool: &tool,
            cancel: &cancel,
            takeover: self.takeover(&req, &tool),
        };
        let (decision, gate) = self.gate(&call, &rec.call_id).await;
        let reason = decision.reason.clone();
        rec.decision = if decision.confined {
            "confined"
        } else {
            decision.action.as_str()
        };
        rec.reason = &reason;
        rec.rule = decision.rule.as_deref();
        extra.insert("policy".into(), crate::call::gate::meta(&decision));
        if let Err(o) = gate {
            let seq = rec.rejected(self.audit(), &o).await;
            return to_result(req.id.clone(), o, extra, started, seq);
        }
        if let Err(e) = rec.requested_durably(self.audit()).await {
            let o = fail(
                ErrorType::InternalError,
                format!("audit unavailable: no tool may start ({e})"),
            );
            return to_result(req.id.clone(), o, extra, started, 0);
        }
        let capture = self.capture_begin(&call, &rec.call_id).await;
        let (mut outcome, worker) = self.route_watched(&call, &decision.network).await;
        self.capture_end(capture, &mut outcome).await;
        session.familiar.learn(&tool, &req.args, outcome.status);
        if let Some(g) = self.config().workers.group(&tool.group) {
            crate::call::timeout_hint::explain(g, &tool, &req, &mut outcome);
        }
        let seq = rec
            .completed(
                self.audit(),
                &mut outcome,
                worker.as_ref().map(|(g, p)| (g.as_str(), *p)),
            )
            .await;
        extra.insert("call_id".into(), Value::String(rec.call_id.clone()));
        to_result(req.id.clone(), outcome, extra, started, seq)
    }

    /// Run an admitted, allowed call with `call_started` before it and a
    /// `call_heartbeat` every [`HEARTBEAT`] while it runs. The ticks live inside this
    /// future, so they stop exactly when the call ends (no task to leak).
    async fn route_watched(
        &self,
        call: &Call<'_>,
        network: &crate::policy::widen::NetworkGrant,
    ) -> (Outcome, Ran) {
        let (session, id, name) = (call.session, &call.req.id, call.tool.name.as_str());
        self.events().publish(
            Topic::Calls,
            "call_started",
            call_fields(session, id, name, "running"),
        );
        let began = Instant::now();
        let _running = self.running().enter(id, &session.id, name);
        let run = self.route(call, network);
        tokio::pin!(run);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        loop {
            tokio::select! {
                end = &mut run => return end,
                _ = tick.tick() => {
                    let mut fields = call_fields(session, id, name, "running");
                    fields.insert("elapsed_ms".into(), Value::from(began.elapsed().as_millis() as u64));
                    self.events().publish(Topic::Calls, "call_heartbeat", fields);
                }
            }
        }
    }

    /// Find the tool and check its arguments; an error ends the call before it runs.
    pub(crate) fn admit(&self, req: &CallRequest) -> Result<Arc<ToolDef>, Outcome> {
        let registry = self.registry();
        let Some(entry) = registry.find(&req.tool) else {
            let refused = self.paths().namespaces.as_ref().err().map(|e| e.0.as_str());
            let message = crate::registry::mcp::not_started(&self.config(), refused, &req.tool)
                .unwrap_or_else(|| registry.not_found(&req.tool));
            return Err(fail(ErrorType::ToolNotFound, message));
        };
        if let Err(violations) = entry.check(&req.args) {
            return Err(fail(
                ErrorType::InvalidParams,
                format!("invalid arguments for {}:\n{violations}", entry.def.name),
            ));
        }
        Ok(entry.def.clone())
    }

    /// Run an admitted call the way its definition says; returns its outcome and the
    /// worker that ran it.
    async fn route(
        &self,
        call: &Call<'_>,
        network: &crate::policy::widen::NetworkGrant,
    ) -> (Outcome, Ran) {
        match call.tool.route {
            Route::Worker => {
                let mut end = self
                    .dispatch(call, call.req.args.clone(), &call.tool.name, network)
                    .await;
                self.hold_staged(&call.tool.name, &mut end.0);
                end
            }
            Route::Preview => self.preview(call).await,
            Route::ApplyPreview { op } => self.apply_change(call, op).await,
            Route::EveryWorker => self.ask_every_worker(call).await,
        }
    }
}

/// Build the wire result from a worker outcome.
pub fn to_result(
    id: Id,
    o: Outcome,
    extra: Map<String, Value>,
    started: Instant,
    audit_seq: u64,
) -> ToolResult {
    let mut meta = o.meta;
    meta.extend(extra);
    // Nothing a call that never ran (or changes nothing) did needs undoing.
    meta.entry("undo").or_insert(Value::Bool(true));
    let error = match (o.status, o.error) {
        (Status::Ok, _) => None,
        (_, Some(e)) => Some(e),
        (s, None) => Some(ErrorBody::new(
            ErrorType::InternalError,
            format!("status {} without an error", s.as_str()),
        )),
    };
    ToolResult {
        id,
        status: o.status,
        content: o.content,
        display: o.display,
        error,
        truncated: o.truncated,
        meta: Value::Object(meta),
        duration_ms: started.elapsed().as_millis() as u64,
        audit_seq,
    }
}

/// A result for a call that could not even be routed (e.g. a panic in its task).
pub fn internal_result(id: Id, why: &str) -> ToolResult {
    to_result(
        id,
        fail(ErrorType::InternalError, why),
        Map::new(),
        Instant::now(),
        0,
    )
}
