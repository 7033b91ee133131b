use std::time::{Duration, Instant};

use super::{DEFAULT_TIMEOUT, command_deadline};

#[test]
fn the_calls_deadline_bounds_a_command_without_a_timeout_of_its_own() {
    let call = Instant::now() + Duration::from_secs(600);
    let (at, own) = command_deadline(None, Some(call));
    assert_eq!((at, own), (call, None), "not cut to the 30 s default");
}

#[test]
fn the_tools_own_timeout_only_shortens_the_calls_deadline() {
    let call = Instant::now() + Duration::from_secs(600);
    let short = Duration::from_secs(5);
    let (at, own) = command_deadline(Some(short), Some(call));
    assert!(at < call);
    assert_eq!(own, Some(short));
    let near = Instant::now() + Duration::from_millis(50);
    assert_eq!(
        command_deadline(Some(Duration::from_secs(60)), Some(near)),
        (near, None)
    );
}

#[test]
fn a_call_with_no_deadline_gets_the_default() {
    let before = Instant::now();
    let (at, own) = command_deadline(None, None);
    assert!(at >= before + DEFAULT_TIMEOUT);
    assert_eq!(own, Some(DEFAULT_TIMEOUT));
}
