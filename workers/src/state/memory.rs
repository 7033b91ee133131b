//! `memory`: get, set, delete and list keys of `<state_dir>/memory.json`, a JSON
//! object of strings, sorted by key. A file that is not such an object is reported
//! (`MemoryError`) and left alone: nothing overwrites what it cannot read.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::tools::memory::{MAX_KEY, MAX_KEYS, MAX_VALUE};
use toolvisor_protocol::worker::{Limits, Outcome};

use super::store::{Locked, Store};
use crate::{ToolError, truncate};

/// The store's file in the state directory.
pub const FILE: &str = "memory.json";

/// What `get` answers for a key that is not stored.
pub const NOT_FOUND: &str = "Key not found";

fn err(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorType::MemoryError, message)
}

/// Run one `memory` call.
pub fn run(args: &Value, store: &Store, limits: &Limits) -> Result<Outcome, ToolError> {
    let action = args
        .get("action")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let key = args.get("key").and_then(Value::as_str);
    let value = args.get("value").and_then(Value::as_str);
    let need_key = || key.ok_or_else(|| err(format!("`key` is required for {action}")));
    let locked = store.lock(ErrorType::MemoryError)?;
    let mut map = load(&locked)?;
    match action {
        "get" => Ok(match map.get(need_key()?) {
            Some(v) => found(v.clone(), need_key()?),
            None => not_found(),
        }),
        "set" => {
            let key = need_key()?;
            let value = value.ok_or_else(|| err("`value` is required for set"))?;
            check(key, value, &map)?;
            map.insert(key.to_owned(), value.to_owned());
            save(&locked, &map)?;
            Ok(said(format!("Stored {key}")))
        }
        "delete" => {
            let key = need_key()?;
            if map.remove(key).is_none() {
                return Ok(not_found());
            }
            save(&locked, &map)?;
            Ok(said(format!("Deleted {key}")))
        }
        "list" => {
            let keys: Vec<String> = map.into_keys().collect();
            let cut = truncate::listing(&keys, limits);
            let mut o = Outcome::ok(cut.text);
            o.truncated = cut.truncated;
            o.display = format!("{} keys", keys.len());
            o.meta.insert("keys".into(), json!(keys.len()));
            Ok(o)
        }
        other => Err(err(format!(
            "unknown action `{other}` (get, set, delete or list)"
        ))),
    }
}

/// Keys are 1 to [`MAX_KEY`] bytes without control characters (so `list` shows one
/// per line), values at most [`MAX_VALUE`], at most [`MAX_KEYS`] keys.
fn check(key: &str, value: &str, map: &BTreeMap<String, String>) -> Result<(), ToolError> {
    if key.is_empty() {
        return Err(err("the key is empty"));
    }
    if key.chars().any(char::is_control) {
        return Err(err("a key has no control characters (line breaks, tabs…)"));
    }
    if key.len() > MAX_KEY {
        return Err(err(format!(
            "the key is {} bytes; at most {MAX_KEY}",
            key.len()
        )));
    }
    if value.len() > MAX_VALUE {
        return Err(err(format!(
            "the value is {} bytes; at most {MAX_VALUE}",
            value.len()
        )));
    }
    if map.len() >= MAX_KEYS && !map.contains_key(key) {
        return Err(err(format!(
            "the memory holds {MAX_KEYS} keys, the most it may; delete one first"
        )));
    }
    Ok(())
}

fn load(locked: &Locked<'_>) -> Result<BTreeMap<String, String>, ToolError> {
    let Some(bytes) = locked.read(FILE, ErrorType::MemoryError)? else {
        return Ok(BTreeMap::new());
    };
    serde_json::from_slice(&bytes).map_err(|e| {
        err(format!(
            "{FILE} is not a JSON object of strings ({e}); it was left as it is: fix or remove it"
        ))
    })
}

fn save(locked: &Locked<'_>, map: &BTreeMap<String, String>) -> Result<(), ToolError> {
    let bytes = serde_json::to_vec_pretty(map).map_err(|e| err(e.to_string()))?;
    locked.write(FILE, &bytes, ErrorType::MemoryError)
}

fn found(value: String, key: &str) -> Outcome {
    let mut o = Outcome::ok(value);
    o.display = format!("Retrieved {key}");
    o
}

fn not_found() -> Outcome {
    Outcome::ok(NOT_FOUND.to_owned())
}

fn said(text: String) -> Outcome {
    Outcome::ok(text)
}
