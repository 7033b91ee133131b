//! The edit tools through the real binary: write_file and edit_file semantics, paths
//! that leave the workspace or touch protected state, atomicity under `kill -9` of the
//! edit worker, and previews with their tokens.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::{
    CallRequest, ClientMessage, ErrorType, Id, ServerMessage, Status, ToolResult,
};

use crate::harness::*;

fn read(s: &Server, rel: &str) -> Option<String> {
    std::fs::read_to_string(s.ws().join(rel)).ok()
}

fn kind(r: &ToolResult) -> Option<ErrorType> {
    r.error.as_ref().map(|e| e.kind)
}

/// Names in `dir` that look like our temp files (`.NAME.toolvisor-PID-N.tmp`).
fn temp_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(".toolvisor-") && n.ends_with(".tmp"))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn write_file_creates_refuses_and_overwrites() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let r = s
            .call("write_file", json!({"path": "a.txt", "content": "one\n"}))
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(read(&s, "a.txt").as_deref(), Some("one\n"));

        let r = s
            .call("write_file", json!({"path": "a.txt", "content": "two\n"}))
            .await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert_eq!(kind(&r), Some(ErrorType::FileExistsError), "{r:?}");
        assert_eq!(
            read(&s, "a.txt").as_deref(),
            Some("one\n"),
            "refused, yet changed"
        );
        let r = s
            .call(
                "write_file",
                json!({"path": "a.txt", "content": "two\n", "overwrite": false}),
            )
            .await;
        assert_eq!(kind(&r), Some(ErrorType::FileExistsError), "{r:?}");

        let r = s
            .call(
                "write_file",
                json!({"path": "a.txt", "content": "two\n", "overwrite": true}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(read(&s, "a.txt").as_deref(), Some("two\n"));

        // Parent directories are created.
        let r = s
            .call(
                "write_file",
                json!({"path": "deep/er/still/x.txt", "content": "deep"}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(read(&s, "deep/er/still/x.txt").as_deref(), Some("deep"));

        // An empty file is a file too; overwrite also creates.
        let r = s
            .call(
                "write_file",
                json!({"path": "empty", "content": "", "overwrite": true}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(read(&s, "empty").as_deref(), Some(""));

        // The mode of an existing file is kept by a rewrite.
        use std::os::unix::fs::PermissionsExt;
        s.write("run.sh", "#!/bin/sh\n");
        std::fs::set_permissions(
            s.ws().join("run.sh"),
            std::fs::Permissions::from_mode(0o750),
        )
        .unwrap();
        let r = s
            .call(
                "write_file",
                json!({"path": "run.sh", "content": "#!/bin/sh\necho hi\n", "overwrite": true}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            std::fs::metadata(s.ws().join("run.sh"))
                .unwrap()
                .permissions()
                .mode()
                & 0o777,
            0o750
        );

        // A directory is not a file.
        let r = s
            .call(
                "write_file",
                json!({"path": "deep", "content": "x", "overwrite": true}),
            )
            .await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert!(temp_files(s.ws()).is_empty(), "{:?}", temp_files(s.ws()));
    });
}

#[test]
fn edit_file_replaces_once_or_explains() {
    let s = Server::start(ALLOW_ALL);
    let original = "fn a() {}\nlet x = 1;\nfoo\nbar\nfoo\nbaz\n";
    s.write("src/f.rs", original);
    block(T, async {
        let edit = |target: &str, replacement: &str| json!({"path": "src/f.rs", "edits": [{"target": target, "replacement": replacement}]});

        let r = s.call("edit_file", edit("let x = 1;", "let x = 2;")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let now = original.replace("let x = 1;", "let x = 2;");
        assert_eq!(read(&s, "src/f.rs").as_deref(), Some(now.as_str()));

        let r = s.call("edit_file", edit("not there", "x")).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert_eq!(kind(&r), Some(ErrorType::EditTargetNotFound), "{r:?}");
        assert_eq!(read(&s, "src/f.rs").as_deref(), Some(now.as_str()));

        let r = s.call("edit_file", edit("foo", "qux")).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert_eq!(kind(&r), Some(ErrorType::EditTargetAmbiguous), "{r:?}");
        let msg = &r.error.as_ref().unwrap().message;
        assert!(msg.contains("lines 3, 5"), "line numbers missing: {msg}");
        assert_eq!(read(&s, "src/f.rs").as_deref(), Some(now.as_str()));

        // lineHint picks the nearest occurrence.
        let r = s
            .call("edit_file", json!({"path": "src/f.rs", "edits": [{"target": "foo", "replacement": "qux", "lineHint": 6}]}))
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let now = "fn a() {}\nlet x = 2;\nfoo\nbar\nqux\nbaz\n";
        assert_eq!(read(&s, "src/f.rs").as_deref(), Some(now));

        // Edits apply in order, each to the previous result, all or nothing.
        let r = s
            .call(
                "edit_file",
                json!({"path": "src/f.rs", "edits": [
                    {"target": "bar", "replacement": "BAR"},
                    {"target": "BAR\nqux", "replacement": "joined"},
                ]}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let now = "fn a() {}\nlet x = 2;\nfoo\njoined\nbaz\n";
        assert_eq!(read(&s, "src/f.rs").as_deref(), Some(now));
        let r = s
            .call(
                "edit_file",
                json!({"path": "src/f.rs", "edits": [
                    {"target": "baz", "replacement": "BAZ"},
                    {"target": "missing", "replacement": "x"},
                ]}),
            )
            .await;
        assert_eq!(kind(&r), Some(ErrorType::EditTargetNotFound), "{r:?}");
        assert_eq!(
            read(&s, "src/f.rs").as_deref(),
            Some(now),
            "a failed edit list changed the file"
        );

        let r = s
            .call(
                "edit_file",
                json!({"path": "src/none.rs", "edits": [{"target": "a", "replacement": "b"}]}),
            )
            .await;
        assert_eq!(kind(&r), Some(ErrorType::FileNotFoundError), "{r:?}");
        assert!(temp_files(&s.ws().join("src")).is_empty());
    });
}

#[test]
fn paths_outside_or_protected_are_refused() {
    let s = Server::start(ALLOW_ALL);
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), s.ws().join("escape")).unwrap();
    let abs = format!("/tmp/toolvisor-e2e-{}", unique_marker("abs"));
    block(T, async {
        for p in [
            "../x.txt",
            abs.as_str(),
            "escape/x.txt",
            "sub/../../x.txt",
            "escape/new/dir/x.txt",
        ] {
            let r = s
                .call("write_file", json!({"path": p, "content": "x"}))
                .await;
            assert_eq!(r.status, Status::Error, "{p}: {r:?}");
            assert_eq!(
                kind(&r),
                Some(ErrorType::PathOutsideWorkspace),
                "{p}: {r:?}"
            );
            let r = s
                .call(
                    "edit_file",
                    json!({"path": p, "edits": [{"target": "a", "replacement": "b"}]}),
                )
                .await;
            assert_eq!(
                kind(&r),
                Some(ErrorType::PathOutsideWorkspace),
                "edit {p}: {r:?}"
            );
        }
        assert!(!std::path::Path::new(&abs).exists());
        let left: Vec<_> = std::fs::read_dir(outside.path())
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        assert!(
            left.is_empty(),
            "written outside through the symlink: {left:?}"
        );

        // A symlinked parent that stays inside the workspace is fine.
        std::fs::create_dir(s.ws().join("real")).unwrap();
        std::os::unix::fs::symlink("real", s.ws().join("inside")).unwrap();
        let r = s
            .call(
                "write_file",
                json!({"path": "inside/ok.txt", "content": "ok"}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(read(&s, "real/ok.txt").as_deref(), Some("ok"));

        let config = read(&s, "toolvisor.toml").unwrap();
        for p in [
            ".toolvisor/anything",
            ".toolvisor/audit.jsonl",
            ".toolvisor/x/y.txt",
            "toolvisor.toml",
        ] {
            let r = s
                .call(
                    "write_file",
                    json!({"path": p, "content": "x", "overwrite": true}),
                )
                .await;
            assert_eq!(r.status, Status::Error, "{p}: {r:?}");
            assert_eq!(kind(&r), Some(ErrorType::PermissionError), "{p}: {r:?}");
        }
        let r = s.call("edit_file", json!({"path": "toolvisor.toml", "edits": [{"target": "allow", "replacement": "deny"}]})).await;
        assert_eq!(kind(&r), Some(ErrorType::PermissionError), "{r:?}");
        assert_eq!(read(&s, "toolvisor.toml").unwrap(), config);
        assert!(!s.ws().join(".toolvisor/anything").exists());
        assert!(!s.ws().join(".toolvisor/x").exists());
    });
}

/// Wait until a call is in flight on a worker of `group` (status says so: there is no
/// event for a dispatch).
async fn wait_in_flight(s: &Server, group: &str) {
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let mut c = s.client().await;
        let id: Id = "st".into();
        if let Ok(ServerMessage::Status { workers, .. }) = c
            .request(&ClientMessage::Status { id: id.clone() }, &id)
            .await
            && workers.iter().any(|w| w.group == group && w.in_flight > 0)
        {
            return;
        }
        assert!(Instant::now() < end, "no call in flight on {group}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// `size` bytes of lines that say which version they belong to.
fn version(tag: char, size: usize) -> String {
    let mut s = String::with_capacity(size);
    let mut i = 0;
    while s.len() < size {
        let line = format!("{tag}{i:08} {}\n", tag.to_string().repeat(1000));
        s.push_str(&line);
        i += 1;
    }
    s.truncate(size - 1);
    s.push('\n');
    s
}

/// The file is always exactly one version, never a mix, whenever the worker dies.
#[test]
fn write_file_is_atomic_under_kill_9() {
    kill_9_rounds(false, &[]);
}

/// ... and no temp file stays visible afterwards.
#[test]
fn no_temp_files_are_left_after_kill_9() {
    kill_9_rounds(true, &[]);
}

/// The same with named temp files for the whole write, as on filesystems without
/// `O_TMPFILE` (overlayfs before Linux 6.6): the next worker sweeps the killed one's
/// journal before it is ready, so the write after each kill finds no leftover.
#[test]
fn named_temp_files_of_a_killed_worker_are_removed() {
    kill_9_rounds(true, &[("TOOLVISOR_EDIT_NAMED_TEMPS", "1")]);
}

fn kill_9_rounds(check_temps: bool, env: &[(&str, &str)]) {
    // Fast restarts, and no intensity limit in the way of 20 deliberate kills.
    let s = Server::start_with_env(
        &format!(
            "{ALLOW_ALL}\n[supervisor]\nrestart_max = 1000\nbackoff_initial_ms = 5\nbackoff_max_ms = 20\n[workers.edit]\ncount = 1\n"
        ),
        env,
    );
    // 1 MiB: the issue asked for 8 MiB, but the edit tools refuse to overwrite a file
    // over 4 MiB (workers/src/edit/target.rs MAX_FILE_BYTES: the current file is read
    // first), a call must fit the 8 MiB frame, and the supervisor (debug build) spends
    // about 0.5 s per MB of args before dispatch, so 20 rounds of more would not fit
    // in the time budget.
    const SIZE: usize = 1 << 20;
    let a = version('A', SIZE);
    let b = version('B', SIZE);
    let path = s.ws().join("big.txt");
    let start = Instant::now();
    let mut outcomes = Vec::new();
    block(Duration::from_secs(120), async {
        // How long an undisturbed write takes on the worker, from its dispatch (the
        // supervisor's own work on a large call comes first and can take longer), so
        // the kills below spread over the worker's part: temp file, fsync, rename, reply.
        let mut c = s.client().await;
        let req = CallRequest::new(
            "w",
            "write_file",
            json!({"path": "big.txt", "content": a, "overwrite": true}),
        );
        c.send(&ClientMessage::Call(req)).await.unwrap();
        wait_in_flight(&s, "edit").await;
        let t0 = Instant::now();
        let r = result_of(&mut c, "w").await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let took = t0.elapsed();
        let mut current: Option<&str> = Some(a.as_str());
        for round in 0..20u32 {
            // Always the other version, so every round is a real change.
            let next = if current == Some(a.as_str()) { &b } else { &a };
            let pids = s.worker_pids("edit").await;
            assert_eq!(pids.len(), 1);
            let mut c = s.client().await;
            let req = CallRequest::new(
                "w",
                "write_file",
                json!({"path": "big.txt", "content": next, "overwrite": true}),
            );
            c.send(&ClientMessage::Call(req)).await.unwrap();
            wait_in_flight(&s, "edit").await;
            // Vary the moment over the worker's part of the call (0 to 80 % of an
            // undisturbed write): the rename comes early in it, the diff for the reply after.
            tokio::time::sleep(took * round / 24).await;
            nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pids[0] as i32),
                nix::sys::signal::Signal::SIGKILL,
            )
            .unwrap();
            let r = result_of(&mut c, "w").await;
            assert!(
                matches!(r.status, Status::Ok | Status::Crashed),
                "round {round}: {:?}",
                (r.status, &r.error)
            );
            if r.status == Status::Crashed {
                assert_eq!(
                    kind(&r),
                    Some(ErrorType::WorkerCrashed),
                    "round {round}: {r:?}"
                );
            }
            let written = std::fs::read(&path).is_ok_and(|b| b == next.as_bytes());
            outcomes.push((r.status, written));
            let now = std::fs::read(&path).ok();
            match &now {
                None => assert!(current.is_none(), "round {round}: the file vanished"),
                Some(bytes) => {
                    let is_a = bytes.as_slice() == a.as_bytes();
                    let is_b = bytes.as_slice() == b.as_bytes();
                    assert!(
                        is_a || is_b,
                        "round {round}: the file is neither A nor B ({} bytes)",
                        bytes.len()
                    );
                    let got = if is_a { a.as_str() } else { b.as_str() };
                    // Either the old content or the new one.
                    assert!(
                        Some(got) == current || got == next.as_str(),
                        "round {round}: unexpected version"
                    );
                    if r.status == Status::Ok {
                        assert_eq!(
                            got,
                            next.as_str(),
                            "round {round}: ok, but the file is not the new content"
                        );
                    }
                    current = Some(got);
                }
            }
            if r.status == Status::Ok {
                assert!(now.is_some(), "round {round}: ok but no file");
            }
            s.wait_group_back("edit", &pids, Duration::from_secs(20))
                .await;
        }
        // The worker still writes after all this.
        let r = s
            .call(
                "write_file",
                json!({"path": "big.txt", "content": "final\n", "overwrite": true}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(read(&s, "big.txt").as_deref(), Some("final\n"));

        // No temp file is left where a listing shows it.
        let r = s
            .call("ls", json!({"path": ".", "includeHidden": true}))
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let temps: Vec<&str> = r
            .content
            .lines()
            .filter(|l| l.contains(".toolvisor-") && l.ends_with(".tmp"))
            .collect();
        eprintln!(
            "atomicity: a write takes {took:?}; {} rounds in {:?}; outcomes {outcomes:?}; temp files on disk {:?}",
            outcomes.len(),
            start.elapsed(),
            temp_files(s.ws())
        );
        assert!(
            !check_temps || temps.is_empty(),
            "temp files left after kill -9 of the edit worker: {temps:?}"
        );
    });
}

/// Calls `tool` and returns (result, meta.token).
async fn preview(s: &Server, tool: &str, args: Value) -> (ToolResult, String) {
    let r = s.call(tool, args).await;
    assert_eq!(r.status, Status::Ok, "{tool}: {r:?}");
    let token = r.meta["token"]
        .as_str()
        .unwrap_or_else(|| panic!("no meta.token: {r:?}"))
        .to_owned();
    (r, token)
}

#[test]
fn preview_then_apply_once() {
    let s = Server::start(ALLOW_ALL);
    s.write("p.txt", "one\ntwo\nthree\n");
    block(T, async {
        let (r, token) = preview(
            &s,
            "preview_write_file",
            json!({"path": "p.txt", "content": "one\n2\nthree\n", "overwrite": true}),
        )
        .await;
        let diff = r.meta["diff"].as_str().expect("meta.diff");
        assert!(diff.starts_with("--- a/p.txt\n+++ b/p.txt\n"), "{diff}");
        assert!(diff.contains("@@"), "{diff}");
        assert!(diff.contains("-two\n+2\n"), "{diff}");
        assert!(
            r.meta.get("content").is_none(),
            "the new content is not sent back: {:?}",
            r.meta
        );
        assert_eq!(
            read(&s, "p.txt").as_deref(),
            Some("one\ntwo\nthree\n"),
            "a preview changed the file"
        );

        let r = s.call("apply_file_change", json!({"token": token})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(read(&s, "p.txt").as_deref(), Some("one\n2\nthree\n"));

        let r = s.call("apply_file_change", json!({"token": token})).await;
        assert_eq!(r.status, Status::Denied, "{r:?}");
        assert_eq!(kind(&r), Some(ErrorType::TokenInvalid), "{r:?}");

        let r = s
            .call("apply_file_change", json!({"token": "no-such-token"}))
            .await;
        assert_eq!(kind(&r), Some(ErrorType::TokenInvalid), "{r:?}");

        // preview_edit_file, and a new file.
        let (r, token) = preview(
            &s,
            "preview_edit_file",
            json!({"path": "p.txt", "edits": [{"target": "three", "replacement": "3"}]}),
        )
        .await;
        assert!(
            r.meta["diff"].as_str().unwrap().contains("-three\n+3\n"),
            "{r:?}"
        );
        let r = s.call("apply_file_change", json!({"token": token})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(read(&s, "p.txt").as_deref(), Some("one\n2\n3\n"));

        let (r, token) = preview(
            &s,
            "preview_write_file",
            json!({"path": "new/n.txt", "content": "hi\n"}),
        )
        .await;
        assert!(
            r.meta["diff"]
                .as_str()
                .unwrap()
                .starts_with("--- /dev/null\n+++ b/new/n.txt\n"),
            "{r:?}"
        );
        assert!(
            !s.ws().join("new").exists(),
            "a preview created a directory"
        );
        let r = s.call("apply_file_change", json!({"token": token})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(read(&s, "new/n.txt").as_deref(), Some("hi\n"));

        // A preview checks FileExistsError too.
        let r = s
            .call(
                "preview_write_file",
                json!({"path": "p.txt", "content": "x"}),
            )
            .await;
        assert_eq!(kind(&r), Some(ErrorType::FileExistsError), "{r:?}");
    });
}

#[test]
fn apply_after_the_file_changed_is_stale() {
    let s = Server::start(ALLOW_ALL);
    s.write("p.txt", "one\n");
    block(T, async {
        let (_, token) = preview(
            &s,
            "preview_write_file",
            json!({"path": "p.txt", "content": "two\n", "overwrite": true}),
        )
        .await;
        s.write("p.txt", "changed behind its back\n");
        let r = s.call("apply_file_change", json!({"token": token})).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert_eq!(kind(&r), Some(ErrorType::StaleChange), "{r:?}");
        assert_eq!(
            read(&s, "p.txt").as_deref(),
            Some("changed behind its back\n")
        );

        // A new file that appeared after its preview is stale too.
        let (_, token) = preview(
            &s,
            "preview_write_file",
            json!({"path": "q.txt", "content": "mine\n"}),
        )
        .await;
        s.write("q.txt", "theirs\n");
        let r = s.call("apply_file_change", json!({"token": token})).await;
        assert_eq!(kind(&r), Some(ErrorType::StaleChange), "{r:?}");
        assert_eq!(read(&s, "q.txt").as_deref(), Some("theirs\n"));
    });
}
