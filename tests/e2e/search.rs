//! The five search tools over the socket, as a client in any language sees them.

use serde_json::json;
use toolvisor_protocol::{ErrorType, Status};

use crate::harness::*;

fn tree(s: &Server) {
    s.write("src/main.rs", "fn main() {\n    println!(\"Hello\");\n}\n");
    s.write("src/lib.rs", "pub fn hello() {}\n// hello again\n");
    s.write("notes/todo.md", "- write tests\n- HELLO world\n");
    s.write(".hidden/secret.txt", "hello from hidden\n");
    s.write("target/debug/out.txt", "hello ignored\n");
    s.write(".gitignore", "target/\n");
}

#[test]
fn read_file_with_line_range() {
    let s = Server::start(ASKING);
    tree(&s);
    block(T, async {
        let r = s.call("read_file", json!({"path": "src/main.rs"})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content, "fn main() {\n    println!(\"Hello\");\n}\n");
        let r = s
            .call(
                "read_file",
                json!({"path": "src/main.rs", "startLine": 2, "endLine": 2}),
            )
            .await;
        assert_eq!(r.content.trim_end(), "    println!(\"Hello\");");
        let r = s.call("read_file", json!({"path": "nope.txt"})).await;
        assert_eq!(r.error.unwrap().kind, ErrorType::FileNotFoundError);
    });
}

#[test]
fn paths_outside_the_workspace_are_refused() {
    let s = Server::start(ASKING);
    tree(&s);
    std::os::unix::fs::symlink("/etc", s.ws().join("etc-link")).unwrap();
    block(T, async {
        for p in [
            "../outside.txt",
            "/etc/passwd",
            "etc-link/passwd",
            "src/../../x",
        ] {
            let r = s.call("read_file", json!({"path": p})).await;
            assert_eq!(r.status, Status::Error, "{p}");
            assert_eq!(
                r.error.unwrap().kind,
                ErrorType::PathOutsideWorkspace,
                "{p}"
            );
        }
    });
}

#[test]
fn binary_files_are_refused() {
    let s = Server::start(ASKING);
    std::fs::write(s.ws().join("blob.bin"), [0u8, 1, 2, 3, 0, 9]).unwrap();
    block(T, async {
        let r = s.call("read_file", json!({"path": "blob.bin"})).await;
        assert_eq!(r.error.unwrap().kind, ErrorType::BinaryFile);
    });
}

#[test]
fn read_many_files_inlines_errors() {
    let s = Server::start(ASKING);
    tree(&s);
    block(T, async {
        let r = s
            .call(
                "read_many_files",
                json!({"paths": ["src/*.rs", "missing.txt"]}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let lib = r.content.find("=== src/lib.rs ===").expect("lib");
        let main = r.content.find("=== src/main.rs ===").expect("main");
        assert!(lib < main, "globs expand sorted");
        assert!(
            r.content.contains("=== missing.txt ===\nError: "),
            "{}",
            r.content
        );
    });
}

#[test]
fn ls_glob_and_grep_honour_ignores_and_hidden_files() {
    let s = Server::start(ASKING);
    tree(&s);
    block(T, async {
        let r = s.call("ls", json!({"path": "."})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let lines: Vec<&str> = r.content.lines().collect();
        assert!(
            lines.contains(&"src/") && lines.contains(&"notes/"),
            "{lines:?}"
        );
        assert!(
            !lines.iter().any(|l| l.starts_with(".hidden")
                || l.starts_with("target")
                || l.starts_with(".toolvisor")),
            "{lines:?}"
        );
        let r = s
            .call("list_dir", json!({"path": "src", "recursive": true}))
            .await;
        assert_eq!(r.content.lines().collect::<Vec<_>>(), ["lib.rs", "main.rs"]);

        let r = s.call("glob", json!({"pattern": "**/*.rs"})).await;
        assert_eq!(
            r.content.lines().collect::<Vec<_>>(),
            ["src/lib.rs", "src/main.rs"]
        );
        let r = s
            .call(
                "glob",
                json!({"pattern": "**/*.txt", "includeHidden": true}),
            )
            .await;
        assert!(r.content.contains(".hidden/secret.txt"), "{}", r.content);
        assert!(!r.content.contains("target/"), "{}", r.content);

        let r = s.call("grep", json!({"pattern": "hello"})).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(
            r.content.lines().collect::<Vec<_>>(),
            [
                "notes/todo.md:2: - HELLO world",
                "src/lib.rs:1: pub fn hello() {}",
                "src/lib.rs:2: // hello again",
                "src/main.rs:2:     println!(\"Hello\");",
            ]
        );
        let r = s.call("grep", json!({"pattern": "hello", "caseSensitive": true, "filePattern": "*.rs", "maxResults": 1})).await;
        assert_eq!(
            r.content.lines().next(),
            Some("src/lib.rs:1: pub fn hello() {}")
        );
        let r = s.call("grep", json!({"pattern": "("})).await;
        assert_eq!(r.error.unwrap().kind, ErrorType::InvalidParams);
    });
}

#[test]
fn the_state_directory_is_never_shown_or_read() {
    let s = Server::start(ASKING);
    block(T, async {
        let r = s
            .call(
                "ls",
                json!({"path": ".", "includeHidden": true, "recursive": true}),
            )
            .await;
        assert!(!r.content.contains(".toolvisor"), "{}", r.content);
        assert!(!r.content.contains("toolvisor.toml"), "{}", r.content);
        let r = s
            .call("read_file", json!({"path": ".toolvisor/toolvisor.pid"}))
            .await;
        assert_ne!(r.status, Status::Ok);
    });
}

#[test]
fn large_results_are_truncated_with_a_marker() {
    let s = Server::start(ASKING);
    let big: String = (0..3000).map(|i| format!("line {i} hello\n")).collect();
    s.write("big.txt", &big);
    block(T, async {
        let r = s.call("read_file", json!({"path": "big.txt"})).await;
        assert!(
            r.content.contains("[Output truncated:"),
            "{}",
            &r.content[r.content.len().saturating_sub(200)..]
        );
        assert!(r.truncated.unwrap().omitted_bytes > 0);
        let r = s.call("grep", json!({"pattern": "hello"})).await;
        assert!(r.content.contains("[Output truncated:"));
        assert_eq!(
            r.content
                .lines()
                .filter(|l| l.starts_with("big.txt:"))
                .count(),
            50
        );
    });
}

/// A workspace with a `.git` directory (and a nested one) beside ordinary files.
fn with_git(s: &Server) {
    s.write(".git/HEAD", "ref: refs/heads/main\n");
    s.write(".git/config", "[core]\n\tref = x\n");
    s.write("vendor/.git/HEAD", "ref: refs/heads/dev\n");
    s.write("src/a.rs", "// ref here\n");
}

#[test]
fn search_tools_refuse_git_directories() {
    let s = Server::start(ASKING);
    with_git(&s);
    std::os::unix::fs::symlink(".git", s.ws().join("g")).unwrap();
    block(T, async {
        let refused = [
            ("ls", json!({"path": ".git"})),
            (
                "list_dir",
                json!({"path": "vendor/.git", "recursive": true}),
            ),
            ("ls", json!({"path": "g"})),
            ("grep", json!({"pattern": "ref", "directory": ".git"})),
            ("glob", json!({"pattern": "**/*", "directory": ".git"})),
            (
                "glob",
                json!({"pattern": "*", "directory": "./vendor/.git"}),
            ),
            ("read_file", json!({"path": ".git/HEAD"})),
            ("read_file", json!({"path": "vendor/.git/HEAD"})),
            ("read_file", json!({"path": "g/config"})),
        ];
        for (tool, args) in refused {
            let r = s.call(tool, args.clone()).await;
            assert_eq!(r.status, Status::Error, "{tool} {args}: {r:?}");
            let e = r.error.unwrap();
            assert_eq!(e.kind, ErrorType::PermissionError, "{tool} {args}");
            assert!(e.message.contains(".git"), "{}", e.message);
            assert!(!r.content.contains("refs/heads"), "{}", r.content);
        }
        let r = s
            .call(
                "read_many_files",
                json!({"paths": [".git/*", ".git/HEAD", "**/HEAD", "src/a.rs"]}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(!r.content.contains("refs/heads"), "{}", r.content);
        assert!(
            r.content.contains("=== .git/HEAD ===\nError: "),
            "{}",
            r.content
        );
        assert!(r.content.contains("=== src/a.rs ===\n// ref here\n"));
        assert_eq!(r.meta["errors"], 3, "{}", r.content);
    });
}

#[test]
fn walks_from_the_root_still_skip_git() {
    let s = Server::start(ASKING);
    with_git(&s);
    block(T, async {
        let all = json!({"path": ".", "recursive": true, "includeHidden": true, "maxDepth": 5});
        let r = s.call("ls", all).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(!r.content.contains(".git/"), "{}", r.content);
        assert!(r.content.lines().any(|l| l == "vendor/"), "{}", r.content);
        let r = s
            .call("glob", json!({"pattern": "**/*", "includeHidden": true}))
            .await;
        assert!(!r.content.contains(".git"), "{}", r.content);
        let r = s.call("grep", json!({"pattern": "ref"})).await;
        assert_eq!(r.content, "src/a.rs:1: // ref here");
    });
}

#[test]
fn state_files_stay_unreadable_besides_artifacts() {
    let s = Server::start(ALLOW_ALL);
    std::os::unix::fs::symlink(".toolvisor/audit.jsonl", s.ws().join("audit-link")).unwrap();
    std::os::unix::fs::symlink(".toolvisor", s.ws().join("state-link")).unwrap();
    block(T, async {
        // A truncated command leaves an artifact, so the directory is not empty.
        let r = s
            .call("run_command", json!({"command": "seq 1 3000"}))
            .await;
        let full = r
            .truncated
            .and_then(|t| t.full_output)
            .expect("full_output");
        for p in [
            ".toolvisor/audit.jsonl",
            ".toolvisor/audit.head",
            ".toolvisor/toolvisor.pid",
            ".toolvisor/lock",
            ".toolvisor/artifacts",
            ".toolvisor/artifacts/../audit.jsonl",
            "toolvisor.toml",
            "audit-link",
            "state-link/audit.jsonl",
            "state-link/artifacts/c1.log",
        ] {
            let r = s.call("read_file", json!({"path": p})).await;
            assert_eq!(r.status, Status::Error, "{p}: {r:?}");
            assert_eq!(r.error.unwrap().kind, ErrorType::PermissionError, "{p}");
        }
        let r = s
            .call("read_file", json!({"path": full, "endLine": 2}))
            .await;
        assert_eq!(r.content, "1\n2\n", "{r:?}");
        for (tool, args) in [
            ("ls", json!({"path": ".toolvisor/artifacts"})),
            (
                "grep",
                json!({"pattern": "3000", "directory": ".toolvisor"}),
            ),
        ] {
            let r = s.call(tool, args).await;
            assert_eq!(r.error.unwrap().kind, ErrorType::PermissionError);
        }
        let r = s
            .call(
                "glob",
                json!({"pattern": "**/*.log", "includeHidden": true}),
            )
            .await;
        assert!(!r.content.contains("artifacts"), "{}", r.content);
        // Edit tools still refuse the whole state directory, artifacts included.
        let w = json!({"path": full, "content": "x", "overwrite": true});
        let r = s.call("write_file", w).await;
        assert_eq!(r.error.unwrap().kind, ErrorType::PermissionError);
    });
}
