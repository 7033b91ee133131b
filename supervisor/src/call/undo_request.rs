//! The `undo` message: which calls, who may, the journal's answer as `undone`, and the
//! `undone` audit record.
//!
//! A session may undo its own calls. Another session's only when a person is there to
//! have asked for it: the session said `interactive` and is not a command toolvisor
//! runs (`toolvisor undo` is such a session). `last N` and `trace` count only the calls
//! the session may undo.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value, json};
use toolvisor_protocol::message::{NotUndoable, ServerMessage, UndoConflict};
use toolvisor_protocol::{ErrorType, Id};

use crate::call::router::SessionInfo;
use crate::call::service::Service;
use crate::undo::{Report, Select};

/// An `undo` message's fields.
pub struct UndoRequest {
    /// Echoed.
    pub id: Id,
    /// Calls by audit id (`c7` alone: the asking session's).
    pub calls: Option<Vec<String>>,
    /// A trace.
    pub trace: Option<String>,
    /// The newest N.
    pub last: Option<u64>,
    /// Change nothing.
    pub dry_run: bool,
}

impl UndoRequest {
    /// What the request selects, or why it is malformed.
    fn select(&self, session: &str) -> Result<Select, String> {
        match (&self.calls, &self.trace, self.last) {
            (Some(c), None, None) if !c.is_empty() => Ok(Select::Calls(
                c.iter()
                    .map(|id| {
                        if id.contains(':') {
                            id.clone()
                        } else {
                            format!("{session}:{id}")
                        }
                    })
                    .collect(),
            )),
            (None, Some(t), None) => Ok(Select::Trace(t.clone())),
            (None, None, Some(n)) if n > 0 => Ok(Select::Last(n as usize)),
            _ => Err(
                "undo takes exactly one of `calls` (a non-empty list of call ids), `trace`, or `last` (at least 1)"
                    .into(),
            ),
        }
    }
}

impl Service {
    /// Answer an `undo` from `session` (`person`: a person is there to have asked).
    pub async fn undo_request(
        self: &Arc<Self>,
        session: &SessionInfo,
        person: bool,
        req: UndoRequest,
    ) -> ServerMessage {
        let select = match req.select(&session.id) {
            Ok(s) => s,
            Err(why) => return ServerMessage::error(Some(req.id), ErrorType::InvalidParams, why),
        };
        let journal = match &self.undo().journal {
            Ok(j) => j.clone(),
            Err(why) => {
                return ServerMessage::error(Some(req.id), ErrorType::NotUndoable, why.clone());
            }
        };
        let by = format!("{}:{}", session.id, id_text(&req.id));
        let own = session.id.clone();
        let dry_run = req.dry_run;
        let (by2, select2) = (by.clone(), select.clone());
        let run = tokio::task::spawn_blocking(move || {
            let may = move |s: &str| person || s == own;
            journal.undo(&by2, &select2, &may, dry_run)
        })
        .await;
        let report = match run {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                return ServerMessage::error(
                    Some(req.id),
                    ErrorType::InternalError,
                    format!("the undo journal failed: {e}"),
                );
            }
            Err(e) => {
                return ServerMessage::error(
                    Some(req.id),
                    ErrorType::InternalError,
                    format!("the undo failed: {e}"),
                );
            }
        };
        let answer = self.undone_message(req.id, &report, dry_run, &by);
        if !dry_run {
            self.audit_undone(session, &by, &answer).await;
        }
        answer
    }

    fn undone_message(&self, id: Id, r: &Report, dry_run: bool, by: &str) -> ServerMessage {
        let shown = |p: &Path| self.display_path(p);
        let sorted = |v: &[std::path::PathBuf]| {
            let mut v: Vec<String> = v.iter().map(|p| shown(p)).collect();
            v.sort();
            v.dedup();
            v
        };
        ServerMessage::Undone {
            call_id: by.to_owned(),
            id,
            calls: r.calls.clone(),
            restored: sorted(&r.undone.restored),
            removed: sorted(&r.undone.removed),
            conflicts: r
                .undone
                .conflicts
                .iter()
                .map(|(p, why)| UndoConflict {
                    path: shown(p),
                    reason: why.clone(),
                })
                .collect(),
            not_undoable: r
                .undone
                .not_undoable
                .iter()
                .map(|(c, why)| NotUndoable {
                    call: c.clone(),
                    reason: why.clone(),
                })
                .collect(),
            dry_run,
        }
    }

    /// A host path as the tools show it: relative to the workspace, `shared:/…` in the
    /// shared root.
    pub(crate) fn display_path(&self, p: &Path) -> String {
        let roots = self.undo().roots();
        if let Ok(rel) = p.strip_prefix(&roots.private) {
            return rel.to_string_lossy().into_owned();
        }
        if let Some(shared) = &roots.shared
            && let Ok(rel) = p.strip_prefix(shared)
        {
            return format!("shared:/{}", rel.to_string_lossy());
        }
        p.to_string_lossy().into_owned()
    }

    async fn audit_undone(&self, session: &SessionInfo, by: &str, answer: &ServerMessage) {
        let Ok(Value::Object(mut fields)) = serde_json::to_value(answer) else {
            return;
        };
        fields.remove("type");
        fields.remove("dry_run");
        fields.remove("call_id");
        let mut rec = Map::new();
        rec.insert("session".into(), json!(session.id));
        rec.insert("client".into(), json!(session.client));
        rec.insert("undo".into(), json!(by));
        rec.extend(fields);
        if let Err(e) = self.audit().append("undone", rec).await {
            tracing::error!("the audit log did not take an `undone` record: {e}");
        }
    }
}

fn id_text(id: &Id) -> String {
    match serde_json::to_value(id) {
        Ok(Value::String(s)) => s,
        Ok(v) => v.to_string(),
        Err(_) => "undo".into(),
    }
}
