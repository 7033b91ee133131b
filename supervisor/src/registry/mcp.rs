//! What the supervisor decides about an MCP server's tools (`[mcp.servers.NAME]`,
//! group `mcp:NAME`) before they join the registry like any announced tool
//! ([`super::live`]).
//!
//! The server's worker (this binary, `toolvisor worker --group mcp:NAME`) names each
//! tool `NAME__TOOL` (or with the configured `prefix`, which may be empty) and
//! announces them in `ready` and `tools` frames. Here: a tool whose name does not
//! carry its server's prefix is left out (rules like `NAME__*` rely on it), and every tool gets the server's configured `risk`, which
//! [`super::announced::to_def`] raises to `high` for a destructive hint and never
//! lowers. The server's `env` values are secrets: [`secrets`] hands them to the
//! audit log's masking.

use toolvisor_protocol::tools::Risk;
use toolvisor_protocol::worker::AnnouncedTool;

use crate::config::Config;
use crate::config::mcp::GROUP_PREFIX;

/// What the name of the tool that reaches a server's resources and prompts ends with,
/// after `NAME` (announced by its worker whatever the server's `prefix`).
pub const REQUEST_SUFFIX: &str = "__mcp-request";

/// An MCP server's announcement, as the registry takes it.
#[derive(Debug, PartialEq)]
pub struct Admitted {
    /// The server's configured risk: the floor of every tool.
    pub risk: Risk,
    /// The tools that carry the server's prefix, each at `risk`.
    pub tools: Vec<AnnouncedTool>,
    /// Tools left out, and why.
    pub warnings: Vec<String>,
}

/// What of `group`'s announcement joins the registry under `config`. A server that
/// left the configuration (until its worker stops) keeps the default risk, `medium`.
pub fn admit(config: &Config, group: &str, announced: Vec<AnnouncedTool>) -> Admitted {
    let name = group.strip_prefix(GROUP_PREFIX).unwrap_or(group);
    let server = config.mcp.server(group).map(|(_, s)| s);
    let risk = server.map_or(Risk::Medium, |s| s.risk);
    let prefix = server
        .and_then(|s| s.prefix.clone())
        .unwrap_or_else(|| format!("{name}__"));
    let mut out = Admitted {
        risk,
        tools: Vec::new(),
        warnings: Vec::new(),
    };
    // The tool that reaches the server's resources and prompts (the bridge's).
    let request_tool = format!("{name}{REQUEST_SUFFIX}");
    for mut t in announced {
        let own = t.name == request_tool;
        if !own && (!t.name.starts_with(&prefix) || t.name.len() == prefix.len()) {
            let shown: String = t.name.chars().take(80).collect();
            out.warnings.push(format!(
                "group `{group}`: tool {shown:?} does not start with `{prefix}`; left out"
            ));
            continue;
        }
        // MCP has no risk of its own: the configuration's word is the tool's risk; reading
        // resources and prompts is a low-risk call.
        t.risk = Some(if own { Risk::Low } else { risk });
        t.paths.clear();
        out.tools.push(t);
    }
    out
}

/// What a reload cannot do for MCP servers, said in the log: a server added to the
/// configuration starts with the next start of toolvisor, and one removed keeps
/// running until then (`running`: the groups that have a pool).
pub fn reload_notes<'a>(running: impl Iterator<Item = &'a String>, config: &Config) -> Vec<String> {
    let running: Vec<&String> = running.collect();
    let mut notes = Vec::new();
    for name in config.mcp.servers.keys() {
        let group = crate::config::mcp::group_of(name);
        if !running.contains(&&group) {
            notes.push(format!(
                "MCP server `{name}` is new; it starts with the next start of toolvisor"
            ));
        }
    }
    for group in running {
        if let Some(name) = group.strip_prefix(GROUP_PREFIX)
            && !config.mcp.servers.contains_key(name)
        {
            notes.push(format!(
                "MCP server `{name}` was removed from the configuration; it keeps running until toolvisor restarts"
            ));
        }
    }
    notes
}

/// Why `tool` is missing when it names a configured stdio server (`NAME__…`) that is
/// not started because this host cannot build its sandbox (`refused`: why not).
pub fn not_started(config: &Config, refused: Option<&str>, tool: &str) -> Option<String> {
    let why = refused?;
    let (name, _) = tool.split_once("__")?;
    let server = config.mcp.servers.get(name)?;
    (server.sandbox.is_on() && !server.command.is_empty()).then(|| {
        format!(
            "unknown tool `{tool}`: MCP server `{name}` is not started: it cannot run in the command sandbox on this host ({why}); `sandbox = \"off\"` in [mcp.servers.{name}] runs it unsandboxed"
        )
    })
}

/// Mask the configured servers' `env` values in the audit log from now on.
pub fn secrets(config: &Config) {
    crate::audit::redact::add_secrets(config.mcp.secrets());
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
            risk: Some(Risk::High),
            paths: vec!["file".into()],
        }
    }

    #[test]
    fn only_prefixed_tools_join_at_the_configured_risk() {
        let cfg =
            Config::parse("[mcp.servers.gh]\ncommand = [\"x\"]\nrisk = \"low\"\n", "t").unwrap();
        let a = admit(
            &cfg,
            "mcp:gh",
            vec![
                tool("gh__search"),
                tool("read_file"),
                tool("gh__"),
                tool("ghx__a"),
            ],
        );
        assert_eq!(a.risk, Risk::Low);
        assert_eq!(a.tools.len(), 1);
        assert_eq!(a.tools[0].risk, Some(Risk::Low));
        assert!(a.tools[0].paths.is_empty());
        assert_eq!(a.warnings.len(), 3, "{:?}", a.warnings);
        // Gone from the configuration: the default risk.
        let none = Config::default();
        assert_eq!(
            admit(&none, "mcp:gh", vec![tool("gh__a")]).risk,
            Risk::Medium
        );
    }

    #[test]
    fn a_prefix_or_none_and_the_request_tool_at_low_risk() {
        let cfg = Config::parse(
            "[mcp.servers.gh]\ncommand = [\"x\"]\nrisk = \"high\"\nprefix = \"\"\n\
             [mcp.servers.p]\ncommand = [\"x\"]\nprefix = \"p_\"\n",
            "t",
        )
        .unwrap();
        let a = admit(
            &cfg,
            "mcp:gh",
            vec![tool("search"), tool("gh__mcp-request")],
        );
        assert_eq!(a.tools.len(), 2, "{:?}", a.warnings);
        assert_eq!(a.tools[0].risk, Some(Risk::High));
        assert_eq!(a.tools[1].risk, Some(Risk::Low));
        let p = admit(
            &cfg,
            "mcp:p",
            vec![tool("p_a"), tool("p__a"), tool("p__mcp-request")],
        );
        let names: Vec<&str> = p.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["p_a", "p__a", "p__mcp-request"]);
        let bad = Config::parse(
            "[mcp.servers.x]\ncommand = [\"x\"]\nprefix = \"a b\"\n",
            "t",
        );
        assert!(bad.is_err_and(|e| e.to_string().contains("mcp.servers.x.prefix")));
    }

    #[test]
    fn a_reload_says_which_servers_it_cannot_start_or_stop() {
        let cfg = Config::parse(
            "[mcp.servers.new]\ncommand = [\"x\"]\n[mcp.servers.kept]\ncommand = [\"y\"]\n",
            "t",
        )
        .unwrap();
        let running = ["search".to_string(), "mcp:kept".into(), "mcp:gone".into()];
        let notes = reload_notes(running.iter(), &cfg);
        assert_eq!(notes.len(), 2, "{notes:?}");
        assert!(notes[0].contains("`new` is new"));
        assert!(notes[1].contains("`gone` was removed"));
    }

    #[test]
    fn a_server_without_its_sandbox_is_named_in_the_missing_tools_error() {
        let cfg = Config::parse(
            "[mcp.servers.a]\ncommand = [\"x\"]\n[mcp.servers.b]\ncommand = [\"x\"]\nsandbox = \"off\"\n",
            "t",
        )
        .unwrap();
        let msg = not_started(&cfg, Some("no user namespaces"), "a__echo").unwrap();
        assert!(
            msg.contains("no user namespaces") && msg.contains("[mcp.servers.a]"),
            "{msg}"
        );
        assert_eq!(not_started(&cfg, None, "a__echo"), None);
        assert_eq!(not_started(&cfg, Some("x"), "b__echo"), None);
        assert_eq!(not_started(&cfg, Some("x"), "c__echo"), None);
        assert_eq!(not_started(&cfg, Some("x"), "echo"), None);
    }

    #[test]
    fn a_destructive_hint_still_raises_the_configured_risk() {
        let cfg = Config::parse("[mcp.servers.s]\nurl = \"http://h/mcp\"\n", "t").unwrap();
        let mut t = tool("s__drop");
        t.annotations.destructive_hint = Some(true);
        let a = admit(&cfg, "mcp:s", vec![t]);
        let def = super::super::announced::to_def("mcp:s", a.risk, a.tools[0].clone());
        assert_eq!(def.risk, Risk::High);
        let plain = admit(&cfg, "mcp:s", vec![tool("s__list")]);
        let def = super::super::announced::to_def("mcp:s", plain.risk, plain.tools[0].clone());
        assert_eq!(def.risk, Risk::Medium);
    }
}
