//! What the boundary and the undo journal add to real commands (issue 28): a
//! `run_command "true"` in the corpus workspace against the same in a workspace of a
//! few files (the journal's walk of the workspace, per command), and a `cargo build`
//! of a real crate run through toolvisor against the same build run bare.

use super::*;

/// `--small WS`: a served workspace with the corpus workspace's config but a few files;
/// `--build-crate DIR`: a crate (no dependencies) to build both ways.
pub(super) struct CostArgs {
    pub small: Option<PathBuf>,
    pub crate_dir: Option<PathBuf>,
}

/// The journal row and the build row.
pub(super) async fn cost_rows(a: &Args, never_true: &Run, t: &mut Table) {
    let Some(small) = &a.costs.small else {
        t.failed(
            28,
            "undo journal: `run_command \"true\"` per command",
            "no --small workspace",
            None,
        );
        return;
    };
    let small_sock = socket_of(small);
    if let Err(e) = wait_ready(&small_sock, Duration::from_secs(30)).await {
        t.failed(
            28,
            "undo journal: `run_command \"true\"` per command",
            &e,
            None,
        );
        return;
    }
    let op = Op::call("run_command", |_| json!({"command": "true"}));
    match drive(&small_sock, &op, 1, a.secs).await {
        Ok(few) => {
            let files = count_files(&a.never);
            let extra = never_true.p50().saturating_sub(few.p50());
            t.push(
                28,
                format!("undo journal: `run_command \"true\"` in the corpus workspace ({files} files) vs a workspace of a few files"),
                lat(never_true),
                lat(&few),
                ratio(never_true.p50(), few.p50()),
                None,
            );
            t.notes.push(format!(
                "The undo journal's cost per command is the walk of the workspace before and after it (docs/UNDO.md): {} ms more per command with {files} files.",
                ms(extra)
            ));
        }
        Err(e) => t.failed(
            28,
            "undo journal: `run_command \"true\"` per command",
            &e,
            None,
        ),
    }
    match &a.costs.crate_dir {
        Some(dir) => build_row(small, &small_sock, dir, t).await,
        None => t.failed(
            28,
            "`cargo build` through toolvisor vs bare",
            "no --build-crate",
            Some(Target::AtMost(1.05)),
        ),
    }
}

/// Files under `ws` (the journal's work), `.toolvisor` left out.
fn count_files(ws: &Path) -> usize {
    fn walk(p: &Path, n: &mut usize) {
        let Ok(rd) = std::fs::read_dir(p) else { return };
        for e in rd.flatten() {
            let path = e.path();
            match e.file_type() {
                Ok(t) if t.is_dir() && path.file_name() != Some(".toolvisor".as_ref()) => {
                    walk(&path, n)
                }
                Ok(t) if t.is_file() => *n += 1,
                _ => {}
            }
        }
    }
    let mut n = 0;
    walk(ws, &mut n);
    n
}

/// `cargo build --offline` of `dir`: bare in a copy, and through `run_command` in the
/// small workspace (sandbox, audit and undo on); each from a clean target, best of two.
async fn build_row(small: &Path, sock: &Path, dir: &Path, t: &mut Table) {
    let what = format!(
        "`cargo build --offline` of {} through `run_command` vs bare, best of 2",
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    );
    let bare_dir = small.with_extension("bare-build");
    let inside = small.join("build");
    for d in [&bare_dir, &inside] {
        let _ = std::fs::remove_dir_all(d);
        if let Err(e) = copy_dir(dir, d) {
            t.failed(
                28,
                &what,
                &format!("cannot copy {}: {e}", dir.display()),
                Some(Target::AtMost(1.05)),
            );
            return;
        }
    }
    let mut bare = Vec::new();
    let mut tv = Vec::new();
    for _ in 0..2 {
        let _ = std::fs::remove_dir_all(bare_dir.join("target"));
        let start = Instant::now();
        let ok = Command::new("cargo")
            .args(["build", "--offline", "-q"])
            .current_dir(&bare_dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            t.failed(
                28,
                &what,
                "the bare build failed",
                Some(Target::AtMost(1.05)),
            );
            return;
        }
        bare.push(start.elapsed());
        let _ = std::fs::remove_dir_all(inside.join("target"));
        let start = Instant::now();
        let args =
            json!({"command": "cargo build --offline -q", "cwd": "build", "timeout": 600000});
        match one_call(sock, "run_command", args).await {
            Ok(()) => tv.push(start.elapsed()),
            Err(e) => {
                t.failed(28, &what, &e, Some(Target::AtMost(1.05)));
                return;
            }
        }
    }
    let (b, v) = (best(&bare), best(&tv));
    t.push(
        28,
        what,
        format!("{:.2} s", v.as_secs_f64()),
        format!("{:.2} s", b.as_secs_f64()),
        ratio(v, b),
        Some(Target::AtMost(1.05)),
    );
}

fn best(v: &[Duration]) -> Duration {
    v.iter().copied().min().unwrap_or_default()
}

/// One call on a fresh connection; Err unless it ended `ok`.
async fn one_call(sock: &Path, tool: &str, args: Value) -> Result<(), String> {
    let mut c = Client::connect(sock, "bench", false)
        .await
        .map_err(|e| e.to_string())?;
    let done = c
        .call(CallRequest::new("build", tool, args), |_, _| {})
        .await
        .map_err(|e| e.to_string())?;
    match done.result {
        Some(r) if r.status == Status::Ok => Ok(()),
        Some(r) => Err(format!(
            "the build through toolvisor ended {}: {}",
            r.status.as_str(),
            r.content.chars().take(200).collect::<String>()
        )),
        None => Err("no result".into()),
    }
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), dest)?;
        }
    }
    Ok(())
}
