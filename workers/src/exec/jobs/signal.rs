//! `kill_process`: stop a job and everything it started, or send it one signal.

use nix::sys::signal::Signal;
use serde_json::{Value, json};
use toolvisor_protocol::worker::Outcome;

use super::{Job, Jobs, KILL_WAIT};
use crate::exec::control::SignalError;
use crate::{ToolContext, ToolError};

impl Jobs {
    /// `kill_process`: stop the job and everything it started, and wait until it is
    /// gone; with `signal`, send only that signal to its process group.
    pub(crate) async fn kill(&self, args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
        let job = self.find(args)?;
        job.check_owner(ctx, "signal")?;
        let signal = match args.get("signal") {
            None | Some(Value::Null) => None,
            Some(v) => Some(parse_signal(v)?),
        };
        let was_running = !job.finished();
        if let (Some(sig), true) = (signal, was_running) {
            return send_signal(&job, sig).await;
        }
        if was_running {
            job.kill.cancel();
            if !job.wait_done().await {
                return Err(ToolError::internal(format!(
                    "{} (pid {}) did not stop within {} s",
                    job.handle,
                    job.pid,
                    KILL_WAIT.as_secs()
                )));
            }
        }
        let (code, _) = job.lock().exit;
        let text = if was_running {
            format!("Killed {} (pid {})", job.handle, job.pid)
        } else {
            let how = code.map_or("was killed by a signal".into(), |c| {
                format!("exited with code {c}")
            });
            format!(
                "{} (pid {}) had already ended: it {how}",
                job.handle, job.pid
            )
        };
        let mut out = Outcome::ok(text);
        out.meta = job.meta();
        Ok(out)
    }
}

/// `signal` by name (`INT`, `TERM`, …: the schema's enum).
pub(super) fn parse_signal(v: &Value) -> Result<Signal, ToolError> {
    let name = v.as_str().unwrap_or_default();
    let sig = match name {
        "INT" => Signal::SIGINT,
        "TERM" => Signal::SIGTERM,
        "KILL" => Signal::SIGKILL,
        "HUP" => Signal::SIGHUP,
        "QUIT" => Signal::SIGQUIT,
        "USR1" => Signal::SIGUSR1,
        "USR2" => Signal::SIGUSR2,
        _ => {
            return Err(ToolError::invalid(format!(
                "signal {v} is not one of {}",
                toolvisor_protocol::tools::SIGNALS.join(", ")
            )));
        }
    };
    Ok(sig)
}

/// Deliver `sig` to a running job's process group.
async fn send_signal(job: &Job, sig: Signal) -> Result<Outcome, ToolError> {
    let sent = match &job.control {
        Some(c) => c.signal(sig).await,
        None => Err(SignalError::Gone),
    };
    match sent {
        Ok(()) => {
            let mut out = Outcome::ok(format!(
                "Sent {} to {} (pid {})",
                sig.as_str(),
                job.handle,
                job.pid
            ));
            out.meta = job.meta();
            out.meta.insert("signal_sent".into(), json!(sig.as_str()));
            Ok(out)
        }
        Err(SignalError::Gone) => Err(ToolError::invalid(format!(
            "{} has ended: there is no process to signal",
            job.handle
        ))),
        Err(e) => Err(ToolError::internal(format!("{}: {e}", job.handle))),
    }
}
