//! Command output: the bounded capture (head + tail ring), the artifact files, the
//! stream coalescer, and the pump that reads stdout and stderr concurrently.
//!
//! Memory is bounded whatever a command prints: while the output fits `shell_max` it is
//! kept whole (it is the result); past that only the first `shell_head` bytes and a
//! ring of the last `shell_tail` bytes stay in memory, and the full output goes to a
//! capped artifact file.

//!
//! One module per part: [`artifacts`] (the capped directory and its files),
//! [`capture`] (a foreground command's bounded result), [`coalesce`] (streamed frames)
//! and [`pump`] (reading the pipes).

mod artifacts;
mod capture;
mod coalesce;
mod pump;

use std::time::Duration;

pub(crate) use artifacts::{ArtifactFile, Artifacts, full_output_name, sanitize_name};
pub(crate) use capture::{Capture, LogStart};
pub(crate) use coalesce::{Coalescer, complete_prefix};
pub(crate) use pump::{Pipes, pump};

/// Largest `data` of one `output` frame (docs/PROTOCOL.md §5.1).
pub(crate) const CHUNK: usize = 16 * 1024;
/// Pending stream data is flushed at least this often.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(50);

/// Which pipe a chunk came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Where pumped output goes.
pub(crate) trait Record {
    fn record(&mut self, data: &[u8]);
}

#[cfg(test)]
mod tests;
