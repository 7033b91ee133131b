//! Groups are data: which pools the service runs. A built-in group exists because
//! the registry has built-in tools in it; an external group because the config names
//! its command (`[workers.NAME] command = [...]`); an MCP server's group `mcp:NAME`
//! because the config names the server (`[mcp.servers.NAME]`). What differs between
//! groups — how the worker is started, its niceness, how long the supervisor waits for
//! it past a deadline — is here, in one table.

use std::time::Duration;

use toolvisor_protocol::tools::{self, Risk};
use toolvisor_protocol::worker::McpServerInit;

use crate::config::Config;
use crate::registry::Registry;
use crate::workers::worker::EXEC_PATIENCE;

/// One group the service runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    /// The group's name (`search`, or the `[workers.NAME]` of an external one).
    pub name: String,
    /// What runs its workers.
    pub kind: Kind,
}

/// Where a group's tools come from.
#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// This binary re-executed as `toolvisor worker --group NAME`.
    Builtin,
    /// An executable speaking the worker protocol; its tools are what it announces,
    /// at least `risk`.
    External {
        /// The worker's command line, program first.
        command: Vec<String>,
        /// The lowest risk of its tools.
        risk: Risk,
    },
    /// An MCP server (`[mcp.servers.NAME]`): this binary re-executed as `toolvisor
    /// worker --group mcp:NAME` is the server's client, and announces its tools as
    /// `NAME__TOOL`. Apart from an external group because the worker is ours (it gets
    /// the server in `init.mcp`, secrets included, never in its environment), its
    /// tools' risk is the server's configured `risk` rather than a floor under a risk
    /// of their own, and it starts within the server's own deadline.
    Mcp {
        /// What the worker runs: the server's command or URL, its `env`, its allow-list.
        server: McpServerInit,
    },
}

/// What differs between built-in groups.
struct Traits {
    name: &'static str,
    /// Search walks are CPU-bound and must not starve the supervisor (a `ping` waits
    /// behind them on a 2-core machine otherwise).
    nice: i32,
    /// Past a deadline or cancel, how long the worker may take to answer itself (exec
    /// kills a command with TERM, then KILL after 2 s, and reports its output).
    patience: Duration,
    /// The worker names some of its tools itself (the `meta` worker offers
    /// `activate_skill` only when it finds skills): the group runs even when the
    /// registry has none of its tools yet, and its announcements fill the templates of
    /// [`tools::announced`].
    announces: bool,
}

const BUILTIN: &[Traits] = &[
    Traits {
        name: tools::SEARCH,
        nice: 10,
        patience: Duration::ZERO,
        announces: false,
    },
    Traits {
        name: tools::EDIT,
        nice: 0,
        patience: Duration::ZERO,
        announces: false,
    },
    Traits {
        name: tools::EXEC,
        nice: 0,
        patience: EXEC_PATIENCE,
        announces: false,
    },
    // Network-bound: it waits, it does not compute, so it needs no niceness; a fetch
    // stops at once on a cancel.
    Traits {
        name: tools::WEB,
        nice: 0,
        patience: Duration::ZERO,
        announces: false,
    },
    Traits {
        name: tools::STATE,
        nice: 0,
        patience: Duration::ZERO,
        announces: false,
    },
    // Reading skills is a small walk; niced like search so a big skills tree never
    // delays the supervisor.
    Traits {
        name: tools::META,
        nice: 10,
        patience: Duration::ZERO,
        announces: true,
    },
];

/// An external worker gets the time any process needs to stop its work on a cancel.
const EXTERNAL_PATIENCE: Duration = Duration::from_secs(2);

impl Group {
    fn traits(&self) -> Option<&'static Traits> {
        BUILTIN.iter().find(|t| t.name == self.name)
    }

    /// Scheduling niceness of the group's workers.
    pub fn nice(&self) -> i32 {
        self.traits().map_or(0, |t| t.nice)
    }

    /// How long past a deadline the supervisor waits for the worker's own answer.
    pub fn patience(&self) -> Duration {
        match self.kind {
            Kind::Builtin => self.traits().map_or(Duration::ZERO, |t| t.patience),
            Kind::External { .. } => EXTERNAL_PATIENCE,
            // The worker answers a cancel at once (and tells the server).
            Kind::Mcp { .. } => Duration::ZERO,
        }
    }

    /// Whether the group's worker announces built-in tools of its own (see
    /// [`Traits::announces`]).
    pub fn announces_builtin(&self) -> bool {
        self.kind == Kind::Builtin && self.traits().is_some_and(|t| t.announces)
    }

    /// The external command, for the spawner (`None`: this binary).
    pub fn command(&self) -> Option<Vec<String>> {
        match &self.kind {
            Kind::Builtin | Kind::Mcp { .. } => None,
            Kind::External { command, .. } => Some(command.clone()),
        }
    }

    /// The MCP server the group's worker runs (`init.mcp`).
    pub fn mcp(&self) -> Option<McpServerInit> {
        match &self.kind {
            Kind::Mcp { server } => Some(server.clone()),
            _ => None,
        }
    }
}

/// Every group to run: the built-in groups that have tools (or announce them), in the
/// order the table lists them, then the configured external groups by name, then the
/// MCP servers' groups by name.
pub fn plan(config: &Config, registry: &Registry) -> Vec<Group> {
    let present = registry.groups();
    let builtin = BUILTIN
        .iter()
        .filter(|t| t.announces || present.iter().any(|g| g == t.name))
        .map(|t| Group {
            name: t.name.to_owned(),
            kind: Kind::Builtin,
        });
    let external = config.workers.external.iter().map(|(name, g)| Group {
        name: name.clone(),
        kind: Kind::External {
            command: g.command.clone(),
            risk: g.risk.unwrap_or(Risk::Medium),
        },
    });
    let mcp = config.mcp.servers.keys().filter_map(|name| {
        let group = crate::config::mcp::group_of(name);
        let server = config.mcp.server_init(&group)?;
        Some(Group {
            name: group,
            kind: Kind::Mcp { server },
        })
    });
    builtin.chain(external).chain(mcp).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_groups_come_from_the_registry_and_external_ones_from_the_config() {
        let registry = Registry::new(tools::builtin()).unwrap();
        let config = Config::parse(
            "[workers.words]\ncommand = [\"python3\", \"w.py\"]\nrisk = \"low\"\n\
             [mcp.servers.gh]\ncommand = [\"gh-mcp\"]\nstartup_timeout_ms = 100\n",
            "t",
        )
        .unwrap();
        let groups = plan(&config, &registry);
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "search", "edit", "exec", "web", "state", "meta", "words", "mcp:gh"
            ]
        );
        let gh = &groups[7];
        assert_eq!(gh.command(), None, "an MCP server's worker is this binary");
        assert_eq!(gh.patience(), Duration::ZERO);
        let server = gh.mcp().unwrap();
        assert_eq!(
            (server.name.as_str(), server.startup_timeout_ms),
            ("gh", 100)
        );
        assert!(groups[6].mcp().is_none());
        assert_eq!(groups[0].nice(), 10);
        assert_eq!(groups[2].patience(), EXEC_PATIENCE);
        assert!(groups[5].announces_builtin() && !groups[0].announces_builtin());
        assert!(!groups[6].announces_builtin());
        assert_eq!(
            groups[6].command(),
            Some(vec!["python3".to_string(), "w.py".to_string()])
        );
        assert_eq!(
            groups[6].kind,
            Kind::External {
                command: vec!["python3".into(), "w.py".into()],
                risk: Risk::Low
            }
        );
    }
}
