//! `run_command` in the foreground (background starts are in [`super::jobs`]).

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::ExitStatus;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use toolvisor_protocol::worker::Outcome;
use toolvisor_protocol::{ErrorBody, ErrorType, Status};

use super::ExecState;
use super::cgroup::CommandCgroup;
use super::egress::Proxy;
use super::input::Prepared;
use super::jobs::{NewJob, ReadySpec, Yielded};
use super::launch::{Bounds, CpuWatch, Ended, Holder, Running, Spec, Stop, supervise};
use super::output::{Capture, Coalescer, sanitize_name};
use super::stage::{Collected, Staging};
use crate::{ToolContext, ToolError};
use toolvisor_sandbox::reap::report::Report;

mod outcome;
mod resources;

pub(crate) use outcome::{exit_parts, outcome};
pub(crate) use resources::cpu_watch;
use resources::resources;

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
    /// Written to the command's standard input, which is then closed.
    pub stdin: Option<&'a str>,
    /// Run it in a terminal of (rows, columns).
    pub tty: Option<(u16, u16)>,
    /// Let a foreground command go on in the background after this long.
    pub yield_after: Option<Duration>,
    /// With `background`: wait until the job is up.
    pub ready: Option<ReadySpec>,
    /// With `background`: ports to publish on the host's loopback.
    pub expose: Vec<u16>,
    /// Hold the command's workspace changes instead of writing them.
    pub stage: bool,
    /// What the call's sandbox gains (`writable`, `reveal`).
    pub widen: super::launch::Widen,
}

/// A terminal's size when the call gives none.
pub(crate) const DEFAULT_SIZE: (u16, u16) = (24, 80);

impl<'a> RunArgs<'a> {
    pub(crate) fn parse(args: &'a Value) -> Result<Self, ToolError> {
        let command = args
            .get("command")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .ok_or_else(|| ToolError::invalid("command is required"))?;
        let flag = |k: &str| args.get(k).and_then(Value::as_bool) == Some(true);
        let ms = |k: &str| {
            args.get(k)
                .and_then(Value::as_u64)
                .map(Duration::from_millis)
        };
        let background = flag("background");
        let stage = flag("stage");
        if stage && (background || flag("tty")) {
            return Err(ToolError::invalid(
                "stage holds a foreground command's changes: it cannot run in the background \
                 or in a terminal (tty)",
            ));
        }
        let ready = match args.get("ready") {
            Some(_) if !background => {
                return Err(ToolError::invalid(
                    "ready waits for a background process: add background: true",
                ));
            }
            Some(r) => Some(ReadySpec::parse(r)?),
            None => None,
        };
        if background && args.get("yield_ms").is_some() {
            return Err(ToolError::invalid(
                "yield_ms lets a foreground command go on in the background; a background \
                 process returns at once already",
            ));
        }
        let expose: Vec<u16> = match args.get("expose") {
            None => Vec::new(),
            Some(_) if !background => {
                return Err(ToolError::invalid(
                    "expose publishes a background process's ports: add background: true",
                ));
            }
            Some(v) => v
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_u64)
                        .filter_map(|p| u16::try_from(p).ok())
                        .filter(|&p| p > 0)
                        .collect()
                })
                .unwrap_or_default(),
        };
        let stdin = args.get("stdin").and_then(Value::as_str);
        if let Some(s) = stdin {
            super::jobs::check_input_size(s.len(), "stdin")?;
        }
        Ok(RunArgs {
            command,
            cwd: args.get("cwd").and_then(Value::as_str),
            timeout: ms("timeout"),
            background,
            env: args.get("env"),
            stdin,
            tty: terminal_size(args)?,
            yield_after: ms("yield_ms"),
            ready,
            expose,
            stage,
            widen: super::widen::parse(args)?,
        })
    }
}

/// `(rows, cols)` with `tty: true` (defaults 24×80); sizes without it are an error.
fn terminal_size(args: &Value) -> Result<Option<(u16, u16)>, ToolError> {
    let dim = |k: &str, d: u16| {
        args.get(k)
            .and_then(Value::as_u64)
            .map_or(d, |v| u16::try_from(v).unwrap_or(u16::MAX).max(1))
    };
    let sized = args.get("rows").is_some() || args.get("cols").is_some();
    match args.get("tty").and_then(Value::as_bool) {
        Some(true) => Ok(Some((
            dim("rows", DEFAULT_SIZE.0),
            dim("cols", DEFAULT_SIZE.1),
        ))),
        _ if sized => Err(ToolError::invalid(
            "rows and cols are the size of a terminal: add tty: true",
        )),
        _ => Ok(None),
    }
}

/// Run the command to its end (or its deadline) and report its output and status; or,
/// once it has run `yield_ms`, let it go on as a background process.
pub(crate) async fn run(
    state: &ExecState,
    args: &Value,
    ctx: &ToolContext,
) -> Result<Outcome, ToolError> {
    let mut a = RunArgs::parse(args)?;
    if a.background {
        return state.jobs.start(state, &a, ctx).await;
    }
    if a.stage {
        // A staged command's changes are read when it ends: it never goes on in the
        // background.
        a.yield_after = None;
    } else if a.yield_after.is_none() {
        a.yield_after = ctx.init.exec.yield_ms.map(Duration::from_millis);
    }
    let staging = match a.stage {
        true => Some(stage_for(state, ctx)?),
        false => None,
    };
    let (deadline, own_timeout) = command_deadline(a.timeout, ctx.deadline);
    let pipes = (ctx.output.is_none(), a.stdin.is_some());
    let launched = launch(state, &a, ctx, pipes, staging.as_ref().map(Staging::dir)).await;
    let (mut running, cgroup) = match launched {
        Ok(l) => l,
        Err(e) => {
            if let Some(s) = staging {
                s.discard();
            }
            return Err(e);
        }
    };
    let terminal = running.attach_terminal(deadline.into()).await?;
    let input = terminal.or_else(|| running.stdin.take());
    // The feeder outlives the call when the command yields: the job reads `stdin` at
    // its own pace. It stops with the command (a closed pipe, a closed terminal).
    let Prepared {
        input,
        open,
        feeder,
    } = super::input::prepare(input, a.stdin, &crate::CancelFlag::new());
    let arts = Arc::clone(&state.artifacts);
    let stem = sanitize_name(&ctx.name, ctx.call);
    let open_artifact = Box::new(move || match arts.create(&stem) {
        Ok(f) => Some(f),
        Err(e) => {
            tracing::warn!("cannot create the artifact for call {stem}: {e}");
            None
        }
    });
    let mut capture = Capture::new(&ctx.init.limits, open_artifact).terminal(a.tty.is_some());
    let mut stream = ctx
        .output
        .clone()
        .map(|s| Coalescer::new(s).terminal(a.tty.is_some()));
    let limits = &ctx.init.exec.sandbox.limits;
    let mut yield_at = a
        .yield_after
        .map(|d| tokio::time::Instant::now() + d)
        .filter(|&t| t < tokio::time::Instant::from_std(deadline));
    let ended = loop {
        let bounds = Bounds {
            deadline: Some(deadline.into()),
            cancel: &ctx.cancel,
            cpu: cpu_watch(cgroup.as_ref(), limits.cpu_s),
            yield_at,
        };
        let ended = supervise(&mut running, &mut capture, stream.as_mut(), bounds).await;
        // The command ended or goes on in the background: the next spare may start.
        state.spares.refill();
        if !ended.yielded {
            break ended;
        }
        // No room for one more job: it stays in the foreground.
        let Ok(handle) = state.jobs.reserve_for_yield(&ctx.session) else {
            yield_at = None;
            continue;
        };
        let job = NewJob {
            command: a.command.to_owned(),
            proc: running,
            input,
            stdin_open: open,
            deadline: Some(deadline.into()),
            cgroup,
            limits: limits.clone(),
        };
        return Ok(yield_to_background(state, ctx, (handle, job), capture));
    };
    if let Some(f) = feeder {
        f.abort();
    }
    let report = running.report();
    if let Some(why) = report.as_ref().and_then(|r| r.setup_error.clone()) {
        if let Some(s) = staging {
            s.discard();
            return Err(ToolError::new(
                ErrorType::SandboxUnverified,
                format!(
                    "the staged command's sandbox could not be set up, so it did not run: {why}"
                ),
            ));
        }
        return Err(ToolError::internal(format!(
            "the command's sandbox could not be set up, so it did not run: {why}"
        )));
    }
    let (content, truncated) = capture.finish(super::workspace(ctx));
    let mut out = outcome(content, &ended, own_timeout);
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
    super::egress::add_network_denied(&mut out, running.egress.as_ref());
    running.retire(cgroup).await;
    if let Some(s) = staging {
        let roots = state.launcher.stage_roots().unwrap_or_default();
        add_staged(&mut out, s.collect(roots)?, &ctx.init.limits);
    }
    Ok(out)
}

/// A staging directory for a command of this worker, or why none can be staged: the
/// sandbox is off or the host has no user namespaces (the command must never run
/// unstaged instead).
fn stage_for(state: &ExecState, ctx: &ToolContext) -> Result<Staging, ToolError> {
    let Some(roots) = state.launcher.stage_roots() else {
        return Err(ToolError::new(
            ErrorType::SandboxUnverified,
            "stage needs the command sandbox (an overlay in the command's own user and \
             mount namespaces), and commands here run without namespaces (sandbox off, or \
             the host refuses user namespaces): the command did not run",
        ));
    };
    Staging::create(&ctx.init.state_dir, roots.len())
}

/// Add a staged command's held changes to its result: `meta.changes`, their diff
/// after the output (cut like any output), and the record the supervisor keeps behind
/// `meta.token` (`meta.staged`, taken out before the client sees the result).
fn add_staged(out: &mut Outcome, held: Collected, limits: &toolvisor_protocol::worker::Limits) {
    let changes: Vec<Value> = held
        .manifest
        .changes
        .iter()
        .map(|h| json!({"path": h.path, "kind": h.kind.as_str()}))
        .collect();
    let block = match changes.len() {
        0 => "[staged: no workspace changes]\n".to_owned(),
        n => {
            let cut = crate::truncate::text(&held.diff, limits.shell_max, limits.shell_max);
            format!(
                "[staged: {n} change(s) held, not written; apply_file_change with meta.token writes them]\n{}",
                cut.text
            )
        }
    };
    for text in [&mut out.content, &mut out.display] {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&block);
    }
    out.meta.insert("changes".into(), Value::Array(changes));
    if !held.manifest.changes.is_empty() {
        match serde_json::to_value(&held.manifest) {
            Ok(v) => {
                out.meta.insert(STAGED_META.into(), v);
            }
            Err(e) => tracing::warn!("cannot record the staged changes: {e}"),
        }
    }
}

/// The `meta` field that carries a staged command's record to the supervisor.
pub(crate) const STAGED_META: &str = toolvisor_protocol::worker::STAGED_META;

/// When the command must end, and its own `timeout` when that is what ends it (for the
/// message). The call's deadline (`timeout_ms`, else the group's `default_timeout_ms`,
/// set by the supervisor) bounds it; the tool's own `timeout` argument can only shorten
/// it. [`DEFAULT_TIMEOUT`] applies only to a call that came with no deadline at all.
fn command_deadline(
    own: Option<Duration>,
    call: Option<std::time::Instant>,
) -> (std::time::Instant, Option<Duration>) {
    let now = std::time::Instant::now();
    match (own.map(|t| (now + t, t)), call) {
        (Some((at, t)), Some(d)) if at <= d => (at, Some(t)),
        (_, Some(d)) => (d, None),
        (Some((at, t)), None) => (at, Some(t)),
        (None, None) => (now + DEFAULT_TIMEOUT, Some(DEFAULT_TIMEOUT)),
    }
}

/// Start the command of `a` (in its working directory, with its environment and a
/// cgroup of its own): its process and cgroup. `merged`: one pipe for stdout and
/// stderr; `stdin_pipe`: a pipe for its input (else `/dev/null`, or its terminal).
/// In the worker's spare sandbox when it fits, else with a shim started for it.
pub(crate) async fn launch(
    state: &ExecState,
    a: &RunArgs<'_>,
    ctx: &ToolContext,
    (merged, stdin_pipe): (bool, bool),
    stage: Option<&Path>,
) -> Result<(Running, Option<CommandCgroup>), ToolError> {
    let (cwd, cwd_path) = super::open_cwd(ctx, a.cwd)?;
    let mut env = super::env::build(std::env::vars(), &ctx.init.exec, a.env, a.tty.is_some())?;
    let widen = super::widen::check(a.widen.clone(), &ctx.init.exec.sandbox.unrevealable)?;
    let (loopback, proxy) = network(state, a, ctx).await?;
    if let Some(p) = &proxy {
        env.extend(p.env());
    }
    let mut spec = Spec {
        command: a.command,
        env: &env,
        cwd: &cwd,
        cwd_path: &cwd_path,
        instance: &ctx.init.exec.instance,
        merged,
        network: ctx.network,
        loopback: loopback.as_deref(),
        cgroup: None,
        stdin_pipe,
        tty: a.tty,
        stage,
        widen: &widen,
    };
    if let Some(started) = state.spares.run(&spec).await? {
        return Ok(started);
    }
    let cgroup = state
        .cgroups
        .create()
        .map_err(|e| ToolError::internal(format!("cannot make the command's cgroup: {e}")))?;
    spec.cgroup = cgroup.as_ref();
    let mut running = state.launcher.spawn(&spec)?;
    running.egress = proxy;
    Ok((running, cgroup))
}

/// The loopback a command joins and its egress proxy. A command whose network is a
/// domain list gets a loopback of its own with the proxy listening on it (nothing else
/// reaches the proxy); else, without the host's network, the session's loopback when
/// it has one, started for a command that may become a background process (a later
/// command must reach what it listens on).
async fn network(
    state: &ExecState,
    a: &RunArgs<'_>,
    ctx: &ToolContext,
) -> Result<(Option<Arc<Holder>>, Option<Proxy>), ToolError> {
    state.loopbacks.sweep(|s| state.jobs.busy(s));
    if ctx.network {
        return Ok((None, None));
    }
    if let Some(e) = &ctx.egress {
        let own = Arc::new(state.loopbacks.private().await?);
        let asks = Arc::clone(&state.asks);
        let proxy = Proxy::start(&own, e.egress.clone(), ctx.call, e.out.clone(), asks).await?;
        return Ok((Some(own), Some(proxy)));
    }
    let may_last = a.background || a.yield_after.is_some();
    Ok((state.loopbacks.get(&ctx.session, may_last).await?, None))
}

/// Turn a yielded command into the job `handle` of the calling session; the call's
/// result is its output so far (which counts as read), `meta.process` and
/// `meta.running: true`.
fn yield_to_background(
    state: &ExecState,
    ctx: &ToolContext,
    (handle, job): (String, NewJob),
    capture: Capture,
) -> Outcome {
    let bytes = capture.total();
    let (content, truncated, log) = capture.yield_now(super::workspace(ctx));
    let meta = match state
        .jobs
        .adopt(state, handle, Yielded { job, log, bytes }, &ctx.session)
    {
        Ok(meta) => meta,
        Err(e) => {
            tracing::warn!("a command could not go on in the background: {e}");
            let mut out = Outcome::err(ErrorBody::new(
                ErrorType::InternalError,
                format!("the command could not go on in the background, so it was stopped: {e}"),
            ));
            out.content = content;
            return out;
        }
    };
    let handle = meta
        .get("process")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let mut out = Outcome::ok(content);
    let sep = if out.content.is_empty() || out.content.ends_with('\n') {
        ""
    } else {
        "\n"
    };
    out.display = format!(
        "{}{sep}[still running: it goes on in the background as {handle}]",
        out.content
    );
    out.truncated = truncated;
    out.meta = meta;
    out
}

#[cfg(test)]
mod tests;
