//! What the policy looks at in one call, worked out once: the resolved paths, the
//! parsed command and its hazards, a dangerous `env`, the risk. Everything comes from
//! the tool's definition (its path parameters, whether it runs a shell command); no
//! tool is known here by name.

use std::collections::HashMap;

use serde_json::{Map, Value};
use toolvisor_protocol::tools::{PathParam, Risk, ToolDef};

use super::decide::Unit;
use super::hazards;
use super::paths::{ScopedPath, Scopes};
use super::risk::{self, Assessment};
use super::rules::{self, COMMAND};
use super::shell::{self, Analysis};

/// Paths in a command, resolved against its cwd like the worker would.
pub(super) struct CommandPaths<'a> {
    scopes: &'a Scopes,
    cwd: String,
}

impl hazards::Paths for CommandPaths<'_> {
    fn outside(&self, path: &str) -> bool {
        if path.starts_with('~') || path.contains('$') {
            return true;
        }
        let full = if path.starts_with('/') {
            path.to_owned()
        } else {
            format!("{}/{path}", self.cwd)
        };
        self.scopes.resolve(&full).is_outside()
    }
}

/// Everything the rules and the mode look at, worked out once per call.
pub(super) struct Facts<'a> {
    pub(super) def: &'a ToolDef,
    pub(super) args: &'a Map<String, Value>,
    pub(super) path_params: Vec<(String, Vec<ScopedPath>)>,
    resolved: HashMap<String, Vec<String>>,
    pub(super) locations: Vec<String>,
    pub(super) shell: Option<Analysis>,
    pub(super) dangerous_env: Vec<String>,
    pub(super) assessment: Assessment,
}

static EMPTY: std::sync::LazyLock<Map<String, Value>> = std::sync::LazyLock::new(Map::new);

impl<'a> Facts<'a> {
    pub(super) fn gather(
        def: &'a ToolDef,
        args: &'a Value,
        scopes: &Scopes,
        base: Risk,
    ) -> Facts<'a> {
        let args = args.as_object().unwrap_or(&EMPTY);
        let path_params = resolve_paths(&def.paths, args, scopes);
        let resolved: HashMap<_, _> = path_params
            .iter()
            .map(|(p, v)| (p.clone(), v.iter().map(ToString::to_string).collect()))
            .collect();
        let all_paths: Vec<ScopedPath> = path_params.iter().flat_map(|(_, v)| v.clone()).collect();
        let locations = all_paths.iter().map(ToString::to_string).collect();
        let shell = def.policy.shell.then(|| {
            let cwd: String = resolved
                .get("cwd")
                .and_then(|v: &Vec<String>| v.first().cloned())
                .unwrap_or_else(|| ".".into());
            let paths = CommandPaths { scopes, cwd };
            shell::analyze(
                args.get(COMMAND).and_then(Value::as_str).unwrap_or(""),
                &paths,
            )
        });
        let dangerous_env = risk::dangerous_env(args.get(rules::ENV).and_then(Value::as_object));
        let assessment = risk::assess(def, base, &all_paths, shell.as_ref(), &dangerous_env);
        Facts {
            def,
            args,
            path_params,
            resolved,
            locations,
            shell,
            dangerous_env,
            assessment,
        }
    }

    pub(super) fn command(&self) -> &str {
        self.args.get(COMMAND).and_then(Value::as_str).unwrap_or("")
    }

    pub(super) fn part(&self, unit: Unit) -> Option<&shell::Part> {
        match unit {
            Unit::Part(i) => self.shell.as_ref()?.parts.get(i),
            _ => None,
        }
    }

    /// A unit's text: the part's source, or the whole command line.
    pub(super) fn unit_text(&self, unit: Unit) -> Option<&str> {
        match unit {
            Unit::Part(i) => self.shell.as_ref()?.parts.get(i).map(|p| p.text.as_str()),
            Unit::Whole => Some(self.command()),
            Unit::Call => None,
        }
    }

    pub(super) fn touches_public(&self) -> bool {
        self.path_params
            .iter()
            .any(|(_, v)| v.iter().any(ScopedPath::is_public))
    }

    /// A parameter's values as rules compare them: resolved paths, list elements one
    /// by one, `env` as `KEY=VALUE` entries, and `env.KEY` for one entry. `None` when
    /// the call does not have it. (`command` of `run_command` is tested on words.)
    pub(super) fn values(&self, param: &str) -> Option<Vec<String>> {
        if let Some(v) = self.resolved.get(param) {
            return Some(v.clone());
        }
        let mut parts = param.split('.');
        let mut value = self.args.get(parts.next()?)?;
        for part in parts {
            value = value.get(part)?;
        }
        Some(texts(value))
    }
}

/// Quote characters dropped, for the words of a command nobody could parse.
pub(super) fn unquote(word: &str) -> String {
    word.chars()
        .filter(|c| !matches!(c, '\'' | '"' | '\\'))
        .collect()
}

/// Resolve each path parameter the tool has (missing ones take their default).
fn resolve_paths(
    params: &[PathParam],
    args: &Map<String, Value>,
    scopes: &Scopes,
) -> Vec<(String, Vec<ScopedPath>)> {
    params
        .iter()
        .filter_map(|p| {
            let raw: Vec<&str> = match args.get(&p.name) {
                Some(Value::String(s)) => vec![s.as_str()],
                Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
                _ => vec![p.default.as_deref()?],
            };
            let resolved = raw.into_iter().map(|r| scopes.resolve(r)).collect();
            Some((p.name.clone(), resolved))
        })
        .collect()
}

/// A JSON value as the strings a condition tests.
fn texts(value: &Value) -> Vec<String> {
    match value {
        Value::String(s) => vec![s.clone()],
        Value::Array(items) => items.iter().flat_map(texts).collect(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| match v {
                Value::String(s) => format!("{k}={s}"),
                other => format!("{k}={other}"),
            })
            .collect(),
        Value::Null => vec![String::new()],
        other => vec![other.to_string()],
    }
}
