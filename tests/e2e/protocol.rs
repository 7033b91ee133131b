//! The wire protocol's promises, byte by byte.

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use toolvisor_protocol::message::{ClientMessage, ServerMessage};
use toolvisor_protocol::{ErrorType, Id, frame};

use crate::harness::*;

async fn raw(s: &Server) -> UnixStream {
    UnixStream::connect(s.socket()).await.expect("connect")
}

async fn send(sock: &mut UnixStream, msg: &ClientMessage) {
    sock.write_all(&frame::encode(msg).expect("encode"))
        .await
        .expect("write");
}

async fn recv(sock: &mut UnixStream) -> Option<ServerMessage> {
    let body = frame::read_frame(sock, 64 << 20).await.ok()??;
    Some(frame::decode(&body, toolvisor_protocol::message::KNOWN_SERVER_TYPES).expect("decode"))
}

fn error_kind(m: &ServerMessage) -> ErrorType {
    match m {
        ServerMessage::Error { error, .. } => error.kind,
        other => panic!("expected an error, got {other:?}"),
    }
}

async fn hello(sock: &mut UnixStream) {
    send(
        sock,
        &ClientMessage::Hello {
            protocol: 1,
            client: "raw".into(),
            interactive: None,
            relay: Vec::new(),
        },
    )
    .await;
    assert!(matches!(
        recv(sock).await,
        Some(ServerMessage::Welcome { tools: 19, .. })
    ));
}

#[test]
fn hello_is_required_and_welcome_counts_tools() {
    let s = Server::start(ASKING);
    block(T, async {
        let mut sock = raw(&s).await;
        send(&mut sock, &ClientMessage::Ping { id: "p".into() }).await;
        let m = recv(&mut sock).await.expect("answer");
        assert_eq!(error_kind(&m), ErrorType::HelloRequired);
        hello(&mut sock).await;
        send(&mut sock, &ClientMessage::Ping { id: "p".into() }).await;
        assert_eq!(
            recv(&mut sock).await,
            Some(ServerMessage::Pong { id: "p".into() })
        );
    });
}

#[test]
fn garbage_unknown_type_and_bad_fields_keep_the_connection() {
    let s = Server::start(ASKING);
    block(T, async {
        let mut sock = raw(&s).await;
        hello(&mut sock).await;
        // Garbage body.
        sock.write_all(&[0, 0, 0, 3, 0xc1, 0xc1, 0xc1])
            .await
            .unwrap();
        assert_eq!(
            error_kind(&recv(&mut sock).await.unwrap()),
            ErrorType::BadMessage
        );
        // Not a map.
        sock.write_all(&[0, 0, 0, 1, 0x90]).await.unwrap();
        assert_eq!(
            error_kind(&recv(&mut sock).await.unwrap()),
            ErrorType::BadMessage
        );
        // Deep nesting.
        let mut deep = vec![0x91u8; 5000];
        deep.push(0xc0);
        sock.write_all(&(deep.len() as u32).to_be_bytes())
            .await
            .unwrap();
        sock.write_all(&deep).await.unwrap();
        assert_eq!(
            error_kind(&recv(&mut sock).await.unwrap()),
            ErrorType::BadMessage
        );
        // Unknown type.
        let body = rmp_serde::to_vec_named(&json!({"type": "dance", "id": "d"})).unwrap();
        sock.write_all(&(body.len() as u32).to_be_bytes())
            .await
            .unwrap();
        sock.write_all(&body).await.unwrap();
        assert_eq!(
            error_kind(&recv(&mut sock).await.unwrap()),
            ErrorType::UnknownMessage
        );
        // Known type, bad field: the id is echoed.
        let body =
            rmp_serde::to_vec_named(&json!({"type": "call", "id": "c9", "tool": 5})).unwrap();
        sock.write_all(&(body.len() as u32).to_be_bytes())
            .await
            .unwrap();
        sock.write_all(&body).await.unwrap();
        match recv(&mut sock).await.unwrap() {
            ServerMessage::Error { id, error } => {
                assert_eq!(error.kind, ErrorType::BadMessage);
                assert_eq!(id, Some("c9".into()));
            }
            other => panic!("{other:?}"),
        }
        // Still alive.
        send(&mut sock, &ClientMessage::Ping { id: "alive".into() }).await;
        assert_eq!(
            recv(&mut sock).await,
            Some(ServerMessage::Pong { id: "alive".into() })
        );
    });
}

/// Send `v` as one frame and read the `error` it gets: (type, echoed id).
async fn refusal(sock: &mut UnixStream, v: &serde_json::Value) -> (ErrorType, Option<Id>) {
    let body = rmp_serde::to_vec_named(v).expect("encode");
    sock.write_all(&(body.len() as u32).to_be_bytes())
        .await
        .expect("write");
    sock.write_all(&body).await.expect("write");
    match recv(sock).await {
        Some(ServerMessage::Error { id, error }) => (error.kind, id),
        other => panic!("expected an error for {v}, got {other:?}"),
    }
}

#[test]
fn unknown_type_and_untyped_maps_echo_the_id() {
    let s = Server::start(ASKING);
    block(T, async {
        let mut sock = raw(&s).await;
        // Before hello too: the type is refused before hello is looked at.
        assert_eq!(
            refusal(&mut sock, &json!({"type": "dance", "id": "early"})).await,
            (ErrorType::UnknownMessage, Some("early".into()))
        );
        hello(&mut sock).await;
        let cases = [
            (
                json!({"type": "dance", "id": "d1"}),
                ErrorType::UnknownMessage,
                Some("d1".into()),
            ),
            (
                json!({"type": "dance", "id": 7}),
                ErrorType::UnknownMessage,
                Some(Id::Int(7)),
            ),
            (json!({"type": "dance"}), ErrorType::UnknownMessage, None),
            (
                json!({"id": "n1"}),
                ErrorType::BadMessage,
                Some("n1".into()),
            ),
            (
                json!({"type": 5, "id": -3}),
                ErrorType::BadMessage,
                Some(Id::Int(-3)),
            ),
            (
                json!({"type": null, "id": "n2"}),
                ErrorType::BadMessage,
                Some("n2".into()),
            ),
            // An id that is neither a string nor an integer is not echoed.
            (
                json!({"type": "dance", "id": [1]}),
                ErrorType::UnknownMessage,
                None,
            ),
            (json!({"id": 1.5}), ErrorType::BadMessage, None),
        ];
        for (msg, kind, id) in cases {
            assert_eq!(refusal(&mut sock, &msg).await, (kind, id), "{msg}");
        }
        send(&mut sock, &ClientMessage::Ping { id: "alive".into() }).await;
        assert_eq!(
            recv(&mut sock).await,
            Some(ServerMessage::Pong { id: "alive".into() })
        );
    });
}

#[test]
fn oversized_frame_is_refused_and_closed() {
    let s = Server::start(ASKING);
    block(T, async {
        let mut sock = raw(&s).await;
        hello(&mut sock).await;
        sock.write_all(&[0xff, 0xff, 0xff, 0xf0]).await.unwrap();
        assert_eq!(
            error_kind(&recv(&mut sock).await.unwrap()),
            ErrorType::FrameTooLarge
        );
        let mut rest = Vec::new();
        let n = sock.read_to_end(&mut rest).await.unwrap_or(0);
        assert_eq!(n, 0, "the server closes after FrameTooLarge");
        // The server is fine for others.
        let mut c = s.client().await;
        let id = "p".into();
        assert!(matches!(
            c.request(&ClientMessage::Ping { id: "p".into() }, &id)
                .await,
            Ok(ServerMessage::Pong { .. })
        ));
    });
}

#[test]
fn wrong_protocol_version_is_refused_and_closed() {
    let s = Server::start(ASKING);
    block(T, async {
        let mut sock = raw(&s).await;
        send(
            &mut sock,
            &ClientMessage::Hello {
                protocol: 2,
                client: "future".into(),
                interactive: None,
                relay: Vec::new(),
            },
        )
        .await;
        assert_eq!(
            error_kind(&recv(&mut sock).await.unwrap()),
            ErrorType::ProtocolVersion
        );
        assert!(recv(&mut sock).await.is_none());
    });
}

#[test]
fn duplicate_call_id_and_unknown_cancel() {
    let s = Server::start(ALLOW_ALL);
    s.write("big/a.txt", "x\n");
    block(T, async {
        let mut sock = raw(&s).await;
        hello(&mut sock).await;
        let slow = ClientMessage::Call(toolvisor_protocol::CallRequest::new(
            "same",
            "run_command",
            json!({"command": "sleep 5"}),
        ));
        send(&mut sock, &slow).await;
        send(&mut sock, &slow).await;
        match recv(&mut sock).await.unwrap() {
            ServerMessage::Error { id, error } => {
                assert_eq!(error.kind, ErrorType::DuplicateCallId);
                assert_eq!(id, Some("same".into()));
            }
            other => panic!("{other:?}"),
        }
        send(&mut sock, &ClientMessage::Cancel { id: "nope".into() }).await;
        assert_eq!(
            error_kind(&recv(&mut sock).await.unwrap()),
            ErrorType::UnknownCall
        );
        send(&mut sock, &ClientMessage::Cancel { id: "same".into() }).await;
        match recv(&mut sock).await.unwrap() {
            ServerMessage::Result(r) => assert_eq!(r.status, toolvisor_protocol::Status::Cancelled),
            other => panic!("{other:?}"),
        }
        // The id may be reused once its result was sent.
        let quick = ClientMessage::Call(toolvisor_protocol::CallRequest::new(
            "same",
            "read_file",
            json!({"path": "big/a.txt"}),
        ));
        send(&mut sock, &quick).await;
        match recv(&mut sock).await.unwrap() {
            ServerMessage::Result(r) => assert_eq!(r.content, "x\n"),
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn unknown_tool_suggests_names() {
    let s = Server::start(ASKING);
    block(T, async {
        let r = s.call("read_fil", json!({"path": "x"})).await;
        assert_eq!(r.status, toolvisor_protocol::Status::Error);
        let e = r.error.unwrap();
        assert_eq!(e.kind, ErrorType::ToolNotFound);
        assert!(e.message.contains("read_file"), "{}", e.message);
    });
}

#[test]
fn list_tools_in_three_formats() {
    let s = Server::start(ASKING);
    block(T, async {
        let mut c = s.client().await;
        for (format, key) in [
            (toolvisor_protocol::message::ToolFormat::Native, "name"),
            (toolvisor_protocol::message::ToolFormat::Openai, "function"),
            (toolvisor_protocol::message::ToolFormat::Mcp, "inputSchema"),
        ] {
            let id = "t".into();
            match c
                .request(
                    &ClientMessage::ListTools {
                        id: "t".into(),
                        format: Some(format),
                        groups: None,
                    },
                    &id,
                )
                .await
                .unwrap()
            {
                ServerMessage::Tools { tools, .. } => {
                    assert_eq!(tools.len(), toolvisor_protocol::tools::builtin().len());
                    assert!(tools.iter().all(|t| t.get(key).is_some()), "{format:?}");
                }
                other => panic!("{other:?}"),
            }
        }
        let id = "g".into();
        match c
            .request(
                &ClientMessage::ListTools {
                    id: "g".into(),
                    format: None,
                    groups: Some(vec!["search".into()]),
                },
                &id,
            )
            .await
            .unwrap()
        {
            ServerMessage::Tools { tools, .. } => {
                let names: Vec<_> = tools
                    .iter()
                    .map(|t| t["name"].as_str().unwrap().to_owned())
                    .collect();
                assert_eq!(
                    names,
                    ["glob", "grep", "ls", "read_file", "read_many_files"]
                );
            }
            other => panic!("{other:?}"),
        }
    });
}

#[test]
fn a_second_serve_refuses_to_start() {
    let s = Server::start(ASKING);
    let out = std::process::Command::new(BIN)
        .arg("serve")
        .arg("--workspace")
        .arg(s.ws())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("already serving"), "{err}");
}

#[test]
fn sigterm_drains_and_cleans_up() {
    let mut s = Server::start(ASKING);
    let sock = s.socket();
    let status = s.stop().expect("exited");
    assert!(status.success(), "{status:?}");
    assert!(!sock.exists());
    assert!(!s.ws().join(".toolvisor/toolvisor.pid").exists());
}

/// Slowloris: a client that starts a frame and then stalls is closed once the frame is
/// overdue (10 s), while an idle connection (no partial frame) stays open and other
/// clients are served meanwhile.
#[test]
fn a_stalled_partial_frame_closes_the_connection_but_idle_ones_stay() {
    let s = Server::start(ASKING);
    block(std::time::Duration::from_secs(60), async {
        let mut idle = raw(&s).await;
        hello(&mut idle).await;
        let mut stalled = raw(&s).await;
        hello(&mut stalled).await;
        // Two bytes of a length header, then nothing.
        stalled.write_all(&[0, 0]).await.unwrap();
        let t0 = std::time::Instant::now();
        let mut c = s.client().await;
        let pong = c
            .request(&ClientMessage::Ping { id: "p".into() }, &"p".into())
            .await
            .unwrap();
        assert!(matches!(pong, ServerMessage::Pong { .. }), "{pong:?}");
        let mut buf = [0u8; 64];
        let n = tokio::time::timeout(std::time::Duration::from_secs(30), stalled.read(&mut buf))
            .await
            .expect("the stalled connection is closed within 30 s")
            .unwrap_or(0);
        assert_eq!(n, 0, "closed, with nothing sent");
        let took = t0.elapsed();
        assert!(
            took >= std::time::Duration::from_secs(9),
            "closed after {took:?}"
        );
        // The idle connection still answers.
        send(&mut idle, &ClientMessage::Ping { id: "q".into() }).await;
        let pong = recv(&mut idle).await;
        assert!(matches!(pong, Some(ServerMessage::Pong { .. })), "{pong:?}");
    });
}
