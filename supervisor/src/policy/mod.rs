//! The policy engine is the `toolvisor-policy` crate (policy/): the only code that
//! decides. This module joins it to the supervisor: the policy of a whole
//! configuration, and `explain` with the tool looked up in the registry.

pub use toolvisor_policy::*;

use toolvisor_protocol::worker::Roots;

use crate::config::Config;

/// The policy of a whole configuration: `[policy]`, with `[network] allow` as the
/// domains commands and `web_fetch` reach.
pub fn for_config(cfg: &Config, roots: &Roots, tools: &ToolNames) -> Result<Policy, String> {
    Ok(Policy::new(&cfg.policy, roots, tools)?.with_network_allow(&cfg.network.allow))
}

/// `explain` with the tool found in the registry and its arguments checked first.
pub mod explain {
    use serde_json::Value;
    use toolvisor_protocol::message::ServerMessage;
    use toolvisor_protocol::{ErrorType, Id};

    use toolvisor_policy::explain::refused;
    pub use toolvisor_policy::explain::render;

    use super::Policy;
    use crate::registry::Registry;

    /// The `explanation` for a call of `tool` with `args`: an error when the tool is
    /// unknown or the arguments invalid, else what the policy would do.
    pub fn explain(
        id: Id,
        policy: &Policy,
        registry: &Registry,
        tool: &str,
        args: &Value,
    ) -> ServerMessage {
        let Some(entry) = registry.find(tool) else {
            return refused(
                id,
                ErrorType::ToolNotFound,
                "high",
                registry.not_found(tool),
            );
        };
        let def = &entry.def;
        if let Err(violations) = entry.check(args) {
            let message = format!("invalid arguments for {}:\n{violations}", def.name);
            return refused(id, ErrorType::InvalidParams, def.risk.as_str(), message);
        }
        toolvisor_policy::explain::explain(id, policy, def, args)
    }
}

#[cfg(test)]
mod tests;
