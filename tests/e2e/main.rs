//! End-to-end tests: the real `toolvisor` binary on a temp workspace, driven over the
//! real socket. One test binary, so the slow parts build and link once.

mod harness;
mod pty;

mod batch;
mod cli;
mod crash;
mod disk_full;
mod edit;
mod exec;
mod external;
mod fairness;
mod jobs;
mod limits;
mod mcp;
mod policy;
mod policy_corpus;
mod prompts;
mod protocol;
mod sandbox;
mod search;
mod supervision;
mod surfaces;
