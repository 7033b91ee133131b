//! Pending confirmations (`confirm_required` / `confirm` in docs/PROTOCOL.md, "Asking"
//! in docs/POLICY.md): each asking call registers here and waits on a oneshot; any
//! connection of the same uid answers by interaction id, and who answered is kept for
//! the audit record.
//!
//! A plain struct behind one mutex, never held across an await: registering,
//! answering and expiring are a few map operations. Time is passed in where it
//! decides something (`register`, `expire`, `pending`), so tests need no sleeps.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use toolvisor_protocol::message::Remember;
use toolvisor_protocol::tools::Risk;

/// What the person is asked about (the fields of `confirm_required`, plus what
/// `remember: session` keys on).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfirmDetails {
    /// The asking session; `remember: session` applies to it alone.
    pub session: String,
    /// The client the asking session named in `hello` (shown to whoever answers).
    pub client: String,
    /// The call's id, as the client sent it.
    pub call_id: String,
    /// Canonical tool name.
    pub tool: String,
    /// One line: what the call will do.
    pub description: String,
    /// The call's risk (or the rule's).
    pub risk: Risk,
    /// The resolved paths it touches.
    pub locations: Vec<String>,
    /// The command, or the diff for an edit.
    pub preview: Option<String>,
    /// The arguments' hash: `remember: session` approves the same tool with the same
    /// arguments only.
    pub args_sha256: String,
}

/// How a pending confirmation ended, as its waiter sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Answer {
    /// A person said yes.
    Approved,
    /// A person said no → `PolicyDenied`.
    Rejected,
    /// Nobody answered in time → `ConfirmationTimeout`.
    TimedOut,
    /// The call was cancelled or its session went away.
    Withdrawn,
}

/// The connection that answered a question: its session and the client it named in
/// `hello`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answerer {
    /// The answering session's id.
    pub session: String,
    /// The client name that session gave in `hello`.
    pub client: String,
}

/// A pending confirmation, for replay to a new `confirmations` subscriber.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// Its id, for `confirm`.
    pub interaction: String,
    /// What is asked.
    pub details: ConfirmDetails,
    /// How long is left to answer.
    pub expires_in: Duration,
}

/// `confirm` named an interaction that is not pending (`UnknownInteraction`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("no pending interaction `{0}`")]
pub struct UnknownInteraction(pub String);

struct Entry {
    seq: u64,
    details: ConfirmDetails,
    deadline: Instant,
    reply: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct State {
    next: u64,
    pending: HashMap<String, Entry>,
    /// Who answered an interaction, until its waiter takes it ([`Confirmations::answered_by`]).
    answerers: HashMap<String, Answerer>,
    /// session → (tool, args_sha256) approved with `remember: session`.
    remembered: HashMap<String, HashSet<(String, String)>>,
}

/// Every pending confirmation, and what each session chose to remember.
pub struct Confirmations {
    /// `policy.confirm_timeout_ms`, for questions asked from now on (SIGHUP changes it).
    timeout_ms: AtomicU64,
    /// Distinguishes this instance's ids from a previous run's, so a stale
    /// `toolvisor approve` cannot answer a new question.
    prefix: String,
    state: Mutex<State>,
}

impl std::fmt::Debug for Confirmations {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confirmations")
            .field("timeout", &self.timeout())
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Confirmations {
    /// `timeout` is `policy.confirm_timeout_ms`.
    pub fn new(timeout: Duration) -> Confirmations {
        let prefix = crate::call::grants::random_hex(4)
            .unwrap_or_else(|_| format!("{:x}", std::process::id()));
        Confirmations {
            timeout_ms: AtomicU64::new(timeout.as_millis() as u64),
            prefix,
            state: Mutex::new(State::default()),
        }
    }

    /// How long a confirmation waits for an answer.
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.timeout_ms.load(Ordering::Relaxed))
    }

    /// A new `policy.confirm_timeout_ms` (a reload): questions asked from now on get
    /// it; pending ones keep the deadline they were shown.
    pub fn set_timeout(&self, timeout: Duration) {
        self.timeout_ms
            .store(timeout.as_millis() as u64, Ordering::Relaxed);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Every update is a single map operation, so a poisoned lock is consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Register a question; the receiver gets exactly one [`Answer`] (or is dropped
    /// if this manager is). The id is unique for the life of the process.
    pub fn register(
        &self,
        details: ConfirmDetails,
        now: Instant,
    ) -> (String, oneshot::Receiver<Answer>) {
        let (reply, rx) = oneshot::channel();
        let mut st = self.lock();
        st.next += 1;
        let seq = st.next;
        let id = format!("ix-{}-{seq}", self.prefix);
        let entry = Entry {
            seq,
            details,
            deadline: now + self.timeout(),
            reply,
        };
        st.pending.insert(id.clone(), entry);
        (id, rx)
    }

    /// A person's answer, given on the connection `by` names (kept for the audit
    /// record: [`Confirmations::answered_by`]). `remember: session` with approval also
    /// approves later calls of the same tool with the same `args_sha256` in the asking
    /// session.
    pub fn answer(
        &self,
        id: &str,
        approve: bool,
        remember: Remember,
        by: &Answerer,
    ) -> Result<(), UnknownInteraction> {
        let mut st = self.lock();
        let entry = st
            .pending
            .remove(id)
            .ok_or_else(|| UnknownInteraction(id.to_string()))?;
        st.answerers.insert(id.to_owned(), by.clone());
        if approve && remember == Remember::Session {
            let d = &entry.details;
            st.remembered
                .entry(d.session.clone())
                .or_default()
                .insert((d.tool.clone(), d.args_sha256.clone()));
        }
        let answer = if approve {
            Answer::Approved
        } else {
            Answer::Rejected
        };
        // The waiter may have gone (cancel raced the answer): then nobody is asking.
        entry.reply.send(answer).map_err(|_| {
            st.answerers.remove(id);
            UnknownInteraction(id.to_string())
        })
    }

    /// Who answered `id` (as given to [`Confirmations::answer`]); taken once, by the
    /// waiter, after its answer came.
    pub fn answered_by(&self, id: &str) -> Option<Answerer> {
        self.lock().answerers.remove(id)
    }

    /// Did this session already approve this exact call for the session?
    pub fn is_remembered(&self, session: &str, tool: &str, args_sha256: &str) -> bool {
        self.lock()
            .remembered
            .get(session)
            .is_some_and(|s| s.contains(&(tool.to_string(), args_sha256.to_string())))
    }

    /// Withdraw one question (its call was cancelled). True if it was pending.
    pub fn withdraw(&self, id: &str) -> bool {
        let entry = self.lock().pending.remove(id);
        entry
            .map(|e| {
                let _ = e.reply.send(Answer::Withdrawn);
            })
            .is_some()
    }

    /// A session disconnected: withdraw its questions and forget what it remembered.
    /// Returns the withdrawn ids (for `confirm_answered` events).
    pub fn end_session(&self, session: &str) -> Vec<String> {
        let mut st = self.lock();
        st.remembered.remove(session);
        let ids: Vec<String> = st
            .pending
            .iter()
            .filter(|(_, e)| e.details.session == session)
            .map(|(id, _)| id.clone())
            .collect();
        for id in &ids {
            if let Some(e) = st.pending.remove(id) {
                let _ = e.reply.send(Answer::Withdrawn);
            }
        }
        ids
    }

    /// Time out every question whose deadline is at or before `now`; their waiters
    /// get [`Answer::TimedOut`]. Returns the ids, oldest first.
    pub fn expire(&self, now: Instant) -> Vec<String> {
        let mut st = self.lock();
        let mut due: Vec<(u64, String)> = st
            .pending
            .iter()
            .filter(|(_, e)| e.deadline <= now)
            .map(|(id, e)| (e.seq, id.clone()))
            .collect();
        due.sort();
        for (_, id) in &due {
            if let Some(e) = st.pending.remove(id) {
                let _ = e.reply.send(Answer::TimedOut);
            }
        }
        due.into_iter().map(|(_, id)| id).collect()
    }

    /// The earliest deadline, for whoever drives [`Confirmations::expire`].
    pub fn next_deadline(&self) -> Option<Instant> {
        self.lock().pending.values().map(|e| e.deadline).min()
    }

    /// Every pending question in the order asked, with its time left at `now`.
    pub fn pending(&self, now: Instant) -> Vec<Pending> {
        let st = self.lock();
        let ordered: BTreeMap<u64, (&String, &Entry)> =
            st.pending.iter().map(|(id, e)| (e.seq, (id, e))).collect();
        ordered
            .into_values()
            .map(|(id, e)| Pending {
                interaction: id.clone(),
                details: e.details.clone(),
                expires_in: e.deadline.saturating_duration_since(now),
            })
            .collect()
    }

    /// Wait for the answer to `id`, up to its deadline. On timeout the question is
    /// removed and the result is [`Answer::TimedOut`] — unless an answer won the
    /// race, which is then returned.
    pub async fn wait(&self, id: &str, mut rx: oneshot::Receiver<Answer>) -> Answer {
        let deadline = self.lock().pending.get(id).map(|e| e.deadline);
        let Some(deadline) = deadline else {
            return rx.await.unwrap_or(Answer::Withdrawn);
        };
        let at = tokio::time::Instant::from_std(deadline);
        match tokio::time::timeout_at(at, &mut rx).await {
            Ok(answer) => answer.unwrap_or(Answer::Withdrawn),
            Err(_) => {
                let removed = self.lock().pending.remove(id).is_some();
                if removed {
                    Answer::TimedOut
                } else {
                    rx.try_recv().unwrap_or(Answer::Withdrawn)
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn details(session: &str, n: usize) -> ConfirmDetails {
        ConfirmDetails {
            session: session.into(),
            client: "agent".into(),
            call_id: format!("c{n}"),
            tool: "run_command".into(),
            description: format!("Run `job {n}` in ."),
            risk: Risk::High,
            locations: vec![".".into()],
            preview: Some(format!("job {n}")),
            args_sha256: format!("{n:064x}"),
        }
    }

    fn manager() -> Confirmations {
        Confirmations::new(Duration::from_secs(60))
    }

    const BY: &Answerer = &Answerer {
        session: String::new(),
        client: String::new(),
    };

    #[test]
    fn ids_are_unique() {
        let m = manager();
        let now = Instant::now();
        let ids: HashSet<String> = (0..1000)
            .map(|n| m.register(details("s", n), now).0)
            .collect();
        assert_eq!(ids.len(), 1000);
        let other = manager();
        let (id, _rx) = other.register(details("s", 0), now);
        assert!(!ids.contains(&id), "another instance's ids differ");
    }

    #[tokio::test]
    async fn answers_reach_their_own_receiver_under_concurrency() {
        let m = std::sync::Arc::new(manager());
        let now = Instant::now();
        let mut waiters = Vec::new();
        let mut ids = Vec::new();
        for n in 0..200 {
            let (id, rx) = m.register(details("s", n), now);
            ids.push((id, n % 3 != 0));
            waiters.push(tokio::spawn(async move { (n, rx.await) }));
        }
        // Answer in a scrambled order from other tasks.
        let mut order: Vec<usize> = (0..ids.len()).collect();
        order.sort_by_key(|i| (i * 7919) % 200);
        let mut answerers = Vec::new();
        for i in order {
            let (id, approve) = ids[i].clone();
            let m = m.clone();
            answerers.push(tokio::spawn(async move {
                m.answer(&id, approve, Remember::Once, BY).unwrap()
            }));
        }
        for a in answerers {
            a.await.unwrap();
        }
        for w in waiters {
            let (n, got) = w.await.unwrap();
            let want = if n % 3 != 0 {
                Answer::Approved
            } else {
                Answer::Rejected
            };
            assert_eq!(got.unwrap(), want, "call {n}");
        }
        assert!(m.pending(now).is_empty());
    }

    #[test]
    fn unknown_or_finished_interactions_are_refused() {
        let m = manager();
        let (id, _rx) = m.register(details("s", 1), Instant::now());
        assert_eq!(m.answer(&id, true, Remember::Once, BY), Ok(()));
        assert_eq!(
            m.answer(&id, true, Remember::Once, BY),
            Err(UnknownInteraction(id.clone()))
        );
        assert!(m.answer("ix-nope-1", false, Remember::Once, BY).is_err());
    }

    #[test]
    fn timeouts_use_the_time_given() {
        let m = manager();
        let t0 = Instant::now();
        let (a, mut rx_a) = m.register(details("s", 1), t0);
        let (b, mut rx_b) = m.register(details("s", 2), t0 + Duration::from_secs(30));
        assert_eq!(m.next_deadline(), Some(t0 + Duration::from_secs(60)));
        assert!(m.expire(t0 + Duration::from_secs(59)).is_empty());
        assert_eq!(m.expire(t0 + Duration::from_secs(60)), vec![a.clone()]);
        assert_eq!(rx_a.try_recv(), Ok(Answer::TimedOut));
        assert!(rx_b.try_recv().is_err(), "b still waits");
        let left = m.pending(t0 + Duration::from_secs(60));
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].interaction, b);
        assert_eq!(left[0].expires_in, Duration::from_secs(30));
        assert!(m.answer(&a, true, Remember::Once, BY).is_err(), "too late");
    }

    #[tokio::test]
    async fn wait_times_out_at_the_deadline() {
        let m = Confirmations::new(Duration::ZERO);
        let (id, rx) = m.register(details("s", 1), Instant::now());
        assert_eq!(m.wait(&id, rx).await, Answer::TimedOut);
        assert!(m.pending(Instant::now()).is_empty());
        let m = manager();
        let (id, rx) = m.register(details("s", 2), Instant::now());
        m.answer(&id, false, Remember::Once, BY).unwrap();
        assert_eq!(m.wait(&id, rx).await, Answer::Rejected);
    }

    #[test]
    fn cancel_and_disconnect_withdraw() {
        let m = manager();
        let now = Instant::now();
        let (a, mut rx_a) = m.register(details("s1", 1), now);
        let (b, mut rx_b) = m.register(details("s2", 2), now);
        let (c, mut rx_c) = m.register(details("s2", 3), now);
        assert!(m.withdraw(&a));
        assert!(!m.withdraw(&a));
        assert_eq!(rx_a.try_recv(), Ok(Answer::Withdrawn));
        let mut gone = m.end_session("s2");
        gone.sort();
        let mut want = vec![b.clone(), c.clone()];
        want.sort();
        assert_eq!(gone, want);
        assert_eq!(rx_b.try_recv(), Ok(Answer::Withdrawn));
        assert_eq!(rx_c.try_recv(), Ok(Answer::Withdrawn));
        assert!(m.pending(now).is_empty());
        assert!(m.answer(&b, true, Remember::Once, BY).is_err());
    }

    #[test]
    fn a_new_timeout_applies_to_questions_asked_after_it() {
        let m = manager();
        let t0 = Instant::now();
        let (old, _rx_old) = m.register(details("s", 1), t0);
        m.set_timeout(Duration::from_secs(5));
        assert_eq!(m.timeout(), Duration::from_secs(5));
        let (new, _rx_new) = m.register(details("s", 2), t0);
        assert_eq!(m.expire(t0 + Duration::from_secs(5)), vec![new]);
        assert_eq!(m.expire(t0 + Duration::from_secs(60)), vec![old]);
    }

    #[test]
    fn who_answered_is_kept_once_for_the_waiter() {
        let m = manager();
        let (id, _rx) = m.register(details("s", 1), Instant::now());
        let by = Answerer {
            session: "s7".into(),
            client: "toolvisor-cli".into(),
        };
        m.answer(&id, true, Remember::Once, &by).unwrap();
        assert_eq!(m.answered_by(&id), Some(by));
        assert_eq!(m.answered_by(&id), None);
        // An answer nobody waits for leaves nothing behind.
        let (id, rx) = m.register(details("s", 2), Instant::now());
        drop(rx);
        assert!(m.answer(&id, true, Remember::Once, BY).is_err());
        assert_eq!(m.answered_by(&id), None);
    }

    #[test]
    fn an_answer_after_the_waiter_left_is_unknown() {
        let m = manager();
        let (id, rx) = m.register(details("s", 1), Instant::now());
        drop(rx);
        assert!(m.answer(&id, true, Remember::Once, BY).is_err());
    }

    #[test]
    fn remember_session_is_per_session_tool_and_args() {
        let m = manager();
        let now = Instant::now();
        let d = details("s1", 7);
        let (id, _rx) = m.register(d.clone(), now);
        m.answer(&id, true, Remember::Session, BY).unwrap();
        assert!(m.is_remembered("s1", "run_command", &d.args_sha256));
        assert!(!m.is_remembered("s2", "run_command", &d.args_sha256));
        assert!(!m.is_remembered("s1", "kill_process", &d.args_sha256));
        assert!(!m.is_remembered("s1", "run_command", &details("s1", 8).args_sha256));
        // A "no" is never remembered, and a session's memory ends with it.
        let (id, _rx) = m.register(details("s1", 9), now);
        m.answer(&id, false, Remember::Session, BY).unwrap();
        assert!(!m.is_remembered("s1", "run_command", &details("s1", 9).args_sha256));
        m.end_session("s1");
        assert!(!m.is_remembered("s1", "run_command", &d.args_sha256));
    }

    #[test]
    fn pending_replays_in_order_asked_with_full_details() {
        let m = manager();
        let now = Instant::now();
        let ids: Vec<String> = (0..5).map(|n| m.register(details("s", n), now).0).collect();
        let p = m.pending(now);
        assert_eq!(
            p.iter().map(|x| x.interaction.clone()).collect::<Vec<_>>(),
            ids
        );
        for (n, x) in p.iter().enumerate() {
            assert_eq!(x.details, details("s", n));
            assert!(!x.details.description.is_empty() && !x.details.locations.is_empty());
        }
    }

    proptest! {
        /// Properties 39/41: any interleaving of answers and withdrawals delivers
        /// each receiver its own outcome and nothing else.
        #[test]
        fn each_receiver_gets_its_own_outcome(ops in prop::collection::vec(0u8..3, 1..40),
                                              perm in any::<u64>()) {
            let m = manager();
            let now = Instant::now();
            let mut regs: Vec<(String, oneshot::Receiver<Answer>, u8)> = ops
                .iter()
                .enumerate()
                .map(|(n, op)| {
                    let (id, rx) = m.register(details("s", n), now);
                    (id, rx, *op)
                })
                .collect();
            let len = regs.len() as u64;
            let mut order: Vec<usize> = (0..regs.len()).collect();
            order.sort_by_key(|i| (*i as u64).wrapping_mul(perm | 1) % len.max(1));
            for i in order {
                let (id, _, op) = &regs[i];
                match op {
                    0 => m.answer(id, true, Remember::Once, BY).unwrap(),
                    1 => m.answer(id, false, Remember::Once, BY).unwrap(),
                    _ => prop_assert!(m.withdraw(id)),
                }
            }
            for (_, rx, op) in regs.iter_mut() {
                let want = [Answer::Approved, Answer::Rejected, Answer::Withdrawn][*op as usize];
                prop_assert_eq!(rx.try_recv(), Ok(want));
            }
            prop_assert!(m.pending(now).is_empty());
        }
    }
}
