//! An MCP server's log messages (`notifications/message`), passed on as `output` of
//! stream `log` to each call running on the server (a message names no request), at
//! most [`PER_SECOND`] a second, each cut to [`MAX_DATA`] bytes; the supervisor hands
//! them on to the calls that asked for `stream`, and `toolvisor mcp` to its client as
//! log messages.

#![allow(deprecated)] // Log messages: deprecated from 2026-07-28, older servers send them.

use std::time::{Duration, Instant};

use rmcp::model::LoggingMessageNotificationParam;
use serde_json::json;
use tokio::sync::mpsc;
use toolvisor_protocol::worker::FromWorker;
use toolvisor_workers::context::Outgoing;

use super::{Running, lock};

/// The `stream` of the `output` frames that carry a server's log messages.
pub const LOG_STREAM: &str = "log";
/// Most log messages passed on in a second; the rest are dropped.
const PER_SECOND: u32 = 50;
/// Longest `data` of one message passed on, in bytes of its JSON.
const MAX_DATA: usize = 4096;

/// Pass each message on until the server's session ends.
pub async fn route(
    mut rx: mpsc::Receiver<LoggingMessageNotificationParam>,
    running: Running,
    tx: Outgoing,
) {
    let mut window = (Instant::now(), 0u32);
    while let Some(m) = rx.recv().await {
        if window.0.elapsed() >= Duration::from_secs(1) {
            window = (Instant::now(), 0);
        }
        if window.1 >= PER_SECOND {
            continue;
        }
        window.1 += 1;
        let data = frame_data(&m);
        // Sent under the lock: a call that ends meanwhile sends its `done` after these.
        let calls = lock(&running);
        for call in calls.keys() {
            tx.send_now(&FromWorker::Output {
                call: *call,
                stream: LOG_STREAM.into(),
                data: data.clone(),
            });
        }
    }
}

/// `{"level", "logger"?, "data"}` as JSON, `data` cut to its first [`MAX_DATA`] bytes
/// as text when longer.
fn frame_data(m: &LoggingMessageNotificationParam) -> String {
    let mut data = m.data.clone();
    let text = data.to_string();
    if text.len() > MAX_DATA {
        let mut end = MAX_DATA;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        data = json!(format!("{}…", &text[..end]));
    }
    json!({"level": m.level, "logger": m.logger, "data": data}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::LoggingLevel;

    #[test]
    fn messages_keep_their_level_and_are_cut() {
        let m = LoggingMessageNotificationParam::new(LoggingLevel::Info, json!("started"));
        let v: serde_json::Value = serde_json::from_str(&frame_data(&m)).unwrap_or_default();
        assert_eq!(
            (v["level"].as_str(), v["data"].as_str()),
            (Some("info"), Some("started"))
        );
        let big =
            LoggingMessageNotificationParam::new(LoggingLevel::Info, json!("x".repeat(10_000)));
        assert!(frame_data(&big).len() < MAX_DATA + 100);
    }
}
