//! The `toolvisor` binary: the command line, the client commands and the MCP bridge,
//! wired to the supervisor (`serve`) and to the workers it re-executes itself as
//! (`toolvisor worker`, `toolvisor reap`).

mod cli;
mod commands;
mod mcp;
mod term;
mod workspace;

fn main() {
    cli::main()
}
