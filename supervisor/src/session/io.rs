//! A session's socket: the reader task that decodes frames for the actor (a frame must
//! arrive within a deadline once begun) and the writer task that writes what its
//! outbox queued.

use ractor::ActorRef;
use tokio::io::AsyncReadExt;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::frame::{self, FrameError};
use toolvisor_protocol::message::{ClientMessage, KNOWN_CLIENT_TYPES};
use toolvisor_protocol::writer::direct::Drain;

use super::actor::SessionMsg;

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

/// The session's writer task: writes what the outbox queued until the connection
/// ends (the outbox closed it, the client went, a write failed), then marks the
/// outbox closed for everyone still holding it and tells the actor.
pub(super) async fn write_loop(
    drain: Drain,
    closed: CancellationToken,
    session: ActorRef<SessionMsg>,
) {
    tokio::select! {
        _ = drain.run() => {}
        _ = closed.cancelled() => {}
    }
    closed.cancel();
    let _ = session.cast(SessionMsg::Closed);
}
