//! What every HTTP request passes before rmcp's Streamable HTTP service sees it: the
//! path, the bearer token, the session's owner and the session limit. rmcp itself
//! checks `Host` and `Origin` (403), the body size (413, counted as it streams), the
//! protocol headers, and ends idle sessions.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::header::{HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use hyper::{Method, Request, Response, StatusCode};
use rmcp::transport::streamable_http_server::StreamableHttpService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;

use crate::mcp::http::auth::Tokens;
use crate::mcp::server::ToolvisorMcp;

/// Where MCP is served.
pub const PATH: &str = "/mcp";
/// The header naming a Streamable HTTP session.
const SESSION_HEADER: &str = "mcp-session-id";

/// A response, as rmcp's service makes them.
pub type Reply = Response<BoxBody<Bytes, Infallible>>;

/// The HTTP front of `toolvisor mcp --http`.
pub struct Guard {
    inner: StreamableHttpService<ToolvisorMcp, LocalSessionManager>,
    sessions: Arc<LocalSessionManager>,
    /// Present when clients must present a token.
    tokens: Option<Tokens>,
    /// The client (its token's index; `None` without tokens) that opened each session:
    /// only it may use the session's id.
    owners: Mutex<HashMap<String, Option<usize>>>,
    max_sessions: usize,
}

impl Guard {
    pub fn new(
        inner: StreamableHttpService<ToolvisorMcp, LocalSessionManager>,
        sessions: Arc<LocalSessionManager>,
        tokens: Option<Tokens>,
        max_sessions: usize,
    ) -> Guard {
        Guard {
            inner,
            sessions,
            tokens,
            owners: Mutex::default(),
            max_sessions,
        }
    }

    pub async fn handle(&self, req: Request<Incoming>) -> Reply {
        if req.uri().path() != PATH {
            return plain(StatusCode::NOT_FOUND, "MCP is served at /mcp");
        }
        let client = match &self.tokens {
            None => None,
            Some(t) => match t.client(req.headers()) {
                Some(c) => Some(c),
                None => return unauthorized(),
            },
        };
        let session = session_of(req.headers());
        if let Some(id) = &session
            && !self.owned_by(id, client)
        {
            // Another client's session is none of this one's: as if it did not exist.
            return plain(StatusCode::NOT_FOUND, "Session not found");
        }
        if session.is_none() && req.method() == Method::POST && self.full().await {
            return plain(
                StatusCode::SERVICE_UNAVAILABLE,
                "too many MCP sessions; end one (DELETE) or wait for idle ones to expire",
            );
        }
        let reply = self.inner.handle(req).await;
        if session.is_none()
            && let Some(new) = session_of(reply.headers())
        {
            self.own(new, client).await;
        }
        reply
    }

    fn owned_by(&self, id: &str, client: Option<usize>) -> bool {
        let owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        owners.get(id).is_none_or(|owner| *owner == client)
    }

    async fn full(&self) -> bool {
        self.sessions.sessions.read().await.len() >= self.max_sessions
    }

    /// Record `id`'s owner, forgetting the sessions that ended.
    async fn own(&self, id: String, client: Option<usize>) {
        let live = self.sessions.sessions.read().await;
        let mut owners = self.owners.lock().unwrap_or_else(|p| p.into_inner());
        owners.retain(|k, _| live.contains_key(k.as_str()));
        owners.insert(id, client);
    }
}

fn session_of(headers: &HeaderMap) -> Option<String> {
    headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

pub fn plain(status: StatusCode, text: &'static str) -> Reply {
    let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

fn unauthorized() -> Reply {
    let mut r = plain(
        StatusCode::UNAUTHORIZED,
        "a bearer token is required (Authorization: Bearer <token from --token-file>)",
    );
    r.headers_mut().insert(
        WWW_AUTHENTICATE,
        HeaderValue::from_static("Bearer realm=\"toolvisor\""),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_header_is_read() {
        let mut h = HeaderMap::new();
        assert_eq!(session_of(&h), None);
        h.insert("Mcp-Session-Id", HeaderValue::from_static("abc"));
        assert_eq!(session_of(&h).as_deref(), Some("abc"));
    }

    #[test]
    fn refusals_say_why() {
        let r = unauthorized();
        assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
        assert!(r.headers().contains_key(WWW_AUTHENTICATE));
    }
}
