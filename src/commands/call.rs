//! `toolvisor call TOOL [ARGS|-]`: one call, its output live, its result.
//!
//! With a terminal on stdin the session is interactive: a confirmation shows what the
//! call would do, who asks and the time left, and waits for the keyboard and the
//! socket at once. The connection also subscribes to `confirmations`, so when another
//! connection answers (`toolvisor approve`) or the question times out, the prompt is
//! withdrawn and the outcome printed — a question already decided is never left on
//! screen. While the call runs without output, a spinner on stderr shows the elapsed
//! time. Output goes to stdout; errors, notes and prompts to stderr.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use serde_json::Value;
use toolvisor_protocol::client::{Client, ClientError, Incoming, Sender};
use toolvisor_protocol::message::{
    CallRequest, ClientMessage, ServerMessage, Status, ToolResult, Topic,
};
use toolvisor_protocol::{ErrorType, Id};

use crate::commands::{CLIENT, parse_args};
use crate::term::keys::{Keys, next_line};
use crate::term::question::{Ask, Question};
use crate::term::spinner::{FRAME, Spinner};
use crate::workspace::Resolved;

/// What `toolvisor call` was asked.
pub struct Options {
    pub tool: String,
    pub args: Option<String>,
    pub json: bool,
    pub timeout_ms: Option<u64>,
    pub trace: Option<String>,
    pub token: Option<String>,
}

const CALL_ID: &str = "cli-1";
const SUBSCRIPTION: &str = "cli-answers";

pub async fn run(r: &Resolved, o: Options) -> Result<i32, ClientError> {
    let args = match parse_args(o.args.as_deref()) {
        Ok(a) => a,
        Err(e) => {
            eprintln!("toolvisor: {e}");
            return Ok(2);
        }
    };
    let interactive = std::io::stdin().is_terminal();
    let client = Client::connect(&r.socket, CLIENT, interactive).await?;
    let session = client.session.clone();
    let (mut tx, rx) = client.split();
    if interactive {
        let sub = ClientMessage::Subscribe {
            id: SUBSCRIPTION.into(),
            topics: vec![Topic::Confirmations],
        };
        tx.send(&sub).await?;
    }
    let mut req = CallRequest::new(CALL_ID, o.tool.clone(), args);
    req.timeout_ms = o.timeout_ms;
    req.trace_id = o.trace.clone();
    req.confirm_token = o.token.clone();
    req.stream = Some(!o.json);
    tx.send(&ClientMessage::Call(req)).await?;
    let mut view = CallView::new(&o.tool, &session, interactive);
    let (result, streamed) = view.follow(&mut tx, rx).await?;
    drop(view);
    let code = print_result(&result, o.json, streamed);
    if !o.json && o.tool == toolvisor_protocol::tools::run_command::NAME {
        say_process(&result);
    }
    Ok(code)
}

/// A question on screen and the interaction it belongs to.
struct Asking {
    interaction: String,
    question: Question,
}

/// What the terminal shows while the call runs.
struct CallView {
    id: Id,
    session: String,
    keys: Option<Keys>,
    spinner: Spinner,
    asking: Option<Asking>,
    stdout_tty: bool,
    /// Whether the last byte of output ended a line (the spinner may draw then).
    at_line_start: bool,
    streamed: bool,
}

impl CallView {
    fn new(tool: &str, session: &str, interactive: bool) -> CallView {
        CallView {
            id: CALL_ID.into(),
            session: session.to_owned(),
            keys: interactive.then(Keys::stdin),
            spinner: Spinner::new(tool, crate::term::stderr_is_tty()),
            asking: None,
            stdout_tty: std::io::stdout().is_terminal(),
            at_line_start: true,
            streamed: false,
        }
    }

    /// Read the call's messages, the keyboard and the clock until the result comes.
    async fn follow(
        &mut self,
        tx: &mut Sender,
        mut rx: Incoming,
    ) -> Result<(ToolResult, Streamed), ClientError> {
        let mut tick = tokio::time::interval(FRAME);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let asking = self.asking.is_some();
            tokio::select! {
                m = rx.recv() => {
                    let m = m.unwrap_or(Err(ClientError::Closed))?;
                    if let Some(result) = self.on_message(m)? {
                        let streamed = self.streamed.then_some(self.at_line_start);
                        return Ok((result, streamed));
                    }
                }
                line = next_line(&mut self.keys), if asking => self.on_answer(tx, line).await?,
                _ = tick.tick() => self.on_tick(Instant::now()),
            }
        }
    }

    /// One message from the server; the result ends the call.
    fn on_message(&mut self, m: ServerMessage) -> Result<Option<ToolResult>, ClientError> {
        match m {
            ServerMessage::Output { id, data, .. } if id == self.id => {
                self.settled_elsewhere("→ approved elsewhere; running");
                self.spinner.interrupt();
                self.streamed = true;
                self.at_line_start =
                    data.ends_with('\n') || (data.is_empty() && self.at_line_start);
                print!("{}", for_stdout(&data, self.stdout_tty));
                let _ = std::io::stdout().flush();
            }
            ServerMessage::ConfirmRequired {
                id,
                interaction,
                tool,
                description,
                risk,
                locations,
                preview,
                expires_in_ms,
            } if id == self.id => {
                self.spinner.clear();
                if let Some(k) = self.keys.as_mut() {
                    k.discard_typed();
                }
                let ask = Ask {
                    tool: &tool,
                    risk: &risk,
                    description: &description,
                    locations: &locations,
                    preview: preview.as_deref(),
                };
                let who = format!("this command ({CLIENT}, session {})", self.session);
                let deadline = Instant::now() + Duration::from_millis(expires_in_ms);
                let tty = crate::term::stderr_is_tty();
                let question = Question::show(&ask, &who, deadline, "Allow this call? [y/N] ", tty);
                self.asking = Some(Asking {
                    interaction,
                    question,
                });
            }
            ServerMessage::Event { event, fields, .. } if event == "confirm_answered" => {
                let ours = self.asking.as_ref().is_some_and(|a| {
                    fields.get("interaction").and_then(Value::as_str) == Some(&a.interaction)
                });
                if ours {
                    self.settled_elsewhere(&outcome_line(&fields));
                }
            }
            ServerMessage::Result(r) if r.id == self.id => {
                self.settled_elsewhere(&ended_line(&r));
                self.spinner.clear();
                return Ok(Some(r));
            }
            // Our own answer came after another connection's (or after the timeout):
            // the `confirm_answered` event says what was decided.
            ServerMessage::Error { id: None, error }
                if error.kind == ErrorType::UnknownInteraction =>
            {
                eprintln!("toolvisor: your answer came too late: the question was already settled");
            }
            ServerMessage::Error {
                id: Some(id),
                error,
            } if id == self.id => {
                return Err(ClientError::Refused(error));
            }
            _ => {}
        }
        Ok(None)
    }

    /// The question on screen was settled without this keyboard: withdraw it.
    fn settled_elsewhere(&mut self, outcome: &str) {
        if let Some(mut a) = self.asking.take() {
            a.question.withdraw(outcome);
            if let Some(k) = self.keys.as_mut() {
                k.discard_typed();
            }
        }
    }

    /// A line typed at the prompt (`None`: end of input, which says no).
    async fn on_answer(
        &mut self,
        tx: &mut Sender,
        line: Option<String>,
    ) -> Result<(), ClientError> {
        let Some(mut a) = self.asking.take() else {
            return Ok(());
        };
        a.question.answered();
        let approve = line.is_some_and(|l| {
            let l = l.to_lowercase();
            l == "y" || l == "yes"
        });
        let confirm = ClientMessage::Confirm {
            interaction: a.interaction,
            approve,
            remember: None,
        };
        tx.send(&confirm).await
    }

    fn on_tick(&mut self, now: Instant) {
        if let Some(a) = self.asking.as_mut() {
            a.question.tick(now);
            if a.question.expired(now) {
                self.settled_elsewhere("→ nobody answered in time: the call is denied");
            }
            return;
        }
        let may_draw = self.at_line_start || !self.stdout_tty;
        self.spinner.tick(now, may_draw);
    }
}

/// "→ approved by toolvisor-cli (session s5)" from a `confirm_answered` event.
pub fn outcome_line(fields: &serde_json::Map<String, Value>) -> String {
    let text = |k: &str| {
        let raw = fields.get(k).and_then(Value::as_str).unwrap_or("");
        crate::term::sanitize(raw, false)
    };
    let who = match (text("by").as_str(), text("by_client").as_str()) {
        ("", _) => "another connection".to_owned(),
        (s, "") => format!("session {s}"),
        (s, c) => format!("{c} (session {s})"),
    };
    match text("answer").as_str() {
        "approved" => format!("→ approved by {who}"),
        "denied" => format!("→ denied by {who}"),
        "timeout" => "→ nobody answered in time: the call is denied".to_owned(),
        "withdrawn" => "→ withdrawn: the call was cancelled".to_owned(),
        other => format!("→ settled elsewhere ({other})"),
    }
}

/// What to say when the result comes while the question is still on screen (the
/// `confirm_answered` event can arrive after it): what the result says happened.
pub(crate) fn ended_line(r: &ToolResult) -> String {
    match r.error.as_ref().map(|e| e.kind) {
        None => "→ approved elsewhere".to_owned(),
        Some(ErrorType::ConfirmationTimeout) => {
            "→ nobody answered in time: the call is denied".to_owned()
        }
        Some(ErrorType::PolicyDenied) => "→ denied elsewhere".to_owned(),
        Some(ErrorType::Cancelled) => "→ withdrawn: the call was cancelled".to_owned(),
        Some(kind) => format!("→ the call ended: {} ({kind})", r.status.as_str()),
    }
}

/// Print the result; returns the exit code (0 for `ok`).
/// What a tool returned, as stdout shows it: as it is in a pipe; on a terminal with its
/// control characters shown instead of obeyed, since a fetched page, a file or a
/// command's output could otherwise set the window title, clear the screen or write
/// the clipboard (OSC 52). Line ends (`\n`, `\r\n`) and tabs stay.
fn for_stdout(text: &str, tty: bool) -> std::borrow::Cow<'_, str> {
    if !tty {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(crate::term::sanitize(&text.replace("\r\n", "\n"), true))
}

/// Whether output was streamed while the call ran, and if so whether it ended at the
/// start of a line.
type Streamed = Option<bool>;

fn print_result(result: &ToolResult, json: bool, streamed: Streamed) -> i32 {
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(result).unwrap_or_default()
        );
        return i32::from(result.status != Status::Ok);
    }
    // A failure's own text ("Error: …") is said once, on stderr, below; anything
    // else in `content` is output (a failed command's, say) and belongs on stdout.
    let error_text = result.status != Status::Ok && result.content.starts_with("Error: ");
    if (streamed.is_none() || result.truncated.is_some()) && !error_text {
        print!(
            "{}",
            for_stdout(&result.content, std::io::stdout().is_terminal())
        );
        if !result.content.ends_with('\n') && !result.content.is_empty() {
            println!();
        }
    } else if streamed == Some(false) {
        // Streamed output without a final newline: the error line starts its own.
        println!();
    }
    let _ = std::io::stdout().flush();
    if result.status == Status::Ok {
        return 0;
    }
    if let Some(e) = &result.error {
        let message = match crate::term::stderr_is_tty() {
            true => crate::term::sanitize(&e.message, true),
            false => e.message.clone(),
        };
        eprintln!(
            "toolvisor: {} ({}): {message}",
            result.status.as_str(),
            e.kind,
        );
    }
    1
}

/// The handle of a background process `run_command` started, when what was printed
/// does not name it (a start with `ready` prints the output so far): later calls need
/// it.
fn say_process(result: &ToolResult) {
    let Some(handle) = result.meta.get("process").and_then(Value::as_str) else {
        return;
    };
    if result.meta.get("running") == Some(&Value::Bool(true)) && !result.content.contains(handle) {
        eprintln!(
            "toolvisor: background process {} is running (read_output, write_input and kill_process take it as \"process\")",
            crate::term::sanitize(handle, false)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> serde_json::Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn a_terminal_sees_escapes_a_pipe_gets_the_bytes() {
        let evil = "a\x1b]52;c;ZXZpbA==\x07b\x1b[2J\r\nc\td\re";
        assert_eq!(for_stdout(evil, false), evil);
        let shown = for_stdout(evil, true);
        assert!(
            !shown.contains('\x1b') && !shown.contains('\x07'),
            "{shown}"
        );
        assert!(shown.contains("\\x1b]52"), "{shown}");
        assert!(shown.contains("\nc\td\\x0de"), "{shown}");
    }

    #[test]
    fn a_result_before_its_event_still_says_what_happened() {
        let result = |error: Option<ErrorType>| ToolResult {
            id: CALL_ID.into(),
            status: if error.is_some() {
                Status::Denied
            } else {
                Status::Ok
            },
            content: String::new(),
            display: String::new(),
            error: error.map(|k| toolvisor_protocol::ErrorBody::new(k, "x")),
            truncated: None,
            meta: json!({}),
            duration_ms: 0,
            audit_seq: 0,
        };
        assert!(
            ended_line(&result(Some(ErrorType::ConfirmationTimeout))).contains("nobody answered")
        );
        assert_eq!(
            ended_line(&result(Some(ErrorType::PolicyDenied))),
            "→ denied elsewhere"
        );
        assert_eq!(ended_line(&result(None)), "→ approved elsewhere");
    }

    #[test]
    fn outcomes_name_who_settled_the_question() {
        let f = fields(json!({"answer": "approved", "by": "s5", "by_client": "toolvisor-cli"}));
        assert_eq!(outcome_line(&f), "→ approved by toolvisor-cli (session s5)");
        let f = fields(json!({"answer": "denied", "by": "s2"}));
        assert_eq!(outcome_line(&f), "→ denied by session s2");
        let f = fields(json!({"answer": "timeout", "by": "timeout"}));
        assert!(outcome_line(&f).contains("nobody answered"));
    }
}
