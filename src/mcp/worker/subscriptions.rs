//! Resource subscriptions (`resources/subscribe`, `resources/unsubscribe` through the
//! request tool, [`super::requests`]), kept per session: the server is subscribed to a
//! URI while any session is, so one client's `unsubscribe` never ends another's
//! subscription, and a session can only end its own. The server's
//! `notifications/resources/updated` for a subscribed URI go to the supervisor as
//! `resource_updated` frames (at most [`PER_SECOND`] a second), which it publishes as
//! events (topic `workers`); `toolvisor mcp` passes them on to its client when that
//! client subscribed to the URI.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{SubscribeRequestParams, UnsubscribeRequestParams};
use rmcp::{Peer, RoleClient};
use tokio::sync::mpsc;
use toolvisor_protocol::worker::FromWorker;
use toolvisor_workers::context::Outgoing;

use super::lock;

/// Most (URI, session) subscriptions a worker keeps; more are refused.
const MAX: usize = 1024;
/// Most subscriptions of one session: one session cannot take every one of [`MAX`].
const PER_SESSION: usize = 64;
/// Most update notifications passed on in a second; the rest are dropped.
const PER_SECOND: u32 = 50;

/// The sessions subscribed to each URI.
#[derive(Clone, Default)]
pub struct Subscriptions(Arc<Mutex<HashMap<String, HashSet<String>>>>);

impl Subscriptions {
    /// Subscribe `session` to `uri` (the server too, when it is the first).
    pub async fn subscribe(
        &self,
        peer: &Peer<RoleClient>,
        session: &str,
        uri: &str,
    ) -> Result<(), String> {
        let first = {
            let mut map = lock(&self.0);
            if map.get(uri).is_some_and(|s| s.contains(session)) {
                return Ok(());
            }
            room(&map, session)?;
            let sessions = map.entry(uri.to_owned()).or_default();
            let first = sessions.is_empty();
            sessions.insert(session.to_owned());
            first
        };
        if !first {
            return Ok(());
        }
        #[allow(deprecated)] // resources/subscribe: the protocol before 2026-07-28.
        let done = peer.subscribe(SubscribeRequestParams::new(uri)).await;
        done.map_err(|e| {
            self.forget(session, uri);
            e.to_string()
        })
    }

    /// End `session`'s subscription to `uri` (the server's too, when it was the last).
    pub async fn unsubscribe(
        &self,
        peer: &Peer<RoleClient>,
        session: &str,
        uri: &str,
    ) -> Result<(), String> {
        let had = lock(&self.0).get(uri).is_some_and(|s| s.contains(session));
        if !had {
            return Err(format!("this session is not subscribed to `{uri}` here"));
        }
        if !self.forget(session, uri) {
            return Ok(());
        }
        #[allow(deprecated)] // resources/unsubscribe: the protocol before 2026-07-28.
        let done = peer.unsubscribe(UnsubscribeRequestParams::new(uri)).await;
        done.map_err(|e| e.to_string())
    }

    /// `session` ended: take it off every URI, and end the server's subscription to
    /// those it was the last on.
    pub async fn drop_session(&self, peer: &Peer<RoleClient>, session: &str) {
        let uris: Vec<String> = lock(&self.0)
            .iter()
            .filter(|(_, s)| s.contains(session))
            .map(|(u, _)| u.clone())
            .collect();
        for uri in uris {
            if self.forget(session, &uri) {
                #[allow(deprecated)] // resources/unsubscribe: the protocol before 2026-07-28.
                let done = peer.unsubscribe(UnsubscribeRequestParams::new(uri)).await;
                if let Err(e) = done {
                    tracing::warn!("resources/unsubscribe after a session ended: {e}");
                }
            }
        }
    }

    /// Take `session` off `uri`; true when no session is left on it.
    fn forget(&self, session: &str, uri: &str) -> bool {
        let mut map = lock(&self.0);
        let Some(sessions) = map.get_mut(uri) else {
            return false;
        };
        sessions.remove(session);
        let last = sessions.is_empty();
        if last {
            map.remove(uri);
        }
        last
    }

    fn is_subscribed(&self, uri: &str) -> bool {
        lock(&self.0).contains_key(uri)
    }
}

/// Whether `session` may subscribe once more: under [`MAX`] on the server and
/// [`PER_SESSION`] of its own.
fn room(map: &HashMap<String, HashSet<String>>, session: &str) -> Result<(), String> {
    if map.values().map(HashSet::len).sum::<usize>() >= MAX {
        return Err(format!("more than {MAX} subscriptions on this server"));
    }
    let own = map.values().filter(|s| s.contains(session)).count();
    if own >= PER_SESSION {
        return Err(format!(
            "this session has {PER_SESSION} subscriptions on this server, the most it may"
        ));
    }
    Ok(())
}

/// Pass each update of a subscribed URI on until the server's session ends.
pub async fn route(mut rx: mpsc::Receiver<String>, subs: Subscriptions, tx: Outgoing) {
    let mut window = (Instant::now(), 0u32);
    while let Some(uri) = rx.recv().await {
        if !subs.is_subscribed(&uri) {
            continue;
        }
        if window.0.elapsed() >= Duration::from_secs(1) {
            window = (Instant::now(), 0);
        }
        if window.1 >= PER_SECOND {
            continue;
        }
        window.1 += 1;
        tx.send_now(&FromWorker::ResourceUpdated { uri });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_session_to_leave_ends_the_subscription() {
        let subs = Subscriptions::default();
        for s in ["s1", "s2"] {
            lock(&subs.0)
                .entry("test://a".into())
                .or_default()
                .insert(s.into());
        }
        assert!(!subs.forget("s1", "test://a"));
        assert!(subs.is_subscribed("test://a"));
        assert!(subs.forget("s2", "test://a"));
        assert!(!subs.is_subscribed("test://a"));
        assert!(!subs.forget("s2", "test://a"));
    }
}
