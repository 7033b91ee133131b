//! MCP both ways: `toolvisor mcp` driven by an rmcp client ([`server`]), and MCP
//! servers run as supervised workers ([`client`]), one of them third-party
//! ([`third_party`]); what results carry through the bridge, both ways ([`results`]).

mod client;
mod http;
mod passthrough;
mod relay;
mod results;
mod server;
mod subscribe;
pub(crate) mod support;
mod tasks;
mod third_party;
