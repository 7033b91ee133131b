//! Every message of the client protocol (docs/PROTOCOL.md), as serde types.
//!
//! Messages are internally tagged by `type`, serialized as maps (`to_vec_named`), and
//! unknown keys are ignored on the way in.

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
    "undo",
    "hook",
    "relay_answer",
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
    "undone",
    "relay_request",
];

mod client;
mod result;
mod server;

pub use client::*;
pub use result::*;
pub use server::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame;
    use crate::{ErrorBody, Id};
    use proptest::prelude::*;
    use serde_json::Value;
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
                    interactive,
                    relay: Vec::new(),
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
                    verified: [("hidden".to_owned(), serde_json::Value::Bool(true))]
                        .into_iter()
                        .collect(),
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

    #[test]
    fn hook_messages_round_trip() {
        round_trip_client(&ClientMessage::Hook {
            id: "h".into(),
            phase: HookPhase::Before,
            call: "toolu_01".into(),
            tool: "run_command".into(),
            args: json!({"command": "ls"}),
            status: None,
            summary: None,
        });
        round_trip_client(&ClientMessage::Hook {
            id: "h2".into(),
            phase: HookPhase::After,
            call: "toolu_01".into(),
            tool: "read_file".into(),
            args: json!({"path": "a"}),
            status: Some("error".into()),
            summary: Some("no such file".into()),
        });
    }
}
