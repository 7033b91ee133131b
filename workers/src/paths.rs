//! Path resolution confined to the workspace roots, without a check-then-use race.
//!
//! OWNER: search helper. API below is the contract the edit and exec tools use.

use std::fs::File;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

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

/// Resolves and opens paths beneath the configured roots.
#[derive(Debug)]
pub struct Resolver {
    pub roots: Vec<(String, PathBuf)>,
    pub protected: Vec<PathBuf>,
}

impl Resolver {
    pub fn new(roots: &Roots, protected: &[PathBuf]) -> std::io::Result<Self> {
        let mut all = vec![("private".to_owned(), roots.private.canonicalize()?)];
        if let Some(s) = &roots.shared {
            all.push(("shared".to_owned(), s.canonicalize()?));
        }
        if let Some(p) = &roots.public {
            all.push(("public".to_owned(), p.canonicalize()?));
        }
        Ok(Resolver {
            roots: all,
            protected: protected.to_vec(),
        })
    }

    /// Lexically resolve `path` (scope prefix, relative or absolute inside a root).
    pub fn resolve(&self, _path: &str) -> Result<Resolved, ToolError> {
        Err(ToolError::internal("paths::Resolver::resolve not implemented yet"))
    }

    /// Open a regular file for reading beneath its root.
    pub fn open_read(&self, _r: &Resolved) -> Result<File, ToolError> {
        Err(ToolError::internal("not implemented yet"))
    }

    /// Open a directory beneath its root (O_DIRECTORY|O_PATH is not enough for openat: use O_RDONLY).
    pub fn open_dir(&self, _r: &Resolved) -> Result<OwnedFd, ToolError> {
        Err(ToolError::internal("not implemented yet"))
    }

    /// Whether a host path is (inside) a protected path.
    pub fn is_protected(&self, host: &Path) -> bool {
        self.protected.iter().any(|p| host.starts_with(p))
    }
}
