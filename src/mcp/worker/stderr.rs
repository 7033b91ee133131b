//! An MCP server's stderr, passed on to the daemon's log within bounds: a server that
//! spews (a debug build, a loop that logs) must not fill the disk or drown the daemon's
//! own lines. Each line is cut at [`MAX_LINE`] bytes and prefixed with the server's
//! name; lines pass at [`LINES_PER_SEC`] a second (bursts of [`BURST`]) and at most
//! [`MAX_TOTAL`] bytes per start of the server. What is dropped is counted and said in
//! one line at most every [`SUMMARY_EVERY`], and when the server's stderr ends.

use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Longest line passed on; the rest of it is dropped (and said).
pub const MAX_LINE: usize = 4096;
/// Lines passed on per second, on average.
pub const LINES_PER_SEC: f64 = 50.0;
/// Lines passed on at once after a quiet spell.
pub const BURST: f64 = 200.0;
/// Bytes passed on per start of the server, at most.
pub const MAX_TOTAL: usize = 1 << 20;
/// How often a count of dropped lines is said, at most.
pub const SUMMARY_EVERY: Duration = Duration::from_secs(2);

/// What may still pass.
struct Budget {
    tokens: f64,
    refilled: Instant,
    total: usize,
    dropped_lines: u64,
    dropped_bytes: u64,
}

impl Budget {
    fn new(now: Instant) -> Budget {
        Budget {
            tokens: BURST,
            refilled: now,
            total: 0,
            dropped_lines: 0,
            dropped_bytes: 0,
        }
    }

    /// Whether a line of `len` bytes passes; one that does not is counted.
    fn take(&mut self, now: Instant, len: usize) -> bool {
        let secs = now.saturating_duration_since(self.refilled).as_secs_f64();
        self.tokens = (self.tokens + secs * LINES_PER_SEC).min(BURST);
        self.refilled = now;
        if self.tokens < 1.0 || self.total + len > MAX_TOTAL {
            self.dropped_lines += 1;
            self.dropped_bytes += len as u64;
            return false;
        }
        self.tokens -= 1.0;
        self.total += len;
        true
    }

    /// The line that says what was dropped since the last one, if anything was.
    fn summary(&mut self, server: &str) -> Option<String> {
        if self.dropped_lines == 0 {
            return None;
        }
        let why = if self.total >= MAX_TOTAL / 2 && self.tokens >= 1.0 {
            format!("{} KiB already logged since it started", self.total >> 10)
        } else {
            format!("more than {LINES_PER_SEC} lines a second")
        };
        let line = format!(
            "[mcp:{server}] {} lines ({} bytes) of the server's stderr dropped: {why}\n",
            self.dropped_lines, self.dropped_bytes
        );
        self.dropped_lines = 0;
        self.dropped_bytes = 0;
        Some(line)
    }
}

/// Pass `from` (the server's stderr) on to `to` (the worker's, which is the daemon's
/// log) until it ends.
pub async fn pass_on(
    server: String,
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
) {
    let mut budget = Budget::new(Instant::now());
    let mut chunk = vec![0u8; 8192];
    let mut line: Vec<u8> = Vec::new();
    let mut cut = false;
    let mut tick = tokio::time::interval(SUMMARY_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let n = tokio::select! {
            n = from.read(&mut chunk) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
            _ = tick.tick() => {
                if let Some(s) = budget.summary(&server) {
                    let _ = to.write_all(s.as_bytes()).await;
                }
                continue;
            }
        };
        for &b in &chunk[..n] {
            if b == b'\n' {
                emit(&server, &mut budget, &line, cut, &mut to).await;
                line.clear();
                cut = false;
            } else if line.len() < MAX_LINE {
                line.push(b);
            } else {
                cut = true;
            }
        }
    }
    if !line.is_empty() {
        emit(&server, &mut budget, &line, cut, &mut to).await;
    }
    if let Some(s) = budget.summary(&server) {
        let _ = to.write_all(s.as_bytes()).await;
    }
    let _ = to.flush().await;
}

/// One line, if the budget lets it pass.
async fn emit(
    server: &str,
    budget: &mut Budget,
    line: &[u8],
    cut: bool,
    to: &mut (impl AsyncWrite + Unpin),
) {
    if !budget.take(Instant::now(), line.len()) {
        return;
    }
    let text = String::from_utf8_lossy(line);
    let tail = if cut { " …[line cut]" } else { "" };
    let out = format!("[mcp:{server}] {text}{tail}\n");
    let _ = to.write_all(out.as_bytes()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_bounds_rate_and_total() {
        let t0 = Instant::now();
        let mut b = Budget::new(t0);
        let passed = (0..1000).filter(|_| b.take(t0, 10)).count();
        assert_eq!(passed, BURST as usize);
        let s = b.summary("gh").unwrap();
        assert!(s.contains("800 lines (8000 bytes)"), "{s}");
        assert!(b.summary("gh").is_none());
        // A second later, 50 more.
        let t1 = t0 + Duration::from_secs(1);
        assert_eq!((0..1000).filter(|_| b.take(t1, 10)).count(), 50);
        // However slow, no more than MAX_TOTAL in all.
        let mut b = Budget::new(t0);
        let mut logged = 0;
        for i in 0..10_000u64 {
            if b.take(t0 + Duration::from_secs(i), MAX_LINE) {
                logged += MAX_LINE;
            }
        }
        assert!(logged <= MAX_TOTAL, "{logged}");
    }

    #[test]
    fn lines_are_cut_prefixed_and_drops_said() {
        let input: Vec<u8> = [
            b"short\n".to_vec(),
            vec![b'x'; MAX_LINE + 10],
            b"\n".to_vec(),
            b"x\n".repeat(1000),
            b"last".to_vec(),
        ]
        .concat();
        let mut out = Vec::new();
        crate::mcp::tests::block_on(pass_on("gh".into(), &input[..], &mut out));
        let out = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(lines[0], "[mcp:gh] short");
        assert!(lines[1].ends_with("…[line cut]") && lines[1].len() < MAX_LINE + 40);
        assert_eq!(lines.len(), BURST as usize + 1, "{}", lines.len());
        assert!(lines[lines.len() - 1].contains("803 lines"), "{out}");
    }
}
