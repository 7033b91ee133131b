//! `batch`: many calls in one message, run in request order with as much overlap as
//! is safe.
//!
//! The calls are cut into segments. A run of consecutive calls the policy allows
//! outright at low risk (or that fail validation, which ends them at once) runs
//! concurrently; every other call (one that may ask a person, or is riskier) runs
//! alone, after the segment before it has ended. So a read after a command sees what
//! the command did, and a person confirming a command never races a later call.
//!
//! Every call goes through [`Service::run_call`] like a single call, and its result
//! through the session's `deliver` hook (the same path as a single call, which
//! unregisters the id before sending the result). The session sends `batch_done` once
//! [`Service::run_batch`] returns, so it always comes last.

use std::ops::Range;
use std::sync::Arc;

use serde_json::{Map, Value};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use toolvisor_protocol::Id;
use toolvisor_protocol::message::{CallRequest, ToolResult, Topic};
use toolvisor_protocol::tools::Risk;

use crate::call::router::SessionInfo;
use crate::call::service::Service;
use crate::config::Action;

/// Hands one call's result to its session (which unregisters the id, then sends it).
pub type Deliver = Arc<dyn Fn(ToolResult) + Send + Sync>;

/// One call of a batch with its own cancellation token (a child of the batch's).
pub struct BatchCall {
    /// The call.
    pub req: CallRequest,
    /// Cancelled with the batch, or for this call alone.
    pub cancel: CancellationToken,
}

impl Service {
    /// Run every call of a batch to its result; returns once all results are
    /// delivered. Counts as one open call for a drain while it runs, so a shutdown
    /// does not slip in between two segments.
    pub async fn run_batch(
        self: Arc<Self>,
        session: Arc<SessionInfo>,
        id: Id,
        calls: Vec<BatchCall>,
        deliver: Deliver,
    ) {
        let _open = self.open_call();
        let ids: Vec<Id> = calls.iter().map(|c| c.req.id.clone()).collect();
        self.publish_batch("batch_started", &session, &id, &ids);
        let together: Vec<bool> = calls
            .iter()
            .map(|c| self.may_overlap(&session, &c.req))
            .collect();
        let mut calls = calls.into_iter();
        for seg in segments(&together) {
            let part: Vec<BatchCall> = calls.by_ref().take(seg.len()).collect();
            self.run_segment(&session, part, &deliver).await;
        }
        self.publish_batch("batch_finished", &session, &id, &ids);
    }

    /// Whether a call may run alongside its neighbours: it fails validation (it ends
    /// at once), or the policy allows it outright at low risk (nobody will be asked).
    pub fn may_overlap(&self, session: &SessionInfo, req: &CallRequest) -> bool {
        let Ok(tool) = self.admit(req) else {
            return true;
        };
        let base = session.familiar.base_risk(&tool, &req.args);
        let d = self.policy().decide_at(&tool, &req.args, base);
        d.action == Action::Allow && d.risk == Risk::Low
    }

    /// Start every call of a segment, deliver each result as it comes, and return
    /// when all have ended.
    async fn run_segment(
        self: &Arc<Self>,
        session: &Arc<SessionInfo>,
        part: Vec<BatchCall>,
        deliver: &Deliver,
    ) {
        let mut running = JoinSet::new();
        for call in part {
            let (svc, info, deliver) = (self.clone(), session.clone(), deliver.clone());
            running.spawn(async move {
                deliver(svc.run_call_guarded(info, call.req, call.cancel).await)
            });
        }
        while running.join_next().await.is_some() {}
    }

    fn publish_batch(&self, name: &'static str, session: &SessionInfo, id: &Id, ids: &[Id]) {
        let mut m = Map::new();
        m.insert("id".into(), serde_json::to_value(id).unwrap_or(Value::Null));
        m.insert("session".into(), Value::String(session.id.clone()));
        m.insert(
            "ids".into(),
            serde_json::to_value(ids).unwrap_or(Value::Null),
        );
        self.events().publish(Topic::Calls, name, m);
    }
}

/// Why a batch call is refused with `DuplicateCallId` (and does not run).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Duplicate {
    /// Its id names a call or batch already open on the connection.
    Open(Id),
    /// Its id is the id of its own batch (`cancel` could not tell them apart).
    BatchId(Id),
    /// Its id repeats an earlier call of the same batch.
    Repeated(Id),
}

impl Duplicate {
    /// The duplicated id (the connection-level error echoes it).
    pub fn id(&self) -> &Id {
        match self {
            Duplicate::Open(id) | Duplicate::BatchId(id) | Duplicate::Repeated(id) => id,
        }
    }
}

impl std::fmt::Display for Duplicate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Duplicate::Open(id) => write!(
                f,
                "id `{id}` is still open on this connection; this batch call was not run"
            ),
            Duplicate::BatchId(id) => write!(
                f,
                "id `{id}` is the id of its own batch; this batch call was not run"
            ),
            Duplicate::Repeated(id) => write!(
                f,
                "id `{id}` repeats an earlier call of the same batch; this batch call was not run"
            ),
        }
    }
}

/// Split a batch's calls into those that run and those refused as duplicates, each
/// list in request order. `open` says whether an id is open on the connection (the
/// batch's own id is not open yet: the caller refuses the whole batch when it is).
/// The first call with a given id runs; a later one with the same id is refused.
pub fn split_duplicates(
    batch: &Id,
    calls: Vec<CallRequest>,
    open: impl Fn(&Id) -> bool,
) -> (Vec<CallRequest>, Vec<Duplicate>) {
    let mut seen = std::collections::HashSet::new();
    let mut run = Vec::with_capacity(calls.len());
    let mut refused = Vec::new();
    for c in calls {
        if open(&c.id) {
            refused.push(Duplicate::Open(c.id));
        } else if c.id == *batch {
            refused.push(Duplicate::BatchId(c.id));
        } else if !seen.insert(c.id.clone()) {
            refused.push(Duplicate::Repeated(c.id));
        } else {
            run.push(c);
        }
    }
    (run, refused)
}

/// Cut a batch into segments: each maximal run of calls that may overlap is one
/// segment; every other call is a segment of its own. Ranges cover `0..len` in order.
pub fn segments(together: &[bool]) -> Vec<Range<usize>> {
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, &t) in together.iter().enumerate() {
        match out.last_mut() {
            Some(last) if t && together[last.start] => last.end = i + 1,
            _ => out.push(i..i + 1),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{Duplicate, segments, split_duplicates};
    use serde_json::json;
    use toolvisor_protocol::Id;
    use toolvisor_protocol::message::CallRequest;

    fn calls(ids: &[&str]) -> Vec<CallRequest> {
        ids.iter()
            .map(|id| CallRequest::new(*id, "ls", json!({"path": "."})))
            .collect()
    }

    fn ids(calls: &[CallRequest]) -> Vec<String> {
        calls.iter().map(|c| c.id.to_string()).collect()
    }

    #[test]
    fn duplicated_calls_are_refused_and_the_rest_run_in_order() {
        let open = |id: &Id| *id == Id::from("busy");
        let (run, refused) = split_duplicates(
            &"b".into(),
            calls(&["a", "d", "busy", "d", "b", "c", "a"]),
            open,
        );
        assert_eq!(ids(&run), ["a", "d", "c"]);
        assert_eq!(
            refused,
            [
                Duplicate::Open("busy".into()),
                Duplicate::Repeated("d".into()),
                Duplicate::BatchId("b".into()),
                Duplicate::Repeated("a".into()),
            ]
        );
        assert_eq!(refused[1].id(), &Id::from("d"));
        assert!(refused[2].to_string().contains("its own batch"));
    }

    #[test]
    fn an_open_id_repeated_in_the_batch_is_refused_every_time() {
        let (run, refused) = split_duplicates(&"b".into(), calls(&["x", "x", "y"]), |id| {
            *id == Id::from("x")
        });
        assert_eq!(ids(&run), ["y"]);
        assert_eq!(
            refused,
            [Duplicate::Open("x".into()), Duplicate::Open("x".into())]
        );
    }

    #[test]
    fn string_and_integer_ids_are_different_ids() {
        let batch = vec![
            CallRequest::new("1", "ls", json!({})),
            CallRequest::new(Id::Int(1), "ls", json!({})),
        ];
        let (run, refused) = split_duplicates(&"b".into(), batch, |_| false);
        assert_eq!(run.len(), 2);
        assert!(refused.is_empty());
    }

    #[test]
    fn runs_of_overlapping_calls_share_a_segment() {
        assert!(segments(&[]).is_empty());
        assert_eq!(
            segments(&[true, true, false, true, true, true]),
            vec![0..2, 2..3, 3..6]
        );
        assert_eq!(segments(&[false, false]), vec![0..1, 1..2]);
        assert_eq!(segments(&[false, true, false]), vec![0..1, 1..2, 2..3]);
        assert_eq!(segments(&[true]), vec![0..1]);
    }

    #[test]
    fn segments_cover_every_call_once_in_order() {
        let together = [true, false, true, true, false, false, true];
        let segs = segments(&together);
        let flat: Vec<usize> = segs.iter().flat_map(|r| r.clone()).collect();
        assert_eq!(flat, (0..together.len()).collect::<Vec<_>>());
        for s in &segs {
            assert!(s.len() == 1 || s.clone().all(|i| together[i]), "{s:?}");
        }
    }
}
