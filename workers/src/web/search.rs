//! `web_search` against the operator's SearXNG-compatible endpoint:
//! `GET <search_url>?q=<query>&format=json`, answering `{"results": [{title, url,
//! content}, …]}`. The address rule of `web_fetch` does not apply (the operator chose
//! the endpoint); a redirect, a non-2xx answer or a body that is not such JSON is a
//! `SearchError` naming the problem.

use serde::Deserialize;
use toolvisor_protocol::ErrorType;
use url::Url;

use super::address::AddressRule;
use super::fetch::{self, FetchOptions};
use crate::ToolError;

/// One result as the endpoint gives it (missing fields are empty).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Hit {
    /// The result's title.
    pub title: String,
    /// Its address.
    pub url: String,
    /// The endpoint's snippet.
    pub content: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Answer {
    results: Vec<Hit>,
}

fn search_error(message: impl Into<String>) -> ToolError {
    ToolError::new(ErrorType::SearchError, message)
}

/// The endpoint's URL for `query`.
pub fn query_url(base: &str, query: &str) -> Result<Url, ToolError> {
    let mut url = Url::parse(base)
        .map_err(|e| search_error(format!("web.search_url is not a valid URL: {e}")))?;
    url.query_pairs_mut()
        .append_pair("q", query)
        .append_pair("format", "json");
    Ok(url)
}

/// Ask the endpoint and return at most `n` results.
pub async fn search(
    base: Option<&str>,
    query: &str,
    n: usize,
    max_bytes: u64,
) -> Result<Vec<Hit>, ToolError> {
    let Some(base) = base else {
        return Err(search_error(
            "no search endpoint is configured: set [web] search_url to a SearXNG-compatible URL",
        ));
    };
    let url = query_url(base, query)?;
    let opts = FetchOptions {
        rule: AddressRule {
            allow_private: true,
            exempt: Vec::new(),
        },
        max_bytes,
        follow: false,
    };
    let page = fetch::fetch(url, &opts)
        .await
        .map_err(|e| search_error(format!("the search endpoint failed: {}", e.message)))?;
    let answer: Answer = serde_json::from_slice(&page.body).map_err(|e| {
        search_error(format!(
            "the search endpoint did not answer with JSON results: {e}"
        ))
    })?;
    Ok(answer.results.into_iter().take(n).collect())
}

/// `N. title\n   url\n   snippet`, joined by a blank line.
pub fn format(hits: &[Hit]) -> String {
    hits.iter()
        .enumerate()
        .map(|(i, h)| {
            format!(
                "{}. {}\n   {}\n   {}",
                i + 1,
                one_line(&h.title),
                one_line(&h.url),
                one_line(&h.content)
            )
        })
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// Whitespace (newlines included) collapsed to single spaces, so each field is a line.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_numbered_blocks() {
        let hits = vec![
            Hit {
                title: "Rust".into(),
                url: "https://rust-lang.org".into(),
                content: "A language\nempowering everyone".into(),
            },
            Hit {
                title: "Tokio".into(),
                url: "https://tokio.rs".into(),
                content: String::new(),
            },
        ];
        assert_eq!(
            format(&hits),
            "1. Rust\n   https://rust-lang.org\n   A language empowering everyone\n\n2. Tokio\n   https://tokio.rs\n   "
        );
        assert_eq!(format(&[]), "");
    }

    #[test]
    fn the_query_is_encoded_into_the_endpoint() {
        let u = query_url("http://127.0.0.1:8888/search?lang=en", "a b&c").unwrap();
        assert_eq!(
            u.as_str(),
            "http://127.0.0.1:8888/search?lang=en&q=a+b%26c&format=json"
        );
    }
}
