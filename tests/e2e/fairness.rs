//! Fairness: clients hammering one group do not starve a ping, or a call of another
//! client to the same group.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

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
