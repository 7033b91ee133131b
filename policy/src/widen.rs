//! Widening: what a `run_command` asks for beyond the sandbox (`network`, `writable`,
//! `reveal`, `expose`), whether the rules that allowed it grant that, and what the
//! command then gets. A call's widening asks unless every rule that allowed it grants
//! all of it (docs/POLICY.md, "What can still reach outside").

use serde_json::{Map, Value};
use toolvisor_protocol::egress;
use toolvisor_protocol::tools::run_command::widening_path;

use super::rules::CompiledRule;
use crate::config::{Action, Network};

/// The network a command gets when it runs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum NetworkGrant {
    /// Only its session's loopback.
    #[default]
    None,
    /// The host's network.
    Host,
    /// These domains through the egress proxy.
    Egress(Vec<String>),
}

/// What one call asks for beyond the sandbox.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wants {
    /// `network: true`.
    pub host_network: bool,
    /// `network: [domains]`.
    pub domains: Vec<String>,
    /// `writable`, as given.
    pub writable: Vec<String>,
    /// `reveal`, as given.
    pub reveal: Vec<String>,
    /// `expose`.
    pub expose: Vec<u16>,
}

impl Wants {
    /// The widening in `args` (`network: false` and empty lists ask for none).
    pub fn of(args: &Map<String, Value>) -> Wants {
        let strings = |k: &str| -> Vec<String> {
            let list = args.get(k).and_then(Value::as_array);
            list.into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        };
        let ports = args.get("expose").and_then(Value::as_array);
        Wants {
            host_network: args.get("network") == Some(&Value::Bool(true)),
            domains: strings("network"),
            writable: strings("writable"),
            reveal: strings("reveal"),
            expose: ports
                .into_iter()
                .flatten()
                .filter_map(Value::as_u64)
                .filter_map(|p| u16::try_from(p).ok())
                .collect(),
        }
    }

    /// Whether it asks for anything.
    pub fn any(&self) -> bool {
        self.host_network
            || !self.domains.is_empty()
            || !self.writable.is_empty()
            || !self.reveal.is_empty()
            || !self.expose.is_empty()
    }

    /// Each widening in words, for a person ("network: pypi.org").
    pub fn describe(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.host_network {
            out.push("the host's network".to_owned());
        }
        if !self.domains.is_empty() {
            out.push(format!("network: {}", self.domains.join(", ")));
        }
        if !self.writable.is_empty() {
            out.push(format!("writes to {}", self.writable.join(", ")));
        }
        if !self.reveal.is_empty() {
            out.push(format!("sees hidden {}", self.reveal.join(", ")));
        }
        if !self.expose.is_empty() {
            let ports: Vec<String> = self.expose.iter().map(u16::to_string).collect();
            out.push(format!("publishes port {} on the host", ports.join(", ")));
        }
        out
    }
}

/// The widening of `wants` that `rules` (the rules that allowed the call) and the
/// config's `[network] allow` do not all grant, each as (what, the line that would
/// grant it). Empty: everything asked for is granted.
pub fn ungranted(
    wants: &Wants,
    rules: &[&CompiledRule],
    allow: &[String],
) -> Vec<(String, String)> {
    let every = |f: &dyn Fn(&CompiledRule) -> bool| {
        !rules.is_empty() && rules.iter().all(|r| r.action == Action::Allow && f(r))
    };
    let mut out = Vec::new();
    if wants.host_network && !every(&|r| matches!(r.network, Some(Network::All(true)))) {
        out.push((
            "the host's network".to_owned(),
            "network = true on the rule that allows it".to_owned(),
        ));
    }
    let domains: Vec<&String> = wants
        .domains
        .iter()
        .filter(|d| {
            !egress::listed(allow, d)
                && !every(&|r| match &r.network {
                    Some(Network::All(all)) => *all,
                    Some(Network::Domains(list)) => egress::listed(list, d),
                    None => false,
                })
        })
        .collect();
    if !domains.is_empty() {
        let quoted: Vec<String> = domains.iter().map(|d| format!("{d:?}")).collect();
        out.push((
            format!("network to {}", join(&domains)),
            format!(
                "[network] allow = [{0}] (every command), or network = [{0}] on the rule",
                quoted.join(", ")
            ),
        ));
    }
    for (key, list, get) in [
        (
            "writable",
            &wants.writable,
            writable_of as fn(&CompiledRule) -> &[String],
        ),
        ("reveal", &wants.reveal, reveal_of),
    ] {
        let missing: Vec<&String> = list
            .iter()
            .filter(|p| !every(&|r| under_any(p, get(r))))
            .collect();
        if !missing.is_empty() {
            let quoted: Vec<String> = missing.iter().map(|d| format!("{d:?}")).collect();
            out.push((
                format!("{key} {}", join(&missing)),
                format!("{key} = [{}] on the rule that allows it", quoted.join(", ")),
            ));
        }
    }
    let ports: Vec<u16> = wants
        .expose
        .iter()
        .copied()
        .filter(|&p| !every(&|r| r.expose.as_ref().is_some_and(|e| e.grants(p))))
        .collect();
    if !ports.is_empty() {
        let list: Vec<String> = ports.iter().map(u16::to_string).collect();
        out.push((
            format!("publishing port {} on the host's loopback", list.join(", ")),
            format!("expose = [{}] on the rule that allows it", list.join(", ")),
        ));
    }
    out
}

fn writable_of(r: &CompiledRule) -> &[String] {
    &r.writable
}

fn reveal_of(r: &CompiledRule) -> &[String] {
    &r.reveal
}

fn join(items: &[&String]) -> String {
    items
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The network a call gets when it runs: what it asked for (granted or approved by a
/// person), else what the rules that allowed it give, with `[network] allow` added to
/// any domain list; `[network] allow` alone for the rest.
pub fn network(
    wants: &Wants,
    rules: &[&CompiledRule],
    allowed: bool,
    allow: &[String],
) -> NetworkGrant {
    if wants.host_network {
        return NetworkGrant::Host;
    }
    let by_rules = allowed
        && !rules.is_empty()
        && rules
            .iter()
            .all(|r| r.action == Action::Allow && r.network.is_some());
    let mut domains: Vec<String> = wants.domains.clone();
    if by_rules {
        if rules
            .iter()
            .all(|r| matches!(r.network, Some(Network::All(true))))
            && domains.is_empty()
        {
            return NetworkGrant::Host;
        }
        for r in rules {
            if let Some(Network::Domains(list)) = &r.network {
                domains.extend(list.iter().cloned());
            }
        }
    }
    domains.extend(allow.iter().cloned());
    domains.sort();
    domains.dedup();
    if domains.is_empty() {
        NetworkGrant::None
    } else {
        NetworkGrant::Egress(domains)
    }
}

impl super::Policy {
    /// `web_fetch` of a host `[network] allow` does not list asks, unless a rule
    /// allowed the call: it could send what it read to anyone.
    pub(super) fn fetch_off_list(
        &self,
        facts: &super::facts::Facts<'_>,
        by_rule: bool,
        d: &mut super::Decision,
    ) {
        if facts.def.name != "web_fetch" || d.action != Action::Allow || by_rule {
            return;
        }
        let Some(host) = facts
            .args
            .get("url")
            .and_then(Value::as_str)
            .and_then(url_host)
        else {
            return;
        };
        if egress::listed(&self.network_allow, &host) {
            return;
        }
        d.action = Action::Ask;
        d.reason = format!(
            "web_fetch of {host}, which [network] allow does not list; that needs \
             confirmation (to fetch from it without asking: [network] allow = [{host:?}])"
        );
    }
}

/// The host of an http(s) URL, lower case.
fn url_host(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next()?,
        None => host_port.split(':').next()?,
    };
    (!host.is_empty()).then(|| egress::normal_host(host))
}

/// Whether `path` is one of `grants` or lies under one (`~/` read as the home).
fn under_any(path: &str, grants: &[String]) -> bool {
    let Some(p) = widening_path(path) else {
        return false;
    };
    grants
        .iter()
        .filter_map(|g| widening_path(g))
        .any(|g| p.starts_with(&g))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Expose;
    use serde_json::json;

    fn rule(network: Option<Network>) -> CompiledRule {
        CompiledRule {
            index: 0,
            action: Action::Allow,
            risk: None,
            message: None,
            tests: Vec::new(),
            hazards_allow: false,
            network,
            writable: vec!["/var/cache".into()],
            reveal: Vec::new(),
            expose: Some(Expose::Ports(vec![8000])),
        }
    }

    fn wants(v: Value) -> Wants {
        Wants::of(v.as_object().expect("object"))
    }

    #[test]
    fn what_rules_and_the_list_grant() {
        let r = rule(Some(Network::Domains(vec!["*.pypi.org".into()])));
        let w = wants(
            json!({"network": ["files.pypi.org", "github.com"], "writable": ["/var/cache/pip"], "expose": [8000]}),
        );
        let missing = ungranted(&w, &[&r], &[]);
        assert_eq!(missing.len(), 1, "{missing:?}");
        assert!(missing[0].0.contains("github.com"));
        assert!(missing[0].1.contains("[network] allow = [\"github.com\"]"));
        assert!(ungranted(&w, &[&r], &["github.com".into()]).is_empty());
        let w = wants(json!({"writable": ["/var/cachex"], "reveal": ["~/.ssh"], "network": true}));
        let missing: Vec<String> = ungranted(&w, &[&r], &[]).into_iter().map(|m| m.0).collect();
        assert_eq!(missing.len(), 3, "{missing:?}");
        assert!(ungranted(&w, &[], &[]).len() == 3, "no rule grants nothing");
        let w = wants(json!({"writable": ["/var/cache/../../etc"]}));
        assert_eq!(
            ungranted(&w, &[&r], &[]).len(),
            1,
            "`..` is never under a grant"
        );
    }

    #[test]
    fn hosts_of_urls() {
        assert_eq!(
            url_host("https://A.example.com:8443/x?y").as_deref(),
            Some("a.example.com")
        );
        assert_eq!(url_host("http://u:p@h.org/").as_deref(), Some("h.org"));
        assert_eq!(url_host("http://[::1]:80/").as_deref(), Some("::1"));
        assert_eq!(url_host("nourl"), None);
    }

    #[test]
    fn the_network_a_command_gets() {
        let none = wants(json!({}));
        assert_eq!(network(&none, &[], false, &[]), NetworkGrant::None);
        let host = rule(Some(Network::All(true)));
        assert_eq!(network(&none, &[&host], true, &[]), NetworkGrant::Host);
        assert_eq!(network(&none, &[&host], false, &[]), NetworkGrant::None);
        let listed = rule(Some(Network::Domains(vec!["a.org".into()])));
        assert_eq!(
            network(&none, &[&listed], true, &["b.org".into()]),
            NetworkGrant::Egress(vec!["a.org".into(), "b.org".into()])
        );
        let w = wants(json!({"network": ["c.org"]}));
        assert_eq!(
            network(&w, &[&host], true, &[]),
            NetworkGrant::Egress(vec!["c.org".into()]),
            "a call that names domains gets only those, even under network = true"
        );
        assert_eq!(
            network(&wants(json!({"network": true})), &[], false, &[]),
            NetworkGrant::Host
        );
    }
}
