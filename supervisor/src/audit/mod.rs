//! The audit log (DESIGN §7). OWNER: audit helper.
