//! The registry the service calls through: a snapshot swapped whole when a group
//! announces its tools, so a call keeps the definition it was admitted with and a
//! reader never waits on a writer for longer than an `Arc` clone.
//!
//! An announcement is a worker's word about itself. It is checked before it joins:
//! names must be short and plain (they end up in rules, audit records and MCP tool
//! names), the count is bounded, a broken schema or a name another group holds leaves
//! that one tool out, and risk may only be raised ([`super::announced`]).

use std::sync::{Arc, RwLock};

use toolvisor_protocol::tools::{self, Risk, ToolDef};
use toolvisor_protocol::worker::AnnouncedTool;

use super::Registry;
use super::announced::to_def;

/// Most tools one group may announce.
pub const MAX_TOOLS_PER_GROUP: usize = 512;

/// What changed when a group announced.
#[derive(Debug, Default, PartialEq)]
pub struct Change {
    /// The group's tool names now, sorted.
    pub tools: Vec<String>,
    /// Whether that differs from before.
    pub changed: bool,
    /// Tools left out, and why.
    pub warnings: Vec<String>,
}

/// The current registry snapshot.
#[derive(Debug)]
pub struct LiveRegistry(RwLock<Arc<Registry>>);

impl LiveRegistry {
    /// The registry the service starts with.
    pub fn new(registry: Registry) -> LiveRegistry {
        LiveRegistry(RwLock::new(Arc::new(registry)))
    }

    /// The registry now.
    pub fn get(&self) -> Arc<Registry> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Replace `group`'s tools with what its worker announced (each at least `floor`
    /// risk).
    pub fn announce(&self, group: &str, floor: Risk, tools: Vec<AnnouncedTool>) -> Change {
        let mut warnings = Vec::new();
        let mut defs: Vec<ToolDef> = Vec::new();
        for t in tools {
            if defs.len() == MAX_TOOLS_PER_GROUP {
                warnings.push(format!(
                    "group `{group}` announced more than {MAX_TOOLS_PER_GROUP} tools; the rest are left out"
                ));
                break;
            }
            match check_name(&t.name) {
                Ok(()) => defs.push(to_def(group, floor, t)),
                Err(why) => warnings.push(format!("group `{group}`: {why}; the tool is left out")),
            }
        }
        self.replace(group, defs, warnings)
    }

    /// Replace a built-in group's announced tools (the `meta` worker's
    /// `activate_skill`): each must be one of the group's templates
    /// ([`tools::from_announcement`]), which keeps its own risk and policy; only the
    /// schema and description come from the worker.
    pub fn announce_builtin(&self, group: &str, announced: Vec<AnnouncedTool>) -> Change {
        let mut warnings = Vec::new();
        let mut defs = Vec::new();
        for t in announced {
            match tools::from_announcement(group, &t.name, &t.description, &t.input_schema) {
                Some(def) => defs.push(def),
                None => warnings.push(format!(
                    "group `{group}` announced `{}`, which is not one of its tools; left out",
                    t.name.chars().take(80).collect::<String>()
                )),
            }
        }
        self.replace(group, defs, warnings)
    }

    /// Swap in the snapshot with `group`'s tools replaced by `defs`.
    fn replace(&self, group: &str, defs: Vec<ToolDef>, mut warnings: Vec<String>) -> Change {
        let mut slot = self.0.write().unwrap_or_else(|p| p.into_inner());
        let before = slot.names_in(group);
        let (next, more) = slot.with_group(group, defs);
        warnings.extend(more);
        let tools = next.names_in(group);
        let changed = tools != before || !same_defs(&slot, &next, group);
        if changed {
            *slot = Arc::new(next);
        }
        Change {
            tools,
            changed,
            warnings,
        }
    }
}

/// Whether every tool of `group` has the same schema and risk in both snapshots.
fn same_defs(a: &Registry, b: &Registry, group: &str) -> bool {
    a.names_in(group)
        .iter()
        .all(|n| match (a.find(n), b.find(n)) {
            (Some(x), Some(y)) => {
                x.def.parameters == y.def.parameters
                    && x.def.risk == y.def.risk
                    && x.def.description == y.def.description
            }
            _ => false,
        })
}

/// A tool name a worker may announce: 1 to 64 of `[A-Za-z0-9_-]`.
fn check_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if ok {
        Ok(())
    } else {
        let shown: String = name.chars().take(80).collect();
        Err(format!(
            "tool name {shown:?} is not 1 to 64 letters, digits, `_` or `-`"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolvisor_protocol::worker::Annotations;

    fn tool(name: &str) -> AnnouncedTool {
        AnnouncedTool {
            name: name.into(),
            title: None,
            description: "d".into(),
            input_schema: json!({"type": "object"}),
            output_schema: None,
            annotations: Annotations::default(),
            risk: None,
            paths: vec![],
        }
    }

    #[test]
    fn an_announcement_replaces_the_group_and_says_what_changed() {
        let live = LiveRegistry::new(Registry::default());
        let c = live.announce("w", Risk::Medium, vec![tool("a"), tool("b")]);
        assert_eq!(c.tools, ["a", "b"]);
        assert!(c.changed && c.warnings.is_empty());
        let again = live.announce("w", Risk::Medium, vec![tool("b"), tool("a")]);
        assert!(
            !again.changed,
            "the same tools in another order change nothing"
        );
        let fewer = live.announce("w", Risk::Medium, vec![tool("a")]);
        assert!(fewer.changed);
        assert!(live.get().find("b").is_none());
    }

    #[test]
    fn a_builtin_group_announces_only_its_templates() {
        let live = LiveRegistry::new(Registry::default());
        let skills = [tools::activate_skill::Skill {
            name: "pdf".into(),
            description: "PDFs".into(),
        }];
        let full = tools::activate_skill::def(&skills);
        let announced = AnnouncedTool {
            name: full.name.clone(),
            description: full.description.clone(),
            input_schema: full.parameters.clone(),
            ..tool("x")
        };
        let c = live.announce_builtin(tools::META, vec![announced.clone(), tool("rm_rf")]);
        assert_eq!(c.tools, ["activate_skill"]);
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        let reg = live.get();
        let def = &reg.find("activate_skill").unwrap().def;
        assert_eq!(
            def.risk,
            Risk::Medium,
            "the template's risk, whatever was announced"
        );
        assert!(
            reg.find("activate_skill")
                .unwrap()
                .check(&json!({"name": "pdf"}))
                .is_ok()
        );
        assert!(
            reg.find("activate_skill")
                .unwrap()
                .check(&json!({"name": "nope"}))
                .is_err()
        );
        // The same announcement again changes nothing; none removes the tool.
        assert!(!live.announce_builtin(tools::META, vec![announced]).changed);
        let gone = live.announce_builtin(tools::META, vec![]);
        assert!(gone.changed && gone.tools.is_empty());
        // Another group cannot claim the template.
        let other = live.announce_builtin(tools::SEARCH, vec![tool("activate_skill")]);
        assert!(other.tools.is_empty() && other.warnings.len() == 1);
    }

    #[test]
    fn bad_names_and_floods_are_left_out() {
        let live = LiveRegistry::new(Registry::default());
        let c = live.announce(
            "w",
            Risk::Low,
            vec![
                tool("ok"),
                tool("has space"),
                tool(""),
                tool(&"x".repeat(65)),
            ],
        );
        assert_eq!(c.tools, ["ok"]);
        assert_eq!(c.warnings.len(), 3);
        let many = (0..MAX_TOOLS_PER_GROUP + 5)
            .map(|i| tool(&format!("t{i}")))
            .collect();
        let c = live.announce("w", Risk::Low, many);
        assert_eq!(c.tools.len(), MAX_TOOLS_PER_GROUP);
        assert_eq!(c.warnings.len(), 1);
    }
}
