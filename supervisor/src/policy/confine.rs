//! The confined tier (docs/POLICY.md, "Confined calls"): a call whose every reach stays
//! inside a boundary the kernel enforces — and that toolvisor checked holds — runs
//! without asking, whatever its risk or its command's text. Asking is left for the
//! calls that would widen the boundary.
//!
//! Confined are: `run_command` and `write_input` when the command sandbox's guards are
//! verified (namespaces, hidden paths, no network but the domains of `[network]
//! allow`, writes only to the workspace roots and `workers.exec.writable`) and the
//! call asks for no widening beyond them (`network`, `writable`, `reveal`, `expose`);
//! the edit tools on paths outside `public:/` (the
//! protected ones are refused by the edit worker itself). A rule that says `ask` or
//! `deny` still decides: a person's explicit rule outranks the tier.

use std::sync::{Arc, RwLock};

use toolvisor_protocol::tools::{EDIT, EXEC};

use super::decide::Verdict;
use super::facts::Facts;
use super::{Decision, Policy};
use crate::config::{Action, Confined, Mode};

/// Whether the command sandbox's guards are verified here (`Err`: why not). Set by
/// the guard canary at start and after each reload.
#[derive(Clone, Debug)]
pub struct Boundary(Arc<RwLock<Result<(), String>>>);

impl Default for Boundary {
    fn default() -> Self {
        Boundary(Arc::new(RwLock::new(Err(
            "the guard canary has not finished yet".into(),
        ))))
    }
}

impl Boundary {
    /// Record what the canary found.
    pub fn set(&self, verified: Result<(), String>) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = verified;
    }

    /// What the canary found.
    pub fn get(&self) -> Result<(), String> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Policy {
    /// The boundary state this policy reads.
    pub fn boundary(&self) -> &Boundary {
        &self.boundary
    }

    /// Read the boundary state `other` reads (a reloaded policy keeps it).
    pub fn share_boundary(&mut self, other: &Policy) {
        self.boundary = other.boundary.clone();
    }

    /// Turn an ask into a run when the call is confined and nothing else forbids it.
    pub(super) fn confine(&self, facts: &Facts<'_>, verdicts: &[Verdict<'_>], d: &mut Decision) {
        if d.action != Action::Ask || self.confined != Confined::Allow || self.mode == Mode::Ask {
            return;
        }
        // A rule's own ask or deny is a person's word.
        if verdicts
            .iter()
            .any(|v| v.rule.is_some_and(|r| r.action != Action::Allow))
        {
            return;
        }
        match self.confinement(facts) {
            Some(Ok(why)) => {
                d.action = Action::Allow;
                d.confined = true;
                d.reason = format!("confined: {why} ([policy] confined = \"allow\")");
            }
            Some(Err(why)) => {
                d.reason = format!("{}; not confined: {why}", d.reason);
            }
            None => {}
        }
    }

    /// Whether the call is confined: `None` for tools the tier never covers, `Ok` with
    /// what confines it, `Err` with why it is not.
    fn confinement(&self, facts: &Facts<'_>) -> Option<Result<String, String>> {
        let def = facts.def;
        match def.group.as_str() {
            EXEC if matches!(def.name.as_str(), "run_command" | "write_input") => {
                let wants = super::widen::Wants::of(facts.args);
                let wide = super::widen::ungranted(&wants, &[], &self.network_allow);
                if !wide.is_empty() {
                    let what: Vec<&str> = wide.iter().map(|w| w.0.as_str()).collect();
                    let how: Vec<&str> = wide.iter().map(|w| w.1.as_str()).collect();
                    return Some(Err(format!(
                        "it asks to widen the sandbox ({}; to grant it: {})",
                        what.join("; "),
                        how.join("; ")
                    )));
                }
                Some(match self.boundary.get() {
                    Ok(()) => Ok("it runs in the verified command sandbox (no network, \
                         writes only to the workspace, credentials hidden)"
                        .into()),
                    Err(why) => Err(format!("SandboxUnverified: {why}")),
                })
            }
            EDIT if !facts.touches_public() => Some(Ok(
                "an edit inside the workspace (protected paths are refused)".into(),
            )),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::widen::Wants;
    use serde_json::{Value, json};

    #[test]
    fn widening_is_what_asks_for_more_than_the_sandbox() {
        let wants = |v: Value| Wants::of(v.as_object().expect("object"));
        assert!(!wants(json!({"command": "ls"})).any());
        assert!(!wants(json!({"network": false, "writable": []})).any());
        let w = wants(json!({"network": ["a.com"], "reveal": ["~/.ssh"], "expose": [80]}));
        assert_eq!(w.describe().len(), 3, "{:?}", w.describe());
    }
}
