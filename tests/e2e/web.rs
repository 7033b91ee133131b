//! `web_fetch` and `web_search` through the real socket, against servers this test
//! starts on 127.0.0.1: seed 002's properties 29–32 as property tests, the address
//! rule in every spelling (refused before any connection is made), redirects checked
//! hop by hop, size and time caps, and bad input. Also through the CLI and MCP.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::{Value, json};
use toolvisor_protocol::{ErrorType, Status, ToolResult};

use crate::harness::*;
use crate::httpd::{Httpd, Reply};

/// Web tools may reach loopback (the test server), nothing asks (a `*` rule: the
/// test server is no host `[network] allow` could list; tool rules still come first).
const OPEN: &str =
    "[[policy.rules]]\ntool = \"*\"\naction = \"allow\"\n\n[web]\nallow_private = true\n";

/// `web_fetch` of any host without a question, private addresses still refused.
const FETCH_ANY: &str = "[[policy.rules]]\ntool = \"web_fetch\"\naction = \"allow\"\n";

fn err_type(r: &ToolResult) -> Option<ErrorType> {
    r.error.as_ref().map(|e| e.kind)
}

fn fetch(s: &Server, args: Value) -> ToolResult {
    block(T, s.call("web_fetch", args))
}

fn unique(tag: &str) -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    format!(
        "/{tag}/{}",
        N.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
    )
}

fn words() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-zA-Z0-9]{1,10}", 1..8).prop_map(|w| w.join(" "))
}

#[test]
fn seed_properties_29_to_32() {
    let http = Httpd::start();
    let search_url = http.url("/search");
    let s = Server::start(&format!("{OPEN}search_url = \"{search_url}\"\n"));
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    });

    // Property 29: a page's content comes back as text (plain text verbatim, HTML's
    // visible text present and its scripts gone).
    runner
        .run(
            &(".{0,200}", prop::collection::vec(words(), 1..5)),
            |(plain, paras)| {
                let p = unique("p29");
                http.page(&p, Reply::text(&plain));
                let r = fetch(&s, json!({"url": http.url(&p), "maxLength": 100_000}));
                prop_assert_eq!(r.status, Status::Ok);
                prop_assert_eq!(&r.content, &plain);
                let h = unique("p29h");
                let body: String = paras.iter().map(|t| format!("<p>{t}</p>")).collect();
                http.page(&h, Reply::html(&format!("<html><head><script>var secret=1;</script></head><body>{body}<script>steal()</script></body></html>")));
                let r = fetch(&s, json!({"url": http.url(&h)}));
                prop_assert_eq!(r.status, Status::Ok);
                for t in &paras {
                    prop_assert!(r.content.contains(t.as_str()), "{:?} in {:?}", t, r.content);
                }
                prop_assert!(!r.content.contains("steal") && !r.content.contains("secret"));
                Ok(())
            },
        )
        .unwrap();

    // Property 30: with a selector, only the matching elements' text, one per line.
    runner
        .run(
            &prop::collection::vec((any::<bool>(), words()), 1..10),
            |items| {
                let p = unique("p30");
                let body: String = items
                    .iter()
                    .map(|(hit, t)| {
                        format!(
                            "<div class=\"{}\">{t}</div>",
                            if *hit { "hit" } else { "miss" }
                        )
                    })
                    .collect();
                http.page(
                    &p,
                    Reply::html(&format!("<html><body>{body}</body></html>")),
                );
                let r = fetch(&s, json!({"url": http.url(&p), "selector": "div.hit"}));
                prop_assert_eq!(r.status, Status::Ok);
                let want: Vec<&str> = items
                    .iter()
                    .filter(|(h, _)| *h)
                    .map(|(_, t)| t.as_str())
                    .collect();
                prop_assert_eq!(r.content, want.join("\n"));
                prop_assert_eq!(&r.meta["matches"], &json!(want.len()));
                Ok(())
            },
        )
        .unwrap();

    // Property 31: past maxLength the content is cut there, with the indicator.
    runner
        .run(&("[a-zé😀 ]{0,300}", 1u64..400), |(text, max)| {
            let p = unique("p31");
            http.page(&p, Reply::text(&text));
            let r = fetch(&s, json!({"url": http.url(&p), "maxLength": max}));
            prop_assert_eq!(r.status, Status::Ok);
            let n = text.chars().count() as u64;
            if n > max {
                let kept: String = text.chars().take(max as usize).collect();
                prop_assert_eq!(
                    r.content,
                    format!(
                        "{kept}\n\n[Content truncated: {} characters omitted]",
                        n - max
                    )
                );
            } else {
                prop_assert_eq!(r.content, text);
            }
            Ok(())
        })
        .unwrap();

    // Property 32: at most numResults results.
    runner
        .run(&(0usize..30, 1u64..=20, words()), |(available, n, query)| {
            let results: Vec<Value> = (0..available)
                .map(|i| json!({"title": format!("T{i}"), "url": format!("https://r{i}.example/"), "content": format!("snippet {i}")}))
                .collect();
            let q: String = url_query(&query);
            http.page(&format!("/search?q={q}&format=json"), Reply::json(&json!({"results": results})));
            let r = block(T, s.call("web_search", json!({"query": query, "numResults": n})));
            prop_assert_eq!(r.status, Status::Ok, "{:?}", r.error);
            let blocks: Vec<&str> = if r.content.is_empty() { vec![] } else { r.content.split("\n\n").collect() };
            prop_assert_eq!(blocks.len() as u64, n.min(available as u64));
            for (i, b) in blocks.iter().enumerate() {
                prop_assert_eq!(*b, format!("{}. T{i}\n   https://r{i}.example/\n   snippet {i}", i + 1));
            }
            Ok(())
        })
        .unwrap();
}

/// `application/x-www-form-urlencoded` as the `url` crate writes it.
fn url_query(q: &str) -> String {
    q.chars()
        .map(|c| match c {
            ' ' => "+".to_owned(),
            c if c.is_ascii_alphanumeric() => c.to_string(),
            c => format!("%{:02X}", c as u32),
        })
        .collect()
}

#[test]
fn web_search_defaults_limits_and_failures() {
    let http = Httpd::start();
    let results: Vec<Value> = (0..30)
        .map(|i| json!({"title": format!("T{i}"), "url": "u", "content": "c"}))
        .collect();
    http.page(
        "/s?q=rust&format=json",
        Reply::json(&json!({"results": results})),
    );
    http.page("/s?q=broken&format=json", Reply::text("not json"));
    http.page(
        "/s?q=down&format=json",
        Reply::Page(503, "text/plain".into(), b"busy".to_vec()),
    );
    // The configured endpoint is reached although it is loopback: the operator chose it.
    let s = Server::start(&format!("[web]\nsearch_url = \"{}\"\n", http.url("/s")));
    let r = block(T, s.call("web_search", json!({"query": "rust"})));
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.content.split("\n\n").count(), 5, "default 5");
    let r = block(
        T,
        s.call("web_search", json!({"query": "rust", "numResults": 21})),
    );
    assert_eq!(
        err_type(&r),
        Some(ErrorType::InvalidParams),
        "over 20 is refused by the schema"
    );
    for q in ["broken", "down"] {
        let r = block(T, s.call("web_search", json!({"query": q})));
        assert_eq!(err_type(&r), Some(ErrorType::SearchError), "{q}: {r:?}");
    }
    let r = block(T, s.call("web_search", json!({"query": "down"})));
    assert!(r.error.unwrap().message.contains("503"));
    drop(s);
    let s = Server::start(ASKING);
    let r = block(T, s.call("web_search", json!({"query": "rust"})));
    assert_eq!(err_type(&r), Some(ErrorType::SearchError));
    assert!(r.error.unwrap().message.contains("search_url"));
}

#[test]
fn private_addresses_are_refused_by_default_in_every_spelling() {
    let http = Httpd::start();
    http.page("/x", Reply::text("must not be read"));
    // A rule lets the fetches reach the worker (a host off `[network] allow` asks first).
    let s = Server::start(FETCH_ANY);
    let port = http.addr.port();
    for url in [
        format!("http://127.0.0.1:{port}/x"),
        format!("http://[::1]:{port}/x"),
        format!("http://localhost:{port}/x"),
        format!("http://localhost.:{port}/x"),
        format!("http://2130706433:{port}/x"),
        format!("http://0x7f000001:{port}/x"),
        format!("http://0177.0.0.1:{port}/x"),
        format!("http://127.1:{port}/x"),
        format!("http://[::ffff:127.0.0.1]:{port}/x"),
        format!("http://0.0.0.0:{port}/x"),
        format!("http://[::]:{port}/x"),
        // Never connected to: refused before any packet leaves.
        "http://10.0.0.1/".to_owned(),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
        "http://[fd00::1]/".to_owned(),
        "http://[fe80::1]/".to_owned(),
        "http://100.64.0.1/".to_owned(),
        "http://192.168.1.1/".to_owned(),
        "http://224.0.0.1/".to_owned(),
        "http://255.255.255.255/".to_owned(),
    ] {
        let r = fetch(&s, json!({"url": url}));
        assert_eq!(err_type(&r), Some(ErrorType::FetchError), "{url}: {r:?}");
        let msg = r.error.unwrap().message;
        assert!(
            msg.contains("refused") && msg.contains("allow_private"),
            "{url}: {msg}"
        );
    }
    assert_eq!(
        http.hits.load(std::sync::atomic::Ordering::SeqCst),
        0,
        "no request reached the server"
    );
}

#[test]
fn redirects_are_checked_hop_by_hop() {
    let http = Httpd::start();
    let other = Httpd::start();
    other.page("/secret", Reply::text("internal"));
    // The test server stands for a public site; everything else private stays refused.
    let allow = http.addr.to_string();
    let s = Server::start_with_env(FETCH_ANY, &[("TOOLVISOR_WEB_TEST_ALLOW", &allow)]);
    http.page("/ok", Reply::text("public page"));
    http.page("/hop", Reply::Redirect("/ok".into()));
    http.page("/to-loopback", Reply::Redirect(other.url("/secret")));
    http.page(
        "/to-metadata",
        Reply::Redirect("http://169.254.169.254/latest/meta-data/".into()),
    );
    http.page("/to-file", Reply::Redirect("file:///etc/passwd".into()));
    http.page(
        "/to-creds",
        Reply::Redirect(format!("http://u:p@{allow}/ok")),
    );
    for i in 0..6 {
        http.page(
            &format!("/loop{i}"),
            Reply::Redirect(format!("/loop{}", i + 1)),
        );
    }
    http.page("/loop6", Reply::text("too far"));
    let r = fetch(&s, json!({"url": http.url("/hop")}));
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert_eq!(r.content, "public page");
    assert_eq!(r.meta["redirects"], json!(1));
    for (path, needle) in [
        ("/to-loopback", "loopback"),
        ("/to-metadata", "link-local"),
        ("/to-file", "not `file:`"),
        ("/to-creds", "credentials"),
        ("/loop0", "more than 5 redirects"),
    ] {
        let r = fetch(&s, json!({"url": http.url(path)}));
        assert_eq!(err_type(&r), Some(ErrorType::FetchError), "{path}: {r:?}");
        let msg = r.error.unwrap().message;
        assert!(msg.contains(needle), "{path}: {msg}");
    }
    assert_eq!(other.hits.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Five redirects are fine.
    let r = fetch(&s, json!({"url": http.url("/loop1")}));
    assert_eq!(r.content, "too far");
}

#[test]
fn bad_input_and_hostile_servers_get_clear_errors_in_bounded_memory() {
    let http = Httpd::start();
    http.page(
        "/huge",
        Reply::Lazy {
            len: 2 << 30,
            declared: true,
        },
    );
    http.page(
        "/huge-chunked",
        Reply::Lazy {
            len: 2 << 30,
            declared: false,
        },
    );
    http.page("/endless", Reply::Endless);
    http.page("/stall", Reply::Stall);
    http.page(
        "/bytes",
        Reply::Page(200, "text/plain".into(), b"ok \xff\xfe bytes".to_vec()),
    );
    http.page(
        "/png",
        Reply::Page(200, "image/png".into(), b"\x89PNG\r\n\x1a\n\0\0\0".to_vec()),
    );
    http.page(
        "/missing",
        Reply::Page(404, "text/plain".into(), b"no".to_vec()),
    );
    http.page(
        "/boom",
        Reply::Page(500, "text/plain".into(), b"no".to_vec()),
    );
    http.page("/json", Reply::json(&json!({"a": [1, 2]})));
    let s = Server::start(&format!("{OPEN}max_bytes = 1048576\ntimeout_ms = 3000\n"));
    let web = block(T, s.worker_pids("web"));
    let rss_before = rss_bytes(web[0]).unwrap_or(0);
    let started = Instant::now();
    for (path, kind, needle) in [
        ("/huge", ErrorType::FetchError, "larger than web.max_bytes"),
        (
            "/huge-chunked",
            ErrorType::FetchError,
            "larger than web.max_bytes",
        ),
        (
            "/endless",
            ErrorType::FetchError,
            "larger than web.max_bytes",
        ),
        ("/stall", ErrorType::FetchError, "within 3000 ms"),
        ("/png", ErrorType::FetchError, "binary (image/png)"),
        ("/missing", ErrorType::HttpError, "HTTP 404: Not Found"),
        ("/boom", ErrorType::HttpError, "HTTP 500"),
    ] {
        let r = fetch(&s, json!({"url": http.url(path)}));
        assert_eq!(err_type(&r), Some(kind), "{path}: {r:?}");
        assert!(r.error.unwrap().message.contains(needle), "{path}");
    }
    assert!(
        started.elapsed() < Duration::from_secs(45),
        "{:?}",
        started.elapsed()
    );
    // A 2 GiB body was never held: the server could not even send much of it.
    let rss_after = rss_bytes(web[0]).unwrap_or(0);
    assert!(
        rss_after < rss_before + (64 << 20),
        "web worker grew from {rss_before} to {rss_after} bytes"
    );
    assert!(http.sent.load(std::sync::atomic::Ordering::SeqCst) < 1 << 30);
    let r = fetch(&s, json!({"url": http.url("/bytes")}));
    assert_eq!(
        r.content, "ok \u{fffd}\u{fffd} bytes",
        "invalid UTF-8 is replaced"
    );
    let r = fetch(&s, json!({"url": http.url("/json")}));
    assert_eq!(r.content, "{\"a\":[1,2]}", "JSON verbatim");
    let r = fetch(&s, json!({"url": http.url("/json"), "selector": "p"}));
    assert_eq!(
        err_type(&r),
        Some(ErrorType::InvalidParams),
        "a selector needs HTML"
    );
    for (url, needle) in [
        ("ftp://127.0.0.1/x".to_owned(), "not `ftp:`"),
        ("file:///etc/passwd".to_owned(), "not `file:`"),
        (format!("http://user:pw@{}/json", http.addr), "credentials"),
        ("http//nope".to_owned(), "not a valid URL"),
    ] {
        let r = fetch(&s, json!({"url": url}));
        assert_eq!(err_type(&r), Some(ErrorType::FetchError), "{url}: {r:?}");
        assert!(r.error.unwrap().message.contains(needle), "{url}");
    }
    let r = fetch(&s, json!({"url": http.url("/json"), "selector": "p[" }));
    assert_eq!(err_type(&r), Some(ErrorType::InvalidParams));
    // An https URL to a plain-HTTP port fails the TLS handshake, clearly.
    let r = fetch(&s, json!({"url": format!("https://{}/json", http.addr)}));
    assert_eq!(err_type(&r), Some(ErrorType::FetchError), "{r:?}");
    assert!(r.error.unwrap().message.contains("TLS"));
    // Nothing else was affected: the same worker serves on.
    assert_eq!(block(T, s.worker_pids("web")), web);
    s.write("note.txt", "still here\n");
    let r = block(T, s.call("read_file", json!({"path": "note.txt"})));
    assert_eq!(r.content, "still here\n");
}

#[test]
fn long_pages_are_cut_like_file_contents_and_audited() {
    let http = Httpd::start();
    let long = "line of text\n".repeat(2000);
    http.page("/long", Reply::text(&long));
    let s = Server::start(OPEN);
    let r = fetch(&s, json!({"url": http.url("/long")}));
    assert_eq!(r.status, Status::Ok);
    let t = r.truncated.expect("truncated");
    assert!(t.omitted_bytes > 0);
    assert!(
        r.content.contains("[Output truncated:"),
        "{}",
        &r.content[r.content.len() - 100..]
    );
    assert!(r.content.len() < 6000);
    let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap();
    let completed = audit
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["kind"] == "completed" && v["worker"]["group"] == "web")
        .expect("a completed record from the web group");
    assert_eq!(completed["status"], "ok");
    assert!(audit.contains("\"tool\":\"web_fetch\""));
}

#[test]
fn policy_rules_and_the_cli_see_the_web_tools() {
    let http = Httpd::start();
    http.page("/p", Reply::html("<p>hello from the cli</p>"));
    let s = Server::start(&format!(
        "{OPEN}[[policy.rules]]\ntool = \"web_fetch\"\naction = \"deny\"\nconditions = [{{ param = \"url\", operator = \"contains\", value = \"/denied\" }}]\n"
    ));
    let out = toolvisor(
        s.ws(),
        &[
            "call",
            "web_fetch",
            &json!({"url": http.url("/p")}).to_string(),
        ],
    );
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("hello from the cli"));
    let r = fetch(&s, json!({"url": http.url("/denied")}));
    assert_eq!(r.status, Status::Denied);
    assert_eq!(err_type(&r), Some(ErrorType::PolicyDenied));
    let out = toolvisor(s.ws(), &["tools"]);
    let tools: Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = tools
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for t in ["web_fetch", "web_search", "memory", "write_todos"] {
        assert!(names.contains(&t), "{t} in {names:?}");
    }
}
