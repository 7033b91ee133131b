//! A group's wait queue: calls that found every worker busy wait here, served
//! round-robin across sessions (FIFO within one), so one client hammering a group
//! cannot keep another client's call waiting behind all of its own.
//!
//! Each waiter has its own `Notify`; a freed slot wakes only the waiter whose turn it
//! is, not every waiter.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

struct Waiter {
    ticket: u64,
    wake: Arc<Notify>,
}

#[derive(Default)]
struct State {
    next_ticket: u64,
    /// Sessions with waiters, in the order they will be served.
    sessions: VecDeque<(String, VecDeque<Waiter>)>,
    len: usize,
}

/// The calls waiting for a worker of one group, served round-robin by session so one busy
/// session cannot starve the others.
#[derive(Default)]
pub struct FairQueue {
    state: Mutex<State>,
}

/// A place in the queue; leaving it (drop) passes the turn on if it was ours.
pub struct Ticket<'a> {
    queue: &'a FairQueue,
    /// Its number; the turn is given by it.
    pub id: u64,
    /// Woken when it may be this ticket's turn.
    pub wake: Arc<Notify>,
}

impl FairQueue {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Calls waiting.
    pub fn len(&self) -> usize {
        self.lock().len
    }

    /// Whether no call waits (a newcomer may then take a free worker at once).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Join the queue behind `session`'s earlier waiters.
    pub fn join(&self, session: &str) -> Ticket<'_> {
        let mut st = self.lock();
        st.next_ticket += 1;
        let ticket = st.next_ticket;
        let wake = Arc::new(Notify::new());
        let waiter = Waiter {
            ticket,
            wake: wake.clone(),
        };
        match st.sessions.iter_mut().find(|(s, _)| s == session) {
            Some((_, q)) => q.push_back(waiter),
            None => st
                .sessions
                .push_back((session.to_owned(), VecDeque::from([waiter]))),
        }
        st.len += 1;
        Ticket {
            queue: self,
            id: ticket,
            wake,
        }
    }

    /// Whether `ticket` is the one to serve next.
    pub fn is_turn(&self, ticket: u64) -> bool {
        self.lock()
            .sessions
            .front()
            .and_then(|(_, q)| q.front())
            .is_some_and(|w| w.ticket == ticket)
    }

    /// Wake the waiter whose turn it is (a slot was freed, or a worker got ready).
    pub fn wake_turn(&self) {
        if let Some(w) = self.lock().sessions.front().and_then(|(_, q)| q.front()) {
            w.wake.notify_one();
        }
    }

    /// Take `ticket` out. When it was served (not abandoned), its session moves to
    /// the back of the round.
    fn leave(&self, ticket: u64) {
        let mut st = self.lock();
        let Some(si) = st
            .sessions
            .iter()
            .position(|(_, q)| q.iter().any(|w| w.ticket == ticket))
        else {
            return;
        };
        let was_turn = si == 0 && st.sessions[0].1.front().is_some_and(|w| w.ticket == ticket);
        if let Some((name, mut q)) = st.sessions.remove(si) {
            q.retain(|w| w.ticket != ticket);
            st.len -= 1;
            if !q.is_empty() {
                if was_turn {
                    st.sessions.push_back((name, q));
                } else {
                    st.sessions.insert(si, (name, q));
                }
            }
        }
        if was_turn && let Some(w) = st.sessions.front().and_then(|(_, q)| q.front()) {
            // The next in line may find a slot too (several can free at once).
            w.wake.notify_one();
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.queue.leave(self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_take_turns_and_each_is_fifo() {
        let q = FairQueue::default();
        let a1 = q.join("a");
        let a2 = q.join("a");
        let a3 = q.join("a");
        let b1 = q.join("b");
        let mut served = Vec::new();
        let mut tickets = vec![("a1", a1), ("a2", a2), ("a3", a3), ("b1", b1)];
        while !tickets.is_empty() {
            let i = tickets
                .iter()
                .position(|(_, t)| q.is_turn(t.id))
                .expect("someone's turn");
            let (name, t) = tickets.remove(i);
            served.push(name);
            drop(t);
        }
        assert_eq!(served, ["a1", "b1", "a2", "a3"]);
        assert!(q.is_empty());
    }

    #[test]
    fn an_abandoned_turn_passes_on() {
        let q = FairQueue::default();
        let a = q.join("a");
        let b = q.join("b");
        assert!(q.is_turn(a.id));
        drop(a);
        assert!(q.is_turn(b.id));
        assert_eq!(q.len(), 1);
    }

    #[test]
    fn leaving_out_of_turn_keeps_the_order() {
        let q = FairQueue::default();
        let a = q.join("a");
        let b1 = q.join("b");
        let c = q.join("c");
        drop(b1);
        assert!(q.is_turn(a.id));
        drop(a);
        assert!(q.is_turn(c.id));
    }
}
