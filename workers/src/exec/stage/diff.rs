//! The unified diff of a staged command's changes, as `content` shows it after the
//! command's output: git's headers, a text diff per file, one line for a binary file,
//! a symlink as its target, and git's `old mode`/`new mode` lines.

use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use similar::TextDiff;
use toolvisor_os::staged::ChangeKind;

/// Lines of context around each change.
const CONTEXT: usize = 3;
/// A file larger than this is not read for its diff.
const READ_MAX: u64 = 1 << 20;

/// One side of a change.
#[derive(Debug, PartialEq)]
enum Side {
    Missing,
    Text(String),
    Binary,
    Link(String),
    Dir,
    Large(u64),
}

fn side(p: &Path) -> (Side, Option<u32>) {
    let Ok(meta) = std::fs::symlink_metadata(p) else {
        return (Side::Missing, None);
    };
    let mode = Some(meta.permissions().mode() & 0o7777);
    if meta.file_type().is_symlink() {
        let t = std::fs::read_link(p).unwrap_or_default();
        let t = String::from_utf8_lossy(t.as_os_str().as_bytes()).into_owned();
        return (Side::Link(t), None);
    }
    if meta.is_dir() {
        return (Side::Dir, mode);
    }
    if !meta.is_file() {
        return (Side::Binary, mode);
    }
    if meta.len() > READ_MAX {
        return (Side::Large(meta.len()), mode);
    }
    let mut bytes = Vec::new();
    let read = std::fs::File::open(p).and_then(|f| f.take(READ_MAX).read_to_end(&mut bytes));
    if read.is_err() || bytes.contains(&0) {
        return (Side::Binary, mode);
    }
    match String::from_utf8(bytes) {
        Ok(s) => (Side::Text(s), mode),
        Err(_) => (Side::Binary, mode),
    }
}

/// The diff of one change of `display` between `lower` (the workspace) and `upper`
/// (what the command left).
pub(crate) fn of(display: &str, kind: ChangeKind, lower: &Path, upper: &Path) -> String {
    let (old, old_mode) = match kind {
        ChangeKind::Created => (Side::Missing, None),
        _ => side(lower),
    };
    let (new, new_mode) = match kind {
        ChangeKind::Deleted => (Side::Missing, None),
        _ => side(upper),
    };
    let a = match old {
        Side::Missing => "/dev/null".to_owned(),
        _ => format!("a/{display}"),
    };
    let b = match new {
        Side::Missing => "/dev/null".to_owned(),
        _ => format!("b/{display}"),
    };
    let mut out = format!("diff --staged a/{display} b/{display}\n");
    match (old_mode, new_mode) {
        (Some(o), Some(n)) if o != n => out.push_str(&format!("old mode {o:o}\nnew mode {n:o}\n")),
        (None, Some(n)) if kind == ChangeKind::Created => {
            out.push_str(&format!("new file mode {n:o}\n"))
        }
        (Some(o), None) if kind == ChangeKind::Deleted => {
            out.push_str(&format!("deleted file mode {o:o}\n"))
        }
        _ => {}
    }
    let text = |s: &Side| match s {
        Side::Missing => Some(String::new()),
        Side::Text(t) => Some(t.clone()),
        Side::Link(t) => Some(format!("-> {t}\n")),
        _ => None,
    };
    match (text(&old), text(&new)) {
        (Some(o), Some(n)) if o == n => {}
        (Some(o), Some(n)) => out.push_str(
            &TextDiff::from_lines(&o, &n)
                .unified_diff()
                .context_radius(CONTEXT)
                .header(&a, &b)
                .to_string(),
        ),
        _ => out.push_str(&match (&old, &new) {
            (Side::Dir, _) | (_, Side::Dir) => format!("directory {display}\n"),
            (Side::Large(n), _) | (_, Side::Large(n)) => {
                format!("Large file ({n} bytes): no diff shown\n")
            }
            _ => format!("Binary files {a} and {b} differ\n"),
        }),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_changes_show_as_a_unified_diff() {
        let t = tempfile::tempdir().unwrap();
        let (lo, up) = (t.path().join("lo"), t.path().join("up"));
        std::fs::write(&lo, "a\n").unwrap();
        std::fs::write(&up, "b\n").unwrap();
        let d = of("old", ChangeKind::Modified, &lo, &up);
        assert!(d.contains("--- a/old\n+++ b/old\n"), "{d}");
        assert!(d.contains("-a\n+b\n"), "{d}");
        let d = of("gone", ChangeKind::Deleted, &lo, &up);
        assert!(d.contains("+++ /dev/null") && d.contains("-a\n"), "{d}");
        let d = of("new", ChangeKind::Created, &lo, &up);
        assert!(d.contains("--- /dev/null") && d.contains("+b\n"), "{d}");
    }

    #[test]
    fn binary_files_and_modes_say_so() {
        let t = tempfile::tempdir().unwrap();
        let (lo, up) = (t.path().join("lo"), t.path().join("up"));
        std::fs::write(&lo, b"\0\x01").unwrap();
        std::fs::write(&up, b"\0\x02").unwrap();
        let d = of("bin", ChangeKind::Modified, &lo, &up);
        assert!(d.contains("Binary files a/bin and b/bin differ"), "{d}");
        std::fs::write(&lo, "same\n").unwrap();
        std::fs::write(&up, "same\n").unwrap();
        std::fs::set_permissions(&up, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&lo, std::fs::Permissions::from_mode(0o644)).unwrap();
        let d = of("run", ChangeKind::Modified, &lo, &up);
        assert!(d.contains("old mode 644\nnew mode 755\n"), "{d}");
        assert!(!d.contains("@@"), "{d}");
    }
}
