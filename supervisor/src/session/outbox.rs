//! A session's outgoing queue: bounded, so a client that stops reading cannot make
//! the supervisor's memory grow. Results and answers that find it full close the
//! connection; streamed output waits for room (backpressure to the command) and may
//! hold at most [`STREAM_BYTES`] queued at once, whatever the frame count; events are
//! dropped (and counted by the subscriber) once the queue is half full, so a slow
//! subscriber never blocks anything and keeps room for its own results.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, mpsc};
use toolvisor_protocol::ServerMessage;
use toolvisor_protocol::frame;

/// Frames a session may have queued before it counts as not reading.
pub const OUTBOX_FRAMES: usize = 4096;

/// Bytes of streamed output a session may have queued: past it, output waits (and the
/// command behind it blocks on its pipe) until the client reads. Without it a client
/// that never reads would pin 4096 frames of 16 KiB (64 MiB) per connection.
pub const STREAM_BYTES: usize = 1 << 20;

/// One queued frame; streamed output carries its share of [`STREAM_BYTES`], given back
/// once the writer has written it.
#[derive(Debug)]
pub struct Frame {
    /// The encoded frame (empty: close after writing what is queued).
    pub bytes: Vec<u8>,
    /// Streamed output's share of the budget, freed once written.
    pub budget: Option<OwnedSemaphorePermit>,
}

impl Frame {
    fn plain(bytes: Vec<u8>) -> Frame {
        Frame {
            bytes,
            budget: None,
        }
    }
}

/// Free frames an event must leave in the queue: results and answers keep this much
/// room even while a subscriber is behind, so events alone never close a connection.
pub const EVENT_RESERVE: usize = OUTBOX_FRAMES / 2;

/// A session's outgoing queue: bounded, so a client that stops reading is disconnected
/// instead of growing the server's memory; results keep room ahead of events.
#[derive(Clone, Debug)]
pub struct Outbox {
    tx: mpsc::Sender<Frame>,
    /// Bytes of streamed output not yet written (see [`STREAM_BYTES`]).
    stream_budget: Arc<Semaphore>,
    /// Cancelled when the connection must close (slow client, protocol error).
    pub closed: tokio_util::sync::CancellationToken,
}

impl Outbox {
    /// An outbox and the receiver its writer task drains.
    pub fn new() -> (Outbox, mpsc::Receiver<Frame>) {
        let (tx, rx) = mpsc::channel(OUTBOX_FRAMES);
        (
            Outbox {
                tx,
                stream_budget: Arc::new(Semaphore::new(STREAM_BYTES)),
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
        if self.tx.try_send(Frame::plain(bytes)).is_err() {
            if !self.closed.is_cancelled() {
                tracing::warn!("a client stopped reading; closing its connection");
            }
            self.closed.cancel();
        }
    }

    /// Ask the writer to close the connection once everything queued is written.
    pub fn close_after_flush(&self) {
        if self.tx.try_send(Frame::plain(Vec::new())).is_err() {
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
            Ok(bytes) => self.tx.try_send(Frame::plain(bytes)).is_ok(),
            Err(e) => {
                tracing::error!("cannot encode an event: {e}");
                false
            }
        }
    }

    /// Queue a message, waiting for room (streamed output): room in the queue, and
    /// its size in the session's streamed-output budget.
    pub async fn send_wait(&self, msg: &ServerMessage) {
        let Ok(bytes) = frame::encode(msg) else {
            return;
        };
        // A frame larger than the whole budget takes all of it (output frames are
        // ≤ 16 KiB, so this only guards the arithmetic).
        let need = bytes.len().clamp(1, STREAM_BYTES) as u32;
        let budget = tokio::select! {
            p = self.stream_budget.clone().acquire_many_owned(need) => p.ok(),
            _ = self.closed.cancelled() => None,
        };
        let Some(budget) = budget else { return };
        let frame = Frame {
            bytes,
            budget: Some(budget),
        };
        tokio::select! {
            _ = self.tx.send(frame) => {}
            _ = self.closed.cancelled() => {}
        }
    }
}
