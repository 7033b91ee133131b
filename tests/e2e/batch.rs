//! Batches, the `calls` event topic, per-connection limits and slow clients, driven
//! over the real socket. Ordering is shown with a subscriber's events: the bus keeps
//! publish order, and `call_started` is published right before a call is dispatched.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Topic};
use toolvisor_protocol::{ErrorType, Id, Status, ToolResult};

use crate::harness::*;

/// A `calls` event as the tests look at it.
#[derive(Clone, Debug)]
struct Ev {
    name: String,
    dropped: Option<u64>,
    fields: serde_json::Map<String, Value>,
}

impl Ev {
    fn id(&self) -> &str {
        self.fields.get("id").and_then(Value::as_str).unwrap_or("")
    }
}

/// Connect and subscribe to `topics`; returns once `subscribed` came back.
pub(crate) async fn subscriber(s: &Server, topics: Vec<Topic>) -> Client {
    let mut c = s.client().await;
    let id: Id = "sub".into();
    match c
        .request(
            &ClientMessage::Subscribe {
                id: id.clone(),
                topics,
            },
            &id,
        )
        .await
        .expect("subscribe")
    {
        ServerMessage::Subscribed { .. } => c,
        other => panic!("{other:?}"),
    }
}

/// Read events until `stop` accepts one (inclusive); every read has `deadline`.
async fn events_until(
    c: &mut Client,
    deadline: Duration,
    mut stop: impl FnMut(&Ev) -> bool,
) -> Vec<Ev> {
    let mut seen = Vec::new();
    loop {
        let m = tokio::time::timeout(deadline, c.recv())
            .await
            .expect("an event in time")
            .expect("event");
        if let ServerMessage::Event {
            event,
            dropped,
            fields,
            ..
        } = m
        {
            let ev = Ev {
                name: event,
                dropped,
                fields,
            };
            let done = stop(&ev);
            seen.push(ev);
            if done {
                return seen;
            }
        }
    }
}

/// Position of the first event named `name` for call `id`.
fn pos(evs: &[Ev], name: &str, id: &str) -> usize {
    evs.iter()
        .position(|e| e.name == name && e.id() == id)
        .unwrap_or_else(|| panic!("no {name} for {id} in {evs:#?}"))
}

/// Read a batch's messages until its `batch_done`; results by id, in arrival order.
async fn batch_results(c: &mut Client, batch: &str) -> (Vec<ToolResult>, Vec<Id>) {
    let mut results = Vec::new();
    loop {
        match c.recv().await.expect("batch message") {
            ServerMessage::Result(r) => results.push(r),
            ServerMessage::BatchDone { id, ids } => {
                assert_eq!(id, Id::from(batch));
                return (results, ids);
            }
            ServerMessage::Error { error, .. } => panic!("refused: {error:?}"),
            _ => {}
        }
    }
}

/// The `result` of call `id`, leaving other messages queued.
async fn result_matching(c: &mut Client, id: &str) -> ToolResult {
    let want = Id::from(id);
    let (r, _) = c
        .recv_matching(|m| match m {
            ServerMessage::Result(r) if r.id == want => Some(r.clone()),
            _ => None,
        })
        .await
        .expect("result");
    r
}

/// The `ids` of batch `batch`'s `batch_done`, leaving other messages queued.
async fn batch_done_of(c: &mut Client, batch: &str) -> Vec<String> {
    let want = Id::from(batch);
    let (ids, _) = c
        .recv_matching(|m| match m {
            ServerMessage::BatchDone { id, ids } if *id == want => {
                Some(ids.iter().map(Id::to_string).collect::<Vec<_>>())
            }
            _ => None,
        })
        .await
        .expect("batch_done");
    ids
}

fn by_id(results: &[ToolResult]) -> HashMap<String, &ToolResult> {
    let mut m = HashMap::new();
    for r in results {
        assert!(
            m.insert(r.id.to_string(), r).is_none(),
            "two results for {}",
            r.id
        );
    }
    m
}

fn req(id: &str, tool: &str, args: Value) -> CallRequest {
    CallRequest::new(id, tool, args)
}

/// A corpus big enough that one grep over it takes a while (≥ 200 ms in debug).
fn big_corpus(s: &Server) {
    let line = "the quick brown fox jumps over the lazy dog 0123456789 lorem ipsum\n";
    let body = line.repeat(600);
    for d in 0..20 {
        for f in 0..40 {
            s.write(&format!("big/d{d}/f{f}.txt"), &body);
        }
    }
}

fn slow_grep(id: &str) -> CallRequest {
    req(
        id,
        "grep",
        json!({"pattern": "zz(q|x)[0-9]{3}y", "directory": "big"}),
    )
}

#[test]
fn batch_overlaps_safe_calls_and_orders_the_rest() {
    let s = Server::start(ASKING);
    big_corpus(&s);
    s.write("a.txt", "alpha\n");
    s.write("b.txt", "beta\n");
    block(T, async {
        let alone = Instant::now();
        let mut c = s.client().await;
        let r = c
            .call(slow_grep("g0"), |_, _| {})
            .await
            .expect("grep")
            .result
            .expect("result");
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let one = alone.elapsed();
        eprintln!("one grep alone: {one:?}");

        let mut sub = subscriber(&s, vec![Topic::Calls]).await;
        let mut agent = Client::connect(&s.socket(), "agent", true)
            .await
            .expect("connect");
        let calls = vec![
            slow_grep("g1"),
            slow_grep("g2"),
            req("cmd", "run_command", json!({"command": "echo hi"})),
            req("r1", "read_file", json!({"path": "a.txt"})),
            req("r2", "read_file", json!({"path": "b.txt"})),
        ];
        let t0 = Instant::now();
        agent
            .send(&ClientMessage::Batch {
                id: "b1".into(),
                calls,
            })
            .await
            .expect("send");
        // The command's confirmation comes only after both greps have their results.
        let mut results = Vec::new();
        let interaction = loop {
            match agent.recv().await.expect("message") {
                ServerMessage::Result(r) => results.push(r),
                ServerMessage::ConfirmRequired {
                    id, interaction, ..
                } => {
                    assert_eq!(id, Id::from("cmd"));
                    break interaction;
                }
                other => panic!("unexpected before the confirmation: {other:?}"),
            }
        };
        let two = t0.elapsed();
        eprintln!("two greps in one segment: {two:?}");
        let early: Vec<String> = results.iter().map(|r| r.id.to_string()).collect();
        assert_eq!(
            early.len(),
            2,
            "both greps end before the command is asked: {early:?}"
        );
        agent
            .send(&ClientMessage::Confirm {
                interaction,
                approve: true,
                remember: None,
            })
            .await
            .expect("confirm");
        let (rest, ids) = batch_results(&mut agent, "b1").await;
        results.extend(rest);
        let ids: Vec<String> = ids.iter().map(Id::to_string).collect();
        assert_eq!(ids, ["g1", "g2", "cmd", "r1", "r2"]);
        let got = by_id(&results);
        assert_eq!(got.len(), 5);
        assert!(got.values().all(|r| r.status == Status::Ok), "{results:#?}");
        assert_eq!(got["cmd"].content.trim(), "hi");
        assert_eq!(got["r2"].content, "beta\n");

        let evs = events_until(&mut sub, T, |e| e.name == "batch_finished").await;
        let session = agent.session.clone();
        let evs: Vec<Ev> = evs
            .into_iter()
            .filter(|e| e.fields.get("session").and_then(Value::as_str) == Some(&session))
            .collect();
        let first_grep_end = pos(&evs, "call_finished", "g1").min(pos(&evs, "call_finished", "g2"));
        assert!(
            pos(&evs, "call_started", "g1") < first_grep_end
                && pos(&evs, "call_started", "g2") < first_grep_end,
            "greps overlap: {evs:#?}"
        );
        let last_grep_end = pos(&evs, "call_finished", "g1").max(pos(&evs, "call_finished", "g2"));
        assert!(
            last_grep_end < pos(&evs, "call_started", "cmd"),
            "the command waits for the greps"
        );
        let cmd_end = pos(&evs, "call_finished", "cmd");
        assert!(
            cmd_end < pos(&evs, "call_started", "r1") && cmd_end < pos(&evs, "call_started", "r2"),
            "later reads wait for the command"
        );
        assert!(pos(&evs, "batch_started", "b1") < pos(&evs, "call_started", "g1"));
        let done = &evs[pos(&evs, "batch_finished", "b1")];
        assert_eq!(done.fields["ids"], json!(["g1", "g2", "cmd", "r1", "r2"]));
    });
}

#[test]
fn a_denied_call_does_not_stop_its_batch() {
    let s = Server::start(ASKING);
    s.write("a.txt", "alpha\n");
    block(T, async {
        let mut c = s.client().await;
        let calls = vec![
            req("r1", "read_file", json!({"path": "a.txt"})),
            req("cmd", "run_command", json!({"command": "echo no"})),
            req("bad", "read_file", json!({"nope": 1})),
            req("r2", "list_dir", json!({"path": "."})),
        ];
        c.send(&ClientMessage::Batch {
            id: "b".into(),
            calls,
        })
        .await
        .expect("send");
        let (results, ids) = batch_results(&mut c, "b").await;
        let ids: Vec<String> = ids.iter().map(Id::to_string).collect();
        assert_eq!(ids, ["r1", "cmd", "bad", "r2"]);
        let got = by_id(&results);
        assert_eq!(got.len(), 4, "{results:#?}");
        assert_eq!(got["r1"].status, Status::Ok);
        assert_eq!(got["cmd"].status, Status::Denied);
        assert_eq!(
            got["cmd"].error.as_ref().map(|e| e.kind),
            Some(ErrorType::ConfirmationRequired)
        );
        assert_eq!(
            got["bad"].error.as_ref().map(|e| e.kind),
            Some(ErrorType::InvalidParams)
        );
        assert_eq!(got["r2"].status, Status::Ok);
        assert!(
            results.iter().all(|r| r.audit_seq > 0),
            "every call is in the audit log"
        );
        // The connection goes on, and the batch id is free again.
        c.send(&ClientMessage::Batch {
            id: "b".into(),
            calls: vec![],
        })
        .await
        .expect("send");
        let (results, ids) = batch_results(&mut c, "b").await;
        assert!(results.is_empty() && ids.is_empty());
    });
}

#[test]
fn cancelling_a_batch_ends_every_call_not_yet_ended_and_ids_must_be_free() {
    let s = Server::start("[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\n");
    s.write("a.txt", "alpha\n");
    block(T, async {
        let mut sub = subscriber(&s, vec![Topic::Calls]).await;
        let mut c = s.client().await;
        let calls = vec![
            req("r0", "read_file", json!({"path": "a.txt"})),
            req("sleep", "run_command", json!({"command": "sleep 30"})),
            req("r1", "read_file", json!({"path": "a.txt"})),
        ];
        c.send(&ClientMessage::Batch {
            id: "b".into(),
            calls,
        })
        .await
        .expect("send");
        events_until(&mut sub, T, |e| {
            e.name == "call_started" && e.id() == "sleep"
        })
        .await;
        // A running call says so every 5 s.
        let beats = events_until(&mut sub, Duration::from_secs(15), |e| {
            e.name == "call_heartbeat" && e.id() == "sleep"
        })
        .await;
        let beat = &beats[beats.len() - 1];
        assert_eq!(beat.fields["status"], json!("running"));
        assert_eq!(beat.fields["tool"], json!("run_command"));
        let elapsed = beat.fields["elapsed_ms"].as_u64();
        assert!(elapsed.is_some_and(|ms| ms >= 4500), "{beat:?}");
        // Ids of an open batch, and of its open calls, are taken. A batch whose own id
        // is taken is refused whole; a batch call whose id is taken is refused alone,
        // and its batch still ends with `batch_done` naming the calls that ran.
        for (id, m, ran) in [
            (
                "b",
                ClientMessage::Batch {
                    id: "b".into(),
                    calls: vec![],
                },
                None,
            ),
            (
                "sleep",
                ClientMessage::Call(req("sleep", "read_file", json!({"path": "a.txt"}))),
                None,
            ),
            (
                "b",
                ClientMessage::Call(req("b", "read_file", json!({"path": "a.txt"}))),
                None,
            ),
            (
                "x",
                ClientMessage::Batch {
                    id: "b2".into(),
                    calls: vec![
                        req("x", "ls", json!({"path": "."})),
                        req("x", "ls", json!({"path": "."})),
                    ],
                },
                Some(("b2", vec!["x"])),
            ),
            (
                "sleep",
                ClientMessage::Batch {
                    id: "b3".into(),
                    calls: vec![req("sleep", "ls", json!({"path": "."}))],
                },
                Some(("b3", vec![])),
            ),
        ] {
            c.send(&m).await.expect("send");
            let (_, e) = c
                .recv_matching(|m| matches!(m, ServerMessage::Error { .. }).then_some(()))
                .await
                .expect("error");
            match e {
                ServerMessage::Error {
                    id: Some(got),
                    error,
                } => {
                    assert_eq!(error.kind, ErrorType::DuplicateCallId);
                    assert_eq!(got, Id::from(id));
                }
                other => panic!("{other:?}"),
            }
            if let Some((batch, want)) = ran {
                // Picked out by id: batch `b`'s own messages stay queued for later.
                for call in &want {
                    let r = result_matching(&mut c, call).await;
                    assert_eq!(r.status, Status::Ok, "{r:?}");
                }
                assert_eq!(batch_done_of(&mut c, batch).await, want);
            }
        }
        let t0 = Instant::now();
        c.send(&ClientMessage::Cancel { id: "b".into() })
            .await
            .expect("cancel");
        let (results, ids) = batch_results(&mut c, "b").await;
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "cancel is prompt: {:?}",
            t0.elapsed()
        );
        assert_eq!(ids.len(), 3);
        let got = by_id(&results);
        assert_eq!(got["r0"].status, Status::Ok);
        assert_eq!(got["sleep"].status, Status::Cancelled, "{:?}", got["sleep"]);
        assert_eq!(got["r1"].status, Status::Cancelled, "{:?}", got["r1"]);
        assert!(
            got["r1"].audit_seq > 0,
            "a call cancelled before it started is still audited"
        );
        // Cancelling it again: it is gone.
        c.send(&ClientMessage::Cancel { id: "b".into() })
            .await
            .expect("cancel");
        let (_, e) = c
            .recv_matching(|m| matches!(m, ServerMessage::Error { .. }).then_some(()))
            .await
            .expect("error");
        assert!(
            matches!(e, ServerMessage::Error { error, .. } if error.kind == ErrorType::UnknownCall)
        );
    });
}

/// Every message a batch sends up to its `batch_done`: the connection-level errors
/// (id and type), the results, and `batch_done`'s ids, each in arrival order.
async fn batch_messages(
    c: &mut Client,
    batch: &str,
) -> (Vec<(String, ErrorType)>, Vec<ToolResult>, Vec<String>) {
    let (mut errors, mut results) = (Vec::new(), Vec::new());
    loop {
        match c.recv().await.expect("batch message") {
            ServerMessage::Error { id, error } => {
                errors.push((id.map_or_else(String::new, |i| i.to_string()), error.kind))
            }
            ServerMessage::Result(r) => results.push(r),
            ServerMessage::BatchDone { id, ids } => {
                assert_eq!(id, Id::from(batch));
                return (errors, results, ids.iter().map(Id::to_string).collect());
            }
            _ => {}
        }
    }
}

#[test]
fn batch_calls_with_duplicate_ids_are_refused_alone_and_batch_done_still_comes() {
    let s = Server::start(ALLOW_ALL);
    s.write("a.txt", "alpha\n");
    block(T, async {
        let mut c = s.client().await;
        let read = || json!({"path": "a.txt"});

        // The same id twice in one batch: the first runs, the second is refused.
        c.send(&ClientMessage::Batch {
            id: "b1".into(),
            calls: vec![
                req("a", "read_file", read()),
                req("d", "list_dir", json!({"path": "."})),
                req("d", "read_file", read()),
                req("c", "read_file", read()),
            ],
        })
        .await
        .expect("send");
        let (errors, results, ids) = batch_messages(&mut c, "b1").await;
        assert_eq!(errors, [("d".to_owned(), ErrorType::DuplicateCallId)]);
        assert_eq!(ids, ["a", "d", "c"]);
        let got = by_id(&results);
        assert_eq!(got.len(), 3, "{results:#?}");
        assert!(got.values().all(|r| r.status == Status::Ok), "{results:#?}");
        assert!(
            got["d"].content.contains("a.txt"),
            "the first `d` (list_dir) ran: {:?}",
            got["d"]
        );

        // A batch call reusing the id of a call still open on the connection.
        let busy = req("busy", "run_command", json!({"command": "exec sleep 300"}));
        c.send(&ClientMessage::Call(busy)).await.expect("send");
        c.send(&ClientMessage::Batch {
            id: "b2".into(),
            calls: vec![
                req("busy", "read_file", read()),
                req("x", "read_file", read()),
            ],
        })
        .await
        .expect("send");
        let (errors, results, ids) = batch_messages(&mut c, "b2").await;
        assert_eq!(errors, [("busy".to_owned(), ErrorType::DuplicateCallId)]);
        assert_eq!(ids, ["x"]);
        assert_eq!(results.len(), 1, "{results:#?}");
        assert_eq!(
            (results[0].id.to_string(), results[0].status),
            ("x".into(), Status::Ok)
        );

        // A batch whose own id is open is refused whole: no call runs, no batch_done.
        c.send(&ClientMessage::Batch {
            id: "busy".into(),
            calls: vec![req("y", "read_file", read())],
        })
        .await
        .expect("send");
        c.send(&ClientMessage::Ping { id: "p".into() })
            .await
            .expect("ping");
        loop {
            match c.recv().await.expect("message") {
                ServerMessage::Pong { .. } => break,
                ServerMessage::Error { id, error } => {
                    assert_eq!(id, Some(Id::from("busy")));
                    assert_eq!(error.kind, ErrorType::DuplicateCallId);
                }
                other => panic!("the refused batch sent {other:?}"),
            }
        }

        // The open call was not touched by any of that; it still gets its own result.
        c.send(&ClientMessage::Cancel { id: "busy".into() })
            .await
            .expect("cancel");
        let r = result_matching(&mut c, "busy").await;
        assert_eq!(r.status, Status::Cancelled, "{r:?}");

        // Cancelling a batch with a refused duplicate cancels the call that runs.
        c.send(&ClientMessage::Batch {
            id: "b3".into(),
            calls: vec![
                req("s", "run_command", json!({"command": "exec sleep 300"})),
                req("s", "read_file", read()),
            ],
        })
        .await
        .expect("send");
        c.send(&ClientMessage::Cancel { id: "b3".into() })
            .await
            .expect("cancel");
        let (errors, results, ids) = batch_messages(&mut c, "b3").await;
        assert_eq!(errors, [("s".to_owned(), ErrorType::DuplicateCallId)]);
        assert_eq!(ids, ["s"]);
        assert_eq!(results.len(), 1, "{results:#?}");
        assert_eq!(results[0].status, Status::Cancelled, "{:?}", results[0]);
    });
}

#[test]
fn calls_topic_reports_start_and_finish_with_their_fields() {
    let s = Server::start(ASKING);
    s.write("a.txt", "alpha\n");
    block(T, async {
        let mut sub = subscriber(&s, vec![Topic::Calls]).await;
        let mut c = s.client().await;
        let r = call_on(&mut c, "x1", "list_dir", json!({"path": "."})).await;
        assert_eq!(r.status, Status::Ok);
        let r = call_on(&mut c, "x2", "read_file", json!({"path": "missing"})).await;
        assert_eq!(r.status, Status::Error);
        let evs = events_until(&mut sub, T, |e| e.name == "call_finished" && e.id() == "x2").await;
        let started = &evs[pos(&evs, "call_started", "x1")];
        assert_eq!(started.fields["session"], json!(c.session));
        assert_eq!(
            started.fields["tool"],
            json!("ls"),
            "the tool's own name, not the alias"
        );
        assert_eq!(started.fields["status"], json!("running"));
        let finished = &evs[pos(&evs, "call_finished", "x1")];
        assert_eq!(finished.fields["status"], json!("ok"));
        assert_eq!(finished.fields["session"], json!(c.session));
        assert!(finished.fields["duration_ms"].is_u64());
        let failed = &evs[pos(&evs, "call_finished", "x2")];
        assert_eq!(failed.fields["status"], json!("error"));
        assert_eq!(failed.fields["tool"], json!("read_file"));
        assert_eq!(failed.fields["error_type"], json!("FileNotFoundError"));
        assert!(evs.iter().all(|e| e.dropped.is_none()));
    });
}

/// A subscriber that does not read is never disconnected for it (events past half its
/// outgoing queue are dropped instead of queued), nobody else notices, and once it
/// reads again the next event it gets says how many it lost.
#[test]
fn a_slow_subscriber_loses_events_not_the_connection() {
    let s = Server::start(ASKING);
    s.write("a.txt", "alpha\n");
    block(Duration::from_secs(120), async {
        let mut slow = subscriber(&s, vec![Topic::Calls]).await;
        // 8 clients × 320 calls = 2560 calls, 5120 events, while `slow` reads nothing.
        let mut jobs = Vec::new();
        for k in 0..8 {
            let sock = s.socket();
            jobs.push(tokio::spawn(async move {
                let mut c = Client::connect(&sock, "producer", false)
                    .await
                    .expect("connect");
                for i in 0..320 {
                    let r = call_on(
                        &mut c,
                        &format!("p{k}-{i}"),
                        "read_file",
                        json!({"path": "a.txt"}),
                    )
                    .await;
                    assert_eq!(r.content, "alpha\n");
                }
            }));
        }
        for j in jobs {
            j.await.expect("producer");
        }
        let mut other = s.client().await;
        let pong = other
            .request(&ClientMessage::Ping { id: "p".into() }, &"p".into())
            .await
            .expect("ping");
        assert!(matches!(pong, ServerMessage::Pong { .. }));
        // Now read: drain what was queued, then make fresh events until one carries
        // the count of those lost.
        let end = Instant::now() + Duration::from_secs(60);
        let mut n = 0u64;
        let mut received = 0u64;
        let dropped = loop {
            assert!(
                Instant::now() < end,
                "no event with `dropped` after {received} events"
            );
            match tokio::time::timeout(Duration::from_millis(300), slow.recv()).await {
                Ok(Ok(ServerMessage::Event {
                    dropped: Some(d), ..
                })) => break d,
                Ok(Ok(_)) => received += 1,
                Ok(Err(e)) => panic!("the slow subscriber was disconnected: {e}"),
                Err(_) => {
                    n += 1;
                    call_on(
                        &mut other,
                        &format!("poke{n}"),
                        "read_file",
                        json!({"path": "a.txt"}),
                    )
                    .await;
                }
            }
        };
        eprintln!(
            "slow subscriber: {received} events received, then one saying {dropped} were dropped"
        );
        assert!(dropped > 0);
        assert!(received + dropped >= 5000, "{received} + {dropped}");
    });
}

#[test]
fn too_many_open_calls_are_overloaded() {
    let s = Server::start(
        "[server]\nmax_open_calls = 2\n\n[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\n",
    );
    block(T, async {
        let mut c = s.client().await;
        for i in 0..3 {
            c.send(&ClientMessage::Call(req(
                &format!("s{i}"),
                "run_command",
                json!({"command": "sleep 1"}),
            )))
            .await
            .expect("send");
        }
        let mut got = HashMap::new();
        while got.len() < 3 {
            if let ServerMessage::Result(r) = c.recv().await.expect("result") {
                got.insert(r.id.to_string(), r);
            }
        }
        assert_eq!(
            got["s2"].error.as_ref().map(|e| e.kind),
            Some(ErrorType::Overloaded),
            "{:?}",
            got["s2"]
        );
        assert_eq!(got["s2"].status, Status::Error);
        assert_eq!(got["s0"].status, Status::Ok, "{:?}", got["s0"]);
        assert_eq!(got["s1"].status, Status::Ok, "{:?}", got["s1"]);
        // A batch counts each of its calls: three do not fit, all are refused.
        c.send(&ClientMessage::Call(req(
            "s3",
            "run_command",
            json!({"command": "sleep 1"}),
        )))
        .await
        .expect("send");
        let calls = (0..2)
            .map(|i| req(&format!("b{i}"), "ls", json!({"path": "."})))
            .collect();
        c.send(&ClientMessage::Batch {
            id: "b".into(),
            calls,
        })
        .await
        .expect("send");
        let (results, ids) = batch_results(&mut c, "b").await;
        assert_eq!(ids.len(), 2);
        assert!(
            results
                .iter()
                .all(|r| r.error.as_ref().map(|e| e.kind) == Some(ErrorType::Overloaded)),
            "{results:#?}"
        );
        let r = c
            .recv_matching(|m| {
                matches!(m, ServerMessage::Result(r) if r.id == Id::from("s3")).then_some(())
            })
            .await
            .expect("s3");
        assert!(matches!(r.1, ServerMessage::Result(r) if r.status == Status::Ok));
        // Once those ended, there is room again.
        let r = call_on(&mut c, "again", "ls", json!({"path": "."})).await;
        assert_eq!(r.status, Status::Ok);
    });
}

#[test]
fn a_client_that_never_reads_is_disconnected_and_others_keep_working() {
    let mut s = Server::start(ASKING);
    s.write("a.txt", &"x".repeat(2000));
    block(Duration::from_secs(120), async {
        let mut deaf = s.client().await;
        let mut ok = s.client().await;
        // Far more results than OUTBOX_FRAMES (4096) plus the socket buffer can hold.
        let mut sent = 0u32;
        for i in 0..12_000 {
            let m =
                ClientMessage::Call(req(&format!("d{i}"), "read_file", json!({"path": "a.txt"})));
            match tokio::time::timeout(Duration::from_secs(5), deaf.send(&m)).await {
                Ok(Ok(())) => sent += 1,
                _ => break, // the server stopped reading us: it closed the connection
            }
            if i % 2000 == 0 {
                let r = call_on(
                    &mut ok,
                    &format!("ok{i}"),
                    "read_file",
                    json!({"path": "a.txt"}),
                )
                .await;
                assert_eq!(r.status, Status::Ok);
            }
        }
        // The deaf client now reads: what was queued, then the end of the connection.
        let mut results = 0u32;
        loop {
            match tokio::time::timeout(Duration::from_secs(30), deaf.recv())
                .await
                .expect("the connection ends")
            {
                Ok(ServerMessage::Result(_)) => results += 1,
                Ok(_) => {}
                Err(ClientError::Closed | ClientError::Frame(_)) => break,
                Err(e) => panic!("{e}"),
            }
        }
        eprintln!(
            "deaf client: sent {sent} calls, got {results} results before the server closed it"
        );
        assert!(
            results < sent,
            "the connection was cut before every result was sent"
        );
        for i in 0..20 {
            let r = call_on(
                &mut ok,
                &format!("after{i}"),
                "read_file",
                json!({"path": "a.txt"}),
            )
            .await;
            assert_eq!(r.status, Status::Ok);
        }
    });
    s.wait_log("stopped reading", Duration::from_secs(10));
}

#[test]
fn many_clients_many_calls_every_result_present_and_correct() {
    const CLIENTS: usize = 64;
    const CALLS: usize = 200;
    let s = Server::start(ASKING);
    for f in 0..16 {
        s.write(
            &format!("files/f{f}.txt"),
            &format!("file {f}\n").repeat(f + 1),
        );
    }
    let t0 = Instant::now();
    block(Duration::from_secs(120), async {
        let mut jobs = Vec::new();
        for k in 0..CLIENTS {
            let sock = s.socket();
            jobs.push(tokio::spawn(async move {
                let mut c = Client::connect(&sock, "many", false)
                    .await
                    .expect("connect");
                for i in 0..CALLS {
                    let f = (k + i) % 16;
                    let r = call_on(
                        &mut c,
                        &format!("c{i}"),
                        "read_file",
                        json!({"path": format!("files/f{f}.txt")}),
                    )
                    .await;
                    assert_eq!(r.status, Status::Ok, "{r:?}");
                    assert_eq!(r.content, format!("file {f}\n").repeat(f + 1));
                }
                // Nothing else is pending on this connection: no stray or second result.
                let pong = c
                    .request(&ClientMessage::Ping { id: "end".into() }, &"end".into())
                    .await
                    .expect("ping");
                assert!(matches!(pong, ServerMessage::Pong { .. }));
                assert!(
                    tokio::time::timeout(Duration::from_millis(50), c.recv())
                        .await
                        .is_err(),
                    "a stray message"
                );
            }));
        }
        for j in jobs {
            j.await.expect("client");
        }
    });
    let took = t0.elapsed();
    eprintln!(
        "{CLIENTS} clients × {CALLS} read_file calls: {took:?} ({:.0} calls/s)",
        (CLIENTS * CALLS) as f64 / took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(60), "took {took:?}");
}
