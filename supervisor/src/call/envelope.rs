//! Envelopes (seed 003): a model's text with one fenced ` ```yips-agent ` block (or the
//! legacy ` ```yips-tools `) of actions. [`parse`] finds and checks the block;
//! [`Service::plan_envelope`] turns its tool actions into the calls of a batch — with
//! `list_dir` as `ls` (an alias) and `write_file`/`edit_file` staged as their previews
//! ([`ToolDef::envelope_as`]) — and sets the skill and subagent actions apart, which
//! toolvisor does not run (`UnsupportedAction`).
//!
//! A block that cannot be run as written is refused whole (`BadEnvelope`, naming the
//! problem): more than one block, an unclosed one, JSON that does not parse or is not an
//! object, duplicate or missing action ids, a tool action without `name`, more actions
//! than one connection may have open calls. Nothing runs then.
//!
//! Fences follow CommonMark closely enough for model output: up to three spaces of
//! indent, three or more backticks, the info string's first word names the block; a
//! closing fence has at least as many backticks and nothing else. Text inside other
//! fenced blocks (an example in a ```` ```markdown ```` block) is not searched.

use std::collections::HashSet;

use serde_json::{Map, Value};
use toolvisor_protocol::Id;
use toolvisor_protocol::message::CallRequest;

use crate::call::service::Service;

/// The preferred block tag.
pub const AGENT_TAG: &str = "yips-agent";
/// The legacy block tag, still read.
pub const LEGACY_TAG: &str = "yips-tools";

/// What an action asks for.
#[derive(Clone, Debug, PartialEq)]
pub enum ActionKind {
    /// A tool call.
    Tool {
        /// The tool's name as the block gives it.
        name: String,
        /// Its arguments.
        arguments: Value,
    },
    /// A skill to activate (not run here: answered unsupported).
    Skill,
    /// A subagent to start (not run here: answered unsupported).
    Subagent,
}

impl ActionKind {
    /// The word for an unsupported action's message.
    fn word(&self) -> &'static str {
        match self {
            ActionKind::Tool { .. } => "tool",
            ActionKind::Skill => "skill",
            ActionKind::Subagent => "subagent",
        }
    }
}

/// One action of a block.
#[derive(Clone, Debug, PartialEq)]
pub struct Action {
    /// The action's id (its call's id in the batch).
    pub id: Id,
    /// What it asks for.
    pub kind: ActionKind,
}

/// A block that may run.
#[derive(Clone, Debug, PartialEq)]
pub struct Envelope {
    /// The block's own `assistant_text`, else the text outside the block, trimmed.
    pub assistant_text: String,
    /// The block's actions, in order.
    pub actions: Vec<Action>,
}

/// How an envelope's actions are run.
#[derive(Debug, Default)]
pub struct Plan {
    /// The text for the person, as `envelope_done` carries it.
    pub assistant_text: String,
    /// The tool actions, as the calls of the batch (ids = action ids).
    pub calls: Vec<CallRequest>,
    /// Ids of calls staged as previews (their results get `meta.legacyTranslated`).
    pub translated: HashSet<Id>,
    /// Skill and subagent actions: (id, why not).
    pub unsupported: Vec<(Id, String)>,
    /// Every action id, in order.
    pub ids: Vec<Id>,
}

/// Mark the result of a call staged as a preview (`meta.legacyTranslated: true`).
pub fn mark_translated(r: &mut toolvisor_protocol::message::ToolResult) {
    if let Value::Object(meta) = &mut r.meta {
        meta.insert("legacyTranslated".into(), Value::Bool(true));
    }
}

/// Find and check the envelope block of `text`. `Ok(None)`: there is none (the text
/// is plain assistant text). `Err`: why the block cannot run. At most `max_actions`
/// actions are accepted.
pub fn parse(text: &str, max_actions: usize) -> Result<Option<Envelope>, String> {
    let blocks = fenced_blocks(text)?;
    let block = match blocks.as_slice() {
        [] => return Ok(None),
        [one] => one,
        many => {
            return Err(format!(
                "expected exactly one {AGENT_TAG} or {LEGACY_TAG} block, found {}",
                many.len()
            ));
        }
    };
    let root: Value = serde_json::from_str(block.body)
        .map_err(|e| format!("the {} block is not valid JSON: {e}", block.tag))?;
    let Value::Object(root) = root else {
        return Err(format!(
            "the {} block must hold a JSON object, not {}",
            block.tag,
            kind_of(&root)
        ));
    };
    let actions = if block.tag == AGENT_TAG {
        agent_actions(&root, max_actions)?
    } else {
        legacy_actions(&root, max_actions)?
    };
    check_ids(&actions)?;
    let assistant_text = match root.get("assistant_text") {
        None | Some(Value::Null) => block.outside.trim().to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => {
            return Err(format!(
                "`assistant_text` must be a string, not {}",
                kind_of(other)
            ));
        }
    };
    Ok(Some(Envelope {
        assistant_text,
        actions,
    }))
}

impl Service {
    /// The batch and the rest of an envelope: tool names as the registry knows them
    /// (an unknown one is left for the call to answer `ToolNotFound`), `write_file` and
    /// `edit_file` staged as their previews.
    pub fn plan_envelope(&self, env: Envelope) -> Plan {
        let registry = self.registry();
        let mut plan = Plan {
            assistant_text: env.assistant_text,
            ..Plan::default()
        };
        for action in env.actions {
            plan.ids.push(action.id.clone());
            match action.kind {
                ActionKind::Tool { name, arguments } => {
                    let staged = registry.find(&name).and_then(|e| e.def.envelope_as);
                    let tool = match staged {
                        Some(preview) => {
                            plan.translated.insert(action.id.clone());
                            preview.to_owned()
                        }
                        None => name,
                    };
                    plan.calls
                        .push(CallRequest::new(action.id, tool, arguments));
                }
                other => {
                    let why = format!(
                        "{} actions are not supported: toolvisor runs tool actions only",
                        other.word()
                    );
                    plan.unsupported.push((action.id, why));
                }
            }
        }
        plan
    }
}

/// One envelope block found in the text.
struct Block<'a> {
    tag: &'static str,
    body: &'a str,
    /// The text before and after the block (its fences excluded).
    outside: String,
}

/// An open fence: its backtick count and, for an envelope block, its tag and where
/// its body starts.
struct Open {
    ticks: usize,
    tag: Option<&'static str>,
    body_start: usize,
    fence_start: usize,
}

/// Every envelope block of `text`, in order; an envelope fence left open is an error.
fn fenced_blocks(text: &str) -> Result<Vec<Block<'_>>, String> {
    let mut blocks = Vec::new();
    let mut open: Option<Open> = None;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let start = pos;
        pos += line.len();
        let Some((ticks, info)) = fence(line) else {
            continue;
        };
        match &open {
            None => {
                let tag = match info.split_whitespace().next() {
                    Some(AGENT_TAG) => Some(AGENT_TAG),
                    Some(LEGACY_TAG) => Some(LEGACY_TAG),
                    _ => None,
                };
                open = Some(Open {
                    ticks,
                    tag,
                    body_start: pos,
                    fence_start: start,
                });
            }
            Some(o) if ticks >= o.ticks && info.is_empty() => {
                if let Some(tag) = o.tag {
                    let mut outside = text[..o.fence_start].to_owned();
                    outside.push_str(&text[pos..]);
                    blocks.push(Block {
                        tag,
                        body: &text[o.body_start..start],
                        outside,
                    });
                }
                open = None;
            }
            Some(_) => {} // a fence-like line inside a block is content
        }
    }
    if let Some(Open { tag: Some(tag), .. }) = open {
        return Err(format!(
            "the {tag} block is not closed (no closing ``` line)"
        ));
    }
    Ok(blocks)
}

/// A fence line: its backtick count and its info string (trimmed). At most three
/// spaces of indent; an info string with a backtick does not open a fence.
fn fence(line: &str) -> Option<(usize, &str)> {
    let line = line.trim_end_matches(['\n', '\r']);
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ticks = rest.len() - rest.trim_start_matches('`').len();
    if ticks < 3 {
        return None;
    }
    let info = rest[ticks..].trim();
    (!info.contains('`')).then_some((ticks, info))
}

/// `yips-agent`: `{"actions": [{"type", "id", "name"?, "arguments"?, …}]}`.
fn agent_actions(root: &Map<String, Value>, max: usize) -> Result<Vec<Action>, String> {
    let list = array(root, "actions")?;
    bounded(list.len(), max)?;
    list.iter()
        .enumerate()
        .map(|(i, a)| {
            let a = object(a, i)?;
            let id = action_id(a, i)?;
            let kind = match a.get("type") {
                Some(Value::String(t)) => match t.as_str() {
                    "tool" => tool_kind(a, &id)?,
                    "skill" => ActionKind::Skill,
                    "subagent" => ActionKind::Subagent,
                    other => {
                        return Err(format!(
                            "action `{id}` has an unknown type `{other}` (tool, skill or subagent)"
                        ));
                    }
                },
                _ => {
                    return Err(format!(
                        "action `{id}` has no `type` (tool, skill or subagent)"
                    ));
                }
            };
            Ok(Action { id, kind })
        })
        .collect()
}

/// `yips-tools`: `tool_calls`, `skill_calls` and `subagent_calls`, in the order the
/// keys appear.
fn legacy_actions(root: &Map<String, Value>, max: usize) -> Result<Vec<Action>, String> {
    let lists = [
        ("tool_calls", true),
        ("skill_calls", false),
        ("subagent_calls", false),
    ];
    let mut total = 0;
    for (key, _) in lists {
        total += array(root, key)?.len();
    }
    bounded(total, max)?;
    let mut actions = Vec::with_capacity(total);
    let mut index = 0;
    for key in root.keys() {
        let Some(&(key, is_tool)) = lists.iter().find(|(k, _)| k == key) else {
            continue;
        };
        for a in array(root, key)? {
            let a = object(a, index)?;
            let id = action_id(a, index)?;
            let kind = match (is_tool, key) {
                (true, _) => tool_kind(a, &id)?,
                (false, "skill_calls") => ActionKind::Skill,
                _ => ActionKind::Subagent,
            };
            actions.push(Action { id, kind });
            index += 1;
        }
    }
    Ok(actions)
}

/// `root[key]` as an array; absent or null is empty.
fn array<'a>(root: &'a Map<String, Value>, key: &str) -> Result<&'a [Value], String> {
    match root.get(key) {
        None | Some(Value::Null) => Ok(&[]),
        Some(Value::Array(a)) => Ok(a),
        Some(other) => Err(format!("`{key}` must be an array, not {}", kind_of(other))),
    }
}

fn bounded(n: usize, max: usize) -> Result<(), String> {
    if n > max {
        return Err(format!(
            "the envelope has {n} actions; at most {max} are accepted (server.max_open_calls: the open calls one connection may have)"
        ));
    }
    Ok(())
}

fn object(a: &Value, i: usize) -> Result<&Map<String, Value>, String> {
    a.as_object()
        .ok_or_else(|| format!("action {} is not an object but {}", i + 1, kind_of(a)))
}

/// An action's `id`: a non-empty string, or an integer (echoed as given).
fn action_id(a: &Map<String, Value>, i: usize) -> Result<Id, String> {
    let n = i + 1;
    match a.get("id") {
        None | Some(Value::Null) => Err(format!("action {n} has no `id`")),
        Some(Value::String(s)) if s.is_empty() => Err(format!("action {n} has an empty `id`")),
        Some(Value::String(s)) => Ok(Id::Str(s.clone())),
        Some(Value::Number(x)) => match (x.as_i64(), x.as_u64()) {
            (Some(i), _) => Ok(Id::Int(i)),
            (None, Some(u)) => Ok(Id::UInt(u)),
            _ => Err(format!("action {n}: `id` must be a string or an integer")),
        },
        Some(other) => Err(format!(
            "action {n}: `id` must be a string, not {}",
            kind_of(other)
        )),
    }
}

/// A tool action's name and arguments (absent arguments are `{}`).
fn tool_kind(a: &Map<String, Value>, id: &Id) -> Result<ActionKind, String> {
    let name = match a.get("name") {
        Some(Value::String(n)) if !n.is_empty() => n.clone(),
        _ => return Err(format!("tool action `{id}` has no `name`")),
    };
    let arguments = match a.get("arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(v) => v.clone(),
    };
    Ok(ActionKind::Tool { name, arguments })
}

fn check_ids(actions: &[Action]) -> Result<(), String> {
    let mut seen = HashSet::with_capacity(actions.len());
    for a in actions {
        if !seen.insert(&a.id) {
            return Err(format!("action id `{}` is used more than once", a.id));
        }
    }
    Ok(())
}

fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests;
