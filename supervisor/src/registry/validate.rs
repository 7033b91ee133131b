//! Argument validation against each tool's JSON Schema (draft 2020-12), before the
//! policy sees the call (docs/PROTOCOL.md, seed property 44).
//!
//! Why every violation and not the first: a model fixes its call in one round trip
//! only when it is told everything that is wrong with it.

use std::collections::HashMap;

use jsonschema::Validator;
use serde_json::Value;
use toolvisor_protocol::tools::ToolSpec;

/// A tool's schema failed to compile: a bug in the catalog, caught at start.
#[derive(Debug, thiserror::Error)]
#[error("schema of tool `{tool}` does not compile: {message}")]
pub struct SchemaError {
    pub tool: String,
    pub message: String,
}

/// Compiled validators for every tool, found by name or alias.
pub struct Validators {
    by_name: HashMap<&'static str, Validator>,
    /// alias or name → canonical name.
    names: HashMap<&'static str, &'static str>,
}

impl std::fmt::Debug for Validators {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Validators")
            .field("tools", &self.by_name.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Validators {
    /// Compile every tool's schema once.
    pub fn new(tools: &[ToolSpec]) -> Result<Validators, SchemaError> {
        let mut by_name = HashMap::new();
        let mut names = HashMap::new();
        for t in tools {
            let v = jsonschema::draft202012::new(&t.parameters).map_err(|e| SchemaError {
                tool: t.name.to_string(),
                message: e.to_string(),
            })?;
            by_name.insert(t.name, v);
            names.insert(t.name, t.name);
            for alias in t.aliases {
                names.insert(*alias, t.name);
            }
        }
        Ok(Validators { by_name, names })
    }

    /// Check `args` for `tool` (name or alias). The error lists every violation, one
    /// per line, as `/json/pointer: reason` (`/` for the arguments object itself).
    pub fn check(&self, tool: &str, args: &Value) -> Result<(), String> {
        let Some(v) = self.names.get(tool).and_then(|n| self.by_name.get(n)) else {
            return Err(self.not_found(tool));
        };
        violations(v, args).map_or(Ok(()), Err)
    }

    /// The `ToolNotFound` message: the name, and the closest names if any.
    pub fn not_found(&self, name: &str) -> String {
        let close = self.suggest(name);
        if close.is_empty() {
            format!("unknown tool `{name}`")
        } else {
            let list: Vec<String> = close.iter().map(|n| format!("`{n}`")).collect();
            format!("unknown tool `{name}`; did you mean {}?", list.join(" or "))
        }
    }

    /// Up to three known names (tools and aliases) closest to `name`: by edit
    /// distance (case-insensitive), or containing it, nearest first.
    pub fn suggest(&self, name: &str) -> Vec<String> {
        let wanted = name.to_lowercase();
        let limit = (wanted.chars().count() / 3).max(2);
        let mut scored: Vec<(usize, &str)> = self
            .names
            .keys()
            .filter_map(|candidate| {
                let d = edit_distance(&wanted, candidate);
                let related = wanted.len() >= 3 && candidate.contains(wanted.as_str());
                (d <= limit || related).then_some((d, *candidate))
            })
            .collect();
        scored.sort();
        scored
            .into_iter()
            .take(3)
            .map(|(_, n)| n.to_string())
            .collect()
    }
}

/// Every way `value` breaks `v`'s schema, one per line, as `/json/pointer: reason` (`/`
/// for the value itself); `None` when it is valid.
pub fn violations(v: &Validator, value: &Value) -> Option<String> {
    if v.is_valid(value) {
        return None;
    }
    let mut lines: Vec<String> = v
        .iter_errors(value)
        .map(|e| {
            let path = e.instance_path().to_string();
            let path = if path.is_empty() {
                "/".to_string()
            } else {
                path
            };
            format!("{path}: {e}")
        })
        .collect();
    lines.dedup();
    Some(lines.join("\n"))
}

/// Levenshtein distance over characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = Vec::with_capacity(b.len() + 1);
        cur.push(i + 1);
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != *cb);
            cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;
    use toolvisor_protocol::tools::catalog;

    fn v() -> Validators {
        Validators::new(&catalog()).unwrap()
    }

    #[test]
    fn valid_calls_pass() {
        let v = v();
        assert!(
            v.check("read_file", &json!({"path": "a", "startLine": 1}))
                .is_ok()
        );
        assert!(
            v.check("shell", &json!({"command": "ls", "env": {"A": "b"}}))
                .is_ok()
        );
        assert!(v.check("list_processes", &json!({})).is_ok());
    }

    #[test]
    fn every_violation_is_listed_with_its_pointer() {
        let err = v()
            .check(
                "read_file",
                &json!({"startLine": 0, "endLine": "x", "bogus": true}),
            )
            .unwrap_err();
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 4, "{err}");
        assert!(
            err.contains("/startLine: 0 is less than the minimum of 1"),
            "{err}"
        );
        assert!(err.contains("/endLine: "), "{err}");
        assert!(err.contains("\"path\" is a required property"), "{err}");
        assert!(err.contains("bogus"), "{err}");
        let err = v()
            .check(
                "edit_file",
                &json!({"path": "a", "edits": [{"target": "", "replacement": 1}]}),
            )
            .unwrap_err();
        assert!(err.contains("/edits/0/target: "), "{err}");
        assert!(err.contains("/edits/0/replacement: "), "{err}");
    }

    #[test]
    fn non_object_arguments_are_refused() {
        let err = v().check("ls", &json!(null)).unwrap_err();
        assert!(err.starts_with("/: "), "{err}");
    }

    #[test]
    fn unknown_tools_suggest_close_names() {
        let v = v();
        assert_eq!(v.suggest("read_fil")[0], "read_file");
        assert_eq!(v.suggest("shel")[0], "shell");
        assert!(v.suggest("list_di").contains(&"list_dir".to_string()));
        assert!(
            v.suggest("RUN_COMMAND")
                .contains(&"run_command".to_string())
        );
        assert!(v.suggest("process").contains(&"kill_process".to_string()));
        assert!(v.suggest("zzzzzzzzzz").is_empty());
        let err = v.check("grpe", &json!({})).unwrap_err();
        assert!(err.contains("did you mean `grep`"), "{err}");
    }

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }

    proptest! {
        /// Property 44: an unknown property is always reported, by name.
        #[test]
        fn unexpected_properties_are_reported(key in "[a-z]{12}") {
            let v = v();
            for t in catalog() {
                let mut args = json!({});
                args[key.as_str()] = json!(1);
                let err = v.check(t.name, &args).unwrap_err();
                prop_assert!(err.contains(&key), "{}: {}", t.name, err);
            }
        }

        /// A wrong type for a required string parameter is reported at its pointer.
        #[test]
        fn wrong_types_are_reported(n in any::<i64>()) {
            let err = v().check("grep", &json!({"pattern": n})).unwrap_err();
            prop_assert!(err.starts_with("/pattern: "), "{}", err);
        }
    }
}
