//! The pump: a command's stdout and stderr read concurrently, in arrival order.

use tokio::io::AsyncReadExt;
use tokio::process::{ChildStderr, ChildStdout};

use super::{Coalescer, Record, Stream};

/// Pipe read size.
const READ_BUF: usize = 8 * 1024;

type Pipe = Box<dyn tokio::io::AsyncRead + Unpin + Send>;

/// A command's stdout and stderr, read until both reach EOF (or its one merged pipe,
/// read as stdout).
pub(crate) struct Pipes {
    out: Option<Pipe>,
    err: Option<Pipe>,
}

impl Pipes {
    pub(crate) fn new(out: Option<ChildStdout>, err: Option<ChildStderr>) -> Self {
        Pipes {
            out: out.map(|p| Box::new(p) as Pipe),
            err: err.map(|p| Box::new(p) as Pipe),
        }
    }

    /// One pipe carrying both streams in write order.
    pub(crate) fn merged(read: std::io::PipeReader) -> Result<Self, crate::ToolError> {
        let fd = std::os::fd::OwnedFd::from(read);
        let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .map_err(|e| crate::ToolError::internal(format!("cannot read the output pipe: {e}")))?;
        Ok(Pipes {
            out: Some(Box::new(rx)),
            err: None,
        })
    }

    /// Two pipes the worker made itself (for a spare sandbox, which got the write ends).
    pub(crate) fn split(
        out: std::io::PipeReader,
        err: std::io::PipeReader,
    ) -> Result<Self, crate::ToolError> {
        let rx = |p: std::io::PipeReader| {
            tokio::net::unix::pipe::Receiver::from_owned_fd(std::os::fd::OwnedFd::from(p))
                .map(|r| Box::new(r) as Pipe)
                .map_err(|e| {
                    crate::ToolError::internal(format!("cannot read the output pipe: {e}"))
                })
        };
        Ok(Pipes {
            out: Some(rx(out)?),
            err: Some(rx(err)?),
        })
    }

    pub(crate) fn done(&self) -> bool {
        self.out.is_none() && self.err.is_none()
    }

    /// Read the command's terminal (its master side) as its output; what the shim
    /// itself writes stays readable as the second stream.
    pub(crate) fn add_terminal(
        &mut self,
        master: std::os::fd::OwnedFd,
    ) -> Result<(), crate::ToolError> {
        let rx = tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(master)
            .map_err(|e| crate::ToolError::internal(format!("cannot read the terminal: {e}")))?;
        self.err = self.out.take();
        self.out = Some(Box::new(rx));
        Ok(())
    }
}

/// Read both pipes concurrently, in arrival order, into `rec` and (when streaming) the
/// coalescer, until both are closed. Awaiting the sink pauses the reading: the child
/// then blocks on its full pipe, and memory stays bounded. Cancellation-safe between
/// chunks: the pipes stay in `pipes` for a later, non-streaming drain.
pub(crate) async fn pump(
    pipes: &mut Pipes,
    rec: &mut (dyn Record + Send),
    mut stream: Option<&mut Coalescer>,
) {
    let mut bo = vec![0u8; READ_BUF];
    let mut be = vec![0u8; READ_BUF];
    while !pipes.done() {
        let due = stream.as_ref().and_then(|c| c.due());
        let (which, n) = tokio::select! {
            r = read_opt(&mut pipes.out, &mut bo) => (Stream::Stdout, r),
            r = read_opt(&mut pipes.err, &mut be) => (Stream::Stderr, r),
            _ = crate::exec::launch::sleep_until_opt(due) => {
                if let Some(c) = stream.as_deref_mut() { c.flush(false).await; }
                continue;
            }
        };
        if n == 0 {
            match which {
                Stream::Stdout => pipes.out = None,
                Stream::Stderr => pipes.err = None,
            }
            continue;
        }
        let data = match which {
            Stream::Stdout => &bo[..n],
            Stream::Stderr => &be[..n],
        };
        rec.record(data);
        if let Some(c) = stream.as_deref_mut() {
            c.push(which, data).await;
        }
    }
    if let Some(c) = stream {
        c.flush(true).await;
    }
}

/// Read from a pipe that may be closed already (then never ready); errors count as EOF.
async fn read_opt<R: AsyncReadExt + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> usize {
    match pipe {
        Some(p) => p.read(buf).await.unwrap_or(0),
        None => std::future::pending().await,
    }
}
