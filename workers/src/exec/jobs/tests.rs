use super::*;
use nix::sys::signal::Signal;
use signal::parse_signal;

#[test]
fn one_session_leaves_a_quarter_of_the_slots_to_others() {
    assert_eq!(session_share(64), 48);
    assert_eq!(session_share(4), 3);
    assert_eq!(session_share(2), 1);
    assert_eq!(session_share(1), 1);
}

#[test]
fn one_line_flattens_and_cuts() {
    assert_eq!(one_line("a\nb", 10), "a b");
    assert_eq!(one_line("abcdef", 4), "abc…");
}

#[test]
fn signals_by_name() {
    assert_eq!(parse_signal(&json!("INT")).unwrap(), Signal::SIGINT);
    assert_eq!(parse_signal(&json!("USR2")).unwrap(), Signal::SIGUSR2);
    for bad in [json!("SIGINT"), json!("int"), json!(9), json!("STOP")] {
        let e = parse_signal(&bad).unwrap_err();
        assert_eq!(e.kind, ErrorType::InvalidParams, "{bad}");
    }
}

#[test]
fn grace_is_two_seconds() {
    assert_eq!(super::super::launch::GRACE, Duration::from_secs(2));
}
