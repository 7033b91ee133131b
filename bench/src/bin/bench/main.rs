//! `toolvisor-bench`: the benchmark driver behind `scripts/bench.sh`. It measures
//! toolvisor and its bare baselines side by side in one run and prints one Markdown
//! table: ratio against the target and PASS/MISS per row.
//!
//! Usage:
//!   toolvisor-bench table --never WS --always WS --echo SOCK --relay SOCK
//!        [--rg PATH] [--fd PATH] [--secs 3] [--pattern REGEX] [--corpus TEXT]
//!        [--mcp FILE.json | --mcp-skip REASON] [--guards TEXT]
//!   toolvisor-bench search --never WS [--rg PATH] [--fd PATH] [--pattern REGEX]
//!   toolvisor-bench lat --socket SOCK --op ping|read|echo-ping|echo-call
//!        [--path FILE] [--clients N] [--secs S]
//!
//! `--never` and `--always` are workspaces served by `toolvisor serve` with
//! `[audit] fsync = "never"` and `"always"`; the `never` one holds `corpus/` (for grep
//! and glob). `--echo` is `toolvisor-echo serve` (1 hop); `--relay` is
//! `toolvisor-echo relay` in front of an echo server that answers 4 KiB (2 hops).
//! `lat` is one latency measurement, for digging into a single row.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use toolvisor_bench::{Histogram, call, children, connect, ms, pinger, smaps_kb, wait_ready};
use toolvisor_protocol::Id;
use toolvisor_protocol::client::Client;
use toolvisor_protocol::frame;
use toolvisor_protocol::message::{CallRequest, ClientMessage, ServerMessage, Status, Topic};

mod args;
mod costs;
mod drive;
mod mcp;
mod probes;
mod report;

use args::*;
use costs::*;
use drive::*;
use mcp::*;
use probes::*;
use report::*;

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
    // Before any load: the service as it starts.
    let idle = tree_memory(&a.always);

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
    search_rows(a, &a.never, &mut t).await;

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
        28,
        "`run_command \"true\"` (sandbox, hidden paths, undo on) vs `bash --noprofile --norc -c true` spawn+wait",
        lat(&run_true),
        lat(&bare),
        ratio(run_true.p50(), bare.p50()),
        Some(Target::AtMost(1.5)),
    );
    cost_rows(a, &run_true, &mut t).await;
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
    memory_rows(&mut t, idle, peak_memory(&a.never, &never).await);

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
    ping_grep_row(&never, &a.pattern, &mut t).await;

    eprintln!("issue 15: through MCP beside server-filesystem and Desktop Commander");
    mcp_rows(&a.mcp, &mut t);
    if let Some(g) = &a.guards {
        t.notes.push(format!(
            "Guarantees on in every toolvisor row (native and MCP): {g}."
        ));
    }
    t.notes.push("Ratio = toolvisor / baseline (p50 for latency rows, calls/s for throughput rows); rows with an absolute target show the value itself.".into());
    Ok(t)
}

/// The memory rows: the service idle after its start (PSS judged: the sum of RSS
/// counts the binary's shared pages once per process), and flat while a command prints
/// 1 GiB (peak PSS within 8 MiB of the PSS before the call).
fn memory_rows(
    t: &mut Table,
    idle: Result<(usize, u64, u64), String>,
    peak: Result<(u64, u64, Duration), String>,
) {
    const MIB: f64 = 1024.0 * 1024.0;
    let what = "memory idle after start: supervisor + workers, sum of PSS (sum of RSS beside it)";
    match idle {
        Ok((n, rss, pss)) => t.push_abs(
            3,
            what,
            format!("{} for {n} processes", mib(pss)),
            format!("RSS sum {}", mib(rss)),
            (pss as f64 / MIB, "MiB"),
            Target::AtMost(40.0),
        ),
        Err(e) => t.failed(3, what, &e, Some(Target::AtMost(40.0))),
    }
    let what =
        "memory while a command prints 1 GiB (`yes \\| head -c 1073741824`): peak PSS − PSS before";
    match peak {
        Ok((peak, before, took)) => t.push_abs(
            3,
            what,
            format!(
                "{} → {} (the call took {:.1} s)",
                mib(before),
                mib(peak),
                took.as_secs_f64()
            ),
            String::new(),
            (peak.saturating_sub(before) as f64 / MIB, "MiB"),
            Target::AtMost(8.0),
        ),
        Err(e) => t.failed(3, what, &e, Some(Target::AtMost(8.0))),
    }
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
            let a = table_args(&m, true)?;
            table(&a).await?.print();
            Ok(())
        }
        "search" => {
            // The grep and glob rows alone, for digging into them.
            let a = table_args(&m, false)?;
            prepare(&a.never)?;
            wait_ready(&socket_of(&a.never), Duration::from_secs(30)).await?;
            let mut t = Table::default();
            search_rows(&a, &a.never, &mut t).await;
            ping_grep_row(&socket_of(&a.never), &a.pattern, &mut t).await;
            t.print();
            Ok(())
        }
        "mcp" => {
            // The MCP rows alone, from a JSON of scripts/bench_mcp.mjs.
            let a = table_args(&m, false)?;
            let mut t = Table::default();
            mcp_rows(&a.mcp, &mut t);
            t.print();
            Ok(())
        }
        "spawn" => {
            // The bare baseline of `run_command "true"`: `sh -c true` spawned and waited
            // (`--shell bash`: `bash --noprofile --norc -c true`, the shell commands get).
            let secs = num("secs", 3.0)?;
            let bash = m.get("shell").is_some_and(|s| s == "bash");
            let r = tokio::task::spawn_blocking(move || {
                if bash {
                    bare_spawn_of(secs, &["bash", "--noprofile", "--norc", "-c", "true"])
                } else {
                    bare_spawn(secs)
                }
            })
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
                // On fixtures like scripts/bench_mcp.mjs's (dir100/, scratch/native_*.txt).
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
            let r = drive_paced(
                &socket,
                &op,
                num("clients", 1.0)? as usize,
                num("secs", 3.0)?,
                Duration::from_secs_f64(num("gap-ms", 0.0)? / 1000.0),
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
