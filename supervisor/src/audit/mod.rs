//! The audit log (docs/AUDIT.md): `<state_dir>/audit.jsonl`, a SHA-256 hash chain
//! makes changes visible, group commit makes every record durable before its caller
//! goes on, and the log fails closed.
//!
//! ```text
//!                    fsync = "never", log up: write under the writer's lock ──▶ audit.jsonl
//! Audit (handle) ──┤
//!                    otherwise ──mpsc──▶ writer thread ──write+fdatasync──▶ audit.jsonl
//!        ◀──────────── oneshot (seq) per record ──┘   └──▶ audit.head
//! ```

pub mod canonical;
pub mod chain;
pub mod inspect;

pub mod record;
pub mod recover;
pub mod redact;
pub mod segments;
pub mod verify;
mod writer;

#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio::sync::oneshot;

use crate::config::AuditConfig;
pub use record::Record;
pub use recover::Recovery;
use writer::{Cmd, Pending, Shared, SharedWriter, Writer};

/// How long a result waits for an unavailable log before it is sent with an error.
pub const RESULT_WAIT: Duration = Duration::from_secs(10);

/// Why an audit operation failed.
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// The log cannot be written (full disk, I/O error); no tool may start.
    #[error("audit unavailable: {0}")]
    Unavailable(String),
    /// The writer has stopped (`close` was called).
    #[error("audit log closed")]
    Closed,
    /// A caller's field would overwrite one of the chain's own keys.
    #[error("field `{0}` is reserved for the audit chain")]
    ReservedField(String),
    /// Opening or repairing the log failed.
    #[error("audit log {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

pub(crate) fn io_err(path: &Path, source: std::io::Error) -> AuditError {
    AuditError::Io {
        path: path.to_owned(),
        source,
    }
}

/// Handle to the audit log. Cheap to clone; every clone talks to the one writer.
#[derive(Clone)]
pub struct Audit {
    inner: Arc<Inner>,
}

struct Inner {
    tx: mpsc::Sender<Cmd>,
    /// The writer's state; callers commit under its lock when no sync is needed.
    writer: SharedWriter,
    shared: Arc<Shared>,
    dir: PathBuf,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Audit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Audit")
            .field("dir", &self.inner.dir)
            .finish_non_exhaustive()
    }
}

impl Audit {
    /// Opens (creating) the log in `state_dir`, runs recovery, and starts the writer
    /// thread. Recovery's own records are committed before this returns.
    pub fn open(state_dir: &Path, cfg: &AuditConfig) -> Result<(Audit, Recovery), AuditError> {
        std::fs::create_dir_all(state_dir).map_err(|e| io_err(state_dir, e))?;
        let shared = Arc::new(Shared::default());
        let (writer, recovery) = recover::open(state_dir, cfg, shared.clone())?;
        let (tx, rx) = mpsc::channel();
        let writer: SharedWriter = Arc::new(Mutex::new(writer));
        let thread_writer = writer.clone();
        let thread = std::thread::Builder::new()
            .name("toolvisor-audit".into())
            .spawn(move || Writer::run(thread_writer, rx))
            .map_err(|e| io_err(state_dir, e))?;
        let inner = Inner {
            tx,
            writer,
            shared,
            dir: state_dir.to_owned(),
            thread: Mutex::new(Some(thread)),
        };
        Ok((
            Audit {
                inner: Arc::new(inner),
            },
            recovery,
        ))
    }

    /// Appends a record; returns its seq once it is on disk (after `fdatasync` with
    /// `fsync = "always"`, after `write` with `"never"`). Fails fast while the log is
    /// unavailable: the caller must then not start the tool.
    pub async fn append(&self, kind: &str, fields: Map<String, Value>) -> Result<u64, AuditError> {
        self.submit(kind, fields, None).await
    }

    /// Like [`Audit::append`], but while the log is unavailable waits up to `max_wait`
    /// for it to come back (for results, which are held rather than dropped).
    pub async fn append_wait(
        &self,
        kind: &str,
        fields: Map<String, Value>,
        max_wait: Duration,
    ) -> Result<u64, AuditError> {
        self.submit(kind, fields, Some(Instant::now() + max_wait))
            .await
    }

    /// Appends a typed record (see [`record`]).
    pub async fn record<R: Record>(&self, r: &R) -> Result<u64, AuditError> {
        self.append(R::KIND, r.fields()).await
    }

    /// Appends a typed record, waiting up to [`RESULT_WAIT`] for an unavailable log.
    pub async fn record_wait<R: Record>(&self, r: &R) -> Result<u64, AuditError> {
        self.append_wait(R::KIND, r.fields(), RESULT_WAIT).await
    }

    /// Queues a record without waiting for it (for sync callers such as worker life
    /// events). It joins the next group commit; while the log is unavailable it is kept
    /// and written when the log resumes. Returns false once the log is closed.
    pub fn append_detached(&self, kind: &str, fields: Map<String, Value>) -> bool {
        let p = Pending::internal(kind, fields);
        self.send(p).is_ok()
    }

    /// [`Audit::append_detached`] for a typed record.
    pub fn record_detached<R: Record>(&self, r: &R) -> bool {
        self.append_detached(R::KIND, r.fields())
    }

    async fn submit(
        &self,
        kind: &str,
        fields: Map<String, Value>,
        deadline: Option<Instant>,
    ) -> Result<u64, AuditError> {
        let (reply, rx) = oneshot::channel();
        let p = Pending {
            kind: kind.to_owned(),
            fields,
            reply: Some(reply),
            deadline,
        };
        self.send(p)?;
        rx.await.map_err(|_| AuditError::Closed)?
    }

    /// Commits `p` on the caller's thread when the writer takes it inline (no sync
    /// to wait for, nothing parked before it), else hands it to the group-commit
    /// thread. Its answer, if it wants one, comes on its reply channel either way.
    fn send(&self, p: Pending) -> Result<(), AuditError> {
        let to_thread = |p| {
            self.inner
                .tx
                .send(Cmd::Append(p))
                .map_err(|_| AuditError::Closed)
        };
        if self.inner.shared.sync_always.load(Ordering::SeqCst) {
            return to_thread(p);
        }
        let mut w = writer::lock(&self.inner.writer);
        if !w.takes_inline() {
            drop(w);
            return to_thread(p);
        }
        w.commit(vec![p]);
        if w.is_down() {
            drop(w);
            let _ = self.inner.tx.send(Cmd::Wake);
        }
        Ok(())
    }

    /// Whether the last commit (or reopen) succeeded.
    pub fn is_available(&self) -> bool {
        self.inner.shared.available.load(Ordering::SeqCst)
    }

    /// The seq of the last committed record (0 for an empty log).
    pub fn last_seq(&self) -> u64 {
        self.inner.shared.last_seq.load(Ordering::SeqCst)
    }

    /// How many `fdatasync` calls the writer has made (group-commit efficiency).
    pub fn fsync_count(&self) -> u64 {
        self.inner.shared.fsyncs.load(Ordering::Relaxed)
    }

    /// The active log file.
    pub fn path(&self) -> PathBuf {
        segments::active_path(&self.inner.dir)
    }

    /// Asks the writer to roll the log to `audit.<N>.jsonl` (SIGUSR2). An empty
    /// active file is not rolled.
    pub fn rotate(&self) {
        writer::lock(&self.inner.writer).rotate();
    }

    /// Applies new `[audit]` settings (`fsync`, `max_bytes`) from the next commit on
    /// (SIGHUP).
    pub fn reconfigure(&self, cfg: &AuditConfig) {
        writer::lock(&self.inner.writer).configure(cfg);
    }

    /// Flushes, stops the writer and joins its thread. Later appends get `Closed`.
    pub async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.inner.tx.send(Cmd::Close(tx)).is_ok() {
            let _ = rx.await;
        }
        let handle = self.inner.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(h) = handle {
            // The thread has answered Close and is returning; joining is immediate.
            let _ = h.join();
        }
    }

    /// Test hook: the next `n` writes fail.
    #[cfg(test)]
    pub(crate) fn fail_next_writes(&self, n: u32) {
        self.inner
            .shared
            .faults
            .fail_writes
            .store(n, Ordering::SeqCst);
    }

    /// Test hook: the next `n` fdatasyncs fail (after their write went through).
    #[cfg(test)]
    pub(crate) fn fail_next_syncs(&self, n: u32) {
        self.inner
            .shared
            .faults
            .fail_syncs
            .store(n, Ordering::SeqCst);
    }
}
