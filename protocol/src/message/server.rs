//! What the server sends besides results: answers to requests, events, errors.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{ErrorBody, Id};

use super::*;

/// One simple command of an explained `run_command`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainedPart {
    /// The command's source text.
    pub text: String,
    /// Its words after quote removal: what `command` conditions test.
    pub words: Vec<String>,
    /// `allow`, `deny` or `ask`, for this part alone.
    pub decision: String,
    /// The deciding rule's index in file order, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<u64>,
    /// The short names of what the words do not show (`command substitution`, `git -c`).
    pub hazards: Vec<String>,
}

/// One worker's line in `status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    /// Its group.
    pub group: String,
    /// Its slot in the group.
    pub index: u32,
    /// Its process (none while it has none: starting, failed).
    pub pid: Option<u32>,
    /// `starting`, `ready`, `restarting`, `failed` or `stopping`.
    pub state: String,
    /// How often its process was replaced.
    pub restarts: u32,
    /// Calls running on it now.
    pub in_flight: u32,
    /// Its process's resident memory.
    pub rss_bytes: u64,
    /// Its process's CPU use since the last status.
    pub cpu_percent: f32,
}

/// A call in flight, in `status.calls`: dispatched to a worker and not yet ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallStatus {
    /// The call's id.
    pub id: Id,
    /// The session that made it.
    pub session: String,
    /// The tool called.
    pub tool: String,
    /// Since it was dispatched to a worker.
    pub running_ms: u64,
}

/// The audit log in `status`: where it is and how far it got.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditStatus {
    /// The active log file.
    pub path: String,
    /// The `seq` of the last record written.
    pub seq: u64,
}

/// Which protections are active (`status.guards`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Guards {
    /// The Landlock ABI version enforced, or null when none.
    #[serde(default)]
    pub landlock: Option<u32>,
    /// Paths open confined by the kernel (`openat2` `RESOLVE_BENEATH`); false: the
    /// component-by-component fallback.
    #[serde(default)]
    pub openat2: bool,
    /// Workers reap what commands leave behind (a child subreaper).
    #[serde(default)]
    pub subreaper: bool,
    /// Each command runs in its own cgroup, so it can be killed and measured as a whole.
    #[serde(default)]
    pub cgroup: bool,
    /// Commands run in their own user, mount, PID, network, IPC and UTS namespaces.
    #[serde(default)]
    pub namespaces: bool,
    /// Commands reach the host's network (false: only their own `lo`).
    #[serde(default)]
    pub network: bool,
    /// The paths commands and edit tools may not change (workspace-relative names,
    /// the config file as a path).
    #[serde(default)]
    pub protected: Vec<String>,
    /// How `[workers.exec.limits]` are enforced: `cgroup2`, `cgroup1` or `rlimit`.
    #[serde(default)]
    pub limits: Option<String>,
    /// What the last canary command found, guard by guard: `true`, or the reason the
    /// guard did not hold (empty until the first canary, run at start, has ended).
    #[serde(default)]
    pub verified: std::collections::BTreeMap<String, serde_json::Value>,
}

/// Server → client.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// The session is open.
    Welcome {
        /// The protocol version the server speaks (1).
        protocol: u32,
        /// `toolvisor/X.Y.Z`.
        server: String,
        /// The session's id, unique per server run (audit records and events name it).
        session: String,
        /// How many tools `list_tools` answers (aliases not counted).
        tools: u32,
    },
    /// The answer to `list_tools`, sorted by name.
    Tools {
        /// The request's id.
        id: Id,
        /// One entry per tool, in the asked shape.
        tools: Vec<Value>,
    },
    /// A chunk of a streaming call's output; all of a call's come before its result.
    Output {
        /// The call's id.
        id: Id,
        /// `stdout` or `stderr`.
        stream: String,
        /// At most 16 KiB of text.
        data: String,
    },
    /// A person must approve the call (interactive sessions only).
    ConfirmRequired {
        /// The call's id.
        id: Id,
        /// What `confirm` names to answer.
        interaction: String,
        /// The tool's canonical name.
        tool: String,
        /// One line: what the call will do.
        description: String,
        /// `low`, `medium` or `high`.
        risk: String,
        /// The resolved paths the call touches.
        locations: Vec<String>,
        /// The command, or the diff of an edit.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preview: Option<String>,
        /// How long an answer is waited for.
        expires_in_ms: u64,
    },
    /// An MCP server asks the client something while the call `id` runs on it
    /// (sampling, elicitation), for a client whose `hello` named the method in `relay`.
    /// One `relay_answer` with the same `request` answers it.
    RelayRequest {
        /// The call running on the server.
        id: Id,
        /// Unique in the session; echoed by `relay_answer`.
        request: u64,
        /// The MCP server that asks (`[mcp.servers.NAME]`).
        server: String,
        /// `sampling/createMessage` or `elicitation/create`.
        method: String,
        /// The request's MCP params, as the server sent them.
        params: Value,
    },
    /// A call's one result.
    Result(ToolResult),
    /// Every call of a batch has its result.
    BatchDone {
        /// The batch's id.
        id: Id,
        /// The calls that ran, in request order.
        ids: Vec<Id>,
    },
    /// The answer to `confirm`.
    Confirmed {
        /// The interaction answered.
        interaction: String,
        /// The answer given.
        approve: bool,
    },
    /// The answer to `grant`.
    Token {
        /// The request's id.
        id: Id,
        /// What a call passes as `confirm_token`.
        token: String,
        /// When it stops working (RFC 3339, UTC).
        expires_at: String,
    },
    /// The answer to `subscribe`; events follow.
    Subscribed {
        /// The request's id.
        id: Id,
    },
    /// Something happened on a subscribed topic.
    Event {
        /// The topic.
        topic: Topic,
        /// What happened (`call_started`, `worker_exited`, …).
        event: String,
        /// Events lost before this one because the subscriber read too slowly.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dropped: Option<u64>,
        /// The event's own fields.
        #[serde(flatten)]
        fields: Map<String, Value>,
    },
    /// The answer to `status`.
    Status {
        /// The request's id.
        id: Id,
        /// Since the server started.
        uptime_ms: u64,
        /// Every worker of every group.
        workers: Vec<WorkerStatus>,
        /// Where the audit log is and how far it got.
        audit: AuditStatus,
        /// What confines tools and commands here.
        guards: Guards,
        /// The calls in flight, longest running first.
        #[serde(default)]
        calls: Vec<CallStatus>,
    },
    /// The answer to `restart`, once it is done.
    Ack {
        /// The request's id.
        id: Id,
    },
    /// The answer to `ping`.
    Pong {
        /// The request's id.
        id: Id,
    },
    /// A connection-level error: the request was not taken.
    Error {
        /// The request's id, when it had one that could be read.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<Id>,
        /// What was wrong.
        error: ErrorBody,
    },
    /// The answer to `explain`: what the policy would do with the call.
    Explanation {
        /// The request's id.
        id: Id,
        /// `allow`, `deny`, `ask`, or `error` when the call fails validation.
        decision: String,
        /// `low`, `medium` or `high`, as a confirmation would show it.
        risk: String,
        /// The sentence the result's `meta.policy.reason` and the audit log would carry.
        reason: String,
        /// The deciding rule's index in file order, from 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<u64>,
        /// For `run_command`: one entry per simple command.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parts: Option<Vec<ExplainedPart>>,
        /// Why the call fails validation, when `decision` is `error`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorBody>,
    },
    /// The answer to `undo`.
    Undone {
        /// The request's id.
        id: Id,
        /// The calls undone (or, dry, that would be), newest first.
        calls: Vec<String>,
        /// Paths put back to what they were.
        restored: Vec<String>,
        /// Paths removed (those calls made them).
        removed: Vec<String>,
        /// Paths left alone because something changed them since.
        conflicts: Vec<UndoConflict>,
        /// Calls (or parts) that cannot be undone.
        not_undoable: Vec<NotUndoable>,
        /// Whether nothing was changed (a dry run).
        dry_run: bool,
        /// This undo's own id in the journal: undo it to redo what it put back.
        call_id: String,
    },
    /// An envelope's end: after its batch's `batch_done` (when it had a block).
    EnvelopeDone {
        /// The envelope's id.
        id: Id,
        /// The reply's text outside the block, for the person to read.
        assistant_text: String,
        /// Every action id of the block, in order (unsupported ones included).
        ids: Vec<Id>,
    },
}

impl ServerMessage {
    /// A connection-level error.
    pub fn error(id: Option<Id>, kind: crate::ErrorType, message: impl Into<String>) -> Self {
        ServerMessage::Error {
            id,
            error: ErrorBody::new(kind, message),
        }
    }
}

/// A path an undo left alone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct UndoConflict {
    /// The path, as the tools show it.
    pub path: String,
    /// What changed it since.
    pub reason: String,
}

/// A call an undo could not put back (whole or in part).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NotUndoable {
    /// The call's audit id.
    pub call: String,
    /// Why.
    pub reason: String,
}
