//! What a tool gets to do its work: the worker's settings, a path resolver, a
//! cancellation flag and (when the call streams) a sink for output frames.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use toolvisor_protocol::worker::{FromWorker, Outcome, WorkerInit};
use toolvisor_protocol::{ErrorBody, ErrorType};

use crate::paths::Resolver;
use toolvisor_protocol::writer::direct::DirectWriter;

/// Set when the supervisor cancels a call; long loops check it and stop.
#[derive(Clone, Debug, Default)]
pub struct CancelFlag {
    flag: Arc<AtomicBool>,
    notify: Arc<tokio::sync::Notify>,
}

impl CancelFlag {
    /// A flag not raised.
    pub fn new() -> Self {
        Self::default()
    }

    /// Raise it: every check and waiter sees it.
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether it is raised.
    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Relaxed)
    }

    /// Resolves once the call is cancelled (for async tools).
    pub async fn cancelled(&self) {
        loop {
            let notified = self.notify.notified();
            if self.is_cancelled() {
                return;
            }
            notified.await;
        }
    }

    /// `Err(Cancelled)` once cancelled: `ctx.cancel.check()?` in loops.
    pub fn check(&self) -> Result<(), ToolError> {
        if self.is_cancelled() {
            Err(ToolError::new(
                ErrorType::Cancelled,
                "the call was cancelled",
            ))
        } else {
            Ok(())
        }
    }
}

/// The worker's frames to the supervisor, written on the producer's own thread when
/// nothing is queued before them ([`DirectWriter`]): a `done` leaves the blocking
/// thread that made it without a hand-off to a writer task.
#[derive(Clone)]
pub struct Outgoing(DirectWriter);

impl std::fmt::Debug for Outgoing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Outgoing")
    }
}

impl Outgoing {
    /// Frames written on `w`.
    pub fn new(w: DirectWriter) -> Self {
        Outgoing(w)
    }

    /// Send `msg`, waiting while much is queued (streamed output: backpressure).
    pub async fn send(&self, msg: &FromWorker) -> bool {
        match encode(msg) {
            Some(bytes) => self.0.send(bytes).await,
            None => false,
        }
    }

    /// Send `msg` now, from any thread (answers: one per call in flight).
    pub fn send_now(&self, msg: &FromWorker) -> bool {
        encode(msg).is_some_and(|bytes| self.0.send_now(bytes))
    }

    /// A pair for tests: the frames sent come out of the receiver (of `cap` frames),
    /// decoded, and it ends once every clone of the sender is gone.
    #[cfg(test)]
    pub fn pair(cap: usize) -> (Outgoing, tokio::sync::mpsc::Receiver<FromWorker>) {
        let (a, mut b) = tokio::net::UnixStream::pair().expect("socketpair");
        let (_, wr) = a.into_split();
        let (w, drain) = DirectWriter::new(wr);
        tokio::spawn(drain.run());
        let (tx, rx) = tokio::sync::mpsc::channel(cap);
        tokio::spawn(async move {
            let known = toolvisor_protocol::worker::KNOWN_FROM_WORKER;
            while let Ok(Some(body)) = toolvisor_protocol::frame::read_frame(&mut b, 1 << 24).await
            {
                let Ok(msg) = toolvisor_protocol::frame::decode::<FromWorker>(&body, known) else {
                    break;
                };
                if tx.send(msg).await.is_err() {
                    break;
                }
            }
        });
        (Outgoing(w), rx)
    }
}

fn encode(msg: &FromWorker) -> Option<Vec<u8>> {
    toolvisor_protocol::frame::encode(msg)
        .map_err(|e| tracing::error!("worker: cannot encode a frame: {e}"))
        .ok()
}

/// Where a streaming call's output frames go (to the supervisor).
#[derive(Clone, Debug)]
pub struct OutputSink {
    /// The call the chunks belong to.
    pub call: u64,
    /// The worker's outgoing frames.
    pub out: Outgoing,
}

impl OutputSink {
    /// Send one chunk, waiting while the supervisor is behind (backpressure).
    pub async fn send(&self, stream: &str, data: String) {
        let msg = FromWorker::Output {
            call: self.call,
            stream: stream.to_owned(),
            data,
        };
        self.out.send(&msg).await;
    }
}

/// A call's network through an egress proxy: its list, and where the proxy's
/// questions and connection records go.
#[derive(Clone, Debug)]
pub struct EgressCtx {
    /// The hosts that connect, and whether others are asked about.
    pub egress: toolvisor_protocol::egress::Egress,
    /// The worker's frames to the supervisor.
    pub out: Outgoing,
}

/// One call's context.
#[derive(Clone, Debug)]
pub struct ToolContext {
    /// The worker's configuration.
    pub init: Arc<WorkerInit>,
    /// Every path the tool opens goes through it.
    pub resolver: Arc<Resolver>,
    /// The supervisor's number for this call.
    pub call: u64,
    /// The client's call id, safe for a file name (artifacts).
    pub name: String,
    /// Raised when the supervisor cancels the call.
    pub cancel: CancelFlag,
    /// Present when the client asked for `stream: true`.
    pub output: Option<OutputSink>,
    /// When the call must end (the effective deadline), if any.
    pub deadline: Option<Instant>,
    /// The rule that allowed the call gives its command the host's network.
    pub network: bool,
    /// The command's network goes through an egress proxy.
    pub egress: Option<EgressCtx>,
    /// The session the call comes from (background processes belong to one).
    pub session: String,
    /// The call carries a person's grant: it may act on another session's process.
    pub takeover: bool,
}

/// A tool failure with its contract error type.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct ToolError {
    /// The contract error type the client sees.
    pub kind: ErrorType,
    /// What went wrong, for the model.
    pub message: String,
}

impl ToolError {
    /// A failure of this type.
    pub fn new(kind: ErrorType, message: impl Into<String>) -> Self {
        ToolError {
            kind,
            message: message.into(),
        }
    }

    /// The arguments hold a value the tool refuses.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(ErrorType::InvalidParams, message)
    }

    /// A fault of the worker, not of the call.
    pub fn internal(message: impl std::fmt::Display) -> Self {
        Self::new(ErrorType::InternalError, message.to_string())
    }
}

impl From<ToolError> for Outcome {
    fn from(e: ToolError) -> Self {
        Outcome::err(ErrorBody::new(e.kind, e.message))
    }
}

/// Turn a tool's `Result` into the outcome sent to the supervisor.
pub fn outcome(r: Result<Outcome, ToolError>) -> Outcome {
    r.unwrap_or_else(Outcome::from)
}
