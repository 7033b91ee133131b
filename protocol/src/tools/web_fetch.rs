//! `web_fetch`: a web page as readable text. http and https only; addresses on the
//! user's machine, LAN or cloud metadata endpoint are refused unless the operator
//! allows them (`[web] allow_private`).

use serde_json::{Map, Value, json};

use super::args::{self, text};
use super::def::{Hints, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "web_fetch";

/// The longest URL a call may give.
pub const MAX_URL: usize = 8192;

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[
            (
                "url",
                json!({"type": "string", "description": "The final URL, after redirects"}),
            ),
            (
                "http_status",
                json!({"type": "integer", "description": "The HTTP status"}),
            ),
            ("content_type", json!({"type": ["string", "null"]})),
            ("bytes", json!({"type": "integer"})),
            ("redirects", json!({"type": "integer"})),
            (
                "matches",
                json!({"type": "integer", "description": "With selector: elements that matched"}),
            ),
        ]),
        hints: Hints {
            open_world: true,
            ..Hints::READ
        },
        describe,
        ..ToolDef::new(
            NAME,
            super::WEB,
            "Fetch an http(s) URL and return its content as text: HTML as readable text (scripts and styles dropped), or only the text of the elements a CSS selector matches, one per line; other text (plain, JSON) verbatim. maxLength keeps that many characters and says how many were left out; without it, long pages are cut like file contents. Addresses on this machine or a private network are refused.",
            args::object(
                json!({
                    "url": {"type": "string", "minLength": 1, "maxLength": MAX_URL, "description": "The http:// or https:// URL to fetch."},
                    "selector": {"type": "string", "minLength": 1, "maxLength": 1024, "description": "CSS selector: return only the text of the matching elements, one per line (HTML pages only)."},
                    "maxLength": {"type": "integer", "minimum": 1, "description": "Most characters of content to return; the rest is replaced by a note saying how many were left out."}
                }),
                &["url"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    match a.get("selector").and_then(Value::as_str) {
        Some(sel) => format!("Fetch `{}` (elements `{sel}`)", text(a, "url")),
        None => format!("Fetch `{}`", text(a, "url")),
    }
}
