//! One worker process and the actor that owns it.

mod actor;

pub use actor::*;
