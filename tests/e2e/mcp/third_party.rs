//! A real third-party MCP server as a worker: `@modelcontextprotocol/server-filesystem`
//! from npm, installed once into the target directory. Without `npm` or without the
//! registry (offline CI) the test says why and passes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::json;
use toolvisor_protocol::message::Status;

use crate::harness::*;

/// The package and version the benchmark compares against too.
const PACKAGE: &str = "@modelcontextprotocol/server-filesystem@2026.8.31";

/// The server's executable, installing the package if need be; `Err` says why not.
fn install() -> Result<PathBuf, String> {
    // Outside /tmp (the server runs sandboxed, with a /tmp of its own): the target
    // directory, or /var/tmp when the checkout is under /tmp.
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let base = if target.starts_with("/tmp") && Path::new("/var/tmp").is_dir() {
        PathBuf::from("/var/tmp/toolvisor-e2e")
    } else {
        target
    };
    let prefix = base.join("mcp-npm");
    let bin = prefix.join("node_modules/.bin/mcp-server-filesystem");
    if bin.exists() {
        return Ok(bin);
    }
    for tool in ["node", "npm"] {
        let found = Command::new(tool).arg("--version").output();
        if !found.is_ok_and(|o| o.status.success()) {
            return Err(format!("`{tool}` is not installed"));
        }
    }
    std::fs::create_dir_all(&prefix).map_err(|e| e.to_string())?;
    let mut child = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--ignore-scripts",
            // Offline, fail soon rather than retry for minutes.
            "--fetch-retries=1",
            "--fetch-timeout=30000",
            "--prefix",
        ])
        .arg(&prefix)
        .arg(PACKAGE)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| format!("npm: {e}"))?;
    match wait_child(&mut child, Duration::from_secs(180)) {
        Some(status) if status.success() && bin.exists() => Ok(bin),
        Some(status) => Err(format!(
            "`npm install {PACKAGE}` failed ({status}); offline?"
        )),
        None => {
            let _ = child.kill();
            Err(format!("`npm install {PACKAGE}` took more than 3 minutes"))
        }
    }
}

#[test]
fn the_reference_filesystem_server_runs_as_a_worker() {
    let bin = match install() {
        Ok(b) => b,
        Err(why) => {
            println!("SKIPPED the_reference_filesystem_server_runs_as_a_worker: {why}");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    let ws = dir.path().canonicalize().unwrap();
    std::fs::write(ws.join("hello.txt"), "hello from npm\n").unwrap();
    let config = format!(
        "[mcp.servers.fs]\ncommand = [{:?}, {:?}]\n\
         [[policy.rules]]\ntool = \"fs__*\"\naction = \"allow\"\n",
        bin.display().to_string(),
        ws.display().to_string()
    );
    std::fs::write(ws.join("toolvisor.toml"), config).unwrap();
    let s = Server::start_in(dir);
    block(T, async {
        super::support::wait_listed(&s, &["fs__read_text_file"]).await;
        let path = ws.join("hello.txt").display().to_string();
        let r = s.call("fs__read_text_file", json!({"path": path})).await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "hello from npm\n"),
            "{r:?}"
        );
        let r = s
            .call(
                "fs__list_directory",
                json!({"path": ws.display().to_string()}),
            )
            .await;
        assert!(r.content.contains("hello.txt"), "{r:?}");
        // The server's own refusal is a tool error.
        let r = s
            .call("fs__read_text_file", json!({"path": "/etc/passwd"}))
            .await;
        assert_eq!(r.status, Status::Error, "{r:?}");
    });
}
