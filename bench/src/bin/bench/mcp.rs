//! The MCP rows: toolvisor through `toolvisor mcp` (audit fsync never and always) beside
//! `@modelcontextprotocol/server-filesystem` and Desktop Commander, measured by
//! `scripts/bench_mcp.mjs` through one MCP client and read here from its JSON. A
//! server or case that could not be measured gives a row that says n/a and why.

use super::*;

/// One case: its key in the JSON, what the row says, the peers compared (the fastest
/// that has the case is the baseline), and the targets with fsync never and always.
/// With `floor`, the ratio compares own costs: each p50 minus the null server's (the
/// client, the transport and one JSON round trip), as issue 28 asks; else p50s.
struct Case {
    key: &'static str,
    what: &'static str,
    peers: &'static [&'static str],
    never: f64,
    always: f64,
    floor: bool,
}

const CASES: &[Case] = &[
    Case {
        key: "read",
        what: "read a 4 KB file",
        peers: &[FS],
        never: 0.5,
        always: 1.0,
        floor: true,
    },
    Case {
        key: "list",
        what: "list a 100-entry directory",
        peers: &[FS],
        never: 0.5,
        always: 1.0,
        floor: true,
    },
    Case {
        key: "glob",
        what: "glob `**/*.rs` in tokio's sources (≥ 10× faster)",
        peers: &[FS, DC],
        never: 0.1,
        always: 0.1,
        floor: false,
    },
    Case {
        key: "grep",
        what: "grep `fn main` in tokio's sources (≥ 5× faster)",
        peers: &[FS, DC],
        never: 0.2,
        always: 0.2,
        floor: false,
    },
    Case {
        key: "write",
        what: "write a 4 KB file",
        peers: &[FS],
        never: 0.5,
        always: 1.0,
        floor: true,
    },
    Case {
        key: "edit",
        what: "edit a 4 KB file (one replacement)",
        peers: &[FS],
        never: 0.5,
        always: 1.0,
        floor: true,
    },
    Case {
        key: "run",
        what: "run `true` (sandbox on) vs `start_process` (≥ 5× faster)",
        peers: &[DC],
        never: 0.2,
        always: 0.2,
        floor: false,
    },
];

const FS: &str = "filesystem";
const DC: &str = "desktop_commander";
const NULL: &str = "null";
const ISSUE: u8 = 15;
/// The issue whose targets the own-cost rows measure.
const FLOOR_ISSUE: u8 = 28;

fn peer_name(key: &str) -> &str {
    match key {
        FS => "server-filesystem",
        DC => "Desktop Commander",
        "toolvisor_never" => "toolvisor (fsync never)",
        "toolvisor_always" => "toolvisor (fsync always)",
        NULL => "the null server",
        other => other,
    }
}

/// One server's numbers for a case, or why there are none.
struct Cell {
    p50: f64,
    p99: f64,
    count: Option<u64>,
}

fn cell(v: &Value, case: &str, server: &str) -> Result<Cell, String> {
    let c = v
        .get("cases")
        .and_then(|c| c.get(case))
        .and_then(|c| c.get(server))
        .ok_or_else(|| format!("{} has no `{case}`", peer_name(server)))?;
    if let Some(why) = c.get("failed").and_then(Value::as_str) {
        return Err(format!("{}: {why}", peer_name(server)));
    }
    let num = |k: &str| c.get(k).and_then(Value::as_f64);
    match (num("p50_ms"), num("p99_ms")) {
        (Some(p50), Some(p99)) if p50 > 0.0 => Ok(Cell {
            p50,
            p99,
            count: c.get("count").and_then(Value::as_u64),
        }),
        _ => Err(format!("{}: no latencies for `{case}`", peer_name(server))),
    }
}

fn show(c: &Cell) -> String {
    format!("p50 {:.2} / p99 {:.2} ms", c.p50, c.p99)
}

/// The rows from `scripts/bench_mcp.mjs`'s JSON, or n/a rows saying why there is none.
pub(super) fn mcp_rows(source: &McpSource, t: &mut Table) {
    let v = match source {
        McpSource::File(path) => std::fs::read_to_string(path)
            .map_err(|e| format!("{}: {e}", path.display()))
            .and_then(|s| serde_json::from_str::<Value>(&s).map_err(|e| e.to_string())),
        McpSource::Skipped(why) => Err(why.clone()),
        McpSource::None => return,
    };
    let v = match v {
        Ok(v) => v,
        Err(why) => {
            for case in CASES {
                for (fsync, target) in [("never", case.never), ("always", case.always)] {
                    t.failed(
                        ISSUE,
                        &format!("MCP: {}, fsync {fsync}", case.what),
                        &why,
                        Some(Target::AtMost(target)),
                    );
                    t.flag_last("n/a");
                }
            }
            return;
        }
    };
    for case in CASES {
        for (fsync, target) in [("never", case.never), ("always", case.always)] {
            case_row(&v, case, fsync, Target::AtMost(target), t);
        }
    }
    t.notes.push(mcp_note(&v));
}

/// One case at one fsync mode: toolvisor against the fastest peer that has the case.
fn case_row(v: &Value, case: &Case, fsync: &str, target: Target, t: &mut Table) {
    let peers: Vec<(&str, Result<Cell, String>)> = (case.peers.iter())
        .map(|p| (*p, cell(v, case.key, p)))
        .collect();
    let has_case = |p: &&(&str, Result<Cell, String>)| {
        // A peer without the tool at all is not listed; one that failed is.
        v.pointer(&format!("/cases/{}/{}", case.key, p.0)).is_some()
    };
    let listed: Vec<_> = peers.iter().filter(has_case).collect();
    let baseline = listed
        .iter()
        .filter_map(|(p, c)| c.as_ref().ok().map(|c| (*p, c)))
        .min_by(|a, b| a.1.p50.total_cmp(&b.1.p50));
    let what = match baseline {
        Some((p, _)) => format!("MCP: {}, fsync {fsync}, vs {}", case.what, peer_name(p)),
        None => format!("MCP: {}, fsync {fsync}", case.what),
    };
    let peers_text = listed
        .iter()
        .map(|(p, c)| match c {
            Ok(c) => format!("{}: {}", peer_name(p), show(c)),
            Err(e) => format!("n/a ({e})"),
        })
        .collect::<Vec<_>>()
        .join("; ");
    let tv = match cell(v, case.key, &format!("toolvisor_{fsync}")) {
        Ok(c) => c,
        Err(e) => {
            t.push(
                ISSUE,
                what,
                format!("n/a ({e})"),
                peers_text,
                None,
                Some(target),
            );
            t.flag_last("n/a");
            return;
        }
    };
    let Some((_, base)) = baseline else {
        t.push(ISSUE, what, show(&tv), peers_text, None, Some(target));
        t.flag_last("n/a");
        return;
    };
    let counts = match (tv.count, base.count) {
        (Some(a), Some(b)) if a == b => format!(" ({a} results, same count)"),
        (Some(a), Some(b)) => format!(" ({a} vs {b} results)"),
        _ => String::new(),
    };
    if case.floor {
        floor_row(v, case.key, (&what, &tv, base), peers_text, (target, t));
        return;
    }
    t.push(
        ISSUE,
        format!("{what}{counts}"),
        show(&tv),
        peers_text,
        Some(tv.p50 / base.p50),
        Some(target),
    );
    if let (Some(a), Some(b)) = (tv.count, base.count)
        && a != b
    {
        t.flag_last(&format!("COUNTS DIFFER: {a} vs {b}"));
    }
}

/// An own-cost row: toolvisor's p50 above the null server's against the baseline's.
fn floor_row(
    v: &Value,
    key: &str,
    (what, tv, base): (&str, &Cell, &Cell),
    peers: String,
    (target, t): (Target, &mut Table),
) {
    let what = what.replacen("MCP: ", "MCP own cost above the null server: ", 1);
    let floor = match cell(v, key, NULL) {
        Ok(f) => f,
        Err(e) => {
            t.push(
                FLOOR_ISSUE,
                what,
                show(tv),
                format!("{peers}; n/a ({e})"),
                None,
                Some(target),
            );
            t.flag_last("n/a");
            return;
        }
    };
    let own = |c: &Cell| (c.p50 - floor.p50).max(0.001);
    t.push(
        FLOOR_ISSUE,
        what,
        format!("{} (own {:.2} ms)", show(tv), own(tv)),
        format!(
            "{peers} (own {:.2} ms); null server p50 {:.2} ms",
            own(base),
            floor.p50
        ),
        Some(own(tv) / own(base)),
        Some(target),
    );
}

/// What ran, with which versions, and each server's memory at the end.
fn mcp_note(v: &Value) -> String {
    let s = |p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_owned()
    };
    let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
    let rss = ["toolvisor_never", "toolvisor_always", FS, DC]
        .iter()
        .map(|k| {
            match v
                .pointer(&format!("/servers/{k}/rss_kb"))
                .and_then(Value::as_u64)
            {
                Some(kb) => format!("{} {}", peer_name(k), mib(kb * 1024)),
                None => format!(
                    "{} n/a ({})",
                    peer_name(k),
                    s(&format!("/servers/{k}/failed"))
                ),
            }
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "MCP rows (issue 15): one MCP client (the official TypeScript SDK {}, node {}, stdio) drives `toolvisor mcp` on two workspaces (audit fsync never / always; the bridge starts each daemon), server-filesystem {} and Desktop Commander {}; rounds interleaving the servers: {}, each with {} calls per case and server ({} for glob and grep) after 5 warm-up calls; ratio = toolvisor p50 / the fastest peer's p50 that has the case. RSS of each server's process tree at the end: {rss}.",
        s("/versions/sdk"),
        s("/versions/node"),
        s("/versions/filesystem"),
        s("/versions/desktop_commander"),
        n("/rounds"),
        n("/n"),
        (n("/n") / 5).max(20),
    )
}

/// Where the MCP numbers come from.
pub(super) enum McpSource {
    /// Not asked for (`table` without `--mcp` or `--mcp-skip`): no rows.
    None,
    /// `--mcp FILE`: the JSON of `scripts/bench_mcp.mjs`.
    File(PathBuf),
    /// `--mcp-skip REASON`: n/a rows with the reason.
    Skipped(String),
}
