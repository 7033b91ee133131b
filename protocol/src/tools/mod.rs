//! The built-in tools: one module per tool holds its whole definition (schema,
//! risk, hints, path parameters, describer, how the supervisor routes it), and
//! [`builtin`] registers each with one line. What a definition holds: [`def`].
//!
//! A tool's implementation runs in a worker process (`workers/src/<group>/`), which
//! finds it by the module's `NAME`.

pub mod args;
pub mod def;

pub mod activate_skill;
pub mod apply_file_change;
pub mod edit_file;
pub mod glob;
pub mod grep;
pub mod kill_process;
pub mod list_processes;
pub mod ls;
pub mod memory;
pub mod preview_edit_file;
pub mod preview_write_file;
pub mod read_file;
pub mod read_many_files;
pub mod read_output;
pub mod run_command;
pub mod web_fetch;
pub mod web_search;
pub mod write_file;
pub mod write_input;
pub mod write_todos;

pub use def::{ConfirmPreview, Hints, PathParam, PolicyTraits, Risk, Route, ToolDef};

/// The built-in group of the read-only tools (read, list, search).
pub const SEARCH: &str = "search";
/// The built-in group of the tools that write files.
pub const EDIT: &str = "edit";
/// The built-in group of the tools that run commands (and manage background ones).
pub const EXEC: &str = "exec";
/// The web tools: their own worker, no write access anywhere.
pub const WEB: &str = "web";
/// The agent's durable memory and todo list: the only writer of its store.
pub const STATE: &str = "state";
/// Tools about the agent's own context (skills); its worker announces them.
pub const META: &str = "meta";

/// A built-in group as code matches it. Its spelling on the wire and in the config is
/// [`Group::as_str`], the constants above; an external or MCP group is none of these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Group {
    /// [`SEARCH`].
    Search,
    /// [`EDIT`].
    Edit,
    /// [`EXEC`].
    Exec,
    /// [`WEB`].
    Web,
    /// [`STATE`].
    State,
    /// [`META`].
    Meta,
}

impl Group {
    /// Every built-in group.
    pub const ALL: [Group; 6] = [
        Group::Search,
        Group::Edit,
        Group::Exec,
        Group::Web,
        Group::State,
        Group::Meta,
    ];

    /// Its wire and config name.
    pub fn as_str(self) -> &'static str {
        match self {
            Group::Search => SEARCH,
            Group::Edit => EDIT,
            Group::Exec => EXEC,
            Group::Web => WEB,
            Group::State => STATE,
            Group::Meta => META,
        }
    }

    /// The built-in group named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Group> {
        Group::ALL.into_iter().find(|g| g.as_str() == name)
    }
}

/// Largest `stdin` of `run_command` and `data` of `write_input`, in bytes (the
/// schema's `maxLength` counts characters; the supervisor and the worker count bytes).
pub const MAX_INPUT_BYTES: usize = 1 << 20;

/// Longest `wait_ms` of `read_output`.
pub const MAX_WAIT_MS: u64 = 60_000;

/// The signals `kill_process` sends by name.
pub const SIGNALS: &[&str] = &["INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2"];

/// Every built-in tool, sorted by name.
pub fn builtin() -> Vec<ToolDef> {
    let mut tools = vec![
        read_file::def(),
        read_many_files::def(),
        ls::def(),
        glob::def(),
        grep::def(),
        write_file::def(),
        edit_file::def(),
        preview_write_file::def(),
        preview_edit_file::def(),
        apply_file_change::def(),
        run_command::def(),
        list_processes::def(),
        read_output::def(),
        kill_process::def(),
        web_fetch::def(),
        web_search::def(),
        memory::def(),
        write_todos::def(),
        write_input::def(),
    ];
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools
}

/// Built-in tools whose worker announces them, as templates: the worker names the
/// tool and gives its schema and description (what it found: the workspace's skills);
/// everything else — risk, policy traits, describer, hints — is the template's.
pub fn announced() -> Vec<ToolDef> {
    vec![activate_skill::def(&[])]
}

/// The definition of a built-in tool of `group` as its worker announced it: the
/// template's, with the announced description and schema. `None` when `group` has no
/// such template (a built-in worker cannot invent tools).
pub fn from_announcement(
    group: &str,
    name: &str,
    description: &str,
    parameters: &serde_json::Value,
) -> Option<ToolDef> {
    let mut def = announced()
        .into_iter()
        .find(|t| t.group == group && t.name == name)?;
    def.description = description.to_owned();
    def.parameters = parameters.clone();
    Some(def)
}

/// Find a tool by name or alias.
pub fn find<'a>(tools: &'a [ToolDef], name: &str) -> Option<&'a ToolDef> {
    tools.iter().find(|t| t.answers_to(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn groups_are_matched_as_they_are_spelled() {
        for g in Group::ALL {
            assert_eq!(Group::parse(g.as_str()), Some(g));
        }
        assert_eq!(Group::parse("mcp:docs"), None);
    }

    #[test]
    fn builtin_tools_are_sorted_unique_closed_and_grouped() {
        let tools = builtin();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
        // The golden list: a tool added or removed is a change to see here.
        assert_eq!(
            names,
            [
                "apply_file_change",
                "edit_file",
                "glob",
                "grep",
                "kill_process",
                "list_processes",
                "ls",
                "memory",
                "preview_edit_file",
                "preview_write_file",
                "read_file",
                "read_many_files",
                "read_output",
                "run_command",
                "web_fetch",
                "web_search",
                "write_file",
                "write_input",
                "write_todos",
            ]
        );
        for t in &tools {
            assert_eq!(
                t.parameters["additionalProperties"],
                json!(false),
                "{}",
                t.name
            );
            assert!(
                [SEARCH, EDIT, EXEC, WEB, STATE].contains(&t.group.as_str()),
                "{}",
                t.name
            );
            for p in &t.paths {
                assert!(
                    t.parameters["properties"].get(&p.name).is_some(),
                    "{}: path parameter {} is not in the schema",
                    t.name,
                    p.name
                );
            }
        }
    }

    #[test]
    fn mcp_listings_say_where_result_fields_are() {
        use crate::message::ToolFormat;
        let tools = builtin();
        let preview = find(&tools, "preview_edit_file")
            .unwrap()
            .listing(ToolFormat::Mcp);
        let d = preview["description"].as_str().unwrap();
        assert!(
            d.contains("(structuredContent.token)") && !d.contains("meta."),
            "{d}"
        );
        assert!(preview["outputSchema"]["properties"]["token"].is_object());
        let read = find(&tools, "read_output")
            .unwrap()
            .listing(ToolFormat::Mcp);
        let p = read["inputSchema"]["properties"]["process"]["description"].as_str();
        assert_eq!(
            p,
            Some("The handle from run_command's structuredContent.process.")
        );
        // The native listing keeps `meta.`.
        let native = find(&tools, "read_output")
            .unwrap()
            .listing(ToolFormat::Native);
        assert!(
            native["description"]
                .as_str()
                .unwrap()
                .contains("meta.next")
        );
        // An MCP server's tool: its own words, and no outputSchema when it has none.
        let mut theirs = ToolDef::new("gh__x", "mcp:gh", "see meta.x", json!({"type": "object"}));
        theirs.output = serde_json::Value::Null;
        let listed = theirs.listing(ToolFormat::Mcp);
        assert_eq!(listed["description"], "see meta.x");
        assert!(listed.get("outputSchema").is_none());
    }

    #[test]
    fn aliases_find_their_tool() {
        let tools = builtin();
        assert_eq!(
            find(&tools, "shell").map(|t| t.name.as_str()),
            Some("run_command")
        );
        assert_eq!(
            find(&tools, "list_dir").map(|t| t.name.as_str()),
            Some("ls")
        );
        assert!(find(&tools, "nope").is_none());
    }

    #[test]
    fn what_a_schema_cannot_say_is_checked_by_the_tool() {
        let tools = builtin();
        let check = |n: &str, a: serde_json::Value| {
            let t = find(&tools, n).unwrap();
            t.check.map_or(Ok(()), |c| c(&a))
        };
        let big = "é".repeat(MAX_INPUT_BYTES / 2 + 1);
        for (tool, args) in [
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
            ("run_command", json!({"command": "x", "stdin": big})),
            (
                "write_input",
                json!({"process": "w0-1", "data": "x", "cols": 5}),
            ),
            ("read_output", json!({"process": "w0-1", "until": "[a-"})),
        ] {
            assert!(check(tool, args.clone()).is_err(), "{tool} {args}");
        }
        for (tool, args) in [
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
        ] {
            assert_eq!(check(tool, args.clone()), Ok(()), "{tool} {args}");
        }
    }

    #[test]
    fn a_confirmation_diff_names_a_preview_of_the_same_arguments() {
        let tools = builtin();
        for t in &tools {
            if let ConfirmPreview::DiffOf(p) = t.confirm_preview {
                let preview = find(&tools, p).expect("the preview tool exists");
                assert_eq!(preview.parameters, t.parameters, "{}", t.name);
                assert_eq!(preview.route, Route::Preview);
            }
        }
    }

    #[test]
    fn envelope_translations_name_a_preview_of_the_same_arguments() {
        let tools = builtin();
        let translated: Vec<&str> = tools
            .iter()
            .filter_map(|t| t.envelope_as.map(|p| (t, p)))
            .map(|(t, p)| {
                let preview = find(&tools, p).expect("the preview tool exists");
                assert_eq!(preview.parameters, t.parameters, "{}", t.name);
                assert_eq!(preview.route, Route::Preview);
                t.name.as_str()
            })
            .collect();
        assert_eq!(translated, ["edit_file", "write_file"]);
    }

    #[test]
    fn an_announcement_fills_only_the_templates_schema_and_description() {
        let skills = [activate_skill::Skill {
            name: "pdf".into(),
            description: "Read PDFs".into(),
        }];
        let full = activate_skill::def(&skills);
        let def = from_announcement(
            META,
            activate_skill::NAME,
            &full.description,
            &full.parameters,
        )
        .expect("a template");
        assert_eq!(def.risk, Risk::Medium);
        assert_eq!(def.policy.familiar_by, Some("name"));
        assert_eq!(def.parameters["properties"]["name"]["enum"], json!(["pdf"]));
        assert!(def.description.contains("- pdf: Read PDFs"));
        assert!(from_announcement(SEARCH, activate_skill::NAME, "", &json!({})).is_none());
        assert!(from_announcement(META, "rm_everything", "", &json!({})).is_none());
    }
}
