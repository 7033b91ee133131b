//! Undo through the real binary: a whole session — edits, commands, a background job,
//! odd names, a wipe — put back to the tree it started from by `toolvisor undo`; a path
//! changed since left alone; another session's calls refused to an agent; a daemon
//! killed in the middle of a command; a file over the journal's bound said not
//! undoable.

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_protocol::{ClientMessage, Id, ServerMessage, Status};

use crate::harness::*;

/// Every path of the workspace but the state directory: kind, mode, content.
fn tree(ws: &Path) -> BTreeMap<PathBuf, (char, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![ws.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir").flatten() {
            let p = e.path();
            let rel = p.strip_prefix(ws).expect("inside").to_path_buf();
            if rel.starts_with(".toolvisor") {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).expect("lstat");
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).expect("readlink");
                out.insert(rel, ('l', 0, t.into_os_string().into_encoded_bytes()));
            } else if m.is_dir() {
                out.insert(rel, ('d', mode, Vec::new()));
                stack.push(p);
            } else {
                out.insert(rel, ('f', mode, std::fs::read(&p).expect("read")));
            }
        }
    }
    out
}

/// The `read_output` that sees the background job `started` end (30 s at most).
async fn job_end(
    c: &mut toolvisor_protocol::client::Client,
    started: &toolvisor_protocol::ToolResult,
) -> toolvisor_protocol::ToolResult {
    let handle = started.meta["process"]
        .as_str()
        .expect("a handle")
        .to_owned();
    let end = Instant::now() + Duration::from_secs(30);
    loop {
        let r = call_on(
            c,
            "r",
            "read_output",
            json!({"process": handle, "wait_ms": 2000}),
        )
        .await;
        if r.meta["running"] == json!(false) {
            return r;
        }
        assert!(Instant::now() < end, "the job did not end");
    }
}

fn undo_of(r: &toolvisor_protocol::ToolResult) -> Value {
    r.meta["undo"].clone()
}

/// `toolvisor undo ARGS… --json`: exit code and answer.
fn cli_undo(ws: &Path, args: &[&str]) -> (i32, Value) {
    let mut all = vec!["undo", "--json"];
    all.extend_from_slice(args);
    let out = toolvisor(ws, &all);
    let answer = serde_json::from_slice(&out.stdout).unwrap_or(Value::Null);
    (out.status.code().unwrap_or(-1), answer)
}

fn seed(s: &Server) {
    s.write("src/lib.rs", "pub fn a() {}\n");
    s.write("src/util/mod.rs", "// util\n");
    s.write("README.md", "# demo\n");
    std::fs::set_permissions(
        s.ws().join("README.md"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
    std::os::unix::fs::symlink("src/lib.rs", s.ws().join("lib-link")).expect("symlink");
}

#[test]
fn a_whole_session_is_undone_to_the_tree_it_started_from() {
    let s = Server::start(ALLOW_ALL);
    seed(&s);
    let start = tree(s.ws());
    block(T, async {
        let mut c = s.client().await;
        let r = call_on(
            &mut c,
            "w1",
            "write_file",
            json!({"path": "src/new.rs", "content": "new\n"}),
        )
        .await;
        assert_eq!((r.status, undo_of(&r)), (Status::Ok, json!(true)), "{r:?}");
        let r = call_on(
            &mut c,
            "w2",
            "write_file",
            json!({"path": "deep/er/x.txt", "content": "x"}),
        )
        .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let r = call_on(
            &mut c,
            "e1",
            "edit_file",
            json!({"path": "src/lib.rs", "edits": [{"target": "a()", "replacement": "b()"}]}),
        )
        .await;
        assert_eq!((r.status, undo_of(&r)), (Status::Ok, json!(true)), "{r:?}");
        let wipe = "rm -rf src/util && printf 'a\\nb' > gen.txt && chmod 755 gen.txt \
                    && touch \"$(printf 'nl\\nname')\" \"$(printf 'bad\\377')\" \
                    && ln -sf /etc/passwd lib-link && chmod 644 README.md && mkdir -p out/x";
        let r = call_on(&mut c, "c1", "run_command", json!({"command": wipe})).await;
        assert_eq!((r.status, undo_of(&r)), (Status::Ok, json!(true)), "{r:?}");
        assert!(s.ws().join("nl\nname").exists());
        // A background job: journaled when the supervisor sees it end.
        let r = call_on(
            &mut c,
            "b1",
            "run_command",
            json!({"command": "echo job > job.txt; rm README.md", "background": true}),
        )
        .await;
        job_end(&mut c, &r).await;
    });
    assert_ne!(tree(s.ws()), start);
    let (code, answer) = cli_undo(s.ws(), &["--last", "10"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        answer["calls"].as_array().map(Vec::len),
        Some(5),
        "{answer}"
    );
    assert_eq!(tree(s.ws()), start, "{answer}");
    // Undoing the undo brings the session's work back.
    let by = answer["call_id"]
        .as_str()
        .expect("the undo's id")
        .to_owned();
    let (code, again) = cli_undo(s.ws(), &[&by]);
    assert_eq!(code, 0, "{again}");
    assert!(s.ws().join("gen.txt").exists() && !s.ws().join("src/util").exists());
    assert_eq!(
        std::fs::read(s.ws().join("job.txt")).expect("job.txt"),
        b"job\n"
    );
}

#[test]
fn a_path_changed_since_is_left_alone_and_the_rest_undone() {
    let s = Server::start(ALLOW_ALL);
    s.write("a.txt", "a0");
    s.write("b.txt", "b0");
    let r = block(
        T,
        s.call(
            "run_command",
            json!({"command": "echo a1 > a.txt; echo b1 > b.txt"}),
        ),
    );
    assert_eq!(r.status, Status::Ok);
    s.write("a.txt", "the person's edit");
    let (code, dry) = cli_undo(s.ws(), &["--last", "1", "--dry-run"]);
    assert_eq!(code, 1, "{dry}");
    assert_eq!(
        std::fs::read_to_string(s.ws().join("b.txt")).unwrap(),
        "b1\n"
    );
    let (code, answer) = cli_undo(s.ws(), &["--last", "1"]);
    assert_eq!(code, 1, "a conflict exits 1: {answer}");
    assert_eq!(answer["conflicts"][0]["path"], json!("a.txt"), "{answer}");
    assert_eq!(answer["restored"], json!(["b.txt"]), "{answer}");
    assert_eq!(
        std::fs::read_to_string(s.ws().join("a.txt")).unwrap(),
        "the person's edit"
    );
    assert_eq!(std::fs::read_to_string(s.ws().join("b.txt")).unwrap(), "b0");
}

async fn undo_msg(c: &mut toolvisor_protocol::client::Client, msg: ClientMessage) -> ServerMessage {
    c.request(&msg, &Id::from("u")).await.expect("an answer")
}

fn undo_req(calls: Option<Vec<String>>, last: Option<u64>) -> ClientMessage {
    ClientMessage::Undo {
        id: "u".into(),
        calls,
        trace: None,
        last,
        dry_run: None,
    }
}

#[test]
fn an_agent_undoes_its_own_calls_not_another_sessions() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let mut a = s.client().await;
        let r = call_on(
            &mut a,
            "mine",
            "run_command",
            json!({"command": "echo a > a.txt"}),
        )
        .await;
        let a_call = r.meta["call_id"].as_str().expect("call_id").to_owned();
        let mut b = s.client().await;
        call_on(
            &mut b,
            "theirs",
            "run_command",
            json!({"command": "echo b > b.txt"}),
        )
        .await;
        // Another session's call, by id: refused to an agent.
        let m = undo_msg(&mut b, undo_req(Some(vec![a_call.clone()]), None)).await;
        let ServerMessage::Undone {
            calls,
            not_undoable,
            ..
        } = m
        else {
            panic!("{m:?}")
        };
        assert!(calls.is_empty());
        assert_eq!(not_undoable[0].call, a_call);
        // Its own, newest: only its own file goes.
        let m = undo_msg(&mut b, undo_req(None, Some(5))).await;
        let ServerMessage::Undone { removed, .. } = m else {
            panic!("{m:?}")
        };
        assert_eq!(removed, ["b.txt"]);
        assert!(s.ws().join("a.txt").exists());
        // Bad requests are refused with a reason.
        let m = undo_msg(&mut b, undo_req(Some(vec!["x".into()]), Some(1))).await;
        assert!(matches!(m, ServerMessage::Error { .. }), "{m:?}");
    });
}

#[test]
fn a_daemon_killed_during_a_command_is_undone_after_restart() {
    let mut s = Server::start(ALLOW_ALL);
    s.write("keep.txt", "before");
    let marker = unique_marker("undo-kill");
    block(T, async {
        let mut c = s.client().await;
        let req = toolvisor_protocol::CallRequest::new(
            "long",
            "run_command",
            json!({"command": "echo after > keep.txt; echo made > made.txt; sleep 300", "env": {"E2E_MARK": marker}}),
        );
        c.send(&ClientMessage::Call(req)).await.expect("send");
        let end = Instant::now() + Duration::from_secs(30);
        while !s.ws().join("made.txt").exists() {
            assert!(Instant::now() < end, "the command did not start");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    s.kill9();
    s.serve_again();
    let (code, answer) = cli_undo(s.ws(), &["--last", "1"]);
    assert_eq!(code, 0, "{answer}");
    assert_eq!(
        std::fs::read_to_string(s.ws().join("keep.txt")).unwrap(),
        "before"
    );
    assert!(!s.ws().join("made.txt").exists());
}

#[test]
fn a_file_over_the_bound_is_said_not_undoable_and_the_journal_stays_bounded() {
    let s = Server::start(&format!("{ALLOW_ALL}\n[undo]\nmax_bytes = 1048576\n"));
    std::fs::write(s.ws().join("big.bin"), vec![1u8; 3 << 20]).expect("write");
    let r = block(T, s.call("run_command", json!({"command": "head -c 4194304 /dev/zero > big.bin; head -c 4194304 /dev/zero > fresh.bin"})));
    assert_eq!(r.status, Status::Ok);
    let undo = undo_of(&r);
    assert!(
        undo.as_str()
            .is_some_and(|u| u.contains("big.bin") && u.contains("max_bytes")),
        "{undo}"
    );
    let blobs: u64 = walk_size(&s.ws().join(".toolvisor/undo/blobs"));
    assert!(blobs <= 1 << 20, "the journal holds {blobs} bytes");
    let (code, answer) = cli_undo(s.ws(), &["--last", "1"]);
    assert_eq!(code, 1, "{answer}");
    assert!(
        !s.ws().join("fresh.bin").exists(),
        "what was made is still removed: {answer}"
    );
    assert_eq!(
        answer["not_undoable"].as_array().map(Vec::len),
        Some(1),
        "{answer}"
    );
}

fn walk_size(p: &Path) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
        let m = e.metadata().expect("metadata");
        n += if m.is_dir() {
            walk_size(&e.path())
        } else {
            m.len()
        };
    }
    n
}

#[test]
fn an_agent_host_folder_a_command_creates_is_moved_aside() {
    let s = Server::start(ALLOW_ALL);
    let r = block(T, s.call("run_command", json!({"command": "mkdir -p .claude && echo '{\"hooks\":{}}' > .claude/settings.json && echo '{}' > .mcp.json"})));
    assert_eq!(r.status, Status::Ok, "{r:?}");
    assert!(!s.ws().join(".claude").exists() && !s.ws().join(".mcp.json").exists());
    assert!(r.content.contains("moved aside"), "{}", r.content);
    assert_eq!(
        r.meta["quarantined"].as_array().map(Vec::len),
        Some(2),
        "{r:?}"
    );
    // Kept, not lost: in the state directory.
    let kept = s
        .ws()
        .join(".toolvisor/quarantine")
        .join(r.meta["call_id"].as_str().unwrap_or_default());
    assert!(kept.join(".claude/settings.json").exists(), "{kept:?}");
    // A background job's are moved when its end is seen.
    block(T, async {
        let mut c = s.client().await;
        let r = call_on(
            &mut c,
            "b",
            "run_command",
            json!({"command": "mkdir .cursor && echo x > .cursor/mcp.json", "background": true}),
        )
        .await;
        let end = job_end(&mut c, &r).await;
        assert!(end.content.contains("moved aside"), "{end:?}");
    });
    assert!(!s.ws().join(".cursor").exists());
}
