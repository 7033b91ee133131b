//! `toolvisor undo CALL_ID… | --trace ID | --last N [--dry-run]`: put back what those
//! calls changed in the workspace, newest first. It speaks for a person (an interactive
//! session), so it may undo any session's calls. Exit 0 when everything named was
//! undone, 1 when a path was left alone (a conflict) or a call could not be undone.

use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{ClientMessage, ServerMessage};

use crate::commands::refused;
use crate::workspace::Resolved;

/// What to undo.
pub struct Options {
    /// Call ids (`s3:c7`).
    pub calls: Vec<String>,
    /// A trace id.
    pub trace: Option<String>,
    /// The newest N calls.
    pub last: Option<u64>,
    /// Change nothing.
    pub dry_run: bool,
    /// Print the answer as JSON.
    pub json: bool,
}

pub async fn run(r: &Resolved, o: Options) -> Result<i32, ClientError> {
    let chosen = usize::from(!o.calls.is_empty())
        + usize::from(o.trace.is_some())
        + usize::from(o.last.is_some());
    if chosen != 1 {
        eprintln!("toolvisor: undo takes call ids, or --trace ID, or --last N (one of them)");
        return Ok(2);
    }
    let mut c = Client::connect(&r.socket, super::CLIENT, true).await?;
    let id = "undo".into();
    let msg = ClientMessage::Undo {
        id: "undo".into(),
        calls: (!o.calls.is_empty()).then(|| o.calls.clone()),
        trace: o.trace.clone(),
        last: o.last,
        dry_run: Some(o.dry_run),
    };
    let answer = c.request(&msg, &id).await?;
    if !matches!(answer, ServerMessage::Undone { .. }) {
        return refused(answer);
    }
    if o.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&answer).unwrap_or_default()
        );
    } else {
        print!("{}", report(&answer));
    }
    let ServerMessage::Undone {
        calls,
        conflicts,
        not_undoable,
        ..
    } = &answer
    else {
        return Ok(1);
    };
    Ok(
        if conflicts.is_empty() && not_undoable.is_empty() && !calls.is_empty() {
            0
        } else {
            1
        },
    )
}

/// The answer for people: what was (or would be) put back, removed and left alone.
fn report(m: &ServerMessage) -> String {
    let ServerMessage::Undone {
        calls,
        restored,
        removed,
        conflicts,
        not_undoable,
        dry_run,
        call_id,
        ..
    } = m
    else {
        return String::new();
    };
    let mut out = String::new();
    let verb = if *dry_run { "would undo" } else { "undid" };
    if calls.is_empty() {
        out.push_str("nothing to undo\n");
    } else {
        out.push_str(&format!("{verb} {}: {}\n", calls.len(), calls.join(", ")));
    }
    for p in restored {
        out.push_str(&format!("  restored  {p}\n"));
    }
    for p in removed {
        out.push_str(&format!("  removed   {p}\n"));
    }
    for c in conflicts {
        out.push_str(&format!("  CONFLICT  {}: {}\n", c.path, c.reason));
    }
    for n in not_undoable {
        out.push_str(&format!("  NOT UNDOABLE  {}: {}\n", n.call, n.reason));
    }
    if !dry_run && !calls.is_empty() {
        out.push_str(&format!("(to redo: toolvisor undo {call_id})\n"));
    }
    out
}
