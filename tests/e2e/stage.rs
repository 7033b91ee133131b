//! Staged commands (`run_command` with `stage: true`) through the real binary: the
//! command sees its own writes, the workspace stays as it was, the result lists the
//! held changes with their diff and a token; `apply_file_change` writes all of them
//! once, or none when the workspace moved on; staging never runs a command unstaged.
//!
//! Namespaces are probed by `serve` itself: on a host that refuses them the tests that
//! need them say so and return.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use toolvisor_protocol::{ErrorType, Status, ToolResult};

use crate::harness::*;

fn kind(r: &ToolResult) -> Option<ErrorType> {
    r.error.as_ref().map(|e| e.kind)
}

fn read(s: &Server, rel: &str) -> Option<String> {
    std::fs::read_to_string(s.ws().join(rel)).ok()
}

/// Whether the server's commands have their own namespaces (staging needs them).
async fn namespaces(s: &Server) -> bool {
    let on = s.guards().await.namespaces;
    if !on {
        eprintln!("this host refuses namespaces to commands: skipping");
    }
    on
}

/// `meta.changes` as path → kind.
fn changes(r: &ToolResult) -> BTreeMap<String, String> {
    r.meta["changes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|c| {
                    let f = |k: &str| c[k].as_str().unwrap_or_default().to_owned();
                    (f("path"), f("kind"))
                })
                .collect()
        })
        .unwrap_or_default()
}

fn token(r: &ToolResult) -> String {
    r.meta["token"].as_str().unwrap_or_default().to_owned()
}

/// The staging directories the daemon keeps (`.toolvisor/staged/*`).
fn staging_dirs(s: &Server) -> usize {
    std::fs::read_dir(s.ws().join(".toolvisor/staged")).map_or(0, |rd| rd.count())
}

const SCRIPT: &str = "echo x > new; sed -i s/a/b/ old; rm gone; cat new";

fn staged_workspace(s: &Server) {
    s.write("old", "a\n");
    s.write("gone", "bye\n");
}

fn stage(command: &str) -> Value {
    json!({"command": command, "stage": true})
}

#[test]
fn a_staged_command_holds_its_changes_and_apply_writes_them_once() {
    let s = Server::start(ALLOW_ALL);
    staged_workspace(&s);
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let r = s.call("run_command", stage(SCRIPT)).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(r.content.starts_with("x\n"), "its own writes: {r:?}");
        // The workspace is untouched.
        assert_eq!(read(&s, "new"), None);
        assert_eq!(read(&s, "old").as_deref(), Some("a\n"));
        assert_eq!(read(&s, "gone").as_deref(), Some("bye\n"));
        let want: BTreeMap<String, String> =
            [("gone", "deleted"), ("new", "created"), ("old", "modified")]
                .into_iter()
                .map(|(p, k)| (p.to_owned(), k.to_owned()))
                .collect();
        assert_eq!(changes(&r), want, "{r:?}");
        for line in ["+++ b/new", "+x", "-a", "+b", "--- a/gone", "-bye"] {
            assert!(r.content.contains(line), "{line:?} in {}", r.content);
        }
        assert!(r.meta.get("staged_record").is_none(), "internal: {r:?}");
        let t = token(&r);
        assert!(!t.is_empty(), "{r:?}");
        assert_eq!(staging_dirs(&s), 1);

        let a = s.call("apply_file_change", json!({"token": t})).await;
        assert_eq!(a.status, Status::Ok, "{a:?}");
        assert_eq!(read(&s, "new").as_deref(), Some("x\n"));
        assert_eq!(read(&s, "old").as_deref(), Some("b\n"));
        assert_eq!(read(&s, "gone"), None);
        assert_eq!(a.meta["changes"].as_array().map(Vec::len), Some(3), "{a:?}");
        assert_eq!(
            staging_dirs(&s),
            0,
            "applied: its staging directory is gone"
        );

        let again = s.call("apply_file_change", json!({"token": t})).await;
        assert_eq!(kind(&again), Some(ErrorType::TokenInvalid), "{again:?}");
        assert!(
            again
                .error
                .as_ref()
                .unwrap()
                .message
                .contains("already used"),
            "{again:?}"
        );
    });
}

#[test]
fn a_change_in_the_workspace_meanwhile_is_stale_and_nothing_is_applied() {
    let s = Server::start(ALLOW_ALL);
    staged_workspace(&s);
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let r = s.call("run_command", stage(SCRIPT)).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        s.write("old", "edited by a person\n");
        let a = s
            .call("apply_file_change", json!({"token": token(&r)}))
            .await;
        assert_eq!(kind(&a), Some(ErrorType::StaleChange), "{a:?}");
        assert!(a.error.as_ref().unwrap().message.contains("old"), "{a:?}");
        assert_eq!(read(&s, "new"), None, "nothing applied");
        assert_eq!(
            read(&s, "gone").as_deref(),
            Some("bye\n"),
            "nothing applied"
        );
        assert_eq!(read(&s, "old").as_deref(), Some("edited by a person\n"));
    });
}

#[test]
fn protected_paths_stay_read_only_in_a_staged_command() {
    let s = Server::start(ALLOW_ALL);
    s.write(".git/config", "[core]\n\trepositoryformatversion = 0\n");
    s.write(".git/HEAD", "ref: refs/heads/main\n");
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let r = s
            .call(
                "run_command",
                stage("echo evil >> .git/config; echo ok > fine; ls -A .toolvisor | wc -l"),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(r.content.contains("Read-only file system"), "{r:?}");
        assert!(
            r.content.contains("\n0\n"),
            "the state directory is hidden: {r:?}"
        );
        let c = changes(&r);
        assert_eq!(c.get("fine").map(String::as_str), Some("created"), "{r:?}");
        assert!(!c.keys().any(|k| k.starts_with(".git")), "{r:?}");
    });
}

#[test]
fn stage_is_for_foreground_commands_only() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        for extra in [json!({"background": true}), json!({"tty": true})] {
            let mut args = stage("touch ran");
            args.as_object_mut()
                .unwrap()
                .extend(extra.as_object().unwrap().clone());
            let r = s.call("run_command", args).await;
            assert_eq!(kind(&r), Some(ErrorType::InvalidParams), "{r:?}");
            assert!(r.error.as_ref().unwrap().message.contains("stage"), "{r:?}");
        }
        assert_eq!(read(&s, "ran"), None);
    });
}

#[test]
fn stage_without_namespaces_fails_and_never_runs_unstaged() {
    let s = Server::start_with_env(ALLOW_ALL, &[("TOOLVISOR_SANDBOX_TEST_FAIL", "probe")]);
    block(T, async {
        let r = s.call("run_command", stage("touch ran")).await;
        assert_eq!(kind(&r), Some(ErrorType::SandboxUnverified), "{r:?}");
        assert!(read(&s, "ran").is_none(), "it ran unstaged");
    });
}

#[test]
fn modes_links_directories_and_odd_names_are_held_and_applied() {
    let s = Server::start(ALLOW_ALL);
    s.write("run.sh", "#!/bin/sh\n");
    s.write("tree/a", "a\n");
    s.write("tree/b", "b\n");
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let script = "chmod 755 run.sh; ln -s run.sh link; rm -r tree; mkdir -p deep/er; \
                      printf 'n\\n' > deep/er/f; printf 'z\\n' > \"$(printf 'two\\nlines')\"; \
                      printf 'bin\\0ary' > blob";
        let r = s.call("run_command", stage(script)).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let c = changes(&r);
        let kind_of = |p: &str| c.get(p).map(String::as_str);
        assert_eq!(kind_of("run.sh"), Some("modified"), "{c:?}");
        assert_eq!(kind_of("link"), Some("created"), "{c:?}");
        assert_eq!(kind_of("tree"), Some("deleted"), "{c:?}");
        assert_eq!(kind_of("deep/er/f"), Some("created"), "{c:?}");
        assert_eq!(kind_of("two\nlines"), Some("created"), "{c:?}");
        assert!(
            r.content.contains("old mode 644\nnew mode 755"),
            "{}",
            r.content
        );
        assert!(
            r.content
                .contains("Binary files /dev/null and b/blob differ"),
            "{}",
            r.content
        );
        assert!(s.ws().join("tree/a").exists() && !s.ws().join("link").exists());

        let a = s
            .call("apply_file_change", json!({"token": token(&r)}))
            .await;
        assert_eq!(a.status, Status::Ok, "{a:?}");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(s.ws().join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
        assert_eq!(
            std::fs::read_link(s.ws().join("link")).unwrap(),
            std::path::Path::new("run.sh")
        );
        assert!(!s.ws().join("tree").exists());
        assert_eq!(read(&s, "deep/er/f").as_deref(), Some("n\n"));
        assert_eq!(read(&s, "two\nlines").as_deref(), Some("z\n"));
        assert_eq!(std::fs::read(s.ws().join("blob")).unwrap(), b"bin\0ary");
    });
}

#[test]
fn held_changes_expire_with_the_preview_ttl_and_leftovers_go_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = format!("{ALLOW_ALL}\n[edit]\npreview_ttl_ms = 300\n");
    std::fs::write(dir.path().join("toolvisor.toml"), config).unwrap();
    let leftover = dir.path().join(".toolvisor/staged/0123abcd/0/upper");
    std::fs::create_dir_all(&leftover).unwrap();
    std::fs::write(leftover.join("x"), "held by a daemon that is gone").unwrap();
    let s = Server::start_in(dir);
    assert!(!leftover.exists(), "removed at start");
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let r = s.call("run_command", stage("echo x > new")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(staging_dirs(&s), 1);
        // The sweep runs every few seconds; nothing to wait on but the directory.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(30);
        while staging_dirs(&s) > 0 {
            assert!(std::time::Instant::now() < end, "the expired changes stay");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        let a = s
            .call("apply_file_change", json!({"token": token(&r)}))
            .await;
        assert_eq!(kind(&a), Some(ErrorType::TokenInvalid), "{a:?}");
        assert!(
            a.error.as_ref().unwrap().message.contains("expired"),
            "{a:?}"
        );
        assert_eq!(read(&s, "new"), None);
    });
}

#[test]
fn the_shared_root_is_staged_too() {
    let shared = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(shared.path().join("lib.txt"), "old\n").unwrap();
    let config = format!(
        "[workspace]\nshared = {:?}\n{ALLOW_ALL}",
        shared.path().display().to_string()
    );
    let s = Server::start(&config);
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let command = format!(
            "echo new > {0}/lib.txt; echo mine > here; cat {0}/lib.txt",
            shared.path().display()
        );
        let r = s.call("run_command", stage(&command)).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(r.content.starts_with("new\n"), "{r:?}");
        let c = changes(&r);
        assert_eq!(
            c.get("shared:/lib.txt").map(String::as_str),
            Some("modified"),
            "{c:?}"
        );
        assert_eq!(c.get("here").map(String::as_str), Some("created"), "{c:?}");
        let lib = shared.path().join("lib.txt");
        assert_eq!(std::fs::read_to_string(&lib).unwrap(), "old\n");
        let a = s
            .call("apply_file_change", json!({"token": token(&r)}))
            .await;
        assert_eq!(a.status, Status::Ok, "{a:?}");
        assert_eq!(std::fs::read_to_string(&lib).unwrap(), "new\n");
        assert_eq!(read(&s, "here").as_deref(), Some("mine\n"));
    });
}

#[test]
fn an_applied_staged_command_is_undone_whole() {
    let s = Server::start(ALLOW_ALL);
    staged_workspace(&s);
    s.write("tree/a/b.txt", "deep\n");
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let r = s
            .call("run_command", stage(&format!("{SCRIPT}; rm -rf tree")))
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let a = s
            .call("apply_file_change", json!({"token": token(&r)}))
            .await;
        assert_eq!(
            (a.status, a.meta["undo"].clone()),
            (Status::Ok, json!(true)),
            "{a:?}"
        );
        assert_eq!(read(&s, "tree/a/b.txt"), None);
    });
    let out = toolvisor(s.ws(), &["undo", "--last", "1"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert_eq!(read(&s, "new"), None);
    assert_eq!(read(&s, "old").as_deref(), Some("a\n"));
    assert_eq!(read(&s, "gone").as_deref(), Some("bye\n"));
    assert_eq!(read(&s, "tree/a/b.txt").as_deref(), Some("deep\n"));
}
