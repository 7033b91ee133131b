//! `write_file` and `preview_write_file`: replace a whole file, never by accident.

use serde::Deserialize;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::Outcome;

use super::atomic::Replace;
use super::preview::{preview_outcome, unified_diff, written_outcome};
use super::target::{Existing, Target};
use crate::ToolError;
use crate::paths::Resolver;

/// `write_file`'s arguments (the preview takes the same).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WriteArgs {
    /// The file to write.
    pub path: String,
    /// Its whole new content.
    pub content: String,
    /// Replace an existing file; without it an existing file is `FileExistsError`.
    #[serde(default)]
    pub overwrite: bool,
}

/// Write the file atomically, creating parent directories; keeps an existing file's mode.
pub fn write_file(args: &WriteArgs, resolver: &Resolver) -> Result<Outcome, ToolError> {
    let mut target = Target::locate(resolver, &args.path)?;
    let existing = existing_unless_refused(&target, args.overwrite)?;
    // No file now: the rename must not replace one that appears in the meantime.
    let replace = match existing {
        Some(_) => Replace::Allowed,
        None => Replace::Never,
    };
    let mode = existing.as_ref().map(|e| e.mode);
    target.write(args.content.as_bytes(), mode, replace)?;
    let before = existing.as_ref().map(|e| e.bytes.as_slice());
    let diff = unified_diff(&target.display, before, &args.content);
    let created = if existing.is_none() {
        " (new file)"
    } else {
        ""
    };
    let summary = format!(
        "Wrote {} bytes to {}{created}",
        args.content.len(),
        target.display
    );
    Ok(written_outcome(summary, &target.display, diff))
}

/// The diff `write_file` would make, checking `FileExistsError` the same way.
pub fn preview_write_file(args: &WriteArgs, resolver: &Resolver) -> Result<Outcome, ToolError> {
    let target = Target::locate(resolver, &args.path)?;
    let existing = existing_unless_refused(&target, args.overwrite)?;
    let before = existing.as_ref().map(|e| e.bytes.as_slice());
    Ok(preview_outcome(
        &target.display,
        before,
        args.content.clone(),
    ))
}

/// The current file, or `FileExistsError` when there is one and `overwrite` is off.
fn existing_unless_refused(
    target: &Target<'_>,
    overwrite: bool,
) -> Result<Option<Existing>, ToolError> {
    let existing = target.read()?;
    if existing.is_some() && !overwrite {
        return Err(ToolError::new(
            ErrorType::FileExistsError,
            format!(
                "{} already exists; pass overwrite: true to replace it, or use edit_file to change part of it",
                target.display
            ),
        ));
    }
    Ok(existing)
}
