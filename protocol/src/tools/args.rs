//! Helpers the tool modules share: pieces of JSON Schema, and reading arguments in a
//! describer (which never fails: a missing argument reads as empty).

use serde_json::{Map, Value, json};

/// An object schema that refuses unknown keys.
pub fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

/// A non-empty path string.
pub fn path(what: &str) -> Value {
    json!({"type": "string", "minLength": 1, "description": what})
}

/// A background process handle.
pub fn process() -> Value {
    json!({"type": "string", "minLength": 1, "description": "The handle from run_command's meta.process."})
}

/// A string argument, or "".
pub fn text<'a>(args: &'a Map<String, Value>, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A boolean argument, false when absent.
pub fn flag(args: &Map<String, Value>, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// The length of an array argument, 0 when absent.
pub fn count(args: &Map<String, Value>, key: &str) -> usize {
    args.get(key).and_then(Value::as_array).map_or(0, Vec::len)
}

/// The first resolved path, or the workspace root.
pub fn first(paths: &[String]) -> &str {
    paths.first().map(String::as_str).unwrap_or(".")
}
