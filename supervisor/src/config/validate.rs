//! The checks serde cannot express: ranges and cross-field rules, each error naming
//! its key.

use super::{Config, GroupConfig, Operator};

impl Config {
    /// Checks serde cannot express: ranges and cross-field rules.
    pub(super) fn validate(&self) -> Result<(), String> {
        for (name, g) in self.workers.all() {
            if let Some(n) = g.count.filter(|n| !(1..=64).contains(n)) {
                return Err(format!("workers.{name}.count must be 1..=64, not {n}"));
            }
            if !(1..=1024).contains(&g.max_in_flight) {
                return Err(format!(
                    "workers.{name}.max_in_flight must be 1..=1024, not {}",
                    g.max_in_flight
                ));
            }
            if g.queue_max == 0 {
                return Err(format!("workers.{name}.queue_max must be at least 1"));
            }
            if g.default_timeout_ms == 0 || g.max_timeout_ms == 0 {
                return Err(format!("workers.{name}: timeouts must be at least 1 ms"));
            }
        }
        self.validate_exec_only()?;
        self.validate_external()?;
        let l = &self.limits;
        for (key, keep, max) in [
            ("file_keep", l.file_keep, l.file_max),
            ("list_keep", l.list_keep, l.list_max),
            ("search_keep", l.search_keep, l.search_max),
            (
                "shell_head + shell_tail",
                l.shell_head + l.shell_tail,
                l.shell_max,
            ),
        ] {
            if keep > max {
                return Err(format!(
                    "limits.{key} ({keep}) must not exceed its maximum ({max})"
                ));
            }
        }
        if l.max_frame_bytes < 1024 {
            return Err("limits.max_frame_bytes must be at least 1024".into());
        }
        for (key, v) in [("many_max", l.many_max), ("line_max", l.line_max)] {
            if v < 1024 {
                return Err(format!("limits.{key} must be at least 1024, not {v}"));
            }
        }
        self.validate_web_and_skills()?;
        self.mcp.validate()?;
        if self.server.max_open_calls == 0 {
            return Err("server.max_open_calls must be at least 1".into());
        }
        for (i, rule) in self.policy.rules.iter().enumerate() {
            for c in &rule.conditions {
                if c.operator == Operator::Matches {
                    regex::Regex::new(&c.value).map_err(|e| {
                        format!(
                            "policy.rules[{i}] condition on `{}`: bad regex: {e}",
                            c.param
                        )
                    })?;
                }
            }
        }
        Ok(())
    }
}

impl Config {
    /// The sandbox keys belong to `[workers.exec]`; protected paths must stay inside
    /// the workspace.
    fn validate_exec_only(&self) -> Result<(), String> {
        let base = GroupConfig::default();
        let builtin = |n: &str| super::BUILTIN_GROUPS.contains(&n);
        for (name, g) in self.workers.all().filter(|(n, _)| *n != "exec") {
            let sandbox_keys =
                builtin(name) && (g.sandbox != base.sandbox || g.network != base.network);
            let set = sandbox_keys
                || !g.protected.is_empty()
                || g.limits != base.limits
                || g.yield_ms.is_some();
            if set {
                return Err(format!(
                    "workers.{name}: sandbox, network, protected, limits and yield_ms belong to [workers.exec] (sandbox and network also to external workers)"
                ));
            }
        }
        self.validate_sandbox_words()?;
        if self.workers.exec.yield_ms == Some(0) {
            return Err("workers.exec.yield_ms must be at least 1 (leave it out for none)".into());
        }
        for p in &self.workers.exec.protected {
            let inside = p.components().all(|c| {
                matches!(
                    c,
                    std::path::Component::Normal(_) | std::path::Component::CurDir
                )
            });
            if !inside || p.as_os_str().is_empty() {
                return Err(format!(
                    "workers.exec.protected: `{}` must be a relative path inside the workspace",
                    p.display()
                ));
            }
        }
        Ok(())
    }
}

impl Config {
    /// `workers.exec.sandbox` is `auto`, `required` or `off`; an external worker's
    /// `on` or `off`; only an external worker's `network` may list domains.
    fn validate_sandbox_words(&self) -> Result<(), String> {
        use super::SandboxMode::{Auto, On, Required};
        let exec = &self.workers.exec;
        if exec.sandbox == Some(On) {
            return Err(
                "workers.exec.sandbox must be \"auto\", \"required\" or \"off\" (\"on\" is for MCP servers and external workers)"
                    .into(),
            );
        }
        if exec.network.domains().is_some() {
            return Err(
                "workers.exec.network must be true or false (the domains every command reaches go in [network] allow)"
                    .into(),
            );
        }
        for (name, g) in &self.workers.external {
            if let Some(word @ (Auto | Required)) = g.sandbox {
                let word = format!("{word:?}").to_ascii_lowercase();
                return Err(format!(
                    "workers.{name}.sandbox must be \"on\" (the default) or \"off\", not {word:?}"
                ));
            }
        }
        Ok(())
    }
}

impl Config {
    /// An external group has a name a group can have and a command; a built-in group
    /// has no command (its workers are this binary).
    fn validate_external(&self) -> Result<(), String> {
        for (name, g) in self.workers.all() {
            let builtin = super::BUILTIN_GROUPS.contains(&name);
            if builtin && (!g.command.is_empty() || g.risk.is_some()) {
                return Err(format!(
                    "workers.{name}: `command` and `risk` are for external worker groups, not the built-in `{name}`"
                ));
            }
            if builtin {
                continue;
            }
            let valid_name = !name.is_empty()
                && name.len() <= 64
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
            if !valid_name {
                return Err(format!(
                    "workers.{name}: a group name is 1 to 64 letters, digits, `_` or `-`"
                ));
            }
            if g.command.first().is_none_or(String::is_empty) {
                return Err(format!(
                    "workers.{name}: not a built-in group ({}); an external worker group needs `command = [\"program\", ...]`",
                    super::BUILTIN_GROUPS.join(", ")
                ));
            }
        }
        Ok(())
    }
}

impl Config {
    /// `[web]` caps are positive and the search endpoint is an http(s) URL; skill
    /// paths are relative (they are confined to the workspace like any tool path).
    fn validate_web_and_skills(&self) -> Result<(), String> {
        let w = &self.web;
        if w.max_bytes == 0 {
            return Err("web.max_bytes must be at least 1".into());
        }
        if w.timeout_ms == 0 {
            return Err("web.timeout_ms must be at least 1 ms".into());
        }
        if let Some(url) = &w.search_url {
            let lower = url.to_ascii_lowercase();
            let http = lower.starts_with("http://") || lower.starts_with("https://");
            if !http || url.len() > 4096 || url.chars().any(char::is_whitespace) {
                return Err(format!(
                    "web.search_url must be an http:// or https:// URL, not {url:?}"
                ));
            }
        }
        for p in &self.skills.paths {
            let path = std::path::Path::new(p);
            let climbs = path
                .components()
                .any(|c| matches!(c, std::path::Component::ParentDir));
            if p.is_empty() || path.is_absolute() || climbs {
                return Err(format!(
                    "skills.paths: `{p}` must be a relative path inside the workspace"
                ));
            }
        }
        Ok(())
    }
}
