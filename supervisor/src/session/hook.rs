//! `hook`: a call an agent host runs with its own tool (its shell, its file tools),
//! reported by the host's hook program (`toolvisor hook …`). `before` decides it exactly
//! as `explain` would and records it like a call of this session: `requested` (allow,
//! ask) or `rejected` (deny, invalid). `after` records how it ended: `completed`. The
//! records' `call_id` is `<client>:<host's call id>`, so the two reports of one host
//! call pair up although they arrive on two connections.

use std::time::SystemTime;

use serde_json::Value;
use toolvisor_protocol::message::{HookPhase, ServerMessage};
use toolvisor_protocol::{ErrorType, Id};

use crate::audit::record::{Completed, PolicyVerdict, Rejected, Requested};
use crate::call::router::SessionInfo;
use crate::service::Service;

/// One `hook` message.
pub struct HookReport {
    pub id: Id,
    pub phase: HookPhase,
    pub call: String,
    pub tool: String,
    pub args: Value,
    pub status: Option<String>,
    pub summary: Option<String>,
}

/// The answer to a `hook` message, once its record is durable.
pub async fn answer(service: &Service, info: &SessionInfo, r: HookReport) -> ServerMessage {
    let call_id = format!("{}:{}", info.client, r.call);
    match r.phase {
        HookPhase::Before => before(service, info, &call_id, r).await,
        HookPhase::After => after(service, &call_id, r).await,
    }
}

async fn before(
    service: &Service,
    info: &SessionInfo,
    call_id: &str,
    r: HookReport,
) -> ServerMessage {
    let registry = service.registry();
    let m = crate::policy::explain::explain(
        r.id.clone(),
        &service.policy(),
        &registry,
        &r.tool,
        &r.args,
    );
    let ServerMessage::Explanation {
        decision,
        reason,
        rule,
        error,
        ..
    } = &m
    else {
        return m;
    };
    let tool = registry
        .find(&r.tool)
        .map_or(r.tool.clone(), |e| e.def.name.clone());
    let rule = rule.map(|i| format!("policy.rules[{i}]"));
    let requested = Requested {
        trace_id: "",
        call_id,
        session: &info.id,
        client: &info.client,
        tool: &tool,
        args: &r.args,
        policy: PolicyVerdict {
            decision,
            reason,
            rule: rule.as_deref(),
        },
    };
    let written = match (decision.as_str(), error) {
        ("allow" | "ask", _) => service.audit().record(&requested).await,
        (_, Some(e)) => rejected(service, requested, "error", e.kind.as_str()).await,
        _ => {
            rejected(
                service,
                requested,
                "denied",
                ErrorType::PolicyDenied.as_str(),
            )
            .await
        }
    };
    match written {
        Ok(_) => m,
        Err(e) => audit_unavailable(r.id, &e.to_string()),
    }
}

async fn rejected(
    service: &Service,
    call: Requested<'_>,
    status: &str,
    error_type: &str,
) -> Result<u64, crate::audit::AuditError> {
    let r = Rejected {
        call,
        status,
        error_type,
    };
    service.audit().record(&r).await
}

async fn after(service: &Service, call_id: &str, r: HookReport) -> ServerMessage {
    // The host's own tool failed or not: its failures have no toolvisor error type.
    let status = match r.status.as_deref() {
        None | Some("ok") => "ok",
        Some(_) => "error",
    };
    let summary = r.summary.as_deref().unwrap_or_default();
    let now = SystemTime::now();
    let rec = Completed {
        call_id,
        status,
        error_type: None,
        summary: summary.lines().next().unwrap_or_default(),
        started_at: now,
        ended_at: now,
        worker: None,
        output_bytes: summary.len() as u64,
        truncated: false,
    };
    match service.audit().record_wait(&rec).await {
        Ok(_) => ServerMessage::Ack { id: r.id },
        Err(e) => audit_unavailable(r.id, &e.to_string()),
    }
}

fn audit_unavailable(id: Id, why: &str) -> ServerMessage {
    ServerMessage::error(
        Some(id),
        ErrorType::InternalError,
        format!("audit unavailable: {why}"),
    )
}
