//! `run_command`'s `writable` and `reveal`: the paths a call widens its sandbox by.
//! The policy asked a person (or a rule granted them) before the call came; here they
//! are made host paths and checked against what no call may ever reach: the state
//! directory and the socket stay hidden and unwritable whatever was granted.

use std::path::{Path, PathBuf};

use serde_json::Value;

use toolvisor_protocol::tools::run_command::widening_path;

use super::launch::Widen;
use crate::ToolError;

/// The call's `writable` and `reveal`, `~` expanded (with this process's `HOME`).
pub(crate) fn parse(args: &Value) -> Result<Widen, ToolError> {
    Ok(Widen {
        writable: paths(args, "writable")?,
        reveal: paths(args, "reveal")?,
    })
}

fn paths(args: &Value, key: &str) -> Result<Vec<PathBuf>, ToolError> {
    let list = args.get(key).and_then(Value::as_array);
    list.into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(|p| {
            widening_path(p).ok_or_else(|| {
                ToolError::invalid(format!(
                    "{key}: {p:?} must be an absolute or ~/ path without `..`"
                ))
            })
        })
        .collect()
}

/// Check `w` against `never` (the state directory and the socket): writable paths
/// exist (resolved, so a link cannot point elsewhere later), and neither list reaches
/// what `never` names.
pub(crate) fn check(w: Widen, never: &[PathBuf]) -> Result<Widen, ToolError> {
    let overlaps = |p: &Path| never.iter().find(|n| n.starts_with(p) || p.starts_with(n));
    let mut writable = Vec::with_capacity(w.writable.len());
    for p in w.writable {
        let real = p.canonicalize().map_err(|e| {
            ToolError::invalid(format!("writable: {} cannot be used: {e}", p.display()))
        })?;
        if let Some(n) = overlaps(&real) {
            return Err(refused("writable", &real, n));
        }
        writable.push(real);
    }
    for p in &w.reveal {
        if let Some(n) = overlaps(p) {
            return Err(refused("reveal", p, n));
        }
    }
    Ok(Widen {
        writable,
        reveal: w.reveal,
    })
}

fn refused(key: &str, p: &Path, never: &Path) -> ToolError {
    ToolError::new(
        toolvisor_protocol::ErrorType::PermissionError,
        format!(
            "{key}: {} would reach {}, which no command may see or write (toolvisor's own \
             state): the command did not run",
            p.display(),
            never.display()
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn paths_are_absolute_and_never_the_state() {
        let home = std::env::var("HOME").unwrap_or_default();
        let w = parse(&json!({"writable": ["/var/x/./y"], "reveal": ["~/.ssh"]})).unwrap();
        assert_eq!(w.writable, [PathBuf::from("/var/x/y")]);
        assert_eq!(w.reveal, [Path::new(&home).join(".ssh")]);
        assert!(parse(&json!({"writable": ["rel"]})).is_err());
        assert!(parse(&json!({"reveal": ["/a/../etc"]})).is_err());
        let d = tempfile::tempdir().unwrap();
        let state = d.path().canonicalize().unwrap().join("state");
        std::fs::create_dir(&state).unwrap();
        let init = [state.clone()];
        let up = Widen {
            writable: vec![d.path().to_path_buf()],
            reveal: Vec::new(),
        };
        assert!(check(up, &init).is_err(), "a parent of the state directory");
        let inside = Widen {
            writable: Vec::new(),
            reveal: vec![state.join("audit")],
        };
        assert!(check(inside, &init).is_err());
        let missing = Widen {
            writable: vec![d.path().join("nope")],
            reveal: Vec::new(),
        };
        assert!(check(missing, &init).is_err());
    }
}
