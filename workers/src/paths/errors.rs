//! The contract errors of path resolution: each errno of a confined open, and each
//! refusal, mapped to the error type and message the tools report.

use rustix::io::Errno;
use toolvisor_protocol::ErrorType;

use super::Resolved;
use crate::ToolError;

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

pub(super) fn outside(path: &str) -> ToolError {
    ToolError::new(
        ErrorType::PathOutsideWorkspace,
        format!("`{path}` is outside the workspace"),
    )
}
