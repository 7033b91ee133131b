//! What a `Timeout` result tells its caller besides "too slow": which limit ended the
//! call and how to allow more (the call's `timeout_ms`, the tool's own `timeout`
//! argument, `workers.<group>.max_timeout_ms`), so an agent or a person can act on it
//! instead of retrying the same call. Called once, from the router, on every outcome.

use serde_json::Value;
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::message::CallRequest;
use toolvisor_protocol::tools::ToolDef;
use toolvisor_protocol::worker::Outcome;

use crate::config::GroupConfig;

/// Append the hint to a `Timeout` outcome's error message (other outcomes pass).
pub fn explain(group: &GroupConfig, tool: &ToolDef, req: &CallRequest, o: &mut Outcome) {
    let Some(e) = o.error.as_mut().filter(|e| e.kind == ErrorType::Timeout) else {
        return;
    };
    let hint = hint(group, tool, req);
    let error_content = format!("Error: {}", e.message);
    let what = e.message.trim_end_matches('.').to_owned();
    e.message = format!("{what}. {hint}");
    // The model reads `content`: an error's text is rebuilt, a command's output gets
    // the hint as its last line.
    if o.content == error_content {
        o.content = format!("Error: {}", e.message);
    } else {
        if !o.content.is_empty() && !o.content.ends_with('\n') {
            o.content.push('\n');
        }
        o.content.push_str(&format!("[{what}: {hint}]"));
    }
}

/// The sentence for a call of `tool` as `req` asked it, under `group`'s settings.
pub fn hint(group: &GroupConfig, tool: &ToolDef, req: &CallRequest) -> String {
    let g = &tool.group;
    let max = group.max_timeout_ms;
    let own = tool
        .timeout_arg
        .and_then(|a| req.args.get(a))
        .and_then(Value::as_u64);
    let ways = if let Some(arg) = tool.timeout_arg {
        format!(
            "the call's `timeout_ms` or {}'s `{arg}` argument",
            tool.name
        )
    } else {
        "the call's `timeout_ms`".to_owned()
    };
    let asked = req.timeout_ms.into_iter().chain(own).min();
    match asked {
        None => format!(
            "The deadline was workers.{g}.default_timeout_ms ({} ms); to allow more, pass {ways} \
             (`toolvisor call --timeout-ms MS`), up to workers.{g}.max_timeout_ms ({max} ms), \
             or raise the default in toolvisor.toml",
            group.default_timeout_ms
        ),
        Some(ms) if ms > max => format!(
            "The call asked for {ms} ms but workers.{g}.max_timeout_ms caps it at {max} ms; \
             raise that in toolvisor.toml (SIGHUP applies it) to allow more"
        ),
        Some(ms) => format!(
            "The deadline was the {ms} ms the call asked for; to allow more, raise {ways} \
             (up to workers.{g}.max_timeout_ms, {max} ms)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use toolvisor_protocol::ErrorBody;
    use toolvisor_protocol::tools::{builtin, find};

    fn req(tool: &str, args: Value, timeout_ms: Option<u64>) -> CallRequest {
        let mut r = CallRequest::new("c", tool, args);
        r.timeout_ms = timeout_ms;
        r
    }

    #[test]
    fn each_limit_says_how_to_raise_it() {
        let tools = builtin();
        let run = find(&tools, "run_command").unwrap();
        let g = GroupConfig::default();
        let h = hint(
            &g,
            run,
            &req("run_command", json!({"command": "cargo test"}), None),
        );
        assert!(
            h.contains("workers.exec.default_timeout_ms (30000 ms)"),
            "{h}"
        );
        assert!(
            h.contains("`timeout` argument") && h.contains("--timeout-ms"),
            "{h}"
        );
        assert!(h.contains("workers.exec.max_timeout_ms (600000 ms)"), "{h}");
        let h = hint(
            &g,
            run,
            &req(
                "run_command",
                json!({"command": "x", "timeout": 5000}),
                Some(9000),
            ),
        );
        assert!(h.contains("the 5000 ms the call asked for"), "{h}");
        let h = hint(
            &g,
            run,
            &req("run_command", json!({"command": "x"}), Some(700_000)),
        );
        assert!(h.contains("caps it at 600000 ms"), "{h}");
        let grep = find(&tools, "grep").unwrap();
        let h = hint(&g, grep, &req("grep", json!({"pattern": "x"}), None));
        assert!(
            h.contains("workers.search.") && !h.contains("`timeout` argument"),
            "{h}"
        );
    }

    #[test]
    fn only_timeouts_get_the_hint() {
        let tools = builtin();
        let run = find(&tools, "run_command").unwrap();
        let r = req("run_command", json!({"command": "x"}), None);
        let mut o = Outcome::err(ErrorBody::new(
            ErrorType::Timeout,
            "command timed out after 30000 ms and was killed",
        ));
        explain(&GroupConfig::default(), run, &r, &mut o);
        let m = o.error.as_ref().unwrap().message.clone();
        assert!(
            m.starts_with("command timed out after 30000 ms and was killed. The deadline"),
            "{m}"
        );
        assert_eq!(o.content, format!("Error: {m}"));
        // A command's output keeps its text and gets the hint as a last line.
        let mut o = Outcome::err(ErrorBody::new(
            ErrorType::Timeout,
            "command timed out after 30000 ms and was killed",
        ));
        o.content = "compiling…".into();
        explain(&GroupConfig::default(), run, &r, &mut o);
        let last = o.content.lines().last().unwrap();
        assert!(o.content.starts_with("compiling…\n["), "{}", o.content);
        assert!(
            last.starts_with("[command timed out after 30000 ms and was killed: The deadline"),
            "{last}"
        );
        let mut o = Outcome::err(ErrorBody::new(ErrorType::Cancelled, "cancelled"));
        explain(&GroupConfig::default(), run, &r, &mut o);
        assert_eq!(o.error.unwrap().message, "cancelled");
    }
}
