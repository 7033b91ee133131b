//! Network by domain: the domain lists a command's egress connects to without asking
//! (`[network] allow`, a rule's `network = [...]`, `run_command`'s `network: [...]`),
//! and how a host is matched against them. One copy for the config, the policy and
//! the exec worker's egress proxy, so the three agree on what a list means.

use serde::{Deserialize, Serialize};

/// A host name as a list may hold it: labels of letters, digits and `-`, at most 253
/// characters, optionally after a leading `*.` (any subdomain, not the name itself).
pub fn valid_domain(d: &str) -> bool {
    let d = d.strip_prefix("*.").unwrap_or(d);
    !d.is_empty()
        && d.len() <= 253
        && d.split('.').all(|l| {
            !l.is_empty() && l.len() <= 63 && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        // A name of digits and dots is an address, not a domain: lists name hosts.
        && !d.bytes().all(|b| b.is_ascii_digit() || b == b'.')
}

/// `host` as lists compare it: lower case, without a trailing dot.
pub fn normal_host(host: &str) -> String {
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// Whether list entry `pattern` covers `host`: the same name, or with `*.name` any
/// name below it. Case and a trailing dot do not matter.
pub fn covers(pattern: &str, host: &str) -> bool {
    let host = normal_host(host);
    let pattern = normal_host(pattern);
    match pattern.strip_prefix("*.") {
        Some(base) => host.len() > base.len() + 1 && host.ends_with(&format!(".{base}")),
        None => host == pattern,
    }
}

/// Whether any entry of `list` covers `host`.
pub fn listed(list: &[String], host: &str) -> bool {
    list.iter().any(|p| covers(p, host))
}

/// A command's way out through the egress proxy (the `run` frame's `egress`): the
/// hosts that connect without a question, and whether anyone can be asked about the
/// others (an interactive session); otherwise they are refused.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Egress {
    /// Domain names (and `*.` patterns) that connect at once.
    pub allow: Vec<String>,
    /// A host off the list is asked about (`connect` frame) rather than refused.
    #[serde(default)]
    pub ask: bool,
}

impl Egress {
    /// Whether `host` connects without a question.
    pub fn permits(&self, host: &str) -> bool {
        listed(&self.allow, host)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_wildcards() {
        assert!(covers("api.example.com", "API.example.com."));
        assert!(!covers("api.example.com", "example.com"));
        assert!(covers("*.example.com", "a.b.example.com"));
        assert!(!covers("*.example.com", "example.com"));
        assert!(!covers("*.example.com", "badexample.com"));
        assert!(!covers("example.com", "example.com.evil.org"));
        assert!(listed(&["x.org".into(), "*.y.org".into()], "z.y.org"));
    }

    #[test]
    fn domains_are_names_not_addresses() {
        for ok in ["a.com", "*.x.org", "localhost", "a-b.c9"] {
            assert!(valid_domain(ok), "{ok}");
        }
        for bad in [
            "", "*.", "a..b", "1.2.3.4", "a b", "a/b", "::1", "*.*.a", "a.com:80",
        ] {
            assert!(!valid_domain(bad), "{bad}");
        }
    }
}
