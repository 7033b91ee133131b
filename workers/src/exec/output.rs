//! Command output: the bounded capture (head + tail ring), the artifact files, the
//! stream coalescer, and the pump that reads stdout and stderr concurrently.
//!
//! Memory is bounded whatever a command prints: while the output fits `shell_max` it is
//! kept whole (it is the result); past that only the first `shell_head` bytes and a
//! ring of the last `shell_tail` bytes stay in memory, and the full output goes to a
//! capped artifact file.

use std::collections::VecDeque;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rustix::fs::FlockOperation;
use tokio::time::Instant;

use tokio::io::AsyncReadExt;
use tokio::process::{ChildStderr, ChildStdout};
use toolvisor_protocol::Truncated;
use toolvisor_protocol::worker::Limits;

use crate::OutputSink;
use crate::truncate;

/// Largest `data` of one `output` frame (docs/PROTOCOL.md §5.1).
pub(crate) const CHUNK: usize = 16 * 1024;
/// Pending stream data is flushed at least this often.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(50);
/// Pipe read size.
const READ_BUF: usize = 8 * 1024;

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

/// The artifacts directory: per-file and whole-directory caps. A file being written
/// holds an exclusive `flock` for as long as its writer lives, so no worker process
/// prunes a file that any of them (a call, a background job) still writes, and a killed
/// writer's file becomes prunable at once (the kernel drops its lock).
///
/// The directory cap holds at every moment, across every exec worker process: a writer
/// reserves room before it writes (the file is extended to the reservation, 1 MiB at a
/// time, so every writer sees every other's room in the file sizes), and reserving is
/// done under an exclusive `flock` of the directory, removing the oldest files not in
/// use until the reservation fits. What cannot fit is dropped, as past the per-file cap.
#[derive(Debug)]
pub(crate) struct Artifacts {
    pub dir: PathBuf,
    pub max_bytes: u64,
    pub total_bytes: u64,
}

/// Most names tried for one call id (`<id>.log`, `<id>-2.log`, … `<id>-N.log`).
const MAX_SUFFIX: u32 = 100_000;
/// Room is reserved in steps of this much.
const RESERVE_STEP: u64 = 1 << 20;

impl Artifacts {
    /// The directory is `<state_dir>/artifacts` with the state directory canonicalised
    /// (it exists: the supervisor made it), so `full_output` comes out workspace-relative
    /// whenever the state directory is inside the canonical workspace.
    pub(crate) fn new(state_dir: &Path, limits: &Limits) -> Arc<Self> {
        let state = state_dir
            .canonicalize()
            .unwrap_or_else(|_| state_dir.to_path_buf());
        Arc::new(Artifacts {
            dir: state.join("artifacts"),
            max_bytes: limits.artifacts_max_bytes,
            total_bytes: limits.artifacts_total_bytes,
        })
    }

    /// Create a new file `<stem>.log`, or `<stem>-2.log`, `<stem>-3.log`, … when taken.
    /// Each name is created with `O_EXCL`, so no earlier output is ever overwritten,
    /// whoever holds the name: another session reusing a call id, the CLI's fixed id, a
    /// job handle from before a restart, or a concurrent call in another worker process.
    /// `O_EXCL` also refuses a symlink planted under that name.
    pub(crate) fn create(self: &Arc<Self>, stem: &str) -> std::io::Result<ArtifactFile> {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.dir)?;
        for n in 1..=MAX_SUFFIX {
            let path = self.dir.join(numbered(stem, n));
            match create_new(&path) {
                Ok(file) => return self.track(file, path),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::AlreadyExists,
            format!("{MAX_SUFFIX} artifact files named after `{stem}` already exist"),
        ))
    }

    /// Mark the new file in use (never pruned) until its [`ArtifactFile`] drops.
    fn track(self: &Arc<Self>, file: File, path: PathBuf) -> std::io::Result<ArtifactFile> {
        rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive)?;
        Ok(ArtifactFile {
            file,
            path,
            written: 0,
            reserved: 0,
            max: self.max_bytes,
            dir: Arc::clone(self),
        })
    }

    /// Under the directory lock: remove the oldest files not in use until `want` bytes
    /// fit beside the others (every file but `mine`, counted at its size, which
    /// includes other writers' reservations), then extend `mine` to the room granted (at
    /// most `want`, never below `floor`, what it holds already) before the lock goes, so
    /// the next writer counts it. Returns the file's new size.
    fn reserve(&self, mine: &File, mine_path: &Path, want: u64, floor: u64) -> u64 {
        let Ok(dir) = File::open(&self.dir) else {
            return floor;
        };
        if rustix::fs::flock(&dir, FlockOperation::LockExclusive).is_err() {
            return floor;
        }
        let mut files = self.files();
        files.retain(|f| f.2 != mine_path);
        let mut others: u64 = files.iter().map(|f| f.1).sum();
        files.sort();
        for (_, len, path) in files {
            if others + want <= self.total_bytes {
                break;
            }
            if remove_unless_in_use(&path) {
                others -= len;
            }
        }
        let size = want.min(self.total_bytes.saturating_sub(others)).max(floor);
        // Still under the lock (it goes with `dir`).
        match mine.set_len(size) {
            Ok(()) => size,
            Err(_) => floor,
        }
    }

    /// (modified, size, path) of every regular file in the directory.
    fn files(&self) -> Vec<(std::time::SystemTime, u64, PathBuf)> {
        let Ok(rd) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        rd.flatten()
            .filter_map(|e| {
                let m = e.metadata().ok().filter(|m| m.is_file())?;
                Some((m.modified().ok()?, m.len(), e.path()))
            })
            .collect()
    }
}

/// Remove `path` unless a writer (of any worker process) holds its lock; whether it
/// went. The lock is taken first and held across the unlink.
fn remove_unless_in_use(path: &Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        return false; // being written
    }
    std::fs::remove_file(path).is_ok()
}

/// The `n`th name for `stem`: `<stem>.log` first (the documented name), then
/// `<stem>-<n>.log`.
fn numbered(stem: &str, n: u32) -> String {
    match n {
        1 => format!("{stem}.log"),
        n => format!("{stem}-{n}.log"),
    }
}

/// Create `path` only if no file (or symlink) has that name yet.
fn create_new(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// One artifact being written; bytes past its cap, or past the room the directory has
/// for it, are dropped (counted elsewhere).
#[derive(Debug)]
pub(crate) struct ArtifactFile {
    file: File,
    pub path: PathBuf,
    pub written: u64,
    /// The file's size: `written` plus the room reserved ahead of it.
    reserved: u64,
    max: u64,
    dir: Arc<Artifacts>,
}

impl ArtifactFile {
    /// Append what fits under the caps; a write error stops further writes (logged once).
    pub(crate) fn write(&mut self, data: &[u8]) {
        let end = (self.written + data.len() as u64).min(self.max);
        if end > self.reserved {
            self.grow(end);
        }
        let n = self
            .reserved
            .saturating_sub(self.written)
            .min(data.len() as u64) as usize;
        if n == 0 {
            return;
        }
        match self.file.write_all_at(&data[..n], self.written) {
            Ok(()) => self.written += n as u64,
            Err(e) => {
                tracing::warn!("artifact {}: {e}", self.path.display());
                self.max = self.written;
            }
        }
    }

    /// Reserve room up to `end` (rounded up to the step, within the per-file cap).
    fn grow(&mut self, end: u64) {
        let want_end = end
            .div_ceil(RESERVE_STEP)
            .saturating_mul(RESERVE_STEP)
            .min(self.max)
            .max(end);
        let size = self
            .dir
            .reserve(&self.file, &self.path, want_end, self.written);
        self.reserved = size;
        if size < end {
            // No more room: what does not fit is dropped, like past the file cap.
            self.max = self.reserved;
        }
    }

    /// Give back the room reserved past what was written (the output is complete).
    pub(crate) fn seal(&mut self) {
        if self.reserved != self.written && self.file.set_len(self.written).is_ok() {
            self.reserved = self.written;
        }
    }
}

impl Drop for ArtifactFile {
    fn drop(&mut self) {
        self.seal();
    }
}

/// A file-name-safe version of a client call id.
pub(crate) fn sanitize_name(name: &str, fallback: u64) -> String {
    let s: String = name
        .chars()
        .take(100)
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect();
    let s = s.trim_start_matches('.');
    if s.is_empty() {
        format!("call-{fallback}")
    } else {
        s.to_owned()
    }
}

/// The bounded capture of a foreground command's output.
pub(crate) struct Capture {
    limits: Limits,
    /// The whole output while it fits `shell_max`; emptied once it overflows.
    full: Vec<u8>,
    head: Vec<u8>,
    tail: VecDeque<u8>,
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
            &super::ansi::strip
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

/// How `truncated.full_output` names an artifact so that `read_file` reads it: relative
/// to the workspace when the state directory is inside it (the documented
/// `<state_dir>/artifacts/<call>.log`), else `artifacts:/<file>`, because an absolute
/// path outside every root is refused (`PathOutsideWorkspace`) before a worker sees it.
pub(crate) fn full_output_name(path: &Path, workspace: &Path) -> String {
    match (path.strip_prefix(workspace), path.file_name()) {
        (Ok(rel), _) => rel.display().to_string(),
        (Err(_), Some(name)) => format!(
            "{}/{}",
            crate::paths::ARTIFACTS_SCOPE,
            name.to_string_lossy()
        ),
        (Err(_), None) => path.display().to_string(),
    }
}

/// Coalesces streamed output into frames of at most [`CHUNK`] bytes, flushed at least
/// every [`FLUSH_EVERY`], never splitting a UTF-8 character across frames.
pub(crate) struct Coalescer {
    sink: OutputSink,
    stream: Stream,
    pending: Vec<u8>,
    since: Option<Instant>,
    /// A terminal's output is streamed as its text, like `content`.
    stripper: Option<super::ansi::Stripper>,
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
        self.stripper = tty.then(super::ansi::Stripper::default);
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
            _ = super::launch::sleep_until_opt(due) => {
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

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_protocol::worker::FromWorker;

    fn limits(max: usize, head: usize, tail: usize) -> Limits {
        Limits {
            shell_max: max,
            shell_head: head,
            shell_tail: tail,
            ..Limits::default()
        }
    }

    #[test]
    fn small_output_is_whole() {
        let mut c = Capture::new(&limits(100, 10, 20), Box::new(|| None));
        c.record(b"hello ");
        c.record(b"world\n");
        let (text, t) = c.finish(Path::new("/w"));
        assert_eq!(text, "hello world\n");
        assert!(t.is_none());
    }

    #[test]
    fn large_output_keeps_head_tail_and_artifact() {
        let dir = tempfile::tempdir().unwrap();
        let arts = Artifacts::new(dir.path(), &Limits::default());
        let a2 = Arc::clone(&arts);
        let mut c = Capture::new(
            &limits(100, 10, 20),
            Box::new(move || a2.create("call-1").ok()),
        );
        let mut all = Vec::new();
        for i in 0..50 {
            let line = format!("line {i}\n");
            all.extend_from_slice(line.as_bytes());
            c.record(line.as_bytes());
        }
        assert!(
            c.tail.len() <= 20 && c.full.is_empty(),
            "memory stays bounded"
        );
        let (text, t) = c.finish(dir.path());
        let t = t.unwrap();
        assert!(
            text.starts_with("line 0\nlin\n[Output truncated: "),
            "{text}"
        );
        assert!(text.ends_with("line 48\nline 49\n"), "{text}");
        assert_eq!(text.matches("[Output truncated").count(), 1);
        assert_eq!(t.full_output.as_deref(), Some("artifacts/call-1.log"));
        assert_eq!(
            full_output_name(&arts.dir.join("call-1.log"), Path::new("/elsewhere")),
            "artifacts:/call-1.log"
        );
        assert_eq!(
            std::fs::read(dir.path().join("artifacts/call-1.log")).unwrap(),
            all
        );
        let f = File::open(dir.path().join("artifacts/call-1.log")).unwrap();
        assert!(
            rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok(),
            "a finished artifact is no longer locked"
        );
    }

    #[test]
    fn artifact_cap_and_directory_pruning() {
        let dir = tempfile::tempdir().unwrap();
        let l = Limits {
            artifacts_max_bytes: 10,
            artifacts_total_bytes: 25,
            ..Limits::default()
        };
        let arts = Artifacts::new(dir.path(), &l);
        for name in ["a", "b", "c"] {
            let mut f = arts.create(name).unwrap();
            f.write(b"0123456789abcdef");
            assert_eq!(f.written, 10);
            let t = std::time::SystemTime::now() - Duration::from_secs(100);
            let file = File::options().write(true).open(&f.path).unwrap();
            file.set_modified(t + Duration::from_secs(name.as_bytes()[0] as u64))
                .unwrap();
        }
        let held = arts.create("d").unwrap();
        let names: Vec<String> = std::fs::read_dir(&arts.dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            !names.contains(&"a.log".to_string()),
            "oldest removed: {names:?}"
        );
        assert!(names.contains(&"c.log".to_string()) && names.contains(&"d.log".into()));
        drop(held);
    }

    /// A file still being written (its writer holds the lock: here another `Artifacts`,
    /// as another worker process would) is never pruned, even when it is the oldest:
    /// a new file then gets only the room left; once its writer is gone, it is pruned.
    #[test]
    fn files_being_written_are_not_pruned_by_any_worker() {
        let dir = tempfile::tempdir().unwrap();
        let l = Limits {
            artifacts_max_bytes: 10,
            artifacts_total_bytes: 15,
            ..Limits::default()
        };
        let other_worker = Artifacts::new(dir.path(), &l);
        let mut writing = other_worker.create("old").unwrap();
        writing.write(b"0123456789");
        let this_worker = Artifacts::new(dir.path(), &l);
        let mut f = this_worker.create("new").unwrap();
        f.write(b"0123456789");
        assert!(writing.path.exists(), "a file being written was pruned");
        assert_eq!(f.written, 5, "only the room left under the total");
        drop(f);
        drop(writing);
        let mut g = this_worker.create("newer").unwrap();
        g.write(b"0123456789");
        assert_eq!(g.written, 10);
        assert!(
            !dir.path().join("artifacts/old.log").exists(),
            "no longer written: prunable"
        );
    }

    /// However many writers (of any worker process: threads with their own `Artifacts`
    /// here) grow at once, the directory never holds more than its total, as seen under
    /// its lock (which every reservation and prune takes; sizes only shrink outside it).
    #[test]
    fn the_total_holds_at_every_moment() {
        let dir = tempfile::tempdir().unwrap();
        let l = Limits {
            artifacts_max_bytes: 3 << 20,
            artifacts_total_bytes: 4 << 20,
            ..Limits::default()
        };
        let state = dir.path().to_path_buf();
        let arts = state.join("artifacts");
        std::fs::create_dir_all(&arts).unwrap();
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let sampler = {
            let (done, arts) = (Arc::clone(&done), arts.clone());
            std::thread::spawn(move || {
                let mut worst = 0u64;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let lock = File::open(&arts).unwrap();
                    rustix::fs::flock(&lock, FlockOperation::LockShared).unwrap();
                    let total: u64 = std::fs::read_dir(&arts)
                        .unwrap()
                        .flatten()
                        .filter_map(|e| e.metadata().ok())
                        .map(|m| m.len())
                        .sum();
                    drop(lock);
                    worst = worst.max(total);
                }
                worst
            })
        };
        let writers: Vec<_> = (0..4)
            .map(|i| {
                let (state, l) = (state.clone(), l.clone());
                std::thread::spawn(move || {
                    let arts = Artifacts::new(&state, &l);
                    let chunk = vec![b'x'; 64 * 1024];
                    for round in 0..3 {
                        let mut f = arts.create(&format!("w{i}-{round}")).unwrap();
                        for _ in 0..32 {
                            f.write(&chunk);
                        }
                    }
                })
            })
            .collect();
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let worst = sampler.join().unwrap();
        assert!(worst <= 4 << 20, "the directory held {worst} bytes");
        assert!(worst >= 2 << 20, "the sampler saw little ({worst})");
    }

    #[test]
    fn a_taken_name_gets_a_suffix_and_is_never_overwritten() {
        let dir = tempfile::tempdir().unwrap();
        let arts = Artifacts::new(dir.path(), &Limits::default());
        let mut paths = Vec::new();
        for i in 0..3 {
            let mut f = arts.create("c1").unwrap();
            f.write(format!("output {i}").as_bytes());
            paths.push(f.path.clone());
        }
        let names: Vec<_> = paths
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["c1.log", "c1-2.log", "c1-3.log"]);
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(std::fs::read_to_string(p).unwrap(), format!("output {i}"));
        }
        // A name freed (pruned, removed) is the documented name again.
        std::fs::remove_file(&paths[0]).unwrap();
        assert_eq!(arts.create("c1").unwrap().path, paths[0]);
    }

    #[test]
    fn a_planted_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let arts = Artifacts::new(dir.path(), &Limits::default());
        std::fs::create_dir_all(&arts.dir).unwrap();
        let victim = dir.path().join("audit.jsonl");
        std::fs::write(&victim, "keep").unwrap();
        std::os::unix::fs::symlink(&victim, arts.dir.join("c1.log")).unwrap();
        let mut f = arts.create("c1").unwrap();
        f.write(b"new");
        assert!(f.path.ends_with("c1-2.log"), "{}", f.path.display());
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    }

    /// Several exec workers (separate processes, so separate `Artifacts`) creating the
    /// same call id at once each get their own file.
    #[test]
    fn concurrent_creates_with_one_id_do_not_collide() {
        let dir = tempfile::tempdir().unwrap();
        let state = dir.path().to_path_buf();
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let threads: Vec<_> = (0..8)
            .map(|i| {
                let (state, barrier) = (state.clone(), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    let arts = Artifacts::new(&state, &Limits::default());
                    barrier.wait();
                    let mut f = arts.create("cli-1").unwrap();
                    f.write(format!("worker {i}").as_bytes());
                    (i, f.path.clone())
                })
            })
            .collect();
        let got: Vec<(usize, PathBuf)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
        let distinct: std::collections::HashSet<&PathBuf> = got.iter().map(|g| &g.1).collect();
        assert_eq!(distinct.len(), 8, "{got:?}");
        for (i, p) in &got {
            assert_eq!(std::fs::read_to_string(p).unwrap(), format!("worker {i}"));
        }
    }

    #[test]
    fn names_are_sanitized() {
        assert_eq!(sanitize_name("abc-1_2.x", 1), "abc-1_2.x");
        assert_eq!(sanitize_name("../etc/passwd", 1), "_etc_passwd");
        assert_eq!(sanitize_name("..", 7), "call-7");
        assert_eq!(sanitize_name("a b/ü", 1), "a_b__");
    }

    #[test]
    fn incomplete_chars_are_held_back() {
        assert_eq!(complete_prefix(b"abc"), 3);
        let e = "é".as_bytes();
        assert_eq!(complete_prefix(&[b'a', e[0]]), 1);
        assert_eq!(complete_prefix(&[b'a', e[0], e[1]]), 3);
        let euro = "€".as_bytes();
        assert_eq!(complete_prefix(&euro[..2]), 0);
        assert_eq!(complete_prefix(&[0xFF]), 1, "invalid bytes are not held");
    }

    #[tokio::test]
    async fn coalescer_frames_are_bounded_and_utf8_whole() {
        let (tx, mut rx) = tokio::sync::mpsc::channel(1024);
        let mut c = Coalescer::new(OutputSink { call: 1, tx });
        let text = "é".repeat(20_000); // 40 000 bytes, fed in odd-sized pieces
        for piece in text.as_bytes().chunks(4097) {
            c.push(Stream::Stdout, piece).await;
        }
        c.push(Stream::Stderr, b"err").await;
        c.flush(true).await;
        drop(c);
        let mut out = String::new();
        let mut streams = Vec::new();
        while let Some(FromWorker::Output { data, stream, .. }) = rx.recv().await {
            assert!(data.len() <= CHUNK && !data.contains('\u{FFFD}'));
            streams.push(stream);
            out.push_str(&data);
        }
        assert_eq!(out, format!("{text}err"));
        assert_eq!(streams.last().map(String::as_str), Some("stderr"));
    }
}
