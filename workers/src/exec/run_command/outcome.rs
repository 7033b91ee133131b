//! A finished command as the tool reports it: its content, exit code or signal, and
//! whether it timed out.

use super::*;

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
