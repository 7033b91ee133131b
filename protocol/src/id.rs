//! Request ids. The protocol says strings; integer ids are accepted too and echoed
//! back in the form they came in, so a client can match answers by equality.

use serde::{Deserialize, Serialize};
use std::fmt;

/// An id chosen by the client for a call, batch or request.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Id {
    /// The form the protocol asks for.
    Str(String),
    /// A signed integer id, echoed as an integer.
    Int(i64),
    /// An unsigned id above `i64::MAX`.
    UInt(u64),
}

impl fmt::Display for Id {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Id::Str(s) => f.write_str(s),
            Id::Int(n) => write!(f, "{n}"),
            Id::UInt(n) => write!(f, "{n}"),
        }
    }
}

impl From<&str> for Id {
    fn from(s: &str) -> Self {
        Id::Str(s.to_owned())
    }
}

impl From<String> for Id {
    fn from(s: String) -> Self {
        Id::Str(s)
    }
}
