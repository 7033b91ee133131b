//! Grant tokens (`grant` in docs/PROTOCOL.md, docs/POLICY.md; other tools call them
//! confirm tokens): a person or script approves in advance, so a non-interactive agent
//! can pass an `ask` it could not answer itself. A token never passes a `deny`, and a
//! token that does not fit a call
//! says why and stays usable.
//!
//! Time is passed in (`now`) so expiry is tested without sleeping.

use crate::registry::Registry;
use std::collections::HashMap;
use std::io::Read;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use toolvisor_protocol::ErrorType;

use crate::config::Action;
use crate::policy::paths::{ScopedPath, Scopes};

/// Longest grant: one year (a token is meant for a task, not for ever).
const MAX_TTL: std::time::Duration = std::time::Duration::from_secs(365 * 24 * 3600);

/// What a `grant` message asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GrantRequest {
    /// Tool names or aliases.
    pub tools: Vec<String>,
    /// Only calls of this trace.
    pub trace_id: Option<String>,
    /// Workspace-relative prefixes (`src`, `shared:/data`); empty means anywhere.
    pub paths: Vec<String>,
    /// How long the token is good for.
    pub ttl: Duration,
    /// Whether it survives its first use.
    pub reusable: bool,
}

/// A token just issued.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Issued {
    /// What a call passes as `confirm_token`; only its fingerprint is kept or logged.
    pub token: String,
    /// When it stops working, on the clock expiry is checked with.
    pub expires: Instant,
    /// The same moment on the wall clock (the `expires_at` the client sees).
    pub expires_at: SystemTime,
}

/// A `grant` request that cannot be honoured.
#[derive(Debug, thiserror::Error)]
pub enum GrantError {
    /// A grant for nothing.
    #[error("invalid grant: `tools` is empty; a grant needs at least one tool")]
    NoTools,
    /// A name that is no tool (nor alias, nor announced tool).
    #[error("invalid grant: unknown tool `{0}` in `tools` (list_tools shows the names)")]
    UnknownTool(String),
    /// A path prefix outside every root: nothing could ever match it.
    #[error("invalid grant: path `{0}` in `paths` is outside the workspace")]
    PathOutside(String),
    /// A token that would expire as it is made.
    #[error("invalid grant: `ttl_ms` must be at least 1")]
    ZeroTtl,
    /// Longer than a year: a standing approval that outlives any review.
    #[error("invalid grant: `ttl_ms` {0} is too large (at most one year, 31536000000)")]
    TtlTooLarge(u128),
    /// No randomness for the token.
    #[error("cannot read /dev/urandom for a token: {0}")]
    Random(#[from] std::io::Error),
}

impl GrantError {
    /// The connection-level error type it is answered with (docs/PROTOCOL.md §8): a request
    /// with an unusable field is a `BadMessage` echoing its id; a server that cannot
    /// make a token has no connection-level type of its own, so it says
    /// `InternalError`.
    pub fn error_type(&self) -> ErrorType {
        match self {
            GrantError::Random(_) => ErrorType::InternalError,
            _ => ErrorType::BadMessage,
        }
    }
}

/// Why a `confirm_token` does not fit a call (`TokenInvalid`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenInvalid {
    /// No grant has this token (never issued, or this server restarted since).
    #[error("the confirm_token is unknown")]
    Unknown,
    /// Past its `ttl_ms`.
    #[error("the confirm_token has expired")]
    Expired,
    /// A single-use token, used already.
    #[error("the confirm_token was already used")]
    Used,
    /// The call's tool is not one the grant names.
    #[error("the confirm_token is for {allowed}, not `{tool}`")]
    WrongTool {
        /// The call's tool.
        tool: String,
        /// The tools the grant names.
        allowed: String,
    },
    /// The grant is for another trace.
    #[error("the confirm_token is for trace `{expected}`, not {got}")]
    WrongTrace {
        /// The grant's trace.
        expected: String,
        /// The call's trace (or that it has none).
        got: String,
    },
    /// A path of the call lies outside the grant's prefixes.
    #[error("`{path}` is outside the confirm_token's paths ({allowed})")]
    PathOutOfScope {
        /// The call's path.
        path: String,
        /// The grant's prefixes.
        allowed: String,
    },
}

/// The call a token is presented with.
#[derive(Clone, Copy, Debug)]
pub struct TokenUse<'a> {
    /// Tool name or alias.
    pub tool: &'a str,
    /// The call's trace, if it has one.
    pub trace_id: Option<&'a str>,
    /// The call's resolved locations (`Decision::locations`; for run_command its cwd).
    pub locations: &'a [String],
}

#[derive(Clone, Debug)]
struct Grant {
    tools: Vec<String>,
    trace_id: Option<String>,
    paths: Vec<ScopedPath>,
    expires: Instant,
    reusable: bool,
    used: bool,
}

/// Every live grant. A plain struct behind one mutex: checks are short and never
/// await while holding it.
#[derive(Debug)]
pub struct Grants {
    /// Swapped by a reload that changes the workspace roots.
    scopes: std::sync::RwLock<Scopes>,
    live: Mutex<HashMap<String, Grant>>,
}

impl Grants {
    /// `scopes` resolves grant paths and call locations the way rules see them.
    pub fn new(scopes: Scopes) -> Grants {
        Grants {
            scopes: std::sync::RwLock::new(scopes),
            live: Mutex::new(HashMap::new()),
        }
    }

    /// The roots as a reload left them (SIGHUP): grant paths and call locations are
    /// resolved against them from now on.
    pub fn set_scopes(&self, scopes: Scopes) {
        *self.scopes.write().unwrap_or_else(|e| e.into_inner()) = scopes;
    }

    fn scopes(&self) -> Scopes {
        self.scopes
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Grant>> {
        // A panic elsewhere while holding the lock leaves the map consistent (every
        // update is a single insert or field write), so a poisoned lock is still usable.
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Issue a token for `req`, valid until `now + ttl`; its tool names (or aliases)
    /// must be in `tools`.
    pub fn issue(
        &self,
        req: &GrantRequest,
        now: Instant,
        tools: &Registry,
    ) -> Result<Issued, GrantError> {
        if req.tools.is_empty() {
            return Err(GrantError::NoTools);
        }
        if req.ttl.is_zero() {
            return Err(GrantError::ZeroTtl);
        }
        // `ttl_ms` is any u64 from the client: an expiry past what the clock can hold
        // must be refused, never panic in the session.
        let too_large = || GrantError::TtlTooLarge(req.ttl.as_millis());
        // And `expires_at` must stay a real RFC 3339 date (a 4-digit year).
        if req.ttl > MAX_TTL {
            return Err(too_large());
        }
        let expires = now.checked_add(req.ttl).ok_or_else(too_large)?;
        let expires_at = SystemTime::now()
            .checked_add(req.ttl)
            .ok_or_else(too_large)?;
        let tools = req
            .tools
            .iter()
            .map(|t| {
                tools
                    .find(t)
                    .map(|e| e.def.name.clone())
                    .ok_or_else(|| GrantError::UnknownTool(t.clone()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let scopes = self.scopes();
        let paths = req
            .paths
            .iter()
            .map(|p| match scopes.resolve(p) {
                ScopedPath::Outside(_) => Err(GrantError::PathOutside(p.clone())),
                inside => Ok(inside),
            })
            .collect::<Result<Vec<_>, _>>()?;
        let token = random_hex(16)?;
        let mut live = self.lock();
        live.retain(|_, g| g.expires > now && (g.reusable || !g.used));
        live.insert(
            token.clone(),
            Grant {
                tools,
                trace_id: req.trace_id.clone(),
                paths,
                expires,
                reusable: req.reusable,
                used: false,
            },
        );
        Ok(Issued {
            token,
            expires,
            expires_at,
        })
    }

    /// Use `token` for a call; a single-use token is spent only when it fits.
    pub fn redeem(
        &self,
        token: &str,
        call: &TokenUse<'_>,
        now: Instant,
    ) -> Result<(), TokenInvalid> {
        let mut live = self.lock();
        let grant = live.get_mut(token).ok_or(TokenInvalid::Unknown)?;
        self.fits(grant, call, now)?;
        grant.used = true;
        Ok(())
    }

    /// Whether `token` fits `call` now, without using it up (a person's grant lets a
    /// call act on another session's background process: `call::terminal`).
    pub fn vouches(&self, token: &str, call: &TokenUse<'_>, now: Instant) -> bool {
        let live = self.lock();
        live.get(token)
            .is_some_and(|g| self.fits(g, call, now).is_ok())
    }

    /// The final action for a call that carries `token`: a deny stays a deny and an
    /// allow stays an allow (the token is left untouched); an ask becomes an allow if
    /// the token fits, else the reason it does not.
    pub fn settle(
        &self,
        action: Action,
        token: &str,
        call: &TokenUse<'_>,
        now: Instant,
    ) -> Result<Action, TokenInvalid> {
        match action {
            Action::Ask => self.redeem(token, call, now).map(|()| Action::Allow),
            other => Ok(other),
        }
    }

    fn fits(&self, g: &Grant, call: &TokenUse<'_>, now: Instant) -> Result<(), TokenInvalid> {
        if now >= g.expires {
            return Err(TokenInvalid::Expired);
        }
        if g.used && !g.reusable {
            return Err(TokenInvalid::Used);
        }
        // `call.tool` is the tool's name, whatever alias the call used.
        if !g.tools.iter().any(|t| t == call.tool) {
            return Err(TokenInvalid::WrongTool {
                tool: call.tool.to_string(),
                allowed: g.tools.join(", "),
            });
        }
        if let Some(expected) = &g.trace_id
            && call.trace_id != Some(expected.as_str())
        {
            return Err(TokenInvalid::WrongTrace {
                expected: expected.clone(),
                got: call
                    .trace_id
                    .map_or("no trace id".to_string(), |t| format!("`{t}`")),
            });
        }
        self.paths_fit(g, call.locations)
    }

    /// Every location must lie under one of the grant's paths (if it has any).
    fn paths_fit(&self, g: &Grant, locations: &[String]) -> Result<(), TokenInvalid> {
        if g.paths.is_empty() {
            return Ok(());
        }
        let scopes = self.scopes();
        for loc in locations {
            let p = scopes.resolve(loc);
            if !g.paths.iter().any(|prefix| p.is_under(prefix)) {
                let allowed: Vec<String> = g.paths.iter().map(ToString::to_string).collect();
                return Err(TokenInvalid::PathOutOfScope {
                    path: loc.clone(),
                    allowed: allowed.join(", "),
                });
            }
        }
        Ok(())
    }
}

/// A grant's id for the audit log: enough to tell grants apart, useless as a token.
pub fn fingerprint(token: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes())
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `n` bytes from the kernel's CSPRNG, as lowercase hex: unguessable tokens and ids.
pub fn random_hex(n: usize) -> std::io::Result<String> {
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(buf.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests;
