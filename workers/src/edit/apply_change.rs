//! `apply_change`: the internal tool behind `apply_file_change`. The supervisor keeps
//! the previewed change under its token and sends exactly that change here; this worker
//! writes it only if the file is still what the preview saw.

use serde::Deserialize;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::Outcome;

use super::atomic::Replace;
use super::preview::{sha256_hex, unified_diff, written_outcome};
use super::target::Target;
use crate::ToolError;
use crate::paths::Resolver;

/// The tool's name; never listed to clients (the supervisor sends it).
pub use toolvisor_protocol::tools::apply_file_change::WORKER_OP as NAME;

/// `{path, before_sha256, content}` as stored from a preview's `meta`.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApplyArgs {
    /// The preview's resolved display path.
    pub path: String,
    /// Lowercase hex SHA-256 of the file when previewed; `null`: it did not exist.
    pub before_sha256: Option<String>,
    /// The complete new content.
    pub content: String,
}

/// Write `content` if the file still matches `before_sha256`, else `StaleChange`.
///
/// The check and the rename are not one atomic step: a writer outside toolvisor that
/// changes the file in between (microseconds) is not detected. A file that appears in
/// between a "did not exist" check and the write is (`RENAME_NOREPLACE`).
pub fn apply_change(args: &ApplyArgs, resolver: &Resolver) -> Result<Outcome, ToolError> {
    let mut target = Target::locate(resolver, &args.path)?;
    let existing = target.read()?;
    let now = existing.as_ref().map(|e| sha256_hex(&e.bytes));
    let expected = args.before_sha256.as_deref().map(str::to_ascii_lowercase);
    if now != expected {
        return Err(stale(&target.display, expected.is_some(), now.is_some()));
    }
    let (mode, replace) = match &existing {
        Some(e) => (Some(e.mode), Replace::Allowed),
        None => (None, Replace::Never),
    };
    target
        .write(args.content.as_bytes(), mode, replace)
        .map_err(|e| match e.kind {
            ErrorType::FileExistsError => stale(&target.display, false, true),
            _ => e,
        })?;
    let before = existing.as_ref().map(|e| e.bytes.as_slice());
    let diff = unified_diff(&target.display, before, &args.content);
    let summary = format!(
        "Applied the previewed change to {} ({} bytes)",
        target.display,
        args.content.len()
    );
    Ok(written_outcome(summary, &target.display, diff))
}

fn stale(display: &str, existed: bool, exists: bool) -> ToolError {
    let what = match (existed, exists) {
        (false, true) => "was created",
        (true, false) => "was deleted",
        _ => "changed",
    };
    ToolError::new(
        ErrorType::StaleChange,
        format!("{display} {what} since the preview; preview the change again"),
    )
}
