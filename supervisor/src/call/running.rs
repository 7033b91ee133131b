//! The calls in flight, for `status.calls`: each call is entered when it is dispatched
//! to its group's workers and leaves when its guard drops (whatever way the call ends),
//! so the list cannot keep a call that is over.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use toolvisor_protocol::Id;
use toolvisor_protocol::message::CallStatus;

struct Entry {
    id: Id,
    session: String,
    tool: String,
    since: Instant,
}

/// Every call running now.
#[derive(Default)]
pub struct Running {
    next: AtomicU64,
    calls: Mutex<HashMap<u64, Entry>>,
}

/// A call on the list; dropping it takes the call off.
#[must_use = "the call leaves the list when this drops"]
pub struct RunningCall<'a> {
    running: &'a Running,
    key: u64,
}

impl Drop for RunningCall<'_> {
    fn drop(&mut self) {
        self.running.lock().remove(&self.key);
    }
}

impl Running {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Entry>> {
        // Each update is one map operation: a poisoned map is still consistent.
        self.calls.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Put call `id` of `session` running `tool` on the list from now on.
    pub fn enter(&self, id: &Id, session: &str, tool: &str) -> RunningCall<'_> {
        let key = self.next.fetch_add(1, Ordering::Relaxed);
        let entry = Entry {
            id: id.clone(),
            session: session.to_owned(),
            tool: tool.to_owned(),
            since: Instant::now(),
        };
        self.lock().insert(key, entry);
        RunningCall { running: self, key }
    }

    /// The calls running at `now`, longest running first.
    pub fn list(&self, now: Instant) -> Vec<CallStatus> {
        let mut calls: Vec<(Instant, CallStatus)> = self
            .lock()
            .values()
            .map(|e| {
                let running_ms = now.saturating_duration_since(e.since).as_millis() as u64;
                let status = CallStatus {
                    id: e.id.clone(),
                    session: e.session.clone(),
                    tool: e.tool.clone(),
                    running_ms,
                };
                (e.since, status)
            })
            .collect();
        calls.sort_by_key(|(since, _)| *since);
        calls.into_iter().map(|(_, c)| c).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn calls_leave_when_their_guard_drops() {
        let r = Running::default();
        let a = r.enter(&"a".into(), "s1", "run_command");
        let b = r.enter(&Id::Int(2), "s2", "grep");
        let later = Instant::now() + Duration::from_millis(1500);
        let list = r.list(later);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].id, "a".into(), "longest running first");
        assert_eq!(list[0].session, "s1");
        assert_eq!(list[0].tool, "run_command");
        assert!(list[0].running_ms >= 1500);
        drop(a);
        let list = r.list(later);
        assert_eq!(list.len(), 1);
        assert_eq!(list[0].id, Id::Int(2));
        drop(b);
        assert!(r.list(later).is_empty());
    }
}
