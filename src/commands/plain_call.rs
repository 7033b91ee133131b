//! A call run to its result on an existing connection, a confirmation asked on the
//! terminal like `call` asks it: what `attach` needs for its own calls (starting the
//! process, typing into it, polling its output), where streamed output is not shown.

use std::time::{Duration, Instant};

use serde_json::Value;
use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage};

use super::call::{ended_line, outcome_line};
use crate::term::keys::Keys;
use crate::term::question::{Ask, Question};

/// Run a call to its result, answering a confirmation on the terminal like `call`
/// (streamed output is not shown): the question is withdrawn, saying who settled it,
/// when another connection answers first or its time runs out, so a late `n` typed
/// here never looks like it decided anything.
pub(crate) async fn run_to_result(
    c: &mut Client,
    req: CallRequest,
) -> Result<toolvisor_protocol::ToolResult, ClientError> {
    let id = req.id.clone();
    c.send(&ClientMessage::Call(req)).await?;
    let mut asking: Option<Asking> = None;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let open = asking.is_some();
        tokio::select! {
            m = c.recv_matching(|m| belongs(m, &id).then_some(())) => {
                match m?.1 {
                    ServerMessage::ConfirmRequired { interaction, tool, description, risk, locations, preview, expires_in_ms, .. } => {
                        let ask = Ask { tool: &tool, risk: &risk, description: &description, locations: &locations, preview: preview.as_deref() };
                        let who = format!("this command (toolvisor-cli, session {})", c.session);
                        let deadline = Instant::now() + Duration::from_millis(expires_in_ms);
                        let question = Question::show(&ask, &who, deadline, "Allow this call? [y/N] ", crate::term::stderr_is_tty());
                        asking = Some(Asking { interaction, question, keys: Keys::stdin() });
                    }
                    ServerMessage::Event { fields, .. } => {
                        let ours = asking.as_ref().is_some_and(|a| {
                            fields.get("interaction").and_then(Value::as_str) == Some(&a.interaction)
                        });
                        if ours {
                            settled(&mut asking, &outcome_line(&fields));
                        }
                    }
                    ServerMessage::Output { .. } => settled(&mut asking, "→ approved elsewhere; running"),
                    ServerMessage::Result(r) => {
                        settled(&mut asking, &ended_line(&r));
                        return Ok(r);
                    }
                    ServerMessage::Error { error, .. } => return Err(ClientError::Refused(error)),
                    _ => {}
                }
            }
            line = next_line(&mut asking), if open => {
                if let Some(mut a) = asking.take() {
                    a.question.answered();
                    let approve = line.is_some_and(|l| matches!(l.to_lowercase().as_str(), "y" | "yes"));
                    c.send(&ClientMessage::Confirm { interaction: a.interaction, approve, remember: None }).await?;
                }
            }
            _ = tick.tick(), if open => {
                let now = Instant::now();
                if let Some(a) = asking.as_mut() {
                    a.question.tick(now);
                    if a.question.expired(now) {
                        settled(&mut asking, "→ nobody answered in time: the call is denied");
                    }
                }
            }
        }
    }
}

/// A question on screen and the keyboard that answers it.
struct Asking {
    interaction: String,
    question: Question,
    keys: Keys,
}

/// The question on screen was settled without this keyboard: withdraw it, and forget
/// what was typed for it.
fn settled(asking: &mut Option<Asking>, outcome: &str) {
    if let Some(mut a) = asking.take() {
        a.question.withdraw(outcome);
        a.keys.discard_typed();
    }
}

async fn next_line(asking: &mut Option<Asking>) -> Option<String> {
    match asking {
        Some(a) => a.keys.line().await,
        None => std::future::pending().await,
    }
}

fn belongs(m: &ServerMessage, id: &toolvisor_protocol::Id) -> bool {
    match m {
        ServerMessage::Output { id: i, .. } | ServerMessage::ConfirmRequired { id: i, .. } => {
            i == id
        }
        ServerMessage::Confirmed { .. } => false,
        ServerMessage::Event { event, .. } => event == "confirm_answered",
        other => toolvisor_protocol::client::answers(other, id),
    }
}
