//! The `web` group's tools: [`fetch`] for `web_fetch` and [`search`] for `web_search`.
//!
//! This worker has no write access anywhere (Landlock, like `search`) and needs
//! nothing of the workspace. Every call is bounded by `[web] timeout_ms` and the call's
//! own deadline, stops at once on a cancel, and reads at most `[web] max_bytes`.
//! Addresses: [`address`]; connections: [`connect`]; text: [`html`].

pub mod address;
pub mod connect;
pub mod fetch;
pub mod html;
pub mod search;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::tools::{self, web_search};
use toolvisor_protocol::worker::Outcome;

use crate::context::outcome;
use crate::{ToolContext, ToolError, truncate};
use address::AddressRule;
use fetch::FetchOptions;

/// A `FetchError`.
pub fn fetch_error(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorType::FetchError, message)
}

/// Run one `web` tool to its outcome, within its time and its cancel.
pub async fn run(tool: &str, args: &Value, ctx: &ToolContext) -> Outcome {
    let web = &ctx.init.web;
    let mut deadline = Instant::now() + Duration::from_millis(web.timeout_ms);
    if let Some(d) = ctx.deadline {
        deadline = deadline.min(d);
    }
    let work = async {
        match tool {
            tools::web_fetch::NAME => web_fetch(args, ctx).await,
            tools::web_search::NAME => web_search(args, ctx).await,
            other => Err(ToolError::new(
                ErrorType::ToolNotFound,
                format!("the web group has no tool `{other}`"),
            )),
        }
    };
    let timeout = tokio::time::timeout_at(deadline.into(), work);
    let result = tokio::select! {
        r = timeout => r.unwrap_or_else(|_| Err(timed_out(tool, web.timeout_ms))),
        _ = ctx.cancel.cancelled() => Err(ToolError::new(ErrorType::Cancelled, "the call was cancelled")),
    };
    outcome(result)
}

/// Past `[web] timeout_ms` the tool's own error; past the call's deadline the
/// supervisor answers `Timeout` itself.
fn timed_out(tool: &str, ms: u64) -> ToolError {
    let kind = if tool == tools::web_search::NAME {
        ErrorType::SearchError
    } else {
        ErrorType::FetchError
    };
    ToolError::new(
        kind,
        format!("no complete answer within {ms} ms (web.timeout_ms)"),
    )
}

async fn web_fetch(args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
    let url = fetch::parse_url(args.get("url").and_then(Value::as_str).unwrap_or_default())?;
    let selector = args
        .get("selector")
        .and_then(Value::as_str)
        .map(str::to_owned);
    let max_chars = args.get("maxLength").and_then(Value::as_u64);
    let opts = FetchOptions {
        rule: AddressRule::from_settings(ctx.init.web.allow_private),
        max_bytes: ctx.init.web.max_bytes,
        follow: true,
    };
    let page = fetch::fetch(url, &opts).await?;
    let kind = html::classify(page.content_type.as_deref(), &page.body)?;
    let bytes = page.body.len();
    let mut meta = serde_json::Map::new();
    let text = match (&selector, kind) {
        (Some(sel), html::Kind::Html) => {
            let (text, matches) = html::select(page.body, sel.clone()).await?;
            meta.insert("matches".into(), json!(matches));
            text
        }
        (Some(_), html::Kind::Text) => {
            return Err(ToolError::invalid(format!(
                "`selector` needs an HTML page; this one is {}",
                page.content_type.as_deref().unwrap_or("not HTML")
            )));
        }
        (None, html::Kind::Html) => html::readable(page.body).await?,
        (None, html::Kind::Text) => String::from_utf8_lossy(&page.body).into_owned(),
    };
    let chars = text.chars().count();
    let mut o = match max_chars {
        Some(max) => Outcome::ok(keep_chars(&text, max)),
        None => {
            let cut = truncate::file(&text, &ctx.init.limits);
            let mut o = Outcome::ok(cut.text);
            o.truncated = cut.truncated;
            o
        }
    };
    o.display = format!(
        "Fetched {chars} characters from {}",
        fetch::shown(page.url.as_str())
    );
    meta.insert("url".into(), json!(page.url.as_str()));
    meta.insert("status".into(), json!(page.status));
    meta.insert("content_type".into(), json!(page.content_type));
    meta.insert("bytes".into(), json!(bytes));
    meta.insert("redirects".into(), json!(page.redirects));
    o.meta.extend(meta);
    Ok(o)
}

/// The first `max` characters, then `[Content truncated: N characters omitted]`.
pub fn keep_chars(text: &str, max: u64) -> String {
    let max = usize::try_from(max).unwrap_or(usize::MAX);
    match text.char_indices().nth(max) {
        None => text.to_owned(),
        Some((cut, _)) => {
            let omitted = text[cut..].chars().count();
            format!(
                "{}\n\n[Content truncated: {omitted} characters omitted]",
                &text[..cut]
            )
        }
    }
}

async fn web_search(args: &Value, ctx: &ToolContext) -> Result<Outcome, ToolError> {
    let query = args
        .get("query")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let n = args
        .get("numResults")
        .and_then(Value::as_u64)
        .unwrap_or(web_search::DEFAULT_RESULTS)
        .min(web_search::MAX_RESULTS) as usize;
    let web = &ctx.init.web;
    let hits = search::search(web.search_url.as_deref(), query, n, web.max_bytes).await?;
    let mut o = Outcome::ok(search::format(&hits));
    o.display = format!("Found {} results for `{query}`", hits.len());
    o.meta.insert("results".into(), json!(hits.len()));
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_length_counts_characters_and_says_what_it_left_out() {
        assert_eq!(
            keep_chars("héllo wörld", 5),
            "héllo\n\n[Content truncated: 6 characters omitted]"
        );
        assert_eq!(keep_chars("short", 5), "short");
        assert_eq!(keep_chars("short", 50), "short");
        assert_eq!(
            keep_chars("😀😀😀", 1),
            "😀\n\n[Content truncated: 2 characters omitted]"
        );
    }
}
