//! `edit_file` and `preview_edit_file`: targeted replacements in a text file, all or
//! nothing (the edits are applied in memory; the file is written once, atomically).

use serde::Deserialize;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::Outcome;

use super::atomic::Replace;
use super::edits::{Edit, apply_edits};
use super::preview::{preview_outcome, unified_diff, written_outcome};
use super::target::{Existing, Target};
use crate::ToolError;
use crate::paths::Resolver;

/// `edit_file`'s arguments (the preview takes the same).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The file to change.
    pub path: String,
    /// The replacements, applied in order.
    pub edits: Vec<Edit>,
}

/// Apply the edits and write the result; on any error the file is untouched.
pub fn edit_file(args: &EditArgs, resolver: &Resolver) -> Result<Outcome, ToolError> {
    let mut target = Target::locate(resolver, &args.path)?;
    let (existing, new) = edited(&target, &args.edits)?;
    target.write(new.as_bytes(), Some(existing.mode), Replace::Allowed)?;
    let diff = unified_diff(&target.display, Some(&existing.bytes), &new);
    let n = args.edits.len();
    let noun = if n == 1 { "edit" } else { "edits" };
    let summary = format!("Applied {n} {noun} to {}", target.display);
    Ok(written_outcome(summary, &target.display, diff))
}

/// The diff `edit_file` would make, with the same errors.
pub fn preview_edit_file(args: &EditArgs, resolver: &Resolver) -> Result<Outcome, ToolError> {
    let target = Target::locate(resolver, &args.path)?;
    let (existing, new) = edited(&target, &args.edits)?;
    Ok(preview_outcome(&target.display, Some(&existing.bytes), new))
}

/// Read the file and apply every edit in memory.
fn edited(target: &Target<'_>, edits: &[Edit]) -> Result<(Existing, String), ToolError> {
    if edits.is_empty() {
        return Err(ToolError::invalid("edits must hold at least one edit"));
    }
    let existing = target.read()?.ok_or_else(|| {
        ToolError::new(
            ErrorType::FileNotFoundError,
            format!(
                "{} does not exist; use write_file to create it",
                target.display
            ),
        )
    })?;
    let text = as_text(&existing.bytes, &target.display)?;
    let new = apply_edits(text, edits, &target.display)?;
    Ok((existing, new))
}

/// The file as text; NUL bytes or invalid UTF-8 mean a binary file we must not mangle.
fn as_text<'a>(bytes: &'a [u8], display: &str) -> Result<&'a str, ToolError> {
    let binary = || {
        ToolError::new(
            ErrorType::BinaryFile,
            format!(
                "{display} is not a UTF-8 text file; edit_file only edits text (write_file replaces a file whole)"
            ),
        )
    };
    if bytes.contains(&0) {
        return Err(binary());
    }
    std::str::from_utf8(bytes).map_err(|_| binary())
}
