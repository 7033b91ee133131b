fn reg() -> Registry {
    Registry::new(toolvisor_protocol::tools::builtin()).unwrap()
}

use super::*;
use toolvisor_protocol::worker::Roots;

fn grants() -> Grants {
    Grants::new(
        Scopes::new(&Roots {
            private: "/ws".into(),
            shared: Some("/sh".into()),
            public: None,
        })
        .unwrap(),
    )
}

fn req(tools: &[&str]) -> GrantRequest {
    GrantRequest {
        tools: tools.iter().map(|t| t.to_string()).collect(),
        trace_id: None,
        paths: vec![],
        ttl: Duration::from_secs(60),
        reusable: false,
    }
}

fn call<'a>(tool: &'a str, locations: &'a [String]) -> TokenUse<'a> {
    TokenUse {
        tool,
        trace_id: None,
        locations,
    }
}

const DOT: &[String] = &[];

#[test]
fn tokens_are_128_bit_hex_and_distinct() {
    let g = grants();
    let now = Instant::now();
    let a = g.issue(&req(&["shell"]), now, &reg()).unwrap().token;
    let b = g.issue(&req(&["shell"]), now, &reg()).unwrap().token;
    assert_eq!(a.len(), 32);
    assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
    assert_ne!(a, b);
}

#[test]
fn single_use_tokens_are_spent() {
    let g = grants();
    let now = Instant::now();
    // Issued by an alias; redeemed by the tool's name (the gate passes that).
    let t = g.issue(&req(&["shell"]), now, &reg()).unwrap().token;
    assert_eq!(g.redeem(&t, &call("run_command", DOT), now), Ok(()));
    assert_eq!(
        g.redeem(&t, &call("run_command", DOT), now),
        Err(TokenInvalid::Used)
    );
}

#[test]
fn reusable_tokens_last_until_expiry() {
    let g = grants();
    let now = Instant::now();
    let mut r = req(&["ls"]);
    r.reusable = true;
    let issued = g.issue(&r, now, &reg()).unwrap();
    for _ in 0..3 {
        assert_eq!(g.redeem(&issued.token, &call("ls", DOT), now), Ok(()));
    }
    let later = issued.expires;
    assert_eq!(
        g.redeem(&issued.token, &call("ls", DOT), later),
        Err(TokenInvalid::Expired)
    );
}

#[test]
fn expiry_uses_the_time_given() {
    let g = grants();
    let now = Instant::now();
    let t = g.issue(&req(&["ls"]), now, &reg()).unwrap().token;
    let late = now + Duration::from_secs(61);
    assert_eq!(
        g.redeem(&t, &call("ls", DOT), late),
        Err(TokenInvalid::Expired)
    );
    assert_eq!(
        g.redeem("nope", &call("ls", DOT), now),
        Err(TokenInvalid::Unknown)
    );
}

#[test]
fn a_token_that_does_not_fit_says_why_and_is_not_spent() {
    let g = grants();
    let now = Instant::now();
    let mut r = req(&["write_file"]);
    r.trace_id = Some("t1".into());
    r.paths = vec!["./src/../src".into()];
    let t = g.issue(&r, now, &reg()).unwrap().token;
    let good = vec!["src/a.rs".to_string()];
    let bad = vec!["srcx/a.rs".to_string()];

    let wrong_tool = g.redeem(&t, &call("edit_file", &good), now).unwrap_err();
    assert!(matches!(wrong_tool, TokenInvalid::WrongTool { .. }));
    assert!(
        wrong_tool.to_string().contains("write_file"),
        "{wrong_tool}"
    );

    let no_trace = g.redeem(&t, &call("write_file", &good), now).unwrap_err();
    assert!(matches!(no_trace, TokenInvalid::WrongTrace { .. }));
    let mut other = call("write_file", &good);
    other.trace_id = Some("t2");
    assert!(matches!(
        g.redeem(&t, &other, now),
        Err(TokenInvalid::WrongTrace { .. })
    ));

    let mut out = call("write_file", &bad);
    out.trace_id = Some("t1");
    let e = g.redeem(&t, &out, now).unwrap_err();
    assert!(matches!(e, TokenInvalid::PathOutOfScope { .. }), "{e}");
    assert!(e.to_string().contains("srcx/a.rs"), "{e}");

    let mut fits = call("write_file", &good);
    fits.trace_id = Some("t1");
    assert_eq!(
        g.redeem(&t, &fits, now),
        Ok(()),
        "failed uses did not spend it"
    );
}

#[test]
fn run_command_paths_bound_its_cwd() {
    let g = grants();
    let now = Instant::now();
    let mut r = req(&["run_command"]);
    r.reusable = true;
    r.paths = vec!["sub".into()];
    let t = g.issue(&r, now, &reg()).unwrap().token;
    let root = vec![".".to_string()];
    let sub = vec!["sub/deeper".to_string()];
    assert!(matches!(
        g.redeem(&t, &call("run_command", &root), now),
        Err(TokenInvalid::PathOutOfScope { .. })
    ));
    assert_eq!(g.redeem(&t, &call("run_command", &sub), now), Ok(()));
}

#[test]
fn deny_beats_a_token_and_allow_does_not_spend_it() {
    let g = grants();
    let now = Instant::now();
    let t = g.issue(&req(&["ls"]), now, &reg()).unwrap().token;
    let c = call("ls", DOT);
    assert_eq!(g.settle(Action::Deny, &t, &c, now), Ok(Action::Deny));
    assert_eq!(g.settle(Action::Allow, &t, &c, now), Ok(Action::Allow));
    assert_eq!(g.settle(Action::Ask, &t, &c, now), Ok(Action::Allow));
    assert_eq!(g.settle(Action::Ask, &t, &c, now), Err(TokenInvalid::Used));
}

#[test]
fn bad_requests_are_refused() {
    let g = grants();
    let now = Instant::now();
    assert!(matches!(
        g.issue(&req(&[]), now, &reg()),
        Err(GrantError::NoTools)
    ));
    assert!(matches!(
        g.issue(&req(&["nope"]), now, &reg()),
        Err(GrantError::UnknownTool(_))
    ));
    let mut r = req(&["ls"]);
    r.paths = vec!["../../etc".into()];
    assert!(matches!(
        g.issue(&r, now, &reg()),
        Err(GrantError::PathOutside(_))
    ));
    let mut r = req(&["ls"]);
    r.ttl = Duration::ZERO;
    assert!(matches!(g.issue(&r, now, &reg()), Err(GrantError::ZeroTtl)));
    let mut r = req(&["ls"]);
    r.ttl = Duration::MAX;
    assert!(matches!(
        g.issue(&r, now, &reg()),
        Err(GrantError::TtlTooLarge(_))
    ));
    // u64::MAX ms fits the clocks but would give the year 584556076.
    r.ttl = Duration::from_millis(u64::MAX);
    assert!(matches!(
        g.issue(&r, now, &reg()),
        Err(GrantError::TtlTooLarge(_))
    ));
    r.ttl = MAX_TTL;
    assert!(g.issue(&r, now, &reg()).is_ok(), "a year is allowed");
}

#[test]
fn refusals_are_bad_messages_that_say_what_is_wrong() {
    let g = grants();
    let now = Instant::now();
    let mut outside = req(&["ls"]);
    outside.paths = vec!["/etc".into()];
    let mut zero = req(&["ls"]);
    zero.ttl = Duration::ZERO;
    for (r, says) in [
        (req(&[]), "`tools` is empty"),
        (req(&["ls", "nosuch"]), "unknown tool `nosuch`"),
        (outside, "`/etc`"),
        (zero, "`ttl_ms`"),
    ] {
        let e = g.issue(&r, now, &reg()).unwrap_err();
        assert_eq!(e.error_type(), ErrorType::BadMessage, "{e}");
        assert!(e.to_string().contains(says), "{e}");
    }
}
