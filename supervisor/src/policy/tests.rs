//! `explain` through the registry: unknown tools and invalid arguments are errors.

use serde_json::{Value, json};
use toolvisor_protocol::tools::builtin;
use toolvisor_protocol::worker::Roots;

use super::*;
use crate::config::{Confined, Mode, PolicyConfig};
use crate::registry::Registry;

/// `auto` with no rules, the rule engine's own answers.
fn auto() -> Policy {
    let cfg = PolicyConfig {
        mode: Mode::Auto,
        confined: Confined::Ask,
        confirm_timeout_ms: 60_000,
        rules: Vec::new(),
    };
    let roots = Roots {
        private: "/ws".into(),
        shared: None,
        public: None,
    };
    Policy::new(&cfg, &roots, &ToolNames::of(&builtin())).unwrap()
}

fn explain(p: &Policy, tool: &str, args: Value) -> toolvisor_protocol::message::ServerMessage {
    let registry = Registry::new(builtin()).unwrap();
    super::explain::explain("e".into(), p, &registry, tool, &args)
}

#[test]
fn explain_reports_validation_errors() {
    use toolvisor_protocol::ErrorType;
    use toolvisor_protocol::message::ServerMessage;
    let p = auto();
    for (tool, args, kind) in [
        ("run_command", json!({}), ErrorType::InvalidParams),
        (
            "run_command",
            json!({"command": 3}),
            ErrorType::InvalidParams,
        ),
        ("no_such_tool", json!({}), ErrorType::ToolNotFound),
    ] {
        let m = explain(&p, tool, args);
        let ServerMessage::Explanation {
            decision,
            error: Some(e),
            parts: None,
            ..
        } = &m
        else {
            panic!("{m:?}");
        };
        assert_eq!(decision, "error");
        assert_eq!(e.kind, kind, "{m:?}");
    }
    let m = explain(&p, "read_file", json!({"path": "a"}));
    assert!(
        matches!(&m, ServerMessage::Explanation { decision, parts: None, .. } if decision == "allow"),
        "{m:?}"
    );
    let m = explain(&p, "read_file", json!({"path": "/etc/passwd"}));
    assert!(
        matches!(&m, ServerMessage::Explanation { decision, .. } if decision == "deny"),
        "{m:?}"
    );
}
