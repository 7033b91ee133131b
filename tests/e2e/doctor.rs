//! `toolvisor doctor` and the guard canary: at start the daemon runs a canary command
//! in a real command sandbox that tries each way out; `doctor` prints what held, and
//! fails when a guard does not (here: commands given the host's network).

use serde_json::Value;

use crate::harness::*;

fn doctor(s: &Server) -> (Option<i32>, String) {
    let out = toolvisor(s.ws(), &["doctor"]);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code(), text)
}

fn audit_kind(s: &Server, kind: &str) -> Vec<Value> {
    let log = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
    log.lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|r| r["kind"] == kind)
        .collect()
}

#[test]
fn doctor_verifies_every_guard_in_a_real_command_sandbox() {
    let s = Server::start(ALLOW_ALL);
    let sandboxed = block(std::time::Duration::from_secs(30), async {
        s.guards().await.namespaces
    });
    let (code, text) = doctor(&s);
    if !sandboxed {
        // No namespaces here: doctor must not claim the boundary holds.
        assert_eq!(code, Some(1), "{text}");
        return;
    }
    assert_eq!(code, Some(0), "{text}");
    for g in [
        "descriptors",
        "hidden",
        "write_outside",
        "protected",
        "socket",
        "network",
        "signal",
        "counters",
    ] {
        assert!(
            text.lines()
                .any(|l| l.starts_with(g) && l.ends_with("verified")),
            "{g}: {text}"
        );
    }
    let records = audit_kind(&s, "guards_verified");
    assert_eq!(
        records.last().map(|r| r["all"].clone()),
        Some(Value::Bool(true))
    );
}

#[test]
fn doctor_says_which_guard_does_not_hold_and_fails() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\nnetwork = true\n"));
    let (code, text) = doctor(&s);
    assert_eq!(code, Some(1), "{text}");
    let network = text
        .lines()
        .find(|l| l.starts_with("network"))
        .unwrap_or("");
    assert!(network.contains("NOT VERIFIED"), "{text}");
    let records = audit_kind(&s, "guards_verified");
    assert_eq!(
        records.last().map(|r| r["all"].clone()),
        Some(Value::Bool(false))
    );
}
