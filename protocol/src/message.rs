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
];

/// One tool call, alone (`call`) or inside a `batch`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallRequest {
    pub id: Id,
    pub tool: String,
    #[serde(default = "empty_args")]
    pub args: Value,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub confirm_token: Option<String>,
}

fn empty_args() -> Value {
    Value::Object(Map::new())
}

impl CallRequest {
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

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolFormat {
    #[default]
    Native,
    Openai,
    Mcp,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Remember {
    #[default]
    Once,
    Session,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Topic {
    Calls,
    Confirmations,
    Workers,
}

/// Client → server.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientMessage {
    Hello {
        protocol: u32,
        client: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        interactive: Option<bool>,
    },
    ListTools {
        id: Id,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        format: Option<ToolFormat>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        groups: Option<Vec<String>>,
    },
    Call(CallRequest),
    Batch {
        id: Id,
        calls: Vec<CallRequest>,
    },
    Cancel {
        id: Id,
    },
    Confirm {
        interaction: String,
        approve: bool,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        remember: Option<Remember>,
    },
    Grant {
        id: Id,
        tools: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        trace_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        paths: Option<Vec<String>>,
        ttl_ms: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        reusable: Option<bool>,
    },
    Subscribe {
        id: Id,
        topics: Vec<Topic>,
    },
    Status {
        id: Id,
    },
    Restart {
        id: Id,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        group: Option<String>,
    },
    Ping {
        id: Id,
    },
    /// Run validation and policy for a call without running it or asking anyone.
    Explain {
        id: Id,
        tool: String,
        #[serde(default = "empty_args")]
        args: Value,
    },
}

/// One simple command of an explained `run_command`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ExplainedPart {
    pub text: String,
    pub words: Vec<String>,
    pub decision: String,
    /// The deciding rule's index in file order, from 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<u64>,
    pub hazards: Vec<String>,
}

/// The outcome class of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    Error,
    Denied,
    Timeout,
    Cancelled,
    Crashed,
}

impl Status {
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
    pub omitted_bytes: u64,
    pub omitted_lines: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_output: Option<String>,
}

/// The one `result` every call gets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub id: Id,
    pub status: Status,
    pub content: String,
    pub display: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorBody>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<Truncated>,
    #[serde(default = "empty_args")]
    pub meta: Value,
    pub duration_ms: u64,
    #[serde(default)]
    pub audit_seq: u64,
}

/// One worker's line in `status`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub group: String,
    pub index: u32,
    pub pid: Option<u32>,
    pub state: String,
    pub restarts: u32,
    pub in_flight: u32,
    pub rss_bytes: u64,
    pub cpu_percent: f32,
}

/// A call in flight, in `status.calls`: dispatched to a worker and not yet ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallStatus {
    pub id: Id,
    pub session: String,
    pub tool: String,
    /// Since it was dispatched to a worker.
    pub running_ms: u64,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct AuditStatus {
    pub path: String,
    pub seq: u64,
}

/// Which protections are active (`status.guards`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Guards {
    /// The Landlock ABI version enforced, or null when none.
    #[serde(default)]
    pub landlock: Option<u32>,
    #[serde(default)]
    pub openat2: bool,
    #[serde(default)]
    pub subreaper: bool,
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
    Welcome {
        protocol: u32,
        server: String,
        session: String,
        tools: u32,
    },
    Tools {
        id: Id,
        tools: Vec<Value>,
    },
    Output {
        id: Id,
        stream: String,
        data: String,
    },
    ConfirmRequired {
        id: Id,
        interaction: String,
        tool: String,
        description: String,
        risk: String,
        locations: Vec<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        preview: Option<String>,
        expires_in_ms: u64,
    },
    Result(ToolResult),
    BatchDone {
        id: Id,
        ids: Vec<Id>,
    },
    Confirmed {
        interaction: String,
        approve: bool,
    },
    Token {
        id: Id,
        token: String,
        expires_at: String,
    },
    Subscribed {
        id: Id,
    },
    Event {
        topic: Topic,
        event: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        dropped: Option<u64>,
        #[serde(flatten)]
        fields: Map<String, Value>,
    },
    Status {
        id: Id,
        uptime_ms: u64,
        workers: Vec<WorkerStatus>,
        audit: AuditStatus,
        guards: Guards,
        /// The calls in flight, longest running first.
        #[serde(default)]
        calls: Vec<CallStatus>,
    },
    Ack {
        id: Id,
    },
    Pong {
        id: Id,
    },
    Error {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        id: Option<Id>,
        error: ErrorBody,
    },
    /// The answer to `explain`: what the policy would do with the call.
    Explanation {
        id: Id,
        /// `allow`, `deny`, `ask`, or `error` when the call fails validation.
        decision: String,
        risk: String,
        reason: String,
        /// The deciding rule's index in file order, from 0.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        rule: Option<u64>,
        /// For `run_command`: one entry per simple command.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        parts: Option<Vec<ExplainedPart>>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<ErrorBody>,
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
