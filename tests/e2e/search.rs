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
    let s = Server::start("");
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
    let s = Server::start("");
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
    let s = Server::start("");
    std::fs::write(s.ws().join("blob.bin"), [0u8, 1, 2, 3, 0, 9]).unwrap();
    block(T, async {
        let r = s.call("read_file", json!({"path": "blob.bin"})).await;
        assert_eq!(r.error.unwrap().kind, ErrorType::BinaryFile);
    });
}

#[test]
fn read_many_files_inlines_errors() {
    let s = Server::start("");
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
    let s = Server::start("");
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
    let s = Server::start("");
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
    let s = Server::start("");
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
