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

/// `args[key]`, when present, must be a regular expression that compiles.
pub fn compiles(args: &Value, key: &str, what: &str) -> Result<(), String> {
    match args.get(key).and_then(Value::as_str) {
        Some(re) => regex::Regex::new(re)
            .map(|_| ())
            .map_err(|e| format!("{what} is not a valid regular expression: {e}")),
        None => Ok(()),
    }
}

/// `args[key]`, a string, is at most [`super::MAX_INPUT_BYTES`] bytes (a schema's
/// `maxLength` counts characters).
pub fn input_size(args: &Value, key: &str) -> Result<(), String> {
    let max = super::MAX_INPUT_BYTES;
    let len = args.get(key).and_then(Value::as_str).map_or(0, str::len);
    if len > max {
        return Err(format!(
            "{key} is {len} bytes; at most {max} (1 MiB) per call: send it in parts"
        ));
    }
    Ok(())
}

/// A millisecond argument of `v`, if it has one.
pub fn millis(v: &Value, key: &str) -> Option<u64> {
    v.get(key).and_then(Value::as_u64)
}

/// The first resolved path, or the workspace root.
pub fn first(paths: &[String]) -> &str {
    paths.first().map(String::as_str).unwrap_or(".")
}
