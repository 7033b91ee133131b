//! Argument validation against a tool's JSON Schema (draft 2020-12), before the
//! policy sees the call, and the closest names for an unknown tool.
//!
//! Why every violation and not the first: a model fixes its call in one round trip
//! only when it is told everything that is wrong with it.

use jsonschema::Validator;
use serde_json::Value;

/// A tool's schema failed to compile: a bug in a built-in definition (caught at
/// start), or an external tool that announced a broken schema (left out).
#[derive(Debug, thiserror::Error)]
#[error("schema of tool `{tool}` does not compile: {message}")]
pub struct SchemaError {
    /// The tool.
    pub tool: String,
    /// What the schema compiler said.
    pub message: String,
}

/// Compile one tool's argument schema.
pub fn compile(tool: &str, schema: &Value) -> Result<Validator, SchemaError> {
    jsonschema::draft202012::new(schema).map_err(|e| SchemaError {
        tool: tool.to_owned(),
        message: e.to_string(),
    })
}

/// Check `args`: every violation, one per line, as `/json/pointer: reason` (`/` for
/// the arguments object itself).
pub fn check(v: &Validator, args: &Value) -> Result<(), String> {
    if v.is_valid(args) {
        return Ok(());
    }
    let mut lines: Vec<String> = v
        .iter_errors(args)
        .map(|e| {
            let path = e.instance_path().to_string();
            let path = if path.is_empty() {
                "/".to_string()
            } else {
                path
            };
            cut(format!("{path}: {e}"))
        })
        .take(MAX_VIOLATIONS)
        .collect();
    lines.dedup();
    Err(lines.join("\n"))
}

/// The longest violation line, in characters: the validator's message quotes the value,
/// and an argument of megabytes must not come back three times in the result.
const MAX_LINE: usize = 400;
/// The most violations listed (a model fixes its call from the first few).
const MAX_VIOLATIONS: usize = 20;

fn cut(line: String) -> String {
    match line.char_indices().nth(MAX_LINE) {
        Some((at, _)) => format!("{}… ({} characters)", &line[..at], line.chars().count()),
        None => line,
    }
}

/// Up to three of `names` closest to `name`: by edit distance (case-insensitive), or
/// containing it, nearest first.
pub fn closest<'a>(name: &str, names: impl Iterator<Item = &'a str>) -> Vec<String> {
    let wanted = name.to_lowercase();
    let limit = (wanted.chars().count() / 3).max(2);
    let mut scored: Vec<(usize, &str)> = names
        .filter_map(|candidate| {
            let d = edit_distance(&wanted, candidate);
            let related = wanted.len() >= 3 && candidate.contains(wanted.as_str());
            (d <= limit || related).then_some((d, candidate))
        })
        .collect();
    scored.sort();
    scored.dedup();
    scored
        .into_iter()
        .take(3)
        .map(|(_, n)| n.to_string())
        .collect()
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

    #[test]
    fn edit_distance_basics() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", "abc"), 0);
    }

    #[test]
    fn a_huge_wrong_value_is_not_echoed_whole() {
        let v = compile(
            "t",
            &serde_json::json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        )
        .unwrap();
        let big = "9".repeat(1 << 20);
        let msg = check(&v, &serde_json::json!({"n": big})).unwrap_err();
        assert!(msg.len() < 2000, "{} bytes", msg.len());
        assert!(msg.starts_with("/n: "), "{msg}");
    }
}
