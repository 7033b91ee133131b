//! Typed audit records (docs/AUDIT.md). Callers build a struct and hand it to
//! [`super::Audit::record`]; the field names live here only, so a misspelt field is a
//! compile error rather than a record no tool can query.

use std::time::{Duration, SystemTime};

use serde_json::{Map, Value, json};
use toolvisor_protocol::time::rfc3339_millis;

use super::{canonical, redact};

/// A record kind with its fields. `fields` never contains the chain's own keys
/// (`seq`, `ts`, `kind`, `prev`, `hash`).
pub trait Record {
    /// The `kind` written in the record.
    const KIND: &'static str;
    /// The record's own fields.
    fn fields(&self) -> Map<String, Value>;
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// The policy engine's verdict as recorded.
#[derive(Clone, Debug)]
pub struct PolicyVerdict<'a> {
    /// `allow`, `deny` or `ask`.
    pub decision: &'a str,
    /// Why, in words (masked like the arguments: it may quote the command).
    pub reason: &'a str,
    /// The rule that decided, if one did (null for the mode's default).
    pub rule: Option<&'a str>,
}

/// `requested`: written (durably) before a tool starts. Arguments are stored only as
/// a hash and a redacted preview.
#[derive(Clone, Debug)]
pub struct Requested<'a> {
    /// The client's trace id, tying calls together (empty when none was given).
    pub trace_id: &'a str,
    /// The call's id as the client sent it.
    pub call_id: &'a str,
    /// The session the call came from.
    pub session: &'a str,
    /// The client's name from `hello`.
    pub client: &'a str,
    /// The tool's canonical name (an alias is resolved).
    pub tool: &'a str,
    /// The arguments; only their hash and a redacted preview are written.
    pub args: &'a Value,
    /// What the policy decided, and why.
    pub policy: PolicyVerdict<'a>,
}

impl Record for Requested<'_> {
    const KIND: &'static str = "requested";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({
            "trace_id": self.trace_id,
            "call_id": self.call_id,
            "session": self.session,
            "client": self.client,
            "tool": self.tool,
            "args_sha256": canonical::args_sha256(self.args),
            "args_preview": redact::preview(self.args),
            "policy": {
                "decision": self.policy.decision,
                // Reasons quote the command ("allows `echo …`"): masked like the args.
                "reason": redact::mask_str(self.policy.reason),
                "rule": self.policy.rule,
            },
        }))
    }
}

/// `rejected`: a call refused before it ran (invalid params, policy denial); it has
/// no `requested`/`completed` pair.
#[derive(Clone, Debug)]
pub struct Rejected<'a> {
    /// The call as it was asked for.
    pub call: Requested<'a>,
    /// The status the client got (`error`, `denied`).
    pub status: &'a str,
    /// The error type the client got.
    pub error_type: &'a str,
}

impl Record for Rejected<'_> {
    const KIND: &'static str = "rejected";
    fn fields(&self) -> Map<String, Value> {
        let mut m = self.call.fields();
        m.insert("status".into(), self.status.into());
        m.insert("error_type".into(), self.error_type.into());
        m
    }
}

/// The worker that ran a call.
#[derive(Clone, Debug)]
pub struct WorkerRef<'a> {
    /// Its group.
    pub group: &'a str,
    /// The process the supervisor spawned (none if it was gone before the call ended).
    pub pid: Option<u32>,
}

/// `completed`: durable before the client gets the result.
#[derive(Clone, Debug)]
pub struct Completed<'a> {
    /// The call's id, pairing this record with its `requested`.
    pub call_id: &'a str,
    /// The status the client got.
    pub status: &'a str,
    /// The error type, when the call failed.
    pub error_type: Option<&'a str>,
    /// The first line of the output or error (masked: it can echo a secret).
    pub summary: &'a str,
    /// When the call was received.
    pub started_at: SystemTime,
    /// When its result was ready.
    pub ended_at: SystemTime,
    /// Where it ran, if it reached a worker.
    pub worker: Option<WorkerRef<'a>>,
    /// The size of what the tool produced, before truncation.
    pub output_bytes: u64,
    /// Whether the result was cut.
    pub truncated: bool,
}

impl Record for Completed<'_> {
    const KIND: &'static str = "completed";
    fn fields(&self) -> Map<String, Value> {
        let dur = self
            .ended_at
            .duration_since(self.started_at)
            .unwrap_or(Duration::ZERO);
        obj(json!({
            "call_id": self.call_id,
            "status": self.status,
            "error_type": self.error_type,
            // The first line of the output or error: it can echo a secret.
            "summary": redact::mask_str(self.summary),
            "started_at": rfc3339_millis(self.started_at),
            "ended_at": rfc3339_millis(self.ended_at),
            "duration_ms": u64::try_from(dur.as_millis()).unwrap_or(u64::MAX),
            "worker": self.worker.as_ref().map(|w| json!({"group": w.group, "pid": w.pid})),
            "output_bytes": self.output_bytes,
            "truncated": self.truncated,
        }))
    }
}

/// The `completed` recovery writes for a `requested` whose call never finished
/// (supervisor killed). `interrupted` is an audit status only, never sent on the wire.
pub(crate) fn interrupted(call_id: &str, requested_at: &str) -> Map<String, Value> {
    obj(json!({
        "call_id": call_id,
        "status": "interrupted",
        "error_type": null,
        "summary": "the supervisor stopped before this call completed",
        "started_at": requested_at,
        "ended_at": rfc3339_millis(SystemTime::now()),
        "duration_ms": null,
        "worker": null,
        "output_bytes": null,
        "truncated": false,
    }))
}

/// `confirm_requested`: a person was asked to approve a call.
#[derive(Clone, Debug)]
pub struct ConfirmRequested<'a> {
    /// The client's trace id (empty when none).
    pub trace_id: &'a str,
    /// The call waiting for the answer.
    pub call_id: &'a str,
    /// Its tool.
    pub tool: &'a str,
    /// Why it asks (masked: it may quote the command).
    pub reason: &'a str,
    /// The rule that asked, if a rule did (else the mode did).
    pub rule: Option<&'a str>,
}

impl Record for ConfirmRequested<'_> {
    const KIND: &'static str = "confirm_requested";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({
            "trace_id": self.trace_id, "call_id": self.call_id, "tool": self.tool,
            "reason": redact::mask_str(self.reason), "rule": self.rule,
        }))
    }
}

/// `confirm_answered`: the answer (`approved`, `denied`, `timeout`, `withdrawn`) and who
/// gave it: the answering session (`by`) and its client (`by_client`), or `by` =
/// `timeout` (nobody answered in time) or `cancel` (the call was cancelled or its
/// session closed).
#[derive(Clone, Debug)]
pub struct ConfirmAnswered<'a> {
    /// The call that was waiting.
    pub call_id: &'a str,
    /// `approved`, `denied`, `timeout`, or `withdrawn` (the call or its session ended
    /// first).
    pub answer: &'a str,
    /// Who answered: the answering session, `timeout` or `cancel`.
    pub by: &'a str,
    /// The answering session's client name, when a session answered.
    pub by_client: Option<&'a str>,
}

impl Record for ConfirmAnswered<'_> {
    const KIND: &'static str = "confirm_answered";
    fn fields(&self) -> Map<String, Value> {
        let mut m = obj(json!({"call_id": self.call_id, "answer": self.answer, "by": self.by}));
        if let Some(c) = self.by_client {
            m.insert("by_client".into(), Value::String(c.to_owned()));
        }
        m
    }
}

/// `grant_issued`. `grant_id` is a fingerprint of the token, never the token itself:
/// whoever can read the log must not be able to use a grant.
#[derive(Clone, Debug)]
pub struct GrantIssued<'a> {
    /// A fingerprint of the token.
    pub grant_id: &'a str,
    /// The tools it covers.
    pub tools: &'a [String],
    /// The trace it is limited to, if any.
    pub trace_id: Option<&'a str>,
    /// The path prefixes it is limited to (empty: any path).
    pub paths: &'a [String],
    /// When it stops working.
    pub expires_at: SystemTime,
    /// Whether it survives its first use.
    pub reusable: bool,
    /// The session that asked for it.
    pub issued_by: &'a str,
}

impl Record for GrantIssued<'_> {
    const KIND: &'static str = "grant_issued";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({
            "grant_id": self.grant_id, "tools": self.tools, "trace_id": self.trace_id,
            "paths": self.paths, "expires_at": rfc3339_millis(self.expires_at),
            "reusable": self.reusable, "issued_by": self.issued_by,
        }))
    }
}

/// `grant_used`: a call passed an `ask` with a grant.
#[derive(Clone, Debug)]
pub struct GrantUsed<'a> {
    /// The grant's fingerprint.
    pub grant_id: &'a str,
    /// The call it let through.
    pub call_id: &'a str,
    /// The call's tool.
    pub tool: &'a str,
}

impl Record for GrantUsed<'_> {
    const KIND: &'static str = "grant_used";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({"grant_id": self.grant_id, "call_id": self.call_id, "tool": self.tool}))
    }
}

/// `worker_started`.
#[derive(Clone, Debug)]
pub struct WorkerStarted<'a> {
    /// Its group.
    pub group: &'a str,
    /// Its slot in the group.
    pub index: usize,
    /// The process the supervisor spawned.
    pub pid: u32,
}

impl Record for WorkerStarted<'_> {
    const KIND: &'static str = "worker_started";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({"group": self.group, "index": self.index, "pid": self.pid}))
    }
}

/// `worker_exited`: exit `code` or `signal` (one of them is null).
#[derive(Clone, Debug)]
pub struct WorkerExited<'a> {
    /// Its group.
    pub group: &'a str,
    /// Its slot in the group.
    pub index: usize,
    /// The process that ended.
    pub pid: u32,
    /// Its exit code, if it exited.
    pub code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
    /// Why: `crashed`, `not_ready`, `protocol_violation`, `operator_restart`, `reload`,
    /// `memory`, `shutdown`, `retired`.
    pub reason: &'a str,
}

impl Record for WorkerExited<'_> {
    const KIND: &'static str = "worker_exited";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({
            "group": self.group, "index": self.index, "pid": self.pid,
            "code": self.code, "signal": self.signal, "reason": self.reason,
        }))
    }
}

/// `supervisor_started`.
#[derive(Clone, Debug)]
pub struct SupervisorStarted<'a> {
    /// The supervisor's pid.
    pub pid: u32,
    /// toolvisor's version.
    pub version: &'a str,
    /// The workspace it serves.
    pub workspace: &'a str,
    /// The instance marker every command of this run carries (to find leftovers later).
    pub instance_id: &'a str,
}

impl Record for SupervisorStarted<'_> {
    const KIND: &'static str = "supervisor_started";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({
            "pid": self.pid, "version": self.version,
            "workspace": self.workspace, "instance_id": self.instance_id,
        }))
    }
}

/// `supervisor_stopped`: why (`SIGTERM`, `SIGINT`, …).
#[derive(Clone, Debug)]
pub struct SupervisorStopped<'a> {
    /// Why it stopped.
    pub reason: &'a str,
}

impl Record for SupervisorStopped<'_> {
    const KIND: &'static str = "supervisor_stopped";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({"reason": self.reason}))
    }
}

/// `connection`: one connection a command made (or was refused) through its egress
/// proxy.
#[derive(Clone, Debug)]
pub struct Connection<'a> {
    /// The call that started the command (`s3:c7`).
    pub call_id: &'a str,
    /// The host asked for.
    pub host: &'a str,
    /// Its port.
    pub port: u16,
    /// `allowed` (listed), `approved` (a person said yes) or `denied`.
    pub decision: &'a str,
    /// Bytes from the command to the host.
    pub sent: u64,
    /// Bytes from the host to the command.
    pub received: u64,
    /// Why it was refused or failed, when it was.
    pub reason: Option<&'a str>,
}

impl Record for Connection<'_> {
    const KIND: &'static str = "connection";
    fn fields(&self) -> Map<String, Value> {
        let mut m = obj(json!({
            "call_id": self.call_id, "host": self.host, "port": self.port,
            "decision": self.decision, "sent": self.sent, "received": self.received,
        }));
        if let Some(r) = self.reason {
            m.insert("reason".into(), Value::String(r.to_owned()));
        }
        m
    }
}

/// `relay`: an MCP server asked the client of a call running on it something
/// (sampling, elicitation), passed on or refused. What was asked and answered is not
/// kept: it is the model's or the person's words.
#[derive(Clone, Debug)]
pub struct Relayed<'a> {
    /// The call the server asked during (`s3:c7`).
    pub call_id: &'a str,
    /// The MCP server (`[mcp.servers.NAME]`).
    pub server: &'a str,
    /// The MCP method.
    pub method: &'a str,
    /// `answered`, `error` (the client answered an error), or `refused` (not passed on).
    pub outcome: &'a str,
}

impl Record for Relayed<'_> {
    const KIND: &'static str = "relay";
    fn fields(&self) -> Map<String, Value> {
        obj(
            json!({"call_id": self.call_id, "server": self.server, "method": self.method,
                   "outcome": self.outcome}),
        )
    }
}

/// `guards_verified`: what the canary command found, guard by guard (`true` or the
/// reason it failed), at start, after a reload and for `doctor`.
#[derive(Clone, Debug)]
pub struct GuardsVerified<'a> {
    /// Guard name → `true` or the reason it is not verified.
    pub verified: &'a Map<String, Value>,
    /// Whether every guard was verified.
    pub all: bool,
}

impl Record for GuardsVerified<'_> {
    const KIND: &'static str = "guards_verified";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({"verified": self.verified, "all": self.all}))
    }
}

/// `config_reloaded`: `config_sha256` lets an operator tie behaviour to a file version.
#[derive(Clone, Debug)]
pub struct ConfigReloaded<'a> {
    /// The configuration file read.
    pub path: &'a str,
    /// Its content's hash.
    pub config_sha256: &'a str,
}

impl Record for ConfigReloaded<'_> {
    const KIND: &'static str = "config_reloaded";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({"path": self.path, "config_sha256": self.config_sha256}))
    }
}

/// `config_reload_failed`: the old config stays in force.
#[derive(Clone, Debug)]
pub struct ConfigReloadFailed<'a> {
    /// The configuration file read.
    pub path: &'a str,
    /// Why it was refused.
    pub error: &'a str,
}

impl Record for ConfigReloadFailed<'_> {
    const KIND: &'static str = "config_reload_failed";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({"path": self.path, "error": self.error}))
    }
}

/// `tools_changed`: a group's worker announced a different set of tools (an MCP
/// server's first list or its `list_changed`, an external worker's `tools`, skills
/// found or gone).
#[derive(Clone, Debug)]
pub struct ToolsChanged<'a> {
    /// The group (`mcp:github`, `meta`, an external group).
    pub group: &'a str,
    /// The names of its tools now, sorted.
    pub tools: &'a [String],
}

impl Record for ToolsChanged<'_> {
    const KIND: &'static str = "tools_changed";
    fn fields(&self) -> Map<String, Value> {
        obj(json!({"group": self.group, "tools": self.tools}))
    }
}

/// `recovered`: written by the audit log itself. `reason` is one of `torn_tail`,
/// `chain_break`, `cut_short`, `resumed`; the other fields depend on it.
pub(crate) fn recovered(reason: &str, details: Value) -> Map<String, Value> {
    let mut m = obj(details);
    m.insert("reason".into(), reason.into());
    m
}

#[cfg(test)]
mod tests;
