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
            format!("{path}: {e}")
        })
        .collect();
    lines.dedup();
    Err(lines.join("\n"))
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
}
