//! A session's outgoing frames: written to the socket by whoever produces them when
//! nothing is queued before them (a call's result leaves on the call's own task, no
//! hand-off to a writer task), else queued, in order, for the session's writer task
//! ([`DirectWriter`]). Bounded, so a client that stops reading cannot make the
//! supervisor's memory grow: results and answers that find [`OUTBOX_FRAMES`] queued
//! close the connection; streamed output waits while [`STREAM_BYTES`] are queued
//! (backpressure to the command); events are dropped (and counted by the subscriber)
//! once the queue is half full, so a slow subscriber never blocks anything and keeps
//! room for its own results.

use tokio::net::unix::OwnedWriteHalf;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::ServerMessage;
use toolvisor_protocol::frame;
use toolvisor_protocol::writer::direct::{DirectWriter, Drain};

/// Frames a session may have queued before it counts as not reading.
pub const OUTBOX_FRAMES: usize = 4096;

/// Bytes a session may have queued before streamed output waits (and the command
/// behind it blocks on its pipe) until the client reads. Without it a client that
/// never reads would pin 4096 frames of 16 KiB (64 MiB) per connection.
pub const STREAM_BYTES: usize = 1 << 20;

/// Free frames an event must leave in the queue: results and answers keep this much
/// room even while a subscriber is behind, so events alone never close a connection.
pub const EVENT_RESERVE: usize = OUTBOX_FRAMES / 2;

/// A session's outgoing frames. Cheap to clone; every clone writes to the one socket.
#[derive(Clone)]
pub struct Outbox {
    writer: DirectWriter,
    /// Cancelled when the connection must close (slow client, protocol error, the
    /// socket's end).
    pub closed: CancellationToken,
}

impl std::fmt::Debug for Outbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Outbox")
            .field("closed", &self.closed.is_cancelled())
            .finish_non_exhaustive()
    }
}

impl Outbox {
    /// An outbox writing to `wr`, and the writer task's work (run it, then mark the
    /// outbox closed: see the session's `write_loop`).
    pub fn new(wr: OwnedWriteHalf) -> (Outbox, Drain) {
        let (writer, drain) = DirectWriter::with_limit(wr, STREAM_BYTES);
        let out = Outbox {
            writer,
            closed: CancellationToken::new(),
        };
        (out, drain)
    }

    /// Send a message now; a full queue means the client is not reading: close.
    pub fn send(&self, msg: &ServerMessage) {
        let Ok(bytes) = frame::encode(msg) else {
            tracing::error!("cannot encode {msg:?}");
            return;
        };
        if self.closed.is_cancelled() {
            return;
        }
        if self.writer.queued_frames() >= OUTBOX_FRAMES {
            tracing::warn!("a client stopped reading; closing its connection");
            self.abort();
        } else if !self.writer.send_now(bytes) {
            self.abort();
        }
    }

    /// Close the connection now, dropping what is queued.
    fn abort(&self) {
        self.writer.abort();
        self.closed.cancel();
    }

    /// Close the connection once everything queued is written.
    pub fn close_after_flush(&self) {
        self.writer.close_after_flush();
    }

    /// Send an event only if the queue keeps [`EVENT_RESERVE`] free frames; `false`
    /// means it was dropped (the subscriber counts it), never that the connection closes.
    pub fn send_event(&self, msg: &ServerMessage) -> bool {
        if self.closed.is_cancelled()
            || self.writer.queued_frames() >= OUTBOX_FRAMES - EVENT_RESERVE
        {
            return false;
        }
        match frame::encode(msg) {
            Ok(bytes) => self.writer.send_now(bytes),
            Err(e) => {
                tracing::error!("cannot encode an event: {e}");
                false
            }
        }
    }

    /// Send a message, waiting while [`STREAM_BYTES`] are queued (streamed output).
    pub async fn send_wait(&self, msg: &ServerMessage) {
        let Ok(bytes) = frame::encode(msg) else {
            return;
        };
        tokio::select! {
            _ = self.writer.send(bytes) => {}
            _ = self.closed.cancelled() => {}
        }
    }
}
