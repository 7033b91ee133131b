//! Streamed output as `output` frames: coalesced, bounded, whole UTF-8 characters.

use tokio::time::Instant;

use super::{CHUNK, FLUSH_EVERY, Stream};
use crate::{OutputSink, truncate};

/// Coalesces streamed output into frames of at most [`CHUNK`] bytes, flushed at least
/// every [`FLUSH_EVERY`], never splitting a UTF-8 character across frames.
pub(crate) struct Coalescer {
    sink: OutputSink,
    stream: Stream,
    pending: Vec<u8>,
    since: Option<Instant>,
    /// A terminal's output is streamed as its text, like `content`.
    stripper: Option<crate::exec::ansi::Stripper>,
}

impl Coalescer {
    pub(crate) fn new(sink: OutputSink) -> Self {
        Coalescer {
            sink,
            stream: Stream::Stdout,
            pending: Vec::new(),
            since: None,
            stripper: None,
        }
    }

    /// Stream a terminal's output as text (escape sequences dropped, `\r\n` as `\n`).
    pub(crate) fn terminal(mut self, tty: bool) -> Self {
        self.stripper = tty.then(crate::exec::ansi::Stripper::default);
        self
    }

    /// When pending data must go out.
    pub(crate) fn due(&self) -> Option<Instant> {
        self.since.map(|t| t + FLUSH_EVERY)
    }

    /// Add a chunk; sends (awaiting backpressure) whatever fills whole frames.
    pub(crate) async fn push(&mut self, stream: Stream, data: &[u8]) {
        let text;
        let data = match (&mut self.stripper, stream) {
            (Some(s), Stream::Stdout) => {
                text = s.push(data);
                text.as_bytes()
            }
            _ => data,
        };
        if data.is_empty() {
            return;
        }
        if stream != self.stream && !self.pending.is_empty() {
            self.flush(true).await;
        }
        self.stream = stream;
        self.pending.extend_from_slice(data);
        self.since.get_or_insert_with(Instant::now);
        while self.pending.len() >= CHUNK {
            let cut = complete_prefix(&self.pending[..CHUNK]);
            let cut = if cut == 0 { CHUNK } else { cut };
            self.send(cut).await;
        }
    }

    /// Send the pending data; an incomplete trailing character waits for its rest
    /// unless `all` (stream switch, end of output).
    pub(crate) async fn flush(&mut self, all: bool) {
        let n = if all {
            self.pending.len()
        } else {
            complete_prefix(&self.pending)
        };
        if n > 0 {
            self.send(n).await;
        }
        if self.pending.is_empty() {
            self.since = None;
        } else {
            self.since = Some(Instant::now());
        }
    }

    /// Send the first `n` pending bytes (lossy UTF-8), in frames of at most CHUNK.
    async fn send(&mut self, n: usize) {
        let bytes: Vec<u8> = self.pending.drain(..n).collect();
        let text = String::from_utf8_lossy(&bytes);
        let mut rest: &str = &text;
        while !rest.is_empty() {
            let at = truncate::floor_boundary(rest, CHUNK);
            let at = if at == 0 { rest.len() } else { at };
            let (frame, tail) = rest.split_at(at);
            self.sink.send(self.stream.as_str(), frame.to_owned()).await;
            rest = tail;
        }
        if self.pending.is_empty() {
            self.since = None;
        }
    }
}

/// Length of `b` without a trailing *incomplete* UTF-8 sequence (which a later read
/// may complete). Invalid bytes are not held back.
pub(crate) fn complete_prefix(b: &[u8]) -> usize {
    let start = b.len().saturating_sub(3);
    for i in (start..b.len()).rev() {
        let byte = b[i];
        if byte & 0xC0 == 0x80 {
            continue; // continuation byte: look further back
        }
        let need = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if b.len() - i < need { i } else { b.len() };
    }
    b.len()
}
