//! The hash chain: how a record is sealed into a line and how a line is checked.
//! Every promise of the audit log (tamper evidence, torn-tail detection) reduces to
//! [`seal`] and [`check_line`] agreeing byte for byte.

use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

use super::canonical;

/// `prev` of the very first record ever written.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// Keys the chain owns; a caller's fields may not use them.
pub const RESERVED: [&str; 5] = ["seq", "ts", "kind", "prev", "hash"];

pub use toolvisor_os::hex::hex;

/// Lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `hash = sha256(prev_hex_ascii || "\n" || canonical(record without "hash"))`.
/// The record already contains `prev`; hashing it in front as well keeps the link
/// explicit even for a reader who never parses the JSON.
pub fn record_hash(prev: &str, unsealed: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(prev.as_bytes());
    h.update(b"\n");
    h.update(unsealed);
    hex(&h.finalize())
}

/// Seals one record: appends its line (canonical JSON including `hash`, then `\n`) to
/// `out` and returns its hash. `fields` must not use a [`RESERVED`] key.
pub fn seal(
    seq: u64,
    ts: &str,
    kind: &str,
    fields: Map<String, Value>,
    prev: &str,
    out: &mut Vec<u8>,
) -> String {
    let mut rec = fields;
    rec.insert("seq".into(), seq.into());
    rec.insert("ts".into(), ts.into());
    rec.insert("kind".into(), kind.into());
    rec.insert("prev".into(), prev.into());
    let mut value = Value::Object(rec);
    let hash = record_hash(prev, &canonical::to_vec(&value));
    if let Value::Object(m) = &mut value {
        m.insert("hash".into(), Value::String(hash.clone()));
    }
    canonical::write(&value, out);
    out.push(b'\n');
    hash
}

/// What a well-formed line says about itself.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    /// Its place in the chain.
    pub seq: u64,
    /// When it was committed.
    pub ts: String,
    /// Its `kind`.
    pub kind: String,
    /// The previous record's hash.
    pub prev: String,
    /// Its own hash, over its canonical bytes.
    pub hash: String,
    /// The call it is about, if any.
    pub call_id: Option<String>,
    /// The trace it belongs to, if any.
    pub trace_id: Option<String>,
}

/// Why a line is not a good record on its own (its link to the previous record is
/// checked by the caller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LineFault {
    /// Not UTF-8 JSON, or not an object.
    NotJson,
    /// A chain field is missing or has the wrong type.
    Malformed(&'static str, Option<u64>),
    /// The bytes are not the canonical form of the value they parse to.
    NotCanonical(u64),
    /// The stored hash is not the hash of the record.
    BadHash(u64),
}

/// Checks one line (without its `\n`): JSON object, chain fields present, bytes in
/// canonical form, and `hash` matching. Requiring canonical bytes is what makes every
/// single-byte change visible, even one that parses to the same value.
pub fn check_line(line: &[u8]) -> Result<Sealed, LineFault> {
    let value: Value = serde_json::from_slice(line).map_err(|_| LineFault::NotJson)?;
    let Value::Object(mut map) = value else {
        return Err(LineFault::NotJson);
    };
    let seq = map.get("seq").and_then(Value::as_u64);
    let text = |m: &Map<String, Value>, k: &'static str| -> Result<String, LineFault> {
        m.get(k)
            .and_then(Value::as_str)
            .map(str::to_owned)
            .ok_or(LineFault::Malformed(k, seq))
    };
    let seq = seq.ok_or(LineFault::Malformed("seq", None))?;
    let sealed = Sealed {
        seq,
        ts: text(&map, "ts")?,
        kind: text(&map, "kind")?,
        prev: text(&map, "prev")?,
        hash: text(&map, "hash")?,
        call_id: map
            .get("call_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
        trace_id: map
            .get("trace_id")
            .and_then(Value::as_str)
            .map(str::to_owned),
    };
    let whole = Value::Object(map.clone());
    if canonical::to_vec(&whole) != line {
        return Err(LineFault::NotCanonical(seq));
    }
    map.remove("hash");
    let unsealed = canonical::to_vec(&Value::Object(map));
    if record_hash(&sealed.prev, &unsealed) != sealed.hash {
        return Err(LineFault::BadHash(seq));
    }
    Ok(sealed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => unreachable!(),
        }
    }

    #[test]
    fn sealed_line_checks_and_links() {
        let mut out = Vec::new();
        let h1 = seal(
            1,
            "2026-01-01T00:00:00.000Z",
            "a",
            fields(json!({"x": 1})),
            GENESIS,
            &mut out,
        );
        let h2 = seal(
            2,
            "2026-01-01T00:00:00.001Z",
            "b",
            Map::new(),
            &h1,
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let r1 = check_line(lines[0].as_bytes()).unwrap();
        let r2 = check_line(lines[1].as_bytes()).unwrap();
        assert_eq!(
            (r1.seq, r1.prev.as_str(), r1.hash.as_str()),
            (1, GENESIS, h1.as_str())
        );
        assert_eq!(
            (r2.seq, r2.prev.as_str(), r2.hash.as_str()),
            (2, h1.as_str(), h2.as_str())
        );
        assert_eq!(h1.len(), 64);
        assert!(
            h1.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        );
    }

    #[test]
    fn hash_is_over_prev_newline_and_canonical_bytes() {
        let mut out = Vec::new();
        let h = seal(
            7,
            "T",
            "k",
            fields(json!({"b": "x", "a": 2})),
            GENESIS,
            &mut out,
        );
        let unsealed =
            format!(r#"{{"a":2,"b":"x","kind":"k","prev":"{GENESIS}","seq":7,"ts":"T"}}"#);
        assert_eq!(h, sha256_hex(format!("{GENESIS}\n{unsealed}").as_bytes()));
        let line = format!(
            r#"{{"a":2,"b":"x","hash":"{h}","kind":"k","prev":"{GENESIS}","seq":7,"ts":"T"}}"#
        );
        assert_eq!(String::from_utf8(out).unwrap(), format!("{line}\n"));
    }

    #[test]
    fn changes_are_faults() {
        let mut out = Vec::new();
        seal(
            3,
            "T",
            "k",
            fields(json!({"s": "\u{1f}"})),
            GENESIS,
            &mut out,
        );
        out.pop();
        let line = String::from_utf8(out).unwrap();
        assert!(check_line(line.as_bytes()).is_ok());
        let tampered = line.replace("\"seq\":3", "\"seq\":4");
        assert_eq!(check_line(tampered.as_bytes()), Err(LineFault::BadHash(4)));
        let spaced = line.replacen(',', ", ", 1);
        assert_eq!(
            check_line(spaced.as_bytes()),
            Err(LineFault::NotCanonical(3))
        );
        // Same value, other spelling: caught by the canonical-bytes rule.
        let upper = line.replace("\\u001f", "\\u001F");
        assert_ne!(upper, line);
        assert_eq!(
            check_line(upper.as_bytes()),
            Err(LineFault::NotCanonical(3))
        );
        assert_eq!(check_line(b"{\"seq\":1"), Err(LineFault::NotJson));
        assert_eq!(check_line(b"[1]"), Err(LineFault::NotJson));
    }

    #[test]
    fn hex_matches_known_digest() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}

#[cfg(test)]
mod props {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever text a caller records (control characters, quotes, any Unicode),
        /// the sealed line is one line and checks.
        #[test]
        fn any_text_seals_to_one_checkable_line(key in "\\PC{0,12}", text in any::<String>(), n in any::<i64>()) {
            let mut fields = Map::new();
            fields.insert(format!("f_{key}"), Value::String(text));
            fields.insert("n".into(), n.into());
            let mut out = Vec::new();
            let h = seal(1, "T", "k", fields, GENESIS, &mut out);
            prop_assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 1);
            let s = check_line(&out[..out.len() - 1]).unwrap();
            prop_assert_eq!(s.hash, h);
        }
    }
}
