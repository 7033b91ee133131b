//! The log's writer state, behind one mutex. With `fsync = "never"` a caller commits
//! its own record under the lock (one `write`, no thread hand-off); with `"always"`
//! records go to the group-commit thread, which drains its channel, writes every
//! pending record with one `write`, calls `fdatasync` once and answers every waiter.
//! Either way `audit.head` follows each commit. On a write or sync error the fd is
//! dropped and never synced again (PostgreSQL's fsyncgate lesson); the log is
//! "unavailable" until the thread's reopen on a fresh fd re-verifies the tail and
//! commits a `recovered` record.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use super::AuditError;
use super::chain::{self, RESERVED};
use toolvisor_protocol::time::rfc3339_millis;

use super::record;
use super::segments;
use super::verify::Link;
use crate::config::{AuditConfig, Fsync};

mod reopen;

/// Least time between two reopen attempts while the log is unavailable.
pub(crate) const RETRY_EVERY: Duration = Duration::from_millis(500);
/// Most records in one group commit, so one huge burst cannot delay the first waiter.
const MAX_BATCH: usize = 4096;

/// State the handle reads without a round trip to the thread.
#[derive(Default)]
pub(crate) struct Shared {
    pub available: AtomicBool,
    pub last_seq: AtomicU64,
    pub fsyncs: AtomicU64,
    /// `fsync = "always"`: every record goes to the thread, without taking the lock
    /// the thread holds through its `fdatasync`.
    pub sync_always: AtomicBool,
    pub faults: Faults,
}

/// Test hooks: make the next N writes or syncs fail as a full or failing disk would.
#[derive(Default)]
pub(crate) struct Faults {
    pub fail_writes: AtomicU32,
    pub fail_syncs: AtomicU32,
}

impl Faults {
    fn take(counter: &AtomicU32) -> bool {
        counter
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
    }
}

/// What the handle asks of the writer.
pub(crate) enum Cmd {
    Append(Pending),
    Close(oneshot::Sender<()>),
    /// Look at the state again: a caller's own commit took the log down, so the
    /// thread must start retrying and watching deadlines.
    Wake,
}

/// One record waiting to be committed. `reply` is `None` for the log's own records
/// (recovery), which are kept until written; `deadline` is set by `append_wait`.
pub(crate) struct Pending {
    pub kind: String,
    pub fields: Map<String, Value>,
    pub reply: Option<oneshot::Sender<Result<u64, AuditError>>>,
    pub deadline: Option<Instant>,
}

impl Pending {
    pub(crate) fn internal(kind: &str, fields: Map<String, Value>) -> Pending {
        Pending {
            kind: kind.into(),
            fields,
            reply: None,
            deadline: None,
        }
    }

    fn answer(self, r: Result<u64, AuditError>) {
        if let Some(tx) = self.reply {
            let _ = tx.send(r);
        }
    }
}

/// Why and since when the log cannot be written.
struct Outage {
    error: String,
    since: SystemTime,
    next_try: Instant,
}

/// The thread's state: the only owner of the log file.
pub(crate) struct Writer {
    dir: PathBuf,
    fsync: Fsync,
    max_bytes: u64,
    file: Option<File>,
    /// Committed length of the active file: everything before it is acknowledged.
    len: u64,
    /// The last committed record (seq 0 and 64 zeros before the first).
    last: Link,
    shared: Arc<Shared>,
    outage: Option<Outage>,
    waiting: Vec<Pending>,
    /// Shut down: nothing is written any more.
    closed: bool,
    /// `audit.head`, open while writes to it succeed.
    head: Option<segments::HeadFile>,
}

/// The writer as the handle and the thread share it.
pub(crate) type SharedWriter = Arc<Mutex<Writer>>;

/// The writer, locked (a panic while it was held leaves consistent state: every
/// commit updates it only after its write succeeded).
pub(crate) fn lock(w: &Mutex<Writer>) -> MutexGuard<'_, Writer> {
    w.lock().unwrap_or_else(|p| p.into_inner())
}

impl Writer {
    pub(crate) fn new(
        dir: PathBuf,
        cfg: &AuditConfig,
        shared: Arc<Shared>,
        file: File,
        len: u64,
        last: Link,
    ) -> Writer {
        shared.last_seq.store(last.seq, Ordering::SeqCst);
        shared.available.store(true, Ordering::SeqCst);
        shared
            .sync_always
            .store(cfg.fsync == Fsync::Always, Ordering::SeqCst);
        Writer {
            dir,
            fsync: cfg.fsync,
            max_bytes: cfg.max_bytes.max(1),
            file: Some(file),
            len,
            last,
            shared,
            outage: None,
            waiting: Vec::new(),
            closed: false,
            head: None,
        }
    }

    fn write_head(&mut self) -> io::Result<()> {
        let head = match &mut self.head {
            Some(h) => h,
            None => self.head.insert(segments::HeadFile::open(&self.dir)?),
        };
        head.write(self.last.seq, &self.last.hash)
    }

    /// Whether a caller may commit its record itself, now: nothing to sync, the log
    /// up, and nothing parked that must go first.
    pub(crate) fn takes_inline(&self) -> bool {
        self.fsync == Fsync::Never
            && self.outage.is_none()
            && self.waiting.is_empty()
            && !self.closed
    }

    /// Whether the log is down (the thread must be woken to retry).
    pub(crate) fn is_down(&self) -> bool {
        self.outage.is_some()
    }

    /// The thread body: runs until `Close` or until every handle is gone. Commands are
    /// collected without the lock, then applied under it.
    pub(crate) fn run(writer: SharedWriter, rx: Receiver<Cmd>) {
        while let Some(first) = Self::next_cmd(&writer, &rx) {
            let (mut batch, mut close) = (Vec::new(), None);
            let mut cmd = Some(first);
            while let Some(c) = cmd.take() {
                match c {
                    Cmd::Append(p) => batch.push(p),
                    Cmd::Close(tx) => close = Some(tx),
                    Cmd::Wake => {}
                }
                if close.is_none() && batch.len() < MAX_BATCH {
                    cmd = rx.try_recv().ok();
                }
            }
            let mut w = lock(&writer);
            w.resume_if_due();
            w.commit(batch);
            if let Some(tx) = close {
                w.shutdown();
                let _ = tx.send(());
                return;
            }
        }
        lock(&writer).shutdown();
    }

    /// Blocks for the next command; while the log is down, wakes at the next reopen
    /// attempt or `append_wait` deadline instead.
    fn next_cmd(writer: &Mutex<Writer>, rx: &Receiver<Cmd>) -> Option<Cmd> {
        loop {
            let Some(wake) = lock(writer).wake_at() else {
                return rx.recv().ok();
            };
            match rx.recv_timeout(wake.saturating_duration_since(Instant::now())) {
                Ok(cmd) => return Some(cmd),
                Err(RecvTimeoutError::Disconnected) => return None,
                Err(RecvTimeoutError::Timeout) => {
                    let mut w = lock(writer);
                    w.expire_waiting();
                    w.resume_if_due();
                }
            }
        }
    }

    fn wake_at(&self) -> Option<Instant> {
        let outage = self.outage.as_ref()?;
        let first_deadline = self.waiting.iter().filter_map(|p| p.deadline).min();
        Some(first_deadline.map_or(outage.next_try, |d| d.min(outage.next_try)))
    }

    /// Seals and writes `batch` as one group commit; on failure the log goes down and
    /// the records are parked (`append_wait`, internal) or failed (`append`).
    pub(crate) fn commit(&mut self, batch: Vec<Pending>) {
        if batch.is_empty() {
            return;
        }
        if self.closed {
            batch
                .into_iter()
                .for_each(|p| p.answer(Err(AuditError::Closed)));
            return;
        }
        if self.len >= self.max_bytes {
            self.rotate();
        }
        if self.outage.is_some() {
            batch.into_iter().for_each(|p| self.park_or_fail(p));
            return;
        }
        let (buf, sealed, last) = self.seal_all(batch);
        if sealed.is_empty() {
            return;
        }
        match self.write_and_sync(&buf) {
            Ok(()) => self.acknowledge(buf.len() as u64, sealed, last),
            Err(e) => {
                self.go_down(&e);
                sealed.into_iter().for_each(|(p, _)| self.park_or_fail(p));
            }
        }
    }

    /// Assigns seqs and builds the lines; a record using a reserved key is refused.
    fn seal_all(&self, batch: Vec<Pending>) -> (Vec<u8>, Vec<(Pending, u64)>, Link) {
        let ts = rfc3339_millis(SystemTime::now());
        let mut buf = Vec::with_capacity(batch.len() * 512);
        let mut last = self.last.clone();
        let mut sealed = Vec::with_capacity(batch.len());
        for p in batch {
            if let Some(k) = RESERVED.iter().find(|k| p.fields.contains_key(**k)) {
                p.answer(Err(AuditError::ReservedField((*k).to_owned())));
                continue;
            }
            let seq = last.seq + 1;
            let hash = chain::seal(seq, &ts, &p.kind, p.fields.clone(), &last.hash, &mut buf);
            last = Link { seq, hash };
            sealed.push((p, seq));
        }
        (buf, sealed, last)
    }

    fn write_and_sync(&mut self, buf: &[u8]) -> io::Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| io::Error::other("no open log file"))?;
        if Faults::take(&self.shared.faults.fail_writes) {
            return Err(io::Error::other("injected write failure"));
        }
        file.write_all(buf)?;
        if self.fsync == Fsync::Always {
            if Faults::take(&self.shared.faults.fail_syncs) {
                return Err(io::Error::other("injected fdatasync failure"));
            }
            file.sync_data()?;
            self.shared.fsyncs.fetch_add(1, Ordering::Relaxed);
        }
        Ok(())
    }

    fn acknowledge(&mut self, written: u64, sealed: Vec<(Pending, u64)>, last: Link) {
        self.len += written;
        self.last = last;
        self.shared.last_seq.store(self.last.seq, Ordering::SeqCst);
        self.shared.available.store(true, Ordering::SeqCst);
        sealed.into_iter().for_each(|(p, seq)| p.answer(Ok(seq)));
        if let Err(e) = self.write_head() {
            // Opened again at the next commit.
            self.head = None;
            tracing::warn!(error = %e, "cannot update audit.head");
        }
    }

    /// Drops the fd (never synced again) and starts the outage clock.
    fn go_down(&mut self, e: &io::Error) {
        tracing::error!(error = %e, "audit log unavailable; no tool will start until it is writable");
        self.file = None;
        self.shared.available.store(false, Ordering::SeqCst);
        let error = e.to_string();
        match &mut self.outage {
            Some(o) => o.error = error,
            None => {
                let next_try = Instant::now() + RETRY_EVERY;
                self.outage = Some(Outage {
                    error,
                    since: SystemTime::now(),
                    next_try,
                });
            }
        }
    }

    fn park_or_fail(&mut self, p: Pending) {
        let keep = p.reply.is_none() || p.deadline.is_some_and(|d| d > Instant::now());
        if keep {
            self.waiting.push(p);
        } else {
            self.give_up_waiting(p);
        }
    }

    /// The caller stops waiting (it answers its client `InternalError` now). A plain
    /// `append` (a `requested`: nothing ran) is dropped; an `append_wait` record is
    /// about something that already happened (a call's end), so it is kept and written,
    /// marked `"late": true`, once the log resumes: the log never loses a call's end.
    fn give_up_waiting(&mut self, mut p: Pending) {
        let late = p.deadline.is_some();
        if let Some(tx) = p.reply.take() {
            let _ = tx.send(Err(self.unavailable()));
        }
        if late {
            p.deadline = None;
            p.fields.insert("late".into(), Value::Bool(true));
            self.waiting.push(p);
        }
    }

    fn unavailable(&self) -> AuditError {
        let why = self
            .outage
            .as_ref()
            .map_or("log closed", |o| o.error.as_str());
        AuditError::Unavailable(why.to_owned())
    }

    fn expire_waiting(&mut self) {
        let now = Instant::now();
        let (expired, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition(|p| p.reply.is_some() && p.deadline.is_none_or(|d| d <= now));
        self.waiting = kept;
        expired.into_iter().for_each(|p| self.give_up_waiting(p));
    }

    /// Tries a reopen when the log is down and the last try is old enough.
    fn resume_if_due(&mut self) {
        let due = self
            .outage
            .as_ref()
            .is_some_and(|o| Instant::now() >= o.next_try);
        if due {
            self.try_resume();
        }
    }

    /// Reopens the active file on a new fd, checks that what was committed is still
    /// there, cuts bytes written after the last acknowledged commit (never answered
    /// as durable), and commits a `recovered` record with whatever was waiting.
    fn try_resume(&mut self) {
        if let Some(o) = &mut self.outage {
            o.next_try = Instant::now() + RETRY_EVERY;
        }
        let (file, details) = match self.reopen() {
            Ok(r) => r,
            Err(e) => return self.go_down(&e),
        };
        let Some(outage) = self.outage.take() else {
            return;
        };
        let mut details = details;
        details.insert("error".into(), outage.error.into());
        details.insert(
            "unavailable_since".into(),
            rfc3339_millis(outage.since).into(),
        );
        self.file = Some(file);
        tracing::info!("audit log writable again");
        // A `resumed` record parked by an earlier failed attempt is superseded.
        self.waiting
            .retain(|p| p.reply.is_some() || p.fields.get("reason") != Some(&json!("resumed")));
        let mut batch = vec![Pending::internal(
            "recovered",
            record::recovered("resumed", Value::Object(details)),
        )];
        batch.append(&mut self.waiting);
        self.commit(batch);
    }

    /// New `[audit]` settings (a reload): they apply from the next commit on.
    pub(crate) fn configure(&mut self, cfg: &AuditConfig) {
        self.fsync = cfg.fsync;
        self.shared
            .sync_always
            .store(cfg.fsync == Fsync::Always, Ordering::SeqCst);
        self.max_bytes = cfg.max_bytes.max(1);
    }

    /// Rolls to `audit.<N>.jsonl`; the next record's `prev` is this file's last hash.
    pub(crate) fn rotate(&mut self) {
        if self.len == 0 || self.outage.is_some() {
            return;
        }
        if let Err(e) = segments::roll(&self.dir) {
            tracing::warn!(error = %e, "audit rotation failed; still writing the current file");
            return;
        }
        self.len = 0;
        self.file = None;
        match segments::open_active(&self.dir) {
            Ok(f) => self.file = Some(f),
            Err(e) => self.go_down(&e),
        }
    }

    /// Final flush; waiters still parked are told the log closed.
    fn shutdown(&mut self) {
        if self.closed {
            return;
        }
        self.closed = true;
        if let (Some(f), Fsync::Never) = (&self.file, self.fsync)
            && let Err(e) = f.sync_data()
        {
            tracing::warn!(error = %e, "final audit flush failed");
        }
        let waiting = std::mem::take(&mut self.waiting);
        waiting
            .into_iter()
            .for_each(|p| p.answer(Err(AuditError::Closed)));
    }
}

/// The line (without `\n`) that ends at `end`, reading backwards in growing windows.
pub(crate) fn last_line(file: &mut File, end: u64) -> io::Result<Vec<u8>> {
    let mut window = 4096u64;
    loop {
        let start = end.saturating_sub(window);
        let mut buf = vec![0; (end - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut buf)?;
        buf.pop(); // the line's own newline
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            return Ok(buf.split_off(i + 1));
        }
        if start == 0 {
            return Ok(buf);
        }
        window *= 4;
    }
}

pub(crate) fn file_name(p: &std::path::Path) -> String {
    p.file_name().map_or_else(
        || p.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}
