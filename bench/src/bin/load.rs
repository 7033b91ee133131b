//! `toolvisor-load`: N clients send a mix of calls to a running supervisor for a fixed
//! time, one call at a time each, while a pinger measures how responsive the
//! supervisor stays. It prints throughput, p50/p99 per tool, ping p99 under load and
//! the peak RSS of the supervisor and its workers, and checks that every call got
//! exactly one correct result and that the audit log has each call's final record.
//! Exit status 0 only if every check passed.
//!
//! Usage: toolvisor-load --workspace DIR [--socket PATH] [--pid PID] [--clients 64]
//!        [--duration 10] [--commands]
//! The workspace must hold a `corpus/` directory of small text files (scripts/load.sh
//! makes one); with `--commands` the config must allow `echo …` and `true`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_bench::{Histogram, call, children, connect, ms, pinger, proc_kb, wait_ready};
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Status};

struct Args {
    workspace: PathBuf,
    socket: PathBuf,
    pid: Option<u32>,
    clients: usize,
    duration: Duration,
    commands: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let (mut workspace, mut socket, mut pid) = (None, None, None);
    let (mut clients, mut duration, mut commands) = (64usize, 10.0f64, false);
    while let Some(a) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--workspace" => workspace = Some(PathBuf::from(val()?)),
            "--socket" => socket = Some(PathBuf::from(val()?)),
            "--pid" => pid = Some(val()?.parse().map_err(|e| format!("--pid: {e}"))?),
            "--clients" => clients = val()?.parse().map_err(|e| format!("--clients: {e}"))?,
            "--duration" => duration = val()?.parse().map_err(|e| format!("--duration: {e}"))?,
            "--commands" => commands = true,
            "-h" | "--help" => return Err("usage: toolvisor-load --workspace DIR [--socket PATH] [--pid PID] [--clients N] [--duration SECS] [--commands]".into()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    let workspace = workspace.ok_or("--workspace is required")?;
    let socket = socket.unwrap_or_else(|| workspace.join(".toolvisor/toolvisor.sock"));
    if clients == 0 || duration.partial_cmp(&0.0) != Some(std::cmp::Ordering::Greater) {
        return Err("--clients and --duration must be positive".into());
    }
    Ok(Args {
        workspace,
        socket,
        pid,
        clients,
        duration: Duration::from_secs_f64(duration),
        commands,
    })
}

/// The corpus the calls read: workspace-relative path → content.
fn load_corpus(ws: &Path) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut dirs = vec![ws.join("corpus")];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| format!("{}: {e}", d.display()))? {
            let p = e.map_err(|e| e.to_string())?.path();
            if p.is_dir() {
                dirs.push(p);
            } else if let Ok(text) = std::fs::read_to_string(&p) {
                let rel = p
                    .strip_prefix(ws)
                    .map_err(|e| e.to_string())?
                    .to_string_lossy()
                    .into_owned();
                out.push((rel, text));
            }
        }
    }
    out.sort();
    if out.is_empty() {
        return Err(format!("no files under {}/corpus", ws.display()));
    }
    Ok(out)
}

/// The n-th call of a client: half reads, then grep, ls and (if allowed) commands.
fn pick(
    n: usize,
    k: usize,
    corpus: &[(String, String)],
    commands: bool,
) -> (&'static str, Value, Option<usize>) {
    let file = (n * 7 + k * 13) % corpus.len();
    match n % 10 {
        0..=4 => ("read_file", json!({"path": corpus[file].0}), Some(file)),
        5 | 6 => (
            "grep",
            json!({"pattern": "needle [0-9]+", "directory": "corpus", "maxResults": 20}),
            None,
        ),
        7 => ("ls", json!({"path": "corpus"}), None),
        8 => ("ls", json!({"path": "corpus", "recursive": true}), None),
        _ if commands && n % 20 == 9 => (
            "run_command",
            json!({"command": format!("echo load {k} {n}")}),
            None,
        ),
        _ if commands => ("run_command", json!({"command": "true"}), None),
        _ => ("read_file", json!({"path": corpus[file].0}), Some(file)),
    }
}

/// What one client saw.
#[derive(Default)]
struct ClientStats {
    session: String,
    calls: u64,
    per_tool: BTreeMap<&'static str, Histogram>,
    errors: BTreeMap<String, u64>,
    wrong: u64,
    strays: u64,
    failed: Option<String>,
}

async fn run_client(
    k: usize,
    socket: PathBuf,
    corpus: Arc<Vec<(String, String)>>,
    commands: bool,
    stop: Arc<AtomicBool>,
) -> ClientStats {
    let mut st = ClientStats::default();
    let mut c = match connect(&socket, "toolvisor-load").await {
        Ok(c) => c,
        Err(e) => {
            st.failed = Some(format!("connect: {e}"));
            return st;
        }
    };
    st.session = c.session.clone();
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let (tool, args, file) = pick(n, k, &corpus, commands);
        let t = Instant::now();
        let r = match call(
            &mut c,
            CallRequest::new(format!("c{n}"), tool, args),
            &mut st.strays,
        )
        .await
        {
            Ok(r) => r,
            Err(e) => {
                st.failed = Some(format!("call c{n}: {e}"));
                return st;
            }
        };
        st.per_tool.entry(tool).or_default().record(t.elapsed());
        st.calls += 1;
        n += 1;
        if r.status != Status::Ok {
            *st.errors
                .entry(r.error.map_or_else(
                    || r.status.as_str().to_owned(),
                    |e| e.kind.as_str().to_owned(),
                ))
                .or_default() += 1;
        } else if file.is_some_and(|f| corpus[f].1 != r.content) {
            st.wrong += 1;
        }
    }
    // Nothing may still be on its way: a ping's pong must be the only thing left.
    match tokio::time::timeout(Duration::from_secs(10), drain_until_pong(&mut c)).await {
        Ok(Ok(extra)) => st.strays += extra,
        Ok(Err(e)) => st.failed = Some(format!("final ping: {e}")),
        Err(_) => st.failed = Some("no pong within 10 s".into()),
    }
    st
}

async fn drain_until_pong(
    c: &mut toolvisor_protocol::client::Client,
) -> Result<u64, toolvisor_protocol::client::ClientError> {
    c.send(&ClientMessage::Ping { id: "last".into() }).await?;
    let mut extra = 0;
    loop {
        match c.recv().await? {
            ServerMessage::Pong { .. } => return Ok(extra),
            ServerMessage::Result(_) => extra += 1,
            _ => {}
        }
    }
}

/// Peak resident memory seen by sampling.
#[derive(Default)]
struct Peaks {
    supervisor: u64,
    /// Largest single worker.
    worker: u64,
    /// Largest sum over all workers at one sample.
    workers_sum: u64,
    workers_seen: HashSet<u32>,
}

async fn sample_rss(pid: u32, stop: Arc<AtomicBool>) -> Peaks {
    let mut p = Peaks::default();
    loop {
        p.supervisor = p.supervisor.max(proc_kb(pid, "VmRSS:").unwrap_or(0));
        let mut sum = 0;
        for w in children(pid) {
            let rss = proc_kb(w, "VmRSS:").unwrap_or(0);
            p.worker = p.worker.max(proc_kb(w, "VmHWM:").unwrap_or(rss));
            p.workers_seen.insert(w);
            sum += rss;
        }
        p.workers_sum = p.workers_sum.max(sum);
        if stop.load(Ordering::Relaxed) {
            p.supervisor = p.supervisor.max(proc_kb(pid, "VmHWM:").unwrap_or(0));
            return p;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Call ids (`<session>:<id>`) that have a final audit record (`completed` or
/// `rejected`), with how many each has.
fn audited(ws: &Path) -> Result<HashMap<String, u32>, String> {
    let path = ws.join(".toolvisor/audit.jsonl");
    let text = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = HashMap::new();
    for line in text.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let kind = v.get("kind").and_then(Value::as_str).unwrap_or("");
        if (kind == "completed" || kind == "rejected")
            && let Some(id) = v.get("call_id").and_then(Value::as_str)
        {
            *out.entry(id.to_owned()).or_default() += 1;
        }
    }
    Ok(out)
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("toolvisor-load: {e}");
            ExitCode::from(2)
        }
    }
}

async fn run() -> Result<bool, String> {
    let a = parse_args()?;
    let corpus = Arc::new(load_corpus(&a.workspace)?);
    wait_ready(&a.socket, Duration::from_secs(30)).await?;
    let pid = match a.pid {
        Some(p) => p,
        None => std::fs::read_to_string(a.workspace.join(".toolvisor/toolvisor.pid"))
            .map_err(|e| format!("pidfile: {e}"))?
            .trim()
            .parse()
            .map_err(|e| format!("pidfile: {e}"))?,
    };
    println!(
        "toolvisor-load: {} clients for {:.1} s, {} corpus files, commands {}",
        a.clients,
        a.duration.as_secs_f64(),
        corpus.len(),
        if a.commands { "on" } else { "off" }
    );
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = tokio::spawn(sample_rss(pid, stop.clone()));
    let pinger = tokio::spawn(pinger(
        a.socket.clone(),
        "toolvisor-load-ping",
        stop.clone(),
        Duration::from_millis(10),
    ));
    let clients: Vec<_> = (0..a.clients)
        .map(|k| {
            tokio::spawn(run_client(
                k,
                a.socket.clone(),
                corpus.clone(),
                a.commands,
                stop.clone(),
            ))
        })
        .collect();
    let t0 = Instant::now();
    tokio::time::sleep(a.duration).await;
    stop.store(true, Ordering::Relaxed);
    let mut all = Vec::new();
    for c in clients {
        all.push(c.await.map_err(|e| format!("a client task failed: {e}"))?);
    }
    let elapsed = t0.elapsed();
    let ping = pinger.await.map_err(|e| e.to_string())?;
    let peaks = sampler.await.map_err(|e| e.to_string())?;
    Ok(report(&a, &all, elapsed, ping, &peaks))
}

/// Print the numbers and the checks; `true` if every check passed.
fn report(
    a: &Args,
    all: &[ClientStats],
    elapsed: Duration,
    ping: Result<Histogram, String>,
    peaks: &Peaks,
) -> bool {
    let mut per_tool: BTreeMap<&str, Histogram> = BTreeMap::new();
    let mut errors: BTreeMap<&str, u64> = BTreeMap::new();
    let (mut calls, mut wrong, mut strays) = (0, 0, 0);
    for c in all {
        calls += c.calls;
        wrong += c.wrong;
        strays += c.strays;
        for (t, h) in &c.per_tool {
            per_tool.entry(t).or_default().merge(h);
        }
        for (e, n) in &c.errors {
            *errors.entry(e).or_default() += n;
        }
    }
    println!(
        "calls: {calls} in {:.2} s = {:.0} calls/s",
        elapsed.as_secs_f64(),
        calls as f64 / elapsed.as_secs_f64()
    );
    println!(
        "{:<12} {:>8} {:>9} {:>9} {:>9}",
        "tool", "calls", "p50 ms", "p99 ms", "max ms"
    );
    for (t, h) in &per_tool {
        println!(
            "{:<12} {:>8} {:>9} {:>9} {:>9}",
            t,
            h.count(),
            ms(h.percentile(50.0)),
            ms(h.percentile(99.0)),
            ms(h.max())
        );
    }
    let ping_ok = match &ping {
        Ok(h) => {
            println!(
                "ping under load: {} pings, p50 {} ms, p99 {} ms, max {} ms",
                h.count(),
                ms(h.percentile(50.0)),
                ms(h.percentile(99.0)),
                ms(h.max())
            );
            true
        }
        Err(e) => {
            println!("ping under load: FAILED ({e})");
            false
        }
    };
    println!(
        "peak RSS: supervisor {}; largest worker {}; all workers together {} ({} worker processes seen)",
        mib(peaks.supervisor),
        mib(peaks.worker),
        mib(peaks.workers_sum),
        peaks.workers_seen.len()
    );
    let mut ok = ping_ok;
    ok &= check(
        "every client ran to the end",
        all.iter().all(|c| c.failed.is_none()),
        || {
            all.iter()
                .filter_map(|c| c.failed.clone())
                .take(5)
                .collect::<Vec<_>>()
                .join("; ")
        },
    );
    ok &= check(
        "every call got exactly one result (no stray or second result)",
        strays == 0,
        || format!("{strays} stray results"),
    );
    ok &= check("every result ok", errors.is_empty(), || {
        format!("{errors:?}")
    });
    ok &= check(
        "every read_file returned the file's content",
        wrong == 0,
        || format!("{wrong} wrong"),
    );
    ok &= check_audit(&a.workspace, all);
    ok
}

fn check(what: &str, pass: bool, why: impl FnOnce() -> String) -> bool {
    if pass {
        println!("check: {what}: OK");
    } else {
        println!("check: {what}: FAILED ({})", why());
    }
    pass
}

/// Every call of every client has exactly one final audit record.
fn check_audit(ws: &Path, all: &[ClientStats]) -> bool {
    let records = match audited(ws) {
        Ok(r) => r,
        Err(e) => return check("audit log readable", false, || e),
    };
    let (mut missing, mut doubled, mut total) = (0u64, 0u64, 0u64);
    for c in all.iter().filter(|c| !c.session.is_empty()) {
        for n in 0..c.calls {
            total += 1;
            match records.get(&format!("{}:c{n}", c.session)) {
                None => missing += 1,
                Some(1) => {}
                Some(_) => doubled += 1,
            }
        }
    }
    check(
        &format!("audit has one completed/rejected record for each of the {total} calls"),
        missing == 0 && doubled == 0,
        || format!("{missing} missing, {doubled} with more than one"),
    )
}
