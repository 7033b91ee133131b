//! What a worker tells the supervisor besides results: the tools it announces and the
//! connections through a command's egress proxy.

use super::*;

/// One connection through a command's egress proxy, refused or ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Connection {
    /// The call whose command made it.
    pub call: u64,
    /// The host name asked for.
    pub host: String,
    /// Its port.
    pub port: u16,
    /// `allowed` (on the list), `approved` (a person said yes), `denied`.
    pub decision: String,
    /// Bytes from the command to the host.
    #[serde(default)]
    pub sent: u64,
    /// Bytes from the host to the command.
    #[serde(default)]
    pub received: u64,
    /// Why it was refused or failed, when it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A tool as a worker announces it (docs/PROTOCOL.md, "Worker protocol"). The
/// supervisor validates calls against `inputSchema` before they reach the worker, and
/// decides them by `risk`, the hints and `paths` like a built-in tool's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AnnouncedTool {
    /// The tool's name, unique across every group.
    pub name: String,
    /// A short human title for listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// What the model reads to decide when to use the tool.
    #[serde(default)]
    pub description: String,
    /// The JSON Schema of the arguments.
    #[serde(rename = "inputSchema")]
    pub input_schema: Value,
    #[serde(
        rename = "outputSchema",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    /// The JSON Schema of `meta`, when the tool declares one.
    pub output_schema: Option<Value>,
    /// MCP hints: read-only, destructive, idempotent, open world.
    #[serde(default)]
    pub annotations: Annotations,
    /// The tool's own risk; the supervisor may only raise it (default `medium`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<crate::tools::Risk>,
    /// Parameters that name workspace paths (the policy resolves and confines them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// MCP-style hints about a tool; absent hints are the cautious defaults.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Annotations {
    /// The tool changes nothing.
    #[serde(default)]
    pub read_only_hint: Option<bool>,
    /// The tool may destroy data.
    #[serde(default)]
    pub destructive_hint: Option<bool>,
    /// Calling it twice with the same arguments does no more than once.
    #[serde(default)]
    pub idempotent_hint: Option<bool>,
    /// The tool reaches beyond the workspace (the network, other systems).
    #[serde(default)]
    pub open_world_hint: Option<bool>,
}
