//! `toolvisor status`: uptime, audit position, guards, one line per worker (its CPU and
//! RSS count the commands it runs) and the calls in flight; `--json` prints the answer.

use toolvisor_protocol::client::{Client, ClientError};
use toolvisor_protocol::message::{CallStatus, ClientMessage, ServerMessage, WorkerStatus};

use crate::commands::refused;

pub async fn run(c: &mut Client, json: bool) -> Result<i32, ClientError> {
    let id = "status".into();
    let m = c
        .request(
            &ClientMessage::Status {
                id: "status".into(),
            },
            &id,
        )
        .await?;
    let ServerMessage::Status {
        uptime_ms,
        workers,
        audit,
        guards,
        calls,
        ..
    } = &m
    else {
        return refused(m);
    };
    if json {
        println!("{}", serde_json::to_string_pretty(&m).unwrap_or_default());
        return Ok(0);
    }
    println!(
        "uptime {:.1}s   audit {} (seq {})",
        *uptime_ms as f64 / 1000.0,
        audit.path,
        audit.seq
    );
    let landlock = guards
        .landlock
        .map_or("off".to_owned(), |abi| format!("ABI {abi}"));
    println!(
        "guards: landlock {landlock}, openat2 {}, subreaper {}, cgroup {}",
        guards.openat2, guards.subreaper, guards.cgroup
    );
    println!(
        "sandbox: namespaces {}, network {}, limits {}, protected {}",
        guards.namespaces,
        guards.network,
        guards.limits.as_deref().unwrap_or("none"),
        guards.protected.join(" ")
    );
    print!("{}", workers_table(workers));
    print!("{}", calls_table(calls));
    Ok(0)
}

fn workers_table(workers: &[WorkerStatus]) -> String {
    let mut out = format!(
        "{:<8} {:>5} {:>8} {:<10} {:>8} {:>9} {:>10} {:>6}\n",
        "GROUP", "INDEX", "PID", "STATE", "RESTARTS", "IN-FLIGHT", "RSS", "CPU%"
    );
    for w in workers {
        let pid = w.pid.map_or("-".to_owned(), |p| p.to_string());
        out.push_str(&format!(
            "{:<8} {:>5} {:>8} {:<10} {:>8} {:>9} {:>9}K {:>6.1}\n",
            w.group,
            w.index,
            pid,
            w.state,
            w.restarts,
            w.in_flight,
            w.rss_bytes / 1024,
            w.cpu_percent
        ));
    }
    out
}

fn calls_table(calls: &[CallStatus]) -> String {
    if calls.is_empty() {
        return "no calls in flight\n".to_owned();
    }
    let mut out = format!(
        "{:<16} {:<8} {:<20} {:>10}\n",
        "CALL", "SESSION", "TOOL", "RUNNING"
    );
    for c in calls {
        out.push_str(&format!(
            "{:<16} {:<8} {:<20} {:>9.1}s\n",
            c.id.to_string(),
            c.session,
            c.tool,
            c.running_ms as f64 / 1000.0
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_in_flight_are_listed() {
        assert_eq!(calls_table(&[]), "no calls in flight\n");
        let t = calls_table(&[CallStatus {
            id: "cli-1".into(),
            session: "s4".into(),
            tool: "run_command".into(),
            running_ms: 12_345,
        }]);
        let row = t.lines().nth(1).unwrap();
        assert!(
            row.starts_with("cli-1") && row.contains("s4") && row.ends_with("12.3s"),
            "{t}"
        );
    }
}
