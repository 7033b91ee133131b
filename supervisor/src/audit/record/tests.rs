use std::time::UNIX_EPOCH;

use super::*;

fn at(secs: u64, ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms)
}

#[test]
fn requested_hashes_and_redacts_args() {
    let args = json!({"command": "ls", "api_token": "abc"});
    let r = Requested {
        trace_id: "t",
        call_id: "c",
        session: "s",
        client: "cl",
        tool: "run_command",
        args: &args,
        policy: PolicyVerdict {
            decision: "allow",
            reason: "rule",
            rule: Some("r1"),
        },
    };
    let f = r.fields();
    assert_eq!(f["args_sha256"], canonical::args_sha256(&args).as_str());
    assert!(!f["args_preview"].as_str().unwrap().contains("abc"));
    assert_eq!(f["policy"]["rule"], "r1");
    let rej = Rejected {
        call: r,
        status: "denied",
        error_type: "PolicyDenied",
    }
    .fields();
    assert_eq!(rej["status"], "denied");
    assert_eq!(rej["tool"], "run_command");
}

#[test]
fn completed_has_every_field() {
    let c = Completed {
        call_id: "c",
        status: "ok",
        error_type: None,
        summary: "done",
        started_at: at(10, 0),
        ended_at: at(10, 250),
        worker: Some(WorkerRef {
            group: "exec",
            pid: Some(42),
        }),
        output_bytes: 12,
        truncated: false,
    }
    .fields();
    assert_eq!(c["duration_ms"], 250);
    assert_eq!(c["worker"]["pid"], 42);
    let keys: Vec<&str> = c.keys().map(String::as_str).collect();
    let i: Vec<String> = interrupted("c", "x").keys().cloned().collect();
    assert_eq!(keys, i, "interrupted completions have the same shape");
}
