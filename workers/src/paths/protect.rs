//! What no tool may show, read or write: toolvisor's state directory and its
//! configuration (checked by lexical path before an open and by real path after), and
//! the names the edit tools refuse (`.git`, the built-in protected names and
//! `workers.exec.protected`).

use std::os::fd::OwnedFd;
use std::path::Path;

use toolvisor_protocol::ErrorType;

use super::{Resolved, Resolver, real_path};
use crate::ToolError;

impl Resolver {
    /// Whether the edit tools must refuse `r`: under `.git`, or a protected name (or
    /// under one), existing or not.
    pub fn edit_refused(&self, r: &Resolved) -> bool {
        toolvisor_sandbox::protect::refused_for_edits(&r.rel, &self.edit_refused)
    }

    /// [`Resolver::edit_refused`] for a real host path (a parent reached through a
    /// symlink): relative to the most specific root that contains it.
    pub fn edit_refused_host(&self, host: &Path) -> bool {
        self.map_host(host).is_some_and(|r| {
            toolvisor_sandbox::protect::refused_for_edits(&r.rel, &self.edit_refused)
        })
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
    pub(super) fn check_protected_fd(&self, fd: &OwnedFd, r: &Resolved) -> Result<(), ToolError> {
        match real_path(fd) {
            Some(real) if self.is_protected(&real) => Err(protected_error(r)),
            _ => Ok(()),
        }
    }
}

pub(super) fn protected_error(r: &Resolved) -> ToolError {
    ToolError::new(
        ErrorType::PermissionError,
        format!(
            "`{}` is protected (toolvisor's own state or configuration)",
            r.display
        ),
    )
}
