//! The `sandbox` and `network` keys of the processes the daemon starts from the
//! config: MCP servers (`[mcp.servers.NAME]`) and external workers
//! (`[workers.NAME]`) run in the command sandbox unless `sandbox = "off"`, without
//! the network unless `network = true` (docs/SANDBOX.md).

use std::fmt;

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};

/// `sandbox` of an MCP server or an external worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", try_from = "String")]
pub enum WorkerSandbox {
    /// In the command sandbox (the default).
    #[default]
    On,
    /// As the daemon's user, unconfined.
    Off,
}

impl TryFrom<String> for WorkerSandbox {
    type Error = String;

    fn try_from(v: String) -> Result<Self, String> {
        match v.as_str() {
            "on" => Ok(WorkerSandbox::On),
            "off" => Ok(WorkerSandbox::Off),
            other => Err(format!(
                "sandbox must be \"on\" (the default) or \"off\", not {other:?}"
            )),
        }
    }
}

impl WorkerSandbox {
    /// Whether the process runs in the sandbox.
    pub fn is_on(self) -> bool {
        self == WorkerSandbox::On
    }
}

/// `network`: `true`, `false`, or a list of domains. A list is accepted for the
/// per-domain egress proxy to come; until it exists a list gives no network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Network {
    /// `true`: the host's network; `false`: only a loopback of its own.
    All(bool),
    /// Only these domains (not enforced yet: no network at all).
    Domains(Vec<String>),
}

impl Default for Network {
    fn default() -> Self {
        Network::All(false)
    }
}

impl Network {
    /// Whether the process gets the host's network.
    pub fn allowed(&self) -> bool {
        matches!(self, Network::All(true))
    }

    /// The domains of a list (None for `true`/`false`).
    pub fn domains(&self) -> Option<&[String]> {
        match self {
            Network::Domains(d) => Some(d),
            Network::All(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for Network {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(NetworkVisitor)
    }
}

struct NetworkVisitor;

impl<'de> Visitor<'de> for NetworkVisitor {
    type Value = Network;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("`network` = true, false or a list of domain names")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Network, E> {
        Ok(Network::All(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Network, A::Error> {
        let mut out = Vec::new();
        while let Some(d) = seq.next_element::<String>()? {
            if !valid_domain(&d) {
                return Err(de::Error::custom(format!(
                    "network: {d:?} is not a domain name"
                )));
            }
            out.push(d);
        }
        Ok(Network::Domains(out))
    }
}

use toolvisor_protocol::egress::valid_domain;

/// The log line a domain list gets at load (`key`: where it was set), or None.
pub fn domains_warning(key: &str, network: &Network) -> Option<String> {
    network.domains().map(|d| {
        format!(
            "{key}.network lists domains ({}), but the per-domain egress proxy does not exist yet: it runs with no network at all",
            d.join(", ")
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct T {
        #[serde(default)]
        sandbox: WorkerSandbox,
        #[serde(default)]
        network: Network,
    }

    fn parse(s: &str) -> Result<T, String> {
        toml::from_str(s).map_err(|e| e.to_string())
    }

    #[test]
    fn sandbox_is_on_or_off() {
        assert!(parse("").unwrap().sandbox.is_on());
        assert!(parse("sandbox = \"on\"").unwrap().sandbox.is_on());
        assert!(!parse("sandbox = \"off\"").unwrap().sandbox.is_on());
        for bad in ["\"auto\"", "\"required\"", "\"yes\"", "true"] {
            let e = parse(&format!("sandbox = {bad}")).unwrap_err();
            assert!(e.contains("sandbox"), "{bad}: {e}");
        }
        let e = parse("sandbox = \"maybe\"").unwrap_err();
        assert!(e.contains("\"on\" (the default) or \"off\""), "{e}");
    }

    #[test]
    fn network_is_a_bool_or_domains() {
        assert!(!parse("").unwrap().network.allowed());
        assert!(parse("network = true").unwrap().network.allowed());
        assert!(!parse("network = false").unwrap().network.allowed());
        let n = parse("network = [\"api.example.com\", \"*.x.org\"]")
            .unwrap()
            .network;
        assert!(!n.allowed());
        assert_eq!(n.domains().map(<[String]>::len), Some(2));
        assert!(domains_warning("mcp.servers.a", &n).is_some_and(|w| w.contains("no network")));
        assert!(domains_warning("mcp.servers.a", &Network::All(true)).is_none());
        for bad in ["\"yes\"", "3", "[\"a b\"]", "[\"\"]", "[1]"] {
            assert!(parse(&format!("network = {bad}")).is_err(), "{bad}");
        }
    }
}
