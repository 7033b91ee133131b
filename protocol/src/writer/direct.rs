//! A connection written by whoever has a frame, at once, when nothing is queued.
//!
//! Handing every frame to one writer task costs a thread hand-off per frame even when
//! the socket is idle. [`DirectWriter`] writes the
//! frame itself with a non-blocking `write` when no earlier frame is still waiting;
//! only what the socket does not take at once (a full buffer, a frame written in part)
//! goes to the queue, and while the queue holds anything every later frame queues
//! behind it, so frames never interleave and keep their order. The writer task
//! drains the queue, coalescing what it finds.
//!
//! Ending: [`DirectWriter::close_after_flush`] closes the writing half once what is
//! queued is written; [`DirectWriter::abort`] closes it now (a peer that stopped
//! reading). Either way later sends are refused and the drain task returns.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::net::unix::OwnedWriteHalf;
use tokio::sync::{Notify, mpsc};

use super::BATCH_BYTES;

/// Bytes a connection may have queued before [`DirectWriter::send`] waits for room.
pub const QUEUE_BYTES: usize = 4 << 20;

/// The sending side: cheap to clone; the connection's write half closes once every
/// clone and the writer task are gone.
#[derive(Clone)]
pub struct DirectWriter {
    shared: Arc<Shared>,
    tx: mpsc::UnboundedSender<Vec<u8>>,
}

struct Shared {
    wr: OwnedWriteHalf,
    state: Mutex<State>,
    /// Woken when queued bytes were written (room) or the connection failed.
    room: Notify,
    /// Woken by [`DirectWriter::abort`]: the drain stops waiting to write.
    stop: Notify,
    /// Queued bytes past which [`DirectWriter::send`] waits.
    limit: usize,
}

#[derive(Default)]
struct State {
    /// Frames (or a frame's unwritten rest) queued and not yet written.
    queued: usize,
    queued_bytes: usize,
    /// A write failed (the peer is gone), or the writer was closed: nothing more is
    /// sent.
    closed: bool,
}

/// The task that writes what was queued; run it (`tokio::spawn`) beside the writer.
pub struct Drain {
    shared: Arc<Shared>,
    rx: mpsc::UnboundedReceiver<Vec<u8>>,
}

impl DirectWriter {
    /// A writer on `wr` and the task that drains its queue.
    pub fn new(wr: OwnedWriteHalf) -> (DirectWriter, Drain) {
        Self::with_limit(wr, QUEUE_BYTES)
    }

    /// A writer whose [`DirectWriter::send`] waits once `limit` bytes are queued.
    pub fn with_limit(wr: OwnedWriteHalf, limit: usize) -> (DirectWriter, Drain) {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            wr,
            state: Mutex::default(),
            room: Notify::new(),
            stop: Notify::new(),
            limit: limit.max(1),
        });
        let drain = Drain {
            shared: shared.clone(),
            rx,
        };
        (DirectWriter { shared, tx }, drain)
    }

    /// Send an encoded frame now, whatever is queued (for answers: their number is
    /// bounded by the calls in flight). False once the connection has failed.
    pub fn send_now(&self, frame: Vec<u8>) -> bool {
        let mut st = self.shared.lock();
        if st.closed {
            return false;
        }
        let rest = if st.queued == 0 {
            match self.shared.write_some(&frame) {
                Ok(n) if n == frame.len() => return true,
                Ok(0) => frame,
                Ok(n) => frame[n..].to_vec(),
                Err(_) => {
                    st.closed = true;
                    drop(st);
                    self.shared.room.notify_waiters();
                    return false;
                }
            }
        } else {
            frame
        };
        st.queued += 1;
        st.queued_bytes += rest.len();
        if self.tx.send(rest).is_err() {
            st.closed = true;
            return false;
        }
        true
    }

    /// Frames (or rests of frames) queued and not yet written.
    pub fn queued_frames(&self) -> usize {
        self.shared.lock().queued
    }

    /// Whether sends are refused (a write failed, or the writer was closed).
    pub fn is_closed(&self) -> bool {
        self.shared.lock().closed
    }

    /// Refuse later sends and close the writing half once everything queued before
    /// is written; the drain task then returns.
    pub fn close_after_flush(&self) {
        let mut st = self.shared.lock();
        if st.closed {
            return;
        }
        st.closed = true;
        // The empty frame is the drain's mark: everything before it is written.
        st.queued += 1;
        if self.tx.send(Vec::new()).is_err() {
            self.shared.shutdown();
        }
        drop(st);
        self.shared.room.notify_waiters();
    }

    /// Refuse later sends, drop what is queued and close the writing half now.
    pub fn abort(&self) {
        self.shared.lock().closed = true;
        self.shared.shutdown();
        self.shared.stop.notify_one();
        self.shared.room.notify_waiters();
    }

    /// Send an encoded frame, first waiting while more than the limit is queued
    /// (streamed output: backpressure to its producer). False once the connection has
    /// failed.
    pub async fn send(&self, frame: Vec<u8>) -> bool {
        loop {
            let room = self.shared.room.notified();
            {
                let st = self.shared.lock();
                if st.closed {
                    return false;
                }
                if st.queued_bytes < self.shared.limit {
                    break;
                }
            }
            room.await;
        }
        self.send_now(frame)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One non-blocking write: how much the socket took (0 when it is full).
    fn write_some(&self, bytes: &[u8]) -> io::Result<usize> {
        match self.wr.try_write(bytes) {
            Ok(n) => Ok(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
            Err(e) => Err(e),
        }
    }

    /// Write all of `bytes`, waiting for the socket to take them (or for an abort).
    async fn write_all(&self, mut bytes: &[u8]) -> io::Result<()> {
        while !bytes.is_empty() {
            tokio::select! {
                r = self.wr.writable() => r?,
                _ = self.stop.notified() => return Err(io::ErrorKind::ConnectionAborted.into()),
            }
            let n = self.write_some(bytes)?;
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Close the writing half (the peer reads EOF after what was written).
    fn shutdown(&self) {
        use std::os::fd::AsRawFd;
        let fd = self.wr.as_ref().as_raw_fd();
        let _ = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Write);
    }
}

impl Drain {
    /// Write what is queued until every [`DirectWriter`] is gone or a write fails.
    pub async fn run(mut self) {
        let mut buf = Vec::new();
        while let Some(first) = self.rx.recv().await {
            buf.clear();
            let mut frames = 0;
            let mut last = false;
            let mut next = Some(first);
            while let Some(frame) = next.take() {
                frames += 1;
                // An empty frame: close once everything before it is written.
                last = frame.is_empty();
                buf.extend_from_slice(&frame);
                if !last && buf.len() < BATCH_BYTES {
                    next = self.rx.try_recv().ok();
                }
            }
            let wrote = self.shared.write_all(&buf).await;
            {
                let mut st = self.shared.lock();
                st.queued -= frames;
                st.queued_bytes -= buf.len();
                st.closed |= wrote.is_err();
            }
            self.shared.room.notify_waiters();
            if wrote.is_err() || last {
                self.shared.shutdown();
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::{self, read_frame};
    use tokio::net::UnixStream;

    fn frame_of(n: u64, pad: usize) -> Vec<u8> {
        frame::encode(&serde_json::json!({"type": "n", "n": n, "pad": "x".repeat(pad)}))
            .expect("a small map encodes")
    }

    /// Frames sent while the reader is not reading (so most of them queue, some in
    /// part) arrive whole and in order once it reads.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn frames_keep_their_order_through_a_full_socket() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let (_rd, wr) = a.into_split();
        let (w, drain) = DirectWriter::new(wr);
        let task = tokio::spawn(drain.run());
        let sender = tokio::spawn({
            let w = w.clone();
            async move {
                for n in 0..400u64 {
                    let f = frame_of(n, (n as usize * 997) % 9000);
                    if n % 2 == 0 {
                        assert!(w.send_now(f));
                    } else {
                        assert!(w.send(f).await);
                    }
                }
            }
        });
        let mut b = b;
        for n in 0..400u64 {
            let body = read_frame(&mut b, 1 << 20)
                .await
                .expect("read")
                .expect("a frame");
            let v: serde_json::Value = rmp_serde::from_slice(&body).expect("msgpack");
            assert_eq!(v["n"], n);
        }
        sender.await.expect("sender");
        drop(w);
        task.await.expect("the drain ends with its writers");
        assert!(read_frame(&mut b, 1024).await.expect("clean end").is_none());
    }

    #[tokio::test]
    async fn a_gone_peer_fails_the_sender_instead_of_queueing_for_ever() {
        let (a, b) = UnixStream::pair().expect("socketpair");
        let (_rd, wr) = a.into_split();
        let (w, drain) = DirectWriter::new(wr);
        let task = tokio::spawn(drain.run());
        drop(b);
        let mut failed = false;
        for n in 0..10_000u64 {
            if !w.send(frame_of(n, 4000)).await {
                failed = true;
                break;
            }
        }
        assert!(failed, "a write to a closed peer fails");
        drop(w);
        task.await.expect("drain ends");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn close_after_flush_writes_everything_queued_then_eof() {
        let (a, mut b) = UnixStream::pair().expect("socketpair");
        let (_rd, wr) = a.into_split();
        let (w, drain) = DirectWriter::new(wr);
        let task = tokio::spawn(drain.run());
        // More than a socket buffer: most of it is queued when the close comes.
        for n in 0..100u64 {
            assert!(w.send_now(frame_of(n, 8000)));
        }
        w.close_after_flush();
        assert!(!w.send_now(frame_of(100, 10)), "refused after the close");
        for n in 0..100u64 {
            let body = read_frame(&mut b, 1 << 20)
                .await
                .expect("read")
                .expect("a frame");
            let v: serde_json::Value = rmp_serde::from_slice(&body).expect("msgpack");
            assert_eq!(v["n"], n);
        }
        assert!(read_frame(&mut b, 1024).await.expect("clean end").is_none());
        tokio::time::timeout(std::time::Duration::from_secs(10), task)
            .await
            .expect("the drain returns after the close")
            .expect("drain");
    }

    /// A peer that never reads: an abort ends the drain (stuck waiting to write) and
    /// a sender waiting for room.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn abort_frees_a_drain_and_senders_stuck_on_a_peer_that_does_not_read() {
        let (a, _b) = UnixStream::pair().expect("socketpair");
        let (_rd, wr) = a.into_split();
        let (w, drain) = DirectWriter::with_limit(wr, 64 * 1024);
        let task = tokio::spawn(drain.run());
        while w.queued_frames() == 0 {
            assert!(w.send_now(frame_of(0, 8000)));
        }
        let waiting = tokio::spawn({
            let w = w.clone();
            async move {
                loop {
                    if !w.send(frame_of(1, 8000)).await {
                        return;
                    }
                }
            }
        });
        w.abort();
        let deadline = std::time::Duration::from_secs(10);
        tokio::time::timeout(deadline, waiting)
            .await
            .expect("the sender gives up")
            .expect("sender");
        tokio::time::timeout(deadline, task)
            .await
            .expect("the drain returns")
            .expect("drain");
        assert!(w.is_closed());
    }
}
