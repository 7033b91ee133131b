//! `logging/setLevel`: `initialize` advertises the `logging` capability, so the client
//! may set the least severity of the `notifications/message` it wants (MCP Inspector
//! does so at once, and gives up on a server that does not answer). The bridge sends
//! its own kind of log message — a call waits for `toolvisor approve` — at `warning`,
//! and passes on those an MCP server behind the daemon sends during a call ([`relay`]),
//! at their level; a level above a message's silences it.

#![allow(deprecated)] // Logging is deprecated from MCP 2026-07-28 on; older clients use it.

use std::sync::atomic::{AtomicU8, Ordering};

use rmcp::model::{LoggingLevel, LoggingMessageNotificationParam};
use rmcp::{Peer, RoleServer};
use serde_json::Value;

/// The client's chosen level, shared by every call of the session. Until it sets one,
/// every message goes out.
#[derive(Default)]
pub struct LogLevel(AtomicU8);

impl LogLevel {
    /// `logging/setLevel`.
    pub fn set(&self, level: LoggingLevel) {
        self.0.store(rank(level), Ordering::Relaxed);
    }

    /// Whether a message at `level` is wanted.
    pub fn allows(&self, level: LoggingLevel) -> bool {
        rank(level) >= self.0.load(Ordering::Relaxed)
    }
}

/// An MCP server's log message (the daemon's `output` of stream `log`: `{"level",
/// "logger"?, "data"}`), sent on to the client when its level lets it through.
pub async fn relay(peer: &Peer<RoleServer>, wanted: &LogLevel, data: &str) {
    let Ok(v) = serde_json::from_str::<Value>(data) else {
        return;
    };
    let Ok(level) = serde_json::from_value::<LoggingLevel>(v["level"].clone()) else {
        return;
    };
    if !wanted.allows(level) {
        return;
    }
    let mut param = LoggingMessageNotificationParam::new(level, v["data"].clone());
    param.logger = v.get("logger").and_then(Value::as_str).map(str::to_owned);
    let _ = peer.notify_logging_message(param).await;
}

/// RFC 5424's order, least severe first (`LoggingLevel` has no `Ord`).
fn rank(level: LoggingLevel) -> u8 {
    match level {
        LoggingLevel::Debug => 0,
        LoggingLevel::Info => 1,
        LoggingLevel::Notice => 2,
        LoggingLevel::Warning => 3,
        LoggingLevel::Error => 4,
        LoggingLevel::Critical => 5,
        LoggingLevel::Alert => 6,
        LoggingLevel::Emergency => 7,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_level_silences_what_is_below_it() {
        let l = LogLevel::default();
        assert!(l.allows(LoggingLevel::Debug));
        l.set(LoggingLevel::Error);
        assert!(!l.allows(LoggingLevel::Warning));
        assert!(l.allows(LoggingLevel::Critical));
        l.set(LoggingLevel::Warning);
        assert!(l.allows(LoggingLevel::Warning));
    }
}
