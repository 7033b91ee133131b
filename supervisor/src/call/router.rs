//! The path of one call: find the tool, validate its arguments, ask the policy,
//! record it, send it to its group's pool with its deadline, record the end, and build
//! the one `result` the client gets.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::message::{CallRequest, ServerMessage, Status, ToolResult, Topic};
use toolvisor_protocol::tools::{self, Risk, ToolSpec};
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorBody, ErrorType, Id};

use crate::call::previews::{PendingChange, PreviewStore};
use crate::call::record::CallRecord;
use crate::registry::mcp::SpecRef;
use crate::service::Service;
use crate::session::outbox::Outbox;
use crate::workers::pool::{Job, JobEnd};

/// Who is calling.
#[derive(Clone, Debug)]
pub struct SessionInfo {
    pub id: String,
    pub client: String,
    pub interactive: bool,
    pub uid: u32,
    pub out: Outbox,
}

/// Streamed chunks buffered per call before the worker's reader waits.
const OUTPUT_CHUNKS: usize = 16;

/// How often a running call says it is still running (`call_heartbeat`, docs/PROTOCOL.md §7).
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

fn fail(kind: ErrorType, message: impl Into<String>) -> Outcome {
    Outcome::err(ErrorBody::new(kind, message))
}

impl Service {
    /// Run one call to its result. Never panics on client input; every path returns.
    /// Every call ends with a `call_finished` event, whether it ran or was rejected.
    pub async fn run_call(
        self: Arc<Self>,
        session: Arc<SessionInfo>,
        req: CallRequest,
        cancel: CancellationToken,
    ) -> ToolResult {
        let tool = tools::find(&self.tools, &req.tool)
            .map_or_else(|| req.tool.clone(), |s| s.name.to_owned());
        let result = self.clone().call_to_end(session.clone(), req, cancel).await;
        let mut fields = call_fields(&session, &result.id, &tool, result.status.as_str());
        fields.insert("duration_ms".into(), Value::from(result.duration_ms));
        if let Some(e) = &result.error {
            fields.insert(
                "error_type".into(),
                Value::String(e.kind.as_str().to_owned()),
            );
        }
        self.events.publish(Topic::Calls, "call_finished", fields);
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
        let admitted = match self.admit(&req) {
            Ok(spec) => spec,
            Err(o) => {
                let seq = rec.rejected(&self.audit, &o).await;
                return to_result(req.id, o, extra, started, seq);
            }
        };
        let spec: &ToolSpec = &admitted;
        rec.tool = spec.name;
        // Cancelled before it began (its batch was cancelled, or shutdown): it never runs.
        if cancel.is_cancelled() {
            let o = fail(
                ErrorType::Cancelled,
                "the call was cancelled before it started",
            );
            let seq = rec.rejected(&self.audit, &o).await;
            return to_result(req.id, o, extra, started, seq);
        }
        let (decision, gate) = self.gate(&session, &req, spec, &rec.call_id, &cancel).await;
        let reason = decision.reason.clone();
        rec.decision = crate::call::gate::action_str(decision.action);
        rec.reason = &reason;
        rec.rule = decision.rule.as_deref();
        extra.insert("policy".into(), crate::call::gate::meta(&decision));
        if let Err(o) = gate {
            let seq = rec.rejected(&self.audit, &o).await;
            return to_result(req.id, o, extra, started, seq);
        }
        if let Err(e) = rec.requested_durably(&self.audit).await {
            let o = fail(
                ErrorType::InternalError,
                format!("audit unavailable: no tool may start ({e})"),
            );
            return to_result(req.id, o, extra, started, 0);
        }
        let network = self.network_grant(&decision, spec);
        let (mut outcome, worker) = self
            .route_watched(&session, &req, spec, network, &cancel)
            .await;
        let seq = rec
            .completed(
                &self.audit,
                &mut outcome,
                worker.as_ref().map(|(g, p)| (g.as_str(), *p)),
            )
            .await;
        extra.insert("call_id".into(), Value::String(rec.call_id.clone()));
        to_result(req.id, outcome, extra, started, seq)
    }

    /// Run an admitted, allowed call with `call_started` before it and a
    /// `call_heartbeat` every [`HEARTBEAT`] while it runs. The ticks live inside this
    /// future, so they stop exactly when the call ends (no task to leak).
    async fn route_watched(
        &self,
        session: &SessionInfo,
        req: &CallRequest,
        spec: &ToolSpec,
        network: bool,
        cancel: &CancellationToken,
    ) -> (Outcome, Option<(String, u32)>) {
        self.events.publish(
            Topic::Calls,
            "call_started",
            call_fields(session, &req.id, spec.name, "running"),
        );
        let began = Instant::now();
        let run = self.route(session, req, spec, network, cancel);
        tokio::pin!(run);
        let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
        loop {
            tokio::select! {
                end = &mut run => return end,
                _ = tick.tick() => {
                    let mut fields = call_fields(session, &req.id, spec.name, "running");
                    fields.insert("elapsed_ms".into(), Value::from(began.elapsed().as_millis() as u64));
                    self.events.publish(Topic::Calls, "call_heartbeat", fields);
                }
            }
        }
    }

    /// Find the tool and check its arguments; an error ends the call before it runs.
    pub(crate) fn admit(&self, req: &CallRequest) -> Result<SpecRef<'_>, Outcome> {
        let Some(spec) = tools::find(&self.tools, &req.tool) else {
            return self.admit_mcp(req);
        };
        if let Err(violations) = self.validators.check(spec.name, &req.args) {
            return Err(fail(
                ErrorType::InvalidParams,
                format!("invalid arguments for {}:\n{violations}", spec.name),
            ));
        }
        Ok(SpecRef::Builtin(spec))
    }

    /// [`Service::admit`] for a tool of an MCP server, checked against its own
    /// `inputSchema`.
    fn admit_mcp(&self, req: &CallRequest) -> Result<SpecRef<'_>, Outcome> {
        let Some(tool) = self.mcp.find(&req.tool) else {
            return Err(fail(
                ErrorType::ToolNotFound,
                self.validators.not_found(&req.tool),
            ));
        };
        if let Err(violations) = tool.check(&req.args) {
            return Err(fail(
                ErrorType::InvalidParams,
                format!("invalid arguments for {}:\n{violations}", req.tool),
            ));
        }
        Ok(SpecRef::Mcp(tool))
    }

    /// Run an admitted call; returns its outcome and the worker that ran it.
    async fn route(
        &self,
        session: &SessionInfo,
        req: &CallRequest,
        spec: &ToolSpec,
        network: bool,
        cancel: &CancellationToken,
    ) -> (Outcome, Option<(String, u32)>) {
        if spec.name == "apply_file_change" {
            return self.apply_change(session, req, spec, cancel).await;
        }
        if spec.name == "list_processes" {
            return self.list_processes(session, req, spec, cancel).await;
        }
        if let Some(tool) = self
            .mcp
            .find(spec.name)
            .filter(|t| t.spec.group == spec.group)
        {
            let mut end = self
                .dispatch(session, req, spec, req.args.clone(), &tool.original, cancel)
                .await;
            self.mcp.check_output(&tool, &mut end.0);
            return end;
        }
        let mut end = self
            .dispatch_net(
                session,
                req,
                spec,
                req.args.clone(),
                spec.name,
                network,
                cancel,
            )
            .await;
        if spec.name.starts_with("preview_") {
            self.issue_preview_token(spec.name, &mut end.0);
        }
        end
    }

    /// Keep a preview's change in the supervisor (it outlives edit-worker restarts)
    /// and hand the client its single-use token instead of the new content.
    fn issue_preview_token(&self, tool: &str, o: &mut Outcome) {
        if o.status != Status::Ok {
            return;
        }
        let Some(change) = PendingChange::from_preview_meta(tool, &mut o.meta) else {
            return;
        };
        let ttl = Duration::from_millis(self.config().edit.preview_ttl_ms);
        let token = self.previews().issue(change, Instant::now(), ttl);
        o.meta.insert("token".into(), Value::String(token));
    }

    /// `apply_file_change`: exactly the change its preview showed, once.
    async fn apply_change(
        &self,
        session: &SessionInfo,
        req: &CallRequest,
        spec: &ToolSpec,
        cancel: &CancellationToken,
    ) -> (Outcome, Option<(String, u32)>) {
        let token = change_token(&req.args);
        let change = match self.previews().take(token, Instant::now()) {
            Ok(c) => c,
            Err(e) => return (fail(e.error_type(), e.to_string()), None),
        };
        let mut end = self
            .dispatch(
                session,
                req,
                spec,
                change.apply_args(),
                "apply_change",
                cancel,
            )
            .await;
        end.0.meta.insert("path".into(), Value::String(change.path));
        end
    }

    /// `list_processes`: each exec worker knows only its own background jobs, so ask
    /// every ready one and merge the listings ([`crate::call::processes`]). Still one call
    /// (one audit pair), whose `worker` is the first that listed its jobs. With no
    /// worker ready, the usual path waits for one or answers `WorkerUnavailable`.
    async fn list_processes(
        &self,
        session: &SessionInfo,
        req: &CallRequest,
        spec: &ToolSpec,
        cancel: &CancellationToken,
    ) -> (Outcome, Option<(String, u32)>) {
        let Some(pool) = self.pools.get(spec.group) else {
            return self
                .dispatch(session, req, spec, req.args.clone(), spec.name, cancel)
                .await;
        };
        let timeout = self.deadline(spec, req);
        let ask = |index| Job {
            call: self.next_call(),
            name: req.id.to_string(),
            tool: spec.name.to_owned(),
            args: req.args.clone(),
            stream: false,
            timeout,
            rerunnable: false,
            output: None,
            worker: Some(index),
            session: session.id.clone(),
            network: false,
        };
        let ends = pool.run_on_ready(ask, cancel).await;
        if ends.is_empty() {
            return self
                .dispatch(session, req, spec, req.args.clone(), spec.name, cancel)
                .await;
        }
        let worker = first_lister(&ends);
        let outcomes = ends.into_iter().map(|(_, e)| e.outcome).collect();
        (crate::call::processes::merge(outcomes), worker)
    }

    pub(crate) fn previews(&self) -> std::sync::MutexGuard<'_, PreviewStore> {
        self.previews.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Send the call to its group's pool and wait for its end.
    pub(crate) async fn dispatch(
        &self,
        session: &SessionInfo,
        req: &CallRequest,
        spec: &ToolSpec,
        args: Value,
        worker_tool: &str,
        cancel: &CancellationToken,
    ) -> (Outcome, Option<(String, u32)>) {
        self.dispatch_net(session, req, spec, args, worker_tool, false, cancel)
            .await
    }

    /// Whether the rule that allowed the call gives its command the host's network
    /// (`network = true` on an `allow` rule, `[[policy.rules]]`).
    fn network_grant(&self, decision: &crate::policy::Decision, spec: &ToolSpec) -> bool {
        if spec.group != "exec" || decision.action != crate::config::Action::Allow {
            return false;
        }
        let Some(index) = decision.rule.as_deref().and_then(rule_index) else {
            return false;
        };
        let cfg = self.config();
        cfg.policy
            .rules
            .get(index)
            .is_some_and(|r| r.action == crate::config::Action::Allow && r.network == Some(true))
    }

    /// [`Service::dispatch`], with the network grant for a command.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn dispatch_net(
        &self,
        session: &SessionInfo,
        req: &CallRequest,
        spec: &ToolSpec,
        args: Value,
        worker_tool: &str,
        network: bool,
        cancel: &CancellationToken,
    ) -> (Outcome, Option<(String, u32)>) {
        let Some(pool) = self.pools.get(spec.group) else {
            return (
                fail(
                    ErrorType::InternalError,
                    format!("no pool for group {}", spec.group),
                ),
                None,
            );
        };
        let timeout = self.deadline(spec, req);
        let (output, forwarder) = if req.stream == Some(true) {
            let (tx, rx) = mpsc::channel(OUTPUT_CHUNKS);
            (
                Some(tx),
                Some(tokio::spawn(forward_output(
                    rx,
                    req.id.clone(),
                    session.out.clone(),
                ))),
            )
        } else {
            (None, None)
        };
        let job = Job {
            call: self.next_call(),
            name: req.id.to_string(),
            tool: worker_tool.to_owned(),
            args,
            stream: req.stream == Some(true),
            timeout,
            rerunnable: spec.read_only && spec.risk == Risk::Low && spec.group == "search",
            output,
            worker: worker_of_handle(spec, &req.args),
            session: session.id.clone(),
            network,
        };
        let call_cancel = cancel.clone();
        let end = pool.run(job, &call_cancel).await;
        if let Some(f) = forwarder {
            let _ = f.await; // every output frame goes out before the result
        }
        (end.outcome, end.worker)
    }

    /// The effective deadline: the smallest of the call's `timeout_ms`, the tool's own
    /// `timeout` argument and the group's maximum; the group default when neither.
    pub fn deadline(&self, spec: &ToolSpec, req: &CallRequest) -> Duration {
        let cfg = self.config();
        let mut group = cfg.workers.group(spec.group).cloned().unwrap_or_default();
        if let Some(t) = self.mcp.timeout(spec.group) {
            let ms = t.as_millis() as u64;
            (group.default_timeout_ms, group.max_timeout_ms) = (ms, ms);
        }
        let own = match spec.group {
            "exec" => req.args.get("timeout").and_then(Value::as_u64),
            _ => None,
        };
        let ms = match (req.timeout_ms, own) {
            (None, None) => group.default_timeout_ms,
            (a, b) => a
                .into_iter()
                .chain(b)
                .min()
                .unwrap_or(group.default_timeout_ms),
        };
        Duration::from_millis(ms.min(group.max_timeout_ms).max(1))
    }
}

/// `N` of a rule id `policy.rules[N]`.
fn rule_index(id: &str) -> Option<usize> {
    id.strip_prefix("policy.rules[")?
        .strip_suffix(']')?
        .parse()
        .ok()
}

/// The preview token an `apply_file_change` names (empty when it names none).
pub(crate) fn change_token(args: &Value) -> &str {
    args.get("token")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The worker to name in the audit record of a fanned-out call: the first that
/// answered `ok`, else the first asked.
fn first_lister(ends: &[(u32, JobEnd)]) -> Option<(String, u32)> {
    let ok = ends.iter().find(|(_, e)| e.outcome.status == Status::Ok);
    ok.or(ends.first()).and_then(|(_, e)| e.worker.clone())
}

/// Background process handles (`w<index>-<n>`) name the exec worker that owns them.
fn worker_of_handle(spec: &ToolSpec, args: &Value) -> Option<u32> {
    if spec.group != "exec" {
        return None;
    }
    let handle = args.get("process")?.as_str()?;
    handle.strip_prefix('w')?.split('-').next()?.parse().ok()
}

async fn forward_output(mut rx: mpsc::Receiver<(String, String)>, id: Id, out: Outbox) {
    while let Some((stream, data)) = rx.recv().await {
        out.send_wait(&ServerMessage::Output {
            id: id.clone(),
            stream,
            data,
        })
        .await;
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn handles_name_their_worker() {
        let tools = tools::catalog();
        let spec = tools::find(&tools, "read_output").unwrap();
        assert_eq!(worker_of_handle(spec, &json!({"process": "w1-7"})), Some(1));
        assert_eq!(worker_of_handle(spec, &json!({"process": "x"})), None);
    }

    #[test]
    fn rule_ids_give_their_index() {
        assert_eq!(rule_index("policy.rules[3]"), Some(3));
        assert_eq!(rule_index("policy.rules[x]"), None);
        assert_eq!(rule_index("grant"), None);
    }
}
