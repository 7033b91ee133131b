//! Self-confinement of a worker process at start (Landlock). OWNER: exec helper.

use toolvisor_protocol::worker::WorkerInit;

/// Confine this process according to its group; returns the Landlock ABI enforced.
pub fn confine(_init: &WorkerInit) -> Option<u32> {
    None
}
