//! A session's outgoing queue: bounded, so a client that stops reading cannot make
//! the supervisor's memory grow. Results and answers that find it full close the
//! connection; streamed output waits for room (backpressure to the command); events
//! are dropped (and counted by the subscriber) once the queue is half full, so a slow
//! subscriber never blocks anything and keeps room for its own results.

use tokio::sync::mpsc;
use toolvisor_protocol::ServerMessage;
use toolvisor_protocol::frame;

/// Frames a session may have queued before it counts as not reading.
pub const OUTBOX_FRAMES: usize = 4096;

/// Free frames an event must leave in the queue: results and answers keep this much
/// room even while a subscriber is behind, so events alone never close a connection.
pub const EVENT_RESERVE: usize = OUTBOX_FRAMES / 2;

#[derive(Clone, Debug)]
pub struct Outbox {
    tx: mpsc::Sender<Vec<u8>>,
    /// Cancelled when the connection must close (slow client, protocol error).
    pub closed: tokio_util::sync::CancellationToken,
}

impl Outbox {
    pub fn new() -> (Outbox, mpsc::Receiver<Vec<u8>>) {
        let (tx, rx) = mpsc::channel(OUTBOX_FRAMES);
        (
            Outbox {
                tx,
                closed: Default::default(),
            },
            rx,
        )
    }

    /// Queue a message; a full queue means the client is not reading: close.
    pub fn send(&self, msg: &ServerMessage) {
        let Ok(bytes) = frame::encode(msg) else {
            tracing::error!("cannot encode {msg:?}");
            return;
        };
        if self.tx.try_send(bytes).is_err() {
            if !self.closed.is_cancelled() {
                tracing::warn!("a client stopped reading; closing its connection");
            }
            self.closed.cancel();
        }
    }

    /// Ask the writer to close the connection once everything queued is written.
    pub fn close_after_flush(&self) {
        if self.tx.try_send(Vec::new()).is_err() {
            self.closed.cancel();
        }
    }

    /// Queue an event only if the queue keeps [`EVENT_RESERVE`] free frames; `false`
    /// means it was dropped (the subscriber counts it), never that the connection closes.
    pub fn send_event(&self, msg: &ServerMessage) -> bool {
        if self.closed.is_cancelled() || self.tx.capacity() <= EVENT_RESERVE {
            return false;
        }
        match frame::encode(msg) {
            Ok(bytes) => self.tx.try_send(bytes).is_ok(),
            Err(e) => {
                tracing::error!("cannot encode an event: {e}");
                false
            }
        }
    }

    /// Queue a message, waiting for room (streamed output).
    pub async fn send_wait(&self, msg: &ServerMessage) {
        if let Ok(bytes) = frame::encode(msg) {
            tokio::select! {
                _ = self.tx.send(bytes) => {}
                _ = self.closed.cancelled() => {}
            }
        }
    }
}
