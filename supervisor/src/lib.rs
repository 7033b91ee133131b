//! toolvisor's supervisor: the listener, one session per connection, the router
//! (validation, policy, audit), one pool of worker processes per group, and the CLI.

// A call that cannot go on ends with the `Outcome` the client will see; it is the
// natural error value on the call path, and boxing it would only add noise.
#![allow(clippy::result_large_err)]

pub mod audit;
pub mod batch;
pub mod call_audit;
pub mod cli;
pub mod commands;
pub mod config;
pub mod confirm;
pub mod events;
pub mod fairq;
pub mod gate;
pub mod grants;
pub mod leftovers;
pub mod listener;
pub mod mcp;
pub mod outbox;
pub mod peer;
pub mod policy;
pub mod policy_cmd;
pub mod pool;
pub mod previews;
pub mod processes;
pub mod reload;
pub mod restart;
pub mod router;
pub mod sandbox;
pub mod serve;
pub mod service;
pub mod session;
pub mod spawn;
pub mod state;
pub mod status;
pub mod subscribe;
pub mod validate;
pub mod watchdog;
pub mod worker;
