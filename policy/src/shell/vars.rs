//! Which variables hold a plain integer the command itself put there.
//!
//! Bash evaluates a variable read in arithmetic (`$((X))`, `((X))`, `${a[X]}`,
//! `[[ X -eq 1 ]]`, `let`) as an expression, so a value such as `a[$(cmd)]` from the
//! environment runs `cmd`. Arithmetic is safe only on variables the command set to an
//! integer literal (or by arithmetic) on every path before the read. The state is an
//! under-approximation: branches and subshells keep only what holds on every path.

use std::collections::HashSet;

/// Variables known to hold an integer at this point of the command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct SafeVars(HashSet<String>);

impl SafeVars {
    pub(crate) fn is_safe(&self, name: &str) -> bool {
        self.0.contains(name)
    }

    /// `name` now holds an integer (a literal, or an arithmetic result).
    pub(crate) fn set_safe(&mut self, name: &str) {
        self.0.insert(name.to_owned());
    }

    /// `name` may now hold anything.
    pub(crate) fn forget(&mut self, name: &str) {
        self.0.remove(name);
    }

    /// An assignment of `value` (known text, or `None` when only known at run time).
    pub(crate) fn assign(&mut self, name: &str, value: Option<&str>) {
        match value {
            Some(v) if is_integer(v) => self.set_safe(name),
            _ => self.forget(name),
        }
    }

    /// What holds after either of two paths: what holds on both.
    pub(crate) fn meet(&mut self, other: &SafeVars) {
        self.0.retain(|v| other.0.contains(v));
    }
}

/// Text bash's arithmetic reads as a plain number (`42`, `-1`, `0x1f`, `8#17`), or
/// empty (read as 0).
pub(crate) fn is_integer(v: &str) -> bool {
    let v = v.trim();
    let v = v.strip_prefix(['-', '+']).unwrap_or(v);
    if v.is_empty() {
        return true;
    }
    if let Some(hex) = v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        return !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit());
    }
    match v.split_once('#') {
        Some((base, digits)) => {
            !base.is_empty()
                && base.chars().all(|c| c.is_ascii_digit())
                && !digits.is_empty()
                && digits
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '@' || c == '_')
        }
        None => v.chars().all(|c| c.is_ascii_digit()),
    }
}

/// A shell variable name (`X`, `_a1`).
pub(crate) fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Special parameters that always hold a number (`$#`, `$?`, `$$`, `$!`).
pub(crate) fn is_numeric_special(name: &str) -> bool {
    matches!(name, "#" | "?" | "$" | "!")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers() {
        for ok in ["0", "42", "-1", "+7", "0x1F", "8#17", "64#a_@", ""] {
            assert!(is_integer(ok), "{ok:?}");
        }
        for bad in ["a", "a[$(x)]", "1+1", "0x", "#1", "1#", "x1"] {
            assert!(!is_integer(bad), "{bad:?}");
        }
    }

    #[test]
    fn meet_keeps_what_holds_on_both_paths() {
        let mut a = SafeVars::default();
        a.assign("i", Some("1"));
        a.assign("j", Some("2"));
        let mut b = a.clone();
        b.assign("j", Some("x"));
        b.assign("k", Some("3"));
        a.meet(&b);
        assert!(a.is_safe("i") && !a.is_safe("j") && !a.is_safe("k"));
    }
}
