//! `subscribe`: forward bus events of the chosen topics to one connection. A lagging
//! subscriber loses events and the next one it gets says how many (`dropped`).
//!
//! Events are lost at two places, both counted: the bus (this task fell behind the
//! broadcast ring) and the connection's outbox (the client reads slowly). The task
//! never waits for the client, so a slow subscriber holds no memory but its outbox.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use toolvisor_protocol::Id;
use toolvisor_protocol::message::{ServerMessage, Topic};

use crate::call::service::Service;
use crate::outbox::Outbox;

/// Answer `subscribed`, then forward the topics' events to the session until it closes
/// (replaying pending confirmations first).
pub fn start(svc: &Arc<Service>, out: &Outbox, id: Id, topics: Vec<Topic>) {
    let mut rx = svc.events().subscribe();
    out.send(&ServerMessage::Subscribed { id });
    if topics.contains(&Topic::Confirmations) {
        for fields in svc.pending_confirmations() {
            out.send(&ServerMessage::Event {
                topic: Topic::Confirmations,
                event: "confirm_required".into(),
                dropped: None,
                fields,
            });
        }
    }
    let out = out.clone();
    tokio::spawn(async move {
        let mut dropped = 0u64;
        loop {
            let ev = tokio::select! {
                ev = rx.recv() => ev,
                _ = out.closed.cancelled() => return,
            };
            match ev {
                Ok(ev) if topics.contains(&ev.topic) => {
                    let msg = ServerMessage::Event {
                        topic: ev.topic,
                        event: ev.name.to_owned(),
                        dropped: (dropped > 0).then_some(dropped),
                        fields: ev.fields,
                    };
                    if out.send_event(&msg) {
                        dropped = 0;
                    } else {
                        dropped += 1;
                    }
                }
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => dropped += n,
                Err(RecvError::Closed) => return,
            }
        }
    });
}
