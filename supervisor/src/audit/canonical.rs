//! Canonical JSON: the exact bytes the audit hash chain and `args_sha256` are computed
//! over (docs/AUDIT.md, "Canonical bytes"). serde_json is built with `preserve_order`
//! in this workspace, so its own output follows insertion order; we write the bytes
//! ourselves so they depend on the value only, never on how a map was built.

use serde_json::Value;
use sha2::{Digest, Sha256};

use super::chain::hex;

/// The canonical bytes of `v`: object keys sorted by their UTF-8 bytes, no whitespace,
/// strings escaped as serde_json escapes them, numbers as serde_json prints them.
pub fn to_vec(v: &Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    write(v, &mut out);
    out
}

/// Appends the canonical bytes of `v` to `out` (one buffer for a whole batch).
pub fn write(v: &Value, out: &mut Vec<u8>) {
    match v {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        // serde_json's Display for Number is itoa for integers and ryu (shortest
        // round-trip) for floats, the same text its serializer writes.
        Value::Number(n) => out.extend_from_slice(n.to_string().as_bytes()),
        Value::String(s) => write_str(s, out),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write(item, out);
            }
            out.push(b']');
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
            out.push(b'{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_str(k, out);
                out.push(b':');
                write(val, out);
            }
            out.push(b'}');
        }
    }
}

/// A JSON string with serde_json's escaping: `"` and `\` escaped, the C0 controls as
/// `\b \t \n \f \r` or `\u00xx` (lowercase hex), everything else (DEL, non-ASCII,
/// U+2028/2029, `/`) written as its raw UTF-8. Keeping control characters escaped is
/// what keeps one record on one line (CWE-117).
fn write_str(s: &str, out: &mut Vec<u8>) {
    out.push(b'"');
    let bytes = s.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let esc: &[u8] = match b {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            0x09 => b"\\t",
            0x0a => b"\\n",
            0x0c => b"\\f",
            0x0d => b"\\r",
            0x00..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if esc.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.extend_from_slice(b"\\u00");
            out.push(HEX[(b >> 4) as usize]);
            out.push(HEX[(b & 0xf) as usize]);
        } else {
            out.extend_from_slice(esc);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

/// `args_sha256` of a `requested` record: lowercase hex SHA-256 of the canonical args,
/// so two calls with the same arguments (in any key order) hash the same.
pub fn args_sha256(args: &Value) -> String {
    hex(&Sha256::digest(to_vec(args)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn canon(v: &Value) -> String {
        String::from_utf8(to_vec(v)).unwrap()
    }

    #[test]
    fn keys_are_sorted_at_every_depth_without_whitespace() {
        let v = json!({"b": 1, "a": {"z": [3, {"y": 1, "x": 2}], "c": null}, "A": true});
        assert_eq!(
            canon(&v),
            r#"{"A":true,"a":{"c":null,"z":[3,{"x":2,"y":1}]},"b":1}"#
        );
    }

    #[test]
    fn insertion_order_does_not_matter() {
        let a: Value = serde_json::from_str(r#"{"x":1,"y":2,"é":3,"e":4}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"é":3,"e":4,"y":2,"x":1}"#).unwrap();
        assert_eq!(to_vec(&a), to_vec(&b));
        assert_eq!(args_sha256(&a), args_sha256(&b));
        // Sorted by UTF-8 bytes: "é" (0xC3 0xA9) after ASCII.
        assert_eq!(canon(&a), r#"{"e":4,"x":1,"y":2,"é":3}"#);
    }

    #[test]
    fn strings_escape_like_serde_json() {
        let samples = [
            "plain",
            "quote \" backslash \\ slash /",
            "ctl \u{0} \u{1} \u{8} \t \n \u{b} \u{c} \r \u{1f} \u{7f}",
            "unicode é ☃ 😀 \u{2028} \u{2029}",
            "",
        ];
        for s in samples {
            let ours = canon(&Value::String(s.into()));
            assert_eq!(ours, serde_json::to_string(s).unwrap(), "{s:?}");
            assert!(!ours.contains('\n'));
        }
        assert_eq!(canon(&json!("\u{1}")), r#""\u0001""#);
        assert_eq!(canon(&json!("\u{1f}")), r#""\u001f""#);
    }

    #[test]
    fn numbers_print_like_serde_json_and_round_trip() {
        let v: Value = serde_json::from_str(
            r#"[0,-1,18446744073709551615,-9223372036854775808,1.0,0.1,1e20,1.5e-7,-0.0,123456.789]"#,
        )
        .unwrap();
        let text = canon(&v);
        assert_eq!(text, serde_json::to_string(&v).unwrap());
        let again: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            to_vec(&again),
            text.as_bytes(),
            "canonical bytes are a fixed point"
        );
    }

    #[test]
    fn args_sha256_is_known_value() {
        // sha256("{}")
        assert_eq!(
            args_sha256(&json!({})),
            "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
