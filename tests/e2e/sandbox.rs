//! The command sandbox through the real binary, tried as a prompt-injected agent would:
//! every escape from the issue attempted from a command and from the edit tools, and
//! refused; the network; the fallback without namespaces (forced), where commands reach
//! the socket but still cannot grant, confirm or restart; `sandbox = "required"`; and a
//! sandbox that cannot be set up for a call.
//!
//! Namespaces are probed by `serve` itself: on a host that refuses them the namespace
//! tests below say so and return (the forced-fallback tests still run).

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use toolvisor_protocol::{ErrorType, Status, ToolResult};

use crate::harness::*;

fn run(command: &str) -> Value {
    json!({ "command": command })
}

fn kind(r: &ToolResult) -> Option<ErrorType> {
    r.error.as_ref().map(|e| e.kind)
}

/// A git repository at the workspace root with a config and a hook directory.
fn git_repo(s: &Server) {
    s.write(".git/config", "[core]\n\trepositoryformatversion = 0\n");
    s.write(".git/HEAD", "ref: refs/heads/main\n");
    std::fs::create_dir_all(s.ws().join(".git/hooks")).unwrap();
}

/// Whether the server's commands have their own namespaces; says why a test returns
/// early when they do not.
async fn namespaces(s: &Server) -> bool {
    let on = s.guards().await.namespaces;
    if !on {
        eprintln!("this host refuses namespaces to commands: skipping");
    }
    on
}

/// A directory outside the workspace and outside `/tmp` (commands see `/tmp` as their
/// own), so a command sees it read-only.
fn outside_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("tempdir")
}

#[test]
fn commands_cannot_change_the_config_git_or_the_state() {
    let s = Server::start(ALLOW_ALL);
    git_repo(&s);
    let config_before = std::fs::read_to_string(s.ws().join("toolvisor.toml")).unwrap();
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let attempts = [
            "echo 'mode = \"yolo\"' >> toolvisor.toml",
            "printf '[policy]\\nmode=\"yolo\"\\n' > toolvisor.toml",
            "rm -f toolvisor.toml",
            "mv toolvisor.toml t2",
            "echo '[core]fsmonitor=touch /tmp/pwned' >> .git/config",
            "rm -f .git/config",
            "printf '#!/bin/sh\\ntouch pwned\\n' > .git/hooks/pre-commit",
            "mv .git g2 && mkdir .git && echo '[core]fsmonitor=x' > .git/config",
            "mv .git/hooks .git/h2 && mkdir .git/hooks && echo x > .git/hooks/post-checkout",
            "ln .git/config cfg-link && echo x >> cfg-link",
            "rm -rf .git",
            "mv .toolvisor t2",
        ];
        for a in attempts {
            let r = s.call("run_command", run(a)).await;
            assert_ne!(r.status, Status::Ok, "`{a}` succeeded: {r:?}");
        }
        let config_now = std::fs::read_to_string(s.ws().join("toolvisor.toml")).unwrap();
        assert_eq!(config_now, config_before, "the config changed");
        let git = std::fs::read_to_string(s.ws().join(".git/config")).unwrap();
        assert!(!git.contains("fsmonitor"), "{git}");
        assert!(!s.ws().join(".git/hooks/pre-commit").exists());
        assert!(!s.ws().join(".git/hooks/post-checkout").exists());
        assert!(!s.ws().join("g2").exists() && !s.ws().join("t2").exists());
        assert!(s.ws().join(".toolvisor/audit.jsonl").is_file());
        // The rest of the workspace stays writable, `.git`'s other content included.
        let r = s
            .call(
                "run_command",
                run("echo ok > note.txt && touch .git/ORIG_HEAD"),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(s.ws().join(".git/ORIG_HEAD").is_file());
    });
}

#[test]
fn the_state_directory_socket_and_daemon_are_out_of_reach() {
    let s = Server::start(ALLOW_ALL);
    let daemon = s.pid();
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let r = s
            .call("run_command", run("ls -A .toolvisor; echo end"))
            .await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "end\n"),
            "{r:?}"
        );
        let probes = [
            "cat .toolvisor/audit.jsonl".to_owned(),
            "cat .toolvisor/toolvisor.pid".to_owned(),
            "test -S .toolvisor/toolvisor.sock".to_owned(),
            format!("ls /proc/{daemon}/root/"),
            format!("ls /proc/{daemon}/cwd/.toolvisor/toolvisor.sock"),
            "grep -q toolvisor.sock /proc/net/unix".to_owned(),
            format!("kill -HUP {daemon}"),
            format!("kill -0 {daemon}"),
            // No disk to read the state directory (or anything) from below the mounts.
            "ls /dev/sd* /dev/vd* /dev/nvme* /dev/xvd* /dev/mem /dev/kmem 2>/dev/null | grep ."
                .to_owned(),
            "echo 1 > /proc/sysrq-trigger".to_owned(),
            // Nor the host daemons' sockets (docker.sock, D-Bus, …) in /run.
            "ls -A /run | grep .".to_owned(),
            "echo x > /proc/sys/kernel/hostname".to_owned(),
        ];
        for p in &probes {
            let r = s.call("run_command", run(p)).await;
            assert_ne!(r.status, Status::Ok, "`{p}` succeeded: {r:?}");
        }
        // Its own /dev works: the harmless devices, a terminal, shared memory.
        let r = s
            .call(
                "run_command",
                run("echo x > /dev/null && head -c 4 /dev/urandom | wc -c && \
                     echo s > /dev/shm/x && script -qc 'echo in-pty' /dev/null"),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(r.content.contains("in-pty"), "{}", r.content);
        // Every pid a command sees is its own namespace's.
        let r = s
            .call("run_command", run("echo $$; ls /proc | grep -c '^[0-9]'"))
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        let own: Vec<u32> = r.content.lines().filter_map(|l| l.parse().ok()).collect();
        assert!(own[0] < 10 && own[1] < 10, "{}", r.content);
        assert!(pid_alive(daemon), "the daemon died");
    });
    block(T, async {
        let r = s.call("run_command", run("echo still")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
}

#[test]
fn metadata_and_files_outside_the_workspace_stay_as_they_are() {
    let s = Server::start(ALLOW_ALL);
    let outside = outside_dir();
    let victim = outside.path().join("victim");
    std::fs::write(&victim, "keep").unwrap();
    let before = std::fs::metadata(&victim).unwrap();
    let host_tmp = tempfile::Builder::new()
        .prefix("toolvisor-e2e-host-")
        .tempfile_in("/tmp")
        .unwrap();
    std::fs::write(host_tmp.path(), "host secret").unwrap();
    let v = victim.display();
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        for a in [
            format!("chmod 4777 {v}"),
            format!("chown 1:1 {v}"),
            format!("touch -d 2001-01-01 {v}"),
            format!("echo x >> {v}"),
            format!("rm {v}"),
            format!("ln -s /etc/passwd {}/link", outside.path().display()),
            format!("cat {}", host_tmp.path().display()),
        ] {
            let r = s.call("run_command", run(&a)).await;
            assert_ne!(r.status, Status::Ok, "`{a}` succeeded: {r:?}");
        }
        // The command's /tmp is its own: writable, empty of the host's files, gone after.
        let mark = unique_marker("tmp");
        let r = s
            .call(
                "run_command",
                run(&format!("echo x > /tmp/{mark} && ls /tmp")),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert!(
            !Path::new("/tmp").join(&mark).exists(),
            "it wrote the host's /tmp"
        );
        assert!(!r.content.contains("toolvisor-e2e-host-"), "{}", r.content);
    });
    let after = std::fs::metadata(&victim).unwrap();
    assert_eq!(
        (after.mode(), after.uid(), after.gid(), after.mtime()),
        (before.mode(), before.uid(), before.gid(), before.mtime())
    );
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
    assert!(!outside.path().join("link").exists());
}

#[test]
fn edit_tools_refuse_git_and_the_protected_paths() {
    let config = format!("{ALLOW_ALL}\n[workers.exec]\nprotected = [\"secrets/key\"]\n");
    let s = Server::start(&config);
    git_repo(&s);
    s.write(".vscode/settings.json", "{}\n");
    std::os::unix::fs::symlink(".git", s.ws().join("g")).unwrap();
    block(T, async {
        let paths = [
            "toolvisor.toml",
            ".toolvisor/toolvisor.pid",
            ".toolvisor/audit.jsonl",
            ".toolvisor/new-file",
            ".git/config",
            ".git/hooks/pre-commit",
            ".git/objects/x",
            ".git",
            "g/config",
            "sub/.git/config",
            ".gitmodules",
            ".mcp.json",
            ".vscode/settings.json",
            ".vscode/tasks.json",
            ".idea/workspace.xml",
            ".envrc",
            "secrets/key",
        ];
        for p in paths {
            let r = s
                .call(
                    "write_file",
                    json!({"path": p, "content": "x", "overwrite": true}),
                )
                .await;
            assert_eq!(
                kind(&r),
                Some(ErrorType::PermissionError),
                "write_file {p}: {r:?}"
            );
            let r = s
                .call(
                    "preview_write_file",
                    json!({"path": p, "content": "x", "overwrite": true}),
                )
                .await;
            assert_eq!(
                kind(&r),
                Some(ErrorType::PermissionError),
                "preview {p}: {r:?}"
            );
        }
        let r = s
            .call(
                "edit_file",
                json!({"path": ".git/config", "edits": [{"target": "repositoryformatversion", "replacement": "x"}]}),
            )
            .await;
        assert_eq!(kind(&r), Some(ErrorType::PermissionError), "{r:?}");
        // Near misses are fine.
        for p in [
            ".gitignore",
            ".github/ci.yml",
            "secrets/other",
            "src/.envrc.example",
        ] {
            let r = s
                .call("write_file", json!({"path": p, "content": "x"}))
                .await;
            assert_eq!(r.status, Status::Ok, "{p}: {r:?}");
        }
    });
    for missing in [
        ".gitmodules",
        ".mcp.json",
        ".envrc",
        ".idea",
        "secrets/key",
        "sub",
    ] {
        assert!(!s.ws().join(missing).exists(), "{missing} was created");
    }
    let git = std::fs::read_to_string(s.ws().join(".git/config")).unwrap();
    assert!(git.contains("repositoryformatversion = 0"));
}

#[test]
fn processes_a_command_leaves_die_with_it() {
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let marker = unique_marker("ns-orphans");
        let r = s
            .call(
                "run_command",
                json!({"command": "setsid -f sleep 300; (setsid sleep 300 &); (sleep 300 &) & echo started", "env": {"E2E_MARK": marker}}),
            )
            .await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "started\n"),
            "{r:?}"
        );
        if let Err(left) = wait_no_procs_with_env(&marker, Duration::from_secs(15)).await {
            panic!("processes outlived their command: {left:?}");
        }
    });
}

/// A listener on the host's 127.0.0.1 and what it received (None: nothing came).
struct Listener {
    port: u16,
    got: std::sync::mpsc::Receiver<String>,
}

impl Listener {
    fn open() -> Listener {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let (tx, got) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for conn in l.incoming().flatten() {
                let mut text = String::new();
                let _ = (&conn).take(64).read_to_string(&mut text);
                if tx.send(text).is_err() {
                    return;
                }
            }
        });
        Listener { port, got }
    }

    /// A command that connects and says `word` (python3: no shell builtins needed).
    fn dial(&self, word: &str) -> String {
        format!(
            "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {}), 5).sendall(b'{word}')\"",
            self.port
        )
    }
}

#[test]
fn the_network_is_lo_only_unless_a_rule_allows_it() {
    let config = r#"
[[policy.rules]]
tool = "run_command"
action = "allow"
network = true
conditions = [{ param = "cwd", operator = "equals", value = "net" }]

[[policy.rules]]
tool = "*"
action = "allow"
"#;
    let s = Server::start(config);
    std::fs::create_dir(s.ws().join("net")).unwrap();
    let host = Listener::open();
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let g = s.guards().await;
        assert!(!g.network, "commands have no network by default");
        assert!(g.protected.iter().any(|p| p == ".git/config"), "{g:?}");
        assert!(
            g.protected.iter().any(|p| p.ends_with("toolvisor.toml")),
            "{g:?}"
        );
        let r = s.call("run_command", run(&host.dial("denied"))).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert!(r.content.contains("Connection refused"), "{}", r.content);
        // Its own lo works.
        let own = "python3 -c \"import socket; s=socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); c=socket.create_connection(s.getsockname()); print('lo ok')\"";
        let r = s.call("run_command", run(own)).await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "lo ok\n"),
            "{r:?}"
        );
        // The rule that allows this call gives it the host's network.
        let r = s
            .call(
                "run_command",
                json!({"command": host.dial("allowed"), "cwd": "net"}),
            )
            .await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
    assert_eq!(
        host.got.recv_timeout(Duration::from_secs(10)).as_deref(),
        Ok("allowed")
    );
    assert!(host.got.try_recv().is_err(), "the denied call got through");

    let open = Server::start(&format!("{ALLOW_ALL}\n[workers.exec]\nnetwork = true\n"));
    block(T, async {
        assert!(open.guards().await.network);
        let r = open.call("run_command", run(&host.dial("config"))).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
    assert_eq!(
        host.got.recv_timeout(Duration::from_secs(10)).as_deref(),
        Ok("config")
    );
}

/// A Python program, run by a command, that sends `grant`, `confirm` and `restart` on
/// the socket and prints each answer's type (and error type), then a ping's.
const PRIVILEGED: &str = r#"
import socket, struct, sys
sys.path.insert(0, sys.argv[2])
from toolvisor._msgpack import pack, unpack
c = socket.socket(socket.AF_UNIX)
c.settimeout(10)
c.connect(sys.argv[1])
def send(m):
    b = pack(m)
    c.sendall(struct.pack(">I", len(b)) + b)
def recv():
    def exactly(n):
        buf = b""
        while len(buf) < n:
            part = c.recv(n - len(buf))
            if not part:
                raise EOFError
            buf += part
        return buf
    (n,) = struct.unpack(">I", exactly(4))
    return unpack(exactly(n))
send({"type": "hello", "protocol": 1, "client": "priv"})
recv()
out = []
for m in [{"type": "grant", "id": "g", "tools": ["run_command"], "ttl_ms": 60000, "reusable": True},
          {"type": "confirm", "interaction": "none", "approve": True},
          {"type": "restart", "id": "r"},
          {"type": "ping", "id": "p"}]:
    send(m)
    a = recv()
    out.append("%s:%s" % (a["type"], (a.get("error") or {}).get("type")))
print(" ".join(out))
"#;

#[test]
fn the_fallback_still_serves_says_so_and_commands_cannot_grant_confirm_or_restart() {
    let s = Server::start(&format!(
        "{ALLOW_ALL}\n[workers.exec]\nsandbox = \"off\"\ncount = 1\n"
    ));
    s.write("priv.py", PRIVILEGED);
    let socket = s.socket();
    let refused = "error:PermissionError error:PermissionError error:PermissionError pong:None";
    block(T, async {
        let g = s.guards().await;
        assert!(!g.namespaces && g.network, "{g:?}");
        assert!(g.subreaper && g.landlock.is_some(), "{g:?}");
        assert!(
            g.protected.is_empty(),
            "nothing is read-only for commands: {g:?}"
        );
        // Cgroups (where the host has them) work without namespaces too.
        assert_eq!(g.cgroup, g.limits.as_deref() != Some("rlimit"), "{g:?}");
        let exec = s.worker_pids("exec").await;
        let direct = format!(
            "python3 priv.py {} {}",
            socket.display(),
            python_client_in(s.ws()).display()
        );
        let r = s.call("run_command", run(&direct)).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content.trim(), refused);
        // Out of its session, reparented, without the instance marker: still a command.
        let hidden = format!(
            "(setsid env -u TOOLVISOR_INSTANCE {direct} > out.txt &); \
             while [ ! -s out.txt ]; do sleep 0.05; done; cat out.txt"
        );
        let r = s.call("run_command", run(&hidden)).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
        assert_eq!(r.content.trim(), refused);
        assert_eq!(
            s.worker_pids("exec").await,
            exec,
            "a command restarted the workers"
        );
        // A person's connection may do all three.
        let mut c = s.client().await;
        let id: toolvisor_protocol::Id = "g".into();
        let m = c
            .request(
                &toolvisor_protocol::ClientMessage::Grant {
                    id: id.clone(),
                    tools: vec!["run_command".into()],
                    trace_id: None,
                    paths: None,
                    ttl_ms: 60_000,
                    reusable: None,
                },
                &id,
            )
            .await
            .unwrap();
        assert!(
            matches!(m, toolvisor_protocol::ServerMessage::Token { .. }),
            "{m:?}"
        );
    });
}

#[test]
fn in_the_sandbox_the_socket_is_not_there_to_connect_to() {
    let s = Server::start(ALLOW_ALL);
    s.write("priv.py", PRIVILEGED);
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let cmd = format!(
            "python3 priv.py {} {}",
            s.socket().display(),
            python_client_in(s.ws()).display()
        );
        let r = s.call("run_command", run(&cmd)).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert!(
            r.content.contains("FileNotFoundError") || r.content.contains("ConnectionRefused"),
            "{}",
            r.content
        );
    });
}

#[test]
fn required_refuses_to_start_where_namespaces_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let err = serve_refuses_with(
        dir.path(),
        "[workers.exec]\nsandbox = \"required\"\n",
        &[],
        &[("TOOLVISOR_SANDBOX_TEST_FAIL", "probe")],
    );
    assert!(
        err.contains("sandbox = \"required\"") && err.contains("namespaces"),
        "{err}"
    );
}

#[test]
fn auto_falls_back_with_one_warning_where_namespaces_are_refused() {
    let s = Server::start_with_env(ALLOW_ALL, &[("TOOLVISOR_SANDBOX_TEST_FAIL", "probe")]);
    block(T, async {
        let g = s.guards().await;
        assert!(!g.namespaces && g.network, "{g:?}");
        let r = s.call("run_command", run("echo served")).await;
        assert_eq!(
            (r.status, r.content.as_str()),
            (Status::Ok, "served\n"),
            "{r:?}"
        );
    });
    let warnings = s
        .log_seen
        .iter()
        .filter(|l| l.contains("without their own namespaces"))
        .count();
    assert_eq!(warnings, 1, "{:?}", s.log_seen);
}

#[test]
fn a_sandbox_that_cannot_be_set_up_fails_the_call_and_runs_nothing() {
    let s = Server::start_with_env(ALLOW_ALL, &[("TOOLVISOR_SANDBOX_TEST_FAIL", "command")]);
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let r = s.call("run_command", run("touch ran")).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        assert_eq!(kind(&r), Some(ErrorType::InternalError), "{r:?}");
        let msg = &r.error.as_ref().unwrap().message;
        assert!(
            msg.contains("could not be set up") && msg.contains("did not run"),
            "{msg}"
        );
        let r = s
            .call(
                "run_command",
                json!({"command": "touch ran-bg", "background": true}),
            )
            .await;
        let handle = r.meta["process"].as_str().unwrap_or_default().to_owned();
        let end = std::time::Instant::now() + Duration::from_secs(20);
        loop {
            let r = s.call("read_output", json!({"process": handle})).await;
            if r.meta["running"] == json!(false) {
                assert_eq!(r.meta["exit_code"], json!(125), "{r:?}");
                assert_eq!(r.meta["error"]["type"], json!("InternalError"), "{r:?}");
                break;
            }
            assert!(std::time::Instant::now() < end, "the job never ended");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    assert!(!s.ws().join("ran").exists() && !s.ws().join("ran-bg").exists());
}

#[test]
fn git_commondir_cannot_be_planted_to_send_git_elsewhere() {
    let s = Server::start(ALLOW_ALL);
    git_repo(&s);
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        for a in [
            "mkdir -p evil && printf '[core]\\n\\tfsmonitor = touch pwned\\n' > evil/config && echo ../evil > .git/commondir",
            "rm -f .git/commondir",
            "mv .git/commondir c2",
        ] {
            let r = s.call("run_command", run(a)).await;
            assert_ne!(r.status, Status::Ok, "`{a}` succeeded: {r:?}");
        }
        // What the sandbox planted means "this repository", as a missing one does.
        let common = std::fs::read_to_string(s.ws().join(".git/commondir")).unwrap();
        assert_eq!(common, ".\n");
    });
}

/// A bare repository written with the edit tools (no `.git` in any path) does not make
/// an allowed `git status` in it run the `core.fsmonitor` its config names.
#[test]
fn a_bare_repository_planted_with_edit_tools_runs_nothing() {
    if std::process::Command::new("git")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("git is not installed: skipping");
        return;
    }
    let s = Server::start(ALLOW_ALL);
    block(T, async {
        let files = [
            ("vendor/lib/HEAD", "ref: refs/heads/main\n"),
            (
                "vendor/lib/config",
                "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n\tfsmonitor = \"touch ../../pwned; false\"\n",
            ),
            ("vendor/lib/objects/.keep", ""),
            ("vendor/lib/refs/heads/.keep", ""),
        ];
        for (path, content) in files {
            let r = s
                .call("write_file", json!({"path": path, "content": content}))
                .await;
            assert_eq!(r.status, Status::Ok, "{r:?}");
        }
        for args in [
            json!({"command": "git status", "cwd": "vendor/lib"}),
            json!({"command": "git -C vendor/lib status"}),
        ] {
            let r = s.call("run_command", args).await;
            assert!(!s.ws().join("pwned").exists(), "fsmonitor ran: {r:?}");
        }
    });
}

/// Served without a config file, the workspace gets an empty one at once, so it is
/// protected like any config (a missing file cannot be covered read-only); `init`
/// replaces that placeholder without `--force`.
#[test]
fn a_missing_config_is_written_empty_and_protected() {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = Server::start_in(dir);
    let config = s.ws().join("toolvisor.toml");
    let text = std::fs::read_to_string(&config).expect("serve wrote the config");
    assert!(text.starts_with('#'), "{text}");
    block(T, async {
        let r = s
            .call(
                "write_file",
                json!({"path": "toolvisor.toml", "content": "[policy]\nmode = \"yolo\"\n", "overwrite": true}),
            )
            .await;
        assert_ne!(r.status, Status::Ok, "{r:?}");
    });
    assert_eq!(std::fs::read_to_string(&config).unwrap(), text);
    let out = toolvisor(s.ws(), &["init"]);
    assert!(out.status.success(), "{out:?}");
    let starter = std::fs::read_to_string(&config).unwrap();
    assert_ne!(starter, text, "init replaced the placeholder");
}

/// What the person's own git and agent hosts run from the workspace: the hooks
/// directory `core.hooksPath` names (made when missing, so nothing can be planted in
/// it), files the git config includes or names as programs, `.githooks/`, and an agent
/// host's project settings. Commands cannot change them; the edit tools refuse them.
#[test]
fn what_the_host_runs_from_the_workspace_is_read_only_and_refused_to_edits() {
    let dir = tempfile::tempdir().unwrap();
    let put = |rel: &str, text: &str| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    };
    put(
        ".git/config",
        "[core]\n\thooksPath = .husky/_\n\tfsmonitor = tools/fsmon.sh\n[include]\n\tpath = ../project.gitconfig\n",
    );
    put(".git/HEAD", "ref: refs/heads/main\n");
    put(
        "project.gitconfig",
        "[alias]\n\tst = !tools/st.sh --short\n",
    );
    put("tools/fsmon.sh", "#!/bin/sh\n");
    put("tools/st.sh", "#!/bin/sh\n");
    put(".githooks/pre-commit", "#!/bin/sh\n");
    put(".claude/settings.json", "{}\n");
    put("toolvisor.toml", ALLOW_ALL);
    let s = Server::start_in(dir);
    block(T, async {
        if !namespaces(&s).await {
            return;
        }
        let attempts = [
            "mkdir -p .husky/_ && printf '#!/bin/sh\\ntouch pwned\\n' > .husky/_/pre-commit",
            "echo 'touch pwned' >> tools/fsmon.sh",
            "echo 'touch pwned' >> tools/st.sh",
            "printf '[core]\\n\\tfsmonitor = ./x\\n' >> project.gitconfig",
            "echo 'touch pwned' >> .githooks/pre-commit",
            "echo '{\"hooks\":{}}' > .claude/settings.json",
            "mv tools t2 && mkdir tools && echo x > tools/fsmon.sh",
        ];
        for a in attempts {
            let r = s.call("run_command", run(a)).await;
            assert_ne!(r.status, Status::Ok, "`{a}` succeeded: {r:?}");
        }
        assert!(!s.ws().join(".husky/_/pre-commit").exists());
        for (rel, text) in [
            ("tools/fsmon.sh", "#!/bin/sh\n"),
            ("tools/st.sh", "#!/bin/sh\n"),
            (
                "project.gitconfig",
                "[alias]\n\tst = !tools/st.sh --short\n",
            ),
            (".githooks/pre-commit", "#!/bin/sh\n"),
            (".claude/settings.json", "{}\n"),
        ] {
            let now = std::fs::read_to_string(s.ws().join(rel)).unwrap();
            assert_eq!(now, text, "{rel} changed");
        }
        for rel in [
            "tools/fsmon.sh",
            "project.gitconfig",
            ".husky/_/pre-commit",
            ".claude/settings.json",
            ".cursor/mcp.json",
            ".gemini/settings.json",
        ] {
            let r = s
                .call("write_file", json!({"path": rel, "content": "x"}))
                .await;
            assert_ne!(r.status, Status::Ok, "write_file {rel}: {r:?}");
        }
        // The rest of the workspace stays writable.
        let r = s.call("run_command", run("echo ok > tools/other.sh")).await;
        assert_eq!(r.status, Status::Ok, "{r:?}");
    });
}
