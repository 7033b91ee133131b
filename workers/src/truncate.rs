//! Output truncation (DESIGN §4): cuts on UTF-8 boundaries, one marker line, counts.
//!
//! OWNER: search helper.
