//! Path resolution confined to the workspace roots, without a check-then-use race.
//!
//! OWNER: search helper. API below is the contract the edit and exec tools use.
//!
//! Two steps, on purpose kept apart:
//! 1. [`Resolver::resolve`] is purely lexical: it picks the root (scope prefix, relative
//!    path or absolute host path inside a root), folds `.` and `..`, and refuses a `..`
//!    that climbs above the root. It never touches the file system.
//! 2. The `open_*` functions open the relative path *from the root's directory fd* with
//!    `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`, so the kernel refuses any
//!    symlink or `..` that leaves the root at the moment of the open: there is no window
//!    between a check and the use. Where `openat2` is missing (old kernel, seccomp), the
//!    fallback walks one component at a time with `O_NOFOLLOW` and refuses every symlink.
//!
//! The parts: [`lexical`] names (scope prefixes, `.` and `..`, absolute host paths),
//! [`open`] the confined opens the tools use, [`beneath`] the `openat2` confinement and
//! [`fallback`] the component-by-component walk used without it, [`protect`] the
//! state directory and configuration no tool may touch, [`artifacts`] the one
//! exception to that (a command's full output), [`errors`] the contract errors.
//!
//! Known limitation (kernel semantics): `RESOLVE_BENEATH` refuses *absolute* symlinks even
//! when they point inside the root; such paths get `PathOutsideWorkspace`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags};
use toolvisor_protocol::worker::Roots;

mod artifacts;
mod beneath;
mod errors;
mod fallback;
mod lexical;
mod open;
mod protect;

pub use artifacts::{ARTIFACTS_SCOPE, ArtifactPath};
pub(crate) use beneath::open_confined;
pub use beneath::openat2_available;
pub use errors::{errno_error, map_errno};
pub use open::real_path;

use beneath::probe_openat2;
use lexical::display_of;

/// A path inside one of the roots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// Index into the resolver's roots (0 = private, the workspace).
    pub root: usize,
    /// Normalised path relative to that root ("" for the root itself); no `..`, no leading `/`.
    pub rel: PathBuf,
    /// The host path (`root.join(rel)`), for messages and protected-path checks only.
    pub host: PathBuf,
    /// How tools print it: workspace-relative for private, `shared:/x`, `public:/x` otherwise.
    pub display: String,
}

/// Resolves and opens paths beneath the configured roots.
#[derive(Debug)]
pub struct Resolver {
    /// `(scope name, canonical root path)`; index 0 is `private`, the workspace.
    pub roots: Vec<(String, PathBuf)>,
    /// Absolute paths no tool may show, read or write (state directory, config file).
    pub protected: Vec<PathBuf>,
    /// `<state_dir>/artifacts` (state directory canonicalised): the one protected place
    /// whose files `read_file` may read when named explicitly, so the agent can read a
    /// command's full output (docs/PROTOCOL.md). None until [`Resolver::with_artifacts`].
    artifacts: Option<PathBuf>,
    /// Root-relative names the edit tools refuse besides anything under `.git` (the
    /// built-in protected names, plus `workers.exec.protected`; see
    /// [`toolvisor_sandbox::protect`]).
    edit_refused: Vec<PathBuf>,
    /// One open directory fd per root, opened once: every open starts from it.
    fds: Vec<OwnedFd>,
    /// Whether the kernel lets us use `openat2` (probed once in `new`).
    openat2: bool,
}

impl Resolver {
    /// Canonicalise and open the roots; probe `openat2`.
    pub fn new(roots: &Roots, protected: &[PathBuf]) -> std::io::Result<Self> {
        let mut all = vec![("private".to_owned(), roots.private.canonicalize()?)];
        if let Some(s) = &roots.shared {
            all.push(("shared".to_owned(), s.canonicalize()?));
        }
        if let Some(p) = &roots.public {
            all.push(("public".to_owned(), p.canonicalize()?));
        }
        let mut fds = Vec::with_capacity(all.len());
        for (_, path) in &all {
            let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
            fds.push(rustix::fs::open(path, flags, Mode::empty())?);
        }
        let openat2 = probe_openat2(&fds[0]);
        Ok(Resolver {
            roots: all,
            protected: protected.to_vec(),
            artifacts: None,
            edit_refused: toolvisor_sandbox::protect::names(&[]),
            fds,
            openat2,
        })
    }

    /// Add `workers.exec.protected` to what the edit tools refuse.
    pub fn with_edit_protection(mut self, extra: &[PathBuf]) -> Self {
        self.edit_refused = toolvisor_sandbox::protect::names(extra);
        self
    }

    /// Whether confined opens use `openat2` (for `status.guards`); false means the
    /// component-by-component fallback is in use.
    pub fn has_openat2(&self) -> bool {
        self.openat2
    }

    /// The open directory fd of root `root` (index into [`Resolver::roots`]).
    ///
    /// # Panics
    /// If `root` is not an index of `roots` (a `Resolved` from this resolver always is).
    pub fn root_fd(&self, root: usize) -> BorrowedFd<'_> {
        self.fds[root].as_fd()
    }

    /// The canonical host path of root `root`.
    pub fn root_path(&self, root: usize) -> &Path {
        &self.roots[root].1
    }

    /// Build a [`Resolved`] for `rel` (already normalised) under root `root`.
    pub fn make(&self, root: usize, rel: PathBuf) -> Resolved {
        let host = if rel.as_os_str().is_empty() {
            self.roots[root].1.clone()
        } else {
            self.roots[root].1.join(&rel)
        };
        let display = display_of(&self.roots[root].0, root, &rel);
        Resolved {
            root,
            rel,
            host,
            display,
        }
    }
}

#[cfg(test)]
mod tests;
