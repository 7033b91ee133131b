//! The tool registry: every tool a client can call — built-in, an external worker's,
//! an MCP server's — as one [`Entry`]: its definition and its compiled validator.
//!
//! Listing, validation, the policy, confirmation previews, audit and routing all read
//! the entry; nothing outside a tool's own module matches its name. A registry is an
//! immutable snapshot: a group announcing new tools builds the next snapshot
//! ([`Registry::with_group`]) and the service swaps it in, so a call in flight keeps the
//! definition it was admitted with.

pub mod announced;
pub mod live;
pub mod mcp;
pub mod validate;

use std::collections::HashMap;
use std::sync::Arc;

use jsonschema::Validator;
use serde_json::Value;
use toolvisor_protocol::message::ToolFormat;
use toolvisor_protocol::tools::ToolDef;

pub use validate::SchemaError;

/// One tool: its definition and the validator compiled from its schema.
#[derive(Clone)]
pub struct Entry {
    /// The definition every part of the call path reads.
    pub def: Arc<ToolDef>,
    validator: Arc<Validator>,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("name", &self.def.name)
            .finish()
    }
}

impl Entry {
    /// Compile `def`'s schema.
    pub fn new(def: ToolDef) -> Result<Entry, SchemaError> {
        let validator = validate::compile(&def.name, &def.parameters)?;
        Ok(Entry {
            def: Arc::new(def),
            validator: Arc::new(validator),
        })
    }

    /// Check a call's arguments: every schema violation, one per line; then what the
    /// tool's own check says a schema cannot.
    pub fn check(&self, args: &Value) -> Result<(), String> {
        validate::check(&self.validator, args)?;
        match self.def.check {
            Some(check) => check(args),
            None => Ok(()),
        }
    }
}

/// Why a tool could not join the registry.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// A schema that does not compile.
    #[error(transparent)]
    Schema(#[from] SchemaError),
    /// Two groups name the same tool: neither may take over the other's.
    #[error("tool `{name}` of group `{group}` clashes with a tool of group `{other}`")]
    Clash {
        /// The tool's name.
        name: String,
        /// The group that asked to add it.
        group: String,
        /// The group that has it.
        other: String,
    },
}

/// Every tool, sorted by name, found by name or alias.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    entries: Vec<Entry>,
    /// Name or alias → index in `entries`.
    names: HashMap<String, usize>,
}

impl Registry {
    /// A registry of `defs`; a schema that does not compile or a clashing name is an
    /// error (built-in definitions are a contract: they must all load).
    pub fn new(defs: Vec<ToolDef>) -> Result<Registry, RegistryError> {
        let entries = defs
            .into_iter()
            .map(Entry::new)
            .collect::<Result<Vec<_>, _>>()?;
        Registry::from_entries(entries)
    }

    fn from_entries(mut entries: Vec<Entry>) -> Result<Registry, RegistryError> {
        entries.sort_by(|a, b| a.def.name.cmp(&b.def.name));
        let mut names: HashMap<String, usize> = HashMap::new();
        for (i, e) in entries.iter().enumerate() {
            let keys = std::iter::once(&e.def.name).chain(e.def.aliases.iter());
            for key in keys {
                if let Some(&j) = names.get(key) {
                    return Err(RegistryError::Clash {
                        name: key.clone(),
                        group: e.def.group.clone(),
                        other: entries[j].def.group.clone(),
                    });
                }
                names.insert(key.clone(), i);
            }
        }
        Ok(Registry { entries, names })
    }

    /// The next snapshot, with `group`'s tools replaced by `defs`. A tool whose
    /// schema does not compile or whose name another group holds is left out, and
    /// said so in the returned warnings; the rest join.
    pub fn with_group(&self, group: &str, defs: Vec<ToolDef>) -> (Registry, Vec<String>) {
        let mut kept: Vec<Entry> = self
            .entries
            .iter()
            .filter(|e| e.def.group != group)
            .cloned()
            .collect();
        let mut warnings = Vec::new();
        for def in defs {
            let taken = kept.iter().find(|e| {
                e.def.answers_to(&def.name) || def.aliases.iter().any(|a| e.def.answers_to(a))
            });
            if let Some(other) = taken {
                warnings.push(format!(
                    "tool `{}` of group `{group}` is left out: group `{}` already has that name",
                    def.name, other.def.group
                ));
                continue;
            }
            match Entry::new(def) {
                Ok(e) => kept.push(e),
                Err(e) => warnings.push(format!("group `{group}`: {e}; the tool is left out")),
            }
        }
        // Names are unique by construction above.
        let next = Registry::from_entries(kept).unwrap_or_else(|_| self.clone());
        (next, warnings)
    }

    /// A tool by name or alias.
    pub fn find(&self, name: &str) -> Option<&Entry> {
        self.names.get(name).map(|&i| &self.entries[i])
    }

    /// Every tool, sorted by name.
    pub fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter()
    }

    /// The groups that have tools, sorted, once each.
    pub fn groups(&self) -> Vec<String> {
        let mut g: Vec<String> = self.entries.iter().map(|e| e.def.group.clone()).collect();
        g.sort();
        g.dedup();
        g
    }

    /// The names of `group`'s tools, sorted.
    pub fn names_in(&self, group: &str) -> Vec<String> {
        self.entries
            .iter()
            .filter(|e| e.def.group == group)
            .map(|e| e.def.name.clone())
            .collect()
    }

    /// The `tools` answer: each tool in `format`, only the given groups when asked.
    pub fn listing(&self, format: ToolFormat, groups: Option<&[String]>) -> Vec<Value> {
        self.entries
            .iter()
            .filter(|e| groups.is_none_or(|g| g.contains(&e.def.group)))
            .map(|e| e.def.listing(format))
            .collect()
    }

    /// How many tools there are (aliases not counted).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no tool at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The `ToolNotFound` message: the name, and the closest names if any.
    pub fn not_found(&self, name: &str) -> String {
        let close = self.suggest(name);
        if close.is_empty() {
            format!("unknown tool `{name}`")
        } else {
            let list: Vec<String> = close.iter().map(|n| format!("`{n}`")).collect();
            format!("unknown tool `{name}`; did you mean {}?", list.join(" or "))
        }
    }

    /// Up to three known names (tools and aliases) closest to `name`.
    pub fn suggest(&self, name: &str) -> Vec<String> {
        validate::closest(name, self.names.keys().map(String::as_str))
    }
}

#[cfg(test)]
mod tests;
