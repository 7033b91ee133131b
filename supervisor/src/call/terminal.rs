//! What the supervisor does for processes that behave like a terminal (the exec
//! group's `stdin`, `tty`, `yield_ms`, `ready`, `write_input`, `read_output`'s
//! `wait_ms`/`until`, `kill_process`'s `signal`; docs/PROTOCOL.md), beyond routing:
//!
//! - [`check_args`]: what a JSON Schema cannot say, refused before the policy is asked
//!   (a `ready` on a foreground command, a regex that does not compile, input over
//!   1 MiB counted in bytes);
//! - [`deadline_ms`]: a call that waits (`read_output` with `wait_ms` or `until`,
//!   `run_command` with `ready`) is not cut by the group's *default* timeout: without
//!   an explicit `timeout_ms`, its deadline covers the wait (within `max_timeout_ms`);
//! - [`takeover`]: whether a call may act on a background process of another session
//!   (the worker enforces ownership; a person's grant token lifts it).

use std::time::Instant;

use serde_json::Value;
use toolvisor_protocol::tools::{
    MAX_INPUT_BYTES, MAX_WAIT_MS, kill_process, read_output, run_command, write_input,
};

use crate::call::grants::{Grants, TokenUse};

/// How long `until` waits when the call gives no `wait_ms` (the worker's default).
const UNTIL_WAIT_MS: u64 = 30_000;
/// How long `ready` waits when it gives no `timeout_ms` (the worker's default).
const READY_WAIT_MS: u64 = 30_000;
/// Room past a wait for the answer to come back before the deadline.
const SLACK_MS: u64 = 5_000;

/// Refuse, before the policy sees it, a call the schema lets through but that can
/// never run; the message says what to change.
pub fn check_args(tool: &str, args: &Value) -> Result<(), String> {
    match tool {
        run_command::NAME => {
            let background = args.get("background").and_then(Value::as_bool) == Some(true);
            if let Some(ready) = args.get("ready") {
                if !background {
                    return Err("ready waits for a background process: add background: true".into());
                }
                if ready.get("regex").is_none() && ready.get("port").is_none() {
                    return Err("ready needs a regex or a port to wait for".into());
                }
                regex(ready, "regex", "ready.regex")?;
            }
            if background && args.get("yield_ms").is_some() {
                return Err(
                    "yield_ms is for a foreground command (background returns at once)".into(),
                );
            }
            let sized = args.get("rows").is_some() || args.get("cols").is_some();
            if sized && args.get("tty").and_then(Value::as_bool) != Some(true) {
                return Err("rows and cols are the size of a terminal: add tty: true".into());
            }
            input_size(args, "stdin")
        }
        write_input::NAME => {
            if args.get("rows").is_some() != args.get("cols").is_some() {
                return Err("rows and cols go together".into());
            }
            input_size(args, "data")
        }
        read_output::NAME => regex(args, "until", "until"),
        _ => Ok(()),
    }
}

fn regex(args: &Value, key: &str, what: &str) -> Result<(), String> {
    match args.get(key).and_then(Value::as_str) {
        Some(re) => regex::Regex::new(re)
            .map(|_| ())
            .map_err(|e| format!("{what} is not a valid regular expression: {e}")),
        None => Ok(()),
    }
}

fn input_size(args: &Value, key: &str) -> Result<(), String> {
    let len = args.get(key).and_then(Value::as_str).map_or(0, str::len);
    if len > MAX_INPUT_BYTES {
        return Err(format!(
            "{key} is {len} bytes; at most {MAX_INPUT_BYTES} (1 MiB) per call: send it in parts"
        ));
    }
    Ok(())
}

/// How long a call of `tool` waits by its arguments (0: it does not).
fn wait_ms(tool: &str, args: &Value) -> u64 {
    let ms = |v: &Value, k: &str| v.get(k).and_then(Value::as_u64);
    match tool {
        read_output::NAME => match (ms(args, "wait_ms"), args.get("until")) {
            (Some(w), _) => w.min(MAX_WAIT_MS),
            (None, Some(_)) => UNTIL_WAIT_MS,
            (None, None) => 0,
        },
        run_command::NAME => args
            .get("ready")
            .map_or(0, |r| ms(r, "timeout_ms").unwrap_or(READY_WAIT_MS)),
        _ => 0,
    }
}

/// The deadline of a call, in ms, given the one the usual rule found (`ms`): a call
/// that waits and names no `timeout_ms` of its own gets room for its wait, however
/// short the group's default, within `max_ms`. An explicit `timeout_ms` stands (the
/// worker ends the wait in time).
pub fn deadline_ms(tool: &str, args: &Value, explicit: bool, ms: u64, max_ms: u64) -> u64 {
    let wait = wait_ms(tool, args);
    if explicit || wait == 0 {
        return ms;
    }
    ms.max(wait.saturating_add(SLACK_MS)).min(max_ms)
}

/// Whether a call may act on a background process another session started: it
/// carries a grant token (`confirm_token`) for this tool that fits — grants come from
/// people (`grant` is refused to commands, and a model has no way to send one).
pub fn takeover(grants: &Grants, tool: &str, token: Option<&str>, trace_id: Option<&str>) -> bool {
    if tool != write_input::NAME && tool != kill_process::NAME {
        return false;
    }
    let Some(token) = token else {
        return false;
    };
    let use_ = TokenUse {
        tool,
        trace_id,
        locations: &[],
    };
    grants.vouches(token, &use_, Instant::now())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_a_schema_cannot_say_is_refused() {
        let bad = [
            (
                "run_command",
                json!({"command": "x", "ready": {"regex": "up"}}),
            ),
            (
                "run_command",
                json!({"command": "x", "background": true, "ready": {}}),
            ),
            (
                "run_command",
                json!({"command": "x", "background": true, "ready": {"regex": "("}}),
            ),
            (
                "run_command",
                json!({"command": "x", "background": true, "yield_ms": 5}),
            ),
            ("run_command", json!({"command": "x", "rows": 5})),
            (
                "run_command",
                json!({"command": "x", "stdin": "é".repeat(MAX_INPUT_BYTES / 2 + 1)}),
            ),
            (
                "write_input",
                json!({"process": "w0-1", "data": "x", "cols": 5}),
            ),
            ("read_output", json!({"process": "w0-1", "until": "[a-"})),
        ];
        for (tool, args) in bad {
            assert!(check_args(tool, &args).is_err(), "{tool} {args}");
        }
        let good = [
            (
                "run_command",
                json!({"command": "x", "background": true, "ready": {"port": 80}}),
            ),
            (
                "run_command",
                json!({"command": "x", "tty": true, "rows": 5, "cols": 9}),
            ),
            (
                "write_input",
                json!({"process": "w0-1", "data": "", "rows": 5, "cols": 9}),
            ),
            ("read_output", json!({"process": "w0-1", "until": "^ok$"})),
            ("ls", json!({"path": "."})),
        ];
        for (tool, args) in good {
            assert_eq!(check_args(tool, &args), Ok(()), "{tool} {args}");
        }
    }

    #[test]
    fn waits_get_room_unless_the_call_set_its_own_deadline() {
        let read = json!({"process": "w0-1", "wait_ms": 60000});
        assert_eq!(
            deadline_ms("read_output", &read, false, 30_000, 600_000),
            65_000
        );
        assert_eq!(
            deadline_ms("read_output", &read, true, 10_000, 600_000),
            10_000
        );
        assert_eq!(
            deadline_ms("read_output", &read, false, 30_000, 40_000),
            40_000
        );
        let until = json!({"process": "w0-1", "until": "x"});
        assert_eq!(
            deadline_ms("read_output", &until, false, 30_000, 600_000),
            35_000
        );
        let plain = json!({"process": "w0-1"});
        assert_eq!(
            deadline_ms("read_output", &plain, false, 30_000, 600_000),
            30_000
        );
        let ready =
            json!({"command": "x", "background": true, "ready": {"port": 1, "timeout_ms": 90000}});
        assert_eq!(
            deadline_ms("run_command", &ready, false, 30_000, 600_000),
            95_000
        );
        assert_eq!(
            deadline_ms("ls", &json!({}), false, 30_000, 600_000),
            30_000
        );
    }
}
