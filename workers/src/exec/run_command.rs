//! `run_command` in the foreground (background starts are in [`super::jobs`]).

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorBody, ErrorType, Status};

use super::ExecState;
use super::cgroup::CommandCgroup;
use super::launch::{CpuWatch, Ended, Spec, Stop, supervise};
use super::output::{Capture, Coalescer, sanitize_name};
use crate::reap::report::Report;
use crate::{ToolContext, ToolError};

/// `timeout` when the call gives none (docs/PROTOCOL.md §9).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// `run_command`'s arguments (schema-validated upstream).
#[derive(Debug)]
pub(crate) struct RunArgs<'a> {
    pub command: &'a str,
    pub cwd: Option<&'a str>,
    pub timeout: Option<Duration>,
    pub background: bool,
    pub env: Option<&'a Value>,
}

impl<'a> RunArgs<'a> {
    pub(crate) fn parse(args: &'a Value) -> Result<Self, ToolError> {
        let command = args
            .get("command")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| ToolError::invalid("command is required"))?;
        Ok(RunArgs {
            command,
            cwd: args.get("cwd").and_then(Value::as_str),
            timeout: args
                .get("timeout")
                .and_then(Value::as_u64)
                .map(Duration::from_millis),
            background: args.get("background").and_then(Value::as_bool) == Some(true),
            env: args.get("env"),
        })
    }
}

/// Run the command to its end (or its deadline) and report its output and status.
pub(crate) async fn run(
    state: &ExecState,
    args: &Value,
    ctx: &ToolContext,
) -> Result<Outcome, ToolError> {
    let a = RunArgs::parse(args)?;
    if a.background {
        return state.jobs.start(state, &a, ctx);
    }
    let (cwd, cwd_path) = super::open_cwd(ctx, a.cwd)?;
    let env = super::env::build(std::env::vars(), &ctx.init.exec, a.env)?;
    let timeout = a.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let own = std::time::Instant::now() + timeout;
    let deadline = ctx.deadline.map_or(own, |d| d.min(own));
    let cgroup = state
        .cgroups
        .create()
        .map_err(|e| ToolError::internal(format!("cannot make the command's cgroup: {e}")))?;
    let spec = Spec {
        command: a.command,
        env: &env,
        cwd: &cwd,
        cwd_path: &cwd_path,
        instance: &ctx.init.exec.instance,
        merged: ctx.output.is_none(),
        network: ctx.network,
        cgroup: cgroup.as_ref(),
    };
    let mut running = state.launcher.spawn(&spec)?;
    drop(cwd);
    let arts = Arc::clone(&state.artifacts);
    let stem = sanitize_name(&ctx.name, ctx.call);
    let open = Box::new(move || match arts.create(&stem) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!("cannot create the artifact for call {stem}: {e}");
            None
        }
    });
    let mut capture = Capture::new(&ctx.init.limits, open);
    let mut stream = ctx.output.clone().map(Coalescer::new);
    let limits = &ctx.init.exec.sandbox.limits;
    let cpu = cpu_watch(cgroup.as_ref(), limits.cpu_s);
    let ended = supervise(
        &mut running,
        &mut capture,
        stream.as_mut(),
        Some(deadline.into()),
        &ctx.cancel,
        cpu,
    )
    .await;
    let report = running.report();
    if let Some(why) = report.as_ref().and_then(|r| r.setup_error.clone()) {
        return Err(ToolError::internal(format!(
            "the command's sandbox could not be set up, so it did not run: {why}"
        )));
    }
    let (content, truncated) = capture.finish(super::workspace(ctx));
    let own_timeout = ctx.deadline.is_none_or(|d| own <= d);
    let shown_timeout = if own_timeout { Some(timeout) } else { None };
    let mut out = outcome(content, &ended, shown_timeout);
    if let Some(limit) = super::limits::stopped_by(&ended, cgroup.as_ref(), limits) {
        let e = super::limits::error(limit, limits);
        out.display = format!("{}\n[{}]", out.content, e.message);
        out.status = Status::Error;
        out.error = Some(e);
    }
    out.meta.insert(
        "resources".into(),
        resources(report.as_ref(), cgroup.as_ref()),
    );
    out.truncated = truncated;
    Ok(out)
}

/// The CPU budget to watch on the command's cgroup, when both exist.
pub(crate) fn cpu_watch(cgroup: Option<&CommandCgroup>, cpu_s: u64) -> Option<CpuWatch<'_>> {
    let cgroup = cgroup.filter(|_| cpu_s > 0)?;
    Some(CpuWatch {
        cgroup,
        limit_ms: cpu_s * 1000,
    })
}

/// `meta.resources`: from the shim's report, else (it was killed) the CPU time the
/// cgroup measured; zeros when neither is known.
fn resources(report: Option<&Report>, cgroup: Option<&CommandCgroup>) -> Value {
    let (rss, cpu) = match report {
        Some(r) => (r.peak_rss_bytes, r.cpu_ms),
        None => (0, cgroup.and_then(CommandCgroup::cpu_ms).unwrap_or(0)),
    };
    json!({ "peak_rss_bytes": rss, "cpu_ms": cpu })
}

/// The outcome for a finished command: `ok` on exit 0; `timeout`, `cancelled` or
/// `error` (ShellExecutionError) otherwise, with the output still in `content`.
pub(crate) fn outcome(content: String, ended: &Ended, timeout: Option<Duration>) -> Outcome {
    let mut meta = Map::new();
    let (code, signal) = exit_parts(ended.status);
    meta.insert("exit_code".into(), json!(code));
    if let Some(s) = signal {
        meta.insert("signal".into(), json!(s));
    }
    let error = match (ended.stop, code, signal) {
        (Some(Stop::Timeout), _, _) => Some(ErrorBody::new(
            ErrorType::Timeout,
            match timeout {
                Some(t) => format!(
                    "command timed out after {} ms and was killed",
                    t.as_millis()
                ),
                None => "command reached the call's deadline and was killed".to_owned(),
            },
        )),
        (Some(Stop::Cancelled), _, _) => Some(ErrorBody::new(
            ErrorType::Cancelled,
            "the call was cancelled; the command was killed",
        )),
        // Named by the caller, which knows the limits.
        (Some(Stop::Limit(_)), _, _) => Some(ErrorBody::new(
            ErrorType::ResourceLimit,
            "the command was stopped by a resource limit",
        )),
        (None, Some(0), _) => None,
        (None, Some(c), _) => Some(ErrorBody::new(
            ErrorType::ShellExecutionError,
            format!("command exited with code {c}"),
        )),
        (None, None, Some(s)) => Some(ErrorBody::new(
            ErrorType::ShellExecutionError,
            format!("command was killed by signal {s} ({})", signal_name(s)),
        )),
        (None, None, None) => Some(ErrorBody::new(
            ErrorType::ShellExecutionError,
            "the command's exit status is unknown",
        )),
    };
    let status = match &error {
        None => Status::Ok,
        Some(e) => Outcome::err(e.clone()).status,
    };
    let display = match &error {
        None => content.clone(),
        Some(e) if content.is_empty() => format!("[{}]", e.message),
        Some(e) => format!("{content}\n[{}]", e.message),
    };
    Outcome {
        status,
        content,
        display,
        error,
        truncated: None,
        meta,
    }
}

/// Exit code, or the number of the signal that killed the process.
pub(crate) fn exit_parts(status: Option<ExitStatus>) -> (Option<i32>, Option<i32>) {
    match status {
        Some(s) => (s.code(), s.signal()),
        None => (None, None),
    }
}

/// `SIGTERM` etc. for messages.
pub(crate) fn signal_name(sig: i32) -> &'static str {
    nix::sys::signal::Signal::try_from(sig).map_or("unknown signal", |s| s.as_str())
}
