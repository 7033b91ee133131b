//! Writing frames to a connection: the one writer both sides use, so every frame is
//! length-prefixed in one place ([`frame::encode_into`]) and every connection
//! coalesces the same way.
//!
//! Two ways to write: [`write_queued`], one task that writes everything queued, and
//! [`direct::DirectWriter`], which writes a frame on the sender's own thread when
//! nothing is queued before it (no hand-off) and queues only what the socket does not
//! take at once.
//!
//! A connection's frames are queued by whoever produces them and written by one task.
//! While a write is under way more frames queue up; the next write takes all of them
//! (up to [`BATCH_BYTES`]), so a burst of small frames (streamed output, many short
//! calls) costs a few syscalls, not one each.

use serde::Serialize;
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

use crate::frame::{self, FrameError};

pub mod direct;

/// How much one write gathers at most before it goes out: enough to amortise the
/// syscall, small enough that the first frame of a batch is not held up long.
pub const BATCH_BYTES: usize = 256 * 1024;
/// The buffer a writer starts with.
const START_CAPACITY: usize = 64 * 1024;
/// A buffer grown past this by one large frame is given back after its write, so a
/// connection does not keep a large result's memory for its whole life.
const KEEP_CAPACITY: usize = 1 << 20;

/// Frames gathered for one write, and the stream they go to.
pub struct FrameWriter<W> {
    wr: W,
    buf: Vec<u8>,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    /// A writer with an empty batch.
    pub fn new(wr: W) -> Self {
        FrameWriter {
            wr,
            buf: Vec::with_capacity(START_CAPACITY),
        }
    }

    /// Add a frame encoded earlier (by [`frame::encode`]) to the batch.
    pub fn push_encoded(&mut self, frame: &[u8]) {
        self.buf.extend_from_slice(frame);
    }

    /// Encode `msg` straight into the batch; on error the batch is unchanged.
    pub fn push<T: Serialize>(&mut self, msg: &T) -> Result<(), FrameError> {
        frame::encode_into(&mut self.buf, msg)
    }

    /// Whether the batch may take more frames before it is written.
    pub fn has_room(&self) -> bool {
        self.buf.len() < BATCH_BYTES
    }

    /// Write the batch and start a new one.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.wr.write_all(&self.buf).await?;
        self.buf.clear();
        if self.buf.capacity() > KEEP_CAPACITY {
            self.buf = Vec::with_capacity(START_CAPACITY);
        }
        Ok(())
    }

    /// Close the writing half (the peer reads EOF after what was written).
    pub async fn shutdown(&mut self) -> std::io::Result<()> {
        self.wr.shutdown().await
    }
}

/// Write everything queued on `rx`, each item added to the batch by `push`, until the
/// queue closes or a write fails (the peer is gone).
pub async fn write_queued<W, T>(
    wr: W,
    mut rx: mpsc::Receiver<T>,
    mut push: impl FnMut(&mut FrameWriter<W>, T),
) where
    W: AsyncWrite + Unpin,
{
    let mut out = FrameWriter::new(wr);
    while let Some(first) = rx.recv().await {
        push(&mut out, first);
        while out.has_room() {
            match rx.try_recv() {
                Ok(more) => push(&mut out, more),
                Err(_) => break,
            }
        }
        if out.flush().await.is_err() {
            return;
        }
    }
}

/// Encode `msg` and write it at once, for a connection that sends one message at a
/// time and waits for the answer (a client).
pub async fn write_message<W, T>(wr: &mut W, msg: &T) -> Result<(), FrameError>
where
    W: AsyncWrite + Unpin,
    T: Serialize,
{
    let bytes = frame::encode(msg)?;
    wr.write_all(&bytes).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::read_frame;

    #[tokio::test]
    async fn queued_frames_arrive_whole_and_in_order() {
        let (a, mut b) = tokio::io::duplex(1 << 20);
        let (tx, rx) = mpsc::channel::<u32>(16);
        let writer = tokio::spawn(write_queued(a, rx, |out, n| {
            out.push(&serde_json::json!({ "type": "n", "n": n }))
                .expect("a small map encodes");
        }));
        for n in 0..10 {
            tx.send(n).await.expect("the writer is running");
        }
        drop(tx);
        writer.await.expect("the writer ends when its queue closes");
        for n in 0..10u64 {
            let body = read_frame(&mut b, 1024)
                .await
                .expect("read")
                .expect("a frame");
            let v: serde_json::Value = rmp_serde::from_slice(&body).expect("msgpack");
            assert_eq!(v["n"], n);
        }
        assert!(read_frame(&mut b, 1024).await.expect("clean end").is_none());
    }

    #[test]
    fn a_frame_that_cannot_encode_leaves_the_batch_as_it_was() {
        struct Fails;
        impl Serialize for Fails {
            fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
                Err(serde::ser::Error::custom("no"))
            }
        }
        let mut buf = frame::encode(&serde_json::json!({"type": "a"})).expect("encodes");
        let before = buf.clone();
        assert!(frame::encode_into(&mut buf, &Fails).is_err());
        assert_eq!(buf, before);
    }
}
