//! Preview tokens: the changes `preview_write_file` / `preview_edit_file` showed, kept
//! until `apply_file_change` uses them.
//!
//! The store lives in the supervisor, not the edit worker, so a token survives a worker
//! restart. It is pure and synchronous: the caller passes the current [`Instant`], so
//! tests check expiry without sleeping. A token is single use and expires after its TTL
//! (`[edit] preview_ttl_ms`, default 10 min). Used and expired tokens are remembered
//! for a while so the model hears *why* a token no longer works.

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::io::Read;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use toolvisor_os::hex::hex;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toolvisor_protocol::ErrorType;

/// The TTL when the config says nothing (`[edit] preview_ttl_ms`).
pub const DEFAULT_TTL: Duration = Duration::from_secs(600);

/// How long a used or expired token's id is remembered, to say "already used" or
/// "expired" rather than "unknown".
const SPENT_RETAIN: Duration = Duration::from_secs(3600);

/// Most pending changes kept at once; each holds a whole file, so memory stays bounded.
/// Past it the oldest is dropped (its token then reports "expired").
pub const MAX_LIVE: usize = 256;

/// Most spent ids remembered (they are small; this only bounds a flood).
const MAX_SPENT: usize = 16_384;

/// What `apply_file_change` will write: exactly what the preview showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingChange {
    /// The preview's resolved display path (`src/a.rs`, `shared:/x`).
    pub path: String,
    /// Lowercase hex SHA-256 of the file when previewed; `None`: it did not exist.
    pub before_sha256: Option<String>,
    /// The complete new content.
    pub content: String,
    /// The preview tool that made it (`preview_write_file` / `preview_edit_file`).
    pub tool: String,
    /// The diff the preview showed (for the confirmation of `apply_file_change`).
    pub diff: String,
}

impl PendingChange {
    /// Take the change out of a preview outcome's `meta` (`path`, `before_sha256`,
    /// `content`), removing `content` so the full text is not sent to the client twice.
    /// `None` when the meta is not a preview's.
    pub fn from_preview_meta(tool: &str, meta: &mut Map<String, Value>) -> Option<Self> {
        let path = meta.get("path")?.as_str()?.to_owned();
        let before_sha256 = match meta.get("before_sha256")? {
            Value::Null => None,
            Value::String(s) => Some(s.clone()),
            _ => return None,
        };
        let content = match meta.remove("content")? {
            Value::String(s) => s,
            _ => return None,
        };
        let diff = meta
            .get("diff")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        Some(PendingChange {
            path,
            before_sha256,
            content,
            tool: tool.to_owned(),
            diff,
        })
    }

    /// The arguments of the edit worker's internal `apply_change` tool.
    pub fn apply_args(&self) -> Value {
        json!({
            "path": self.path,
            "before_sha256": self.before_sha256,
            "content": self.content,
        })
    }
}

/// Why a token cannot be used; every case is `TokenInvalid` on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    /// Never issued (or this server restarted since).
    #[error("unknown preview token; run preview_write_file or preview_edit_file to get one")]
    Unknown,
    /// Single use, used already.
    #[error("this preview token was already used; preview the change again")]
    Used,
    /// Past `edit.preview_ttl_ms`.
    #[error("this preview token expired; preview the change again")]
    Expired,
}

impl TokenError {
    /// The contract error type of every token failure.
    pub fn error_type(self) -> ErrorType {
        ErrorType::TokenInvalid
    }
}

/// A change waiting for its token.
#[derive(Debug)]
struct Live<T> {
    change: T,
    issued_at: Instant,
    expires_at: Instant,
}

/// Pending changes by token, plus the ids of spent tokens. `T`: what a token stands for
/// (a preview's [`PendingChange`], or a staged command's held changes).
#[derive(Debug)]
pub struct PreviewStore<T = PendingChange> {
    live: HashMap<String, Live<T>>,
    /// Why each remembered token is spent.
    spent: HashMap<String, TokenError>,
    /// Spent ids in the order they were spent, with when to forget them.
    spent_order: VecDeque<(String, Instant)>,
    tokens: TokenSource,
}

impl<T> Default for PreviewStore<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> PreviewStore<T> {
    /// An empty store.
    pub fn new() -> Self {
        PreviewStore {
            live: HashMap::new(),
            spent: HashMap::new(),
            spent_order: VecDeque::new(),
            tokens: TokenSource::new(),
        }
    }

    /// Keep `change` until `now + ttl`; returns its new, unguessable token.
    pub fn issue(&mut self, change: T, now: Instant, ttl: Duration) -> String {
        self.prune(now);
        while self.live.len() >= MAX_LIVE {
            self.evict_oldest(now);
        }
        let token = self.tokens.next();
        let live = Live {
            change,
            issued_at: now,
            expires_at: now + ttl,
        };
        self.live.insert(token.clone(), live);
        token
    }

    /// Use `token` once: its change, or why not (unknown, already used, expired).
    pub fn take(&mut self, token: &str, now: Instant) -> Result<T, TokenError> {
        self.prune(now);
        if let Some(live) = self.live.remove(token) {
            self.remember(token.to_owned(), TokenError::Used, now);
            return Ok(live.change);
        }
        Err(self
            .spent
            .get(token)
            .copied()
            .unwrap_or(TokenError::Unknown))
    }

    /// Look at `token`'s change without using it: for the policy decision and the
    /// confirmation of an `apply_file_change` (its path and risk) before
    /// [`take`](Self::take).
    pub fn peek(&self, token: &str, now: Instant) -> Result<&T, TokenError> {
        match self.live.get(token) {
            Some(live) if now < live.expires_at => Ok(&live.change),
            Some(_) => Err(TokenError::Expired),
            None => Err(self
                .spent
                .get(token)
                .copied()
                .unwrap_or(TokenError::Unknown)),
        }
    }

    /// Expire live tokens past their deadline and forget old spent ids.
    pub fn prune(&mut self, now: Instant) {
        let expired: Vec<String> = self
            .live
            .iter()
            .filter(|(_, l)| now >= l.expires_at)
            .map(|(t, _)| t.clone())
            .collect();
        for token in expired {
            self.live.remove(&token);
            self.remember(token, TokenError::Expired, now);
        }
        self.forget_spent(now);
    }

    /// Number of changes waiting for their token.
    pub fn len(&self) -> usize {
        self.live.len()
    }

    /// Whether no change is kept.
    pub fn is_empty(&self) -> bool {
        self.live.is_empty()
    }

    /// Drop the oldest live change to make room (its token then reads as expired).
    fn evict_oldest(&mut self, now: Instant) {
        let oldest = self
            .live
            .iter()
            .min_by_key(|(_, l)| l.issued_at)
            .map(|(t, _)| t.clone());
        if let Some(token) = oldest {
            self.live.remove(&token);
            self.remember(token, TokenError::Expired, now);
        }
    }

    fn remember(&mut self, token: String, why: TokenError, now: Instant) {
        self.spent.insert(token.clone(), why);
        self.spent_order.push_back((token, now + SPENT_RETAIN));
        self.forget_spent(now);
    }

    /// Forget spent ids past their retention, and the oldest beyond [`MAX_SPENT`].
    fn forget_spent(&mut self, now: Instant) {
        while let Some((token, forget_at)) = self.spent_order.front() {
            if *forget_at > now && self.spent_order.len() <= MAX_SPENT {
                break;
            }
            self.spent.remove(token);
            self.spent_order.pop_front();
        }
    }
}

/// Unguessable tokens without a new crate: SHA-256 over a secret seed (read once from
/// `/dev/urandom`), a counter, the time and the pid; 128 bits of it, hex.
#[derive(Debug)]
struct TokenSource {
    seed: [u8; 32],
    counter: u64,
}

impl TokenSource {
    fn new() -> Self {
        TokenSource {
            seed: random_seed(),
            counter: 0,
        }
    }

    fn next(&mut self) -> String {
        self.counter += 1;
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let mut h = Sha256::new();
        h.update(self.seed);
        h.update(self.counter.to_le_bytes());
        h.update(nanos.to_le_bytes());
        h.update(std::process::id().to_le_bytes());
        let digest = h.finalize();
        format!("pv_{}", hex(&digest[..16]))
    }
}

/// 32 random bytes from `/dev/urandom`; without it, the std hasher's per-process random
/// keys mixed with the time (still secret to other processes).
fn random_seed() -> [u8; 32] {
    let mut seed = [0u8; 32];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut seed));
    if read.is_err() {
        let mut h = Sha256::new();
        for i in 0..4u64 {
            h.update(RandomState::new().hash_one(i).to_le_bytes());
        }
        h.update(format!("{:?}", SystemTime::now()).as_bytes());
        seed.copy_from_slice(&h.finalize());
    }
    seed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn change(n: u32) -> PendingChange {
        PendingChange {
            path: format!("f{n}.txt"),
            before_sha256: None,
            content: format!("content {n}"),
            tool: "preview_write_file".into(),
            diff: String::new(),
        }
    }

    const TTL: Duration = Duration::from_secs(600);

    #[test]
    fn a_token_gives_its_change_once() {
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        let token = store.issue(change(1), t0, TTL);
        assert_eq!(
            store.take(&token, t0 + Duration::from_secs(1)),
            Ok(change(1))
        );
        assert_eq!(
            store.take(&token, t0 + Duration::from_secs(2)),
            Err(TokenError::Used)
        );
        assert!(store.is_empty());
    }

    #[test]
    fn peek_does_not_use_the_token() {
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        let token = store.issue(change(1), t0, TTL);
        assert_eq!(store.peek(&token, t0), Ok(&change(1)));
        assert_eq!(store.peek(&token, t0 + TTL), Err(TokenError::Expired));
        assert_eq!(store.take(&token, t0), Ok(change(1)));
        assert_eq!(store.peek(&token, t0), Err(TokenError::Used));
        assert_eq!(store.peek("pv_x", t0), Err(TokenError::Unknown));
    }

    #[test]
    fn a_token_expires_at_its_ttl() {
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        let token = store.issue(change(1), t0, TTL);
        let other = store.issue(change(2), t0, TTL);
        assert_eq!(store.take(&token, t0 + TTL), Err(TokenError::Expired));
        // Expired stays expired (not "unknown") on later attempts.
        assert_eq!(store.take(&other, t0 + TTL * 2), Err(TokenError::Expired));
        assert!(store.is_empty());
    }

    #[test]
    fn a_token_just_before_its_ttl_still_works() {
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        let token = store.issue(change(1), t0, TTL);
        assert!(
            store
                .take(&token, t0 + TTL - Duration::from_millis(1))
                .is_ok()
        );
    }

    #[test]
    fn unknown_tokens_are_unknown() {
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        assert_eq!(store.take("pv_nope", t0), Err(TokenError::Unknown));
        store.issue(change(1), t0, TTL);
        assert_eq!(store.take("", t0), Err(TokenError::Unknown));
    }

    #[test]
    fn spent_ids_are_forgotten_after_the_retention() {
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        let token = store.issue(change(1), t0, TTL);
        store.take(&token, t0).unwrap();
        let later = t0 + SPENT_RETAIN + Duration::from_secs(1);
        assert_eq!(store.take(&token, later), Err(TokenError::Unknown));
        assert!(store.spent.is_empty() && store.spent_order.is_empty());
    }

    #[test]
    fn tokens_are_distinct_and_long() {
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        let a = store.issue(change(1), t0, TTL);
        let b = store.issue(change(1), t0, TTL);
        assert_ne!(a, b);
        assert_eq!(a.len(), 3 + 32);
        assert!(a[3..].bytes().all(|c| c.is_ascii_hexdigit()));
        let other_store = PreviewStore::<PendingChange>::new().tokens.next();
        assert_ne!(
            other_store, a,
            "two stores must not produce the same tokens"
        );
    }

    #[test]
    fn the_store_is_bounded_and_evicts_the_oldest() {
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        let first = store.issue(change(0), t0, TTL);
        let mut last = String::new();
        for i in 1..=MAX_LIVE as u32 {
            last = store.issue(change(i), t0 + Duration::from_millis(i.into()), TTL);
        }
        assert_eq!(store.len(), MAX_LIVE);
        assert_eq!(store.take(&first, t0), Err(TokenError::Expired));
        assert!(store.take(&last, t0 + Duration::from_secs(1)).is_ok());
    }

    #[test]
    fn the_change_round_trips_through_preview_meta_and_apply_args() {
        let mut meta = Map::new();
        meta.insert("diff".into(), json!("--- a/f\n"));
        meta.insert("path".into(), json!("src/a.rs"));
        meta.insert("before_sha256".into(), json!("ab12"));
        meta.insert("content".into(), json!("new text"));
        let c = PendingChange::from_preview_meta("preview_edit_file", &mut meta).unwrap();
        assert!(!meta.contains_key("content"), "content is swapped out");
        assert_eq!(
            c.apply_args(),
            json!({"path": "src/a.rs", "before_sha256": "ab12", "content": "new text"})
        );
        let mut new_file = Map::new();
        new_file.insert("path".into(), json!("n"));
        new_file.insert("before_sha256".into(), Value::Null);
        new_file.insert("content".into(), json!(""));
        let c = PendingChange::from_preview_meta("preview_write_file", &mut new_file).unwrap();
        assert_eq!(c.before_sha256, None);
        assert_eq!(c.apply_args()["before_sha256"], Value::Null);
        assert!(PendingChange::from_preview_meta("x", &mut Map::new()).is_none());
    }

    #[test]
    fn messages_say_why() {
        assert!(TokenError::Used.to_string().contains("already used"));
        assert!(TokenError::Expired.to_string().contains("expired"));
        assert!(TokenError::Unknown.to_string().contains("unknown"));
        assert_eq!(TokenError::Used.error_type(), ErrorType::TokenInvalid);
    }
}
