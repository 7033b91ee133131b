//! `toolvisor reap -- CMD...`: the single-threaded subreaper shim commands run under.
//! OWNER: exec helper.

/// Entry point of `toolvisor reap`; returns the exit code.
pub fn main(_args: Vec<String>) -> i32 {
    eprintln!("toolvisor reap: not implemented yet");
    70
}
