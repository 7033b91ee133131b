//! The worker main loop. OWNER: lead.

/// Entry point of `toolvisor worker --group G`; returns the exit code.
pub fn main(_group: &str) -> i32 {
    70
}
