//! A session's calls: single calls, batches and envelopes started as tasks, their ids
//! checked against the connection's open ones, and cancellation.

use std::sync::Arc;

use ractor::ActorRef;
use toolvisor_protocol::message::{CallRequest, ServerMessage};
use toolvisor_protocol::{ErrorType, Id};

use super::actor::{EnvelopeEnd, SessionMsg, SessionState, envelope_done, overloaded, refused};
use crate::call::batch::{BatchCall, Deliver, split_duplicates};
use crate::call::router::SessionInfo;

impl SessionState {
    pub(super) fn call(&mut self, info: &Arc<SessionInfo>, req: CallRequest) {
        if self.is_open(&req.id) {
            self.refuse_duplicate(req.id);
            return;
        }
        if let Some(why) = self.over_limit(1) {
            self.out
                .send(&ServerMessage::Result(overloaded(req.id, &why)));
            return;
        }
        let token = self.service.shutdown().child_token();
        self.open.insert(req.id.clone(), token.clone());
        let (svc, info) = (self.service.clone(), info.clone());
        let (open, out) = (self.open.clone(), self.out.clone());
        tokio::spawn(async move {
            let result = svc.run_call_guarded(info, req, token).await;
            open.finish(&out, result);
        });
    }

    /// Start a batch. Its own id must be free, or the whole batch is refused (as a
    /// `call` would be). A call whose id is taken (open here, the batch's own, or an
    /// earlier call's of this batch) gets `DuplicateCallId` and does not run; the
    /// others run, and `batch_done` lists them, so a client always sees the batch end.
    /// The calls that run must all fit under `max_open_calls` (all or none: a batch is
    /// ordered work, running a prefix of it would surprise). Overloaded calls still
    /// each get a `result`, then `batch_done`.
    pub(super) fn batch(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        info: &Arc<SessionInfo>,
        id: Id,
        calls: Vec<CallRequest>,
    ) {
        if self.is_open(&id) {
            self.refuse_duplicate(id);
            return;
        }
        self.start_batch(myself, info, id, calls, None);
    }

    /// Run an envelope (docs/PROTOCOL.md, "Envelopes"): no block → `envelope_done` with
    /// the text; a block that cannot run → `BadEnvelope` and nothing runs; else its
    /// skill and subagent actions get `UnsupportedAction` results and its tool actions
    /// run as a batch with the envelope's id, then `envelope_done`.
    pub(super) fn envelope(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        info: &Arc<SessionInfo>,
        id: Id,
        text: String,
    ) {
        if self.is_open(&id) {
            self.refuse_duplicate(id);
            return;
        }
        let max = self.service.config().server.max_open_calls;
        let env = match crate::call::envelope::parse(&text, max) {
            Ok(Some(env)) => env,
            Ok(None) => {
                let end = EnvelopeEnd {
                    assistant_text: text,
                    ids: Vec::new(),
                };
                self.out.send(&envelope_done(id, end));
                return;
            }
            Err(why) => {
                self.out
                    .send(&ServerMessage::error(Some(id), ErrorType::BadEnvelope, why));
                return;
            }
        };
        let plan = self.service.plan_envelope(env);
        for (action, why) in plan.unsupported {
            if self.is_open(&action) || action == id {
                self.refuse_duplicate(action);
            } else {
                let r = refused(action, ErrorType::UnsupportedAction, &why);
                self.out.send(&ServerMessage::Result(r));
            }
        }
        let end = EnvelopeEnd {
            assistant_text: plan.assistant_text,
            ids: plan.ids,
        };
        self.start_batch(myself, info, id, plan.calls, Some((plan.translated, end)));
    }

    /// The body of `batch` (and of an envelope's tool actions), once the batch's own id
    /// is known to be free.
    pub(super) fn start_batch(
        &mut self,
        myself: &ActorRef<SessionMsg>,
        info: &Arc<SessionInfo>,
        id: Id,
        calls: Vec<CallRequest>,
        envelope: Option<(std::collections::HashSet<Id>, EnvelopeEnd)>,
    ) {
        let (translated, envelope) = match envelope {
            Some((t, end)) => (t, Some(end)),
            None => (Default::default(), None),
        };
        let (calls, refused) = split_duplicates(&id, calls, |c| self.is_open(c));
        for dup in refused {
            self.out.send(&ServerMessage::error(
                Some(dup.id().clone()),
                ErrorType::DuplicateCallId,
                dup.to_string(),
            ));
        }
        let ids: Vec<Id> = calls.iter().map(|c| c.id.clone()).collect();
        if let Some(why) = self.over_limit(calls.len()) {
            for c in calls {
                self.out
                    .send(&ServerMessage::Result(overloaded(c.id, &why)));
            }
            self.out.send(&ServerMessage::BatchDone {
                id: id.clone(),
                ids,
            });
            if let Some(end) = envelope {
                self.out.send(&envelope_done(id, end));
            }
            return;
        }
        let batch_token = self.service.shutdown().child_token();
        self.batches.insert(id.clone(), batch_token.clone());
        let calls: Vec<BatchCall> = calls
            .into_iter()
            .map(|req| {
                let cancel = batch_token.child_token();
                self.open.insert(req.id.clone(), cancel.clone());
                BatchCall { req, cancel }
            })
            .collect();
        let (svc, info, me) = (self.service.clone(), info.clone(), myself.clone());
        let (open, out) = (self.open.clone(), self.out.clone());
        let deliver: Deliver = Arc::new(move |mut r| {
            if translated.contains(&r.id) {
                crate::call::envelope::mark_translated(&mut r);
            }
            open.finish(&out, r);
        });
        tokio::spawn(async move {
            svc.run_batch(info, id.clone(), calls, deliver).await;
            // Every result was queued before this, so `batch_done` follows them all.
            let _ = me.cast(SessionMsg::BatchDone(id, ids, envelope));
        });
    }

    /// Whether `id` names an open call or an open batch of this connection.
    pub(super) fn is_open(&self, id: &Id) -> bool {
        self.open.contains(id) || self.batches.contains_key(id)
    }

    pub(super) fn refuse_duplicate(&self, id: Id) {
        let msg = format!("id `{id}` is still open on this connection");
        self.out.send(&ServerMessage::error(
            Some(id),
            ErrorType::DuplicateCallId,
            msg,
        ));
    }

    /// Why `more` new calls would pass `server.max_open_calls`, if they would.
    pub(super) fn over_limit(&self, more: usize) -> Option<String> {
        let max = self.service.config().server.max_open_calls;
        let open = self.open.len();
        (open + more > max).then(|| format!("this connection has {open} open calls and asked for {more} more; the limit is {max} (server.max_open_calls)"))
    }

    pub(super) fn cancel(&mut self, id: Id) {
        match self
            .open
            .token(&id)
            .or_else(|| self.batches.get(&id).cloned())
        {
            Some(token) => token.cancel(),
            None => self.out.send(&ServerMessage::error(
                Some(id.clone()),
                ErrorType::UnknownCall,
                format!("no open call or batch `{id}` on this connection"),
            )),
        }
    }
}
