//! `web_search`: results from the operator's SearXNG-compatible endpoint
//! (`[web] search_url`).

use serde_json::{Map, Value, json};

use super::args::{self, text};
use super::def::{Hints, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "web_search";

/// Results when `numResults` is left out.
pub const DEFAULT_RESULTS: u64 = 5;
/// The most results a call may ask for.
pub const MAX_RESULTS: u64 = 20;

/// The tool's whole definition, registered by [`super::builtin`].
pub fn def() -> ToolDef {
    ToolDef {
        output: super::def::result_schema(&[("results", json!({"type": "integer"}))]),
        hints: Hints {
            open_world: true,
            ..Hints::READ
        },
        describe,
        ..ToolDef::new(
            NAME,
            super::WEB,
            "Search the web. Each result is `N. title`, then its URL and a snippet on indented lines; results are separated by a blank line.",
            args::object(
                json!({
                    "query": {"type": "string", "minLength": 1, "maxLength": 2048, "description": "What to search for."},
                    "numResults": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS, "description": "How many results at most (default 5, at most 20)."}
                }),
                &["query"],
            ),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    format!("Search the web for `{}`", text(a, "query"))
}
