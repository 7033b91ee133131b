//! `write_input`: type into a background process — its standard-input pipe, or its
//! terminal (where `\u{3}` is Ctrl-C and `\n` is Enter). Only the session that
//! started the job may (see the module doc of [`super`]).
//!
//! A process that does not read keeps neither the call nor the data for long: a write
//! gives up when nothing was taken for [`STALL`] and says how much went in.

use std::time::Duration;

use serde_json::{Value, json};
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::Outcome;

use super::Jobs;
use super::read::wait_end;
use crate::exec::input::{Input, WriteEnd};
use crate::{ToolContext, ToolError};

/// Largest `data` of one call, in bytes (and `run_command`'s `stdin`).
pub(crate) const MAX_INPUT: usize = toolvisor_protocol::tools::MAX_INPUT_BYTES;
/// A write gives up when the process has taken nothing for this long.
pub(crate) const STALL: Duration = Duration::from_secs(5);
/// How long a write may take at most (within the call's deadline).
const WRITE_WAIT: Duration = Duration::from_secs(60);

/// `write_input`'s arguments.
struct Args<'a> {
    data: &'a [u8],
    close: bool,
    size: Option<(u16, u16)>,
}

impl<'a> Args<'a> {
    fn parse(args: &'a Value) -> Result<Args<'a>, ToolError> {
        let data = args
            .get("data")
            .and_then(Value::as_str)
            .ok_or_else(|| ToolError::invalid("data is required (it may be empty)"))?;
        check_size(data.len(), "data")?;
        let dim = |k: &str| {
            args.get(k)
                .and_then(Value::as_u64)
                .map(|v| u16::try_from(v).unwrap_or(u16::MAX))
        };
        let size = match (dim("rows"), dim("cols")) {
            (Some(r), Some(c)) if r > 0 && c > 0 => Some((r, c)),
            (None, None) => None,
            _ => {
                return Err(ToolError::invalid(
                    "rows and cols go together (both at least 1)",
                ));
            }
        };
        Ok(Args {
            data: data.as_bytes(),
            close: args.get("close").and_then(Value::as_bool) == Some(true),
            size,
        })
    }
}

/// `what` of `len` bytes must fit [`MAX_INPUT`].
pub(crate) fn check_size(len: usize, what: &str) -> Result<(), ToolError> {
    if len > MAX_INPUT {
        return Err(ToolError::invalid(format!(
            "{what} is {len} bytes; at most {MAX_INPUT} (1 MiB) per call: send it in parts"
        )));
    }
    Ok(())
}

impl Jobs {
    /// `write_input` (see the module doc).
    pub(crate) async fn write_input(
        &self,
        args: &Value,
        ctx: &ToolContext,
    ) -> Result<Outcome, ToolError> {
        let job = self.find(args)?;
        job.check_owner(ctx, "write to")?;
        let a = Args::parse(args)?;
        let ended = || {
            let (code, sig) = job.lock().exit;
            let how = match (code, sig) {
                (Some(c), _) => format!("exit code {c}"),
                (None, Some(s)) => format!("killed by signal {s}"),
                (None, None) => "ended".into(),
            };
            ToolError::invalid(format!(
                "{} has ended ({how}): it reads no more input",
                job.handle
            ))
        };
        if job.finished() {
            return Err(ended());
        }
        if a.size.is_some() && !job.tty {
            return Err(ToolError::invalid(format!(
                "{} does not run in a terminal (run_command tty: true): it has no size",
                job.handle
            )));
        }
        let mut slot = job.input.lock().await;
        let Some(input) = slot.as_mut() else {
            if job.finished() {
                return Err(ended());
            }
            return Err(ToolError::invalid(format!(
                "{}'s standard input is closed (by close: true, or the process closed it, \
                 or it was started with stdin or in the foreground): nothing can be written",
                job.handle
            )));
        };
        if let (Some((rows, cols)), Input::Terminal(t)) = (a.size, &*input) {
            t.resize(rows, cols)
                .map_err(|e| ToolError::internal(format!("cannot resize the terminal: {e}")))?;
        }
        let until = Some(wait_end(WRITE_WAIT, ctx));
        let (written, end) = input.write(a.data, until, Some(STALL), &ctx.cancel).await;
        let total = a.data.len();
        match end {
            WriteEnd::Done => {}
            WriteEnd::Stalled => {
                return Err(ToolError::new(
                    ErrorType::Timeout,
                    format!(
                        "{} took no input for {} s: {written} of {total} bytes were written, \
                         the rest was not (is it reading its input?)",
                        job.handle,
                        STALL.as_secs()
                    ),
                ));
            }
            WriteEnd::Closed => {
                *slot = None;
                job.lock().stdin_open = false;
                return Err(ToolError::invalid(format!(
                    "{} no longer reads its input (it closed it, or ended): {written} of \
                     {total} bytes were written",
                    job.handle
                )));
            }
            WriteEnd::Stopped => {
                let kind = if ctx.cancel.is_cancelled() {
                    ErrorType::Cancelled
                } else {
                    ErrorType::Timeout
                };
                return Err(ToolError::new(
                    kind,
                    format!("stopped after {written} of {total} bytes"),
                ));
            }
        }
        let mut closed = false;
        if a.close {
            input.end(until, &ctx.cancel).await;
            if !input.is_terminal() {
                *slot = None;
                job.lock().stdin_open = false;
                closed = true;
            }
        }
        drop(slot);
        let mut text = format!("Wrote {written} bytes to {}", job.handle);
        if a.close {
            text.push_str(if closed {
                " and closed its input"
            } else {
                " and typed end-of-file (Ctrl-D)"
            });
        }
        let mut out = Outcome::ok(text);
        out.meta = job.meta();
        out.meta.insert("written".into(), json!(written));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_checked() {
        let v = json!({"process": "w0-1", "data": "hi\n", "close": true});
        let a = Args::parse(&v).unwrap();
        assert_eq!((a.data, a.close, a.size), (&b"hi\n"[..], true, None));
        let v = json!({"process": "w0-1", "data": "", "rows": 50, "cols": 132});
        assert_eq!(Args::parse(&v).unwrap().size, Some((50, 132)));
        for bad in [
            json!({"process": "w0-1"}),
            json!({"process": "w0-1", "data": "x", "rows": 5}),
            json!({"process": "w0-1", "data": "x".repeat(MAX_INPUT + 1)}),
        ] {
            let e = Args::parse(&bad).err().expect("refused");
            assert_eq!(e.kind, ErrorType::InvalidParams);
        }
    }
}
