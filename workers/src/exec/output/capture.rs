//! The bounded capture of a foreground command's output: whole while it fits
//! `shell_max`, then a head and a ring of the tail, the rest in an artifact.

use std::collections::VecDeque;
use std::path::Path;

use toolvisor_protocol::Truncated;
use toolvisor_protocol::worker::Limits;

use super::{ArtifactFile, Record, full_output_name};
use crate::truncate;

/// The bounded capture of a foreground command's output.
pub(crate) struct Capture {
    limits: Limits,
    /// The whole output while it fits `shell_max`; emptied once it overflows.
    pub(super) full: Vec<u8>,
    head: Vec<u8>,
    pub(super) tail: VecDeque<u8>,
    total: u64,
    newlines: u64,
    last: Option<u8>,
    overflowed: bool,
    artifact: Option<ArtifactFile>,
    /// Opens the artifact when the output first overflows.
    open_artifact: Option<Box<dyn FnOnce() -> Option<ArtifactFile> + Send>>,
    /// The output is a terminal's: its text loses the escape sequences.
    tty: bool,
}

/// Where a yielded command's log starts: the artifact that already holds all of its
/// output, or the output itself (it fit in memory).
pub(crate) enum LogStart {
    File(ArtifactFile),
    Bytes(Vec<u8>),
}

impl Capture {
    pub(crate) fn new(
        limits: &Limits,
        open_artifact: Box<dyn FnOnce() -> Option<ArtifactFile> + Send>,
    ) -> Self {
        Capture {
            limits: limits.clone(),
            full: Vec::new(),
            head: Vec::new(),
            tail: VecDeque::new(),
            total: 0,
            newlines: 0,
            last: None,
            overflowed: false,
            artifact: None,
            open_artifact: Some(open_artifact),
            tty: false,
        }
    }

    /// The capture of a terminal's output.
    pub(crate) fn terminal(mut self, tty: bool) -> Self {
        self.tty = tty;
        self
    }

    /// Bytes of output so far.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    fn overflow(&mut self) {
        self.overflowed = true;
        self.artifact = self.open_artifact.take().and_then(|f| f());
        let full = std::mem::take(&mut self.full);
        if let Some(a) = &mut self.artifact {
            a.write(&full);
        }
        let h = self.limits.shell_head.min(full.len());
        self.head = full[..h].to_vec();
        self.push_tail(&full[h..]);
    }

    fn push_tail(&mut self, data: &[u8]) {
        let cap = self.limits.shell_tail;
        let data = &data[data.len().saturating_sub(cap)..];
        let excess = (self.tail.len() + data.len()).saturating_sub(cap);
        self.tail.drain(..excess);
        self.tail.extend(data);
    }

    /// The result text and, when cut, what was left out (with the artifact's name as
    /// `read_file` reads it, see [`full_output_name`]).
    pub(crate) fn finish(mut self, workspace: &Path) -> (String, Option<Truncated>) {
        self.render(workspace)
    }

    /// [`Capture::finish`] for a command that goes on in the background: the text so
    /// far, and where its log starts.
    pub(crate) fn yield_now(mut self, workspace: &Path) -> (String, Option<Truncated>, LogStart) {
        let (text, truncated) = self.render(workspace);
        let log = match self.artifact.take() {
            Some(a) if self.overflowed => LogStart::File(a),
            _ => LogStart::Bytes(std::mem::take(&mut self.full)),
        };
        (text, truncated, log)
    }

    fn render(&mut self, workspace: &Path) -> (String, Option<Truncated>) {
        if let Some(a) = &mut self.artifact {
            a.seal();
        }
        let lines = self.newlines + u64::from(self.last.is_some_and(|b| b != b'\n'));
        let lossy = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let render: &dyn Fn(&[u8]) -> String = if self.tty {
            &crate::exec::ansi::strip
        } else {
            &lossy
        };
        let totals = (self.total, lines);
        let cut = if self.overflowed {
            let tail: Vec<u8> = self.tail.iter().copied().collect();
            truncate::shell_with(&self.head, &tail, totals, &self.limits, render)
        } else {
            truncate::shell_with(&self.full, &[], totals, &self.limits, render)
        };
        let truncated = cut.truncated.map(|mut t| {
            t.full_output = self
                .artifact
                .as_ref()
                .map(|a| full_output_name(&a.path, workspace));
            t
        });
        (cut.text, truncated)
    }
}

impl Record for Capture {
    fn record(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        self.newlines += data.iter().filter(|&&b| b == b'\n').count() as u64;
        if let Some(&b) = data.last() {
            self.last = Some(b);
        }
        if !self.overflowed {
            self.full.extend_from_slice(data);
            if self.full.len() > self.limits.shell_max {
                self.overflow();
            }
            return;
        }
        if let Some(a) = &mut self.artifact {
            a.write(data);
        }
        self.push_tail(data);
    }
}
