//! toolvisor's supervisor: the listener, one session per connection, the router
//! (validation, policy, audit), one pool of worker processes per group, and the CLI.

pub mod audit;
pub mod cli;
pub mod config;
pub mod policy;
