//! Command line. OWNER: lead.
pub fn main() {}
