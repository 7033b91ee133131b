//! Fairness: clients hammering one group do not starve a ping, or a call of another
//! client to the same group.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use toolvisor_protocol::Status;
use toolvisor_protocol::message::{ClientMessage, ServerMessage};

use crate::harness::*;

#[test]
fn sixteen_grep_clients_do_not_starve_ping_or_read_file() {
    let s = Server::start("[workers.search]\ncount = 1\n");
    for d in 0..30 {
        let body: String = (0..300)
            .map(|i| format!("line {i} with words to match\n"))
            .collect();
        for f in 0..10 {
            s.write(&format!("tree/d{d}/f{f}.txt"), &body);
        }
    }
    s.write("small.txt", "small\n");
    let socket = s.socket();
    block(T, async {
        let stop = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(AtomicUsize::new(0));
        let done = Arc::new(AtomicUsize::new(0));
        let (first_tx, mut first_rx) = tokio::sync::mpsc::channel::<()>(16);
        let mut hammers = Vec::new();
        for i in 0..16 {
            let (socket, stop, in_flight, done) = (
                socket.clone(),
                stop.clone(),
                in_flight.clone(),
                done.clone(),
            );
            let first = first_tx.clone();
            hammers.push(tokio::spawn(async move {
                let mut c = toolvisor_protocol::client::Client::connect(&socket, "hammer", false)
                    .await
                    .unwrap();
                let mut n = 0;
                while !stop.load(Ordering::SeqCst) {
                    in_flight.fetch_add(1, Ordering::SeqCst);
                    let r = call_on(
                        &mut c,
                        &format!("g{i}-{n}"),
                        "grep",
                        json!({"pattern": "w.rds? to"}),
                    )
                    .await;
                    in_flight.fetch_sub(1, Ordering::SeqCst);
                    done.fetch_add(1, Ordering::SeqCst);
                    assert_eq!(r.status, Status::Ok, "{r:?}");
                    if n == 0 {
                        let _ = first.send(()).await;
                    }
                    n += 1;
                }
            }));
        }
        // Wait until every hammer has had a result: the hammering is under way.
        for _ in 0..16 {
            first_rx.recv().await.expect("a hammer ended early");
        }
        let mut c = s.client().await;
        for k in 0..5 {
            let id = format!("p{k}");
            let pong = c
                .request(
                    &ClientMessage::Ping {
                        id: id.as_str().into(),
                    },
                    &id.as_str().into(),
                )
                .await
                .unwrap();
            assert!(matches!(pong, ServerMessage::Pong { .. }));
            let r = call_on(
                &mut c,
                &format!("r{k}"),
                "read_file",
                json!({"path": "small.txt"}),
            )
            .await;
            assert_eq!(r.content, "small\n");
            // Answered while the others are still hammering: it did not wait for them.
            assert!(in_flight.load(Ordering::SeqCst) > 0);
        }
        stop.store(true, Ordering::SeqCst);
        for h in hammers {
            h.await.unwrap();
        }
    });
}

/// `max_in_flight` calls run on a worker at once, `queue_max` more wait, and past both a
/// call is refused at once with `Overloaded` (`workers.<group>.queue_max`, docs/CONFIG.md).
#[test]
fn past_max_in_flight_and_queue_max_a_call_is_overloaded() {
    let s = Server::start(
        "[policy]\nmode = \"yolo\"\n[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\n\
         [workers.exec]\ncount = 1\nmax_in_flight = 1\nqueue_max = 1\n",
    );
    block(Duration::from_secs(60), async {
        let hold = json!({"command": "while [ ! -e go ]; do sleep 0.01; done; echo ran"});
        let first = spawn_hold(s.client().await, "first", &hold);
        // The first runs (the worker's one slot) before the others come.
        let end = std::time::Instant::now() + Duration::from_secs(30);
        while s.workers_in_flight("exec").await < 1 {
            assert!(std::time::Instant::now() < end, "the first call never ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // One of these waits in the queue (its one place), the other is refused; which
        // is which depends on arrival order, so only the count is checked.
        let mut second = spawn_hold(s.client().await, "second", &hold);
        let mut third = spawn_hold(s.client().await, "third", &hold);
        // The refusal comes at once, while the other still waits.
        let (refused, waiting) = tokio::select! {
            r = &mut second => (r, third),
            r = &mut third => (r, second),
        };
        let refused = refused.expect("call task");
        s.write("go", "");
        let mut outcomes = vec![(refused.status, refused.error.as_ref().map(|e| e.kind))];
        for h in [first, waiting] {
            let r = h.await.expect("call task");
            outcomes.push((r.status, r.error.as_ref().map(|e| e.kind)));
        }
        assert_eq!(
            outcomes[0],
            (
                Status::Error,
                Some(toolvisor_protocol::ErrorType::Overloaded)
            ),
            "the first to end is the refused one: {outcomes:?}"
        );
        let overloaded = outcomes
            .iter()
            .filter(|o| {
                **o == (
                    Status::Error,
                    Some(toolvisor_protocol::ErrorType::Overloaded),
                )
            })
            .count();
        let ok = outcomes.iter().filter(|o| o.0 == Status::Ok).count();
        assert_eq!((ok, overloaded), (2, 1), "{outcomes:?}");
    });
}

/// A `run_command` call on its own connection; its result arrives on the task.
fn spawn_hold(
    mut c: toolvisor_protocol::client::Client,
    id: &'static str,
    args: &serde_json::Value,
) -> tokio::task::JoinHandle<toolvisor_protocol::ToolResult> {
    let args = args.clone();
    tokio::spawn(async move { call_on(&mut c, id, "run_command", args).await })
}

/// One session that fills a group with calls that wait (for their deadline, say) holds
/// at most its share of the slots: another session's call runs at once.
#[test]
fn one_session_cannot_hold_every_slot_of_a_group() {
    use toolvisor_protocol::message::CallRequest;
    let s = Server::start(&format!(
        "{ALLOW_ALL}\n[workers.exec]\ncount = 1\nmax_in_flight = 4\n"
    ));
    block(Duration::from_secs(60), async {
        let hold = json!({"command": "while [ ! -e go ]; do sleep 0.01; done; echo ran"});
        let mut hog = s.client().await;
        for i in 0..4 {
            let req = CallRequest::new(format!("h{i}"), "run_command", hold.clone());
            hog.send(&ClientMessage::Call(req)).await.expect("send");
        }
        // Three of them run (its share of 4); the fourth waits for one of them.
        let end = std::time::Instant::now() + Duration::from_secs(30);
        while s.workers_in_flight("exec").await < 3 {
            assert!(std::time::Instant::now() < end, "the hog's calls never ran");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let r = s.call("run_command", json!({"command": "echo mine"})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, "mine\n");
        assert!(!s.ws().join("go").exists());
        s.write("go", "");
        for _ in 0..4 {
            let (_, m) = hog
                .recv_matching(|m| matches!(m, ServerMessage::Result(_)).then_some(()))
                .await
                .expect("a result");
            let ServerMessage::Result(r) = m else {
                unreachable!()
            };
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
    });
}
