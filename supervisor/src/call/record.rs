//! What the audit log says about one call: `rejected` when it never ran, or a
//! `requested` that is durable before the tool starts and a `completed` that is
//! durable before the client sees the result.

use std::time::SystemTime;

use serde_json::Value;
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorBody, ErrorType};

use crate::audit::record::{Completed, PolicyVerdict, Rejected, Requested, WorkerRef};
use crate::audit::{Audit, AuditError};
use crate::call::router::SessionInfo;

/// The audit identity of one call.
pub struct CallRecord<'a> {
    /// `<session>:<client id>`: unique across sessions, so recovery pairs records exactly.
    pub call_id: String,
    /// The client's trace id (empty when none).
    pub trace_id: String,
    /// The session the call came from.
    pub session: &'a SessionInfo,
    /// The tool's canonical name.
    pub tool: &'a str,
    /// The arguments (only their hash and a redacted preview are written).
    pub args: &'a Value,
    /// `allow`, `deny` or `ask`.
    pub decision: &'a str,
    /// The policy's reason.
    pub reason: &'a str,
    /// The deciding rule, if one decided.
    pub rule: Option<&'a str>,
    /// When the call was received.
    pub started_at: SystemTime,
}

impl CallRecord<'_> {
    fn requested(&self) -> Requested<'_> {
        Requested {
            trace_id: &self.trace_id,
            call_id: &self.call_id,
            session: &self.session.id,
            client: &self.session.client,
            tool: self.tool,
            args: self.args,
            policy: PolicyVerdict {
                decision: self.decision,
                reason: self.reason,
                rule: self.rule,
            },
        }
    }

    /// The call never ran: one `rejected` record; its seq is the result's `audit_seq`.
    pub async fn rejected(&self, audit: &Audit, o: &Outcome) -> u64 {
        let kind = o
            .error
            .as_ref()
            .map_or("InternalError", |e| e.kind.as_str());
        let r = Rejected {
            call: self.requested(),
            status: o.status.as_str(),
            error_type: kind,
        };
        audit.record_wait(&r).await.unwrap_or_else(|e| {
            tracing::error!(call = %self.call_id, "cannot record a rejected call: {e}");
            0
        })
    }

    /// Durable before the tool starts; an error means the tool must not start.
    pub async fn requested_durably(&self, audit: &Audit) -> Result<u64, AuditError> {
        audit.record(&self.requested()).await
    }

    /// Durable before the result leaves; if it cannot be written within the wait, the
    /// result becomes `InternalError` (never a silent gap).
    pub async fn completed(
        &self,
        audit: &Audit,
        o: &mut Outcome,
        worker: Option<(&str, u32)>,
    ) -> u64 {
        let summary = summary(o);
        let c = Completed {
            call_id: &self.call_id,
            status: o.status.as_str(),
            error_type: o.error.as_ref().map(|e| e.kind.as_str()),
            summary: &summary,
            started_at: self.started_at,
            ended_at: SystemTime::now(),
            worker: worker.map(|(group, pid)| WorkerRef {
                group,
                pid: Some(pid),
            }),
            output_bytes: o.content.len() as u64
                + o.truncated.as_ref().map_or(0, |t| t.omitted_bytes),
            truncated: o.truncated.is_some(),
        };
        match audit.record_wait(&c).await {
            Ok(seq) => seq,
            Err(e) => {
                tracing::error!(call = %self.call_id, "cannot record a result: {e}");
                *o = Outcome::err(ErrorBody::new(
                    ErrorType::InternalError,
                    format!("audit unavailable: the result could not be recorded ({e})"),
                ));
                0
            }
        }
    }
}

/// A one-line summary of an outcome for the audit log.
fn summary(o: &Outcome) -> String {
    let text = match &o.error {
        Some(e) => e.message.as_str(),
        None => o.display.lines().next().unwrap_or(""),
    };
    let mut s: String = text.chars().take(160).collect();
    if s.len() < text.len() {
        s.push('…');
    }
    s
}
