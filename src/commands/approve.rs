//! `toolvisor approve [--all] [--session] [--count N]`: answer the daemon's questions
//! as agents ask them, pending ones first, one at a time.
//!
//! It says when it is waiting; each question names the client and session that asks
//! and counts down its time; a question answered elsewhere or timed out is withdrawn
//! with what happened, and one still waiting its turn is dropped. When the daemon goes
//! away (a restart, an upgrade) it says so and connects again as soon as a daemon
//! listens, retrying with a backoff for as long as it takes; Ctrl-C ends it.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::client::{Client, ClientError, Sender};
use toolvisor_protocol::message::{ClientMessage, Remember, ServerMessage, Topic};

use crate::commands::CLIENT;
use crate::commands::call::outcome_line;
use crate::term::keys::{Keys, next_line};
use crate::term::question::{Ask, Question};
use crate::term::spinner::FRAME;
use crate::workspace::Resolved;

/// Reconnection backoff: from the first to the longest pause between tries.
const RETRY_FIRST: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(2);

const PROMPT: &str = "[y]es / [n]o / [s]ession (same call again without asking) / [a]ll: ";

/// What the person chose so far.
struct Answers {
    all: bool,
    session: bool,
    count: Option<usize>,
    answered: usize,
}

impl Answers {
    fn done(&self) -> bool {
        self.count.is_some_and(|n| self.answered >= n)
    }
}

/// How one connection ended.
enum End {
    /// `--count` reached, or the end of input: stop.
    Done,
    /// The daemon went away: connect again.
    Lost(ClientError),
}

pub async fn run(
    r: &Resolved,
    all: bool,
    session: bool,
    count: Option<usize>,
) -> Result<i32, ClientError> {
    let mut answers = Answers {
        all,
        session,
        count,
        answered: 0,
    };
    let mut keys = (!all).then(Keys::stdin);
    let mut pause = RETRY_FIRST;
    let mut said_waiting = false;
    while !answers.done() {
        let client = match Client::connect(&r.socket, CLIENT, false).await {
            Ok(c) => c,
            Err(ClientError::Connect { path, source }) => {
                if !said_waiting {
                    eprintln!(
                        "toolvisor: no daemon answers at {path} ({source}); waiting for one (Ctrl-C to stop)…"
                    );
                    said_waiting = true;
                }
                // A retry pause, not a synchronisation: nothing announces a new daemon.
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RETRY_MAX);
                continue;
            }
            Err(e) => return Err(e),
        };
        pause = RETRY_FIRST;
        said_waiting = false;
        eprintln!(
            "toolvisor: connected (session {}); waiting for questions (Ctrl-C to stop)…",
            client.session
        );
        match Approver::new(&mut answers, &mut keys).serve(client).await? {
            End::Done => break,
            End::Lost(why) => {
                eprintln!("toolvisor: the daemon went away ({why}); reconnecting…");
            }
        }
    }
    Ok(0)
}

/// A question from the daemon.
struct Pending {
    interaction: String,
    fields: Map<String, Value>,
    deadline: Instant,
}

impl Pending {
    fn text(&self, k: &str) -> &str {
        self.fields.get(k).and_then(Value::as_str).unwrap_or("")
    }

    /// "agent-x (session s3)".
    fn who(&self) -> String {
        match (self.text("client"), self.text("session")) {
            ("", "") => "an unnamed client".to_owned(),
            (c, "") => c.to_owned(),
            ("", s) => format!("session {s}"),
            (c, s) => format!("{c} (session {s})"),
        }
    }
}

/// One connection's questions: the one on screen and those waiting their turn.
struct Approver<'a> {
    answers: &'a mut Answers,
    keys: &'a mut Option<Keys>,
    queue: VecDeque<Pending>,
    current: Option<(Pending, Question)>,
}

impl<'a> Approver<'a> {
    fn new(answers: &'a mut Answers, keys: &'a mut Option<Keys>) -> Approver<'a> {
        Approver {
            answers,
            keys,
            queue: VecDeque::new(),
            current: None,
        }
    }

    async fn serve(mut self, client: Client) -> Result<End, ClientError> {
        let (mut tx, mut rx) = client.split();
        let sub = ClientMessage::Subscribe {
            id: "approve".into(),
            topics: vec![Topic::Confirmations],
        };
        if let Err(e) = tx.send(&sub).await {
            return Ok(End::Lost(e));
        }
        let mut tick = tokio::time::interval(FRAME);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        let end = loop {
            let asking = self.current.is_some();
            let step = tokio::select! {
                m = rx.recv() => self.on_message(&mut tx, m).await,
                line = next_line(self.keys), if asking => self.on_line(&mut tx, line).await,
                _ = tick.tick() => Ok(self.on_tick(Instant::now())),
            };
            match step {
                Ok(None) => {}
                Ok(Some(end)) => break end,
                Err(e) => break End::Lost(e),
            }
            if self.answers.done() {
                break End::Done;
            }
            self.next_question();
        };
        if let (End::Lost(_), Some((_, q))) = (&end, self.current.as_mut()) {
            q.withdraw("→ the daemon went away; its questions went with it");
        }
        Ok(end)
    }

    async fn on_message(
        &mut self,
        tx: &mut Sender,
        m: Option<Result<ServerMessage, ClientError>>,
    ) -> Result<Option<End>, ClientError> {
        let m = m.unwrap_or(Err(ClientError::Closed))?;
        match m {
            ServerMessage::Event { event, fields, .. } if event == "confirm_required" => {
                self.on_question(tx, fields).await?;
            }
            ServerMessage::Event { event, fields, .. } if event == "confirm_answered" => {
                self.on_settled(&fields);
            }
            ServerMessage::Error { id: None, error }
                if error.kind == ErrorType::UnknownInteraction =>
            {
                eprintln!("toolvisor: too late: that question was already settled");
            }
            ServerMessage::Error { error, .. } => return Err(ClientError::Refused(error)),
            _ => {}
        }
        Ok(None)
    }

    async fn on_question(
        &mut self,
        tx: &mut Sender,
        fields: Map<String, Value>,
    ) -> Result<(), ClientError> {
        let Some(interaction) = fields.get("interaction").and_then(Value::as_str) else {
            return Ok(());
        };
        let known = self
            .queue
            .iter()
            .chain(self.current.as_ref().map(|(p, _)| p));
        if known.into_iter().any(|p| p.interaction == interaction) {
            return Ok(());
        }
        let expires = fields
            .get("expires_in_ms")
            .and_then(Value::as_u64)
            .unwrap_or(0);
        let p = Pending {
            interaction: interaction.to_owned(),
            deadline: Instant::now() + Duration::from_millis(expires),
            fields,
        };
        if self.answers.all {
            let q = show(&p, "");
            return self
                .answer(tx, p, q, true, self.answers.session, "→ approved (--all)")
                .await;
        }
        self.queue.push_back(p);
        Ok(())
    }

    /// A question was settled (here, elsewhere, or by its timeout).
    fn on_settled(&mut self, fields: &Map<String, Value>) {
        let Some(ix) = fields.get("interaction").and_then(Value::as_str) else {
            return;
        };
        self.queue.retain(|p| p.interaction != ix);
        if self
            .current
            .as_ref()
            .is_some_and(|(p, _)| p.interaction == ix)
            && let Some((_, mut q)) = self.current.take()
        {
            q.withdraw(&outcome_line(fields));
            self.discard_typed();
        }
    }

    async fn on_line(
        &mut self,
        tx: &mut Sender,
        line: Option<String>,
    ) -> Result<Option<End>, ClientError> {
        let Some(line) = line else {
            return Ok(Some(End::Done));
        };
        let Some((p, mut q)) = self.current.take() else {
            return Ok(None);
        };
        let (yes, remember) = match line.to_lowercase().as_str() {
            "y" | "yes" => (true, self.answers.session),
            "s" | "session" => (true, true),
            "a" | "all" => {
                self.answers.all = true;
                (true, self.answers.session)
            }
            "n" | "no" => (false, false),
            _ => {
                // Not an answer: ask again rather than guess.
                crate::term::err(PROMPT);
                self.current = Some((p, q));
                return Ok(None);
            }
        };
        q.answered();
        self.answer(tx, p, q, yes, remember, "").await?;
        Ok(None)
    }

    async fn answer(
        &mut self,
        tx: &mut Sender,
        p: Pending,
        mut q: Question,
        approve: bool,
        remember: bool,
        note: &str,
    ) -> Result<(), ClientError> {
        if !note.is_empty() {
            q.withdraw(note);
        }
        let confirm = ClientMessage::Confirm {
            interaction: p.interaction,
            approve,
            remember: Some(if remember {
                Remember::Session
            } else {
                Remember::Once
            }),
        };
        tx.send(&confirm).await?;
        self.answers.answered += 1;
        Ok(())
    }

    fn on_tick(&mut self, now: Instant) -> Option<End> {
        self.queue.retain(|p| p.deadline > now);
        if let Some((_, q)) = self.current.as_mut() {
            q.tick(now);
            if q.expired(now) {
                q.withdraw("→ nobody answered in time: the call is denied");
                self.current = None;
                self.discard_typed();
            }
        }
        None
    }

    /// Show the next waiting question when none is on screen.
    fn next_question(&mut self) {
        if self.current.is_some() {
            return;
        }
        let Some(p) = self.queue.pop_front() else {
            return;
        };
        self.discard_typed();
        let more = self.queue.len();
        let prompt = if more > 0 {
            format!("({more} more waiting) {PROMPT}")
        } else {
            PROMPT.to_owned()
        };
        let q = show(&p, &prompt);
        self.current = Some((p, q));
    }

    fn discard_typed(&mut self) {
        if let Some(k) = self.keys.as_mut() {
            k.discard_typed();
        }
    }
}

/// Put `p` on screen with `prompt`.
fn show(p: &Pending, prompt: &str) -> Question {
    let locations: Vec<String> = p
        .fields
        .get("locations")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let ask = Ask {
        tool: p.text("tool"),
        risk: p.text("risk"),
        description: p.text("description"),
        locations: &locations,
        preview: p.fields.get("preview").and_then(Value::as_str),
    };
    Question::show(
        &ask,
        &p.who(),
        p.deadline,
        prompt,
        crate::term::stderr_is_tty(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_question_names_who_asks() {
        let p = |v: Value| Pending {
            interaction: "ix".into(),
            fields: v.as_object().unwrap().clone(),
            deadline: Instant::now(),
        };
        assert_eq!(
            p(json!({"client": "agent", "session": "s3"})).who(),
            "agent (session s3)"
        );
        assert_eq!(p(json!({"session": "s3"})).who(), "session s3");
        assert_eq!(p(json!({})).who(), "an unnamed client");
    }
}
