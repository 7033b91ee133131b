//! Writing frames to a connection: every frame is length-prefixed in one place
//! ([`frame::encode_into`]), and every long-lived connection (client ↔ supervisor,
//! supervisor ↔ worker) writes through [`direct::DirectWriter`]: a frame goes out on
//! its producer's own thread when nothing is queued before it (no hand-off), and what
//! the socket does not take at once is queued for one drain task, which writes
//! everything queued meanwhile in one go (up to [`BATCH_BYTES`]), so a burst of small
//! frames (streamed output, many short calls) costs a few syscalls, not one each.

use serde::Serialize;
use tokio::io::{AsyncWrite, AsyncWriteExt};

use crate::frame::{self, FrameError};

pub mod direct;

/// How much one write gathers at most before it goes out: enough to amortise the
/// syscall, small enough that the first frame of a batch is not held up long.
pub const BATCH_BYTES: usize = 256 * 1024;

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
