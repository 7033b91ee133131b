//! Driving load: one round trip of each kind, many clients for a while, a bare spawn.

use super::*;

/// Builds a call's arguments from its sequence number.
pub(super) type ArgsFn = Arc<dyn Fn(u64) -> Value + Send + Sync>;

/// What one round trip is.
#[derive(Clone)]
pub(super) enum Op {
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
    pub(super) fn call(
        tool: &'static str,
        args: impl Fn(u64) -> Value + Send + Sync + 'static,
    ) -> Op {
        Op::Call(tool, Arc::new(args))
    }

    pub(super) fn read(path: &str) -> Op {
        let path = path.to_owned();
        Op::call("read_file", move |_| json!({ "path": path }))
    }
}

/// A connection of either kind.
pub(super) enum Conn {
    Raw(OwnedReadHalf, OwnedWriteHalf),
    Tv(Box<Client>),
}

impl Conn {
    pub(super) async fn open(socket: &Path, op: &Op) -> Result<Conn, String> {
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
    pub(super) async fn once(&mut self, op: &Op, n: u64) -> Result<bool, String> {
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
pub(super) async fn raw_round(
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
pub(super) struct Run {
    pub(super) hist: Histogram,
    pub(super) calls: u64,
    pub(super) failed: u64,
    pub(super) secs: f64,
}

impl Run {
    pub(super) fn rate(&self) -> f64 {
        self.calls as f64 / self.secs.max(1e-9)
    }
    pub(super) fn p50(&self) -> Duration {
        self.hist.percentile(50.0)
    }
    pub(super) fn p99(&self) -> Duration {
        self.hist.percentile(99.0)
    }
}

/// `clients` connections, one round trip at a time each: a warm-up that is not
/// recorded, then `secs` recorded.
pub(super) async fn drive(
    socket: &Path,
    op: &Op,
    clients: usize,
    secs: f64,
) -> Result<Run, String> {
    drive_paced(socket, op, clients, secs, Duration::ZERO).await
}

/// [`drive`] with a pause of `gap` after each call (not counted in its latency): an
/// agent's calls come between model turns, not back to back.
pub(super) async fn drive_paced(
    socket: &Path,
    op: &Op,
    clients: usize,
    secs: f64,
    gap: Duration,
) -> Result<Run, String> {
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
                    if !gap.is_zero() {
                        tokio::time::sleep(gap).await;
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
pub(super) fn bare_spawn(secs: f64) -> Result<Run, String> {
    bare_spawn_of(secs, &["bash", "--noprofile", "--norc", "-c", "true"])
}

/// `argv`, spawned and waited for, back to back for `secs`.
pub(super) fn bare_spawn_of(secs: f64, argv: &[&str]) -> Result<Run, String> {
    let end = Instant::now() + Duration::from_secs_f64(secs);
    let mut run = Run {
        secs,
        ..Run::default()
    };
    while Instant::now() < end {
        let t = Instant::now();
        let st = Command::new(argv[0])
            .args(&argv[1..])
            .status()
            .map_err(|e| format!("{}: {e}", argv[0]))?;
        run.hist.record(t.elapsed());
        run.calls += 1;
        run.failed += u64::from(!st.success());
    }
    Ok(run)
}

/// The median of a few wall times.
pub(super) fn median(mut times: Vec<Duration>) -> Duration {
    times.sort();
    times.get(times.len() / 2).copied().unwrap_or_default()
}
