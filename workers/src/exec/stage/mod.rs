//! Staged commands (`run_command` with `stage: true`): each workspace root is an
//! overlay inside the command's mount namespace ([`toolvisor_sandbox::overlay`]), its
//! writes held in a staging directory of the state directory (`STATE/staged/<id>`,
//! which commands never see). When the command ends, [`Staging::collect`] reads the
//! upper directories ([`upper`]), records what the workspace had at each changed path
//! ([`toolvisor_os::staged::Manifest`]) and writes their diff ([`diff`]); the
//! supervisor keeps the record behind a token and applies it with
//! `apply_file_change`, all or nothing.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use toolvisor_os::staged::{self, Held, Manifest};

use crate::ToolError;

mod diff;
mod upper;

/// The staging directory of one command.
#[derive(Debug)]
pub(crate) struct Staging {
    id: String,
    dir: PathBuf,
}

/// What a staged command held.
#[derive(Debug)]
pub(crate) struct Collected {
    /// The record the supervisor applies.
    pub manifest: Manifest,
    /// The changes as a unified diff.
    pub diff: String,
}

impl Staging {
    /// A new, empty staging directory with an upper and a work directory for each of
    /// `roots` workspace roots.
    pub(crate) fn create(state_dir: &Path, roots: usize) -> Result<Staging, ToolError> {
        let id = new_id();
        let dir = staged::dir(state_dir, &id);
        let made = (0..roots).try_for_each(|i| {
            std::fs::create_dir_all(staged::upper(&dir, i))?;
            std::fs::create_dir_all(staged::work(&dir, i))
        });
        let staging = Staging { id, dir };
        match made {
            Ok(()) => Ok(staging),
            Err(e) => {
                staging.discard();
                Err(ToolError::internal(format!(
                    "cannot make the staging directory: {e}"
                )))
            }
        }
    }

    /// The staging directory.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Drop what it holds (the command did not run, or held nothing).
    pub(crate) fn discard(self) {
        if let Err(e) = staged::remove(&self.dir) {
            tracing::warn!("cannot remove staging directory {:?}: {e}", self.dir);
        }
    }

    /// Read what the command changed beneath `roots` (the sandbox's, in order: 0 is
    /// `private`, 1 `shared`). Nothing held: the directory is removed and the manifest
    /// is empty.
    pub(crate) fn collect(self, roots: &[PathBuf]) -> Result<Collected, ToolError> {
        match self.read(roots) {
            Ok(c) if c.manifest.changes.is_empty() => {
                self.discard();
                Ok(c)
            }
            Ok(c) => Ok(c),
            Err(e) => {
                self.discard();
                Err(e)
            }
        }
    }

    fn read(&self, roots: &[PathBuf]) -> Result<Collected, ToolError> {
        let mut manifest = Manifest {
            id: self.id.clone(),
            changes: Vec::new(),
        };
        let mut text = String::new();
        for (i, root) in roots.iter().enumerate() {
            let up = staged::upper(&self.dir, i);
            let found = upper::read(&up, root)
                .map_err(|e| ToolError::internal(format!("cannot read the staged changes: {e}")))?;
            for f in found {
                let (lower, upper) = (root.join(&f.rel), up.join(&f.rel));
                let before = staged::fingerprint(&lower).map_err(|e| {
                    ToolError::internal(format!("cannot read {}: {e}", lower.display()))
                })?;
                let path = display(i, &f.rel);
                text.push_str(&diff::of(&path, f.kind, &lower, &upper));
                manifest.changes.push(Held {
                    root: i,
                    rel: f.rel.as_os_str().as_bytes().to_vec(),
                    path,
                    kind: f.kind,
                    before,
                });
            }
        }
        Ok(Collected {
            manifest,
            diff: text,
        })
    }
}

/// A path beneath root `root` as the tools show it.
fn display(root: usize, rel: &Path) -> String {
    let rel = rel.to_string_lossy();
    match root {
        0 => rel.into_owned(),
        _ => format!("shared:/{rel}"),
    }
}

/// 128 random bits, hex (the name of a staging directory).
fn new_id() -> String {
    let mut bytes = [0u8; 16];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes));
    if read.is_err() {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        bytes = (nanos ^ u128::from(std::process::id())).to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_os::staged::{ChangeKind, Fingerprint};

    #[test]
    fn collect_records_each_change_with_what_the_workspace_had() {
        let state = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        std::fs::write(root.path().join("old"), "a\n").unwrap();
        let s = Staging::create(state.path(), 1).unwrap();
        let dir = s.dir().to_path_buf();
        std::fs::write(staged::upper(&dir, 0).join("old"), "b\n").unwrap();
        std::fs::write(staged::upper(&dir, 0).join("new"), "x\n").unwrap();
        let c = s.collect(&[root.path().to_path_buf()]).unwrap();
        let kinds: Vec<_> = c
            .manifest
            .changes
            .iter()
            .map(|h| (h.path.as_str(), h.kind))
            .collect();
        assert_eq!(
            kinds,
            vec![("new", ChangeKind::Created), ("old", ChangeKind::Modified)]
        );
        assert_eq!(c.manifest.changes[0].before, Fingerprint::Missing);
        assert!(matches!(
            c.manifest.changes[1].before,
            Fingerprint::File { .. }
        ));
        assert!(
            c.diff.contains("+x\n") && c.diff.contains("-a\n+b\n"),
            "{}",
            c.diff
        );
        assert!(staged::valid_id(&c.manifest.id));
        assert!(dir.exists(), "held changes stay until applied or expired");
    }

    #[test]
    fn nothing_held_removes_the_staging_directory() {
        let state = tempfile::tempdir().unwrap();
        let root = tempfile::tempdir().unwrap();
        let s = Staging::create(state.path(), 2).unwrap();
        let dir = s.dir().to_path_buf();
        let c = s
            .collect(&[root.path().to_path_buf(), root.path().to_path_buf()])
            .unwrap();
        assert!(c.manifest.changes.is_empty());
        assert!(!dir.exists());
        assert_eq!(display(1, Path::new("a/b")), "shared:/a/b");
    }
}
