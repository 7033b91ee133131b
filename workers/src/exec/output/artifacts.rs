//! The artifacts directory: the full output of truncated commands and of background
//! jobs, capped per file and for the whole directory across every exec worker process.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::FlockOperation;

use toolvisor_protocol::worker::Limits;

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
