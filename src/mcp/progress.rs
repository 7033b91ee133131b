//! `notifications/progress` for a call whose request carried `_meta.progressToken`:
//! one with each streamed output chunk (its last line as the message), one with each
//! of the daemon's `call_heartbeat`s (every 5 s while the call runs), and one when the
//! call waits for a person. Progress only grows, as the spec requires.
//!
//! An MCP server's own progress notifications (the daemon's `output` of stream
//! `progress`) are passed on with the values the server gave; from the first on, the
//! heartbeats stop (the server's count is the call's progress now, and a heartbeat's
//! would not fit in it).

use std::time::Instant;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};

/// Longest message sent with a notification.
const MAX_MESSAGE: usize = 200;

/// The progress of one call.
pub struct Progress {
    peer: Peer<RoleServer>,
    token: ProgressToken,
    sent: u64,
    started: Instant,
    /// The server of the call sends progress of its own.
    relaying: bool,
}

impl Progress {
    pub fn new(peer: Peer<RoleServer>, token: ProgressToken) -> Progress {
        Progress {
            peer,
            token,
            sent: 0,
            started: Instant::now(),
            relaying: false,
        }
    }

    /// A chunk of output arrived.
    pub async fn output(&mut self, data: &str) {
        match last_line(data) {
            Some(line) => self.send(line.to_owned()).await,
            None => self.heartbeat().await,
        }
    }

    /// An MCP server's progress notification, `{"progress", "total"?, "message"?}`.
    pub async fn relay(&mut self, data: &str) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
            return;
        };
        let Some(progress) = v.get("progress").and_then(serde_json::Value::as_f64) else {
            return;
        };
        self.relaying = true;
        let mut param = ProgressNotificationParam::new(self.token.clone(), progress);
        param.total = v.get("total").and_then(serde_json::Value::as_f64);
        param.message = v
            .get("message")
            .and_then(serde_json::Value::as_str)
            .map(|m| cut(m.to_owned()));
        if let Err(e) = self.peer.notify_progress(param).await {
            tracing::debug!("progress notification not sent: {e}");
        }
    }

    /// The call still runs.
    pub async fn heartbeat(&mut self) {
        if self.relaying {
            return;
        }
        let secs = self.started.elapsed().as_secs();
        self.send(format!("running for {secs} s")).await;
    }

    /// Anything else worth saying (a confirmation being waited for).
    pub async fn say(&mut self, message: String) {
        self.send(message).await;
    }

    async fn send(&mut self, message: String) {
        self.sent += 1;
        let mut param = ProgressNotificationParam::new(self.token.clone(), self.sent as f64);
        param.message = Some(cut(message));
        if let Err(e) = self.peer.notify_progress(param).await {
            tracing::debug!("progress notification not sent: {e}");
        }
    }
}

/// The last non-empty line of a chunk, trimmed.
pub fn last_line(data: &str) -> Option<&str> {
    data.lines().map(str::trim).rfind(|l| !l.is_empty())
}

fn cut(mut s: String) -> String {
    if s.len() > MAX_MESSAGE {
        let mut end = MAX_MESSAGE;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
        s.push('…');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_line_is_the_message() {
        assert_eq!(last_line("a\nb\n\n"), Some("b"));
        assert_eq!(last_line("  step 3/10  "), Some("step 3/10"));
        assert_eq!(last_line("\n\n"), None);
        assert_eq!(cut("é".repeat(300)).chars().count(), 101);
    }
}
