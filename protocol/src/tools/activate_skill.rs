//! `activate_skill`: load a skill of the workspace — a directory with a `SKILL.md`
//! under one of `[skills] paths` — when the agent needs it (progressive disclosure).
//!
//! The tool exists only while at least one skill does: the `meta` group's worker finds
//! the skills and announces the tool with its `name` an `enum` of them
//! ([`def`]), again whenever it restarts (SIGHUP). The first successful activation of
//! a skill in a session is medium risk (it brings new instructions into the agent's
//! context); later ones of the same skill are low ([`super::PolicyTraits::familiar_by`]).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use super::args::text;
use super::def::{Hints, PolicyTraits, Risk, ToolDef};

/// The tool's name: what the registry, the rules, the audit log and the worker's
/// dispatch know it by.
pub const NAME: &str = "activate_skill";

/// The most skills the tool offers (its `enum`); more are left out with a warning.
pub const MAX_SKILLS: usize = 256;
/// The longest skill name, in bytes.
pub const MAX_NAME: usize = 64;
/// The longest description a listing shows, in characters.
pub const MAX_DESCRIPTION: usize = 1024;

/// A skill as the tool's listing shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skill {
    /// Its name (the directory's, or the front matter's `name`).
    pub name: String,
    /// What it is for, from its front matter.
    pub description: String,
}

/// The definition offering `skills` (sorted by name, as given). With no skills it is
/// only the template the supervisor fills from the worker's announcement.
pub fn def(skills: &[Skill]) -> ToolDef {
    let names: Vec<&str> = skills.iter().map(|s| s.name.as_str()).collect();
    let mut description = String::from(
        "Activate a skill of this workspace: returns its instructions (the body of its SKILL.md) and the list of its files. Skills:",
    );
    for s in skills {
        description.push_str(&format!("\n- {}: {}", s.name, s.description));
    }
    ToolDef {
        output: super::def::result_schema(&[
            ("skill", json!({"type": "string"})),
            ("dir", json!({"type": "string"})),
            ("files", json!({"type": "integer"})),
        ]),
        risk: Risk::Medium,
        hints: Hints::READ,
        describe,
        policy: PolicyTraits {
            familiar_by: Some("name"),
            ..PolicyTraits::default()
        },
        ..ToolDef::new(
            NAME,
            super::META,
            &description,
            json!({
                "type": "object",
                "properties": {
                    "name": {"type": "string", "enum": names, "description": "The skill to activate."}
                },
                "required": ["name"],
                "additionalProperties": false,
            }),
        )
    }
}

fn describe(_: &ToolDef, a: &Map<String, Value>, _: &[String]) -> String {
    format!("Activate the skill `{}`", text(a, "name"))
}
