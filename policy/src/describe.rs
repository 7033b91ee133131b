//! What rule would allow a call next time, as a `[[policy.rules]]` snippet. (What a
//! call will do, in words, is each tool's own describer: protocol/src/tools/.)

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
        #[derive(serde::Deserialize)]
        struct File {
            policy: crate::config::PolicyConfig,
        }
        let cfg: File = toml::from_str(&text).unwrap();
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
