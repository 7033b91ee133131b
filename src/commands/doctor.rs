//! `toolvisor doctor`: which guards hold on this host, as the daemon's canary command
//! found them (run in a real command sandbox at start and after each reload), with the
//! reason for each that does not. Exit 0 when every guard is verified, 1 otherwise: a
//! script can refuse to hand an agent a workspace whose boundary has a hole.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::Value;
use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{ClientMessage, ServerMessage};

use crate::commands::refused;

/// How long to wait for the first canary of a daemon that has just started.
const FIRST_CANARY: Duration = Duration::from_secs(60);
/// How often to ask again meanwhile.
const ASK_EVERY: Duration = Duration::from_millis(200);

pub async fn run(c: &mut Client, json: bool) -> Result<i32, ClientError> {
    let deadline = Instant::now() + FIRST_CANARY;
    let verified = loop {
        let id = "doctor".into();
        let m = c
            .request(
                &ClientMessage::Status {
                    id: "doctor".into(),
                },
                &id,
            )
            .await?;
        let ServerMessage::Status { guards, .. } = m else {
            return refused(m);
        };
        if !guards.verified.is_empty() {
            break guards.verified;
        }
        if Instant::now() >= deadline {
            eprintln!("toolvisor: the daemon has not finished its guard canary");
            return Ok(1);
        }
        tokio::time::sleep(ASK_EVERY).await;
    };
    let all = verified.values().all(|v| *v == Value::Bool(true));
    if json {
        let out = serde_json::json!({ "verified": verified, "all": all });
        println!("{}", serde_json::to_string_pretty(&out).unwrap_or_default());
    } else {
        print!("{}", table(&verified));
    }
    Ok(if all { 0 } else { 1 })
}

/// One line per guard: its name, and `verified` or why not.
fn table(verified: &BTreeMap<String, Value>) -> String {
    let mut out = String::new();
    for (name, v) in verified {
        let verdict = match v {
            Value::Bool(true) => "verified".to_owned(),
            Value::String(why) => format!("NOT VERIFIED: {why}"),
            other => format!("NOT VERIFIED: {other}"),
        };
        out.push_str(&format!("{name:<14} {verdict}\n"));
    }
    let failed = verified
        .values()
        .filter(|v| **v != Value::Bool(true))
        .count();
    match failed {
        0 => out.push_str("every guard holds\n"),
        n => out.push_str(&format!(
            "{n} guard(s) do not hold: commands are not confined\n"
        )),
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guard_that_failed_says_why() {
        let v: BTreeMap<String, Value> = [
            ("hidden".to_owned(), Value::Bool(true)),
            ("network".to_owned(), Value::String("reached".into())),
        ]
        .into_iter()
        .collect();
        let t = table(&v);
        assert!(t.contains("hidden         verified"), "{t}");
        assert!(t.contains("network        NOT VERIFIED: reached"), "{t}");
        assert!(t.contains("1 guard(s) do not hold"), "{t}");
    }
}
