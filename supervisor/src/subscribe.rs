//! `subscribe`: forward bus events of the chosen topics to one connection. A lagging
//! subscriber loses events and the next one it gets says how many (`dropped`).

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use toolvisor_protocol::Id;
use toolvisor_protocol::message::{ServerMessage, Topic};

use crate::outbox::Outbox;
use crate::service::Service;

pub fn start(svc: &Arc<Service>, out: &Outbox, id: Id, topics: Vec<Topic>) {
    let mut rx = svc.events.subscribe();
    out.send(&ServerMessage::Subscribed { id });
    if topics.contains(&Topic::Confirmations) {
        for msg in svc.pending_confirmations() {
            if let Ok(serde_json::Value::Object(mut fields)) = serde_json::to_value(&msg) {
                fields.remove("type");
                out.send(&ServerMessage::Event { topic: Topic::Confirmations, event: "confirm_required".into(), dropped: None, fields });
            }
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
                    dropped = 0;
                    out.send_wait(&msg).await;
                }
                Ok(_) => {}
                Err(RecvError::Lagged(n)) => dropped += n,
                Err(RecvError::Closed) => return,
            }
        }
    });
}
