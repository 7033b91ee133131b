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
mod tests;
