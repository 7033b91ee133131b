//! Confirmations for 2026-07-28 clients, which forbid requests from the server: the
//! `tools/call` answers `input_required` with the question (an elicitation request)
//! and an opaque `requestState`; the client asks the person and sends the same call
//! again with the answer. Meanwhile the daemon's call waits, parked here under that
//! state: a random handle, valid for this MCP session, for this very call (same tool,
//! same arguments), once, and only until the confirmation expires.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{ElicitResult, InputRequest, InputRequiredResult, InputResponses};
use serde_json::Value;
use toolvisor_protocol::message::ClientMessage;

use crate::mcp::bridge::Route;
use crate::mcp::confirm::{self, Ask};

/// The key of the question in `inputRequests` / `inputResponses`.
const KEY: &str = "confirm";
/// A parked call outlives its confirmation's expiry by this much.
const SLACK: Duration = Duration::from_secs(5);

/// A call waiting for its client's second round.
pub struct Parked {
    pub route: Route,
    pub ask: Ask,
    tool: String,
    args: Value,
    until: Instant,
}

/// The parked calls of this MCP session, by handle.
#[derive(Default)]
pub struct Rounds {
    parked: Mutex<HashMap<String, Parked>>,
}

impl Rounds {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parked>> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Park a call at its confirmation; the `input_required` answer to send. `None` when
    /// no handle can be made (the call then waits for `toolvisor approve` as it is).
    pub fn park(
        self: &Arc<Self>,
        route: Route,
        ask: Ask,
        tool: &str,
        args: &Value,
    ) -> Option<InputRequiredResult> {
        let request = confirm::request(&ask)?;
        let handle = handle()?;
        let until = Instant::now() + ask.expires_in + SLACK;
        self.lock().insert(
            handle.clone(),
            Parked {
                route,
                until,
                ask,
                tool: tool.to_owned(),
                args: args.clone(),
            },
        );
        // A second round that never comes: the call is let go at its expiry (its
        // confirmation is gone on the daemon's side too), and with it the route and
        // the daemon connection it holds.
        let rounds = Arc::downgrade(self);
        let expiring = handle.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(until.into()).await;
            if let Some(r) = rounds.upgrade() {
                r.lock().remove(&expiring);
            }
        });
        let requests = BTreeMap::from([(KEY.to_owned(), InputRequest::Elicitation(request))]);
        Some(InputRequiredResult::new(Some(requests), Some(handle)))
    }

    /// Take back the call a second round names, if it is this call's and still waits.
    pub fn take(&self, state: &str, tool: &str, args: &Value) -> Result<Parked, String> {
        let mut parked = self.lock();
        let fits = parked
            .get(state)
            .is_some_and(|p| p.tool == tool && &p.args == args && p.until > Instant::now());
        if !fits {
            return Err(
                "this requestState names no call waiting for an answer here (unknown, used, \
                 expired, or another call's); call the tool again"
                    .into(),
            );
        }
        parked
            .remove(state)
            .ok_or_else(|| "already answered".into())
    }
}

/// The `confirm` the second round's answer makes; no usable answer is a no.
pub fn confirm(ask: &Ask, responses: Option<&InputResponses>) -> ClientMessage {
    let answer = responses
        .and_then(|r| r.get(KEY))
        .and_then(|v| serde_json::from_value::<ElicitResult>(v.clone()).ok())
        .unwrap_or_else(|| ElicitResult::new(rmcp::model::ElicitationAction::Decline));
    confirm::confirm_of(ask, &answer)
}

/// 16 random bytes as hex.
pub(crate) fn handle() -> Option<String> {
    let mut bytes = [0u8; 16];
    // SAFETY: getrandom writes at most `len` bytes into the buffer we own.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    (n == bytes.len() as isize).then(|| bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolvisor_protocol::message::Remember;

    fn ask() -> Ask {
        Ask {
            interaction: "i1".into(),
            tool: "write_file".into(),
            description: "Create `a`".into(),
            risk: "medium".into(),
            preview: None,
            expires_in: Duration::from_secs(60),
        }
    }

    #[test]
    fn answers_become_confirms() {
        let yes: InputResponses = BTreeMap::from([(
            KEY.to_owned(),
            json!({"action": "accept", "content": {"approve": true, "remember": "session"}}),
        )]);
        assert_eq!(
            confirm(&ask(), Some(&yes)),
            ClientMessage::Confirm {
                interaction: "i1".into(),
                approve: true,
                remember: Some(Remember::Session)
            }
        );
        let decline: InputResponses =
            BTreeMap::from([(KEY.to_owned(), json!({"action": "decline"}))]);
        for r in [Some(&decline), None] {
            assert!(matches!(
                confirm(&ask(), r),
                ClientMessage::Confirm { approve: false, .. }
            ));
        }
    }

    #[test]
    fn handles_are_random() {
        let (a, b) = (handle().unwrap(), handle().unwrap());
        assert_eq!(a.len(), 32);
        assert_ne!(a, b);
    }
}
