//! A fetched body as text: HTML as readable text (`html2text`: headings, lists, links
//! as footnotes; scripts, styles and `<head>` dropped), or the text of the elements a
//! CSS selector matches (`scraper`), one per line; other text verbatim. Bytes that are
//! not UTF-8 become U+FFFD.
//!
//! HTML parsing and rendering run on a thread of their own with a large stack: a page
//! nested a hundred thousand levels deep is slow, not a crash of the worker.

use scraper::{ElementRef, Html, Selector};
use toolvisor_protocol::ErrorType;

use super::fetch_error;
use crate::ToolError;

/// Stack of the thread that parses and renders HTML.
const HTML_STACK: usize = 64 << 20;

/// Columns the readable text may use before a paragraph wraps: wide enough that
/// paragraphs stay one line each.
const WIDTH: usize = 100_000;

/// Most matches of a selector whose text is taken (each costs a walk of its subtree).
const MAX_MATCHES: usize = 10_000;

/// Most bytes of selected text gathered; the rest would be cut anyway.
const MAX_SELECTED: usize = 16 << 20;

/// Most nodes visited to gather the matches' text, all matches together: nested
/// matches share their subtrees, and a page built for it must not cost quadratic time.
const MAX_VISITS: usize = 8 << 20;

/// The deepest nesting of elements rendered; a deeper page is refused (parsing and
/// rendering cost grows with depth times size, so a page built deep could pin a CPU).
pub const MAX_DEPTH: usize = 512;

/// Elements that have no end tag, or that the parser closes by itself when the next
/// one opens: they do not nest.
const NON_NESTING: &[&str] = &[
    "area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source",
    "track", "wbr", "p", "li", "dt", "dd", "tr", "td", "th", "option", "optgroup", "thead",
    "tbody", "tfoot", "rb", "rt", "rp",
];

/// Elements whose content is raw text up to their end tag.
const RAW: &[&str] = &["script", "style", "textarea", "title", "xmp", "plaintext"];

/// Elements whose text is never page text.
const HIDDEN: &[&str] = &["script", "style", "noscript", "template", "head", "title"];

/// Elements that end a run of text (a space separates their text from the next).
const BLOCKS: &[&str] = &[
    "address",
    "article",
    "aside",
    "blockquote",
    "br",
    "dd",
    "div",
    "dl",
    "dt",
    "fieldset",
    "figcaption",
    "figure",
    "footer",
    "form",
    "h1",
    "h2",
    "h3",
    "h4",
    "h5",
    "h6",
    "header",
    "hr",
    "li",
    "main",
    "nav",
    "ol",
    "p",
    "pre",
    "section",
    "table",
    "td",
    "th",
    "tr",
    "ul",
];

/// How a body is turned into text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// HTML: parsed and rendered as readable text.
    Html,
    /// Plain text (or anything else textual): kept as it is.
    Text,
}

/// Decide by the `Content-Type` (or, without one, by the first bytes); binary content
/// is refused like a binary file.
pub fn classify(content_type: Option<&str>, body: &[u8]) -> Result<Kind, ToolError> {
    let mime = content_type
        .and_then(|c| c.split(';').next())
        .map(|m| m.trim().to_ascii_lowercase())
        .unwrap_or_default();
    if mime == "text/html" || mime == "application/xhtml+xml" {
        return Ok(Kind::Html);
    }
    let texty = mime.starts_with("text/")
        || ["json", "xml", "javascript", "yaml", "toml", "csv"]
            .iter()
            .any(|t| mime.contains(t));
    let head = &body[..body.len().min(8192)];
    if mime.is_empty() && looks_like_html(head) {
        return Ok(Kind::Html);
    }
    if !texty && head.contains(&0) {
        let what = if mime.is_empty() { "unknown" } else { &mime };
        return Err(fetch_error(format!(
            "the response is binary ({what}), not text"
        )));
    }
    Ok(Kind::Text)
}

fn looks_like_html(head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    let start = text
        .trim_start_matches('\u{feff}')
        .trim_start()
        .to_ascii_lowercase();
    start.starts_with("<!doctype html") || start.starts_with("<html")
}

/// Refuse a page that nests deeper than [`MAX_DEPTH`].
fn check_depth(body: &[u8]) -> Result<(), ToolError> {
    if nesting_depth(body, MAX_DEPTH) > MAX_DEPTH {
        return Err(fetch_error(format!(
            "the page nests its elements deeper than {MAX_DEPTH} levels; it was not rendered"
        )));
    }
    Ok(())
}

/// The deepest element nesting the tags of `html` suggest, counting only elements that
/// nest (not void or self-closing ones), skipping comments and raw text; it stops
/// counting once past `limit`. An end tag closes only an element that is open (back to
/// it, as the parser does): a stray one (`<div></span>`) is ignored by the parser, so it
/// must not lower the estimate either. An estimate: the parser's error recovery may
/// nest less, never more.
pub fn nesting_depth(html: &[u8], limit: usize) -> usize {
    let (mut deepest, mut i) = (0usize, 0usize);
    let mut open: Vec<String> = Vec::new();
    while let Some(off) = html[i..].iter().position(|&b| b == b'<') {
        i += off + 1;
        if html[i..].starts_with(b"!--") {
            i = find(html, i, b"-->").map_or(html.len(), |e| e + 3);
            continue;
        }
        let closing = html.get(i) == Some(&b'/');
        let start = i + usize::from(closing);
        let name_len = html[start..]
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || **b == b'-' || **b == b'!')
            .count();
        if name_len == 0 || !html[start].is_ascii_alphabetic() && html[start] != b'!' {
            continue;
        }
        let name = String::from_utf8_lossy(&html[start..start + name_len]).to_ascii_lowercase();
        let end = html[start..]
            .iter()
            .position(|&b| b == b'>')
            .map_or(html.len(), |e| start + e);
        i = end.min(html.len());
        if name.starts_with('!') {
            continue; // a doctype or CDATA section
        }
        if closing {
            if let Some(at) = open.iter().rposition(|n| *n == name) {
                open.truncate(at);
            }
            continue;
        }
        if RAW.contains(&name.as_str()) {
            let close = format!("</{name}");
            i = find_ci(html, i, close.as_bytes()).unwrap_or(html.len());
            continue;
        }
        // `/>` closes an element only in foreign content (SVG, MathML): an HTML parser
        // ignores it on `<div/>`, which then stays open.
        let self_closing = end > start
            && html.get(end - 1) == Some(&b'/')
            && open.iter().any(|n| n == "svg" || n == "math");
        if !self_closing && !NON_NESTING.contains(&name.as_str()) {
            open.push(name);
            deepest = deepest.max(open.len());
            if deepest > limit {
                break;
            }
        }
    }
    deepest
}

fn find(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| from + p)
}

fn find_ci(hay: &[u8], from: usize, needle: &[u8]) -> Option<usize> {
    hay.get(from..)?
        .windows(needle.len())
        .position(|w| w.eq_ignore_ascii_case(needle))
        .map(|p| from + p)
}

/// The page as readable text.
pub async fn readable(body: Vec<u8>) -> Result<String, ToolError> {
    check_depth(&body)?;
    on_big_stack(move || {
        let text = html2text::config::plain()
            .allow_width_overflow()
            .string_from_read(&body[..], WIDTH)
            .map_err(|e| fetch_error(format!("the HTML could not be rendered as text: {e}")))?;
        Ok(tidy(&text))
    })
    .await
}

/// The text of each element `selector` matches, one per line (elements without text
/// are left out), and how many matched.
pub async fn select(body: Vec<u8>, selector: String) -> Result<(String, usize), ToolError> {
    check_depth(&body)?;
    on_big_stack(move || {
        let sel = Selector::parse(&selector).map_err(|e| {
            ToolError::new(
                ErrorType::InvalidParams,
                format!("`{selector}` is not a valid CSS selector: {e}"),
            )
        })?;
        let html = Html::parse_document(&String::from_utf8_lossy(&body));
        let mut matched = 0;
        let mut lines = Vec::new();
        let mut bytes = 0;
        let mut visits = MAX_VISITS;
        for el in html.select(&sel) {
            matched += 1;
            if matched > MAX_MATCHES || bytes > MAX_SELECTED || visits == 0 {
                continue; // counted, not read
            }
            let text = element_text(el, &mut visits);
            if !text.is_empty() {
                bytes += text.len() + 1;
                lines.push(text);
            }
        }
        Ok((lines.join("\n"), matched))
    })
    .await
}

/// An element's text: its text nodes in order, outside hidden elements, whitespace
/// collapsed, a space where a block ends. Visits at most `visits` nodes (and counts
/// them down).
pub fn element_text(el: ElementRef<'_>, visits: &mut usize) -> String {
    use ego_tree::iter::Edge;
    let mut raw = String::new();
    let mut hidden = 0usize;
    for edge in el.traverse() {
        if *visits == 0 {
            break;
        }
        *visits -= 1;
        match edge {
            Edge::Open(node) => match node.value() {
                scraper::Node::Element(e) => {
                    if hidden > 0 || (HIDDEN.contains(&e.name()) && node.id() != el.id()) {
                        hidden += 1;
                    } else if BLOCKS.contains(&e.name()) {
                        raw.push(' ');
                    }
                }
                scraper::Node::Text(t) if hidden == 0 => raw.push_str(t),
                _ => {}
            },
            Edge::Close(node) => {
                if let scraper::Node::Element(e) = node.value() {
                    if hidden > 0 {
                        hidden -= 1;
                    } else if BLOCKS.contains(&e.name()) {
                        raw.push(' ');
                    }
                }
            }
        }
    }
    raw.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Trailing spaces off each line, at most one blank line in a row, no blank start/end.
fn tidy(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut blank = 0;
    for line in text.lines().map(str::trim_end) {
        if line.is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(line);
    }
    out
}

/// Run `f` on a thread with a large stack and wait for it without blocking the runtime.
async fn on_big_stack<T, F>(f: F) -> Result<T, ToolError>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T, ToolError> + Send + 'static,
{
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("html".into())
        .stack_size(HTML_STACK)
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| ToolError::internal(format!("cannot start the HTML thread: {e}")))?;
    rx.await
        .map_err(|_| ToolError::internal("the HTML thread failed"))?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
    }

    #[test]
    fn classification_by_type_then_by_content() {
        assert_eq!(
            classify(Some("text/html; charset=utf-8"), b"x").unwrap(),
            Kind::Html
        );
        assert_eq!(
            classify(Some("application/json"), b"{}").unwrap(),
            Kind::Text
        );
        assert_eq!(classify(Some("text/plain"), b"a\0b").unwrap(), Kind::Text);
        assert_eq!(
            classify(None, b"  <!DOCTYPE html><p>x").unwrap(),
            Kind::Html
        );
        assert_eq!(classify(None, b"plain").unwrap(), Kind::Text);
        let e = classify(Some("image/png"), b"\x89PNG\0\0").unwrap_err();
        assert_eq!(e.kind, ErrorType::FetchError);
        assert!(e.message.contains("binary (image/png)"));
    }

    #[test]
    fn readable_text_drops_scripts_and_styles() {
        let html = b"<html><head><title>T</title><style>p{color:red}</style></head><body><h1>Title</h1><script>alert('x')</script><p>Hello <b>world</b>.</p><noscript>no</noscript><p>Second</p></body></html>".to_vec();
        let text = rt().block_on(readable(html)).unwrap();
        assert!(
            text.contains("Title") && text.contains("Hello **world**."),
            "{text}"
        );
        assert!(text.contains("Second"), "{text}");
        assert!(
            !text.contains("alert") && !text.contains("color:red"),
            "{text}"
        );
    }

    #[test]
    fn selectors_give_each_match_on_its_own_line() {
        let html = b"<ul><li class=x>one <i>1</i></li><li>two</li><li class=x>three<script>bad()</script></li><li class=x>  </li></ul>".to_vec();
        let (text, n) = rt().block_on(select(html, "li.x".into())).unwrap();
        assert_eq!(text, "one 1\nthree");
        assert_eq!(n, 3);
        let e = rt()
            .block_on(select(b"<p>x</p>".to_vec(), "p[".into()))
            .unwrap_err();
        assert_eq!(e.kind, ErrorType::InvalidParams);
    }

    #[test]
    fn deeply_nested_html_does_not_crash() {
        let depth = 100_000;
        let mut html = "<div>".repeat(depth);
        html.push_str("deep");
        html.push_str(&"</div>".repeat(depth));
        let e = rt()
            .block_on(readable(html.clone().into_bytes()))
            .unwrap_err();
        assert_eq!(e.kind, ErrorType::FetchError);
        assert!(e.message.contains("deeper than 512"), "{}", e.message);
        assert!(
            rt().block_on(select(html.into_bytes(), "div".into()))
                .is_err()
        );
        // As deep as allowed is fine, and quick.
        let ok = format!(
            "{}x{}",
            "<div>".repeat(MAX_DEPTH),
            "</div>".repeat(MAX_DEPTH)
        );
        let t = std::time::Instant::now();
        assert_eq!(
            rt().block_on(readable(ok.clone().into_bytes())).unwrap(),
            "x"
        );
        let (sel, n) = rt()
            .block_on(select(ok.into_bytes(), "div".into()))
            .unwrap();
        assert_eq!(n, MAX_DEPTH);
        assert_eq!(sel.lines().count(), MAX_DEPTH);
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "{:?}",
            t.elapsed()
        );
    }

    #[test]
    fn nesting_is_estimated_from_the_tags() {
        assert_eq!(nesting_depth(b"<div><div></div></div>", 100), 2);
        assert_eq!(
            nesting_depth(b"<p>a<p>b<p>c<li>x<li>y<br><img src=x><hr/>", 100),
            0
        );
        assert_eq!(
            nesting_depth(b"<div/><div/><div/>", 100),
            3,
            "not closed in HTML"
        );
        assert_eq!(nesting_depth(b"<svg><path/><path/><g/></svg>", 100), 1);
        // End tags of elements that are not open close nothing.
        assert!(nesting_depth("<div></span>".repeat(1000).as_bytes(), 100) > 100);
        assert_eq!(nesting_depth(b"<div><b><i></div>x", 100), 3);
        assert_eq!(nesting_depth(b"<div><b><i></div><div></div>", 100), 3);
        assert_eq!(nesting_depth(b"<!-- <div><div> --><div></div>", 100), 1);
        assert_eq!(
            nesting_depth(b"<script>if (a<b) { '<div><div>' }</script><b>x</b>", 100),
            1
        );
        assert_eq!(
            nesting_depth("<span>".repeat(1000).as_bytes(), 100),
            101,
            "stops past the limit"
        );
        assert_eq!(nesting_depth(b"a < b and c<d", 100), 1);
    }
}
