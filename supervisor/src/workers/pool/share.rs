//! Each session's share of a group's slots: one session may hold at most all but a
//! quarter of them (at least one), so another session's call always finds room soon,
//! even when the first fills the group with calls that wait for their deadline (64
//! commands blocked on input kept every other session's `run_command` waiting 18 s).
//! A session at its share waits outside the fair queue, so it never holds the turn
//! that other sessions need.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

/// The calls each session runs in one group now.
#[derive(Default)]
pub struct Shares {
    running: Mutex<HashMap<String, usize>>,
    /// Woken whenever a session's call ends.
    freed: Notify,
}

/// A slot held by a session's call; it is given back when dropped.
pub struct Held {
    shares: Arc<Shares>,
    session: String,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut running = self.shares.lock();
        if let Some(n) = running.get_mut(&self.session) {
            *n -= 1;
            if *n == 0 {
                running.remove(&self.session);
            }
        }
        drop(running);
        self.shares.freed.notify_waiters();
    }
}

pub use toolvisor_protocol::worker::session_share as share;

impl Shares {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `session` may take one more of `slots`.
    pub fn has_room(&self, session: &str, slots: usize) -> bool {
        self.lock().get(session).copied().unwrap_or(0) < share(slots)
    }

    /// Count a call of `session` until the returned guard is dropped.
    pub fn hold(self: &Arc<Self>, session: &str) -> Held {
        *self.lock().entry(session.to_owned()).or_insert(0) += 1;
        Held {
            shares: Arc::clone(self),
            session: session.to_owned(),
        }
    }

    /// Resolves after some session's call ended (create it before checking
    /// [`Shares::has_room`], so no end is missed).
    pub fn freed(&self) -> tokio::sync::futures::Notified<'_> {
        self.freed.notified()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_quarter_stays_for_others() {
        assert_eq!(share(64), 48);
        assert_eq!(share(32), 24);
        assert_eq!(share(4), 3);
        assert_eq!(share(2), 1);
        assert_eq!(share(1), 1);
    }

    #[test]
    fn holding_and_giving_back() {
        let s = Arc::new(Shares::default());
        let a = s.hold("a");
        let b = s.hold("a");
        let _c = s.hold("a");
        assert!(!s.has_room("a", 4));
        assert!(s.has_room("b", 4));
        drop(a);
        assert!(s.has_room("a", 4));
        drop(b);
        assert_eq!(s.lock().get("a"), Some(&1));
    }
}
