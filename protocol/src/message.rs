//! Every message of the client protocol (docs/PROTOCOL.md), as serde types.
//!
//! Messages are internally tagged by `type`, serialized as maps (`to_vec_named`), and
//! unknown keys are ignored on the way in.

use crate::{ErrorBody, Id};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The `type` values a client may send.
pub const KNOWN_CLIENT_TYPES: &[&str] = &[
    "hello",
    "list_tools",
    "call",
    "batch",
    "cancel",
    "confirm",
    "grant",
    "subscribe",
    "status",
    "restart",
    "ping",
    "explain",
    "envelope",
];

/// The `type` values the server sends.
pub const KNOWN_SERVER_TYPES: &[&str] = &[
    "welcome",
    "tools",
    "output",
    "confirm_required",
    "result",
    "batch_done",
    "confirmed",
    "token",
    "subscribed",
    "event",
    "status",
    "ack",
    "pong",
    "error",
    "explanation",
    "envelope_done",
];

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
    /// A shorter deadline than the tool's default (never a longer one than its maximum).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Send `output` while the tool runs (commands only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    /// A grant's token: lets a call the policy would ask about run without asking.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_token: Option<String>,
}

fn empty_args() -> Value {
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
    /// A model's text with (at most) one fenced `yips-agent` or `yips-tools` block: its
    /// tool actions run as a batch.
    Envelope {
        /// The request's id (its batch's events and `envelope_done` carry it).
        id: Id,
        /// The model's whole reply.
        text: String,
    },
}

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

/// The outcome class of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// The tool did its work.
    Ok,
    /// Refused before running, or the tool failed (`error.type` says which).
    Error,
    /// A policy outcome: denied, not confirmed, or not asked in time.
    Denied,
    /// The deadline passed.
    Timeout,
    /// Cancelled by the client, or by the server draining.
    Cancelled,
    /// The worker died with the call in flight.
    Crashed,
}

impl Status {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Error => "error",
            Status::Denied => "denied",
            Status::Timeout => "timeout",
            Status::Cancelled => "cancelled",
            Status::Crashed => "crashed",
        }
    }
}

/// What truncation left out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Truncated {
    /// Bytes left out.
    pub omitted_bytes: u64,
    /// Lines (or entries, or matches) left out.
    pub omitted_lines: u64,
    /// Where the whole output is kept (commands only), as `read_file` reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_output: Option<String>,
}

/// The one `result` every call gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    /// The call's id, as sent.
    pub id: Id,
    /// How the call ended.
    pub status: Status,
    /// What the model reads; `Error: <message>` on failure, except a command's output.
    pub content: String,
    /// A short text for a person.
    pub display: String,
    /// Why it failed; present exactly when `status` is not `ok`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    /// What was cut, when something was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Truncated>,
    /// Tool-specific data (exit code, counts, the policy's reason).
    #[serde(default = "empty_args")]
    pub meta: Value,
    /// From receipt of the call to its result.
    pub duration_ms: u64,
    /// The `seq` of the call's last audit record, to find it in the log.
    #[serde(default)]
    pub audit_seq: u64,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;
    use proptest::prelude::*;
    use serde_json::json;

    fn round_trip_client(m: &ClientMessage) {
        let bytes = frame::encode(m).unwrap();
        let back: ClientMessage = frame::decode(&bytes[4..], KNOWN_CLIENT_TYPES).unwrap();
        assert_eq!(&back, m);
    }

    fn round_trip_server(m: &ServerMessage) {
        let bytes = frame::encode(m).unwrap();
        let back: ServerMessage = frame::decode(&bytes[4..], KNOWN_SERVER_TYPES).unwrap();
        assert_eq!(&back, m);
    }

    fn arb_id() -> impl Strategy<Value = Id> {
        prop_oneof![
            "[a-z0-9-]{1,12}".prop_map(Id::Str),
            any::<i64>().prop_map(Id::Int)
        ]
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,20}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::btree_map("[a-zA-Z_]{1,8}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn arb_call() -> impl Strategy<Value = CallRequest> {
        (
            arb_id(),
            "[a-z_]{1,16}",
            prop::collection::btree_map("[a-zA-Z]{1,8}", arb_json(), 0..5),
            prop::option::of(".{0,8}"),
            prop::option::of(any::<u64>()),
            prop::option::of(any::<bool>()),
            prop::option::of("[a-f0-9]{8}"),
        )
            .prop_map(
                |(id, tool, args, trace_id, timeout_ms, stream, confirm_token)| CallRequest {
                    id,
                    tool,
                    args: Value::Object(args.into_iter().collect()),
                    trace_id,
                    timeout_ms,
                    stream,
                    confirm_token,
                },
            )
    }

    fn arb_client() -> impl Strategy<Value = ClientMessage> {
        prop_oneof![
            (any::<u32>(), ".{0,10}", prop::option::of(any::<bool>())).prop_map(
                |(protocol, client, interactive)| ClientMessage::Hello {
                    protocol,
                    client,
                    interactive
                }
            ),
            (
                arb_id(),
                prop::option::of(prop_oneof![
                    Just(ToolFormat::Native),
                    Just(ToolFormat::Openai),
                    Just(ToolFormat::Mcp)
                ])
            )
                .prop_map(|(id, format)| ClientMessage::ListTools {
                    id,
                    format,
                    groups: Some(vec!["search".into()])
                }),
            arb_call().prop_map(ClientMessage::Call),
            (arb_id(), prop::collection::vec(arb_call(), 0..4))
                .prop_map(|(id, calls)| ClientMessage::Batch { id, calls }),
            arb_id().prop_map(|id| ClientMessage::Cancel { id }),
            ("[a-z0-9]{1,10}", any::<bool>()).prop_map(|(interaction, approve)| {
                ClientMessage::Confirm {
                    interaction,
                    approve,
                    remember: Some(Remember::Session),
                }
            }),
            (arb_id(), any::<u64>(), any::<bool>()).prop_map(|(id, ttl_ms, r)| {
                ClientMessage::Grant {
                    id,
                    tools: vec!["run_command".into()],
                    trace_id: None,
                    paths: Some(vec!["src".into()]),
                    ttl_ms,
                    reusable: Some(r),
                }
            }),
            arb_id().prop_map(|id| ClientMessage::Subscribe {
                id,
                topics: vec![Topic::Calls, Topic::Workers, Topic::Confirmations]
            }),
            arb_id().prop_map(|id| ClientMessage::Status { id }),
            arb_id().prop_map(|id| ClientMessage::Restart {
                id,
                group: Some("exec".into())
            }),
            arb_id().prop_map(|id| ClientMessage::Ping { id }),
            (arb_id(), ".{0,40}").prop_map(|(id, text)| ClientMessage::Envelope { id, text }),
        ]
    }

    proptest! {
        #[test]
        fn every_client_message_round_trips(m in arb_client()) {
            round_trip_client(&m);
        }

        #[test]
        fn results_round_trip(id in arb_id(), content in ".{0,64}", meta in arb_json(),
                              d in any::<u64>(), seq in any::<u64>()) {
            let meta = match meta { Value::Object(_) => meta, _ => json!({}) };
            round_trip_server(&ServerMessage::Result(ToolResult {
                id,
                status: Status::Error,
                content: content.clone(),
                display: content,
                error: Some(ErrorBody::new(crate::ErrorType::InvalidParams, "x")),
                truncated: Some(Truncated { omitted_bytes: 3, omitted_lines: 1, full_output: None }),
                meta,
                duration_ms: d,
                audit_seq: seq,
            }));
        }

        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = frame::decode::<ClientMessage>(&bytes, KNOWN_CLIENT_TYPES);
        }
    }

    #[test]
    fn every_server_message_round_trips() {
        let id: Id = "a".into();
        let msgs = vec![
            ServerMessage::Welcome {
                protocol: 1,
                server: "toolvisor/0.1.0".into(),
                session: "s1".into(),
                tools: 14,
            },
            ServerMessage::Tools {
                id: id.clone(),
                tools: vec![json!({"name": "ls"})],
            },
            ServerMessage::Output {
                id: id.clone(),
                stream: "stdout".into(),
                data: "hi".into(),
            },
            ServerMessage::ConfirmRequired {
                id: id.clone(),
                interaction: "i1".into(),
                tool: "run_command".into(),
                description: "run ls".into(),
                risk: "high".into(),
                locations: vec![".".into()],
                preview: Some("ls".into()),
                expires_in_ms: 60000,
            },
            ServerMessage::BatchDone {
                id: id.clone(),
                ids: vec!["x".into(), Id::Int(2)],
            },
            ServerMessage::Confirmed {
                interaction: "i1".into(),
                approve: true,
            },
            ServerMessage::Token {
                id: id.clone(),
                token: "t".into(),
                expires_at: "2026-01-01T00:00:00Z".into(),
            },
            ServerMessage::Subscribed { id: id.clone() },
            ServerMessage::Event {
                topic: Topic::Workers,
                event: "worker_started".into(),
                dropped: Some(2),
                fields: json!({"group": "search", "index": 0, "pid": 7})
                    .as_object()
                    .unwrap()
                    .clone(),
            },
            ServerMessage::Status {
                id: id.clone(),
                uptime_ms: 5,
                workers: vec![WorkerStatus {
                    group: "search".into(),
                    index: 0,
                    pid: None,
                    state: "failed".into(),
                    restarts: 5,
                    in_flight: 0,
                    rss_bytes: 0,
                    cpu_percent: 0.0,
                }],
                audit: AuditStatus {
                    path: "/x".into(),
                    seq: 4,
                },
                guards: Guards {
                    landlock: Some(7),
                    openat2: true,
                    subreaper: true,
                    cgroup: false,
                    namespaces: true,
                    network: false,
                    protected: vec![".git/config".into()],
                    limits: Some("cgroup1".into()),
                },
                calls: vec![CallStatus {
                    id: Id::Int(3),
                    session: "s1".into(),
                    tool: "run_command".into(),
                    running_ms: 1200,
                }],
            },
            ServerMessage::Ack { id: id.clone() },
            ServerMessage::Pong { id: id.clone() },
            ServerMessage::EnvelopeDone {
                id: id.clone(),
                assistant_text: "done".into(),
                ids: vec!["t1".into(), Id::Int(2)],
            },
            ServerMessage::error(Some(id), crate::ErrorType::DuplicateCallId, "dup"),
            ServerMessage::error(None, crate::ErrorType::BadMessage, "bad"),
        ];
        for m in &msgs {
            round_trip_server(m);
        }
    }

    #[test]
    fn unknown_keys_are_ignored() {
        let v = rmpv::Value::Map(vec![
            ("type".into(), "ping".into()),
            ("id".into(), "p".into()),
            ("future_field".into(), rmpv::Value::Array(vec![1.into()])),
        ]);
        let mut b = Vec::new();
        rmpv::encode::write_value(&mut b, &v).unwrap();
        let m: ClientMessage = frame::decode(&b, KNOWN_CLIENT_TYPES).unwrap();
        assert_eq!(m, ClientMessage::Ping { id: "p".into() });
    }

    #[test]
    fn explain_messages_round_trip() {
        round_trip_client(&ClientMessage::Explain {
            id: "e".into(),
            tool: "run_command".into(),
            args: json!({"command": "git status; rm -rf /"}),
        });
        round_trip_server(&ServerMessage::Explanation {
            id: "e".into(),
            decision: "ask".into(),
            risk: "high".into(),
            reason: "no rule allows `rm -rf /`".into(),
            rule: Some(0),
            parts: Some(vec![ExplainedPart {
                text: "git status".into(),
                words: vec!["git".into(), "status".into()],
                decision: "allow".into(),
                rule: Some(0),
                hazards: vec![],
            }]),
            error: None,
        });
        round_trip_server(&ServerMessage::Explanation {
            id: Id::Int(3),
            decision: "error".into(),
            risk: "high".into(),
            reason: "unknown tool".into(),
            rule: None,
            parts: None,
            error: Some(ErrorBody::new(crate::ErrorType::ToolNotFound, "nope")),
        });
        let v = rmpv::Value::Map(vec![
            ("type".into(), "explain".into()),
            ("id".into(), "x".into()),
            ("tool".into(), "ls".into()),
        ]);
        let mut b = Vec::new();
        rmpv::encode::write_value(&mut b, &v).unwrap();
        let m: ClientMessage = frame::decode(&b, KNOWN_CLIENT_TYPES).unwrap();
        assert!(matches!(m, ClientMessage::Explain { ref args, .. } if args == &json!({})));
    }
}
