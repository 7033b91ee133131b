//! `[mcp.servers.NAME]`: MCP servers whose tools join toolvisor's own, each run as the
//! one worker of group `mcp:NAME` (docs/MCP.md, docs/CONFIG.md).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use toolvisor_protocol::tools::Risk;
use toolvisor_protocol::worker::McpServerInit;

use super::{Config, GroupConfig, Network, WorkerSandbox};

/// The group prefix of an MCP server's worker: `mcp:NAME`.
pub const GROUP_PREFIX: &str = toolvisor_protocol::tools::def::MCP_GROUP_PREFIX;

/// The `[mcp]` table.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct McpConfig {
    /// `[mcp.servers.NAME]`, by NAME.
    pub servers: BTreeMap<String, McpServerConfig>,
}

/// One `[mcp.servers.NAME]`: a command started as a stdio server, or a Streamable
/// HTTP endpoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The server's command line (stdio transport): program first.
    #[serde(default)]
    pub command: Vec<String>,
    /// Or the server's Streamable HTTP endpoint (`http://` or `https://`).
    #[serde(default)]
    pub url: Option<String>,
    /// Variables set for this server only (masked in the audit log).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Risk of its tools; a tool's `destructiveHint: true` raises it to `high`.
    #[serde(default = "medium")]
    pub risk: Risk,
    /// Deadline of each call (a call's own `timeout_ms` may shorten it).
    #[serde(default = "sixty_seconds")]
    pub timeout_ms: u64,
    /// How long the server has to start: answer `initialize` and `tools/list` (an
    /// extension of the documented keys; `npx` servers may download first).
    #[serde(default = "thirty_seconds")]
    pub startup_timeout_ms: u64,
    /// Only these tools (the server's own names) are offered; all when absent.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// A stdio server runs in the command sandbox (`"on"`, the default) or as the
    /// daemon's user (`"off"`).
    #[serde(default)]
    pub sandbox: WorkerSandbox,
    /// The sandboxed server's network: `true` the host's; `false` (the default) or a
    /// list of domains (not enforced yet) none.
    #[serde(default)]
    pub network: Network,
    /// What its tools' names start with: `NAME__` when absent; `""` mounts them under
    /// the server's own names (a name another tool holds is left out, with a warning).
    #[serde(default)]
    pub prefix: Option<String>,
}

impl Default for McpServerConfig {
    fn default() -> Self {
        McpServerConfig {
            command: Vec::new(),
            url: None,
            env: BTreeMap::new(),
            risk: medium(),
            timeout_ms: sixty_seconds(),
            startup_timeout_ms: thirty_seconds(),
            tools: None,
            sandbox: WorkerSandbox::On,
            network: Network::default(),
            prefix: None,
        }
    }
}

fn medium() -> Risk {
    Risk::Medium
}

fn sixty_seconds() -> u64 {
    60_000
}

fn thirty_seconds() -> u64 {
    30_000
}

impl McpConfig {
    /// Names, transports and timeouts that serde cannot check.
    pub fn validate(&self) -> Result<(), String> {
        for (name, s) in &self.servers {
            let key = format!("mcp.servers.{name}");
            if !valid_name(name) {
                return Err(format!(
                    "{key}: a server name is 1 to {MAX_NAME} of A-Z, a-z, 0-9, `_` and `-` (its tools are NAME__TOOL, at most 64 characters)"
                ));
            }
            match (s.command.is_empty(), &s.url) {
                (true, None) => {
                    return Err(format!("{key}: set `command` (stdio) or `url` (HTTP)"));
                }
                (false, Some(_)) => {
                    return Err(format!("{key}: set `command` or `url`, not both"));
                }
                (false, None) if s.command[0].is_empty() => {
                    return Err(format!("{key}.command: the program is empty"));
                }
                (true, Some(url)) if !is_http(url) => {
                    return Err(format!(
                        "{key}.url: `{url}` is not an http:// or https:// address"
                    ));
                }
                _ => {}
            }
            if let Some(prefix) = &s.prefix
                && !valid_prefix(prefix)
            {
                return Err(format!(
                    "{key}.prefix: `{prefix}` is not 0 to {MAX_PREFIX} of A-Z, a-z, 0-9, `_` and `-`"
                ));
            }
            if s.timeout_ms == 0 || s.startup_timeout_ms == 0 {
                return Err(format!(
                    "{key}: timeout_ms and startup_timeout_ms must be at least 1"
                ));
            }
            if let Some(k) = s
                .env
                .keys()
                .find(|k| k.is_empty() || k.contains(['=', '\0']))
            {
                return Err(format!("{key}.env: `{k}` is not a variable name"));
            }
        }
        Ok(())
    }
}

/// Longest server name: `NAME__` and at least one character of a tool's name must
/// fit the 64 characters of a tool name.
pub const MAX_NAME: usize = 61;

/// Longest `prefix`: a tool's name (at most 64 characters) keeps room for the
/// prefix, a character of its own and a hash when it is shortened.
pub const MAX_PREFIX: usize = 48;

/// `[A-Za-z0-9_-]{0,48}`.
pub fn valid_prefix(prefix: &str) -> bool {
    prefix.len() <= MAX_PREFIX
        && prefix
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// `[A-Za-z0-9_-]{1,61}`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// The group of server `name`: `mcp:NAME`.
pub fn group_of(name: &str) -> String {
    format!("{GROUP_PREFIX}{name}")
}

impl McpConfig {
    /// The server whose group is `group` (`mcp:NAME`), if it is configured.
    pub fn server(&self, group: &str) -> Option<(&str, &McpServerConfig)> {
        let name = group.strip_prefix(GROUP_PREFIX)?;
        self.servers
            .get_key_value(name)
            .map(|(n, s)| (n.as_str(), s))
    }

    /// The worker's `init.mcp` for the server of `group`.
    pub fn server_init(&self, group: &str) -> Option<McpServerInit> {
        let (name, s) = self.server(group)?;
        Some(McpServerInit {
            name: name.to_owned(),
            command: s.command.clone(),
            url: s.url.clone(),
            env: s.env.clone(),
            tools: s.tools.clone(),
            startup_timeout_ms: s.startup_timeout_ms,
            sandbox: s.sandbox.is_on(),
            network: s.network.allowed(),
            prefix: s.prefix.clone(),
        })
    }

    /// The configured servers' `env` values: secrets, masked wherever they would be
    /// recorded.
    pub fn secrets(&self) -> Vec<String> {
        let all: BTreeSet<&String> = self.servers.values().flat_map(|s| s.env.values()).collect();
        all.into_iter().cloned().collect()
    }
}

impl Config {
    /// The settings `group`'s pool runs with: its `[workers.NAME]`, or for an MCP
    /// server's group the defaults with one worker and the server's `timeout_ms` as
    /// both the default and the longest deadline of a call.
    pub fn group_settings(&self, group: &str) -> Option<GroupConfig> {
        if let Some(g) = self.workers.group(group) {
            return Some(g.clone());
        }
        let (_, s) = self.mcp.server(group)?;
        Some(GroupConfig {
            count: Some(1),
            default_timeout_ms: s.timeout_ms,
            max_timeout_ms: s.timeout_ms,
            ..GroupConfig::default()
        })
    }
}

fn is_http(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let rest = lower
        .strip_prefix("http://")
        .or_else(|| lower.strip_prefix("https://"));
    rest.is_some_and(|r| !r.is_empty())
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn servers_parse_with_defaults() {
        let cfg = Config::parse(
            "[mcp.servers.github]\ncommand = [\"github-mcp-server\", \"stdio\"]\n\
             env = { GITHUB_TOKEN = \"x\" }\ntools = [\"search_issues\"]\n\
             [mcp.servers.web-1]\nurl = \"http://127.0.0.1:8931/mcp\"\nrisk = \"low\"\ntimeout_ms = 5000\n",
            "t",
        )
        .unwrap();
        let gh = &cfg.mcp.servers["github"];
        assert_eq!(gh.risk, toolvisor_protocol::tools::Risk::Medium);
        assert_eq!(gh.timeout_ms, 60_000);
        assert_eq!(
            gh.tools.as_deref(),
            Some(&["search_issues".to_string()][..])
        );
        let init = cfg.mcp.server_init("mcp:github").unwrap();
        assert_eq!(init.name, "github");
        assert_eq!(init.tools.as_deref().map(<[String]>::len), Some(1));
        assert!(cfg.mcp.server_init("github").is_none());
        assert_eq!(cfg.mcp.secrets(), ["x"]);
        let g = cfg.group_settings("mcp:web-1").unwrap();
        assert_eq!((g.default_timeout_ms, g.max_timeout_ms), (5000, 5000));
        assert_eq!(
            cfg.group_settings("search"),
            Some(cfg.workers.search.clone())
        );
        assert!(cfg.group_settings("mcp:nope").is_none());
        let web = &cfg.mcp.servers["web-1"];
        assert_eq!(web.url.as_deref(), Some("http://127.0.0.1:8931/mcp"));
        assert_eq!(web.timeout_ms, 5000);
        assert_eq!(web.startup_timeout_ms, 30_000);
    }

    #[test]
    fn servers_are_sandboxed_without_network_unless_they_say_so() {
        let cfg = Config::parse(
            "[mcp.servers.a]\ncommand = [\"x\"]\n\
             [mcp.servers.b]\ncommand = [\"x\"]\nsandbox = \"off\"\n\
             [mcp.servers.c]\ncommand = [\"x\"]\nnetwork = true\n\
             [mcp.servers.d]\ncommand = [\"x\"]\nnetwork = [\"api.example.com\"]\n",
            "t",
        )
        .unwrap();
        let init = |n: &str| cfg.mcp.server_init(&format!("mcp:{n}")).unwrap();
        assert!(init("a").sandbox && !init("a").network);
        assert!(!init("b").sandbox);
        assert!(init("c").sandbox && init("c").network);
        assert!(init("d").sandbox && !init("d").network);
        let warnings = cfg.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("mcp.servers.d.network"),
            "{warnings:?}"
        );
        assert!(warnings[0].contains("api.example.com"), "{warnings:?}");
        for (text, needle) in [
            ("sandbox = \"auto\"", "\"on\" (the default) or \"off\""),
            ("sandbox = \"maybe\"", "not \"maybe\""),
            ("network = \"yes\"", "mcp.servers.a.network"),
            ("network = [\"not a host\"]", "not a domain name"),
        ] {
            let cfg = format!("[mcp.servers.a]\ncommand = [\"x\"]\n{text}\n");
            let err = Config::parse(&cfg, "t").unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }

    #[test]
    fn bad_servers_are_named() {
        for (text, needle) in [
            (
                "[mcp.servers.\"a b\"]\ncommand = [\"x\"]\n",
                "mcp.servers.a b",
            ),
            ("[mcp.servers.a]\n", "set `command`"),
            (
                &format!("[mcp.servers.{}]\ncommand = [\"x\"]\n", "n".repeat(62)),
                "at most 64",
            ),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nurl = \"http://h\"\n",
                "not both",
            ),
            (
                "[mcp.servers.a]\nurl = \"file:///etc/passwd\"\n",
                "mcp.servers.a.url",
            ),
            ("[mcp.servers.a]\ncommand = [\"\"]\n", "program is empty"),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\ntimeout_ms = 0\n",
                "timeout_ms",
            ),
            ("[mcp.servers.a]\ncommand = [\"x\"]\nbogus = 1\n", "bogus"),
            (
                "[mcp.servers.a]\ncommand = [\"x\"]\nrisk = \"extreme\"\n",
                "extreme",
            ),
        ] {
            let err = Config::parse(text, "t").unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
    }
}
