//! The one exception to the protected state directory: the files of
//! `<state_dir>/artifacts`, where a command's full output is kept, may be read by
//! `read_file` when named explicitly (`truncated.full_output` names them). Only a
//! direct child of that directory counts, and what is opened is checked by its real
//! path and its link count, so neither a symlink nor a hard link planted by a command
//! reaches the audit log.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Component, Path};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use toolvisor_protocol::ErrorType;

use super::lexical::{canonical_prefix, normalise, normalise_absolute};
use super::open::{read_flags, regular_file};
use super::{Resolver, errno_error, real_path};
use crate::ToolError;

/// A file of the artifacts directory named explicitly (see [`Resolver::artifact`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactPath {
    /// Its name inside the artifacts directory (one component).
    pub name: OsString,
    /// How tools print it: the path as given, normalised.
    pub display: String,
}

/// The prefix naming a file of `<state_dir>/artifacts` wherever the state directory is
/// (`artifacts:/<name>`): what `truncated.full_output` says when the state directory is
/// outside the workspace, where a host path would be refused as outside every root
/// (by the supervisor's policy gate before any worker sees it).
pub const ARTIFACTS_SCOPE: &str = "artifacts:";

impl Resolver {
    /// Let [`Resolver::artifact`] name the files of `<state_dir>/artifacts`. The state
    /// directory is canonicalised (it exists: the supervisor made it) so lexical paths
    /// and real paths compare; `artifacts` itself is not, so a symlink there is caught.
    pub fn with_artifacts(mut self, state_dir: &Path) -> Self {
        let state = state_dir
            .canonicalize()
            .unwrap_or_else(|_| state_dir.to_path_buf());
        self.artifacts = Some(state.join("artifacts"));
        self
    }

    /// The artifact file `path` names, if it names one: `<state_dir>/artifacts/<name>`
    /// written as `truncated.full_output` shows it (workspace-relative when the state
    /// directory is in the workspace, else `artifacts:/<name>`), as an absolute host
    /// path, or any lexically equivalent form. Only a direct child of the directory
    /// counts: the directory itself and anything else stay protected.
    ///
    /// `Ok(None)`: not an artifact (resolve it as usual). An `artifacts:` path that does
    /// not name one file is `PermissionError` (or `PathOutsideWorkspace` for a `..` above).
    pub fn artifact(&self, path: &str) -> Result<Option<ArtifactPath>, ToolError> {
        let Some(dir) = self.artifacts.as_deref() else {
            return Ok(None);
        };
        match path.strip_prefix(ARTIFACTS_SCOPE) {
            Some(rest) => scoped_artifact(rest, path).map(Some),
            None => Ok(self.host_artifact(dir, path)),
        }
    }

    /// An artifact named by a host path (relative to a root, or absolute anywhere).
    fn host_artifact(&self, dir: &Path, path: &str) -> Option<ArtifactPath> {
        let (host, display) = match self.resolve(path) {
            Ok(r) => (r.host, r.display),
            Err(_) if path.starts_with('/') && !path.contains('\0') => {
                let lexical = normalise_absolute(Path::new(path));
                let shown = lexical.to_string_lossy().into_owned();
                match lexical.parent() == Some(dir) {
                    true => (lexical, shown),
                    // A symlinked prefix (e.g. /tmp -> /private/tmp) may name it too.
                    false => (canonical_prefix(&lexical)?, shown),
                }
            }
            Err(_) => return None,
        };
        let name = host.file_name()?;
        (host.parent() == Some(dir)).then(|| ArtifactPath {
            name: name.to_os_string(),
            display,
        })
    }

    /// Open an artifact file for reading (the state directory is otherwise protected).
    ///
    /// The directory is opened by path and the name with `O_NOFOLLOW`; then the real
    /// path of what was opened must be a direct child of the artifacts directory, so a
    /// symlink anywhere on the way (a command may replace `artifacts` or plant links in
    /// it while the state directory sits in the workspace) cannot reach the audit log
    /// or any other protected file. Without `/proc` that cannot be checked: refused.
    pub fn open_artifact(&self, a: &ArtifactPath) -> Result<File, ToolError> {
        let refused = || artifact_error(&a.display);
        let dir = self.artifacts.as_deref().ok_or_else(refused)?;
        let dflags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let dfd =
            rustix::fs::open(dir, dflags, Mode::empty()).map_err(|e| errno_error(e, &a.display))?;
        let fd = rustix::fs::openat(
            &dfd,
            &a.name,
            read_flags() | OFlags::NOFOLLOW,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::LOOP => refused(),
            e => errno_error(e, &a.display),
        })?;
        let real = real_path(&fd).ok_or_else(refused)?;
        let inside = real.parent() == Some(dir);
        // A protected path inside the artifacts directory (a config file put there)
        // stays protected.
        let other = self
            .protected
            .iter()
            .any(|p| p.starts_with(dir) && real.starts_with(p));
        if !inside || other {
            return Err(refused());
        }
        // Artifacts are created fresh (one link). A second name means someone linked
        // another file in (`ln .toolvisor/audit.jsonl .toolvisor/artifacts/x.log` from a
        // command): its content is not an artifact's, whatever its name.
        let st = rustix::fs::fstat(&fd).map_err(|e| errno_error(e, &a.display))?;
        let regular = rustix::fs::FileType::from_raw_mode(st.st_mode).is_file();
        if regular && st.st_nlink != 1 {
            return Err(refused());
        }
        regular_file(fd, &a.display)
    }
}

/// `artifacts:/<name>`: exactly one file name once `.` and `..` are folded.
fn scoped_artifact(rest: &str, original: &str) -> Result<ArtifactPath, ToolError> {
    if original.contains('\0') {
        return Err(ToolError::invalid("the path contains a NUL byte"));
    }
    let rel = normalise(Path::new(rest.trim_start_matches('/')), original)?;
    let mut parts = rel.components();
    match (parts.next(), parts.next()) {
        (Some(Component::Normal(name)), None) => Ok(ArtifactPath {
            name: name.to_os_string(),
            display: format!("{ARTIFACTS_SCOPE}/{}", name.to_string_lossy()),
        }),
        _ => Err(ToolError::new(
            ErrorType::PermissionError,
            format!(
                "`{original}` is protected: only a file of the artifacts directory can be read"
            ),
        )),
    }
}

fn artifact_error(display: &str) -> ToolError {
    ToolError::new(
        ErrorType::PermissionError,
        format!("`{display}` is protected: only the artifact files themselves can be read"),
    )
}
