//! `write_input`: type into a background process (its standard input, or its
//! terminal). Typing into a shell is running commands: it asks in every mode unless a
//! rule allows it, and rules may test `data` and `process`.

use serde_json::{Map, Value, json};

use super::args::{self, flag, text};
use super::def::{Hints, PolicyTraits, Risk, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "write_input";

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: {
            let mut f = super::def::process_fields();
            f.extend([(
                "written",
                json!({"type": "integer", "description": "Bytes written"}),
            )]);
            super::def::result_schema(&f)
        },
        risk: Risk::High,
        hints: Hints {
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
        },
        describe,
        policy: PolicyTraits {
            always_asks: true,
            ..PolicyTraits::default()
        },
        handle_arg: Some("process"),
        acts_on_process: true,
        check: Some(check),
        ..ToolDef::new(
            NAME,
            super::EXEC,
            "Type into a background process: write data to its standard input (its terminal with tty: \\n is Enter, \\u0003 is Ctrl-C). close ends the input after the data (with tty: end-of-file, Ctrl-D).",
            args::object(
                json!({
                    "process": args::process(),
                    "data": {"type": "string", "maxLength": super::MAX_INPUT_BYTES, "description": "The text to write (at most 1 MiB)."},
                    "close": {"type": "boolean", "description": "Close standard input after the data (default false)."},
                    "rows": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "With cols: resize the process's terminal first."},
                    "cols": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "With rows: resize the process's terminal first."}
                }),
                &["process", "data"],
            ),
        )
    }
}

/// A terminal size needs both numbers; `data` is counted in bytes.
fn check(args: &Value) -> Result<(), String> {
    if args.get("rows").is_some() != args.get("cols").is_some() {
        return Err("rows and cols go together".into());
    }
    args::input_size(args, "data")
}

/// What is typed, control characters shown escaped, long data cut.
fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    const SHOWN: usize = 200;
    let data = text(a, "data");
    let shown: String = data.escape_debug().take(SHOWN).collect();
    let more = if data.escape_debug().count() > SHOWN {
        "…"
    } else {
        ""
    };
    let mut out = format!(
        "Type \"{shown}{more}\" into background process `{}`",
        text(a, "process")
    );
    if flag(a, "close") {
        out.push_str(", then end its input");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_typed_is_shown_escaped() {
        let d = def();
        let a = json!({"process": "w0-1", "data": "y\n\u{3}", "close": true});
        let text = (d.describe)(&d, a.as_object().unwrap(), &[]);
        assert_eq!(
            text,
            "Type \"y\\n\\u{3}\" into background process `w0-1`, then end its input"
        );
        assert!(d.policy.always_asks && d.risk == Risk::High);
    }
}
