//! What a client sends: `hello`, calls, batches, envelopes, confirmations, grants,
//! subscriptions and the operator's requests.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::Id;

/// One tool call, alone (`call`) or inside a `batch`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRequest {
    /// The client's id for the call; every answer about it echoes it.
    pub id: Id,
    /// The tool's name or one of its aliases.
    pub tool: String,
    /// The arguments (left out: `{}`), checked against the tool's schema.
    #[serde(default = "empty_args")]
    pub args: Value,
    /// A client's id tying calls together in the audit log, and what a grant may be limited
    /// to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// The call's deadline instead of its group's default (never longer than its maximum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Send `output` while the tool runs (commands only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// A grant's token: lets a call the policy would ask about run without asking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_token: Option<String>,
}

pub(super) fn empty_args() -> Value {
    Value::Object(Map::new())
}

impl CallRequest {
    /// A call with only the required fields.
    pub fn new(id: impl Into<Id>, tool: impl Into<String>, args: Value) -> Self {
        CallRequest {
            id: id.into(),
            tool: tool.into(),
            args,
            trace_id: None,
            timeout_ms: None,
            stream: None,
            confirm_token: None,
        }
    }
}

/// The shape `list_tools` answers in, so a client can hand the list to its model as is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolFormat {
    /// toolvisor's own shape: group, risk and aliases included.
    #[default]
    Native,
    /// OpenAI's function-calling shape.
    Openai,
    /// MCP's `tools/list` shape, annotations included.
    Mcp,
}

/// How far a person's approval reaches.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Remember {
    /// This call only.
    #[default]
    Once,
    /// Also later calls of the same tool with the same arguments in the asking session.
    Session,
}

/// What a subscriber hears about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Topic {
    /// Calls and batches starting, running and ending.
    Calls,
    /// Confirmations asked and answered (for a person answering for agents).
    Confirmations,
    /// Worker processes starting, failing and exiting.
    Workers,
}

/// Client → server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    /// Opens the session; nothing else is taken before it.
    Hello {
        /// The protocol version the client speaks (1).
        protocol: u32,
        /// A free name for logs and the audit log.
        client: String,
        /// Whether a person is there to answer `confirm_required` (default: no, and calls
        /// that need asking are denied).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interactive: Option<bool>,
        /// The requests of MCP servers this client answers when one of its calls runs
        /// on them (`sampling/createMessage`, `elicitation/create`): each comes as a
        /// `relay_request`, answered by `relay_answer`. Absent: none (the server is
        /// told the client cannot answer).
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        relay: Vec<String>,
    },
    /// Ask for the tools.
    ListTools {
        /// Echoed in `tools`.
        id: Id,
        /// The shape of each entry (default `native`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        format: Option<ToolFormat>,
        /// Only the tools of these groups.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        groups: Option<Vec<String>>,
    },
    /// Run one tool call.
    Call(CallRequest),
    /// Run several calls, concurrently where the policy lets them; `batch_done` ends it.
    Batch {
        /// The batch's own id (`cancel` takes it, `batch_done` echoes it).
        id: Id,
        /// The calls, in order.
        calls: Vec<CallRequest>,
    },
    /// Stop an open call or batch; its result still comes, `cancelled`.
    Cancel {
        /// The call's or batch's id.
        id: Id,
    },
    /// Answer a `confirm_required` (any connection of the same user may).
    Confirm {
        /// The interaction asked about.
        interaction: String,
        /// Yes or no.
        approve: bool,
        /// How far a yes reaches (default: this call).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remember: Option<Remember>,
    },
    /// The answer to a `relay_request`: its `result` (the MCP result object), or an
    /// `error` the MCP server gets instead.
    RelayAnswer {
        /// The request answered, from its `relay_request`.
        request: u64,
        /// The MCP result, as the client's model or person gave it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        result: Option<Value>,
        /// Why there is no result.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// Ask for a token that lets calls run without being asked (a person's standing
    /// approval, given ahead).
    Grant {
        /// Echoed in `token`.
        id: Id,
        /// The tools the token covers.
        tools: Vec<String>,
        /// Only calls of this trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace_id: Option<String>,
        /// Only calls whose paths lie under these prefixes.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        paths: Option<Vec<String>>,
        /// How long the token is good for.
        ttl_ms: u64,
        /// Whether the token survives its first use (default: single use).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reusable: Option<bool>,
    },
    /// Hear events on these topics until the connection closes.
    Subscribe {
        /// Echoed in `subscribed`.
        id: Id,
        /// The topics.
        topics: Vec<Topic>,
    },
    /// Ask for the workers, the audit log and the active guards.
    Status {
        /// Echoed in the answer.
        id: Id,
    },
    /// Replace the workers of a group (or of all), one at a time, after their calls end.
    Restart {
        /// Echoed in `ack` once the restart is done.
        id: Id,
        /// The group (default: every group).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
    },
    /// Check the connection.
    Ping {
        /// Echoed in `pong`.
        id: Id,
    },
    /// Run validation and policy for a call without running it or asking anyone.
    Explain {
        /// Echoed in `explanation`.
        id: Id,
        /// The tool's name or alias.
        tool: String,
        /// The arguments, as a call would give them.
        #[serde(default = "empty_args")]
        args: Value,
    },
    /// A call an agent host runs with its own tool, reported by the host's hook: `before`
    /// decides it like `explain` and records it (`requested`, or `rejected` when denied),
    /// `after` records how it ended (`completed`). Answered `explanation` / `ack`.
    Hook {
        /// Echoed in the answer.
        id: Id,
        /// `before` or `after`.
        phase: HookPhase,
        /// The host's id for the call; the audit's `call_id` is `<client>:<call>`.
        call: String,
        /// The tool's name or alias, as toolvisor would call it.
        tool: String,
        /// The arguments, as a call would give them.
        #[serde(default = "empty_args")]
        args: Value,
        /// `after`: `ok` or `error` (default `ok`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        status: Option<String>,
        /// `after`: the first line of the output or error.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        summary: Option<String>,
    },
    /// Put back what earlier calls changed in the workspace, newest first (exactly one
    /// of `calls`, `trace`, `last`).
    Undo {
        /// Echoed in `undone`.
        id: Id,
        /// These calls, by their audit ids (`s3:c7`; a bare `c7` is this session's).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        calls: Option<Vec<String>>,
        /// Every call of this trace.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace: Option<String>,
        /// The newest `last` calls that changed something.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        last: Option<u64>,
        /// Say what would be done, change nothing.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dry_run: Option<bool>,
    },
    /// A model's text with (at most) one fenced `yips-agent` or `yips-tools` block: its
    /// tool actions run as a batch.
    Envelope {
        /// The request's id (its batch's events and `envelope_done` carry it).
        id: Id,
        /// The model's whole reply.
        text: String,
    },
}

/// When a host's hook reports its call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HookPhase {
    /// Before the host runs it: decide and record `requested` (or `rejected`).
    Before,
    /// After it ran: record `completed`.
    After,
}

/// A relayed request's answer as it travels (`relay_answer`: `result` or `error`) made
/// one `Result`: a result without an error is the answer; anything else is an error.
pub fn relay_outcome(result: Option<Value>, error: Option<String>) -> Result<Value, String> {
    match (result, error) {
        (Some(r), None) => Ok(r),
        (_, e) => Err(e.unwrap_or_else(|| "the client answered nothing".into())),
    }
}

/// The `result` and `error` fields of a relayed request's answer.
pub fn relay_fields(answer: Result<Value, String>) -> (Option<Value>, Option<String>) {
    match answer {
        Ok(v) => (Some(v), None),
        Err(e) => (None, Some(e)),
    }
}
