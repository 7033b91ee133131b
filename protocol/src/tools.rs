//! The tool catalog: names, groups, static risk, JSON Schemas (draft 2020-12,
//! `additionalProperties: false`) and the three listing formats.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::message::ToolFormat;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    Low,
    Medium,
    High,
}

impl Risk {
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
}

/// One tool as the catalog describes it.
#[derive(Clone, Debug)]
pub struct ToolSpec {
    pub name: &'static str,
    pub group: &'static str,
    pub risk: Risk,
    pub description: &'static str,
    pub aliases: &'static [&'static str],
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
    pub parameters: Value,
}

/// Largest `stdin` of `run_command` and `data` of `write_input`, in characters (the
/// worker checks the 1 MiB in bytes).
pub const MAX_INPUT_BYTES: usize = 1 << 20;

/// Longest `wait_ms` of `read_output`.
pub const MAX_WAIT_MS: u64 = 60_000;

/// The signals `kill_process` sends by name.
pub const SIGNALS: &[&str] = &["INT", "TERM", "KILL", "HUP", "QUIT", "USR1", "USR2"];

/// The groups, in the order workers are started.
pub const GROUPS: &[&str] = &["search", "edit", "exec"];

fn schema(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

fn path_prop(what: &str) -> Value {
    json!({"type": "string", "minLength": 1, "description": what})
}

fn edits_prop() -> Value {
    json!({
        "type": "array",
        "minItems": 1,
        "description": "Edits applied in order, each to the result of the previous one; all or nothing.",
        "items": {
            "type": "object",
            "properties": {
                "target": {"type": "string", "minLength": 1, "description": "Exact text to replace; must occur once, or use lineHint."},
                "replacement": {"type": "string", "description": "Text that replaces target."},
                "lineHint": {"type": "integer", "minimum": 1, "description": "1-based line near the intended occurrence when target occurs several times."}
            },
            "required": ["target", "replacement"],
            "additionalProperties": false
        }
    })
}

fn write_props() -> Value {
    json!({
        "path": path_prop("File to write, relative to the workspace (or scope:/path)."),
        "content": {"type": "string", "description": "The complete new content."},
        "overwrite": {"type": "boolean", "description": "Replace an existing file (default false)."}
    })
}

fn edit_props() -> Value {
    json!({
        "path": path_prop("File to edit, relative to the workspace (or scope:/path)."),
        "edits": edits_prop()
    })
}

/// Every tool, sorted by name.
pub fn catalog() -> Vec<ToolSpec> {
    let mut tools = vec![
        ToolSpec {
            name: "read_file",
            group: "search",
            risk: Risk::Low,
            description: "Read a text file of the workspace, optionally a range of lines (1-based, inclusive). Large files are truncated with a marker.",
            aliases: &[],
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            parameters: schema(
                json!({
                    "path": path_prop("File to read, relative to the workspace (or scope:/path)."),
                    "startLine": {"type": "integer", "minimum": 1, "description": "First line to return (1-based)."},
                    "endLine": {"type": "integer", "minimum": 1, "description": "Last line to return (inclusive)."}
                }),
                &["path"],
            ),
        },
        ToolSpec {
            name: "read_many_files",
            group: "search",
            risk: Risk::Low,
            description: "Read several files at once; paths may be globs. Each file appears as `=== path ===` followed by its content; a failing file shows `Error: ...`.",
            aliases: &[],
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            parameters: schema(
                json!({
                    "paths": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1}, "description": "Files or glob patterns, relative to the workspace."}
                }),
                &["paths"],
            ),
        },
        ToolSpec {
            name: "ls",
            group: "search",
            risk: Risk::Low,
            description: "List a directory, one entry per line, directories ending in `/`. Honours .gitignore; hides dot-files unless includeHidden.",
            aliases: &["list_dir"],
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            parameters: schema(
                json!({
                    "path": path_prop("Directory to list, relative to the workspace ('.' for its root)."),
                    "recursive": {"type": "boolean", "description": "List subdirectories too (default false)."},
                    "includeHidden": {"type": "boolean", "description": "Show dot-files (default false)."},
                    "maxDepth": {"type": "integer", "minimum": 1, "description": "Deepest level of a recursive listing (default 3)."}
                }),
                &["path"],
            ),
        },
        ToolSpec {
            name: "glob",
            group: "search",
            risk: Risk::Low,
            description: "Find files whose workspace-relative path matches a glob (`**/*.rs`); one path per line, sorted.",
            aliases: &[],
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            parameters: schema(
                json!({
                    "pattern": {"type": "string", "minLength": 1, "description": "Glob pattern; `*` does not cross `/`, `**` does."},
                    "directory": {"type": "string", "description": "Directory to search in (default: the workspace root)."},
                    "maxResults": {"type": "integer", "minimum": 1, "description": "Return at most this many paths."},
                    "includeHidden": {"type": "boolean", "description": "Include dot-files (default false)."}
                }),
                &["pattern"],
            ),
        },
        ToolSpec {
            name: "grep",
            group: "search",
            risk: Risk::Low,
            description: "Search file contents with a regular expression; prints `path:line: text` per match, sorted by path then line.",
            aliases: &[],
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            parameters: schema(
                json!({
                    "pattern": {"type": "string", "minLength": 1, "description": "Regular expression (Rust regex syntax)."},
                    "directory": {"type": "string", "description": "Directory to search in (default: the workspace root)."},
                    "filePattern": {"type": "string", "description": "Glob the files must match: against the file name, or the relative path when it contains `/`."},
                    "caseSensitive": {"type": "boolean", "description": "Match case exactly (default false)."},
                    "maxResults": {"type": "integer", "minimum": 1, "description": "Return at most this many matches (the first in sorted order)."}
                }),
                &["pattern"],
            ),
        },
        ToolSpec {
            name: "write_file",
            group: "edit",
            risk: Risk::Medium,
            description: "Write a whole file atomically, creating parent directories. Refuses to replace an existing file unless overwrite is true.",
            aliases: &[],
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
            parameters: schema(write_props(), &["path", "content"]),
        },
        ToolSpec {
            name: "edit_file",
            group: "edit",
            risk: Risk::Medium,
            description: "Replace exact text in a file. Each target must occur exactly once (or give lineHint); edits apply in order, all or nothing.",
            aliases: &[],
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
            parameters: schema(edit_props(), &["path", "edits"]),
        },
        ToolSpec {
            name: "preview_write_file",
            group: "edit",
            risk: Risk::Low,
            description: "Show the unified diff write_file would make (meta.diff) and a single-use token (meta.token) for apply_file_change.",
            aliases: &[],
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            parameters: schema(write_props(), &["path", "content"]),
        },
        ToolSpec {
            name: "preview_edit_file",
            group: "edit",
            risk: Risk::Low,
            description: "Show the unified diff edit_file would make (meta.diff) and a single-use token (meta.token) for apply_file_change.",
            aliases: &[],
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            parameters: schema(edit_props(), &["path", "edits"]),
        },
        ToolSpec {
            name: "apply_file_change",
            group: "edit",
            risk: Risk::Medium,
            description: "Apply exactly the change a preview showed, by its token. Fails with StaleChange if the file changed since.",
            aliases: &[],
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
            parameters: schema(
                json!({"token": {"type": "string", "minLength": 1, "description": "meta.token of a preview."}}),
                &["token"],
            ),
        },
        ToolSpec {
            name: "run_command",
            group: "exec",
            risk: Risk::High,
            description: "Run a shell command (bash -c) in the workspace sandbox. Output is stdout and stderr interleaved; long output keeps its head and tail and the rest goes to a file named in truncated.full_output. stdin is closed unless given; tty runs it in a terminal; background (or yield_ms) turns it into a process to read, write to and signal by its handle (meta.process); ready waits until a background process is up.",
            aliases: &["shell"],
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: true,
            parameters: schema(
                json!({
                    "command": {"type": "string", "minLength": 1, "description": "The command line, run by bash -c."},
                    "cwd": {"type": "string", "description": "Working directory inside the workspace (default: its root)."},
                    "timeout": {"type": "integer", "minimum": 1, "description": "Milliseconds before the command is killed (default 30000)."},
                    "background": {"type": "boolean", "description": "Start and return at once with meta.process; read its output with read_output, type into it with write_input."},
                    "env": {"type": "object", "additionalProperties": {"type": "string"}, "description": "Extra environment variables."},
                    "stdin": {"type": "string", "maxLength": MAX_INPUT_BYTES, "description": "Text written to the command's standard input, which is then closed (with tty: typed, then end-of-file)."},
                    "tty": {"type": "boolean", "description": "Run in a pseudo-terminal (TERM=xterm-256color; one output stream; escape sequences stripped from content)."},
                    "rows": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Terminal rows with tty (default 24)."},
                    "cols": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Terminal columns with tty (default 80)."},
                    "yield_ms": {"type": "integer", "minimum": 1, "description": "A command still running after this many ms becomes a background process: the call returns its output so far and meta.process."},
                    "ready": {
                        "type": "object",
                        "description": "With background: return once the output matches regex, or something listens on port, or timeout_ms passes (meta.ready).",
                        "properties": {
                            "regex": {"type": "string", "minLength": 1, "description": "Regular expression tested on each line of output."},
                            "port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "A TCP port the process listens on when it is up (in its own network namespace)."},
                            "timeout_ms": {"type": "integer", "minimum": 1, "description": "How long to wait at most (default 30000)."}
                        },
                        "additionalProperties": false
                    }
                }),
                &["command"],
            ),
        },
        ToolSpec {
            name: "list_processes",
            group: "exec",
            risk: Risk::Low,
            description: "List background processes: handle, command, pid, start time, state, exit code and output size.",
            aliases: &[],
            read_only: true,
            destructive: false,
            idempotent: true,
            open_world: false,
            parameters: schema(json!({}), &[]),
        },
        ToolSpec {
            name: "read_output",
            group: "exec",
            risk: Risk::Low,
            description: "Read a background process's output from byte offset `since` (default: where your last read stopped); meta.next is the offset of the next page. wait_ms waits for new output or the exit; until waits for a line matching a regex and ends the page with it.",
            aliases: &[],
            read_only: true,
            destructive: false,
            idempotent: false,
            open_world: false,
            parameters: schema(
                json!({
                    "process": {"type": "string", "minLength": 1, "description": "The handle from run_command's meta.process."},
                    "since": {"type": "integer", "minimum": 0, "description": "Byte offset to read from."},
                    "wait_ms": {"type": "integer", "minimum": 0, "maximum": MAX_WAIT_MS, "description": "Wait up to this long for new output (or the exit) when there is none yet."},
                    "until": {"type": "string", "minLength": 1, "description": "Regular expression: wait (wait_ms, default 30000) until an unread line matches; the page ends with that line (meta.matched)."}
                }),
                &["process"],
            ),
        },
        ToolSpec {
            name: "write_input",
            group: "exec",
            risk: Risk::High,
            description: "Type into a background process: write data to its standard input (its terminal with tty: \\n is Enter, \\u0003 is Ctrl-C). close ends the input after the data (with tty: end-of-file, Ctrl-D).",
            aliases: &[],
            read_only: false,
            destructive: true,
            idempotent: false,
            open_world: false,
            parameters: schema(
                json!({
                    "process": {"type": "string", "minLength": 1, "description": "The handle from run_command's meta.process."},
                    "data": {"type": "string", "maxLength": MAX_INPUT_BYTES, "description": "The text to write (at most 1 MiB)."},
                    "close": {"type": "boolean", "description": "Close standard input after the data (default false)."},
                    "rows": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "With cols: resize the process's terminal first."},
                    "cols": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "With rows: resize the process's terminal first."}
                }),
                &["process", "data"],
            ),
        },
        ToolSpec {
            name: "kill_process",
            group: "exec",
            risk: Risk::High,
            description: "Stop a background process and everything it started (TERM, then KILL after 2 s; returns when it is gone), or send it one signal (INT is Ctrl-C).",
            aliases: &[],
            read_only: false,
            destructive: true,
            idempotent: true,
            open_world: false,
            parameters: schema(
                json!({
                    "process": {"type": "string", "minLength": 1, "description": "The handle from run_command's meta.process."},
                    "signal": {"type": "string", "enum": SIGNALS, "description": "Send only this signal to the process group and return once delivered."}
                }),
                &["process"],
            ),
        },
    ];
    tools.sort_by_key(|t| t.name);
    tools
}

/// Find a tool by name or alias.
pub fn find<'a>(tools: &'a [ToolSpec], name: &str) -> Option<&'a ToolSpec> {
    tools
        .iter()
        .find(|t| t.name == name || t.aliases.contains(&name))
}

impl ToolSpec {
    /// This tool in one of the listing formats.
    pub fn listing(&self, format: ToolFormat) -> Value {
        match format {
            ToolFormat::Native => json!({
                "name": self.name,
                "description": self.description,
                "group": self.group,
                "risk": self.risk.as_str(),
                "parameters": self.parameters,
                "aliases": self.aliases,
            }),
            ToolFormat::Openai => json!({
                "type": "function",
                "function": {
                    "name": self.name,
                    "description": self.description,
                    "parameters": self.parameters,
                }
            }),
            ToolFormat::Mcp => json!({
                "name": self.name,
                "description": self.description,
                "inputSchema": self.parameters,
                "annotations": {
                    "readOnlyHint": self.read_only,
                    "destructiveHint": self.destructive,
                    "idempotentHint": self.idempotent,
                    "openWorldHint": self.open_world,
                }
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalog_is_sorted_unique_and_closed() {
        let tools = catalog();
        let names: Vec<_> = tools.iter().map(|t| t.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
        assert_eq!(names.len(), 15);
        for t in &tools {
            assert_eq!(
                t.parameters["additionalProperties"],
                json!(false),
                "{}",
                t.name
            );
            assert!(GROUPS.contains(&t.group));
        }
    }

    #[test]
    fn aliases_find_their_tool() {
        let tools = catalog();
        assert_eq!(find(&tools, "shell").unwrap().name, "run_command");
        assert_eq!(find(&tools, "list_dir").unwrap().name, "ls");
        assert!(find(&tools, "nope").is_none());
    }
}
