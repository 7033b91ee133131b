//! The settings of the web and meta groups a worker's init carries.

use super::*;

/// `[web]`: the web tools' settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct WebSettings {
    /// Let `web_fetch` reach loopback, private, link-local and other non-public
    /// addresses (refused by default: an agent must not become a way into the LAN).
    pub allow_private: bool,
    /// The most bytes one download may have; past it the fetch fails.
    pub max_bytes: u64,
    /// How long one fetch or search may take, redirects included.
    pub timeout_ms: u64,
    /// A SearXNG-compatible endpoint for `web_search` (`GET <url>?q=…&format=json`).
    pub search_url: Option<String>,
}

impl Default for WebSettings {
    fn default() -> Self {
        WebSettings {
            allow_private: false,
            max_bytes: 10 << 20,
            timeout_ms: 30_000,
            search_url: None,
        }
    }
}

/// `[skills]`: where skills are found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SkillsSettings {
    /// Directories (workspace-relative, or `scope:/…`) whose subdirectories with a
    /// `SKILL.md` are skills.
    pub paths: Vec<String>,
}

impl Default for SkillsSettings {
    fn default() -> Self {
        SkillsSettings {
            paths: vec![".skills".into(), ".claude/skills".into()],
        }
    }
}
