//! The measurements that are not plain load: search against rg and fd, peak memory,
//! restarts, ping under grep load.

use super::*;

/// Runs of each search for its median (after one unrecorded warm-up run).
pub(super) const SEARCH_REPS: usize = 9;

/// Lines printed by an external tool run in `cwd`.
pub(super) fn count_lines_of(cwd: &Path, program: &Path, args: &[&str]) -> Result<u64, String> {
    let out = Command::new(program)
        .args(args)
        .current_dir(cwd)
        .stderr(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", program.display()))?;
    Ok(out.stdout.iter().filter(|b| **b == b'\n').count() as u64)
}

/// A search tool's result lines (the truncation marker, if any, is not a line of it).
pub(super) async fn tv_lines(
    c: &mut Client,
    tool: &'static str,
    args: Value,
) -> Result<u64, String> {
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
pub(super) fn tree_size(dir: &Path) -> (u64, u64) {
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

/// The grep arguments of every search row: case-sensitive, and no `maxResults` (it
/// caps what the worker holds), so toolvisor prints every match as rg does.
pub(super) fn grep_args(pattern: &str) -> Value {
    json!({"pattern": pattern, "directory": "corpus", "caseSensitive": true})
}

/// Issue 2, row 3: grep vs `rg -n`, glob vs `fd`, over the pinned corpus in `ws`;
/// a row whose counts differ says so instead of PASS/MISS.
pub(super) async fn search_rows(a: &Args, ws: &Path, t: &mut Table) {
    let corpus = ws.join("corpus");
    let (files, bytes) = tree_size(&corpus);
    t.notes.push(format!(
        "Search corpus: {files} files, {} ({}; ignore files removed, so toolvisor, rg and fd see the same files); grep pattern `{}` (case-sensitive), glob `**/*.rs`; wall time is the median of {SEARCH_REPS} runs after a warm-up, each tool's output read to the end.",
        mib(bytes),
        a.corpus,
        a.pattern
    ));
    let glob_args = json!({"pattern": "**/*.rs", "directory": "corpus"});
    let rg_args = ["-n", "--no-require-git", a.pattern.as_str(), "corpus"];
    let fd_args = ["-g", "*.rs", "--type", "f", "corpus"];
    let rows = [
        (
            "grep",
            grep_args(&a.pattern),
            a.rg.as_deref(),
            &rg_args[..],
            "rg -n",
        ),
        (
            "glob",
            glob_args,
            a.fd.as_deref(),
            &fd_args[..],
            "fd -g '*.rs'",
        ),
    ];
    let socket = socket_of(ws);
    for (tool, args, program, pargs, pname) in rows {
        let target = Some(Target::AtMost(1.0));
        let what = format!("`{tool}` vs `{pname}`, wall time");
        let (tv, base) = match program {
            Some(p) => {
                let (tv, base) = interleaved(&socket, tool, &args, ws, p, pargs).await;
                (tv, base.map_err(|e| format!("{pname}: {e}")))
            }
            None => (
                timed_runs(&socket, tool, &args).await,
                Err(format!("{pname} not installed")),
            ),
        };
        match (tv, base) {
            (Ok((tt, tn)), Ok((bt, bn))) => {
                let same = if tn == bn {
                    "same count"
                } else {
                    "COUNTS DIFFER"
                };
                t.push(
                    2,
                    format!("{what} ({same})"),
                    format!("{} ms, {tn} lines", ms(tt)),
                    format!("{} ms, {bn} lines", ms(bt)),
                    ratio(tt, bt),
                    target,
                );
                if tn != bn {
                    t.flag_last(&format!("COUNTS DIFFER: {tn} vs {bn} lines"));
                }
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

/// A toolvisor search and an external tool, runs alternating (one warm-up each first,
/// unrecorded) so drift on a shared machine hits both alike: each one's median wall
/// time and the lines of its output.
pub(super) async fn interleaved(
    socket: &Path,
    tool: &'static str,
    args: &Value,
    cwd: &Path,
    program: &Path,
    pargs: &[&str],
) -> (
    Result<(Duration, u64), String>,
    Result<(Duration, u64), String>,
) {
    let mut c = match connect(socket, "toolvisor-bench").await {
        Ok(c) => c,
        Err(e) => return (Err(e.to_string()), Err("not run".into())),
    };
    let (mut tv_times, mut ext_times) = (Vec::new(), Vec::new());
    let (mut tv, mut ext) = (Ok(0), Ok(0));
    for rep in 0..=SEARCH_REPS {
        if tv.is_ok() {
            let s = Instant::now();
            tv = tv_lines(&mut c, tool, args.clone()).await;
            tv_times.push(s.elapsed());
        }
        if ext.is_ok() {
            let s = Instant::now();
            ext = count_lines_of(cwd, program, pargs);
            ext_times.push(s.elapsed());
        }
        if rep == 0 {
            tv_times.clear();
            ext_times.clear();
        }
    }
    (
        tv.map(|n| (median(tv_times), n)),
        ext.map(|n| (median(ext_times), n)),
    )
}

/// A toolvisor search alone: median wall time and the lines of its output.
pub(super) async fn timed_runs(
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

/// The memory of a supervisor and its workers: (processes, sum of RSS, sum of PSS).
pub(super) fn tree_memory(ws: &Path) -> Result<(usize, u64, u64), String> {
    let pid = pid_of(ws)?;
    Ok(tree_sample(pid))
}

fn tree_sample(pid: u32) -> (usize, u64, u64) {
    let mut pids = children(pid);
    pids.push(pid);
    let rss = pids.iter().map(|&p| smaps_kb(p, "Rss:").unwrap_or(0)).sum();
    let pss = pids.iter().map(|&p| smaps_kb(p, "Pss:").unwrap_or(0)).sum();
    (pids.len(), rss, pss)
}

/// Peak PSS of the supervisor plus its workers (summed per sample) while one command
/// prints 1 GiB; also the PSS before, and how long the call took.
pub(super) async fn peak_memory(ws: &Path, socket: &Path) -> Result<(u64, u64, Duration), String> {
    let pid = pid_of(ws)?;
    let sample = move || tree_sample(pid).2;
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
pub(super) async fn restarts(socket: &Path) -> Result<(Run, Run, Run), String> {
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

pub(super) async fn worker_pid(c: &mut Client, group: &str, index: u32) -> Result<u32, String> {
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

pub(super) async fn wait_event(
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

/// Issue 6: the `ping` p99 row under the 16-client grep load.
pub(super) async fn ping_grep_row(socket: &Path, pattern: &str, t: &mut Table) {
    match ping_under_grep(socket, pattern).await {
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
}

/// Ping every 10 ms while 16 clients grep the corpus for 5 s; the pings and how many
/// greps finished.
pub(super) async fn ping_under_grep(socket: &Path, pattern: &str) -> Result<(Run, u64), String> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let greps: Vec<_> = (0..16)
        .map(|_| {
            let (socket, stop, done) = (socket.to_owned(), stop.clone(), done.clone());
            let args = grep_args(pattern);
            tokio::spawn(async move {
                let mut c = connect(&socket, "toolvisor-bench")
                    .await
                    .map_err(|e| e.to_string())?;
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
    // The pinger runs on a thread and runtime of its own: on the runtime that decodes
    // the 16 clients' results, a pong would wait behind them in this process, and the
    // row would measure the client.
    let ping = {
        let (socket, stop) = (socket.to_owned(), stop.clone());
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?
                .block_on(pinger(
                    socket,
                    "toolvisor-bench-ping",
                    stop,
                    Duration::from_millis(10),
                ))
        })
    };
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.store(true, Ordering::Relaxed);
    let h = tokio::task::spawn_blocking(move || ping.join())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|_| "the pinger thread panicked".to_owned())??;
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
