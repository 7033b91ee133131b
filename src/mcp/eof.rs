//! A reader that says when its input ends: the MCP client closing stdin (or dying)
//! cancels its calls at once.

use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, ReadBuf};
use tokio_util::sync::CancellationToken;

/// `inner`, cancelling `eof` once a read returns nothing (or fails).
pub struct EofReader<R> {
    inner: R,
    eof: CancellationToken,
}

impl<R> EofReader<R> {
    pub fn new(inner: R, eof: CancellationToken) -> Self {
        EofReader { inner, eof }
    }
}

impl<R: AsyncRead + Unpin> AsyncRead for EofReader<R> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let wanted = buf.remaining() > 0;
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if wanted && buf.filled().len() == before => self.eof.cancel(),
            Poll::Ready(Err(_)) => self.eof.cancel(),
            _ => {}
        }
        polled
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    #[test]
    fn the_end_of_input_is_told() {
        crate::mcp::tests::block_on(async {
            let eof = CancellationToken::new();
            let mut r = EofReader::new(&b"abc"[..], eof.clone());
            let mut buf = Vec::new();
            r.read_to_end(&mut buf).await.unwrap();
            assert_eq!(buf, b"abc");
            assert!(eof.is_cancelled());
        });
    }
}
