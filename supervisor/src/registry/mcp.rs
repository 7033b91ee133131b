//! The tools of MCP servers (`[mcp.servers.NAME]`) as catalog entries.
//!
//! Each server's worker announces the server's tools in its `ready` frame and again in
//! `tools_changed`; [`McpRegistry::replace`] turns them into entries named
//! `NAME__TOOL` (characters outside `[A-Za-z0-9_-]` become `_`) in group `mcp:NAME`,
//! with their `inputSchema` compiled for validation, their `outputSchema` compiled to
//! check results, and their risk: the server's `risk`, raised to `high` by
//! `destructiveHint: true` (annotations may only raise it). A tool whose schema does not
//! compile, whose name collides or is too long, or that the server's `tools` allow-list
//! leaves out, is not offered (with a warning); nothing a server announces can crash
//! the daemon.
//!
//! Entries are looked up by the router next to the built-in catalog. Until the catalog
//! holds owned data, an entry carries a [`ToolSpec`] whose name and group are interned
//! `&'static str`s, within a fixed budget ([`INTERN_BUDGET`]).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use jsonschema::Validator;
use serde_json::{Map, Value, json};
use toolvisor_protocol::message::{Status, ToolFormat};
use toolvisor_protocol::tools::{Risk, ToolSpec};
use toolvisor_protocol::worker::{AnnouncedTool, McpServerInit, Outcome};
use toolvisor_protocol::{ErrorBody, ErrorType};

use crate::config::mcp::{GROUP_PREFIX, McpConfig, McpServerConfig};
use crate::registry::validate::violations;

/// Tools one server may offer; the rest are left out with a warning.
pub const MAX_TOOLS_PER_SERVER: usize = 1024;
/// Longest exposed tool name.
pub const MAX_NAME: usize = 128;
/// Bytes of tool and group names interned over the life of the process.
pub const INTERN_BUDGET: usize = 1 << 20;
/// Longest description kept (longer ones are cut on a character boundary).
const MAX_DESCRIPTION: usize = 16 * 1024;

/// One MCP tool as the catalog sees it.
pub struct McpTool {
    /// The entry the call path uses (validation, policy, routing).
    pub spec: ToolSpec,
    /// The name the server knows the tool by (what its worker calls).
    pub original: String,
    pub title: Option<String>,
    pub description: String,
    /// The four hints, with the MCP defaults filled in.
    pub annotations: Value,
    pub output_schema: Option<Value>,
    validator: Validator,
    output: Option<Validator>,
}

impl std::fmt::Debug for McpTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpTool")
            .field("name", &self.spec.name)
            .field("original", &self.original)
            .finish()
    }
}

/// The entry one call runs under: a built-in tool, or an MCP server's.
pub enum SpecRef<'a> {
    Builtin(&'a ToolSpec),
    Mcp(Arc<McpTool>),
}

impl std::ops::Deref for SpecRef<'_> {
    type Target = ToolSpec;

    fn deref(&self) -> &ToolSpec {
        match self {
            SpecRef::Builtin(s) => s,
            SpecRef::Mcp(t) => &t.spec,
        }
    }
}

/// What the configuration says of one server.
#[derive(Clone, Debug)]
struct Server {
    name: String,
    risk: Risk,
    timeout: Duration,
    allow: Option<HashSet<String>>,
}

/// Every configured MCP server and the tools each offers now.
#[derive(Default)]
pub struct McpRegistry {
    /// By group (`mcp:NAME`); a reload may change their settings.
    servers: RwLock<BTreeMap<String, Server>>,
    /// By exposed name, replaced whole on every change.
    tools: RwLock<Arc<BTreeMap<String, Arc<McpTool>>>>,
}

impl std::fmt::Debug for McpRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpRegistry")
            .field("servers", &self.groups())
            .finish()
    }
}

/// What one announcement changed.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Replaced {
    /// The exposed names offered now.
    pub tools: Vec<String>,
    /// Whether the group's tools differ from before.
    pub changed: bool,
    /// Why announced tools were left out.
    pub warnings: Vec<String>,
}

/// The servers of `cfg`, by group.
fn servers(cfg: &McpConfig) -> BTreeMap<String, Server> {
    cfg.servers
        .iter()
        .map(|(name, s)| {
            let server = Server {
                name: name.clone(),
                risk: s.risk,
                timeout: Duration::from_millis(s.timeout_ms),
                allow: s.tools.as_ref().map(|t| t.iter().cloned().collect()),
            };
            (group_of(name), server)
        })
        .collect()
}

/// The group of server `name`.
pub fn group_of(name: &str) -> String {
    format!("{GROUP_PREFIX}{name}")
}

/// Whether `group` is an MCP server's.
pub fn is_mcp_group(group: &str) -> bool {
    group.starts_with(GROUP_PREFIX)
}

/// `NAME__TOOL`, with every character outside `[A-Za-z0-9_-]` as `_`.
pub fn exposed_name(server: &str, tool: &str) -> String {
    format!("{server}__{tool}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The worker's `init.mcp` for a configured server.
pub fn server_init(name: &str, s: &McpServerConfig) -> McpServerInit {
    McpServerInit {
        name: name.to_owned(),
        command: s.command.clone(),
        url: s.url.clone(),
        env: s.env.clone(),
        startup_timeout_ms: s.startup_timeout_ms,
    }
}

impl McpRegistry {
    pub fn new(cfg: &McpConfig) -> McpRegistry {
        McpRegistry {
            servers: RwLock::new(servers(cfg)),
            tools: RwLock::default(),
        }
    }

    /// A reloaded configuration's settings for the servers, used from their next
    /// announcement on.
    pub fn reconfigure(&self, cfg: &McpConfig) {
        *self.servers.write().unwrap_or_else(|p| p.into_inner()) = servers(cfg);
    }

    fn server(&self, group: &str) -> Option<Server> {
        self.servers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            .cloned()
    }

    /// The groups of the configured servers, in name order.
    pub fn groups(&self) -> Vec<String> {
        self.servers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// A call's deadline on `group` when neither the call nor the tool names a shorter
    /// one (`None`: not an MCP group).
    pub fn timeout(&self, group: &str) -> Option<Duration> {
        self.server(group).map(|s| s.timeout)
    }

    fn snapshot(&self) -> Arc<BTreeMap<String, Arc<McpTool>>> {
        self.tools.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The tool offered as `name` now.
    pub fn find(&self, name: &str) -> Option<Arc<McpTool>> {
        self.snapshot().get(name).cloned()
    }

    /// How many tools the servers offer now.
    pub fn len(&self) -> usize {
        self.snapshot().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every offered tool in a listing format, sorted by name, of `groups` if given.
    pub fn listing(&self, format: ToolFormat, groups: Option<&[String]>) -> Vec<Value> {
        self.snapshot()
            .values()
            .filter(|t| groups.is_none_or(|g| g.iter().any(|g| g == t.spec.group)))
            .map(|t| t.listing(format))
            .collect()
    }

    /// Replace the tools of `group` with what its worker announced.
    pub fn replace(&self, group: &str, announced: Vec<AnnouncedTool>) -> Replaced {
        let Some(server) = self.server(group) else {
            return Replaced::default();
        };
        let (mut entries, mut warnings) = build(&server, group, announced);
        let mut guard = self.tools.write().unwrap_or_else(|p| p.into_inner());
        // `a` + `b__c` and `a__b` + `c` are both `a__b__c`: the first server keeps it.
        entries.retain(|t| match guard.get(t.spec.name) {
            Some(other) if other.spec.group != group => {
                warnings.push(format!(
                    "{}: tool `{}` is left out: `{}` is a tool of {} already",
                    server.name, t.original, t.spec.name, other.spec.group
                ));
                false
            }
            _ => true,
        });
        let before: Vec<(&String, &Arc<McpTool>)> = guard
            .iter()
            .filter(|(_, t)| t.spec.group == group)
            .collect();
        let changed = before.len() != entries.len()
            || before
                .iter()
                .zip(entries.iter())
                .any(|((_, a), b)| !same(a, b));
        let mut next: BTreeMap<String, Arc<McpTool>> = guard
            .iter()
            .filter(|(_, t)| t.spec.group != group)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let tools: Vec<String> = entries.iter().map(|t| t.spec.name.to_owned()).collect();
        for t in entries {
            next.insert(t.spec.name.to_owned(), Arc::new(t));
        }
        *guard = Arc::new(next);
        Replaced {
            tools,
            changed,
            warnings,
        }
    }

    /// Check an MCP tool's result against its `outputSchema`: a server that declares
    /// one must return `structuredContent` that fits it (`meta.structured`); one that
    /// does not gets its call turned into an `McpToolError`.
    pub fn check_output(&self, tool: &McpTool, o: &mut Outcome) {
        let Some(v) = &tool.output else { return };
        if o.status != Status::Ok {
            return;
        }
        let why = match o.meta.get("structured") {
            None => Some(
                "the server returned no structuredContent, though the tool declares an outputSchema"
                    .to_owned(),
            ),
            Some(s) => violations(v, s).map(|lines| {
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

impl McpTool {
    /// Check a call's arguments against the tool's `inputSchema`.
    pub fn check(&self, args: &Value) -> Result<(), String> {
        if !args.is_object() {
            return Err("/: the arguments must be an object".into());
        }
        violations(&self.validator, args).map_or(Ok(()), Err)
    }

    /// This tool in one of the listing formats.
    pub fn listing(&self, format: ToolFormat) -> Value {
        match format {
            ToolFormat::Native => json!({
                "name": self.spec.name,
                "description": self.description,
                "group": self.spec.group,
                "risk": self.spec.risk.as_str(),
                "parameters": self.spec.parameters,
                "aliases": [],
            }),
            ToolFormat::Openai => json!({
                "type": "function",
                "function": {
                    "name": self.spec.name,
                    "description": self.description,
                    "parameters": self.spec.parameters,
                }
            }),
            ToolFormat::Mcp => {
                let mut m = Map::new();
                m.insert("name".into(), json!(self.spec.name));
                if let Some(t) = &self.title {
                    m.insert("title".into(), json!(t));
                }
                m.insert("description".into(), json!(self.description));
                m.insert("inputSchema".into(), self.spec.parameters.clone());
                m.insert("annotations".into(), self.annotations.clone());
                Value::Object(m)
            }
        }
    }
}

/// What a person asked to confirm an MCP tool's call sees: its arguments, as indented
/// JSON (at most 8 KiB).
pub fn preview(args: &Value) -> String {
    let text = serde_json::to_string_pretty(args).unwrap_or_default();
    cut(text, 8 * 1024)
}

/// Sort a listing of built-in and MCP tools by name, as `list_tools` promises.
pub fn sort_listing(tools: &mut [Value], format: ToolFormat) {
    let name = |v: &Value| -> String {
        let v = match format {
            ToolFormat::Openai => &v["function"]["name"],
            _ => &v["name"],
        };
        v.as_str().unwrap_or_default().to_owned()
    };
    tools.sort_by_cached_key(name);
}

/// Whether two entries offer the same thing (name, schemas, texts, hints, risk).
fn same(a: &McpTool, b: &McpTool) -> bool {
    a.spec.name == b.spec.name
        && a.spec.parameters == b.spec.parameters
        && a.spec.risk == b.spec.risk
        && a.original == b.original
        && a.title == b.title
        && a.description == b.description
        && a.annotations == b.annotations
        && a.output_schema == b.output_schema
}

/// The entries of one announcement, sorted by exposed name, and why others were left
/// out.
fn build(
    server: &Server,
    group: &str,
    announced: Vec<AnnouncedTool>,
) -> (Vec<McpTool>, Vec<String>) {
    let mut warnings = Vec::new();
    let mut by_name: BTreeMap<String, McpTool> = BTreeMap::new();
    let total = announced.len();
    for tool in announced {
        if server
            .allow
            .as_ref()
            .is_some_and(|a| !a.contains(&tool.name))
        {
            continue;
        }
        if by_name.len() >= MAX_TOOLS_PER_SERVER {
            warnings.push(format!(
                "{}: only the first {MAX_TOOLS_PER_SERVER} of {total} tools are offered",
                server.name
            ));
            break;
        }
        let original = tool.name.clone();
        match entry(server, group, tool) {
            Ok(t) if by_name.contains_key(t.spec.name) => warnings.push(format!(
                "{}: tool `{original}` is left out: its name `{}` is taken by another tool",
                server.name, t.spec.name
            )),
            Ok(t) => {
                by_name.insert(t.spec.name.to_owned(), t);
            }
            Err(why) => warnings.push(format!(
                "{}: tool `{original}` is left out: {why}",
                server.name
            )),
        }
    }
    (by_name.into_values().collect(), warnings)
}

/// One announced tool as an entry, or why it cannot be one.
fn entry(server: &Server, group: &str, t: AnnouncedTool) -> Result<McpTool, String> {
    let exposed = exposed_name(&server.name, &t.name);
    if exposed.len() > MAX_NAME || t.name.is_empty() {
        return Err(format!("its name must have 1 to {MAX_NAME} characters"));
    }
    if !t.input_schema.is_object() {
        return Err("its inputSchema is not a JSON object".into());
    }
    let validator = jsonschema::validator_for(&t.input_schema)
        .map_err(|e| format!("its inputSchema does not compile: {e}"))?;
    let output = match &t.output_schema {
        None => None,
        Some(s) if s.is_object() => Some(
            jsonschema::validator_for(s)
                .map_err(|e| format!("its outputSchema does not compile: {e}"))?,
        ),
        Some(_) => return Err("its outputSchema is not a JSON object".into()),
    };
    let hints = Hints::of(t.annotations.as_ref());
    let risk = if hints.destructive == Some(true) {
        Risk::High
    } else {
        server.risk
    };
    let (name, group) = match (intern(&exposed), intern(group)) {
        (Some(n), Some(g)) => (n, g),
        _ => return Err("too many distinct tool names were announced; restart toolvisor".into()),
    };
    let read_only = hints.read_only == Some(true);
    let title = t.title.clone().or_else(|| {
        t.annotations
            .as_ref()
            .and_then(|a| a.get("title"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    });
    Ok(McpTool {
        spec: ToolSpec {
            name,
            group,
            risk,
            description: "",
            aliases: &[],
            read_only,
            destructive: hints.destructive.unwrap_or(!read_only),
            idempotent: hints.idempotent.unwrap_or(false),
            open_world: hints.open_world.unwrap_or(true),
            parameters: t.input_schema,
        },
        original: t.name,
        title,
        description: cut(t.description, MAX_DESCRIPTION),
        annotations: hints.listing(),
        output_schema: t.output_schema,
        validator,
        output,
    })
}

/// The four MCP tool hints as the server gave them (untrusted).
struct Hints {
    read_only: Option<bool>,
    destructive: Option<bool>,
    idempotent: Option<bool>,
    open_world: Option<bool>,
}

impl Hints {
    fn of(annotations: Option<&Value>) -> Hints {
        let get = |k: &str| annotations.and_then(|a| a.get(k)).and_then(Value::as_bool);
        Hints {
            read_only: get("readOnlyHint"),
            destructive: get("destructiveHint"),
            idempotent: get("idempotentHint"),
            open_world: get("openWorldHint"),
        }
    }

    /// The hints with the MCP defaults for what the server left out.
    fn listing(&self) -> Value {
        let read_only = self.read_only.unwrap_or(false);
        json!({
            "readOnlyHint": read_only,
            "destructiveHint": self.destructive.unwrap_or(!read_only),
            "idempotentHint": self.idempotent.unwrap_or(false),
            "openWorldHint": self.open_world.unwrap_or(true),
        })
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

/// Names interned so far and the bytes they took.
struct Interned {
    names: HashSet<&'static str>,
    bytes: usize,
}

static INTERNED: Mutex<Option<Interned>> = Mutex::new(None);

/// `s` as a `&'static str`, leaked once per distinct value, within [`INTERN_BUDGET`]
/// (`None` past it).
fn intern(s: &str) -> Option<&'static str> {
    let mut guard = INTERNED.lock().unwrap_or_else(|p| p.into_inner());
    let table = guard.get_or_insert_with(|| Interned {
        names: HashSet::new(),
        bytes: 0,
    });
    if let Some(found) = table.names.get(s) {
        return Some(found);
    }
    if table.bytes + s.len() > INTERN_BUDGET {
        return None;
    }
    let leaked: &'static str = Box::leak(s.to_owned().into_boxed_str());
    table.bytes += s.len();
    table.names.insert(leaked);
    Some(leaked)
}

impl crate::service::Service {
    /// `explain`: validation and policy for a call of a built-in tool or of an MCP
    /// server's, without running it.
    pub fn explain(
        &self,
        id: toolvisor_protocol::Id,
        tool: &str,
        args: &Value,
    ) -> toolvisor_protocol::ServerMessage {
        use crate::policy::explain;
        let policy = self.policy();
        let builtin = toolvisor_protocol::tools::find(&self.tools, tool).is_some();
        match self.mcp.find(tool).filter(|_| !builtin) {
            Some(t) => explain::explain_spec(id, &policy, &t.spec, t.check(args), args),
            None => explain::explain(id, &policy, &self.validators, tool, args),
        }
    }
}

/// The configured servers' `env` values, to be masked wherever they would be recorded.
pub fn secrets(cfg: &McpConfig) -> Vec<String> {
    let mut all: HashMap<&str, ()> = HashMap::new();
    for s in cfg.servers.values() {
        for v in s.env.values() {
            all.insert(v.as_str(), ());
        }
    }
    all.into_keys().map(str::to_owned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(toml: &str) -> McpRegistry {
        let cfg = crate::config::Config::parse(toml, "t").unwrap();
        McpRegistry::new(&cfg.mcp)
    }

    fn tool(name: &str, schema: Value) -> AnnouncedTool {
        AnnouncedTool {
            name: name.into(),
            title: None,
            description: format!("the {name} tool"),
            input_schema: schema,
            output_schema: None,
            annotations: None,
        }
    }

    fn object() -> Value {
        json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]})
    }

    #[test]
    fn names_are_sanitised_and_namespaced() {
        assert_eq!(exposed_name("gh", "search_issues"), "gh__search_issues");
        assert_eq!(exposed_name("gh", "a.b/c d"), "gh__a_b_c_d");
        assert_eq!(exposed_name("my-srv", "x-y"), "my-srv__x-y");
    }

    #[test]
    fn announced_tools_become_entries() {
        let r = registry("[mcp.servers.gh]\ncommand = [\"x\"]\n");
        let mut destructive = tool("delete_repo", object());
        destructive.annotations = Some(json!({"destructiveHint": true}));
        let out = r.replace("mcp:gh", vec![tool("search", object()), destructive]);
        assert_eq!(out.tools, vec!["gh__delete_repo", "gh__search"]);
        assert!(out.changed && out.warnings.is_empty());
        let search = r.find("gh__search").unwrap();
        assert_eq!(search.spec.group, "mcp:gh");
        assert_eq!(search.spec.risk, Risk::Medium);
        assert_eq!(search.original, "search");
        assert_eq!(r.find("gh__delete_repo").unwrap().spec.risk, Risk::High);
        assert!(search.check(&json!({"q": "bug"})).is_ok());
        let err = search.check(&json!({"q": 1, "x": 2})).unwrap_err();
        assert!(err.contains("/q"), "{err}");
        assert!(search.check(&json!([1])).is_err());
        // The same list again changes nothing.
        let again = r.replace(
            "mcp:gh",
            vec![tool("search", object()), {
                let mut d = tool("delete_repo", object());
                d.annotations = Some(json!({"destructiveHint": true}));
                d
            }],
        );
        assert!(!again.changed);
    }

    #[test]
    fn bad_tools_are_left_out_with_a_warning() {
        let r = registry("[mcp.servers.s]\ncommand = [\"x\"]\n");
        let mut bad_out = tool("bad_output", object());
        bad_out.output_schema = Some(json!({"type": 12}));
        let out = r.replace(
            "mcp:s",
            vec![
                tool("ok", object()),
                tool("not_object", json!("string")),
                tool("bad_schema", json!({"type": "nonsense"})),
                tool("remote", json!({"$ref": "http://127.0.0.1:9/x.json"})),
                bad_out,
                tool("a.b", object()),
                tool("a_b", object()),
                tool(&"x".repeat(200), object()),
            ],
        );
        assert_eq!(out.tools, vec!["s__a_b", "s__ok"], "{:?}", out.warnings);
        assert_eq!(out.warnings.len(), 6, "{:?}", out.warnings);
        assert!(
            out.warnings
                .iter()
                .any(|w| w.contains("taken by another tool"))
        );
    }

    #[test]
    fn the_allow_list_and_other_groups_are_respected() {
        let r = registry(
            "[mcp.servers.a]\ncommand = [\"x\"]\ntools = [\"keep\"]\n[mcp.servers.b]\nurl = \"http://h/mcp\"\nrisk = \"low\"\n",
        );
        r.replace(
            "mcp:a",
            vec![tool("keep", object()), tool("drop", object())],
        );
        r.replace("mcp:b", vec![tool("t", object())]);
        assert!(r.find("a__drop").is_none());
        assert_eq!(r.len(), 2);
        assert_eq!(r.find("b__t").unwrap().spec.risk, Risk::Low);
        // b's new list leaves a's alone.
        let out = r.replace("mcp:b", vec![]);
        assert!(out.changed);
        assert!(r.find("a__keep").is_some() && r.find("b__t").is_none());
        // Unknown groups are ignored.
        assert_eq!(
            r.replace("mcp:zz", vec![tool("t", object())]),
            Replaced::default()
        );
        let listed = r.listing(ToolFormat::Mcp, None);
        assert_eq!(listed[0]["name"], "a__keep");
        assert_eq!(listed[0]["annotations"]["destructiveHint"], true);
        assert!(
            r.listing(ToolFormat::Native, Some(&["mcp:b".into()]))
                .is_empty()
        );
    }

    #[test]
    fn a_name_two_servers_make_stays_with_the_first() {
        let r =
            registry("[mcp.servers.a]\ncommand = [\"x\"]\n[mcp.servers.a__b]\ncommand = [\"y\"]\n");
        r.replace("mcp:a", vec![tool("b__c", object())]);
        let out = r.replace("mcp:a__b", vec![tool("c", object()), tool("d", object())]);
        assert_eq!(out.tools, vec!["a__b__d"]);
        assert_eq!(out.warnings.len(), 1, "{:?}", out.warnings);
        assert_eq!(r.find("a__b__c").unwrap().spec.group, "mcp:a");
    }

    #[test]
    fn results_are_checked_against_the_output_schema() {
        let r = registry("[mcp.servers.s]\ncommand = [\"x\"]\n");
        let mut t = tool("typed", object());
        t.output_schema = Some(
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}),
        );
        r.replace("mcp:s", vec![t]);
        let typed = r.find("s__typed").unwrap();
        let mut good = Outcome::ok("x".into());
        good.meta.insert("structured".into(), json!({"n": 1}));
        r.check_output(&typed, &mut good);
        assert_eq!(good.status, Status::Ok);
        let mut lie = Outcome::ok("x".into());
        lie.meta.insert("structured".into(), json!({"n": "one"}));
        r.check_output(&typed, &mut lie);
        assert_eq!(lie.error.unwrap().kind, ErrorType::McpToolError);
        let mut none = Outcome::ok("x".into());
        r.check_output(&typed, &mut none);
        assert_eq!(none.status, Status::Error);
    }

    #[test]
    fn interning_reuses_names() {
        let a = intern("mcp-test-name").unwrap();
        let b = intern("mcp-test-name").unwrap();
        assert!(std::ptr::eq(a, b));
    }

    #[test]
    fn env_values_are_secrets() {
        let cfg = crate::config::Config::parse(
            "[mcp.servers.a]\ncommand = [\"x\"]\nenv = { T = \"value-1\" }\n",
            "t",
        )
        .unwrap();
        assert_eq!(secrets(&cfg.mcp), vec!["value-1".to_string()]);
    }
}
