//! `run_command` (alias `shell`): a bash command in the workspace's sandbox.

use serde_json::{Map, Value, json};

use super::args::{self, first, flag, text};
use super::def::{
    ConfirmPreview, Hints, PathParam, PolicyTraits, Risk, ToolDef, process_fields, result_schema,
};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "run_command";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        risk: Risk::High,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
        },
        aliases: vec!["shell".into()],
        paths: vec![PathParam::or("cwd", ".")],
        describe,
        // Foreground: exit_code, signal, resources; in the background, the process;
        // staged: the held changes and their token.
        output: result_schema(&output_fields()),
        confirm_preview: ConfirmPreview::Arg("command"),
        policy: PolicyTraits {
            shell: true,
            always_asks: true,
            ..PolicyTraits::default()
        },
        timeout_arg: Some("timeout"),
        check: Some(check),
        waits: Some(waits),
        ..ToolDef::new(
            NAME,
            super::EXEC,
            "Run a shell command (bash -c) in the workspace sandbox. Output is stdout and stderr interleaved; long output keeps its head and tail and the rest goes to a file named in truncated.full_output. stdin is closed unless given; tty runs it in a terminal; background (or yield_ms) turns it into a process to read, write to and signal by its handle (meta.process); ready waits until a background process is up.",
            args::object(
                json!({
                    "command": {"type": "string", "minLength": 1, "description": "The command line, run by bash -c."},
                    "cwd": {"type": "string", "description": "Working directory inside the workspace (default: its root)."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Milliseconds before the command is killed (default: the call's deadline, workers.exec.default_timeout_ms unless the call sets timeout_ms)."},
                    "background": {"type": "boolean", "description": "Start and return at once with meta.process; read its output with read_output, type into it with write_input."},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables."},
                    "stdin": {"type": "string", "maxLength": super::MAX_INPUT_BYTES, "description": "Text written to the command's standard input, which is then closed (with tty: typed, then end-of-file)."},
                    "tty": {"type": "boolean", "description": "Run in a pseudo-terminal (TERM=xterm-256color; one output stream; escape sequences stripped from content)."},
                    "rows": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Terminal rows with tty (default 24)."},
                    "cols": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Terminal columns with tty (default 80)."},
                    "yield_ms": {"type": "integer", "minimum": 1, "description": "A command still running after this many ms becomes a background process: the call returns its output so far and meta.process."},
                    "ready": {
                        "type": "object",
                        "description": "With background: return once the output matches regex, or something listens on port, or timeout_ms passes (meta.ready).",
                        "properties": {
                            "regex": {"type": "string", "minLength": 1, "description": "Regular expression tested on each line of output."},
                            "port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "A TCP port the process listens on when it is up (on the session's loopback)."},
                            "timeout_ms": {"type": "integer", "minimum": 1, "description": "How long to wait at most (default 30000)."}
                        },
                        "additionalProperties": false
                    },
                    "stage": {"type": "boolean", "description": "Hold the command's workspace changes instead of writing them: it sees its own writes, the workspace stays as it was. The result lists them (meta.changes, a diff after the output) with meta.token: apply_file_change applies all of them or none. Foreground only (not with background or tty)."},
                    "network": {
                        "description": "Network for this command (asks unless a rule grants it): true for the host's network, or a list of domain names (`*.example.com` for any name below it) reached through toolvisor's egress proxy (HTTP_PROXY and HTTPS_PROXY are set; other hosts are asked about at connect time or refused, meta.network_denied). Without it the command has no network beyond [network] allow.",
                        "anyOf": [
                            {"type": "boolean"},
                            {"type": "array", "items": {"type": "string", "minLength": 1}, "minItems": 1, "uniqueItems": true}
                        ]
                    },
                    "writable": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 1},
                        "minItems": 1,
                        "uniqueItems": true,
                        "description": "Absolute (or ~/) paths outside the workspace this command may write (asks unless a rule grants writable); each must exist."
                    },
                    "reveal": {
                        "type": "array",
                        "items": {"type": "string", "minLength": 1},
                        "minItems": 1,
                        "uniqueItems": true,
                        "description": "Hidden paths (workers.exec.hidden: credential stores) this command may see (asks unless a rule grants reveal): each must be a hidden path or a folder holding some."
                    },
                    "expose": {
                        "type": "array",
                        "items": {"type": "integer", "minimum": 1, "maximum": 65535},
                        "minItems": 1,
                        "uniqueItems": true,
                        "description": "With background: publish these ports the process listens on (on the session's loopback, which the session's later commands reach without it) at 127.0.0.1:PORT on the host, until it ends (meta.exposed). Asks unless a rule grants expose."
                    }
                }),
                &["command"],
            ),
        )
    }
}

/// How long `ready` waits when it gives no `timeout_ms` (the worker's default).
pub const READY_WAIT_MS: u64 = 30_000;

/// `ready` only with `background`, and with something to wait for; `yield_ms` only in
/// the foreground; a terminal size only with `tty`; `stdin` counted in bytes.
fn check(args: &Value) -> Result<(), String> {
    let background = args.get("background").and_then(Value::as_bool) == Some(true);
    if let Some(ready) = args.get("ready") {
        if !background {
            return Err("ready waits for a background process: add background: true".into());
        }
        if ready.get("regex").is_none() && ready.get("port").is_none() {
            return Err("ready needs a regex or a port to wait for".into());
        }
        args::compiles(ready, "regex", "ready.regex")?;
    }
    if args.get("stage").and_then(Value::as_bool) == Some(true) {
        if background {
            return Err(
                "stage holds a foreground command's changes: it cannot run in the background"
                    .into(),
            );
        }
        if args.get("tty").and_then(Value::as_bool) == Some(true) {
            return Err(
                "stage holds a foreground command's changes: it cannot run in a terminal (tty)"
                    .into(),
            );
        }
    }
    if background && args.get("yield_ms").is_some() {
        return Err("yield_ms is for a foreground command (background returns at once)".into());
    }
    if args.get("expose").is_some() && !background {
        return Err("expose publishes a background process's ports: add background: true".into());
    }
    check_widening(args)?;
    let sized = args.get("rows").is_some() || args.get("cols").is_some();
    if sized && args.get("tty").and_then(Value::as_bool) != Some(true) {
        return Err("rows and cols are the size of a terminal: add tty: true".into());
    }
    args::input_size(args, "stdin")
}

/// `network` names domains, `writable` and `reveal` absolute or `~/` paths.
fn check_widening(args: &Value) -> Result<(), String> {
    if let Some(Value::Array(domains)) = args.get("network") {
        for d in domains.iter().filter_map(Value::as_str) {
            if !crate::egress::valid_domain(d) {
                return Err(format!(
                    "network: {d:?} is not a domain name (names like api.example.com or *.example.com; addresses are not listed)"
                ));
            }
        }
    }
    for key in ["writable", "reveal"] {
        let paths = args.get(key).and_then(Value::as_array);
        for p in paths.into_iter().flatten().filter_map(Value::as_str) {
            let shaped = p.starts_with('/') || p == "~" || p.starts_with("~/");
            if !shaped || p.contains('\0') || p.split('/').any(|c| c == "..") {
                return Err(format!(
                    "{key}: {p:?} must be an absolute or ~/ path without `..`"
                ));
            }
        }
    }
    Ok(())
}

/// A `writable` or `reveal` path (or a rule's) as a host path: `~` read as this
/// process's `HOME`, `.` dropped; None when it is relative or has `..`. The policy and
/// the exec worker read these paths with this one function, so they agree.
pub fn widening_path(path: &str) -> Option<std::path::PathBuf> {
    use std::path::{Component, PathBuf};
    let expanded = match path.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => {
            PathBuf::from(std::env::var_os("HOME")?).join(rest.trim_start_matches('/'))
        }
        Some(_) => return None,
        None => PathBuf::from(path),
    };
    if !expanded.is_absolute() {
        return None;
    }
    let mut out = PathBuf::from("/");
    for c in expanded.components() {
        match c {
            Component::Normal(n) => out.push(n),
            Component::ParentDir => return None,
            _ => {}
        }
    }
    Some(out)
}

/// `meta` of a result: a process's fields, and a staged command's changes and token.
fn output_fields() -> Vec<(&'static str, Value)> {
    let mut fields = process_fields();
    fields.push((
        "changes",
        json!({
            "type": "array",
            "description": "stage: the workspace changes held (not written)",
            "items": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "kind": {"type": "string", "enum": ["created", "modified", "deleted"]}
                },
                "required": ["path", "kind"]
            }
        }),
    ));
    fields.push((
        "network_denied",
        json!({"type": "array", "items": {"type": "string"}, "description": "hosts (host:port) the command's connections to were refused"}),
    ));
    fields.push((
        "token",
        json!({"type": "string", "description": "stage: single-use; pass it as apply_file_change's `token` to write every held change (or none)"}),
    ));
    fields
}

/// A `ready` waits up to its `timeout_ms`.
fn waits(args: &Value) -> u64 {
    args.get("ready").map_or(0, |r| {
        args::millis(r, "timeout_ms").unwrap_or(READY_WAIT_MS)
    })
}

fn describe(_: &ToolDef, a: &Map<String, Value>, paths: &[String]) -> String {
    let mut out = format!("Run `{}` in {}", text(a, "command"), first(paths));
    if flag(a, "tty") {
        out.push_str(" in a terminal");
    }
    if flag(a, "background") {
        out.push_str(" in the background");
    }
    if flag(a, "stage") {
        out.push_str(", holding its changes");
    }
    if let Some(ports) = a.get("expose").and_then(Value::as_array) {
        let ports: Vec<String> = ports.iter().map(Value::to_string).collect();
        out.push_str(&format!(
            ", publishing port {} on the host's 127.0.0.1",
            ports.join(", ")
        ));
    }
    if a.get("stdin").and_then(Value::as_str).is_some() {
        out.push_str(" with input");
    }
    if let Some(env) = a
        .get("env")
        .and_then(Value::as_object)
        .filter(|e| !e.is_empty())
    {
        let keys: Vec<&str> = env.keys().map(String::as_str).collect();
        out.push_str(&format!(" with env {}", keys.join(", ")));
    }
    out
}
