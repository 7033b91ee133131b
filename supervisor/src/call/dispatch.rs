//! Sending an allowed call to its group's workers: the effective deadline, the
//! worker a background-process handle names, streamed output forwarded to the client,
//! and the fan-out for tools whose answer is spread over every worker.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::mpsc;
use toolvisor_protocol::message::{ServerMessage, Status};
use toolvisor_protocol::tools::ToolDef;
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorType, Id};

use crate::call::egress::run_network;
use crate::call::grants::TokenUse;
use crate::call::router::{Call, Ran, fail};
use crate::call::service::Service;
use crate::outbox::Outbox;
use crate::policy::widen::NetworkGrant;
use crate::workers::pool::{Job, JobEnd};

/// Streamed chunks buffered per call before the worker's reader waits.
const OUTPUT_CHUNKS: usize = 16;

impl Service {
    /// Send the call to its group's pool as worker operation `op` with `args`, and
    /// wait for its end. `network`: what the command may reach.
    pub(crate) async fn dispatch(
        &self,
        call: &Call<'_>,
        args: Value,
        op: &str,
        network: &NetworkGrant,
    ) -> (Outcome, Ran) {
        let Some(pool) = self.pools().get(&call.tool.group) else {
            let why = format!("no pool for group {}", call.tool.group);
            return (fail(ErrorType::InternalError, why), None);
        };
        let stream = call.req.stream == Some(true);
        let (output, forwarder) = if stream {
            let (tx, rx) = mpsc::channel(OUTPUT_CHUNKS);
            let out = call.session.out.clone();
            let forward = tokio::spawn(forward_output(rx, call.req.id.clone(), out));
            (Some(tx), Some(forward))
        } else {
            (None, None)
        };
        let number = self.next_call();
        let (network, egress) = run_network(network, call.session.interactive);
        if egress.is_some() {
            self.register_egress(number, call);
        }
        let _relay = self
            .relay_book()
            .enter(number, &call.tool.group, call.session, &call.req.id);
        let job = Job {
            call: number,
            name: call.req.id.to_string(),
            tool: op.to_owned(),
            args,
            stream,
            timeout: self.deadline(call),
            rerunnable: rerunnable(call.tool),
            output,
            worker: worker_of_handle(call.tool, &call.req.args).or_else(|| home_of(call)),
            session: call.session.id.clone(),
            network,
            egress,
            takeover: call.takeover,
        };
        let end = pool.run(job, call.cancel).await;
        remember_home(call, &end.outcome);
        if let Some(f) = forwarder {
            let _ = f.await; // every output frame goes out before the result
        }
        (end.outcome, end.worker)
    }

    /// A tool whose answer is spread over the group's workers (each exec worker knows
    /// only its own background jobs): ask every ready one and merge the answers
    /// ([`crate::call::processes`]). Still one call (one audit pair), whose `worker` is
    /// the first that answered. With no worker ready, the usual path waits for one or
    /// answers `WorkerUnavailable`.
    pub(crate) async fn ask_every_worker(&self, call: &Call<'_>) -> (Outcome, Ran) {
        let args = call.req.args.clone();
        let Some(pool) = self.pools().get(&call.tool.group) else {
            return self
                .dispatch(call, args, &call.tool.name, &NetworkGrant::None)
                .await;
        };
        let timeout = self.deadline(call);
        let ask = |index| Job {
            call: self.next_call(),
            name: call.req.id.to_string(),
            tool: call.tool.name.clone(),
            args: args.clone(),
            stream: false,
            timeout,
            rerunnable: false,
            output: None,
            worker: Some(index),
            session: call.session.id.clone(),
            network: false,
            egress: None,
            takeover: false,
        };
        let ends = pool.run_on_ready(ask, call.cancel).await;
        if ends.is_empty() {
            return self
                .dispatch(call, args, &call.tool.name, &NetworkGrant::None)
                .await;
        }
        let worker = first_answer(&ends);
        let outcomes = ends.into_iter().map(|(_, e)| e.outcome).collect();
        (crate::call::processes::merge(outcomes), worker)
    }

    /// The effective deadline: the smallest of the call's `timeout_ms`, the tool's own
    /// timeout argument and the group's maximum; the group default when neither.
    pub(crate) fn deadline(&self, call: &Call<'_>) -> Duration {
        let cfg = self.config();
        let group = cfg.group_settings(&call.tool.group).unwrap_or_default();
        let own = call
            .tool
            .timeout_arg
            .and_then(|a| call.req.args.get(a))
            .and_then(Value::as_u64);
        let ms = match (call.req.timeout_ms, own) {
            (None, None) => group.default_timeout_ms,
            (a, b) => a
                .into_iter()
                .chain(b)
                .min()
                .unwrap_or(group.default_timeout_ms),
        };
        let waits = call.tool.waits.map_or(0, |w| w(&call.req.args));
        let ms = room_for_wait(
            ms,
            waits,
            call.req.timeout_ms.is_some(),
            group.max_timeout_ms,
        );
        Duration::from_millis(ms.min(group.max_timeout_ms).max(1))
    }

    /// Whether a call may act on a background process another session started: the
    /// tool acts on processes and the call carries a grant token for it that fits —
    /// grants come from people (`grant` is refused to commands, a model cannot send
    /// one). The worker enforces ownership; this only lifts it.
    pub(crate) fn takeover(
        &self,
        req: &toolvisor_protocol::message::CallRequest,
        tool: &ToolDef,
    ) -> bool {
        let Some(token) = req.confirm_token.as_deref() else {
            return false;
        };
        let use_ = TokenUse {
            tool: &tool.name,
            trace_id: req.trace_id.as_deref(),
            locations: &[],
        };
        tool.acts_on_process && self.grants().vouches(token, &use_, Instant::now())
    }
}

/// Room past a wait for the answer to come back before the deadline.
const WAIT_SLACK_MS: u64 = 5_000;

/// The deadline of a call that waits `wait` ms (a long poll): without an explicit
/// `timeout_ms` it gets room for its wait, however short the group's default, within
/// `max_ms`. An explicit `timeout_ms` stands (the worker ends the wait in time).
fn room_for_wait(ms: u64, wait: u64, explicit: bool, max_ms: u64) -> u64 {
    if explicit || wait == 0 {
        return ms;
    }
    ms.max(wait.saturating_add(WAIT_SLACK_MS)).min(max_ms)
}

/// Whether a call may run again on a restarted worker when its worker dies: it only
/// reads, at low risk, and does not depend on the dead worker (a handle names it).
fn rerunnable(tool: &ToolDef) -> bool {
    tool.rerunnable() && tool.hints.idempotent && tool.handle_arg.is_none()
}

/// The worker to name in the audit record of a fanned-out call: the first that
/// answered `ok`, else the first asked.
fn first_answer(ends: &[(u32, JobEnd)]) -> Ran {
    let ok = ends.iter().find(|(_, e)| e.outcome.status == Status::Ok);
    ok.or(ends.first()).and_then(|(_, e)| e.worker.clone())
}

/// A session's `run_command` goes to the exec worker that holds its background
/// processes, once it has one: that worker holds the session's loopback.
fn home_of(call: &Call<'_>) -> Option<u32> {
    let is_command = call.tool.name == toolvisor_protocol::tools::run_command::NAME;
    let home = call.session.exec_home.load(Ordering::SeqCst);
    (is_command && home != u32::MAX).then_some(home)
}

/// A command that became a background process (`meta.process`, `w<index>-<n>`) makes
/// that worker the session's home.
fn remember_home(call: &Call<'_>, outcome: &Outcome) {
    if call.tool.name != toolvisor_protocol::tools::run_command::NAME {
        return;
    }
    let index = outcome
        .meta
        .get("process")
        .and_then(Value::as_str)
        .and_then(|h| h.strip_prefix('w')?.split('-').next()?.parse::<u32>().ok());
    if let Some(i) = index {
        call.session.exec_home.store(i, Ordering::SeqCst);
    }
}

/// Background process handles (`w<index>-<n>`) name the worker that owns them.
fn worker_of_handle(tool: &ToolDef, args: &Value) -> Option<u32> {
    let handle = args.get(tool.handle_arg?)?.as_str()?;
    handle.strip_prefix('w')?.split('-').next()?.parse().ok()
}

async fn forward_output(mut rx: mpsc::Receiver<(String, String)>, id: Id, out: Outbox) {
    while let Some((stream, data)) = rx.recv().await {
        out.send_wait(&ServerMessage::Output {
            id: id.clone(),
            stream,
            data,
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolvisor_protocol::tools::{builtin, find};

    #[test]
    fn handles_name_their_worker() {
        let tools = builtin();
        let t = find(&tools, "read_output").unwrap();
        assert_eq!(worker_of_handle(t, &json!({"process": "w1-7"})), Some(1));
        assert_eq!(worker_of_handle(t, &json!({"process": "x"})), None);
        let ls = find(&tools, "ls").unwrap();
        assert_eq!(worker_of_handle(ls, &json!({"process": "w1-7"})), None);
    }

    #[test]
    fn waits_get_room_unless_the_call_set_its_own_deadline() {
        assert_eq!(room_for_wait(30_000, 60_000, false, 600_000), 65_000);
        assert_eq!(room_for_wait(10_000, 60_000, true, 600_000), 10_000);
        assert_eq!(room_for_wait(30_000, 60_000, false, 40_000), 40_000);
        assert_eq!(room_for_wait(30_000, 0, false, 600_000), 30_000);
        let tools = builtin();
        let waits = |n, a: Value| find(&tools, n).unwrap().waits.map_or(0, |w| w(&a));
        assert_eq!(
            waits("read_output", json!({"process": "w0-1", "wait_ms": 60000})),
            60_000
        );
        assert_eq!(
            waits("read_output", json!({"process": "w0-1", "until": "x"})),
            30_000
        );
        assert_eq!(waits("read_output", json!({"process": "w0-1"})), 0);
        let ready =
            json!({"command": "x", "background": true, "ready": {"port": 1, "timeout_ms": 90000}});
        assert_eq!(waits("run_command", ready), 90_000);
        assert_eq!(waits("ls", json!({})), 0);
    }

    #[test]
    fn only_idempotent_reads_run_again_after_a_crash() {
        let tools = builtin();
        let again = |n| rerunnable(find(&tools, n).unwrap());
        assert!(again("read_file") && again("grep") && again("ls"));
        assert!(!again("read_output"), "its read position moves");
        assert!(!again("write_file") && !again("run_command"));
    }
}
