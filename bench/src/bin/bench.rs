//! `toolvisor-bench`: the benchmark driver behind `scripts/bench.sh`. It measures
//! toolvisor and its bare baselines side by side in one run and prints one Markdown
//! table: ratio against the target and PASS/MISS per row.
//!
//! Usage:
//!   toolvisor-bench table --never WS --always WS --echo SOCK --relay SOCK
//!        [--rg PATH] [--fd PATH] [--secs 3] [--pattern REGEX]
//!   toolvisor-bench lat --socket SOCK --op ping|read|echo-ping|echo-call
//!        [--path FILE] [--clients N] [--secs S]
//!
//! `--never` and `--always` are workspaces served by `toolvisor serve` with
//! `[audit] fsync = "never"` and `"always"`; the `never` one holds `corpus/` (for grep
//! and glob). `--echo` is `toolvisor-echo serve` (1 hop); `--relay` is
//! `toolvisor-echo relay` in front of an echo server that answers 4 KiB (2 hops).
//! `lat` is one latency measurement, for digging into a single row.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use toolvisor_bench::{Histogram, call, children, connect, ms, pinger, proc_kb, wait_ready};
use toolvisor_protocol::Id;
use toolvisor_protocol::client::Client;
use toolvisor_protocol::frame;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Status, Topic};

/// Builds a call's arguments from its sequence number.
type ArgsFn = Arc<dyn Fn(u64) -> Value + Send + Sync>;

/// What one round trip is.
#[derive(Clone)]
enum Op {
    /// `{type: ping, id}` to the echo server (answered with the same map).
    EchoPing,
    /// A `call`-shaped map to the relay (answered with 4 KiB of `content`).
    EchoCall,
    /// toolvisor `ping`.
    Ping,
    /// A toolvisor tool call; it must end `ok`.
    Call(&'static str, ArgsFn),
}

impl Op {
    fn call(tool: &'static str, args: impl Fn(u64) -> Value + Send + Sync + 'static) -> Op {
        Op::Call(tool, Arc::new(args))
    }

    fn read(path: &str) -> Op {
        let path = path.to_owned();
        Op::call("read_file", move |_| json!({ "path": path }))
    }
}

/// A connection of either kind.
enum Conn {
    Raw(OwnedReadHalf, OwnedWriteHalf),
    Tv(Box<Client>),
}

impl Conn {
    async fn open(socket: &Path, op: &Op) -> Result<Conn, String> {
        match op {
            Op::EchoPing | Op::EchoCall => {
                let s = UnixStream::connect(socket)
                    .await
                    .map_err(|e| format!("connect {}: {e}", socket.display()))?;
                let (rd, wr) = s.into_split();
                Ok(Conn::Raw(rd, wr))
            }
            Op::Ping | Op::Call(..) => Ok(Conn::Tv(Box::new(
                connect(socket, "toolvisor-bench")
                    .await
                    .map_err(|e| e.to_string())?,
            ))),
        }
    }

    /// One round trip; `Ok(false)` when it was answered but not `ok`.
    async fn once(&mut self, op: &Op, n: u64) -> Result<bool, String> {
        match (self, op) {
            (Conn::Raw(rd, wr), Op::EchoPing) => {
                raw_round(rd, wr, json!({"type": "ping", "id": n})).await
            }
            (Conn::Raw(rd, wr), Op::EchoCall) => {
                let req = json!({"type": "call", "id": n, "tool": "read_file", "args": {"path": "file4k.txt"}});
                raw_round(rd, wr, req).await
            }
            (Conn::Tv(c), Op::Ping) => {
                let id = Id::Int(n as i64);
                match c
                    .request(&ClientMessage::Ping { id: id.clone() }, &id)
                    .await
                {
                    Ok(ServerMessage::Pong { .. }) => Ok(true),
                    Ok(_) => Ok(false),
                    Err(e) => Err(e.to_string()),
                }
            }
            (Conn::Tv(c), Op::Call(tool, args)) => {
                let mut strays = 0;
                let req = CallRequest::new(Id::Int(n as i64), *tool, args(n));
                let r = call(c, req, &mut strays).await.map_err(|e| e.to_string())?;
                Ok(r.status == Status::Ok && strays == 0)
            }
            _ => Err("connection and operation do not match".into()),
        }
    }
}

/// Send a map, read the answer and check it echoes the id.
async fn raw_round(
    rd: &mut OwnedReadHalf,
    wr: &mut OwnedWriteHalf,
    req: Value,
) -> Result<bool, String> {
    let bytes = frame::encode(&req).map_err(|e| e.to_string())?;
    wr.write_all(&bytes).await.map_err(|e| e.to_string())?;
    let body = frame::read_frame(rd, toolvisor_protocol::DEFAULT_MAX_FRAME_BYTES)
        .await
        .map_err(|e| e.to_string())?
        .ok_or("the echo server closed the connection")?;
    let ans: Value = rmp_serde::from_slice(&body).map_err(|e| e.to_string())?;
    Ok(ans.get("id") == req.get("id"))
}

/// What a measurement saw.
#[derive(Default)]
struct Run {
    hist: Histogram,
    calls: u64,
    failed: u64,
    secs: f64,
}

impl Run {
    fn rate(&self) -> f64 {
        self.calls as f64 / self.secs.max(1e-9)
    }
    fn p50(&self) -> Duration {
        self.hist.percentile(50.0)
    }
    fn p99(&self) -> Duration {
        self.hist.percentile(99.0)
    }
}

/// `clients` connections, one round trip at a time each: a warm-up that is not
/// recorded, then `secs` recorded.
async fn drive(socket: &Path, op: &Op, clients: usize, secs: f64) -> Result<Run, String> {
    let warm = Duration::from_millis(300);
    let start = Instant::now() + warm;
    let end = start + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let (socket, op) = (socket.to_owned(), op.clone());
            tokio::spawn(async move {
                let mut conn = Conn::open(&socket, &op).await?;
                let mut run = Run::default();
                let mut n = 0u64;
                loop {
                    let t = Instant::now();
                    if t >= end {
                        return Ok::<_, String>(run);
                    }
                    let ok = conn.once(&op, n).await?;
                    n += 1;
                    if t >= start {
                        run.hist.record(t.elapsed());
                        run.calls += 1;
                        run.failed += u64::from(!ok);
                    }
                }
            })
        })
        .collect();
    let mut all = Run {
        secs,
        ..Run::default()
    };
    for t in tasks {
        let r = t.await.map_err(|e| e.to_string())??;
        all.hist.merge(&r.hist);
        all.calls += r.calls;
        all.failed += r.failed;
    }
    if all.failed > 0 {
        return Err(format!(
            "{} of {} calls did not end ok",
            all.failed, all.calls
        ));
    }
    Ok(all)
}

/// `sh -c true`, spawned and waited for, back to back for `secs`.
fn bare_spawn(secs: f64) -> Result<Run, String> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut run = Run {
        secs,
        ..Run::default()
    };
    while Instant::now() < end {
        let t = Instant::now();
        let st = Command::new("sh")
            .args(["-c", "true"])
            .status()
            .map_err(|e| format!("sh: {e}"))?;
        run.hist.record(t.elapsed());
        run.calls += 1;
        run.failed += u64::from(!st.success());
    }
    Ok(run)
}

/// The median of a few wall times.
fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}

/// Runs of each search for its median (after one unrecorded warm-up run).
const SEARCH_REPS: usize = 5;

/// Lines printed by an external tool run in `cwd`.
fn count_lines_of(cwd: &Path, program: &Path, args: &[&str]) -> Result<u64, String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    Ok(out.stdout.iter().filter(|b| **b == b'\n').count() as u64)
}

/// A search tool's result lines (the truncation marker, if any, is not a line of it).
async fn tv_lines(c: &mut Client, tool: &'static str, args: Value) -> Result<u64, String> {
    let mut strays = 0;
    let r = call(c, CallRequest::new("search", tool, args), &mut strays)
        .await
        .map_err(|e| e.to_string())?;
    if r.status != Status::Ok {
        return Err(format!("{tool}: {}", r.content));
    }
    if r.truncated.is_some() {
        return Err(format!(
            "{tool}: output truncated; raise the limits in the bench config"
        ));
    }
    Ok(r.content.lines().filter(|l| !l.is_empty()).count() as u64)
}

/// Files and bytes under `dir` (not following symlinks).
fn tree_size(dir: &Path) -> (u64, u64) {
    let (mut files, mut bytes) = (0, 0);
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            match e.file_type() {
                Ok(t) if t.is_dir() => stack.push(e.path()),
                Ok(t) if t.is_file() => {
                    files += 1;
                    bytes += e.metadata().map(|m| m.len()).unwrap_or(0);
                }
                _ => {}
            }
        }
    }
    (files, bytes)
}

/// One line of the table.
struct Row {
    issue: u8,
    what: String,
    toolvisor: String,
    baseline: String,
    ratio: Option<f64>,
    /// How the ratio column shows `ratio`: `×` for a ratio, or the unit of an
    /// absolute value (calls/s, ms) when the target is absolute.
    unit: &'static str,
    target: String,
    /// `Some(pass)` when the row has a target.
    pass: Option<bool>,
}

#[derive(Default)]
struct Table {
    rows: Vec<Row>,
    notes: Vec<String>,
}

impl Table {
    fn push(
        &mut self,
        issue: u8,
        what: impl Into<String>,
        toolvisor: String,
        baseline: String,
        ratio: Option<f64>,
        target: Option<Target>,
    ) {
        let what = what.into();
        let (target, pass) = match (target, ratio) {
            (Some(t), Some(r)) => (t.to_string(), Some(t.holds(r))),
            (Some(t), None) => (t.to_string(), Some(false)),
            (None, _) => (String::new(), None),
        };
        eprintln!("  [{issue}] {what}: {toolvisor} | {baseline} | {ratio:?} {target} {pass:?}");
        self.rows.push(Row {
            issue,
            what,
            toolvisor,
            baseline,
            ratio,
            unit: "×",
            target,
            pass,
        });
    }

    /// A row whose target is an absolute value in `unit`, not a ratio.
    fn push_abs(
        &mut self,
        issue: u8,
        what: impl Into<String>,
        toolvisor: String,
        baseline: String,
        (value, unit): (f64, &'static str),
        target: Target,
    ) {
        self.push(issue, what, toolvisor, baseline, Some(value), Some(target));
        if let Some(r) = self.rows.last_mut() {
            r.unit = unit;
            r.target = format!("{} {unit}", r.target);
        }
    }

    /// A measurement that could not be made.
    fn failed(&mut self, issue: u8, what: &str, why: &str, target: Option<Target>) {
        self.push(
            issue,
            what,
            format!("n/a ({why})"),
            String::new(),
            None,
            target,
        );
    }

    fn print(&self) {
        println!("| # | measurement | toolvisor | baseline | ratio | target | result |");
        println!("|---|---|---|---|---|---|---|");
        for r in &self.rows {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.issue,
                r.what,
                r.toolvisor,
                r.baseline,
                r.ratio.map_or(String::new(), |x| match r.unit {
                    "×" => format!("{x:.2}×"),
                    unit => format!("{x:.0} {unit}"),
                }),
                r.target,
                match r.pass {
                    Some(true) => "PASS",
                    Some(false) => "**MISS**",
                    None => "",
                }
            );
        }
        println!();
        for n in &self.notes {
            println!("- {n}");
        }
    }
}

/// A row's target: the ratio (toolvisor / baseline, or a value) at most or at least.
#[derive(Clone, Copy)]
enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    fn holds(self, x: f64) -> bool {
        match self {
            Target::AtMost(t) => x <= t,
            Target::AtLeast(t) => x >= t,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::AtMost(t) => write!(f, "≤ {t}"),
            Target::AtLeast(t) => write!(f, "≥ {t}"),
        }
    }
}

fn lat(r: &Run) -> String {
    format!("p50 {} / p99 {} ms", ms(r.p50()), ms(r.p99()))
}

fn lat_rate(r: &Run) -> String {
    format!("{}, {:.0}/s", lat(r), r.rate())
}

fn ratio(a: Duration, b: Duration) -> Option<f64> {
    (b > Duration::ZERO).then(|| a.as_secs_f64() / b.as_secs_f64())
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}

struct Args {
    never: PathBuf,
    always: PathBuf,
    echo: PathBuf,
    relay: PathBuf,
    rg: Option<PathBuf>,
    fd: Option<PathBuf>,
    secs: f64,
    pattern: String,
}

fn socket_of(ws: &Path) -> PathBuf {
    ws.join(".toolvisor/toolvisor.sock")
}

fn pid_of(ws: &Path) -> Result<u32, String> {
    std::fs::read_to_string(ws.join(".toolvisor/toolvisor.pid"))
        .map_err(|e| format!("pidfile of {}: {e}", ws.display()))?
        .trim()
        .parse()
        .map_err(|e| format!("pidfile of {}: {e}", ws.display()))
}

/// The files the calls use, in both workspaces.
fn prepare(ws: &Path) -> Result<(), String> {
    let w = |name: &str, text: String| {
        std::fs::write(ws.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    let line = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\n";
    w("file4k.txt", line.repeat(64))?;
    w(
        "tiny.txt",
        "a small file of sixty-four bytes for the calls/s rows ....\n".into(),
    )?;
    w(
        "edit4k.txt",
        format!("{}marker-A\n{}", line.repeat(32), line.repeat(31)),
    )?;
    std::fs::create_dir_all(ws.join("out")).map_err(|e| e.to_string())
}

async fn table(a: &Args) -> Result<Table, String> {
    let (never, always) = (socket_of(&a.never), socket_of(&a.always));
    for ws in [&a.never, &a.always] {
        prepare(ws)?;
        wait_ready(&socket_of(ws), Duration::from_secs(30)).await?;
    }
    let secs = a.secs;
    let mut t = Table::default();

    eprintln!("issue 2: 1 hop");
    let e1 = drive(&a.echo, &Op::EchoPing, 1, secs).await?;
    let p1 = drive(&never, &Op::Ping, 1, secs).await?;
    let e16 = drive(&a.echo, &Op::EchoPing, 16, secs).await?;
    let p16 = drive(&never, &Op::Ping, 16, secs).await?;
    t.push(
        2,
        "`ping` vs bare echo 1 hop, 1 client",
        lat(&p1),
        lat(&e1),
        ratio(p1.p50(), e1.p50()),
        Some(Target::AtMost(1.3)),
    );
    t.push(
        2,
        "`ping` vs bare echo 1 hop, 16 clients",
        lat_rate(&p16),
        lat_rate(&e16),
        ratio(p16.p50(), e16.p50()),
        None,
    );

    eprintln!("issue 2: 2 hops");
    let read4k = Op::read("file4k.txt");
    let mut e2 = Vec::new();
    let mut rn = Vec::new();
    for clients in [1, 16, 64] {
        e2.push(drive(&a.relay, &Op::EchoCall, clients, secs).await?);
        rn.push(drive(&never, &read4k, clients, secs).await?);
    }
    let ra1 = drive(&always, &read4k, 1, secs).await?;
    let ra16 = drive(&always, &read4k, 16, secs).await?;
    t.push(
        2,
        "`read_file` 4 KB (fsync never) vs bare 2 hops, 1 client",
        lat(&rn[0]),
        lat(&e2[0]),
        ratio(rn[0].p50(), e2[0].p50()),
        Some(Target::AtMost(2.0)),
    );
    t.push(
        2,
        "`read_file` 4 KB (fsync always) vs bare 2 hops, 1 client",
        lat(&ra1),
        lat(&e2[0]),
        ratio(ra1.p50(), e2[0].p50()),
        None,
    );
    t.push(
        2,
        "`read_file` 4 KB (fsync never) vs bare 2 hops, 16 clients",
        lat_rate(&rn[1]),
        lat_rate(&e2[1]),
        ratio(rn[1].p50(), e2[1].p50()),
        None,
    );
    t.push(
        2,
        "`read_file` 4 KB (fsync always) vs bare 2 hops, 16 clients",
        lat_rate(&ra16),
        lat_rate(&e2[1]),
        ratio(ra16.p50(), e2[1].p50()),
        None,
    );

    eprintln!("issue 2: grep and glob");
    search_rows(a, &never, &mut t).await;

    eprintln!("issue 3: commands, writes, memory");
    let bare = tokio::task::spawn_blocking(move || bare_spawn(secs))
        .await
        .map_err(|e| e.to_string())??;
    let run_true = drive(
        &never,
        &Op::call("run_command", |_| json!({"command": "true"})),
        1,
        secs,
    )
    .await?;
    t.push(
        3,
        "`run_command \"true\"` vs `sh -c true` spawn+wait",
        lat(&run_true),
        lat(&bare),
        ratio(run_true.p50(), bare.p50()),
        Some(Target::AtMost(1.5)),
    );
    for (label, sock) in [("never", &never), ("always", &always)] {
        let content = "w".repeat(4095) + "\n";
        let write = Op::call(
            "write_file",
            move |n| json!({"path": format!("out/w{}.txt", n % 8), "content": content, "overwrite": true}),
        );
        let w = drive(sock, &write, 1, secs).await?;
        let edit = Op::call("edit_file", |n| {
            let (from, to) = if n % 2 == 0 {
                ("marker-A", "marker-B")
            } else {
                ("marker-B", "marker-A")
            };
            json!({"path": "edit4k.txt", "edits": [{"target": from, "replacement": to}]})
        });
        // Both workspaces' edit files start at marker-A, so even calls go A → B.
        let e = drive(sock, &edit, 1, secs).await?;
        t.push(
            3,
            format!("`write_file` / `edit_file` 4 KB, 1 client, fsync {label}"),
            format!(
                "{:.0} / {:.0} calls/s (p50 {} / {} ms)",
                w.rate(),
                e.rate(),
                ms(w.p50()),
                ms(e.p50())
            ),
            String::new(),
            None,
            None,
        );
    }
    match peak_rss(&a.never, &never).await {
        Ok((peak, idle, took)) => t.push(3, "peak RSS, supervisor + workers, while a command prints 1 GiB (`yes \\| head -c 1073741824`)", format!("{} (idle {}; the call took {:.1} s)", mib(peak), mib(idle), took.as_secs_f64()), String::new(), None, None),
        Err(e) => t.failed(3, "peak RSS while a command prints 1 GiB", &e, None),
    }

    eprintln!("issue 5: calls/s and fsync");
    let tiny = Op::read("tiny.txt");
    let mut rates = Vec::new();
    for clients in [1, 16] {
        let n = drive(&never, &tiny, clients, secs).await?;
        let al = drive(&always, &tiny, clients, secs).await?;
        rates.push((clients, n, al));
    }
    for (clients, n, al) in &rates {
        let what = format!(
            "`read_file` 64 B file, {clients} client(s): calls/s, fsync always (never beside it)"
        );
        let (tv, base) = (
            format!("{:.0}/s ({})", al.rate(), lat(al)),
            format!("never: {:.0}/s ({})", n.rate(), lat(n)),
        );
        match clients {
            16 => t.push_abs(
                5,
                what,
                tv,
                base,
                (al.rate(), "calls/s"),
                Target::AtLeast(10_000.0),
            ),
            _ => t.push(5, what, tv, base, None, None),
        }
    }
    match restarts(&never).await {
        Ok((kill, spawn, ack)) => {
            t.push(
                5,
                "worker kill -9 → ready again (includes the 100 ms first backoff), 20 samples",
                lat(&kill),
                String::new(),
                None,
                None,
            );
            t.push_abs(
                5,
                "worker spawn → ready p50 (`restart`, no backoff; exited → started events), 20 samples",
                lat(&spawn),
                format!("`restart` edit → ack: {}", lat(&ack)),
                (spawn.p50().as_secs_f64() * 1000.0, "ms"),
                Target::AtMost(50.0),
            );
        }
        Err(e) => t.failed(5, "worker restart latency", &e, Some(Target::AtMost(50.0))),
    }

    eprintln!("issue 6: throughput vs clients, ping under grep");
    for (i, clients) in [1, 16, 64].into_iter().enumerate() {
        let x = rn[i].rate() / e2[i].rate().max(1e-9);
        t.push(
            6,
            format!("`read_file` 4 KB throughput, {clients} client(s), fsync never vs bare 2 hops"),
            format!("{:.0}/s", rn[i].rate()),
            format!("{:.0}/s", e2[i].rate()),
            Some(x),
            Some(Target::AtLeast(0.4)),
        );
    }
    match ping_under_grep(&never, &a.pattern).await {
        Ok((ping, greps)) => t.push_abs(
            6,
            "`ping` p99 while 16 clients grep the corpus",
            format!("{} ({greps} greps done)", lat(&ping)),
            String::new(),
            (ping.p99().as_secs_f64() * 1000.0, "ms"),
            Target::AtMost(5.0),
        ),
        Err(e) => t.failed(
            6,
            "ping while 16 clients grep",
            &e,
            Some(Target::AtMost(5.0)),
        ),
    }
    t.notes.push("Ratio = toolvisor / baseline (p50 for latency rows, calls/s for throughput rows); rows with an absolute target show the value itself.".into());
    Ok(t)
}

/// Issue 2, row 3: grep vs `rg -n`, glob vs `fd`, same counts.
async fn search_rows(a: &Args, never: &Path, t: &mut Table) {
    let corpus = a.never.join("corpus");
    let (files, bytes) = tree_size(&corpus);
    t.notes.push(format!(
        "Search corpus: {files} files, {} (a copy of ~/.cargo/registry/src with its ignore files removed, so toolvisor, rg and fd see the same files); grep pattern `{}` (case-sensitive), glob `**/*.rs`; wall time is the median of {SEARCH_REPS} runs after a warm-up, each tool's output read to the end.",
        mib(bytes),
        a.pattern
    ));
    let grep_args = json!({"pattern": a.pattern, "directory": "corpus", "caseSensitive": true, "maxResults": 10_000_000});
    let glob_args = json!({"pattern": "**/*.rs", "directory": "corpus"});
    let rg_args = ["-n", "--no-require-git", a.pattern.as_str(), "corpus"];
    let fd_args = ["-g", "*.rs", "--type", "f", "corpus"];
    let rows = [
        (
            "grep",
            grep_args,
            a.rg.as_deref(),
            &rg_args[..],
            "rg -n",
            Some(Target::AtMost(1.2)),
        ),
        (
            "glob",
            glob_args,
            a.fd.as_deref(),
            &fd_args[..],
            "fd -g '*.rs'",
            None,
        ),
    ];
    for (tool, args, program, pargs, pname, target) in rows {
        let what = format!("`{tool}` vs `{pname}`, wall time");
        let tv = tv_search(never, tool, &args).await;
        let base = match program {
            Some(p) => ext_search(&a.never, p, pargs).map_err(|e| format!("{pname}: {e}")),
            None => Err(format!("{pname} not installed")),
        };
        match (tv, base) {
            (Ok((tt, tn)), Ok((bt, bn))) => {
                let same = if tn == bn {
                    "same count".to_owned()
                } else {
                    format!("COUNTS DIFFER: {tn} vs {bn}")
                };
                t.push(
                    2,
                    format!("{what} ({same})"),
                    format!("{} ms, {tn} lines", ms(tt)),
                    format!("{} ms, {bn} lines", ms(bt)),
                    ratio(tt, bt),
                    target,
                );
            }
            (Ok((tt, tn)), Err(e)) => t.push(
                2,
                what,
                format!("{} ms, {tn} lines", ms(tt)),
                format!("n/a ({e})"),
                None,
                target,
            ),
            (Err(e), _) => t.failed(2, &what, &e, target),
        }
    }
}

/// A toolvisor search: median wall time and the lines of its output.
async fn tv_search(
    socket: &Path,
    tool: &'static str,
    args: &Value,
) -> Result<(Duration, u64), String> {
    let mut c = connect(socket, "toolvisor-bench")
        .await
        .map_err(|e| e.to_string())?;
    tv_lines(&mut c, tool, args.clone()).await?;
    let (mut times, mut count) = (Vec::new(), 0);
    for _ in 0..SEARCH_REPS {
        let s = Instant::now();
        count = tv_lines(&mut c, tool, args.clone()).await?;
        times.push(s.elapsed());
    }
    Ok((median(times), count))
}

/// An external search tool: median wall time and the lines of its output.
fn ext_search(cwd: &Path, program: &Path, args: &[&str]) -> Result<(Duration, u64), String> {
    count_lines_of(cwd, program, args)?;
    let (mut times, mut count) = (Vec::new(), 0);
    for _ in 0..SEARCH_REPS {
        let s = Instant::now();
        count = count_lines_of(cwd, program, args)?;
        times.push(s.elapsed());
    }
    Ok((median(times), count))
}

/// Peak RSS of the supervisor plus its workers (summed per sample) while one command
/// prints 1 GiB; also the RSS before, and how long the call took.
async fn peak_rss(ws: &Path, socket: &Path) -> Result<(u64, u64, Duration), String> {
    let pid = pid_of(ws)?;
    let sample = move || {
        proc_kb(pid, "VmRSS:").unwrap_or(0)
            + children(pid)
                .into_iter()
                .map(|w| proc_kb(w, "VmRSS:").unwrap_or(0))
                .sum::<u64>()
    };
    let idle = sample();
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(idle));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        tokio::task::spawn_blocking(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(sample(), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };
    let mut c = connect(socket, "toolvisor-bench")
        .await
        .map_err(|e| e.to_string())?;
    let req = CallRequest::new(
        "yes",
        "run_command",
        json!({"command": "yes | head -c 1073741824", "timeout": 300_000}),
    );
    let t = Instant::now();
    let mut strays = 0;
    let r = call(&mut c, req, &mut strays)
        .await
        .map_err(|e| e.to_string());
    let took = t.elapsed();
    stop.store(true, Ordering::Relaxed);
    sampler.await.map_err(|e| e.to_string())?;
    let r = r?;
    if r.status != Status::Ok {
        return Err(format!(
            "the command ended {}: {}",
            r.status.as_str(),
            r.display
        ));
    }
    Ok((peak.load(Ordering::Relaxed), idle, took))
}

/// Worker restart latency, 20 samples each: kill -9 of a search worker until its
/// `worker_started` event; `restart` of the edit group (one worker) from its
/// `worker_exited` to its `worker_started` event (spawn → ready), and to the `ack`.
async fn restarts(socket: &Path) -> Result<(Run, Run, Run), String> {
    const SAMPLES: usize = 20;
    let mut c = connect(socket, "toolvisor-bench-restart")
        .await
        .map_err(|e| e.to_string())?;
    let sub: Id = "sub".into();
    c.request(
        &ClientMessage::Subscribe {
            id: sub.clone(),
            topics: vec![Topic::Workers],
        },
        &sub,
    )
    .await
    .map_err(|e| e.to_string())?;
    let (mut kill, mut spawn, mut ack) = (Run::default(), Run::default(), Run::default());
    for n in 0..SAMPLES {
        let pid = worker_pid(&mut c, "search", 0).await?;
        let t = Instant::now();
        // SAFETY: kill(2) with a pid read from `status` just now; no memory is involved.
        if unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) } != 0 {
            return Err(format!("kill {pid}: {}", std::io::Error::last_os_error()));
        }
        wait_event(&mut c, "worker_started", "search", Duration::from_secs(10)).await?;
        kill.hist.record(t.elapsed());

        let id: Id = format!("restart{n}").into();
        let t = Instant::now();
        c.send(&ClientMessage::Restart {
            id: id.clone(),
            group: Some("edit".into()),
        })
        .await
        .map_err(|e| e.to_string())?;
        // The ack and the events travel separately: read until both are in.
        let (mut exited, mut started, mut acked) = (None, None, None);
        let deadline = Instant::now() + Duration::from_secs(10);
        while acked.is_none() || started.is_none() {
            let m = tokio::time::timeout_at(deadline.into(), c.recv())
                .await
                .map_err(|_| "no ack and worker_started for restart within 10 s".to_owned())?
                .map_err(|e| e.to_string())?;
            match m {
                ServerMessage::Event { event, fields, .. }
                    if fields.get("group").and_then(Value::as_str) == Some("edit") =>
                {
                    match event.as_str() {
                        "worker_exited" => exited = Some(Instant::now()),
                        "worker_started" => started = Some(Instant::now()),
                        _ => {}
                    }
                }
                ServerMessage::Ack { id: i } if i == id => acked = Some(t.elapsed()),
                ServerMessage::Error { error, .. } => {
                    return Err(format!("restart: {}", error.message));
                }
                _ => {}
            }
        }
        ack.hist.record(acked.unwrap_or_default());
        match (exited, started) {
            (Some(e), Some(s)) if s >= e => spawn.hist.record(s - e),
            _ => {
                return Err(
                    "restart: no worker_exited/worker_started events before the ack".into(),
                );
            }
        }
    }
    Ok((kill, spawn, ack))
}

async fn worker_pid(c: &mut Client, group: &str, index: u32) -> Result<u32, String> {
    let id: Id = "status".into();
    match c
        .request(&ClientMessage::Status { id: id.clone() }, &id)
        .await
        .map_err(|e| e.to_string())?
    {
        ServerMessage::Status { workers, .. } => workers
            .iter()
            .find(|w| w.group == group && w.index == index && w.state == "ready")
            .and_then(|w| w.pid)
            .ok_or_else(|| format!("no ready {group} worker {index}")),
        other => Err(format!("unexpected answer to status: {other:?}")),
    }
}

async fn wait_event(
    c: &mut Client,
    want: &str,
    group: &str,
    within: Duration,
) -> Result<(), String> {
    let deadline = Instant::now() + within;
    loop {
        let m = tokio::time::timeout_at(deadline.into(), c.recv())
            .await
            .map_err(|_| format!("no {want} event for {group} within {within:?}"))?
            .map_err(|e| e.to_string())?;
        if let ServerMessage::Event { event, fields, .. } = m
            && event == want
            && fields.get("group").and_then(Value::as_str) == Some(group)
        {
            return Ok(());
        }
    }
}

/// Ping every 10 ms while 16 clients grep the corpus for 5 s; the pings and how many
/// greps finished.
async fn ping_under_grep(socket: &Path, pattern: &str) -> Result<(Run, u64), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let greps: Vec<_> = (0..16)
        .map(|_| {
            let (socket, stop, done) = (socket.to_owned(), stop.clone(), done.clone());
            let args = json!({"pattern": pattern, "directory": "corpus", "caseSensitive": true, "maxResults": 10_000_000});
            tokio::spawn(async move {
                let mut c = connect(&socket, "toolvisor-bench").await.map_err(|e| e.to_string())?;
                while !stop.load(Ordering::Relaxed) {
                    tv_lines(&mut c, "grep", args.clone()).await?;
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok::<_, String>(())
            })
        })
        .collect();
    // Let the greps fill the queue before the pings count.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ping = tokio::spawn(pinger(
        socket.to_owned(),
        "toolvisor-bench-ping",
        stop.clone(),
        Duration::from_millis(10),
    ));
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let h = ping.await.map_err(|e| e.to_string())??;
    for g in greps {
        g.await.map_err(|e| e.to_string())??;
    }
    let run = Run {
        calls: h.count(),
        hist: h,
        failed: 0,
        secs: 5.0,
    };
    Ok((run, done.load(Ordering::Relaxed)))
}

fn usage() -> String {
    "usage: toolvisor-bench table --never WS --always WS --echo SOCK --relay SOCK [--rg PATH] [--fd PATH] [--secs S] [--pattern RE]\n       toolvisor-bench lat --socket SOCK --op ping|read|ls|write|edit|true|echo-ping|echo-call [--path FILE] [--clients N] [--secs S]\n       toolvisor-bench spawn [--secs S]".into()
}

/// `--key value` pairs after the subcommand.
fn pairs() -> Result<(String, std::collections::HashMap<String, String>), String> {
    let mut it = std::env::args().skip(1);
    let cmd = it.next().ok_or_else(usage)?;
    let mut m = std::collections::HashMap::new();
    while let Some(k) = it.next() {
        let key = k
            .strip_prefix("--")
            .ok_or_else(|| format!("unexpected {k}\n{}", usage()))?;
        let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
        m.insert(key.to_owned(), v);
    }
    Ok((cmd, m))
}

async fn run() -> Result<(), String> {
    let (cmd, m) = pairs()?;
    let get = |k: &str| {
        m.get(k)
            .cloned()
            .ok_or_else(|| format!("--{k} is required\n{}", usage()))
    };
    let num = |k: &str, d: f64| -> Result<f64, String> {
        m.get(k)
            .map_or(Ok(d), |v| v.parse().map_err(|e| format!("--{k}: {e}")))
    };
    match cmd.as_str() {
        "table" => {
            let opt = |k: &str| m.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
            let a = Args {
                never: PathBuf::from(get("never")?),
                always: PathBuf::from(get("always")?),
                echo: PathBuf::from(get("echo")?),
                relay: PathBuf::from(get("relay")?),
                rg: opt("rg"),
                fd: opt("fd"),
                secs: num("secs", 3.0)?,
                pattern: m
                    .get("pattern")
                    .cloned()
                    .unwrap_or_else(|| "unsafe fn".into()),
            };
            table(&a).await?.print();
            Ok(())
        }
        "spawn" => {
            // The bare baseline of `run_command "true"`: `sh -c true` spawned and waited.
            let secs = num("secs", 3.0)?;
            let r = tokio::task::spawn_blocking(move || bare_spawn(secs))
                .await
                .map_err(|e| e.to_string())??;
            println!(
                "{} spawns, {}, max {} ms",
                r.calls,
                lat_rate(&r),
                ms(r.hist.max())
            );
            Ok(())
        }
        "lat" => {
            let socket = PathBuf::from(get("socket")?);
            let op = match get("op")?.as_str() {
                "ping" => Op::Ping,
                "read" => Op::read(
                    &m.get("path")
                        .cloned()
                        .unwrap_or_else(|| "file4k.txt".into()),
                ),
                "true" => Op::call("run_command", |_| json!({ "command": "true" })),
                // What scripts/bench-mcp.sh compares through MCP, on its fixtures.
                "ls" => Op::call("ls", |_| json!({ "path": "dir100" })),
                "write" => Op::call("write_file", |_| {
                    let content = format!("{}\n", "w".repeat(4095));
                    json!({ "path": "scratch/native_write.txt", "content": content, "overwrite": true })
                }),
                "edit" => Op::call("edit_file", |i| {
                    let (a, b) = if i % 2 == 0 {
                        ("MARKER_A", "MARKER_B")
                    } else {
                        ("MARKER_B", "MARKER_A")
                    };
                    json!({ "path": "scratch/native_edit.txt", "edits": [{ "target": a, "replacement": b }] })
                }),
                "echo-ping" => Op::EchoPing,
                "echo-call" => Op::EchoCall,
                other => return Err(format!("unknown --op {other}")),
            };
            let r = drive(
                &socket,
                &op,
                num("clients", 1.0)? as usize,
                num("secs", 3.0)?,
            )
            .await?;
            println!(
                "{} calls, {}, max {} ms",
                r.calls,
                lat_rate(&r),
                ms(r.hist.max())
            );
            Ok(())
        }
        _ => Err(usage()),
    }
}

fn main() -> ExitCode {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build();
    let r = match rt {
        Ok(rt) => rt.block_on(run()),
        Err(e) => Err(e.to_string()),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("toolvisor-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
