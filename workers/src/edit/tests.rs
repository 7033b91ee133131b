//! The edit tools end to end through [`run`], on a temp workspace.

use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;
use serde_json::{Value, json};
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::message::Status;
use toolvisor_protocol::worker::{ExecSettings, Limits, Outcome, Roots, WorkerInit};

use super::atomic::leftover_temps;
use super::preview::sha256_hex;
use super::run;
use crate::paths::Resolver;
use crate::{CancelFlag, ToolContext};

/// A workspace `ws/` with a protected `.toolvisor/` and `toolvisor.toml`, and a sibling
/// `outside/` that must never be written.
struct Ws {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    outside: PathBuf,
    ctx: ToolContext,
}

impl Ws {
    fn new() -> Ws {
        let tmp = tempfile::tempdir().unwrap();
        let base = tmp.path().canonicalize().unwrap();
        let root = base.join("ws");
        let outside = base.join("outside");
        let state = root.join(".toolvisor");
        std::fs::create_dir_all(&state).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("toolvisor.toml"), "[policy]\n").unwrap();
        let roots = Roots {
            private: root.clone(),
            shared: None,
            public: None,
        };
        let protected = vec![state.clone(), root.join("toolvisor.toml")];
        let resolver = Arc::new(Resolver::new(&roots, &protected).unwrap());
        let init = WorkerInit {
            generation: 0,
            web: Default::default(),
            skills: Default::default(),
            mcp: None,
            group: "edit".into(),
            index: 0,
            roots,
            protected,
            state_dir: state,
            limits: Limits::default(),
            exec: ExecSettings::default(),
        };
        let ctx = ToolContext {
            init: Arc::new(init),
            resolver,
            call: 1,
            name: "c1".into(),
            cancel: CancelFlag::new(),
            output: None,
            deadline: None,
            network: false,
            egress: None,
            session: "s1".into(),
            takeover: false,
        };
        Ws {
            _tmp: tmp,
            root,
            outside,
            ctx,
        }
    }

    fn call(&self, tool: &str, args: Value) -> Outcome {
        run(tool, &args, &self.ctx)
    }

    fn write(&self, rel: &str, content: &str) {
        let p = self.root.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        std::fs::read_to_string(self.root.join(rel)).unwrap()
    }
}

fn ok(o: &Outcome) -> &Outcome {
    assert_eq!(o.status, Status::Ok, "{:?}", o.error);
    o
}

fn err_kind(o: &Outcome) -> ErrorType {
    assert_ne!(o.status, Status::Ok, "expected an error: {}", o.content);
    o.error.as_ref().unwrap().kind
}

fn message(o: &Outcome) -> &str {
    &o.error.as_ref().unwrap().message
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

// write_file

#[test]
fn write_file_creates_a_new_file_and_its_parents() {
    let ws = Ws::new();
    let o = ws.call(
        "write_file",
        json!({"path": "a/b/c.txt", "content": "hi\n"}),
    );
    assert_eq!(ok(&o).content, "Wrote 3 bytes to a/b/c.txt (new file)");
    assert_eq!(ws.read("a/b/c.txt"), "hi\n");
    assert!(o.meta["diff"].as_str().unwrap().contains("+hi"));
    assert!(leftover_temps(&ws.root.join("a/b")).is_empty());
}

#[test]
fn write_file_refuses_an_existing_file_without_overwrite() {
    let ws = Ws::new();
    ws.write("f.txt", "old");
    let o = ws.call("write_file", json!({"path": "f.txt", "content": "new"}));
    assert_eq!(err_kind(&o), ErrorType::FileExistsError);
    assert!(message(&o).contains("overwrite"), "{}", message(&o));
    assert_eq!(ws.read("f.txt"), "old");
}

#[test]
fn write_file_with_overwrite_replaces_and_keeps_the_mode() {
    let ws = Ws::new();
    ws.write("run.sh", "echo old\n");
    let p = ws.root.join("run.sh");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o750)).unwrap();
    let o = ws.call(
        "write_file",
        json!({"path": "run.sh", "content": "echo new\n", "overwrite": true}),
    );
    assert_eq!(ok(&o).content, "Wrote 9 bytes to run.sh");
    assert_eq!(ws.read("run.sh"), "echo new\n");
    assert_eq!(mode(&p), 0o750);
    assert!(leftover_temps(&ws.root).is_empty());
}

#[test]
fn write_file_refuses_protected_paths() {
    let ws = Ws::new();
    symlink(".toolvisor", ws.root.join("st")).unwrap();
    for path in [
        ".toolvisor/audit.jsonl",
        ".toolvisor/x/y",
        "toolvisor.toml",
        "st/audit.jsonl",
        "st/new/f",
    ] {
        let o = ws.call(
            "write_file",
            json!({"path": path, "content": "x", "overwrite": true}),
        );
        assert_eq!(
            err_kind(&o),
            ErrorType::PermissionError,
            "{path}: {}",
            message(&o)
        );
    }
    assert_eq!(ws.read("toolvisor.toml"), "[policy]\n");
    let state: Vec<_> = std::fs::read_dir(ws.root.join(".toolvisor"))
        .unwrap()
        .collect();
    assert!(state.is_empty(), "{state:?}");
}

#[test]
fn write_file_refuses_a_symlinked_parent_that_leaves_the_workspace() {
    let ws = Ws::new();
    symlink(&ws.outside, ws.root.join("out")).unwrap();
    let o = ws.call("write_file", json!({"path": "out/f.txt", "content": "x"}));
    assert_eq!(err_kind(&o), ErrorType::PathOutsideWorkspace);
    let o = ws.call(
        "write_file",
        json!({"path": "out/deep/f.txt", "content": "x"}),
    );
    assert_eq!(err_kind(&o), ErrorType::PathOutsideWorkspace);
    let o = ws.call(
        "write_file",
        json!({"path": "../outside/f.txt", "content": "x"}),
    );
    assert_eq!(err_kind(&o), ErrorType::PathOutsideWorkspace);
    assert_eq!(std::fs::read_dir(&ws.outside).unwrap().count(), 0);
}

#[test]
fn write_file_refuses_to_write_through_a_symlinked_file() {
    let ws = Ws::new();
    ws.write("real.txt", "keep");
    symlink("real.txt", ws.root.join("link.txt")).unwrap();
    let o = ws.call(
        "write_file",
        json!({"path": "link.txt", "content": "x", "overwrite": true}),
    );
    assert_eq!(err_kind(&o), ErrorType::PermissionError);
    assert!(message(&o).contains("symbolic link"), "{}", message(&o));
    assert_eq!(ws.read("real.txt"), "keep");
    assert!(ws.root.join("link.txt").is_symlink());
}

#[test]
fn write_file_on_a_directory_or_the_root_is_refused() {
    let ws = Ws::new();
    std::fs::create_dir(ws.root.join("d")).unwrap();
    let o = ws.call(
        "write_file",
        json!({"path": "d", "content": "x", "overwrite": true}),
    );
    assert_eq!(err_kind(&o), ErrorType::InvalidParams);
    let o = ws.call("write_file", json!({"path": ".", "content": "x"}));
    assert_eq!(err_kind(&o), ErrorType::InvalidParams);
}

// edit_file

#[test]
fn edit_file_applies_edits_in_order_and_keeps_the_mode() {
    let ws = Ws::new();
    ws.write("src/a.rs", "fn a() {}\nfn b() {}\n");
    let p = ws.root.join("src/a.rs");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    let edits = json!([
        {"target": "fn a()", "replacement": "fn x()"},
        {"target": "fn x() {}", "replacement": "fn x() { b() }"}
    ]);
    let o = ws.call("edit_file", json!({"path": "src/a.rs", "edits": edits}));
    assert_eq!(ok(&o).content, "Applied 2 edits to src/a.rs");
    assert_eq!(ws.read("src/a.rs"), "fn x() { b() }\nfn b() {}\n");
    assert_eq!(mode(&p), 0o600);
    assert!(o.meta["diff"].as_str().unwrap().contains("+fn x() { b() }"));
}

#[test]
fn edit_file_is_all_or_nothing() {
    let ws = Ws::new();
    ws.write("f.txt", "one\ntwo\n");
    let edits = json!([
        {"target": "one", "replacement": "uno"},
        {"target": "three", "replacement": "tres"}
    ]);
    let o = ws.call("edit_file", json!({"path": "f.txt", "edits": edits}));
    assert_eq!(err_kind(&o), ErrorType::EditTargetNotFound);
    assert!(message(&o).starts_with("edit 2 of 2"), "{}", message(&o));
    assert_eq!(ws.read("f.txt"), "one\ntwo\n");
    assert!(leftover_temps(&ws.root).is_empty());
}

#[test]
fn edit_file_ambiguity_names_lines_and_line_hint_resolves_it() {
    let ws = Ws::new();
    ws.write("f.txt", "x = 1\n\nx = 1\n\n\n\nx = 1\n");
    let edit = |hint: Option<u64>| {
        let mut e = json!({"target": "x = 1", "replacement": "x = 2"});
        if let Some(h) = hint {
            e["lineHint"] = json!(h);
        }
        json!({"path": "f.txt", "edits": [e]})
    };
    let o = ws.call("edit_file", edit(None));
    assert_eq!(err_kind(&o), ErrorType::EditTargetAmbiguous);
    assert!(message(&o).contains("lines 1, 3, 7"), "{}", message(&o));
    assert_eq!(ws.read("f.txt"), "x = 1\n\nx = 1\n\n\n\nx = 1\n");
    ok(&ws.call("edit_file", edit(Some(6))));
    assert_eq!(ws.read("f.txt"), "x = 1\n\nx = 1\n\n\n\nx = 2\n");
}

#[test]
fn edit_file_errors_for_missing_and_binary_files() {
    let ws = Ws::new();
    let args = |p: &str| json!({"path": p, "edits": [{"target": "a", "replacement": "b"}]});
    assert_eq!(
        err_kind(&ws.call("edit_file", args("none.txt"))),
        ErrorType::FileNotFoundError
    );
    std::fs::write(ws.root.join("bin"), b"a\0b").unwrap();
    assert_eq!(
        err_kind(&ws.call("edit_file", args("bin"))),
        ErrorType::BinaryFile
    );
    std::fs::write(ws.root.join("latin1"), b"a\xe9").unwrap();
    assert_eq!(
        err_kind(&ws.call("edit_file", args("latin1"))),
        ErrorType::BinaryFile
    );
    assert_eq!(
        err_kind(&ws.call("edit_file", args(".toolvisor/audit.jsonl"))),
        ErrorType::PermissionError
    );
}

// previews and apply_change

#[test]
fn preview_write_file_reports_the_change_and_writes_nothing() {
    let ws = Ws::new();
    let o = ws.call(
        "preview_write_file",
        json!({"path": "new/f.txt", "content": "hi\n"}),
    );
    ok(&o);
    assert_eq!(o.meta["path"], "new/f.txt");
    assert_eq!(o.meta["before_sha256"], Value::Null);
    assert_eq!(o.meta["content"], "hi\n");
    assert!(
        o.content.starts_with("--- /dev/null\n+++ b/new/f.txt\n"),
        "{}",
        o.content
    );
    assert_eq!(o.content, o.meta["diff"].as_str().unwrap());
    assert!(!ws.root.join("new").exists());
}

#[test]
fn preview_write_file_checks_file_exists_too() {
    let ws = Ws::new();
    ws.write("f.txt", "old\n");
    let o = ws.call(
        "preview_write_file",
        json!({"path": "f.txt", "content": "new\n"}),
    );
    assert_eq!(err_kind(&o), ErrorType::FileExistsError);
    let o = ws.call(
        "preview_write_file",
        json!({"path": "f.txt", "content": "new\n", "overwrite": true}),
    );
    assert_eq!(ok(&o).meta["before_sha256"], json!(sha256_hex(b"old\n")));
    assert_eq!(ws.read("f.txt"), "old\n");
}

#[test]
fn preview_edit_file_then_apply_change_writes_exactly_the_preview() {
    let ws = Ws::new();
    ws.write("f.txt", "a\nb\n");
    let o = ws.call(
        "preview_edit_file",
        json!({"path": "f.txt", "edits": [{"target": "b", "replacement": "c"}]}),
    );
    ok(&o);
    assert!(o.content.contains("-b\n+c\n"), "{}", o.content);
    assert_eq!(ws.read("f.txt"), "a\nb\n");
    let apply = json!({
        "path": o.meta["path"], "before_sha256": o.meta["before_sha256"], "content": o.meta["content"]
    });
    let done = ws.call("apply_change", apply.clone());
    assert_eq!(
        ok(&done).content,
        "Applied the previewed change to f.txt (4 bytes)"
    );
    assert_eq!(ws.read("f.txt"), "a\nc\n");
    // The same change again: the file is no longer what the preview saw.
    assert_eq!(
        err_kind(&ws.call("apply_change", apply)),
        ErrorType::StaleChange
    );
}

#[test]
fn apply_change_detects_a_file_changed_since_the_preview() {
    let ws = Ws::new();
    ws.write("f.txt", "v1\n");
    let before = sha256_hex(b"v1\n");
    ws.write("f.txt", "v2 by someone else\n");
    let o = ws.call(
        "apply_change",
        json!({"path": "f.txt", "before_sha256": before, "content": "mine\n"}),
    );
    assert_eq!(err_kind(&o), ErrorType::StaleChange);
    assert!(
        message(&o).contains("changed since the preview"),
        "{}",
        message(&o)
    );
    assert_eq!(ws.read("f.txt"), "v2 by someone else\n");
}

#[test]
fn apply_change_with_null_requires_the_file_to_be_absent() {
    let ws = Ws::new();
    let args = json!({"path": "d/new.txt", "before_sha256": null, "content": "x"});
    ok(&ws.call("apply_change", args.clone()));
    assert_eq!(ws.read("d/new.txt"), "x");
    let o = ws.call("apply_change", args);
    assert_eq!(err_kind(&o), ErrorType::StaleChange);
    assert!(message(&o).contains("was created"), "{}", message(&o));
}

#[test]
fn apply_change_detects_a_deleted_file() {
    let ws = Ws::new();
    let args = json!({"path": "gone.txt", "before_sha256": sha256_hex(b"x"), "content": "y"});
    let o = ws.call("apply_change", args);
    assert_eq!(err_kind(&o), ErrorType::StaleChange);
    assert!(!ws.root.join("gone.txt").exists());
}

#[test]
fn unknown_tools_and_bad_arguments_are_reported() {
    let ws = Ws::new();
    assert_eq!(
        err_kind(&ws.call("rm_rf", json!({}))),
        ErrorType::ToolNotFound
    );
    let o = ws.call("write_file", json!({"path": "f", "content": 3}));
    assert_eq!(err_kind(&o), ErrorType::InvalidParams);
    let o = ws.call(
        "write_file",
        json!({"path": "f", "content": "", "extra": 1}),
    );
    assert_eq!(err_kind(&o), ErrorType::InvalidParams);
    let o = ws.call("edit_file", json!({"path": "f", "edits": []}));
    assert_eq!(err_kind(&o), ErrorType::InvalidParams);
}

// Seed properties 10–12 through the real tools.

fn rel_path() -> impl Strategy<Value = String> {
    prop::collection::vec("[a-z0-9_]{1,8}", 1..5).prop_map(|v| v.join("/"))
}

fn content() -> impl Strategy<Value = String> {
    prop::collection::vec(any::<char>(), 0..200).prop_map(|v| v.into_iter().collect())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Property 10: writing an existing file without overwrite is FileExistsError and
    /// leaves it as it was.
    #[test]
    fn prop_existing_file_needs_overwrite(path in rel_path(), old in content(), new in content()) {
        let ws = Ws::new();
        ws.write(&path, &old);
        let o = ws.call("write_file", json!({"path": path, "content": new}));
        prop_assert_eq!(err_kind(&o), ErrorType::FileExistsError);
        prop_assert_eq!(ws.read(&path), old);
    }

    /// Property 11: with overwrite the new content replaces the old, read back exactly.
    #[test]
    fn prop_overwrite_replaces(path in rel_path(), old in content(), new in content()) {
        let ws = Ws::new();
        ws.write(&path, &old);
        let o = ws.call("write_file", json!({"path": path, "content": new, "overwrite": true}));
        prop_assert_eq!(o.status, Status::Ok);
        prop_assert_eq!(ws.read(&path), new);
    }

    /// Property 12: missing parent directories are created, whatever the depth.
    #[test]
    fn prop_parents_are_created(path in rel_path(), body in content()) {
        let ws = Ws::new();
        let o = ws.call("write_file", json!({"path": path, "content": body}));
        prop_assert_eq!(o.status, Status::Ok);
        prop_assert_eq!(ws.read(&path), body);
    }
}

// Crash drill: `kill -9` at any moment leaves the old content or the new one.

/// Set in the child process of the crash drill: the directory it rewrites a file in.
const DRILL_ENV: &str = "TOOLVISOR_EDIT_CRASH_DRILL_DIR";
const DRILL_SIZE: usize = 256 * 1024;

/// The drill's child side (a no-op in a normal test run): rewrite `f` forever with
/// contents that alternate between all `a` and all `b`, until killed.
#[test]
fn crash_drill_child() {
    let Some(dir) = std::env::var_os(DRILL_ENV) else {
        return;
    };
    let flags = rustix::fs::OFlags::DIRECTORY | rustix::fs::OFlags::RDONLY;
    let fd = rustix::fs::open(Path::new(&dir), flags, rustix::fs::Mode::empty()).unwrap();
    for i in 0u64.. {
        let byte = if i % 2 == 0 { b'b' } else { b'a' };
        let content = vec![byte; DRILL_SIZE];
        let name = std::ffi::OsStr::new("f");
        super::atomic::write_atomic(
            std::os::fd::AsFd::as_fd(&fd),
            name,
            &content,
            None,
            super::atomic::Replace::Allowed,
        )
        .unwrap();
    }
}

/// Whether `bytes` is one complete version of the drill file.
fn whole_version(bytes: &[u8]) -> Option<u8> {
    let first = *bytes.first()?;
    (bytes.len() == DRILL_SIZE && bytes.iter().all(|&b| b == first)).then_some(first)
}

#[test]
fn kill_9_during_rewrites_leaves_the_old_or_the_new_content() {
    let exe = std::env::current_exe().unwrap();
    for round in 1..=4 {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, vec![b'a'; DRILL_SIZE]).unwrap();
        let mut child = std::process::Command::new(&exe)
            .args([
                "--exact",
                "edit::tests::crash_drill_child",
                "--test-threads=1",
            ])
            .env(DRILL_ENV, dir.path())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Watch the file flip `round` times (readers only ever see whole versions), then
        // kill the writer wherever it is.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        let (mut last, mut flips) = (b'a', 0);
        while flips < round {
            assert!(
                std::time::Instant::now() < deadline,
                "the drill writer made no progress"
            );
            assert!(
                child.try_wait().unwrap().is_none(),
                "the drill writer exited"
            );
            let seen = whole_version(&std::fs::read(&file).unwrap());
            let seen = seen.expect("a reader saw a torn file");
            if seen != last {
                (last, flips) = (seen, flips + 1);
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let after = std::fs::read(&file).unwrap();
        assert!(whole_version(&after).is_some(), "torn file after kill -9");
    }
}
