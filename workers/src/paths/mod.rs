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
//! Known limitation (kernel semantics): `RESOLVE_BENEATH` refuses *absolute* symlinks even
//! when they point inside the root; such paths get `PathOutsideWorkspace`.

use std::ffi::OsString;
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::Roots;

use crate::ToolError;

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

/// A file of the artifacts directory named explicitly (see [`Resolver::artifact`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArtifactPath {
    /// Its name inside the artifacts directory (one component).
    pub name: OsString,
    /// How tools print it: the path as given, normalised.
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
    /// [`crate::sandbox::protect`]).
    edit_refused: Vec<PathBuf>,
    /// One open directory fd per root, opened once: every open starts from it.
    fds: Vec<OwnedFd>,
    /// Whether the kernel lets us use `openat2` (probed once in `new`).
    openat2: bool,
}

/// The scopes a path may name with a `scope:` prefix.
const SCOPES: [&str; 3] = ["private", "shared", "public"];

/// The prefix naming a file of `<state_dir>/artifacts` wherever the state directory is
/// (`artifacts:/<name>`): what `truncated.full_output` says when the state directory is
/// outside the workspace, where a host path would be refused as outside every root
/// (by the supervisor's policy gate before any worker sees it).
pub const ARTIFACTS_SCOPE: &str = "artifacts:";

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
            edit_refused: crate::sandbox::protect::names(&[]),
            fds,
            openat2,
        })
    }

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

    /// Add `workers.exec.protected` to what the edit tools refuse.
    pub fn with_edit_protection(mut self, extra: &[PathBuf]) -> Self {
        self.edit_refused = crate::sandbox::protect::names(extra);
        self
    }

    /// Whether the edit tools must refuse `r`: under `.git`, or a protected name (or
    /// under one), existing or not.
    pub fn edit_refused(&self, r: &Resolved) -> bool {
        crate::sandbox::protect::refused_for_edits(&r.rel, &self.edit_refused)
    }

    /// [`Resolver::edit_refused`] for a real host path (a parent reached through a
    /// symlink): relative to the most specific root that contains it.
    pub fn edit_refused_host(&self, host: &Path) -> bool {
        self.map_host(host)
            .is_some_and(|r| crate::sandbox::protect::refused_for_edits(&r.rel, &self.edit_refused))
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

    /// Lexically resolve `path` (scope prefix, relative or absolute inside a root).
    ///
    /// Empty paths and paths with NUL bytes are `InvalidParams`; an unconfigured scope is
    /// `InvalidParams` naming it; `..` above the root or an absolute path outside every
    /// root is `PathOutsideWorkspace`.
    pub fn resolve(&self, path: &str) -> Result<Resolved, ToolError> {
        if path.is_empty() {
            return Err(ToolError::invalid("the path is empty"));
        }
        if path.contains('\0') {
            return Err(ToolError::invalid("the path contains a NUL byte"));
        }
        if let Some((scope, rest)) = split_scope(path) {
            let root = self.scope_index(scope)?;
            let rel = normalise(Path::new(rest.trim_start_matches('/')), path)?;
            return Ok(self.make(root, rel));
        }
        let p = Path::new(path);
        if p.is_absolute() {
            return self.resolve_absolute(p, path);
        }
        let rel = normalise(p, path)?;
        Ok(self.make(0, rel))
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

    /// Open a regular file for reading beneath its root.
    ///
    /// Protected paths are `PermissionError`; a directory is `InvalidParams`; other
    /// non-regular files (FIFOs, devices, sockets) are `InvalidParams` too, and are
    /// opened non-blocking so a FIFO cannot hang the worker.
    pub fn open_read(&self, r: &Resolved) -> Result<File, ToolError> {
        self.check_protected(r)?;
        let fd = self
            .open_beneath(r, read_flags())
            .map_err(|e| map_errno(e, r))?;
        self.check_protected_fd(&fd, r)?;
        regular_file(fd, &r.display)
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

    /// The real path of `fd` relative to root `root` (None when it cannot be read or
    /// lies outside that root): what a search tool checks for `.git` after an open.
    pub fn real_rel(&self, root: usize, fd: &impl AsRawFd) -> Option<PathBuf> {
        let real = real_path(fd)?;
        real.strip_prefix(self.root_path(root))
            .ok()
            .map(Path::to_path_buf)
    }

    /// Open a directory beneath its root (O_DIRECTORY|O_PATH is not enough for openat: use O_RDONLY).
    ///
    /// A path that exists but is not a directory is `InvalidParams`.
    pub fn open_dir(&self, r: &Resolved) -> Result<OwnedFd, ToolError> {
        self.check_protected(r)?;
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let fd = self.open_beneath(r, flags).map_err(|e| match e {
            Errno::NOTDIR => ToolError::invalid(format!("`{}` is not a directory", r.display)),
            e => map_errno(e, r),
        })?;
        self.check_protected_fd(&fd, r)?;
        Ok(fd)
    }

    /// Open the directory `r`, creating it and any missing parents beneath the root
    /// (mode 0777 & umask), for `write_file`'s parent directories.
    pub fn open_dir_create(&self, r: &Resolved) -> Result<OwnedFd, ToolError> {
        self.check_protected(r)?;
        let mut cur = rustix::io::dup(self.root_fd(r.root)).map_err(|e| map_errno(e, r))?;
        for comp in r.rel.components() {
            let Component::Normal(name) = comp else {
                return Err(ToolError::internal("unnormalised path in open_dir_create"));
            };
            cur = open_or_mkdir(&cur, name, self.openat2).map_err(|e| match e {
                Errno::NOTDIR | Errno::EXIST => {
                    ToolError::invalid(format!("`{}`: a parent is not a directory", r.display))
                }
                e => map_errno(e, r),
            })?;
        }
        self.check_protected_fd(&cur, r)?;
        Ok(cur)
    }

    /// The parent directory of `r` (created when `create`) and `r`'s final name, for
    /// tools that create or replace a file with `*at` calls (temp file + `renameat`).
    ///
    /// The root itself has no parent: `InvalidParams`. The real path of the parent is
    /// checked, so a symlinked directory cannot reach a protected file either.
    pub fn open_parent(
        &self,
        r: &Resolved,
        create: bool,
    ) -> Result<(OwnedFd, OsString), ToolError> {
        self.check_protected(r)?;
        let (Some(parent), Some(name)) = (r.rel.parent(), r.rel.file_name()) else {
            return Err(ToolError::invalid(format!(
                "`{}` is a root directory, not a file",
                r.display
            )));
        };
        let pr = self.make(r.root, parent.to_path_buf());
        let fd = if create {
            self.open_dir_create(&pr)?
        } else {
            self.open_dir(&pr)?
        };
        if let Some(real) = real_path(&fd)
            && self.is_protected(&real.join(name))
        {
            return Err(protected_error(r));
        }
        Ok((fd, name.to_os_string()))
    }

    /// Whether a host path is (inside) a protected path.
    pub fn is_protected(&self, host: &Path) -> bool {
        self.protected.iter().any(|p| host.starts_with(p))
    }

    /// `PermissionError` when `r`'s lexical host path is protected.
    pub fn check_protected(&self, r: &Resolved) -> Result<(), ToolError> {
        if self.is_protected(&r.host) {
            Err(protected_error(r))
        } else {
            Ok(())
        }
    }

    /// After an open: `PermissionError` when the fd's real path is protected (a symlink
    /// inside the workspace may point into the state directory). Best effort: without
    /// `/proc` the lexical check alone applies.
    fn check_protected_fd(&self, fd: &OwnedFd, r: &Resolved) -> Result<(), ToolError> {
        match real_path(fd) {
            Some(real) if self.is_protected(&real) => Err(protected_error(r)),
            _ => Ok(()),
        }
    }

    /// Open `r.rel` from its root's fd, confined.
    fn open_beneath(&self, r: &Resolved, flags: OFlags) -> Result<OwnedFd, Errno> {
        open_confined(self.root_fd(r.root), &r.rel, flags, self.openat2)
    }

    /// Index of `scope` among the configured roots, or `InvalidParams`.
    fn scope_index(&self, scope: &str) -> Result<usize, ToolError> {
        self.roots
            .iter()
            .position(|(name, _)| name == scope)
            .ok_or_else(|| ToolError::invalid(format!("the `{scope}` scope is not configured")))
    }

    /// Map an absolute host path to the most specific root containing it.
    fn resolve_absolute(&self, p: &Path, original: &str) -> Result<Resolved, ToolError> {
        let lexical = normalise_absolute(p);
        if let Some(r) = self.map_host(&lexical) {
            return Ok(r);
        }
        // The caller may name the workspace through a symlinked prefix (e.g. /tmp ->
        // /private/tmp): canonicalise the longest existing ancestor. Only the mapping uses
        // this; the open itself is still confined, so no race matters here.
        if let Some(canon) = canonical_prefix(&lexical)
            && let Some(r) = self.map_host(&canon)
        {
            return Ok(r);
        }
        Err(outside(original))
    }

    /// The [`Resolved`] for a normalised absolute host path inside some root.
    fn map_host(&self, host: &Path) -> Option<Resolved> {
        let (idx, root) = self
            .roots
            .iter()
            .enumerate()
            .filter(|(_, (_, root))| host.starts_with(root))
            .max_by_key(|(_, (_, root))| root.components().count())?;
        let rel = host.strip_prefix(&root.1).ok()?.to_path_buf();
        Some(self.make(idx, rel))
    }
}

/// `scope:rest` when `path` starts with a known scope name and a colon.
fn split_scope(path: &str) -> Option<(&str, &str)> {
    let (scope, rest) = path.split_once(':')?;
    SCOPES.contains(&scope).then_some((scope, rest))
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

/// Fold `.` and `..` of a relative path; `..` above the start is `PathOutsideWorkspace`.
fn normalise(p: &Path, original: &str) -> Result<PathBuf, ToolError> {
    let mut out = PathBuf::new();
    for comp in p.components() {
        match comp {
            Component::CurDir => {}
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                if !out.pop() {
                    return Err(outside(original));
                }
            }
            Component::RootDir | Component::Prefix(_) => return Err(outside(original)),
        }
    }
    Ok(out)
}

/// Fold `.` and `..` of an absolute path (`..` at `/` stays at `/`, like the kernel).
fn normalise_absolute(p: &Path) -> PathBuf {
    let mut out = PathBuf::from("/");
    for comp in p.components() {
        match comp {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// Canonicalise the longest existing ancestor of `p` and append the rest.
fn canonical_prefix(p: &Path) -> Option<PathBuf> {
    let mut existing = p;
    let mut rest = Vec::new();
    loop {
        if let Ok(c) = existing.canonicalize() {
            let mut out = c;
            out.extend(rest.iter().rev());
            return Some(out);
        }
        rest.push(existing.file_name()?);
        existing = existing.parent()?;
    }
}

/// How a resolved path is printed to the model.
fn display_of(scope: &str, root: usize, rel: &Path) -> String {
    let rel = rel.to_string_lossy();
    match (root, rel.is_empty()) {
        (0, true) => ".".to_owned(),
        (0, false) => rel.into_owned(),
        (_, _) => format!("{scope}:/{rel}"),
    }
}

/// Probe `openat2` on the root: `ENOSYS` (old kernel) or `EPERM` (a seccomp filter
/// that refuses unknown syscalls) means it cannot be used.
fn probe_openat2(root: &OwnedFd) -> bool {
    let flags = OFlags::PATH | OFlags::CLOEXEC;
    rustix::fs::openat2(root, ".", flags, Mode::empty(), resolve_flags()).is_ok()
}

/// Whether this process can use `openat2` (probed once on the current directory), for
/// `status.guards`; [`Resolver::has_openat2`] answers for one resolver.
pub fn openat2_available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let flags = OFlags::PATH | OFlags::CLOEXEC;
        rustix::fs::openat2(rustix::fs::CWD, ".", flags, Mode::empty(), resolve_flags()).is_ok()
    })
}

fn resolve_flags() -> ResolveFlags {
    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

/// Open `rel` beneath `dir`: with `openat2` when available, else one component at a time.
pub(crate) fn open_confined(
    dir: BorrowedFd<'_>,
    rel: &Path,
    flags: OFlags,
    use_openat2: bool,
) -> Result<OwnedFd, Errno> {
    let target: &Path = if rel.as_os_str().is_empty() {
        Path::new(".")
    } else {
        rel
    };
    if use_openat2 {
        return rustix::fs::openat2(dir, target, flags, Mode::empty(), resolve_flags());
    }
    open_walk(dir, rel, flags)
}

/// The fallback: open each directory with `O_NOFOLLOW`, so no symlink is ever followed
/// (a symlink anywhere on the path gives `ELOOP`, mapped to `PathOutsideWorkspace`).
fn open_walk(dir: BorrowedFd<'_>, rel: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    let names: Vec<_> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n),
            _ => None,
        })
        .collect();
    let Some((last, parents)) = names.split_last() else {
        return rustix::fs::openat(dir, ".", flags, Mode::empty());
    };
    let dir_flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let mut cur: Option<OwnedFd> = None;
    for name in parents {
        let from = cur.as_ref().map_or(dir, |f| f.as_fd());
        let next = rustix::fs::openat(from, *name, dir_flags, Mode::empty())
            .map_err(|e| symlink_errno(e, from, name))?;
        cur = Some(next);
    }
    let from = cur.as_ref().map_or(dir, |f| f.as_fd());
    rustix::fs::openat(from, *last, flags | OFlags::NOFOLLOW, Mode::empty())
        .map_err(|e| symlink_errno(e, from, last))
}

/// `O_DIRECTORY|O_NOFOLLOW` on a symlink gives `ENOTDIR`: report it as `ELOOP`, the
/// errno that means "a symlink was refused" (only the message depends on this).
fn symlink_errno(e: Errno, dir: BorrowedFd<'_>, name: &std::ffi::OsStr) -> Errno {
    let is_link = || {
        rustix::fs::statat(dir, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok_and(|st| {
            rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::Symlink
        })
    };
    if e == Errno::NOTDIR && is_link() {
        Errno::LOOP
    } else {
        e
    }
}

/// Open directory `name` inside `dir`, creating it when missing.
fn open_or_mkdir(
    dir: &OwnedFd,
    name: &std::ffi::OsStr,
    use_openat2: bool,
) -> Result<OwnedFd, Errno> {
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    match open_confined(dir.as_fd(), Path::new(name), flags, use_openat2) {
        Err(Errno::NOENT) => {
            match rustix::fs::mkdirat(dir, name, Mode::from_raw_mode(0o777)) {
                Ok(()) | Err(Errno::EXIST) => {}
                Err(e) => return Err(e),
            }
            open_confined(dir.as_fd(), Path::new(name), flags, use_openat2)
        }
        r => r,
    }
}

/// The real path of an open fd, from `/proc/self/fd` (None without `/proc`).
pub fn real_path(fd: &impl AsRawFd) -> Option<PathBuf> {
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let target = std::fs::read_link(link).ok()?;
    // Deleted files read as "/x (deleted)"; anything not absolute is an anonymous object.
    (target.is_absolute() && !target.as_os_str().as_bytes().ends_with(b" (deleted)"))
        .then_some(target)
}

/// Flags of every open for reading: non-blocking, so a FIFO cannot hang the worker
/// (`O_NONBLOCK` has no effect on regular files).
fn read_flags() -> OFlags {
    OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK | OFlags::NOCTTY
}

/// `fd` as a `File` when it is a regular file; a directory or another kind of file
/// (FIFO, device, socket) is `InvalidParams`.
fn regular_file(fd: OwnedFd, display: &str) -> Result<File, ToolError> {
    let st = rustix::fs::fstat(&fd).map_err(|e| errno_error(e, display))?;
    match rustix::fs::FileType::from_raw_mode(st.st_mode) {
        rustix::fs::FileType::RegularFile => Ok(File::from(fd)),
        rustix::fs::FileType::Directory => Err(ToolError::invalid(format!(
            "`{display}` is a directory, not a file"
        ))),
        _ => Err(ToolError::invalid(format!(
            "`{display}` is not a regular file"
        ))),
    }
}

/// The contract error for an errno from a confined open of `r`.
pub fn map_errno(e: Errno, r: &Resolved) -> ToolError {
    errno_error(e, &r.display)
}

/// The contract error for an errno about the path shown as `p`.
pub fn errno_error(e: Errno, p: &str) -> ToolError {
    match e {
        Errno::XDEV | Errno::LOOP => ToolError::new(
            ErrorType::PathOutsideWorkspace,
            format!("`{p}` resolves outside the workspace (through a symlink or `..`)"),
        ),
        Errno::NOENT => ToolError::new(
            ErrorType::FileNotFoundError,
            format!("`{p}` does not exist"),
        ),
        Errno::NOTDIR => ToolError::new(
            ErrorType::FileNotFoundError,
            format!("`{p}` does not exist (a parent is not a directory)"),
        ),
        Errno::ACCESS | Errno::PERM | Errno::ROFS => ToolError::new(
            ErrorType::PermissionError,
            format!("`{p}`: permission denied"),
        ),
        Errno::NAMETOOLONG => ToolError::invalid(format!("`{p}`: the path is too long")),
        Errno::ISDIR => ToolError::invalid(format!("`{p}` is a directory")),
        e => ToolError::internal(format!("`{p}`: {e}")),
    }
}

fn protected_error(r: &Resolved) -> ToolError {
    ToolError::new(
        ErrorType::PermissionError,
        format!(
            "`{}` is protected (toolvisor's own state or configuration)",
            r.display
        ),
    )
}

fn artifact_error(display: &str) -> ToolError {
    ToolError::new(
        ErrorType::PermissionError,
        format!("`{display}` is protected: only the artifact files themselves can be read"),
    )
}

fn outside(path: &str) -> ToolError {
    ToolError::new(
        ErrorType::PathOutsideWorkspace,
        format!("`{path}` is outside the workspace"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// A workspace with `ws/` (the root) and a sibling `outside/` holding a secret.
    struct Fixture {
        _tmp: tempfile::TempDir,
        ws: PathBuf,
        outside: PathBuf,
    }

    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let ws = base.join("ws");
        let outside = base.join("outside");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(ws.join("src/a.rs"), "inside").unwrap();
        std::fs::write(outside.join("secret"), "SECRET").unwrap();
        Fixture {
            _tmp: tmp,
            ws,
            outside,
        }
    }

    fn resolver(f: &Fixture, protected: &[PathBuf]) -> Resolver {
        let roots = Roots {
            private: f.ws.clone(),
            shared: Some(f.outside.clone()),
            public: None,
        };
        Resolver::new(&roots, protected).unwrap()
    }

    fn read(r: &Resolver, path: &str) -> Result<String, ToolError> {
        let res = r.resolve(path)?;
        let mut s = String::new();
        r.open_read(&res)?.read_to_string(&mut s).unwrap();
        Ok(s)
    }

    fn kind<T: std::fmt::Debug>(r: Result<T, ToolError>) -> ErrorType {
        r.unwrap_err().kind
    }

    #[test]
    fn resolves_relative_scoped_and_absolute_forms() {
        let f = fixture();
        let r = resolver(&f, &[]);
        let a = r.resolve("src/./x/../a.rs").unwrap();
        assert_eq!((a.root, a.rel.as_path()), (0, Path::new("src/a.rs")));
        assert_eq!(a.display, "src/a.rs");
        assert_eq!(a.host, f.ws.join("src/a.rs"));
        assert_eq!(r.resolve(".").unwrap().display, ".");
        assert_eq!(r.resolve("private:/src").unwrap().rel, Path::new("src"));
        let s = r.resolve("shared:/secret").unwrap();
        assert_eq!((s.root, s.display.as_str()), (1, "shared:/secret"));
        let abs = r.resolve(f.ws.join("src/a.rs").to_str().unwrap()).unwrap();
        assert_eq!((abs.root, abs.rel.as_path()), (0, Path::new("src/a.rs")));
    }

    #[test]
    fn refuses_bad_forms() {
        let f = fixture();
        let r = resolver(&f, &[]);
        assert_eq!(kind(r.resolve("")), ErrorType::InvalidParams);
        assert_eq!(kind(r.resolve("a\0b")), ErrorType::InvalidParams);
        let e = r.resolve("public:/x").unwrap_err();
        assert_eq!(e.kind, ErrorType::InvalidParams);
        assert!(e.message.contains("public"), "{}", e.message);
        assert_eq!(
            kind(r.resolve("../outside/secret")),
            ErrorType::PathOutsideWorkspace
        );
        assert_eq!(
            kind(r.resolve("src/../../x")),
            ErrorType::PathOutsideWorkspace
        );
        assert_eq!(
            kind(r.resolve("shared:/../ws")),
            ErrorType::PathOutsideWorkspace
        );
        assert_eq!(
            kind(r.resolve("/etc/passwd")),
            ErrorType::PathOutsideWorkspace
        );
    }

    #[test]
    fn opens_and_maps_errors() {
        let f = fixture();
        let r = resolver(&f, &[]);
        assert_eq!(read(&r, "src/a.rs").unwrap(), "inside");
        assert_eq!(read(&r, "shared:/secret").unwrap(), "SECRET");
        assert_eq!(kind(read(&r, "nope.txt")), ErrorType::FileNotFoundError);
        assert_eq!(kind(read(&r, "src/a.rs/x")), ErrorType::FileNotFoundError);
        assert_eq!(kind(read(&r, "src")), ErrorType::InvalidParams);
        assert_eq!(
            kind(r.open_dir(&r.resolve("src/a.rs").unwrap())),
            ErrorType::InvalidParams
        );
        assert!(r.open_dir(&r.resolve(".").unwrap()).is_ok());
    }

    fn symlink_cases(r: &Resolver, f: &Fixture) {
        std::os::unix::fs::symlink(&f.outside, f.ws.join("out")).unwrap();
        std::os::unix::fs::symlink("../outside/secret", f.ws.join("rel")).unwrap();
        assert_eq!(kind(read(r, "out/secret")), ErrorType::PathOutsideWorkspace);
        assert_eq!(kind(read(r, "rel")), ErrorType::PathOutsideWorkspace);
        assert_eq!(
            kind(r.open_dir(&r.resolve("out").unwrap())),
            ErrorType::PathOutsideWorkspace
        );
    }

    #[test]
    fn symlinks_out_of_the_root_are_refused() {
        let f = fixture();
        let r = resolver(&f, &[]);
        symlink_cases(&r, &f);
        // A relative symlink that stays inside works with openat2.
        std::os::unix::fs::symlink("src/a.rs", f.ws.join("ok")).unwrap();
        if r.has_openat2() {
            assert_eq!(read(&r, "ok").unwrap(), "inside");
        }
    }

    #[test]
    fn fallback_walk_refuses_symlinks() {
        let f = fixture();
        let mut r = resolver(&f, &[]);
        r.openat2 = false;
        assert_eq!(read(&r, "src/a.rs").unwrap(), "inside");
        assert_eq!(kind(read(&r, "src/none")), ErrorType::FileNotFoundError);
        symlink_cases(&r, &f);
    }

    #[test]
    fn protected_paths_are_refused_even_through_symlinks() {
        let f = fixture();
        let state = f.ws.join(".toolvisor");
        std::fs::create_dir(&state).unwrap();
        std::fs::write(state.join("audit.jsonl"), "x").unwrap();
        std::os::unix::fs::symlink(".toolvisor", f.ws.join("st")).unwrap();
        let r = resolver(&f, std::slice::from_ref(&state));
        assert_eq!(
            kind(read(&r, ".toolvisor/audit.jsonl")),
            ErrorType::PermissionError
        );
        assert_eq!(
            kind(r.open_dir(&r.resolve(".toolvisor").unwrap())),
            ErrorType::PermissionError
        );
        if r.has_openat2() {
            assert_eq!(kind(read(&r, "st/audit.jsonl")), ErrorType::PermissionError);
            let st = r.resolve("st/new.txt").unwrap();
            assert_eq!(kind(r.open_parent(&st, false)), ErrorType::PermissionError);
        }
    }

    fn read_artifact(r: &Resolver, path: &str) -> Result<String, ToolError> {
        let a = r
            .artifact(path)?
            .ok_or_else(|| ToolError::invalid("not an artifact"))?;
        let mut s = String::new();
        r.open_artifact(&a)?.read_to_string(&mut s).unwrap();
        Ok(s)
    }

    #[test]
    fn artifacts_are_named_only_as_direct_children() {
        let f = fixture();
        let state = f.ws.join(".toolvisor");
        std::fs::create_dir_all(state.join("artifacts")).unwrap();
        let r = resolver(&f, std::slice::from_ref(&state)).with_artifacts(&state);
        let named = |p: &str| r.artifact(p).unwrap();
        let a = named(".toolvisor/artifacts/c1.log").unwrap();
        assert_eq!(
            (a.name.to_str(), a.display.as_str()),
            (Some("c1.log"), ".toolvisor/artifacts/c1.log")
        );
        let abs = state.join("artifacts/c1.log");
        assert_eq!(named(abs.to_str().unwrap()).unwrap().name, "c1.log");
        assert!(named("./.toolvisor/x/../artifacts/c1.log").is_some());
        let a = named("artifacts:/./c1.log").unwrap();
        assert_eq!(
            (a.name.to_str(), a.display.as_str()),
            (Some("c1.log"), "artifacts:/c1.log")
        );
        for not in [
            ".toolvisor/artifacts",
            ".toolvisor/audit.jsonl",
            ".toolvisor/artifacts/../audit.jsonl",
            ".toolvisor/artifacts/sub/x.log",
            "src/a.rs",
            "/etc/passwd",
        ] {
            assert_eq!(named(not), None, "{not}");
        }
        for (bad, want) in [
            ("artifacts:/", ErrorType::PermissionError),
            ("artifacts:/a/b.log", ErrorType::PermissionError),
            ("artifacts:/../audit.jsonl", ErrorType::PathOutsideWorkspace),
        ] {
            assert_eq!(kind(r.artifact(bad)), want, "{bad}");
        }
        let plain = resolver(&f, &[]);
        assert_eq!(plain.artifact(".toolvisor/artifacts/c1.log").unwrap(), None);
    }

    #[test]
    fn artifacts_open_but_nothing_else_in_the_state_directory() {
        let f = fixture();
        let state = f.ws.join(".toolvisor");
        let arts = state.join("artifacts");
        std::fs::create_dir_all(&arts).unwrap();
        std::fs::write(arts.join("c1.log"), "full").unwrap();
        std::fs::write(state.join("audit.jsonl"), "AUDIT").unwrap();
        std::os::unix::fs::symlink("../audit.jsonl", arts.join("evil.log")).unwrap();
        std::fs::hard_link(state.join("audit.jsonl"), arts.join("hard.log")).unwrap();
        std::fs::create_dir(arts.join("d")).unwrap();
        let r = resolver(&f, std::slice::from_ref(&state)).with_artifacts(&state);
        assert_eq!(
            read_artifact(&r, ".toolvisor/artifacts/c1.log").unwrap(),
            "full"
        );
        assert_eq!(
            kind(read_artifact(&r, ".toolvisor/artifacts/evil.log")),
            ErrorType::PermissionError
        );
        // A hard link has the right place and name but another file's content.
        assert_eq!(
            kind(read_artifact(&r, ".toolvisor/artifacts/hard.log")),
            ErrorType::PermissionError
        );
        assert_eq!(
            kind(read_artifact(&r, ".toolvisor/artifacts/d")),
            ErrorType::InvalidParams
        );
        assert_eq!(
            kind(read_artifact(&r, ".toolvisor/artifacts/none.log")),
            ErrorType::FileNotFoundError
        );
        // `artifacts` swapped for a link to the state directory: the real path gives it away.
        std::fs::rename(&arts, state.join("old")).unwrap();
        std::os::unix::fs::symlink(".", &arts).unwrap();
        assert_eq!(
            kind(read_artifact(&r, ".toolvisor/artifacts/audit.jsonl")),
            ErrorType::PermissionError
        );
        // The ordinary path stays protected.
        assert_eq!(
            kind(read(&r, ".toolvisor/audit.jsonl")),
            ErrorType::PermissionError
        );
    }

    #[test]
    fn artifacts_outside_every_root_are_read_by_absolute_path() {
        let f = fixture();
        let state = f.ws.parent().unwrap().join("state");
        std::fs::create_dir_all(state.join("artifacts")).unwrap();
        std::fs::write(state.join("artifacts/c1.log"), "full").unwrap();
        std::fs::write(state.join("audit.jsonl"), "AUDIT").unwrap();
        let r = resolver(&f, std::slice::from_ref(&state)).with_artifacts(&state);
        let abs = state.join("artifacts/c1.log");
        assert_eq!(read_artifact(&r, abs.to_str().unwrap()).unwrap(), "full");
        assert_eq!(read_artifact(&r, "artifacts:/c1.log").unwrap(), "full");
        let audit = state.join("audit.jsonl");
        assert_eq!(r.artifact(audit.to_str().unwrap()).unwrap(), None);
        assert_eq!(
            kind(r.resolve(audit.to_str().unwrap())),
            ErrorType::PathOutsideWorkspace
        );
    }

    #[test]
    fn open_dir_create_makes_parents_beneath_the_root() {
        let f = fixture();
        let r = resolver(&f, &[]);
        let res = r.resolve("a/b/c/file.txt").unwrap();
        let (fd, name) = r.open_parent(&res, true).unwrap();
        assert_eq!(name, "file.txt");
        assert!(f.ws.join("a/b/c").is_dir());
        assert_eq!(real_path(&fd).unwrap(), f.ws.join("a/b/c"));
        assert_eq!(
            kind(r.open_parent(&r.resolve("src/a.rs/x/y").unwrap(), true)),
            ErrorType::InvalidParams
        );
        assert_eq!(
            kind(r.open_parent(&r.resolve(".").unwrap(), true)),
            ErrorType::InvalidParams
        );
        std::os::unix::fs::symlink(&f.outside, f.ws.join("out")).unwrap();
        let o = r.resolve("out/sub/f").unwrap();
        assert_eq!(
            kind(r.open_parent(&o, true)),
            ErrorType::PathOutsideWorkspace
        );
        assert!(!f.outside.join("sub").exists());
    }

    /// A thread flips `ws/d` between a real directory and a symlink to the outside
    /// while this thread opens `d/f`: every open reads the inside file or is refused.
    fn race(r: &Resolver, f: &Fixture, rounds: usize) {
        let d = f.ws.join("d");
        let real = f.ws.join("d_real");
        std::fs::create_dir(&real).unwrap();
        std::fs::write(real.join("f"), "inside").unwrap();
        std::fs::write(f.outside.join("f"), "SECRET").unwrap();
        let link = f.ws.join("d_link");
        std::os::unix::fs::symlink(&f.outside, &link).unwrap();
        std::fs::rename(&real, &d).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flipper = {
            let (stop, d, real, link) = (stop.clone(), d.clone(), real.clone(), link.clone());
            std::thread::spawn(move || {
                let mut flips = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    // Swap the real dir out and the symlink in, then back.
                    std::fs::rename(&d, &real).unwrap();
                    std::fs::rename(&link, &d).unwrap();
                    std::fs::rename(&d, &link).unwrap();
                    std::fs::rename(&real, &d).unwrap();
                    flips += 1;
                }
                flips
            })
        };
        let (mut inside, mut refused) = (0, 0);
        for _ in 0..rounds {
            match read(r, "d/f") {
                Ok(s) => {
                    assert_eq!(s, "inside", "read the outside secret");
                    inside += 1;
                }
                Err(e) if e.kind == ErrorType::PathOutsideWorkspace => refused += 1,
                Err(e) if e.kind == ErrorType::FileNotFoundError => {}
                Err(e) => panic!("unexpected error {e}"),
            }
        }
        stop.store(true, Ordering::Relaxed);
        let flips = flipper.join().unwrap();
        assert!(
            flips > 0 && inside + refused > 0,
            "{flips} {inside} {refused}"
        );
    }

    #[test]
    fn race_symlink_flip_never_leaks_the_outside() {
        let f = fixture();
        let r = resolver(&f, &[]);
        race(&r, &f, 5000);
    }

    #[test]
    fn race_symlink_flip_never_leaks_the_outside_fallback() {
        let f = fixture();
        let mut r = resolver(&f, &[]);
        r.openat2 = false;
        race(&r, &f, 5000);
    }
}
