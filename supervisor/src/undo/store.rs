//! The journal's blobs: file contents kept by their SHA-256 under the state directory
//! (`undo/blobs/ab/abcdef…`), each written once (to a temporary name, then renamed),
//! so a blob that exists is whole — unless the machine lost power before it reached the
//! disk with `[audit] fsync = "never"`, which [`Store::read_checked`] catches before a
//! restore uses it. What refers to which blob, and how many bytes they may take, is
//! [`super::state`]'s business.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// The blob directory.
#[derive(Clone, Debug)]
pub struct Store {
    dir: PathBuf,
}

/// A file's content, hashed (and kept, when asked).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Hashed {
    /// Lowercase hex SHA-256.
    pub sha256: String,
    /// Bytes read.
    pub size: u64,
}

impl Store {
    /// The store under `dir` (made when missing; leftover temporaries removed).
    pub fn open(dir: &Path) -> io::Result<Store> {
        std::fs::create_dir_all(dir.join("tmp"))?;
        for e in std::fs::read_dir(dir.join("tmp"))?.flatten() {
            let _ = std::fs::remove_file(e.path());
        }
        Ok(Store {
            dir: dir.to_path_buf(),
        })
    }

    /// Where blob `sha` lives.
    pub fn path(&self, sha: &str) -> PathBuf {
        let (head, _) = sha.split_at(sha.len().min(2));
        self.dir.join(head).join(sha)
    }

    /// Whether blob `sha` is there.
    pub fn has(&self, sha: &str) -> bool {
        self.path(sha).is_file()
    }

    /// Hash what `src` reads without keeping it.
    pub fn hash(src: &mut impl Read) -> io::Result<Hashed> {
        copy_hashing(src, &mut io::sink())
    }

    /// Hash what `src` reads and keep it. A content under [`SMALL`] is hashed in
    /// memory first and written only when the store does not have it yet (a file
    /// written again with the same content costs no write); a larger one is copied
    /// while hashed.
    pub fn put(&self, src: &mut impl Read) -> io::Result<Hashed> {
        let mut head = Vec::new();
        src.by_ref().take(SMALL).read_to_end(&mut head)?;
        if (head.len() as u64) < SMALL {
            return self.put_bytes(&head);
        }
        let tmp = tempfile_in(&self.dir.join("tmp"))?;
        let hashed = copy_hashing(
            &mut head.as_slice().chain(src),
            &mut io::BufWriter::new(&tmp.1),
        )?;
        self.settle(&tmp.0, hashed)
    }

    /// Keep `bytes` unless the store has them already.
    fn put_bytes(&self, bytes: &[u8]) -> io::Result<Hashed> {
        let hashed = Hashed {
            sha256: toolvisor_os::hex::hex(&Sha256::digest(bytes)),
            size: bytes.len() as u64,
        };
        if self.holds(&hashed) {
            return Ok(hashed);
        }
        let (tmp, mut f) = tempfile_in(&self.dir.join("tmp"))?;
        f.write_all(bytes)?;
        self.settle(&tmp, hashed)
    }

    /// Whether the blob `h` names is kept whole. One of another size was cut short by
    /// a power cut (`fsync = "never"`): a whole copy replaces it.
    fn holds(&self, h: &Hashed) -> bool {
        std::fs::metadata(self.path(&h.sha256)).is_ok_and(|m| m.is_file() && m.len() == h.size)
    }

    /// Move the temporary `tmp`, holding `hashed`, to its place (or drop it when the
    /// store has it already).
    fn settle(&self, tmp: &Path, hashed: Hashed) -> io::Result<Hashed> {
        if self.holds(&hashed) {
            let _ = std::fs::remove_file(tmp);
            return Ok(hashed);
        }
        let dest = self.path(&hashed.sha256);
        if let Some(parent) = dest.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::rename(tmp, &dest)?;
        Ok(hashed)
    }

    /// Drop blob `sha` (gone already is fine).
    pub fn remove(&self, sha: &str) {
        let _ = std::fs::remove_file(self.path(sha));
    }

    /// Open blob `sha` for reading.
    pub fn read(&self, sha: &str) -> io::Result<File> {
        File::open(self.path(sha))
    }

    /// Open blob `sha` for reading once its content is checked against its name: with
    /// `[audit] fsync = "never"` a power cut may leave a blob short or empty, and that
    /// must never be put back as the file's content.
    pub fn read_checked(&self, sha: &str) -> io::Result<File> {
        use std::io::{Seek, SeekFrom};
        let mut f = self.read(sha)?;
        if Store::hash(&mut f)?.sha256 != sha {
            return Err(io::Error::other(
                "its content before the call is damaged in the journal (a crash of the machine with [audit] fsync = \"never\"?)",
            ));
        }
        f.seek(SeekFrom::Start(0))?;
        Ok(f)
    }

    /// Flush everything written to the store's file system: a journal record naming a
    /// blob is written only after the blob is on disk.
    pub fn sync(&self) -> io::Result<()> {
        let dir = File::open(&self.dir)?;
        use std::os::fd::AsRawFd;
        // SAFETY: syncfs on a descriptor we own.
        if unsafe { libc::syncfs(dir.as_raw_fd()) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Contents smaller than this are read into memory to be kept.
const SMALL: u64 = 1 << 20;

/// Copy `src` to `dst` while hashing it.
fn copy_hashing(src: &mut impl Read, dst: &mut impl Write) -> io::Result<Hashed> {
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 256 * 1024];
    let mut size = 0u64;
    loop {
        let n = match src.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n])?;
        size += n as u64;
    }
    dst.flush()?;
    Ok(Hashed {
        sha256: toolvisor_os::hex::hex(&hasher.finalize()),
        size,
    })
}

/// A new file with a unique name in `dir`.
fn tempfile_in(dir: &Path) -> io::Result<(PathBuf, File)> {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let p = dir.join(format!("{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&p)
        {
            Ok(f) => return Ok((p, f)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_blob_reads_back_and_hashes_alike() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(&d.path().join("blobs")).unwrap();
        let f = d.path().join("f");
        std::fs::write(&f, b"hello\n").unwrap();
        let kept = store.put(&mut File::open(&f).unwrap()).unwrap();
        assert_eq!(kept, Store::hash(&mut File::open(&f).unwrap()).unwrap());
        assert_eq!(
            kept.sha256,
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03"
        );
        let mut back = Vec::new();
        store
            .read(&kept.sha256)
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, b"hello\n");
        let again = store.put(&mut File::open(&f).unwrap()).unwrap();
        assert_eq!(again, kept, "a second put is the same blob");
        store.read_checked(&kept.sha256).unwrap();
        std::fs::write(store.path(&kept.sha256), b"").unwrap();
        assert!(store.read_checked(&kept.sha256).is_err(), "a damaged blob");
        store.remove(&kept.sha256);
        assert!(!store.has(&kept.sha256));
    }

    #[test]
    fn a_content_over_the_in_memory_size_is_kept_whole() {
        let d = tempfile::tempdir().unwrap();
        let store = Store::open(&d.path().join("blobs")).unwrap();
        let big: Vec<u8> = (0..SMALL + 10).map(|i| (i % 251) as u8).collect();
        let kept = store.put(&mut big.as_slice()).unwrap();
        assert_eq!(kept, Store::hash(&mut big.as_slice()).unwrap());
        let mut back = Vec::new();
        store
            .read_checked(&kept.sha256)
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert!(back == big, "the same bytes back");
    }
}
