//! Helpers shared by toolvisor's load generator and benchmarks: a latency histogram
//! with bounded memory, connecting to a running supervisor, a pinger, and reading
//! process memory from /proc.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use toolvisor_protocol::Id;
use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, ToolResult};

/// Sub-buckets per power of two: values are kept to within 1/128 (< 1 %).
const SUB: u64 = 128;
const SUB_BITS: u32 = 7;

/// Latencies in microseconds, bucketed log-linearly: memory grows with the number of
/// distinct buckets (a few hundred at most), not with the number of samples.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    buckets: BTreeMap<u32, u64>,
    count: u64,
    max_us: u64,
    sum_us: u128,
}

impl Histogram {
    /// Count one sample (microsecond resolution).
    pub fn record(&mut self, d: Duration) {
        let us = d.as_micros().min(u64::MAX as u128) as u64;
        *self.buckets.entry(bucket(us)).or_default() += 1;
        self.count += 1;
        self.max_us = self.max_us.max(us);
        self.sum_us += us as u128;
    }

    /// Add another histogram's samples (one per load thread).
    pub fn merge(&mut self, other: &Histogram) {
        for (b, n) in &other.buckets {
            *self.buckets.entry(*b).or_default() += n;
        }
        self.count += other.count;
        self.max_us = self.max_us.max(other.max_us);
        self.sum_us += other.sum_us;
    }

    /// Samples recorded.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The largest sample.
    pub fn max(&self) -> Duration {
        Duration::from_micros(self.max_us)
    }

    /// The mean sample (zero with none).
    pub fn mean(&self) -> Duration {
        match self.count {
            0 => Duration::ZERO,
            n => Duration::from_micros((self.sum_us / n as u128) as u64),
        }
    }

    /// The smallest recorded value (to bucket precision) that at least `p` percent of
    /// the samples do not exceed; zero when empty.
    pub fn percentile(&self, p: f64) -> Duration {
        if self.count == 0 {
            return Duration::ZERO;
        }
        let rank = ((p / 100.0) * self.count as f64).ceil().max(1.0) as u64;
        if rank >= self.count {
            return self.max();
        }
        let mut seen = 0;
        for (b, n) in &self.buckets {
            seen += n;
            if seen >= rank {
                return Duration::from_micros(lower(*b).min(self.max_us));
            }
        }
        self.max()
    }
}

/// Bucket of a value: exact below [`SUB`], then `SUB` buckets per power of two.
fn bucket(v: u64) -> u32 {
    if v < SUB {
        return v as u32;
    }
    let e = 63 - v.leading_zeros();
    let m = (v >> (e - SUB_BITS)) & (SUB - 1);
    (((e - SUB_BITS + 1) << SUB_BITS) as u64 | m) as u32
}

/// The smallest value of a bucket.
fn lower(b: u32) -> u64 {
    if (b as u64) < SUB {
        return b as u64;
    }
    let e = (b >> SUB_BITS) + SUB_BITS - 1;
    let m = (b as u64) & (SUB - 1);
    (SUB | m) << (e - SUB_BITS)
}

/// Milliseconds with two decimals, for reports.
pub fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

/// Connect to the supervisor's socket and say `hello` (non-interactive: a load
/// generator must never be asked to confirm anything).
pub async fn connect(socket: &Path, name: &str) -> Result<Client, ClientError> {
    Client::connect(socket, name, false).await
}

/// Wait until the socket accepts and every worker is `ready`, up to `deadline`.
pub async fn wait_ready(socket: &Path, deadline: Duration) -> Result<(), String> {
    let end = Instant::now() + deadline;
    let mut last = String::from("not tried");
    while Instant::now() < end {
        match ready(socket).await {
            Ok(true) => return Ok(()),
            Ok(false) => last = "workers not ready yet".into(),
            Err(e) => last = e.to_string(),
        }
        // Readiness has no event a client can wait on: poll, briefly.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Err(format!(
        "the supervisor at {} was not ready within {deadline:?}: {last}",
        socket.display()
    ))
}

async fn ready(socket: &Path) -> Result<bool, ClientError> {
    let mut c = connect(socket, "toolvisor-bench").await?;
    let id: Id = "ready".into();
    Ok(
        match c
            .request(&ClientMessage::Status { id: id.clone() }, &id)
            .await?
        {
            ServerMessage::Status { workers, .. } => workers.iter().all(|w| w.state == "ready"),
            _ => false,
        },
    )
}

/// One call and its result. Any other `result` read meanwhile is counted in
/// `strays` (on a connection with one call at a time there must be none).
pub async fn call(
    c: &mut Client,
    req: CallRequest,
    strays: &mut u64,
) -> Result<ToolResult, ClientError> {
    let id = req.id.clone();
    c.send(&ClientMessage::Call(req)).await?;
    loop {
        match c.recv().await? {
            ServerMessage::Result(r) if r.id == id => return Ok(r),
            ServerMessage::Result(_) => *strays += 1,
            ServerMessage::Error { error, .. } => return Err(ClientError::Refused(error)),
            _ => {}
        }
    }
}

/// Ping every `every` on a connection of its own (client name `name`) until `stop`;
/// the round trips.
pub async fn pinger(
    socket: PathBuf,
    name: &str,
    stop: Arc<AtomicBool>,
    every: Duration,
) -> Result<Histogram, String> {
    let mut c = connect(&socket, name).await.map_err(|e| e.to_string())?;
    let mut h = Histogram::default();
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let id = Id::Int(n as i64);
        let t = Instant::now();
        c.request(&ClientMessage::Ping { id: id.clone() }, &id)
            .await
            .map_err(|e| e.to_string())?;
        h.record(t.elapsed());
        n += 1;
        tokio::time::sleep(every).await;
    }
    Ok(h)
}

/// A size field of /proc/<pid>/status (`VmRSS:`, `VmHWM:`), in bytes.
pub fn proc_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// A field of /proc/<pid>/smaps_rollup (`Pss:`, `Rss:`), in bytes. PSS counts each
/// shared page once across the processes that map it (the binary's pages, mapped by
/// the supervisor and every worker, are one copy in memory).
pub fn smaps_kb(pid: u32, field: &str) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = s.lines().find(|l| l.starts_with(field))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

/// Direct children of `pid` (the worker processes of a supervisor).
pub fn children(pid: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|c| {
            let stat = std::fs::read_to_string(format!("/proc/{c}/stat")).unwrap_or_default();
            // The ppid is the second field after the `(comm)`, which may hold spaces.
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                == Some(pid)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_monotonic_and_tight() {
        let mut prev = 0;
        for v in (0..10_000u64).chain([1 << 20, (1 << 20) + 12345, u32::MAX as u64, 1 << 40]) {
            let b = bucket(v);
            assert!(b >= prev || v > 10_000, "{v}");
            prev = b;
            let lo = lower(b);
            assert!(lo <= v && v - lo <= v / SUB, "{v}: bucket starts at {lo}");
        }
    }

    #[test]
    fn percentiles() {
        let mut h = Histogram::default();
        assert_eq!(h.percentile(99.0), Duration::ZERO);
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        let p50 = h.percentile(50.0).as_secs_f64() * 1000.0;
        let p99 = h.percentile(99.0).as_secs_f64() * 1000.0;
        assert!((49.5..=50.0).contains(&p50), "{p50}");
        assert!((98.3..=99.0).contains(&p99), "{p99}");
        assert_eq!(h.max(), Duration::from_millis(100));
        let mut g = Histogram::default();
        g.record(Duration::from_secs(1));
        h.merge(&g);
        assert_eq!(h.count(), 101);
        assert_eq!(h.percentile(100.0), Duration::from_secs(1));
    }
}
