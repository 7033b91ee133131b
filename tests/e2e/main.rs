//! End-to-end tests: the real `toolvisor` binary on a temp workspace, driven over the
//! real socket. One test binary, so the slow parts build and link once.

mod harness;

mod crash;
mod mcp;
mod edit;
mod exec;
mod policy;
mod protocol;
mod python_client;
mod search;
