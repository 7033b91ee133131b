//! What a tool is, as every part of toolvisor reads it: one [`ToolDef`] per tool.
//!
//! Listing, validation, policy, confirmation previews, audit and routing all read the
//! definition; none of them matches a tool's name. A built-in tool's definition lives
//! in its own module beside this one; an external worker's or an MCP server's tools
//! are built from what the worker announces ([`crate::worker::AnnouncedTool`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::message::ToolFormat;

/// How much a call can hurt, before its arguments are looked at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Risk {
    /// Allowed without asking in the default (`auto`) mode.
    Low,
    /// Asks in the default mode; the `workspace` mode allows it.
    Medium,
    /// Asks unless a rule allows it (or the mode is `yolo`).
    High,
}

impl Risk {
    /// The wire spelling (`low`, `medium`, `high`).
    pub fn as_str(self) -> &'static str {
        match self {
            Risk::Low => "low",
            Risk::Medium => "medium",
            Risk::High => "high",
        }
    }
}

/// The MCP annotations of a tool: what a host may assume about a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Hints {
    /// The tool changes nothing.
    pub read_only: bool,
    /// The tool may destroy data (overwrite, delete, kill).
    pub destructive: bool,
    /// Calling it twice with the same arguments does no more than once.
    pub idempotent: bool,
    /// The tool reaches beyond the workspace (the network, other systems).
    pub open_world: bool,
}

impl Hints {
    /// A tool that only reads: not destructive, idempotent, closed world.
    pub const READ: Hints = Hints {
        read_only: true,
        destructive: false,
        idempotent: true,
        open_world: false,
    };
}

/// A parameter that names a path: the policy resolves it against the roots (rules
/// match the resolved form; paths outside every root are refused before anyone is
/// asked) and a confirmation lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathParam {
    /// The argument's name in the schema.
    pub name: String,
    /// The value a call that leaves the parameter out is treated as having.
    pub default: Option<String>,
}

impl PathParam {
    /// A path parameter a call must give (or that names nothing when absent).
    pub fn new(name: &str) -> PathParam {
        PathParam {
            name: name.to_owned(),
            default: None,
        }
    }

    /// A path parameter that means `default` when left out.
    pub fn or(name: &str, default: &str) -> PathParam {
        PathParam {
            name: name.to_owned(),
            default: Some(default.to_owned()),
        }
    }
}

/// One line for the person asked to confirm a call: what it will do. Gets the
/// arguments and the resolved paths (in the order of [`ToolDef::paths`]).
pub type Describe = fn(&ToolDef, &Map<String, Value>, &[String]) -> String;

/// What a JSON Schema cannot say about a call's arguments (a regex that must compile,
/// arguments that only go together); `Err` says what to change. Checked with the
/// schema, before the policy is asked.
pub type Check = fn(&Value) -> Result<(), String>;

/// How long, in milliseconds, a call waits by its arguments (a long poll); its
/// deadline makes room for that wait when the call names no `timeout_ms`.
pub type Waits = fn(&Value) -> u64;

/// How the supervisor runs a call of the tool, beyond "send it to a worker".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// Run on one worker of the tool's group.
    Worker,
    /// A preview: runs on one worker; the supervisor keeps the change it shows and
    /// answers a single-use token for [`Route::ApplyPreview`].
    Preview,
    /// Apply the change a preview kept, named by the `token` argument; the worker runs
    /// it as its internal operation `op`.
    ApplyPreview {
        /// The worker's internal operation that applies the kept change.
        op: &'static str,
    },
    /// Ask every ready worker of the group and merge their answers (each worker knows
    /// only its own background jobs).
    EveryWorker,
}

/// What a confirmation shows besides the description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfirmPreview {
    /// The description says enough.
    None,
    /// The text of this argument (a command).
    Arg(&'static str),
    /// The diff the named preview tool shows for the same arguments.
    DiffOf(&'static str),
    /// The diff of the change a preview kept (by the call's token).
    PendingChange,
    /// The call's arguments as indented JSON (cut to 8 KiB): a tool toolvisor knows
    /// only by what its worker announced (an external worker's, an MCP server's).
    Arguments,
}

/// How the policy reads the tool's calls, beyond its risk and paths.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyTraits {
    /// The `command` argument is a bash command, decided part by part and checked for
    /// hazards (docs/POLICY.md).
    pub shell: bool,
    /// Asks in every mode unless a rule allows it.
    pub always_asks: bool,
    /// Changes the files its path parameters name (an edit under `public:/` is high risk).
    pub edits_paths: bool,
    /// The tool's own risk holds only until a call of it with the same value of this
    /// argument has succeeded in the session; later such calls are low risk (a skill is
    /// medium on its first activation, then low).
    pub familiar_by: Option<&'static str>,
}

/// One tool, whatever its origin.
#[derive(Clone, Debug)]
pub struct ToolDef {
    /// The canonical name: what the registry, the rules and the audit log use.
    pub name: String,
    /// Its group: the pool of workers that runs it (`search`, `mcp:github`, …).
    pub group: String,
    /// A short human title (MCP `title`).
    pub title: String,
    /// What the model reads to decide when and how to call the tool.
    pub description: String,
    /// JSON Schema (draft 2020-12) of the arguments; calls are validated against it.
    pub parameters: Value,
    /// JSON Schema of the structured result (MCP `outputSchema`).
    pub output: Value,
    /// The risk of any call; [`PolicyTraits`] and the paths may raise it per call.
    pub risk: Risk,
    /// What a host may assume about a call.
    pub hints: Hints,
    /// Other names that find the tool (older or other agents' spellings).
    pub aliases: Vec<String>,
    /// The parameters that name paths, resolved and confined by the policy.
    pub paths: Vec<PathParam>,
    /// The one-line description a confirmation shows.
    pub describe: Describe,
    /// How the supervisor runs a call.
    pub route: Route,
    /// What a confirmation shows besides the description.
    pub confirm_preview: ConfirmPreview,
    /// How the policy reads a call.
    pub policy: PolicyTraits,
    /// An argument that bounds the call's deadline in milliseconds (`timeout`).
    pub timeout_arg: Option<&'static str>,
    /// An argument holding a background process handle, which names the worker that
    /// must run the call (`process`).
    pub handle_arg: Option<&'static str>,
    /// Inside an envelope (the legacy translation of seed 003), a call of this tool is
    /// staged as this preview tool instead, with the same arguments.
    pub envelope_as: Option<&'static str>,
    /// Acts on a background process: only the session that started it may, unless the
    /// call carries a person's grant token for this tool (a takeover).
    pub acts_on_process: bool,
    /// What the schema cannot check about the arguments, checked with it.
    pub check: Option<Check>,
    /// How long the call may wait by its arguments, so its deadline leaves room.
    pub waits: Option<Waits>,
}

impl ToolDef {
    /// A definition with the defaults of a plain tool: low risk, no paths, read-only
    /// hints, routed to one worker, described generically. Built-in modules and
    /// announced tools fill in the rest.
    pub fn new(name: &str, group: &str, description: &str, parameters: Value) -> ToolDef {
        ToolDef {
            name: name.to_owned(),
            group: group.to_owned(),
            title: title_of(name),
            description: description.to_owned(),
            parameters,
            output: result_schema(&[]),
            risk: Risk::Low,
            hints: Hints::READ,
            aliases: Vec::new(),
            paths: Vec::new(),
            describe: describe_call,
            route: Route::Worker,
            confirm_preview: ConfirmPreview::None,
            policy: PolicyTraits::default(),
            timeout_arg: None,
            handle_arg: None,
            envelope_as: None,
            acts_on_process: false,
            check: None,
            waits: None,
        }
    }

    /// Whether a crashed worker may run the call again: it only reads, at low risk.
    pub fn rerunnable(&self) -> bool {
        self.hints.read_only && self.risk == Risk::Low
    }

    /// Whether `name` is this tool's name or one of its aliases.
    pub fn answers_to(&self, name: &str) -> bool {
        self.name == name || self.aliases.iter().any(|a| a == name)
    }

    /// This tool in one of the listing formats.
    pub fn listing(&self, format: ToolFormat) -> Value {
        match format {
            ToolFormat::Native => json!({
                "name": self.name,
                "title": self.title,
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
            ToolFormat::Mcp => {
                // An MCP server's tool is listed as its server lists it; toolvisor's own
                // say `meta.X` natively, which MCP hosts find in structuredContent.
                let own = !self.group.starts_with(MCP_GROUP_PREFIX);
                let (description, parameters) = if own {
                    (
                        mcp_wording(&self.description),
                        serde_json::to_string(&self.parameters)
                            .ok()
                            .and_then(|s| serde_json::from_str(&s.replace(META, STRUCTURED)).ok())
                            .unwrap_or_else(|| self.parameters.clone()),
                    )
                } else {
                    (self.description.clone(), self.parameters.clone())
                };
                let mut out = json!({
                    "name": self.name,
                    "title": self.title,
                    "description": description,
                    "inputSchema": parameters,
                    "annotations": {
                        "title": self.title,
                        "readOnlyHint": self.hints.read_only,
                        "destructiveHint": self.hints.destructive,
                        "idempotentHint": self.hints.idempotent,
                        "openWorldHint": self.hints.open_world,
                    }
                });
                // A tool without one (an MCP server's that declares none) lists none.
                if !self.output.is_null() {
                    out["outputSchema"] = self.output.clone();
                }
                out
            }
        }
    }
}

/// The group prefix of an MCP server's tools (`mcp:NAME`).
pub const MCP_GROUP_PREFIX: &str = "mcp:";

/// A built-in tool's wording as an MCP host reads it: the result fields a native
/// client finds in `meta` (`meta.token`) are in `structuredContent` there, and repeated
/// in the text's last line (`[token: …]`) for hosts that show the model only text.
fn mcp_wording(text: &str) -> String {
    if !text.contains(META) {
        return text.to_owned();
    }
    let mut out = text.replace(META, STRUCTURED);
    out.push_str(
        " (Result fields named structuredContent.X are also in the text's last line, as [X: value].)",
    );
    out
}

/// Where a native client finds a result field, and where an MCP host does.
const META: &str = "meta.";
const STRUCTURED: &str = "structuredContent.";

/// `read_many_files` → `Read many files`.
fn title_of(name: &str) -> String {
    let spaced = name.replace(['_', '-'], " ");
    let mut chars = spaced.chars();
    match chars.next() {
        Some(c) => c.to_uppercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// The describer of a tool without one of its own: its name and its paths.
pub fn describe_call(def: &ToolDef, _args: &Map<String, Value>, paths: &[String]) -> String {
    match paths {
        [] => format!("Call `{}`", def.name),
        _ => format!("Call `{}` on {}", def.name, quoted(paths)),
    }
}

/// Items as `` `a`, `b` ``.
pub fn quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The keys toolvisor's own part of a structured result uses; a tool's `meta` field of
/// the same name is carried under [`carried_as`] instead, so neither hides the other.
pub const ENVELOPE_KEYS: &[&str] = &[
    "status",
    "error",
    "truncated",
    "full_output",
    "structured",
    "duration_ms",
    "audit_seq",
];

/// The key a result's `meta` field `key` has in the structured result (MCP
/// `structuredContent`): its own, unless toolvisor's part uses it — then web_fetch's
/// HTTP `status` is `http_status`, a background process's `error` is `process_error`,
/// and any other clash gets a `meta_` prefix.
pub fn carried_as(key: &str) -> std::borrow::Cow<'_, str> {
    match key {
        "status" => "http_status".into(),
        "error" => "process_error".into(),
        k if ENVELOPE_KEYS.contains(&k) => format!("meta_{k}").into(),
        k => k.into(),
    }
}

/// The fields a result about a background process carries (run_command in the
/// background, read_output, write_input, kill_process), by their structured names.
pub fn process_fields() -> Vec<(&'static str, Value)> {
    vec![
        (
            "process",
            json!({"type": "string", "description": "The background process's handle: pass it as `process` to read_output, write_input, kill_process"}),
        ),
        ("pid", json!({"type": "integer"})),
        (
            "running",
            json!({"type": "boolean", "description": "Whether the process still runs"}),
        ),
        (
            "exit_code",
            json!({"type": ["integer", "null"], "description": "The exit code (null while it runs or when a signal ended it)"}),
        ),
        (
            "signal",
            json!({"type": "integer", "description": "The signal that ended it"}),
        ),
        ("tty", json!({"type": "boolean"})),
        ("stdin_open", json!({"type": "boolean"})),
        (
            "ready",
            json!({"type": ["boolean", "null"], "description": "Whether its `ready` condition was met (null without one)"}),
        ),
        (
            "next",
            json!({"type": "integer", "minimum": 0, "description": "The byte offset of the next page: pass it as read_output's `since`"}),
        ),
        (
            "resources",
            json!({"type": "object", "properties": {"peak_rss_bytes": {"type": "integer"}, "cpu_ms": {"type": "integer"}}}),
        ),
        (
            "process_error",
            json!({"type": "object", "description": "Why the process failed (e.g. a limit stopped it)", "properties": {"type": {"type": "string"}, "message": {"type": "string"}}}),
        ),
    ]
}

/// The fields of a preview's result: the single-use token apply_file_change takes.
pub fn preview_fields() -> Vec<(&'static str, Value)> {
    vec![
        (
            "token",
            json!({"type": "string", "description": "Single-use: pass it as apply_file_change's `token` to make exactly this change"}),
        ),
        ("path", json!({"type": "string"})),
        (
            "diff",
            json!({"type": "string", "description": "The change, as a unified diff"}),
        ),
        (
            "before_sha256",
            json!({"type": ["string", "null"], "description": "The file's hash now (null: it does not exist)"}),
        ),
    ]
}

/// The schema of a result's structured form (the MCP `structuredContent`): the
/// status and what went wrong, the numbers every call has, and `extra` properties of
/// the tool's own — its `meta` fields, by [`carried_as`] names (e.g. a command's
/// `exit_code`, a preview's `token`). Other fields may come too
/// (`additionalProperties`): a tool's `meta` may grow, and an external worker's is its
/// own.
pub fn result_schema(extra: &[(&str, Value)]) -> Value {
    let mut props = json!({
        "status": {"type": "string", "enum": ["ok", "error", "denied", "timeout", "cancelled", "crashed"]},
        "error": {
            "type": "object",
            "properties": {"type": {"type": "string"}, "message": {"type": "string"}},
            "required": ["type", "message"]
        },
        "truncated": {
            "type": "object",
            "properties": {
                "omitted_bytes": {"type": "integer"},
                "omitted_lines": {"type": "integer"},
                "full_output": {"type": "string"}
            }
        },
        "full_output": {"type": "string", "description": "Where the whole output is: read it with read_file (also linked as a toolvisor://artifacts/ resource)"},
        "structured": {"description": "An external worker's tool: the structured result it returned"},
        "undo": {"type": ["boolean", "string"], "description": "true: what the call changed in the workspace can be undone (or it changed nothing); else why not"},
        "duration_ms": {"type": "integer", "minimum": 0},
        "audit_seq": {"type": "integer", "minimum": 0}
    });
    if let Some(map) = props.as_object_mut() {
        for (k, v) in extra {
            map.insert((*k).to_owned(), v.clone());
        }
    }
    json!({
        "type": "object",
        "properties": props,
        "required": ["status", "duration_ms", "audit_seq"],
        "additionalProperties": true
    })
}
