//! Secrets never reach the audit log: `args_preview` is the arguments with secret-named
//! keys and secret-looking strings masked, then cut to 1 KiB. Masking over-reaches on
//! purpose (a masked path costs a little context; a logged token costs a rotation).

use std::sync::LazyLock;

use regex::Regex;
use serde_json::{Map, Value};

use super::canonical;

/// What a masked value or substring becomes.
pub const MASK: &str = "***";
/// Largest `args_preview`, in bytes.
pub const MAX_PREVIEW: usize = 1024;

/// Key names (lowercased, substring) whose values are masked whole.
const SECRET_KEYS: [&str; 9] = [
    "token",
    "secret",
    "password",
    "passwd",
    "key",
    "authorization",
    "cookie",
    "credential",
    "private",
];

/// Patterns of secrets inside strings; each match becomes `***` (the `(?i)bearer`
/// and `name=value` forms keep their prefix so the preview stays readable).
static PATTERNS: LazyLock<Vec<(Regex, &'static str)>> = LazyLock::new(|| {
    let table: [(&str, &str); 8] = [
        (
            r"(?i)\b(bearer|basic|token)(\s+)[A-Za-z0-9._~+/=-]{6,}",
            "${1}${2}***",
        ),
        (
            r"(?i)\b([a-z0-9_]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key)[a-z0-9_]*)(\s*[=:]\s*)[^\s'&;]+",
            "${1}${2}***",
        ),
        (
            r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)",
            "***",
        ),
        (r"\bsk-[A-Za-z0-9_-]{16,}", "***"),
        (
            r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})",
            "***",
        ),
        (r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b", "***"),
        (r"\bxox[abprs]-[A-Za-z0-9-]{10,}", "***"),
        (
            r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]*",
            "***",
        ),
    ];
    table
        .into_iter()
        .filter_map(|(p, r)| Regex::new(p).ok().map(|re| (re, r)))
        .collect()
});

/// Values of the supervisor's own secret-named environment variables (`GITHUB_TOKEN`,
/// `MY_SECRET`, …), at least 6 bytes long: whatever shape they have, they are masked
/// wherever they appear (an agent grepping for a token it saw, a command echoing it).
/// Commands may receive them (`env_passthrough`), so patterns alone would miss them.
static ENV_SECRETS: LazyLock<Vec<String>> = LazyLock::new(|| {
    let mut v: Vec<String> = std::env::vars_os()
        .filter_map(|(k, val)| Some((k.into_string().ok()?, val.into_string().ok()?)))
        .filter(|(k, val)| is_secret_key(k) && val.len() >= 6)
        .map(|(_, val)| val)
        .collect();
    // Longest first, so a secret containing another is masked whole.
    v.sort_by_key(|s| std::cmp::Reverse(s.len()));
    v
});

/// Long runs that might be base64 or hex key material; kept only when they look like
/// ordinary text (see [`looks_random`]).
static LONG_RUN: LazyLock<Option<Regex>> =
    LazyLock::new(|| Regex::new(r"[A-Za-z0-9+/=_-]{32,}").ok());

/// The preview written as `args_preview`: masked args as canonical JSON, at most
/// [`MAX_PREVIEW`] bytes (cut on a character boundary, ending in `…`).
pub fn preview(args: &Value) -> String {
    let text = String::from_utf8(canonical::to_vec(&redact(args))).unwrap_or_default();
    cut(text, MAX_PREVIEW)
}

/// Longest part of one string that is masked and may reach the preview. The preview
/// keeps at most [`MAX_PREVIEW`] bytes, so a secret that starts inside it ends well
/// within this bound; scanning a multi-megabyte `content` whole would only cost time.
const SCAN_MAX: usize = 4 * MAX_PREVIEW;

/// A copy of `v` with secrets masked (long strings cut to [`SCAN_MAX`] first).
pub fn redact(v: &Value) -> Value {
    match v {
        Value::String(s) => Value::String(mask_str(head(s, SCAN_MAX))),
        Value::Array(items) => Value::Array(items.iter().map(redact).collect()),
        Value::Object(map) => {
            let masked: Map<String, Value> = map
                .iter()
                .map(|(k, val)| {
                    let val = if is_secret_key(k) {
                        Value::String(MASK.into())
                    } else {
                        redact(val)
                    };
                    (k.clone(), val)
                })
                .collect();
            Value::Object(masked)
        }
        other => other.clone(),
    }
}

/// The first `max` bytes of `s`, cut on a character boundary.
fn head(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Whether a key names a secret (case-insensitive substring).
pub fn is_secret_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    SECRET_KEYS.iter().any(|s| k.contains(s))
}

/// Secret values the configuration hands to someone (`[mcp.servers.NAME] env`), masked
/// like [`ENV_SECRETS`], longest first.
static CONFIGURED: std::sync::RwLock<Vec<String>> = std::sync::RwLock::new(Vec::new());

/// Mask these values too from now on (at least 4 bytes long; shorter ones would mask
/// ordinary text).
pub fn add_secrets(values: impl IntoIterator<Item = String>) {
    let mut known = CONFIGURED.write().unwrap_or_else(|p| p.into_inner());
    known.extend(values.into_iter().filter(|v| v.len() >= 4));
    known.sort_by_key(|s| std::cmp::Reverse(s.len()));
    known.dedup();
}

/// `s` with every secret-looking part replaced by `***`.
pub fn mask_str(s: &str) -> String {
    let configured = CONFIGURED.read().unwrap_or_else(|p| p.into_inner());
    if !configured.iter().any(|c| s.contains(c.as_str())) {
        return mask_with(s, &ENV_SECRETS);
    }
    let mut out = s.to_owned();
    for secret in configured.iter() {
        out = out.replace(secret.as_str(), MASK);
    }
    mask_with(&out, &ENV_SECRETS)
}

/// [`mask_str`] with `known` secret values masked verbatim first.
fn mask_with(s: &str, known: &[String]) -> String {
    let mut out = s.to_owned();
    for secret in known {
        if out.contains(secret.as_str()) {
            out = out.replace(secret.as_str(), MASK);
        }
    }
    for (re, rep) in PATTERNS.iter() {
        if re.is_match(&out) {
            out = re.replace_all(&out, *rep).into_owned();
        }
    }
    if let Some(re) = LONG_RUN.as_ref() {
        out = re
            .replace_all(&out, |c: &regex::Captures<'_>| {
                let run = &c[0];
                if looks_random(run) {
                    MASK.to_owned()
                } else {
                    run.to_owned()
                }
            })
            .into_owned();
    }
    out
}

/// High-entropy test for a long run: all-hex runs of 32+ (digests, hex keys), or
/// base64-like runs mixing upper, lower and digits with ≥ 4.2 bits/char of Shannon
/// entropy. Long paths and identifiers rarely mix all three classes that evenly.
fn looks_random(run: &str) -> bool {
    let b = run.as_bytes();
    if b.iter().all(u8::is_ascii_hexdigit) && b.iter().any(u8::is_ascii_digit) {
        return true;
    }
    let has = |f: fn(&u8) -> bool| b.iter().any(f);
    if !(has(u8::is_ascii_uppercase) && has(u8::is_ascii_lowercase) && has(u8::is_ascii_digit)) {
        return false;
    }
    entropy(b) >= 4.2
}

fn entropy(b: &[u8]) -> f64 {
    let mut counts = [0u32; 256];
    for &c in b {
        counts[c as usize] += 1;
    }
    let n = b.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

/// Cuts `s` to at most `max` bytes on a char boundary, marking the cut with `…`.
fn cut(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let mut end = max - '…'.len_utf8();
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s.truncate(end);
    s.push('…');
    s
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// A secret-named variable's value is masked wherever it appears, whatever its
    /// shape (no pattern would recognise `hunter2planted`).
    #[test]
    fn values_of_secret_named_variables_are_masked_anywhere() {
        let known = vec!["hunter2planted".to_string()];
        assert_eq!(
            mask_with("grep -r hunter2planted src/ # x", &known),
            "grep -r *** src/ # x"
        );
        assert_eq!(mask_with("nothing here", &known), "nothing here");
    }

    /// Secrets planted in test logs; none may appear in a preview or log file.
    pub(crate) const PLANTED: [&str; 9] = [
        "hunter2-password-value",
        "sk-proj-abcdefghijklmnopqrstuvwx1234",
        "ghp_abcdefghijklmnopqrstuvwxyz0123456789",
        "AKIAIOSFODNN7EXAMPLE",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV",
        "c2VjcmV0LWJhc2U2NC1rZXktbWF0ZXJpYWwtUVdFUlRZMTIzNDU2",
        "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
        "opaque-bearer-value-xyz",
        "cookie-session-42",
    ];

    pub(crate) fn planted_args() -> Value {
        json!({
            "command": format!("curl -H 'Authorization: Bearer {}' https://x", PLANTED[7]),
            "env": {"DB_PASSWORD": PLANTED[0], "OPENAI": PLANTED[1], "Cookie": PLANTED[8]},
            "notes": [PLANTED[2], format!("aws {} ok", PLANTED[3]), PLANTED[4]],
            "blob": PLANTED[5],
            "digest": PLANTED[6],
            "apiKey": {"nested": "value"},
            "path": "supervisor/src/audit/writer_module_name.rs",
        })
    }

    #[test]
    fn planted_secrets_are_masked() {
        let p = preview(&planted_args());
        for s in PLANTED {
            assert!(!p.contains(s), "{s} leaked in {p}");
        }
        assert!(p.contains("Bearer ***"), "{p}");
        assert!(p.contains(r#""apiKey":"***""#), "{p}");
        assert!(
            p.contains("supervisor/src/audit/writer_module_name.rs"),
            "{p}"
        );
    }

    #[test]
    fn secret_keys_are_case_insensitive_substrings() {
        for k in [
            "TOKEN",
            "x-auth-token",
            "Authorization",
            "client_secret",
            "ssh_key",
            "Set-Cookie",
        ] {
            assert!(is_secret_key(k), "{k}");
        }
        for k in ["command", "path", "pattern", "cwd"] {
            assert!(!is_secret_key(k), "{k}");
        }
    }

    #[test]
    fn inline_assignments_keep_names() {
        assert_eq!(mask_str("PASSWORD=abc123 ./run"), "PASSWORD=*** ./run");
        assert_eq!(mask_str("--api-key: xyz"), "--api-key: ***");
        assert_eq!(mask_str("git status"), "git status");
    }

    #[test]
    fn preview_is_at_most_one_kib() {
        let p = preview(&json!({"content": "é".repeat(5000)}));
        assert!(p.len() <= MAX_PREVIEW);
        assert!(p.ends_with('…'));
        assert_eq!(preview(&json!({"a": 1})), r#"{"a":1}"#);
    }
}
