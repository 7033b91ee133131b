//! docs/CONFIG.md documents every key: each key of a configuration with every optional
//! value set appears in it, and each of its TOML examples parses.

use super::*;

const DOC: &str = include_str!("../../../docs/CONFIG.md");

/// A configuration with every optional key set, so serialising it names them all.
fn everything() -> Config {
    let mut c = Config::default();
    c.workspace.shared = Some("s".into());
    c.workspace.public = Some("p".into());
    c.workers.exec.count = Some(2);
    let mut rule = Rule::new("run_command", Action::Allow);
    rule.risk = Some(toolvisor_protocol::tools::Risk::Low);
    rule.message = Some("m".into());
    rule.network = Some(Network::All(true));
    rule.expose = Some(Expose::Ports(vec![8000]));
    rule.writable = Some(vec!["~/.cache/pip".into()]);
    rule.reveal = Some(vec!["~/.npmrc".into()]);
    c.network.allow = vec!["crates.io".into()];
    rule.conditions.push(Condition {
        param: "command".into(),
        operator: Operator::StartsWith,
        value: "cargo ".into(),
    });
    c.policy.rules.push(rule);
    let external = GroupConfig {
        command: vec!["worker".into()],
        risk: Some(toolvisor_protocol::tools::Risk::Medium),
        sandbox: Some(SandboxMode::Off),
        network: Network::Domains(vec!["api.example.com".into()]),
        ..GroupConfig::default()
    };
    c.workers.external.insert("words".into(), external);
    let server = mcp::McpServerConfig {
        command: vec!["server".into()],
        url: Some("http://h/mcp".into()),
        env: [("K".to_string(), "v".to_string())].into(),
        tools: Some(vec!["t".into()]),
        prefix: Some("gh_".into()),
        ..mcp::McpServerConfig::default()
    };
    c.mcp.servers.insert("gh".into(), server);
    c
}

/// Every key name in `v`, at any depth.
fn keys(v: &toml::Value, out: &mut std::collections::BTreeSet<String>) {
    match v {
        toml::Value::Table(t) => {
            for (k, v) in t {
                out.insert(k.clone());
                keys(v, out);
            }
        }
        toml::Value::Array(a) => a.iter().for_each(|v| keys(v, out)),
        _ => {}
    }
}

#[test]
fn every_key_is_documented() {
    let v = toml::Value::try_from(everything()).expect("serialise");
    let mut all = std::collections::BTreeSet::new();
    keys(&v, &mut all);
    // The names of tables that hold keys (`words` is the example's external group).
    for table in [
        "workspace",
        "server",
        "supervisor",
        "policy",
        "workers",
        "edit",
        "limits",
        "audit",
        "web",
        "skills",
        "undo",
        "hooks",
        "words",
        "mcp",
        "servers",
        "gh",
        "K",
    ] {
        all.remove(table);
    }
    let missing: Vec<&String> = all
        .iter()
        .filter(|k| !DOC.contains(&format!("`{k}`")) && !DOC.contains(&format!("`limits.{k}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "keys docs/CONFIG.md does not name: {missing:?}"
    );
}

#[test]
fn every_example_parses() {
    let mut blocks = 0;
    let mut rest = DOC;
    while let Some(start) = rest.find("```toml\n") {
        let body = &rest[start + 8..];
        let end = body.find("```").expect("a closed block");
        Config::parse(&body[..end], "docs/CONFIG.md")
            .unwrap_or_else(|e| panic!("{e}\n{}", &body[..end]));
        blocks += 1;
        rest = &body[end..];
    }
    assert!(blocks >= 10, "{blocks} examples");
}
