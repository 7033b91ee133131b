//! Codex's hooks speak Claude Code's JSON; its tools differ: `Bash` (its shell and
//! unified exec), `apply_patch` (the patch in `tool_input.command`; Edit and Write are
//! only matcher aliases of it) and MCP tools as `mcp__SERVER__TOOL`.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::claude;
use super::event::{Call, path_arg, text};

/// Codex's tools as toolvisor's: a patch is one `write_file` decision per file it
/// touches (added, updated, deleted or moved to), all of which must pass.
pub fn tools(tool: &str, input: &Map<String, Value>, ws: &Path) -> Result<Vec<Call>, String> {
    match tool {
        "Bash" => Ok(vec![Call {
            tool: "run_command".into(),
            args: json!({"command": text(input, "command").unwrap_or_default()}),
        }]),
        "apply_patch" => {
            let patch = text(input, "command").or_else(|| text(input, "patch"));
            let files = patch.map(patched_files).unwrap_or_default();
            if files.is_empty() {
                return Err("the patch names no file".into());
            }
            Ok(files
                .iter()
                .map(|f| Call {
                    tool: "write_file".into(),
                    args: json!({"path": path_arg(f, ws), "content": ""}),
                })
                .collect())
        }
        other => claude::mcp(other, input),
    }
}

/// The files an `apply_patch` patch touches, in order, each once.
fn patched_files(patch: &str) -> Vec<String> {
    const MARKS: [&str; 4] = [
        "*** Add File: ",
        "*** Update File: ",
        "*** Delete File: ",
        "*** Move to: ",
    ];
    let mut files: Vec<String> = Vec::new();
    for line in patch.lines() {
        let found = MARKS.iter().find_map(|m| line.strip_prefix(m));
        if let Some(f) = found.map(str::trim).filter(|f| !f.is_empty())
            && !files.iter().any(|x| x == f)
        {
            files.push(f.to_owned());
        }
    }
    files
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_patch_is_decided_per_file() {
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-x\n+y\n*** Add File: /w/b.txt\n+hi\n*** Update File: src/a.rs\n*** End Patch\n";
        let input = json!({"command": patch});
        let calls = tools("apply_patch", input.as_object().unwrap(), Path::new("/w")).unwrap();
        let paths: Vec<&Value> = calls.iter().map(|c| &c.args["path"]).collect();
        assert_eq!(paths, [&json!("src/a.rs"), &json!("b.txt")]);
        let empty = json!({"command": "nothing"});
        assert!(tools("apply_patch", empty.as_object().unwrap(), Path::new("/w")).is_err());
    }
}
