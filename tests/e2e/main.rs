//! End-to-end tests: the real `toolvisor` binary on a temp workspace, driven over the
//! real socket. One test binary, so the slow parts build and link once.

// The whole crate is tests (its helpers too): a failed unwrap here is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod harness;
mod httpd;
mod pty;

mod batch;
mod cli;
mod confined;
mod crash;
mod descriptors;
mod disk_full;
mod doctor;
mod edit;
mod egress;
mod envelope;
mod exec;
mod external;
mod fairness;
mod first_hour;
mod hidden;
mod hosts;
mod jobs;
mod limits;
mod loopback;
mod mcp;
mod policy;
mod policy_corpus;
mod prewarm;
mod prompts;
mod protocol;
mod sandbox;
mod search;
mod skills;
mod stage;
mod state;
mod supervision;
mod surfaces;
mod terminal;
mod undo;
mod web;
