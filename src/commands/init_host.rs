//! `toolvisor init --host claude-code|codex|gemini|cursor`: that host's project config
//! for toolvisor — the MCP server entry (`toolvisor mcp`) and, where the host has hooks
//! in a format `toolvisor hook` speaks, the hook on its tool events. Merged into the
//! files that exist without losing a key; an entry already there is left as it is, so a
//! second run changes nothing. Runs as the person: the host's config folders are
//! protected from commands toolvisor runs, not from this.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::workspace::Resolved;

/// The hosts `init --host` sets up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum HostKind {
    ClaudeCode,
    Codex,
    Gemini,
    Cursor,
}

/// How long a host gives the hook (seconds; Gemini CLI counts milliseconds).
const HOOK_TIMEOUT_S: u64 = 10;

pub fn run(r: &Resolved, host: HostKind) -> i32 {
    let ws = &r.workspace;
    let result = match host {
        HostKind::ClaudeCode => claude_code(ws),
        HostKind::Codex => codex(ws),
        HostKind::Gemini => gemini(ws),
        HostKind::Cursor => json_file(&ws.join(".cursor/mcp.json"), add_mcp_server),
    };
    match result {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            0
        }
        Err(why) => {
            eprintln!("toolvisor: {why}");
            1
        }
    }
}

fn claude_code(ws: &Path) -> Result<Vec<String>, String> {
    let mut done = json_file(&ws.join(".mcp.json"), add_mcp_server)?;
    let hook = hook_entry("toolvisor hook claude-code", HOOK_TIMEOUT_S);
    done.extend(json_file(&ws.join(".claude/settings.json"), |root| {
        add_hooks(root, &["PreToolUse", "PostToolUse"], "*", &hook)
    })?);
    Ok(done)
}

fn gemini(ws: &Path) -> Result<Vec<String>, String> {
    let hook = hook_entry("toolvisor hook gemini", HOOK_TIMEOUT_S * 1000);
    json_file(&ws.join(".gemini/settings.json"), |root| {
        let a = add_mcp_server(root);
        let b = add_hooks(root, &["BeforeTool", "AfterTool"], ".*", &hook);
        a | b
    })
}

fn hook_entry(command: &str, timeout: u64) -> Value {
    json!({"type": "command", "command": command, "timeout": timeout})
}

/// `mcpServers.toolvisor` unless there is one; whether anything changed.
fn add_mcp_server(root: &mut Map<String, Value>) -> bool {
    let Some(servers) = object_at(root, "mcpServers") else {
        return false;
    };
    if servers.contains_key("toolvisor") {
        return false;
    }
    servers.insert(
        "toolvisor".into(),
        json!({"command": "toolvisor", "args": ["mcp"]}),
    );
    true
}

/// For each event, a matcher group running `hook` unless a group already runs its
/// command.
fn add_hooks(root: &mut Map<String, Value>, events: &[&str], matcher: &str, hook: &Value) -> bool {
    let mut changed = false;
    let Some(hooks) = object_at(root, "hooks") else {
        return false;
    };
    for event in events {
        let groups = hooks.entry(*event).or_insert_with(|| json!([]));
        let Some(groups) = groups.as_array_mut() else {
            continue;
        };
        let present = groups.iter().any(|g| {
            g["hooks"]
                .as_array()
                .is_some_and(|hs| hs.iter().any(|h| h["command"] == hook["command"]))
        });
        if !present {
            groups.push(json!({"matcher": matcher, "hooks": [hook]}));
            changed = true;
        }
    }
    changed
}

/// The object under `key`, made when missing or null; None when something else is
/// there (left as it is).
fn object_at<'a>(
    root: &'a mut Map<String, Value>,
    key: &str,
) -> Option<&'a mut Map<String, Value>> {
    let v = root.entry(key).or_insert_with(|| json!({}));
    if v.is_null() {
        *v = json!({});
    }
    v.as_object_mut()
}

/// Read the JSON object in `path` (none: `{}`), let `edit` change it, write it back
/// when it did.
fn json_file(
    path: &Path,
    edit: impl FnOnce(&mut Map<String, Value>) -> bool,
) -> Result<Vec<String>, String> {
    let mut root = match std::fs::read_to_string(path) {
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(m)) => m,
            Ok(_) => return Err(format!("{} does not hold a JSON object", path.display())),
            Err(e) => {
                return Err(format!(
                    "{} is not JSON ({e}); left as it is",
                    path.display()
                ));
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    if !edit(&mut root) {
        return Ok(vec![format!("{} already has toolvisor", path.display())]);
    }
    let text = serde_json::to_string_pretty(&Value::Object(root)).map_err(|e| e.to_string())?;
    write(path, &(text + "\n"))
}

fn write(path: &Path, text: &str) -> Result<Vec<String>, String> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(vec![format!("wrote {}", path.display())])
}

/// Codex: `.codex/config.toml`, `[mcp_servers.toolvisor]` and `[[hooks.*]]` groups.
fn codex(ws: &Path) -> Result<Vec<String>, String> {
    let path: PathBuf = ws.join(".codex/config.toml");
    let mut root: toml::Table = match std::fs::read_to_string(&path) {
        Ok(text) => text
            .parse()
            .map_err(|e| format!("{} is not TOML ({e}); left as it is", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => toml::Table::new(),
        Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
    };
    let as_json = serde_json::to_value(&root).map_err(|e| e.to_string())?;
    let Value::Object(mut map) = as_json else {
        return Err(format!("{} does not hold a table", path.display()));
    };
    let mut changed = false;
    if let Some(servers) = object_at(&mut map, "mcp_servers")
        && !servers.contains_key("toolvisor")
    {
        servers.insert(
            "toolvisor".into(),
            json!({"command": "toolvisor", "args": ["mcp"]}),
        );
        changed = true;
    }
    let hook = hook_entry("toolvisor hook codex", HOOK_TIMEOUT_S);
    changed |= add_hooks(
        &mut map,
        &["PreToolUse", "PostToolUse"],
        "Bash|apply_patch|mcp__.*",
        &hook,
    );
    if !changed {
        return Ok(vec![format!("{} already has toolvisor", path.display())]);
    }
    root = serde_json::from_value(Value::Object(map)).map_err(|e| e.to_string())?;
    let text = toml::to_string(&root).map_err(|e| e.to_string())?;
    write(&path, &text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_every_key_and_a_second_run_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path();
        let settings = ws.join(".claude/settings.json");
        std::fs::create_dir_all(settings.parent().unwrap()).unwrap();
        let before = json!({"model": "x", "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "mine"}]}]}});
        std::fs::write(&settings, before.to_string()).unwrap();
        claude_code(ws).unwrap();
        let after: Value =
            serde_json::from_str(&std::fs::read_to_string(&settings).unwrap()).unwrap();
        assert_eq!(after["model"], "x");
        assert_eq!(after["hooks"]["PreToolUse"].as_array().unwrap().len(), 2);
        let again = std::fs::read(&settings).unwrap();
        claude_code(ws).unwrap();
        assert_eq!(std::fs::read(&settings).unwrap(), again);
    }

    #[test]
    fn codex_gets_toml_and_keeps_its_keys() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join(".codex/config.toml");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(
            &path,
            "model = \"o3\"\n[mcp_servers.other]\ncommand = \"x\"\n",
        )
        .unwrap();
        codex(tmp.path()).unwrap();
        let t: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        assert_eq!(t["model"].as_str(), Some("o3"));
        assert!(t["mcp_servers"].get("other").is_some());
        assert_eq!(
            t["mcp_servers"]["toolvisor"]["args"][0].as_str(),
            Some("mcp")
        );
        let once = std::fs::read(&path).unwrap();
        codex(tmp.path()).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), once);
    }
}
