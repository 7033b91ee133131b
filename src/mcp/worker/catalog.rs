//! The server's tools as its worker announces them, and what the worker keeps to run
//! them.
//!
//! Each tool is announced as `NAME__TOOL` (characters outside `[A-Za-z0-9_-]` become
//! `_`) so that its server is in its name everywhere a name is read (rules like
//! `NAME__*`, the audit log, an MCP host's list). The worker keeps the way back to the
//! server's own name, and the tool's `outputSchema` compiled: a result that does not
//! fit it is the server's error (`McpToolError`), not the caller's problem. A tool the
//! server's `tools` allow-list leaves out is not announced; one whose name collides
//! with another of the same server, or whose `outputSchema` does not compile, is left
//! out with a warning. The supervisor checks the rest (name length, schemas, clashes
//! with other groups) as it does for every announced tool.

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::Validator;
use rmcp::model::Tool;
use serde_json::Value;
use toolvisor_protocol::message::Status;
use toolvisor_protocol::worker::{Annotations, AnnouncedTool, McpServerInit, Outcome};
use toolvisor_protocol::{ErrorBody, ErrorType};
use toolvisor_supervisor::registry::validate;

/// Most tools announced at once: a frame must hold them (the supervisor takes fewer
/// still).
pub const MAX_ANNOUNCED: usize = 4096;
/// Longest description announced (longer ones are cut on a character boundary).
const MAX_DESCRIPTION: usize = 16 * 1024;

/// One announced tool, as the worker runs it.
pub struct Served {
    /// The name the server knows the tool by.
    pub original: String,
    /// The tool's `outputSchema`, compiled.
    output: Option<Validator>,
}

/// The tools announced last, by announced name.
#[derive(Default)]
pub struct Catalog {
    by_name: HashMap<String, Served>,
}

/// What one `tools/list` became.
pub struct Listed {
    /// What the `ready` or `tools` frame says.
    pub announced: Vec<AnnouncedTool>,
    /// How to run them.
    pub catalog: Arc<Catalog>,
    /// Tools left out, and why.
    pub warnings: Vec<String>,
}

/// Longest tool name (MCP 2025-11-25).
pub const MAX_TOOL_NAME: usize = 64;
/// Hex digits of the hash that ends a shortened name.
const HASH_DIGITS: usize = 8;

/// `PREFIX` + `TOOL` (`NAME__TOOL` by default), with every character outside
/// `[A-Za-z0-9_-]` as `_`, [shortened](shorten) past 64 characters.
pub fn exposed_name(prefix: &str, tool: &str) -> String {
    let full: String = format!("{prefix}{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    shorten(full, prefix.len(), &format!("{prefix}{tool}"))
}

/// `name` if it has at most 64 characters; else its prefix, as much of the rest as
/// fits, `_` and the first hex digits of the SHA-256 of `original` (the name as the
/// server gave it): the same tool always gets the same name, and two tools that
/// start alike get different ones. `name` is ASCII.
fn shorten(name: String, prefix: usize, original: &str) -> String {
    if name.len() <= MAX_TOOL_NAME {
        return name;
    }
    let hash = toolvisor_supervisor::audit::chain::sha256_hex(original.as_bytes());
    let keep = (MAX_TOOL_NAME - HASH_DIGITS - 1).max(prefix.min(MAX_TOOL_NAME - 4));
    let digits = MAX_TOOL_NAME - keep - 1;
    format!("{}_{}", &name[..keep], &hash[..digits])
}

/// The server's `tools`, as announced and kept.
pub fn build(server: &McpServerInit, tools: Vec<Tool>) -> Listed {
    let mut warnings = Vec::new();
    let mut announced = Vec::new();
    let mut by_name = HashMap::new();
    let allowed = |t: &Tool| {
        server
            .tools
            .as_ref()
            .is_none_or(|a| a.iter().any(|n| *n == t.name))
    };
    let total = tools.len();
    for t in tools.into_iter().filter(allowed) {
        if announced.len() == MAX_ANNOUNCED {
            warnings.push(format!(
                "the server lists {total} tools; only the first {MAX_ANNOUNCED} are announced"
            ));
            break;
        }
        let name = exposed_name(&server.tool_prefix(), &t.name);
        if by_name.contains_key(&name) {
            warnings.push(format!(
                "tool `{}` is left out: another tool of the server is also named `{name}`",
                t.name
            ));
            continue;
        }
        match entry(name.clone(), t) {
            Ok((tool, served)) => {
                announced.push(tool);
                by_name.insert(name, served);
            }
            Err(why) => warnings.push(why),
        }
    }
    Listed {
        announced,
        catalog: Arc::new(Catalog { by_name }),
        warnings,
    }
}

/// One tool as announced and kept, or why it is left out.
fn entry(name: String, t: Tool) -> Result<(AnnouncedTool, Served), String> {
    let output_schema = t.output_schema.map(|s| Value::Object((*s).clone()));
    let output = match &output_schema {
        None => None,
        Some(s) => Some(
            validate::compile(&t.name, s)
                .map_err(|e| format!("tool `{}` is left out: {e}", t.name))?,
        ),
    };
    let a = t.annotations.unwrap_or_default();
    // Without a title of its own, `github__search_issues` reads `github: Search issues`.
    let title = t
        .title
        .or(a.title)
        .unwrap_or_else(|| crate::mcp::listing::title(&name));
    let tool = AnnouncedTool {
        name,
        title: Some(title),
        description: cut(
            t.description.map(|d| d.into_owned()).unwrap_or_default(),
            MAX_DESCRIPTION,
        ),
        input_schema: Value::Object((*t.input_schema).clone()),
        output_schema,
        annotations: Annotations {
            read_only_hint: a.read_only_hint,
            destructive_hint: a.destructive_hint,
            idempotent_hint: a.idempotent_hint,
            open_world_hint: a.open_world_hint,
        },
        // The server's configured risk is the supervisor's to apply.
        risk: None,
        paths: Vec::new(),
    };
    let served = Served {
        original: t.name.into_owned(),
        output,
    };
    Ok((tool, served))
}

impl Catalog {
    /// The tool announced as `name`.
    pub fn find(&self, name: &str) -> Option<&Served> {
        self.by_name.get(name)
    }
}

impl Served {
    /// A tool that declares an `outputSchema` must return `structuredContent` that
    /// fits it (`meta.structured`); one that does not gets its call turned into an
    /// `McpToolError`.
    pub fn check_output(&self, o: &mut Outcome) {
        let Some(v) = &self.output else { return };
        if o.status != Status::Ok {
            return;
        }
        let why = match o.meta.get("structured") {
            None => Some(
                "the server returned no structuredContent, though the tool declares an outputSchema"
                    .to_owned(),
            ),
            Some(s) => validate::check(v, s).err().map(|lines| {
                format!("the server's structuredContent does not match the tool's outputSchema:\n{lines}")
            }),
        };
        if let Some(why) = why {
            let mut err = Outcome::err(ErrorBody::new(ErrorType::McpToolError, why));
            err.meta = std::mem::take(&mut o.meta);
            *o = err;
        }
    }
}

/// `s` cut to at most `max` bytes on a character boundary.
fn cut(mut s: String, max: usize) -> String {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn server(allow: Option<&[&str]>) -> McpServerInit {
        McpServerInit {
            name: "gh".into(),
            command: vec!["x".into()],
            url: None,
            env: Default::default(),
            tools: allow.map(|a| a.iter().map(|s| s.to_string()).collect()),
            startup_timeout_ms: 1000,
            sandbox: true,
            network: false,
            prefix: None,
        }
    }

    fn tool(v: Value) -> Tool {
        serde_json::from_value(v).unwrap()
    }

    fn plain(name: &str) -> Tool {
        tool(json!({"name": name, "inputSchema": {"type": "object"}}))
    }

    #[test]
    fn long_names_are_shortened_stably_with_a_hash() {
        let long = "a_tool_with_a_name_much_longer_than_any_client_would_like_to_see";
        let a = exposed_name("github__", long);
        assert_eq!(a.len(), MAX_TOOL_NAME);
        assert!(a.starts_with("github__a_tool_with"));
        assert_eq!(a, exposed_name("github__", long), "stable");
        let b = exposed_name("github__", &format!("{long}2"));
        assert_ne!(a, b, "names that start alike differ");
        assert_eq!(b.len(), MAX_TOOL_NAME);
        let prefix = format!("{}__", "s".repeat(58));
        let c = exposed_name(&prefix, long);
        assert!(c.len() == MAX_TOOL_NAME && c.starts_with(&prefix), "{c}");
        assert_eq!(exposed_name("gh__", &"x".repeat(60)).len(), 64);
        assert_eq!(exposed_name("gh__", &"x".repeat(59)).len(), 63);
    }

    #[test]
    fn names_are_sanitised_and_namespaced() {
        assert_eq!(exposed_name("gh__", "search_issues"), "gh__search_issues");
        assert_eq!(exposed_name("gh__", "a.b/c d"), "gh__a_b_c_d");
        assert_eq!(exposed_name("my-srv__", "x-y"), "my-srv__x-y");
        assert_eq!(exposed_name("", "x-y"), "x-y");
    }

    #[test]
    fn tools_are_announced_under_their_server_and_kept_by_that_name() {
        let listed = build(
            &server(None),
            vec![
                tool(json!({
                    "name": "search", "description": "finds",
                    "inputSchema": {"type": "object"},
                    "annotations": {"title": "Search", "destructiveHint": false}
                })),
                plain("a.b"),
                plain("a_b"),
                tool(
                    json!({"name": "bad", "inputSchema": {"type": "object"}, "outputSchema": {"type": 12}}),
                ),
            ],
        );
        let names: Vec<&str> = listed.announced.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["gh__search", "gh__a_b"]);
        assert_eq!(listed.warnings.len(), 2, "{:?}", listed.warnings);
        let search = &listed.announced[0];
        assert_eq!(search.title.as_deref(), Some("Search"));
        assert_eq!(listed.announced[1].title.as_deref(), Some("gh: A b"));
        assert_eq!(search.annotations.destructive_hint, Some(false));
        assert_eq!(search.risk, None);
        assert_eq!(listed.catalog.find("gh__a_b").unwrap().original, "a.b");
        assert!(listed.catalog.find("gh__bad").is_none());
    }

    #[test]
    fn the_allow_list_and_the_cap_hold() {
        let listed = build(&server(Some(&["keep"])), vec![plain("keep"), plain("drop")]);
        assert_eq!(listed.announced.len(), 1);
        assert!(listed.warnings.is_empty());
        let many = (0..MAX_ANNOUNCED + 3)
            .map(|i| plain(&format!("t{i}")))
            .collect();
        let listed = build(&server(None), many);
        assert_eq!(listed.announced.len(), MAX_ANNOUNCED);
        assert_eq!(listed.warnings.len(), 1);
    }

    #[test]
    fn results_are_checked_against_the_output_schema() {
        let listed = build(
            &server(None),
            vec![tool(json!({
                "name": "typed", "inputSchema": {"type": "object"},
                "outputSchema": {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
            }))],
        );
        let typed = listed.catalog.find("gh__typed").unwrap();
        let mut good = Outcome::ok("x".into());
        good.meta.insert("structured".into(), json!({"n": 1}));
        typed.check_output(&mut good);
        assert_eq!(good.status, Status::Ok);
        let mut lie = Outcome::ok("x".into());
        lie.meta.insert("structured".into(), json!({"n": "one"}));
        typed.check_output(&mut lie);
        assert_eq!(lie.error.unwrap().kind, ErrorType::McpToolError);
        let mut none = Outcome::ok("x".into());
        typed.check_output(&mut none);
        assert_eq!(none.status, Status::Error);
    }
}
