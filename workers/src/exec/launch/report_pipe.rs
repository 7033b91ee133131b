//! The shim's report pipe: read without blocking while the command runs, and to its end
//! after.

use super::*;

/// The shim's report pipe, read as the report comes.
#[derive(Default)]
pub(crate) struct ReportPipe {
    rx: Option<tokio::net::unix::pipe::Receiver>,
    bytes: Vec<u8>,
    read: Option<Option<Report>>,
}

/// The most of a report read.
pub(super) const REPORT_MAX: usize = 64 * 1024;

impl ReportPipe {
    pub(super) fn new(r: std::io::PipeReader) -> Self {
        let rx = tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(r)).ok();
        ReportPipe {
            rx,
            ..ReportPipe::default()
        }
    }

    /// Whether [`ReportPipe::next`] may still give a report.
    pub(super) fn pending(&self) -> bool {
        self.rx.is_some() && self.read.is_none()
    }

    /// Wait for the report's line (or the pipe's end); cancellation-safe (what was
    /// read stays).
    pub(super) async fn next(&mut self) -> Option<Report> {
        use tokio::io::AsyncReadExt;
        if let Some(rx) = self.rx.as_mut() {
            let mut buf = [0u8; 1024];
            while !self.bytes.contains(&b'\n') && self.bytes.len() < REPORT_MAX {
                match rx.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => self.bytes.extend_from_slice(&buf[..n]),
                }
            }
        }
        self.finish()
    }

    /// The report from what was read, plus what can be read without waiting.
    pub(super) fn now(&mut self) -> Option<Report> {
        if let (None, Some(rx)) = (&self.read, self.rx.as_ref()) {
            let mut buf = [0u8; 1024];
            while self.bytes.len() < REPORT_MAX {
                match rx.try_read(&mut buf) {
                    Ok(n @ 1..) => self.bytes.extend_from_slice(&buf[..n]),
                    _ => break,
                }
            }
        }
        self.finish()
    }

    pub(super) fn finish(&mut self) -> Option<Report> {
        self.read
            .get_or_insert_with(|| Report::parse(&self.bytes))
            .clone()
    }
}
