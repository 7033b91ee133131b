//! The scrubbed environment commands run with (docs/PROTOCOL.md `run_command`).
//!
//! Layers, each overriding the previous: an allowlist of the worker's own variables,
//! the fixed non-interactive settings, the config's `env_passthrough` (copied from the
//! worker's environment) and `env`, the call's `env`, and last the instance marker, so
//! no call can hide a command from the start-up sweep of leftovers.

use std::collections::BTreeMap;

use serde_json::Value;
use toolvisor_protocol::worker::ExecSettings;

use crate::ToolError;
use toolvisor_sandbox::reap::MARKER_VAR;

/// Variables a command inherits from the worker when they are set.
const ALLOW: &[&str] = &[
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TZ", "TMPDIR",
];

/// Settings that keep tools from waiting on a person or decorating output.
const FIXED: &[(&str, &str)] = &[
    ("PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
    ("TERM", "dumb"),
    ("NO_COLOR", "1"),
    ("CI", "1"),
    // git finds no bare repository by itself: one a tool wrote into the workspace
    // (`vendor/x/{HEAD,config}`, no `.git` in its path, so the edit tools' `.git`
    // refusal does not see it) cannot have an allowed `git status` in it run its
    // `core.fsmonitor`. The environment's config outranks every file's.
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "safe.bareRepository"),
    ("GIT_CONFIG_VALUE_0", "explicit"),
];

/// `TERM` for a command that runs in a terminal (`tty`).
pub(crate) const TTY_TERM: &str = "xterm-256color";

/// Used when the worker has no PATH at all.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// Build the command's environment from the worker's (`inherited`), the settings and
/// the call's `env` argument (an object of strings; schema-validated upstream). A
/// command in a terminal (`tty`) gets [`TTY_TERM`] instead of `TERM=dumb`.
pub(crate) fn build(
    inherited: impl IntoIterator<Item = (String, String)>,
    settings: &ExecSettings,
    call_env: Option<&Value>,
    tty: bool,
) -> Result<BTreeMap<String, String>, ToolError> {
    let inherited: BTreeMap<String, String> = inherited.into_iter().collect();
    let mut env: BTreeMap<String, String> = inherited
        .iter()
        .filter(|(k, _)| ALLOW.contains(&k.as_str()) || k.starts_with("LC_"))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    env.entry("PATH".into())
        .or_insert_with(|| DEFAULT_PATH.into());
    for (k, v) in FIXED {
        env.insert((*k).into(), (*v).into());
    }
    if tty {
        env.insert("TERM".into(), TTY_TERM.into());
    }
    for name in &settings.env_passthrough {
        if let Some(v) = inherited.get(name) {
            env.insert(name.clone(), v.clone());
        }
    }
    env.extend(settings.env.iter().map(|(k, v)| (k.clone(), v.clone())));
    if let Some(Value::Object(m)) = call_env {
        for (k, v) in m {
            let v = v
                .as_str()
                .ok_or_else(|| ToolError::invalid(format!("env.{k} must be a string")))?;
            check(k, v)?;
            env.insert(k.clone(), v.to_owned());
        }
    }
    if !settings.instance.is_empty() {
        env.insert(MARKER_VAR.into(), settings.instance.clone());
    }
    Ok(env)
}

/// A name must be non-empty without `=` or NUL; a value without NUL (execve's rules).
fn check(name: &str, value: &str) -> Result<(), ToolError> {
    if name.is_empty() || name.contains(['=', '\0']) {
        return Err(ToolError::invalid(format!(
            "invalid environment variable name {name:?}"
        )));
    }
    if value.contains('\0') {
        return Err(ToolError::invalid(format!(
            "environment variable {name} contains NUL"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn worker_env() -> Vec<(String, String)> {
        [
            ("PATH", "/bin"),
            ("HOME", "/h"),
            ("LC_ALL", "C"),
            ("SECRET_TOKEN", "x"),
            ("CARGO_HOME", "/c"),
            ("TERM", "xterm"),
        ]
        .iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
    }

    #[test]
    fn layers_override_in_order() {
        let s = ExecSettings {
            env_passthrough: vec!["CARGO_HOME".into(), "MISSING".into()],
            env: [
                ("A".to_string(), "cfg".to_string()),
                ("B".into(), "cfg".into()),
            ]
            .into(),
            instance: "inst-1".into(),
            ..ExecSettings::default()
        };
        let call = json!({"B": "call", "TOOLVISOR_INSTANCE": "evil", "PAGER": "less"});
        let env = build(worker_env(), &s, Some(&call), false).unwrap();
        assert_eq!(env["PATH"], "/bin");
        assert_eq!(env["LC_ALL"], "C");
        assert!(!env.contains_key("SECRET_TOKEN"), "scrubbed");
        assert_eq!(env["TERM"], "dumb");
        assert_eq!(env["CI"], "1");
        assert_eq!(env["CARGO_HOME"], "/c");
        assert!(!env.contains_key("MISSING"));
        assert_eq!(env["A"], "cfg");
        assert_eq!(env["B"], "call");
        assert_eq!(env["PAGER"], "less", "the call may override the defaults");
        assert_eq!(env[MARKER_VAR], "inst-1", "but never the marker");
    }

    #[test]
    fn bad_names_are_invalid_params() {
        let s = ExecSettings::default();
        for bad in [
            json!({"A=B": "x"}),
            json!({"": "x"}),
            json!({"A": "x\u{0}y"}),
        ] {
            assert!(build(vec![], &s, Some(&bad), false).is_err(), "{bad}");
        }
        assert_eq!(
            build(vec![], &s, None, false).unwrap()["PATH"],
            DEFAULT_PATH
        );
    }
}
