//! Groups are data: which pools the service runs. A built-in group exists because
//! the registry has built-in tools in it; an external group because the config names
//! its command (`[workers.NAME] command = [...]`). What differs between groups — how
//! the worker is started, its niceness, how long the supervisor waits for it past a
//! deadline — is here, in one table.

use std::time::Duration;

use toolvisor_protocol::tools::{self, Risk};

use crate::config::Config;
use crate::registry::Registry;
use crate::workers::worker::EXEC_PATIENCE;

/// One group the service runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Group {
    pub name: String,
    pub kind: Kind,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Kind {
    /// This binary re-executed as `toolvisor worker --group NAME`.
    Builtin,
    /// An executable speaking the worker protocol; its tools are what it announces,
    /// at least `risk`.
    External { command: Vec<String>, risk: Risk },
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
}

const BUILTIN: &[Traits] = &[
    Traits {
        name: tools::SEARCH,
        nice: 10,
        patience: Duration::ZERO,
    },
    Traits {
        name: tools::EDIT,
        nice: 0,
        patience: Duration::ZERO,
    },
    Traits {
        name: tools::EXEC,
        nice: 0,
        patience: EXEC_PATIENCE,
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
        }
    }

    /// The external command, for the spawner (`None`: this binary).
    pub fn command(&self) -> Option<Vec<String>> {
        match &self.kind {
            Kind::Builtin => None,
            Kind::External { command, .. } => Some(command.clone()),
        }
    }
}

/// Every group to run: the built-in groups that have tools, in the order the table
/// lists them, then the configured external groups by name.
pub fn plan(config: &Config, registry: &Registry) -> Vec<Group> {
    let present = registry.groups();
    let builtin = BUILTIN
        .iter()
        .filter(|t| present.iter().any(|g| g == t.name))
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
    builtin.chain(external).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_groups_come_from_the_registry_and_external_ones_from_the_config() {
        let registry = Registry::new(tools::builtin()).unwrap();
        let config = Config::parse(
            "[workers.words]\ncommand = [\"python3\", \"w.py\"]\nrisk = \"low\"\n",
            "t",
        )
        .unwrap();
        let groups = plan(&config, &registry);
        let names: Vec<&str> = groups.iter().map(|g| g.name.as_str()).collect();
        assert_eq!(names, ["search", "edit", "exec", "words"]);
        assert_eq!(groups[0].nice(), 10);
        assert_eq!(groups[2].patience(), EXEC_PATIENCE);
        assert_eq!(
            groups[3].command(),
            Some(vec!["python3".to_string(), "w.py".to_string()])
        );
        assert_eq!(
            groups[3].kind,
            Kind::External {
                command: vec!["python3".into(), "w.py".into()],
                risk: Risk::Low
            }
        );
    }
}
