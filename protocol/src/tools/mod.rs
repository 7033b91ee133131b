//! The built-in tools: one module per tool holds its whole definition (schema,
//! risk, hints, path parameters, describer, how the supervisor routes it), and
//! [`builtin`] registers each with one line. What a definition holds: [`def`].
//!
//! A tool's implementation runs in a worker process (`workers/src/<group>/`), which
//! finds it by the module's `NAME`.

pub mod args;
pub mod def;

pub mod apply_file_change;
pub mod edit_file;
pub mod glob;
pub mod grep;
pub mod kill_process;
pub mod list_processes;
pub mod ls;
pub mod preview_edit_file;
pub mod preview_write_file;
pub mod read_file;
pub mod read_many_files;
pub mod read_output;
pub mod run_command;
pub mod write_file;

pub use def::{ConfirmPreview, Hints, PathParam, PolicyTraits, Risk, Route, ToolDef};

/// The built-in groups.
pub const SEARCH: &str = "search";
pub const EDIT: &str = "edit";
pub const EXEC: &str = "exec";

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
    ];
    tools.sort_by(|a, b| a.name.cmp(&b.name));
    tools
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
    fn builtin_tools_are_sorted_unique_closed_and_grouped() {
        let tools = builtin();
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), 14);
        for t in &tools {
            assert_eq!(
                t.parameters["additionalProperties"],
                json!(false),
                "{}",
                t.name
            );
            assert!(
                [SEARCH, EDIT, EXEC].contains(&t.group.as_str()),
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
}
