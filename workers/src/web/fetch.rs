//! Fetching a URL: at most [`MAX_REDIRECTS`] redirects, each hop checked like the
//! first (scheme, credentials, the addresses it reaches); the body read as it streams
//! and refused past `[web] max_bytes`, so a 2 GiB body or an endless stream costs at
//! most that much memory and the call's time.

use http_body_util::BodyExt;
use hyper::StatusCode;
use hyper::body::Incoming;
use toolvisor_protocol::ErrorType;
use url::Url;

use super::address::AddressRule;
use super::{connect, fetch_error};
use crate::ToolError;

/// Redirects followed before the fetch fails.
pub const MAX_REDIRECTS: usize = 5;

/// A fetched response: where it ended up, and its body.
#[derive(Debug)]
pub struct Page {
    /// The final URL, after redirects.
    pub url: Url,
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type` header, if any.
    pub content_type: Option<String>,
    /// The body, at most `max_bytes`.
    pub body: Vec<u8>,
    /// How many redirects were followed.
    pub redirects: usize,
}

/// How a fetch treats redirects and addresses.
#[derive(Clone, Debug)]
pub struct FetchOptions {
    /// Which addresses may be reached (every hop is checked).
    pub rule: AddressRule,
    /// The most bytes a body may have.
    pub max_bytes: u64,
    /// Follow redirects (web_fetch) or treat one as a failure (a search endpoint).
    pub follow: bool,
}

/// Parse and check a URL the way every hop is checked.
pub fn parse_url(text: &str) -> Result<Url, ToolError> {
    let url = Url::parse(text.trim())
        .map_err(|e| fetch_error(format!("`{}` is not a valid URL: {e}", shown(text))))?;
    check_url(&url)?;
    Ok(url)
}

/// Only http and https, with a host, and no credentials in the URL.
fn check_url(url: &Url) -> Result<(), ToolError> {
    match url.scheme() {
        "http" | "https" => {}
        other => {
            return Err(fetch_error(format!(
                "only http and https URLs can be fetched, not `{other}:`"
            )));
        }
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err(fetch_error(
            "URLs with credentials (user:password@host) are refused",
        ));
    }
    if url.host().is_none() {
        return Err(fetch_error("the URL has no host"));
    }
    Ok(())
}

/// Fetch `url`, following checked redirects; a non-2xx end is `HttpError`.
pub async fn fetch(mut url: Url, opts: &FetchOptions) -> Result<Page, ToolError> {
    for hop in 0..=MAX_REDIRECTS {
        check_url(&url)?;
        let addrs = connect::addresses(&url, &opts.rule).await?;
        let stream = connect::tcp(&addrs, &opts.rule).await?;
        let resp = connect::get(stream, &url).await?;
        let status = resp.status();
        if status.is_redirection()
            && let Some(next) = location(&resp, &url)?
        {
            if !opts.follow {
                return Err(http_error(status, "a redirect"));
            }
            if hop == MAX_REDIRECTS {
                return Err(fetch_error(format!(
                    "more than {MAX_REDIRECTS} redirects (the last to {})",
                    shown(next.as_str())
                )));
            }
            url = next;
            continue;
        }
        if !status.is_success() {
            return Err(http_error(status, ""));
        }
        let content_type = header(&resp, hyper::header::CONTENT_TYPE);
        if let Some(enc) = header(&resp, hyper::header::CONTENT_ENCODING)
            .filter(|e| !e.eq_ignore_ascii_case("identity"))
        {
            return Err(fetch_error(format!(
                "the server sent `{enc}`-encoded content although only identity was accepted"
            )));
        }
        let declared = header(&resp, hyper::header::CONTENT_LENGTH).and_then(|l| l.parse().ok());
        if let Some(len) = declared.filter(|&l: &u64| l > opts.max_bytes) {
            return Err(too_large(opts.max_bytes, Some(len)));
        }
        let body = read_capped(resp.into_body(), opts.max_bytes).await?;
        return Ok(Page {
            url,
            status: status.as_u16(),
            content_type,
            body,
            redirects: hop,
        });
    }
    Err(fetch_error("too many redirects"))
}

/// The next URL of a redirect, relative to the current one; `None` when the response
/// has no `Location` (it is then judged by its status).
fn location(resp: &hyper::Response<Incoming>, base: &Url) -> Result<Option<Url>, ToolError> {
    let Some(loc) = resp.headers().get(hyper::header::LOCATION) else {
        return Ok(None);
    };
    let loc = String::from_utf8_lossy(loc.as_bytes());
    base.join(&loc).map(Some).map_err(|e| {
        fetch_error(format!(
            "the redirect to `{}` is not a valid URL: {e}",
            shown(&loc)
        ))
    })
}

fn header(resp: &hyper::Response<Incoming>, name: hyper::header::HeaderName) -> Option<String> {
    resp.headers()
        .get(name)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).trim().to_owned())
}

/// Read the body as it streams, failing as soon as it passes `max` bytes.
async fn read_capped(mut body: Incoming, max: u64) -> Result<Vec<u8>, ToolError> {
    let mut buf = Vec::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| fetch_error(format!("reading the response failed: {e}")))?;
        if let Ok(data) = frame.into_data() {
            if (buf.len() + data.len()) as u64 > max {
                return Err(too_large(max, None));
            }
            buf.extend_from_slice(&data);
        }
    }
    Ok(buf)
}

fn too_large(max: u64, declared: Option<u64>) -> ToolError {
    let declared = declared.map_or_else(String::new, |d| format!(" ({d} bytes declared)"));
    fetch_error(format!(
        "the response is larger than web.max_bytes ({max} bytes){declared}; the download was stopped"
    ))
}

/// `HttpError` with the status: `HTTP 404: Not Found`.
fn http_error(status: StatusCode, what: &str) -> ToolError {
    let reason = status.canonical_reason().unwrap_or("");
    let what = if what.is_empty() {
        String::new()
    } else {
        format!(" ({what})")
    };
    ToolError::new(
        ErrorType::HttpError,
        format!("HTTP {}: {reason}{what}", status.as_u16()),
    )
}

/// A URL in a message, cut to a readable length.
pub fn shown(url: &str) -> String {
    const MAX: usize = 200;
    match url.char_indices().nth(MAX) {
        Some((i, _)) => format!("{}…", &url[..i]),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_http_urls_without_credentials_pass() {
        assert!(parse_url("http://example.com/a?b=c").is_ok());
        assert!(parse_url("https://example.com").is_ok());
        for (bad, needle) in [
            ("file:///etc/passwd", "not `file:`"),
            ("ftp://example.com/", "not `ftp:`"),
            ("gopher://x/", "not `gopher:`"),
            ("javascript:alert(1)", "not `javascript:`"),
            ("data:text/plain,hi", "not `data:`"),
            ("http://user:pw@example.com/", "credentials"),
            ("http://user@example.com/", "credentials"),
            ("not a url", "not a valid URL"),
            ("http://", "not a valid URL"),
        ] {
            let e = parse_url(bad).unwrap_err();
            assert_eq!(e.kind, ErrorType::FetchError, "{bad}");
            assert!(e.message.contains(needle), "{bad}: {}", e.message);
        }
    }

    #[test]
    fn http_errors_name_the_status() {
        let e = http_error(StatusCode::NOT_FOUND, "");
        assert_eq!(e.kind, ErrorType::HttpError);
        assert_eq!(e.message, "HTTP 404: Not Found");
    }
}
