//! Previewed changes on the call path: a preview's change is kept in the supervisor
//! (it outlives edit-worker restarts) and the client gets a single-use token instead
//! of the new content; applying the token writes exactly that change, once.
//! The store itself is [`super::previews`].

use std::time::{Duration, Instant};

use serde_json::Value;
use toolvisor_protocol::message::Status;
use toolvisor_protocol::worker::Outcome;

use crate::call::previews::{PendingChange, PreviewStore};
use crate::call::router::{Call, Ran, fail};
use crate::policy::widen::NetworkGrant;
use crate::service::Service;

/// The preview token an apply call names (empty when it names none).
pub(crate) fn change_token(args: &Value) -> &str {
    args.get("token")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

impl Service {
    pub(crate) fn previews(&self) -> std::sync::MutexGuard<'_, PreviewStore> {
        self.previews.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Run a preview and keep its change behind a token.
    pub(crate) async fn preview(&self, call: &Call<'_>) -> (Outcome, Ran) {
        let mut end = self
            .dispatch(
                call,
                call.req.args.clone(),
                &call.tool.name,
                &NetworkGrant::None,
            )
            .await;
        self.issue_preview_token(&call.tool.name, &mut end.0);
        end
    }

    /// Keep a preview's change and hand the client its single-use token instead of
    /// the new content.
    fn issue_preview_token(&self, tool: &str, o: &mut Outcome) {
        if o.status != Status::Ok {
            return;
        }
        let Some(change) = PendingChange::from_preview_meta(tool, &mut o.meta) else {
            return;
        };
        let ttl = Duration::from_millis(self.config().edit.preview_ttl_ms);
        let token = self.previews().issue(change, Instant::now(), ttl);
        o.meta.insert("token".into(), Value::String(token));
    }

    /// Apply exactly the change a preview kept, once: the worker runs it as `op`.
    pub(crate) async fn apply_change(&self, call: &Call<'_>, op: &str) -> (Outcome, Ran) {
        let token = change_token(&call.req.args);
        if let Some(end) = self.apply_staged_token(token).await {
            return end;
        }
        let change = match self.previews().take(token, Instant::now()) {
            Ok(c) => c,
            Err(e) => return (fail(e.error_type(), e.to_string()), None),
        };
        let mut end = self
            .dispatch(call, change.apply_args(), op, &NetworkGrant::None)
            .await;
        end.0.meta.insert("path".into(), Value::String(change.path));
        end
    }
}
