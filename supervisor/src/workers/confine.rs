//! How an external worker (`[workers.NAME] command = [...]`) is started: in the
//! command sandbox by default, under the reap shim that the workers crate builds (the
//! binary passes its function in: [`WrapFn`]), keeping its control socket (fd 3);
//! with `sandbox = "off"` as configured, as the daemon's user (said in the log).

use toolvisor_protocol::worker::{CONTROL_FD, WorkerInit};

use crate::config::GroupConfig;

/// Builds the command line that runs `argv` in the command sandbox `init` describes
/// (`network`: the host's network; `keep_fds`: descriptors it keeps past fd 2).
/// `Err` says why it cannot run there (the host cannot build the sandbox).
pub type WrapFn = fn(&WorkerInit, &[String], bool, &[i32]) -> Result<Vec<String>, String>;

/// An external worker's command line, or why it must not start.
#[derive(Clone, Debug, PartialEq)]
pub struct Launch {
    /// What the spawner runs, program first.
    pub command: Vec<String>,
    /// Why it is not started at all (no sandbox on this host).
    pub refused: Option<String>,
}

/// How external worker `name`, configured as `g`, is started.
pub fn external(name: &str, g: &GroupConfig, init: &WorkerInit, wrap: WrapFn) -> Launch {
    if !g.worker_sandbox().is_on() {
        tracing::warn!(
            "external worker `{name}`: sandbox = \"off\": it runs unsandboxed, as the daemon's user"
        );
        return Launch {
            command: g.command.clone(),
            refused: None,
        };
    }
    match wrap(init, &g.command, g.network.allowed(), &[CONTROL_FD]) {
        Ok(command) => Launch {
            command,
            refused: None,
        },
        Err(why) => Launch {
            command: g.command.clone(),
            refused: Some(format!("external worker `{name}`: {why}")),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    fn init() -> WorkerInit {
        WorkerInit {
            group: "w".into(),
            index: 0,
            roots: toolvisor_protocol::worker::Roots {
                private: "/w".into(),
                shared: None,
                public: None,
            },
            protected: vec![],
            state_dir: "/w/.toolvisor".into(),
            limits: Default::default(),
            exec: Default::default(),
            generation: 0,
            web: Default::default(),
            skills: Default::default(),
            mcp: None,
        }
    }

    fn wrap(
        _: &WorkerInit,
        argv: &[String],
        net: bool,
        keep: &[i32],
    ) -> Result<Vec<String>, String> {
        let mut out = vec![format!("shim net={net} keep={keep:?}")];
        out.extend(argv.iter().cloned());
        Ok(out)
    }

    fn refuse(_: &WorkerInit, _: &[String], _: bool, _: &[i32]) -> Result<Vec<String>, String> {
        Err("no user namespaces".into())
    }

    fn group(extra: &str) -> GroupConfig {
        let text = format!("[workers.w]\ncommand = [\"python3\", \"w.py\"]\n{extra}\n");
        Config::parse(&text, "t").unwrap().workers.external["w"].clone()
    }

    #[test]
    fn external_workers_are_wrapped_unless_off() {
        let l = external("w", &group(""), &init(), wrap);
        assert_eq!(l.command, ["shim net=false keep=[3]", "python3", "w.py"]);
        assert_eq!(l.refused, None);
        let l = external("w", &group("network = true"), &init(), wrap);
        assert_eq!(l.command[0], "shim net=true keep=[3]");
        let l = external("w", &group("network = [\"a.example\"]"), &init(), wrap);
        assert_eq!(l.command[0], "shim net=false keep=[3]");
        let off = external("w", &group("sandbox = \"off\""), &init(), wrap);
        assert_eq!(off.command, ["python3", "w.py"]);
        let l = external("w", &group("sandbox = \"on\""), &init(), refuse);
        assert!(l.refused.is_some_and(|r| r.contains("no user namespaces")));
        let off = external("w", &group("sandbox = \"off\""), &init(), refuse);
        assert_eq!((off.command.len(), off.refused), (2, None));
    }

    #[test]
    fn an_external_workers_sandbox_is_on_or_off() {
        for (bad, needle) in [
            (
                "sandbox = \"auto\"",
                "workers.w.sandbox must be \"on\" (the default) or \"off\", not \"auto\"",
            ),
            ("sandbox = \"required\"", "not \"required\""),
            (
                "sandbox = \"maybe\"",
                "sandbox \"maybe\": an external worker's is \"on\"",
            ),
            ("network = \"yes\"", "network"),
        ] {
            let text = format!("[workers.w]\ncommand = [\"x\"]\n{bad}\n");
            let e = Config::parse(&text, "t").unwrap_err().to_string();
            assert!(e.contains(needle), "{bad}: {e}");
        }
        for bad in [
            "[workers.exec]\nsandbox = \"on\"\n",
            "[workers.exec]\nnetwork = [\"a.b\"]\n",
            "[workers.search]\nsandbox = \"off\"\n",
        ] {
            assert!(Config::parse(bad, "t").is_err(), "{bad}");
        }
        let cfg = Config::parse(
            "[workers.w]\ncommand = [\"x\"]\nnetwork = [\"a.example\"]\n",
            "t",
        )
        .unwrap();
        assert!(
            cfg.warnings()[0].contains("workers.w.network"),
            "{:?}",
            cfg.warnings()
        );
    }
}
