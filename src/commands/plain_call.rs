//! A call run to its result on an existing connection, a confirmation answered with a
//! plain `y/N` line on the terminal: what `attach` needs for its own calls (starting the
//! process, typing into it, polling its output), where streamed output is not shown.

use std::io::Write;

use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage};

/// Run a call to its result, answering a confirmation on the terminal like `call`
/// (streamed output is not shown).
pub(crate) async fn run_to_result(
    c: &mut Client,
    req: CallRequest,
) -> Result<toolvisor_protocol::ToolResult, ClientError> {
    let id = req.id.clone();
    c.send(&ClientMessage::Call(req)).await?;
    loop {
        let (_, m) = c.recv_matching(|m| belongs(m, &id).then_some(())).await?;
        match m {
            m @ ServerMessage::ConfirmRequired { .. } => ask_person(c, m).await?,
            ServerMessage::Result(r) => return Ok(r),
            ServerMessage::Error { error, .. } => return Err(ClientError::Refused(error)),
            _ => {}
        }
    }
}

/// Show a `confirm_required` and send the person's answer.
async fn ask_person(c: &mut Client, m: ServerMessage) -> Result<(), ClientError> {
    let ServerMessage::ConfirmRequired {
        interaction,
        tool,
        description,
        risk,
        locations,
        preview,
        ..
    } = m
    else {
        return Ok(());
    };
    show_confirmation(&tool, &description, &risk, &locations, preview.as_deref());
    let approve = ask_line("Allow this call? [y/N] ")
        .await
        .is_some_and(|a| a == "y" || a == "yes");
    c.send(&ClientMessage::Confirm {
        interaction,
        approve,
        remember: None,
    })
    .await
}

fn belongs(m: &ServerMessage, id: &toolvisor_protocol::Id) -> bool {
    match m {
        ServerMessage::Output { id: i, .. } | ServerMessage::ConfirmRequired { id: i, .. } => {
            i == id
        }
        ServerMessage::Confirmed { .. } => false,
        other => toolvisor_protocol::client::answers(other, id),
    }
}

fn show_confirmation(
    tool: &str,
    description: &str,
    risk: &str,
    locations: &[String],
    preview: Option<&str>,
) {
    eprintln!("\n== {tool} ({risk} risk): {description}");
    if !locations.is_empty() {
        eprintln!("   paths: {}", locations.join(", "));
    }
    if let Some(p) = preview {
        eprintln!("{}", p.trim_end());
    }
}

/// One line from stdin (blocking, off the runtime); `None` at end of input.
async fn ask_line(prompt: &str) -> Option<String> {
    eprint!("{prompt}");
    let _ = std::io::stderr().flush();
    tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        match std::io::stdin().read_line(&mut line) {
            Ok(0) | Err(_) => None,
            Ok(_) => Some(line.trim().to_lowercase()),
        }
    })
    .await
    .ok()
    .flatten()
}
