//! Risk that depends on what the session already did: a tool whose definition names a
//! `familiar_by` argument ([`PolicyTraits::familiar_by`]) is at its own risk until a
//! call of it with the same value of that argument has succeeded in the session, and
//! low after. `activate_skill` is medium on a skill's first activation (it brings new
//! instructions into the agent's context), low when the agent loads it again.
//!
//! Only an `ok` result counts: a denied, failed or cancelled activation leaves the next
//! one at the tool's own risk. The set lives with the session and dies with it.

use std::collections::HashSet;
use std::sync::Mutex;

use serde_json::Value;
use toolvisor_protocol::message::Status;
use toolvisor_protocol::tools::{PolicyTraits, Risk, ToolDef};

/// Most (tool, value) pairs one session remembers; past it, nothing more is learnt
/// (later first uses stay at the tool's own risk: the safe side).
const MAX_FAMILIAR: usize = 4096;

/// The (tool, argument value) pairs a session has used successfully.
#[derive(Debug, Default)]
pub struct Familiar(Mutex<HashSet<(String, String)>>);

impl Familiar {
    /// The risk the policy starts from for this call: low when the session already
    /// succeeded with the same value, else the tool's own.
    pub fn base_risk(&self, tool: &ToolDef, args: &Value) -> Risk {
        match key(tool, args) {
            Some(k) if self.lock().contains(&k) => Risk::Low.min(tool.risk),
            _ => tool.risk,
        }
    }

    /// Remember a call that ended `status` (only `ok` counts).
    pub fn learn(&self, tool: &ToolDef, args: &Value, status: Status) {
        if status != Status::Ok {
            return;
        }
        if let Some(k) = key(tool, args) {
            let mut set = self.lock();
            if set.len() < MAX_FAMILIAR {
                set.insert(k);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<(String, String)>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The pair a call of `tool` is known by, when the tool has a `familiar_by` argument
/// and the call gives it as a string.
fn key(tool: &ToolDef, args: &Value) -> Option<(String, String)> {
    let PolicyTraits {
        familiar_by: Some(arg),
        ..
    } = tool.policy
    else {
        return None;
    };
    let value = args.get(arg)?.as_str()?;
    Some((tool.name.clone(), value.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolvisor_protocol::tools::{activate_skill, builtin, find};

    #[test]
    fn only_a_success_with_the_same_value_lowers_the_risk() {
        let skills = [activate_skill::Skill {
            name: "a".into(),
            description: "d".into(),
        }];
        let tool = activate_skill::def(&skills);
        let f = Familiar::default();
        let a = json!({"name": "a"});
        let b = json!({"name": "b"});
        assert_eq!(f.base_risk(&tool, &a), Risk::Medium);
        f.learn(&tool, &a, Status::Denied);
        f.learn(&tool, &a, Status::Error);
        assert_eq!(
            f.base_risk(&tool, &a),
            Risk::Medium,
            "failures do not count"
        );
        f.learn(&tool, &a, Status::Ok);
        assert_eq!(f.base_risk(&tool, &a), Risk::Low);
        assert_eq!(f.base_risk(&tool, &b), Risk::Medium, "per skill");
        assert_eq!(
            Familiar::default().base_risk(&tool, &a),
            Risk::Medium,
            "per session"
        );
    }

    #[test]
    fn tools_without_the_trait_keep_their_risk() {
        let tools = builtin();
        let run = find(&tools, "run_command").unwrap();
        let f = Familiar::default();
        let args = json!({"command": "ls"});
        f.learn(run, &args, Status::Ok);
        assert_eq!(f.base_risk(run, &args), Risk::High);
    }
}
