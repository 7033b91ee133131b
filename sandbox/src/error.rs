//! Why a command's sandbox could not be built. The shim says it in its report
//! (`setup_error`), where the worker turns it into the call's error, and the start-up
//! probe says it to `serve`, which then runs commands without namespaces (or refuses
//! to start when they are required). Each error names the step that failed and, for
//! an operating-system error, where.

use std::io;
use std::path::{Path, PathBuf};

use crate::reap::ShimArgsError;

/// A failed step of building or entering a command's sandbox.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    /// A step on a path failed: what was being done, where, and the system's answer.
    #[error("{what} {}: {source}", path.display())]
    Path {
        /// What was being done.
        what: String,
        /// Where.
        path: PathBuf,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// A step that names no path failed.
    #[error("{what}: {source}")]
    Step {
        /// What was being done.
        what: String,
        /// The system's answer.
        #[source]
        source: io::Error,
    },
    /// An I/O error that needs no more words (waiting for the probe's shim).
    #[error(transparent)]
    Io(#[from] io::Error),
    /// The shim's command line could not be written.
    #[error(transparent)]
    Args(#[from] ShimArgsError),
    /// Not an operating-system error: the sandbox cannot be built as asked (the working
    /// directory moved, a test hook refused it), or the shim said why it could not.
    #[error("{0}")]
    Refused(String),
}

impl SandboxError {
    /// `what` failed on `path`.
    pub(crate) fn at(what: impl Into<String>, path: &Path, source: impl Into<io::Error>) -> Self {
        SandboxError::Path {
            what: what.into(),
            path: path.to_path_buf(),
            source: source.into(),
        }
    }

    /// `what` failed.
    pub(crate) fn step(what: impl Into<String>, source: impl Into<io::Error>) -> Self {
        SandboxError::Step {
            what: what.into(),
            source: source.into(),
        }
    }
}
