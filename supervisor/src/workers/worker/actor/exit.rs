//! A worker process ended: the event, and what comes next (a restart after a crash, or none).

use super::*;

impl WorkerActorState {
    /// The current process is gone: answer its calls, record it, then restart it now
    /// (a planned replacement) or per the restart policy (a crash).
    pub(super) async fn exited(
        &mut self,
        myself: &ActorRef<WorkerMsg>,
        code: Option<i32>,
        signal: Option<i32>,
    ) {
        let pid = self.child_pid.take();
        let planned = self
            .planned
            .take()
            .filter(|p| p.generation == self.generation && p.shutdown_sent);
        let why = match (code, signal) {
            (_, Some(sig)) => format!(
                "worker process {} was killed by signal {sig}",
                pid.unwrap_or(0)
            ),
            (Some(c), _) => format!("worker process {} exited with code {c}", pid.unwrap_or(0)),
            _ => "worker process ended".to_owned(),
        };
        if let Some(pid) = pid {
            kill_group(pid); // anything it left in its group goes too
        }
        if let Some(link) = self.args.shared.take_link() {
            link.fail_all(&why);
        }
        let reason = match (&planned, self.kill_reason) {
            (Some(p), _) => p.reason.as_str(),
            (None, Some(r)) => r,
            (None, None) => "crashed",
        };
        self.args
            .events
            .worker_exited(self.args.shared.id(), pid, code, signal, reason);
        if self.stopping {
            self.args.shared.set_state(WorkerState::Stopping);
            self.answer_waiters();
            return;
        }
        if let Some(p) = planned {
            tracing::info!(group = %self.args.shared.group, index = self.args.shared.index, reason = p.reason.as_str(), "worker replaced");
            self.args.shared.restarts.fetch_add(1, Ordering::SeqCst);
            self.start(myself).await;
            return;
        }
        tracing::warn!(group = %self.args.shared.group, index = self.args.shared.index, "{why}");
        self.after_crash(myself, code);
    }

    pub(super) fn after_crash(&mut self, myself: &ActorRef<WorkerMsg>, code: Option<i32>) {
        let generation = self.generation;
        match self.args.policy.on_exit(Instant::now(), code) {
            Next::RestartAfter(delay) => {
                self.args.shared.restarts.fetch_add(1, Ordering::SeqCst);
                self.args.shared.set_state(WorkerState::Restarting);
                myself.send_after(delay, move || WorkerMsg::Start { generation });
            }
            Next::Fail { retry_after } => {
                tracing::error!(group = %self.args.shared.group, index = self.args.shared.index, "worker failed; retry after {retry_after:?}");
                self.args
                    .shared
                    .set_retry_at(retry_after.map(|d| Instant::now() + d));
                self.args.shared.set_state(WorkerState::Failed);
                self.args
                    .events
                    .worker(WorkerEvent::Failed, self.args.shared.id(), None);
                if let Some(d) = retry_after {
                    self.args.policy.reset();
                    myself.send_after(d, move || WorkerMsg::Start { generation });
                }
                self.answer_waiters();
            }
        }
    }
}
