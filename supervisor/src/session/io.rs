//! A session's socket: the reader task that decodes frames for the actor (a frame must
//! arrive within a deadline once begun) and the writer task that drains its outbox.

use ractor::ActorRef;
use tokio::io::AsyncReadExt;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::frame::{self, FrameError};
use toolvisor_protocol::message::{ClientMessage, KNOWN_CLIENT_TYPES};
use toolvisor_protocol::writer::FrameWriter;

use super::actor::SessionMsg;
use super::outbox::Frame;

/// How long a frame may take to arrive once its first byte has (see [`read_loop`]).
const FRAME_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

pub(super) async fn read_loop(
    rd: tokio::net::unix::OwnedReadHalf,
    max: usize,
    session: ActorRef<SessionMsg>,
) {
    // Buffered: the first byte of a frame is read on its own (below) without a syscall
    // of its own, and small frames arrive in one read.
    let mut rd = tokio::io::BufReader::with_capacity(8 * 1024, rd);
    loop {
        // An idle connection may wait for ever (a subscriber, an agent thinking); once a
        // frame has begun, the whole of it must arrive within FRAME_DEADLINE, so clients
        // trickling bytes (slowloris) cannot pin connections and buffers.
        let mut first = [0u8; 1];
        if !matches!(rd.read(&mut first).await, Ok(1)) {
            let _ = session.cast(SessionMsg::Closed);
            return;
        }
        let mut rest = (&first[..]).chain(&mut rd);
        let read = tokio::time::timeout(FRAME_DEADLINE, frame::read_frame(&mut rest, max)).await;
        let Ok(read) = read else {
            tracing::warn!(
                "a client sent part of a frame and stalled for {FRAME_DEADLINE:?}; closing its connection"
            );
            let _ = session.cast(SessionMsg::Closed);
            return;
        };
        match read {
            Ok(Some(body)) => {
                let msg = frame::decode::<ClientMessage>(&body, KNOWN_CLIENT_TYPES);
                if session.cast(SessionMsg::Frame(msg)).is_err() {
                    return;
                }
            }
            Err(FrameError::TooLarge { len, max }) => {
                let _ = session.cast(SessionMsg::TooLarge(len, max));
                return;
            }
            Ok(None) | Err(_) => {
                let _ = session.cast(SessionMsg::Closed);
                return;
            }
        }
    }
}

pub(super) async fn write_loop(
    wr: tokio::net::unix::OwnedWriteHalf,
    mut rx: mpsc::Receiver<Frame>,
    closed: CancellationToken,
    session: ActorRef<SessionMsg>,
) {
    let mut out = FrameWriter::new(wr);
    // Streamed output's budget shares, given back once their bytes are written.
    let mut written_budget = Vec::new();
    loop {
        let first = tokio::select! {
            m = rx.recv() => m,
            _ = closed.cancelled() => None,
        };
        let Some(first) = first else { break };
        // An empty frame is the outbox's "close after flush" mark.
        let mut last = first.bytes.is_empty();
        out.push_encoded(&first.bytes);
        written_budget.extend(first.budget);
        while !last && out.has_room() {
            match rx.try_recv() {
                Ok(more) => {
                    last = more.bytes.is_empty();
                    out.push_encoded(&more.bytes);
                    written_budget.extend(more.budget);
                }
                Err(_) => break,
            }
        }
        // A client that stopped reading leaves this write pending forever; the outbox
        // closing (it overflowed) must still end the connection.
        let wrote = tokio::select! {
            r = out.flush() => r.is_ok(),
            _ = closed.cancelled() => false,
        };
        if !wrote || last {
            break;
        }
        written_budget.clear();
    }
    let _ = out.shutdown().await;
    closed.cancel();
    let _ = session.cast(SessionMsg::Closed);
}
