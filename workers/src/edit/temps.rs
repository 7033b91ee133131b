//! The temp-name journal: named temp files a killed edit worker left behind are removed
//! by the next edit worker before it answers `ready`.
//!
//! A write gives its content a temp name only briefly (between `linkat` and the rename),
//! or for the whole write where the filesystem has no `O_TMPFILE` (overlayfs before
//! Linux 6.6, some network filesystems). A `kill -9` inside that window would leave a
//! hidden `.NAME.toolvisor-PID-N.tmp` for ever, so every temp name is first recorded
//! in this worker's journal, `STATE/edit-temps/PID`, as `DIR\0NAME\0` (DIR the real
//! path of the directory). The worker holds an exclusive `flock` on its journal for its
//! whole life: the kernel drops it when the process dies, however it dies, so a
//! journal that can be locked belongs to a dead worker. Starting workers sweep those:
//! each recorded name that still exists is unlinked (through the resolver's confined
//! open of its directory, and only if it has this journal's pid in the temp-name
//! pattern), then the journal is removed. While no temp name is outstanding the worker
//! truncates its journal, so it stays a few hundred bytes.
//!
//! Durability: records of the long fallback window are `fdatasync`ed before the temp
//! file exists (it is fsynced itself, so it could outlive a power cut); the
//! microsecond link-to-rename window is only written, which survives any process death.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, BorrowedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use rustix::fs::{AtFlags, FlockOperation};

use super::dirs::Beneath;
use crate::paths::{Resolver, real_path};

/// The journal directory inside the state directory.
pub const DIR_NAME: &str = "edit-temps";

/// This process's journal, once [`open`] has run (never in unit tests of other modules:
/// recording is then a no-op).
static JOURNAL: OnceLock<Journal> = OnceLock::new();

/// Where the journals live for this state directory.
pub fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join(DIR_NAME)
}

/// Create the journal directory (0700). Called before the worker confines itself, as
/// Landlock rules need the directory to exist.
pub fn prepare(state_dir: &Path) -> std::io::Result<PathBuf> {
    let d = dir(state_dir);
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&d)?;
    Ok(d)
}

/// What a sweep did, for the worker's log.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Swept {
    /// Journals of dead workers processed.
    pub journals: usize,
    /// Temp files removed.
    pub removed: usize,
}

/// Lock this process's journal, sweep every dead worker's (this pid's old one included),
/// and install the journal for [`record`].
pub fn open(journals: &Path, resolver: &Resolver) -> std::io::Result<Swept> {
    let journal = Journal::lock_own(journals, std::process::id())?;
    let mut swept = Swept::default();
    // Whatever the last process with this pid left in the file it held.
    swept.removed += sweep_records(&journal.path, std::process::id(), resolver)?;
    journal.reset()?;
    let others = sweep_dead(journals, resolver)?;
    swept.journals += others.journals;
    swept.removed += others.removed;
    // A second `open` in one process keeps the first journal (and its lock).
    let _ = JOURNAL.set(journal);
    Ok(swept)
}

/// Record the temp name `name` in `dir` before it is created; the returned guard marks
/// it settled (renamed or removed) when dropped. A no-op without a journal, or when the
/// directory's real path cannot be read (no `/proc`).
pub fn record(dir: BorrowedFd<'_>, name: &OsStr, durable: bool) -> Option<Recorded> {
    let journal = JOURNAL.get()?;
    let path = real_path(&dir)?;
    match journal.append(&path, name, durable) {
        Ok(()) => Some(Recorded { journal }),
        Err(e) => {
            tracing::warn!("edit worker: cannot record a temp name in the journal: {e}");
            None
        }
    }
}

/// One outstanding temp name; dropping it settles it.
pub struct Recorded {
    journal: &'static Journal,
}

impl Drop for Recorded {
    fn drop(&mut self) {
        self.journal.settle();
    }
}

/// A worker's own journal: the locked file and how many names are outstanding.
struct Journal {
    path: PathBuf,
    state: Mutex<JournalState>,
}

struct JournalState {
    file: File,
    outstanding: usize,
}

impl Journal {
    /// Create (or take over) `journals/PID` and lock it for this process's life.
    fn lock_own(journals: &Path, pid: u32) -> std::io::Result<Self> {
        let path = journals.join(pid.to_string());
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .mode(0o600)
            .open(&path)?;
        rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).map_err(|e| {
            std::io::Error::other(format!(
                "{} is locked by another live process: {e}",
                path.display()
            ))
        })?;
        Ok(Journal {
            path,
            state: Mutex::new(JournalState {
                file,
                outstanding: 0,
            }),
        })
    }

    /// Empty the journal (nothing outstanding).
    fn reset(&self) -> std::io::Result<()> {
        let state = self.lock();
        state.file.set_len(0)
    }

    fn append(&self, dir: &Path, name: &OsStr, durable: bool) -> std::io::Result<()> {
        let mut state = self.lock();
        let mut rec = Vec::with_capacity(dir.as_os_str().len() + name.len() + 2);
        rec.extend_from_slice(dir.as_os_str().as_bytes());
        rec.push(0);
        rec.extend_from_slice(name.as_bytes());
        rec.push(0);
        // One write on an O_APPEND file: records never interleave.
        state.file.write_all(&rec)?;
        if durable {
            state.file.sync_data()?;
        }
        state.outstanding += 1;
        Ok(())
    }

    fn settle(&self) {
        let mut state = self.lock();
        state.outstanding = state.outstanding.saturating_sub(1);
        if state.outstanding == 0 {
            // Every recorded name is gone: forget them. A failure only keeps stale
            // records, which a sweep skips (the names no longer exist).
            let _ = state.file.set_len(0);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, JournalState> {
        // A panic while holding it leaves consistent data (a counter and a file).
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Sweep every journal in `journals` whose owner is dead (its lock can be taken).
pub fn sweep_dead(journals: &Path, resolver: &Resolver) -> std::io::Result<Swept> {
    let mut swept = Swept::default();
    for entry in std::fs::read_dir(journals)? {
        let entry = entry?;
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        if let Some(removed) = sweep_one(&entry.path(), pid, resolver)? {
            swept.journals += 1;
            swept.removed += removed;
        }
    }
    Ok(swept)
}

/// Sweep one journal if its owner is dead, then remove it; `None` if it is alive (or
/// another sweeper got there first).
fn sweep_one(path: &Path, pid: u32, resolver: &Resolver) -> std::io::Result<Option<usize>> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    if rustix::fs::flock(&file, FlockOperation::NonBlockingLockExclusive).is_err() {
        return Ok(None); // a live worker's journal
    }
    // Locked, but is it still the file under that name? (A concurrent sweeper may have
    // removed it and a new worker with this pid created a fresh one.)
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.ino() == file.metadata()?.ino() => {}
        _ => return Ok(None),
    }
    let removed = sweep_records(path, pid, resolver)?;
    std::fs::remove_file(path)?;
    Ok(Some(removed))
}

/// Unlink every recorded temp name of worker `pid` that still exists.
fn sweep_records(path: &Path, pid: u32, resolver: &Resolver) -> std::io::Result<usize> {
    let bytes = std::fs::read(path)?;
    let mut removed = 0;
    for (dir, name) in parse(&bytes) {
        if is_temp_name_of(&name, pid) && remove_temp(resolver, &dir, &name) {
            removed += 1;
        }
    }
    Ok(removed)
}

/// The `(dir, name)` records of a journal; a torn last record is ignored.
fn parse(mut bytes: &[u8]) -> Vec<(PathBuf, OsString)> {
    let mut out = Vec::new();
    while let Some((dir, rest)) = take_field(bytes) {
        let Some((name, rest)) = take_field(rest) else {
            break; // torn: the name was not written completely
        };
        bytes = rest;
        if !dir.is_empty() && !name.is_empty() {
            out.push((
                PathBuf::from(OsString::from_vec(dir.to_vec())),
                OsString::from_vec(name.to_vec()),
            ));
        }
    }
    out
}

/// The bytes up to the next NUL and what follows it; `None` without a NUL.
fn take_field(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let at = bytes.iter().position(|b| *b == 0)?;
    Some((&bytes[..at], &bytes[at + 1..]))
}

/// Whether `name` is `.X.toolvisor-PID-N.tmp` for this `pid`: nothing else is removed.
fn is_temp_name_of(name: &OsStr, pid: u32) -> bool {
    let Some(s) = name.as_bytes().strip_suffix(b".tmp") else {
        return false;
    };
    let marker = format!(".toolvisor-{pid}-");
    let Some(at) = find(s, marker.as_bytes()) else {
        return false;
    };
    let counter = &s[at + marker.len()..];
    name.as_bytes().starts_with(b".")
        && !counter.is_empty()
        && counter.iter().all(u8::is_ascii_digit)
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

/// Unlink `dir/name` through the confined open of `dir` beneath the root holding it;
/// whether a file was removed.
fn remove_temp(resolver: &Resolver, dir: &Path, name: &OsStr) -> bool {
    let Some((root, rel)) = resolver
        .roots
        .iter()
        .enumerate()
        .find_map(|(i, (_, root))| dir.strip_prefix(root).ok().map(|rel| (i, rel)))
    else {
        return false; // no longer beneath a root: not ours to touch
    };
    let beneath = Beneath {
        root: resolver.root_fd(root),
        openat2: resolver.has_openat2(),
    };
    let Ok(fd) = beneath.open_dir(rel) else {
        return false;
    };
    rustix::fs::unlinkat(fd.as_fd(), name, AtFlags::empty()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_protocol::worker::Roots;

    fn resolver(ws: &Path) -> Resolver {
        let roots = Roots {
            private: ws.to_path_buf(),
            shared: None,
            public: None,
        };
        Resolver::new(&roots, &[]).unwrap()
    }

    fn record_bytes(dir: &Path, name: &str) -> Vec<u8> {
        let mut v = dir.as_os_str().as_bytes().to_vec();
        v.push(0);
        v.extend_from_slice(name.as_bytes());
        v.push(0);
        v
    }

    #[test]
    fn temp_name_pattern_is_strict() {
        let ok = |n: &str| is_temp_name_of(OsStr::new(n), 42);
        assert!(ok(".a.txt.toolvisor-42-0.tmp"));
        assert!(ok(".a.toolvisor-1-2.txt.toolvisor-42-17.tmp"));
        assert!(!ok("a.txt.toolvisor-42-0.tmp"), "not hidden");
        assert!(!ok(".a.txt.toolvisor-43-0.tmp"), "another pid");
        assert!(!ok(".a.txt.toolvisor-42-.tmp"));
        assert!(!ok(".a.txt.toolvisor-42-0x.tmp"));
        assert!(!ok(".a.txt.toolvisor-42-0.tmpx"));
        assert!(!ok(".a.txt"));
    }

    #[test]
    fn parse_skips_a_torn_record() {
        let mut bytes = record_bytes(Path::new("/w"), "a");
        bytes.extend_from_slice(&record_bytes(Path::new("/w/d"), "b"));
        assert_eq!(parse(&bytes).len(), 2);
        for torn in [&b"/w/e\0.c.tool"[..], b"/w/e\0", b"/w/e"] {
            let mut b = bytes.clone();
            b.extend_from_slice(torn);
            let recs = parse(&b);
            assert_eq!(recs.len(), 2, "{recs:?}");
            assert_eq!(recs[1].1, OsString::from("b"));
        }
        assert!(parse(b"").is_empty());
    }

    /// A dead worker's journal (no lock held) is swept: its recorded temps go, nothing
    /// else does; a live worker's journal (locked) is left alone.
    #[test]
    fn sweeps_dead_journals_only() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let state = tempfile::tempdir().unwrap();
        let journals = prepare(state.path()).unwrap();
        std::fs::create_dir(ws_path.join("sub")).unwrap();
        let dead_temp = ws_path.join("sub/.f.toolvisor-7-0.tmp");
        let live_temp = ws_path.join(".g.toolvisor-8-0.tmp");
        let innocent = ws_path.join("sub/keep.txt");
        let wrong_pid = ws_path.join("sub/.h.toolvisor-9-0.tmp");
        for p in [&dead_temp, &live_temp, &innocent, &wrong_pid] {
            std::fs::write(p, "x").unwrap();
        }
        let mut dead = record_bytes(&ws_path.join("sub"), ".f.toolvisor-7-0.tmp");
        dead.extend_from_slice(&record_bytes(&ws_path.join("sub"), "keep.txt"));
        dead.extend_from_slice(&record_bytes(&ws_path.join("sub"), ".h.toolvisor-9-0.tmp"));
        dead.extend_from_slice(&record_bytes(Path::new("/etc"), ".p.toolvisor-7-0.tmp"));
        std::fs::write(journals.join("7"), dead).unwrap();
        // The live one: locked through its own open file description.
        let live = Journal::lock_own(&journals, 8).unwrap();
        live.append(&ws_path, OsStr::new(".g.toolvisor-8-0.tmp"), false)
            .unwrap();

        let swept = sweep_dead(&journals, &resolver(&ws_path)).unwrap();
        assert_eq!(
            swept,
            Swept {
                journals: 1,
                removed: 1
            }
        );
        assert!(!dead_temp.exists());
        assert!(innocent.exists() && wrong_pid.exists() && live_temp.exists());
        assert!(!journals.join("7").exists(), "the dead journal is removed");
        assert!(journals.join("8").exists(), "the live journal stays");

        // Once the live worker dies (its lock goes with its file), its temp is swept.
        drop(live);
        let swept = sweep_dead(&journals, &resolver(&ws_path)).unwrap();
        assert_eq!(swept.removed, 1);
        assert!(!live_temp.exists());
    }

    #[test]
    fn settled_names_are_forgotten() {
        let state = tempfile::tempdir().unwrap();
        let journals = prepare(state.path()).unwrap();
        let j = Journal::lock_own(&journals, 99).unwrap();
        j.append(Path::new("/w"), OsStr::new(".a.toolvisor-99-0.tmp"), true)
            .unwrap();
        j.append(Path::new("/w"), OsStr::new(".b.toolvisor-99-1.tmp"), false)
            .unwrap();
        let size = || std::fs::metadata(journals.join("99")).unwrap().len();
        assert!(size() > 0);
        j.settle();
        assert!(size() > 0, "one name is still outstanding");
        j.settle();
        assert_eq!(size(), 0);
    }
}
