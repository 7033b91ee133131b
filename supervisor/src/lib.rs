//! toolvisor's supervisor: the socket and its sessions, the path of every call
//! (registry, policy, confirmation, audit), and the pools of worker processes that run
//! the tools. The `toolvisor` binary wires it to the command line and to the workers.
//!
//! Where a call goes, in order (docs/ARCHITECTURE.md walks it file by file):
//! [`session`] reads a frame → [`call::router`] (`Service::run_call_guarded`, the call's entry) finds the tool in the [`registry`],
//! validates it and asks [`policy`] through [`call::gate`] → [`audit`] records it →
//! [`workers::pool`] sends it to a worker process → the result goes back the same way.

// A call that cannot go on ends with the `Outcome` the client will see; it is the
// natural error value on the call path, and boxing it would only add noise.
#![allow(clippy::result_large_err)]

pub mod audit;
pub mod call;
pub mod config;
pub mod drain;
pub mod events;
pub mod outbox;
pub mod policy;
pub mod registry;
pub mod sandbox;
pub mod serve;

pub mod session;
pub mod undo;
pub mod usage;
pub mod workers;
