//! What a call will do, in words for the person asked to confirm it (seed properties
//! 37, 45, 46), and what rule would allow it next time.

use serde_json::{Map, Value};
use toolvisor_protocol::tools::ToolSpec;

/// One line saying what the call does, e.g. "Run `cargo test` in .".
/// `loc` holds the resolved locations, in the order the tool's path parameters appear.
pub fn describe(spec: &ToolSpec, args: &Map<String, Value>, loc: &[String]) -> String {
    let s = |k: &str| args.get(k).and_then(Value::as_str).unwrap_or("");
    let first = loc.first().map(String::as_str).unwrap_or(".");
    match spec.name {
        "read_file" => format!("Read `{first}`{}", line_range(args)),
        "read_many_files" => format!("Read {} file(s) or pattern(s): {}", loc.len(), quoted(loc)),
        "ls" => format!(
            "List `{first}`{}",
            if flag(args, "recursive") {
                " recursively"
            } else {
                ""
            }
        ),
        "glob" => format!("Find files matching `{}` in `{first}`", s("pattern")),
        "grep" => format!("Search for `{}` in `{first}`", s("pattern")),
        "write_file" => format!(
            "{} `{first}` ({} bytes)",
            if flag(args, "overwrite") {
                "Write (overwriting)"
            } else {
                "Create"
            },
            s("content").len()
        ),
        "edit_file" => format!("Apply {} edit(s) to `{first}`", count(args, "edits")),
        "preview_write_file" => format!("Preview writing `{first}`"),
        "preview_edit_file" => format!("Preview {} edit(s) to `{first}`", count(args, "edits")),
        "apply_file_change" => "Apply a previewed file change".to_string(),
        "run_command" => describe_command(args, first),
        "list_processes" => "List background processes".to_string(),
        "read_output" => format!("Read the output of background process `{}`", s("process")),
        "kill_process" => match args.get("signal").and_then(Value::as_str) {
            Some(sig) => format!("Send SIG{sig} to background process `{}`", s("process")),
            None => format!(
                "Stop background process `{}` and what it started",
                s("process")
            ),
        },
        "write_input" => describe_input(args),
        other => format!("Call `{other}`"),
    }
}

/// `write_input`: what is typed (control characters shown escaped, long data cut).
fn describe_input(args: &Map<String, Value>) -> String {
    let process = args.get("process").and_then(Value::as_str).unwrap_or("");
    let data = args.get("data").and_then(Value::as_str).unwrap_or("");
    const SHOWN: usize = 200;
    let shown: String = data.escape_debug().take(SHOWN).collect();
    let more = if data.escape_debug().count() > SHOWN {
        "…"
    } else {
        ""
    };
    let mut out = format!("Type \"{shown}{more}\" into background process `{process}`");
    if flag(args, "close") {
        out.push_str(", then end its input");
    }
    out
}

fn describe_command(args: &Map<String, Value>, cwd: &str) -> String {
    let cmd = args.get("command").and_then(Value::as_str).unwrap_or("");
    let mut out = format!("Run `{cmd}` in {cwd}");
    if flag(args, "tty") {
        out.push_str(" in a terminal");
    }
    if flag(args, "background") {
        out.push_str(" in the background");
    }
    if args.get("stdin").and_then(Value::as_str).is_some() {
        out.push_str(" with input");
    }
    if let Some(env) = args
        .get("env")
        .and_then(Value::as_object)
        .filter(|e| !e.is_empty())
    {
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        out.push_str(&format!(" with env {}", keys.join(", ")));
    }
    out
}

fn line_range(args: &Map<String, Value>) -> String {
    let n = |k: &str| args.get(k).and_then(Value::as_u64);
    match (n("startLine"), n("endLine")) {
        (Some(a), Some(b)) => format!(" lines {a}-{b}"),
        (Some(a), None) => format!(" from line {a}"),
        (None, Some(b)) => format!(" up to line {b}"),
        (None, None) => String::new(),
    }
}

fn flag(args: &Map<String, Value>, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn count(args: &Map<String, Value>, key: &str) -> usize {
    args.get(key).and_then(Value::as_array).map_or(0, Vec::len)
}

fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `[[policy.rules]]` entry that would allow a call like this one: for a command,
/// its leading words; for a path, its directory; otherwise the tool as a whole.
pub fn rule_snippet(tool: &str, condition: Option<(&str, &str, &str)>) -> String {
    let mut out = format!("[[policy.rules]]\ntool = \"{tool}\"\naction = \"allow\"\n");
    if let Some((param, op, value)) = condition {
        out.push_str(&format!(
            "conditions = [{{ param = \"{param}\", operator = \"{op}\", value = {} }}]\n",
            toml_string(value)
        ));
    }
    out
}

/// A TOML basic string (quotes and backslashes escaped).
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The word prefix a rule should allow for a simple command: `cargo test` for
/// `cargo test --all`, `ls` for `ls -la` (`startsWith` is a word prefix, so `lsof`
/// stays out).
pub fn command_prefix(words: &[String]) -> String {
    match words {
        [] => String::new(),
        [name, sub, ..] if is_subcommand(sub) => format!("{name} {sub}"),
        [name, ..] => name.clone(),
    }
}

fn is_subcommand(word: &str) -> bool {
    !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        && !word.starts_with('-')
}

/// The directory prefix a path rule should allow: `src/` for `src/a.rs`.
pub fn path_prefix(location: &str) -> Option<String> {
    location.rsplit_once('/').map(|(dir, _)| format!("{dir}/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_are_valid_toml_rules() {
        let text = rule_snippet(
            "run_command",
            Some(("command", "startsWith", "cargo \"x\"")),
        );
        let cfg = crate::config::Config::parse(&format!("[policy]\n{text}"), "t");
        // A bare [[policy.rules]] after [policy] parses as an array of tables.
        let cfg = cfg
            .or_else(|_| crate::config::Config::parse(&text, "t"))
            .unwrap();
        assert_eq!(cfg.policy.rules.len(), 1);
        assert_eq!(cfg.policy.rules[0].conditions[0].value, "cargo \"x\"");
    }

    #[test]
    fn prefixes() {
        let w = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        assert_eq!(command_prefix(&w("cargo test --all")), "cargo test");
        assert_eq!(command_prefix(&w("ls -la")), "ls");
        assert_eq!(command_prefix(&w("ls")), "ls");
        assert_eq!(path_prefix("src/a.rs").as_deref(), Some("src/"));
        assert_eq!(path_prefix("a.rs"), None);
    }
}
