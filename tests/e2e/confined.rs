//! MCP servers and external workers run in the command sandbox by default: each one's
//! own code, at its start, tries to read a decoy credential under a fake HOME (outside
//! `/tmp` and outside the workspace, so neither the private `/tmp` nor the workspace
//! explains what it sees), write outside the workspace, list the state directory and
//! connect to a listener of the test on the host's 127.0.0.1; it writes what happened
//! to a file in the workspace (the only place it may write). `sandbox = "off"` runs it
//! as before; `network = true` lets the connect through. Where the host cannot build
//! the sandbox, a default one is not started, and says why.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;
use toolvisor_protocol::Status;

use crate::harness::*;

const T: Duration = Duration::from_secs(90);

/// A directory for the test outside `/tmp` (the sandbox's `/tmp` is its own): the
/// target directory's, or `/var/tmp` when the checkout itself is under `/tmp`.
fn host_dir() -> tempfile::TempDir {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let base = if target.starts_with("/tmp") && Path::new("/var/tmp").is_dir() {
        Path::new("/var/tmp")
    } else {
        target
    };
    tempfile::tempdir_in(base).unwrap()
}

/// What the probes need: the fake HOME (with its decoy), where writes must not land,
/// the listener's port.
struct Probe {
    home: PathBuf,
    outside: PathBuf,
    port: u16,
    /// The test MCP server, copied outside `/tmp` (the bash line names it, so the
    /// sandbox cannot know to show its directory).
    server: PathBuf,
}

impl Probe {
    fn new(base: &Path, port: u16) -> Probe {
        let home = base.join("home");
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "DECOY-SSH\n").unwrap();
        let outside = base.join("outside");
        std::fs::create_dir_all(&outside).unwrap();
        let server = base.join("test_mcp_server");
        std::fs::copy(test_mcp_server(), &server).unwrap();
        Probe {
            home,
            outside,
            port,
            server,
        }
    }

    /// bash that probes and writes `probe-NAME.txt` in the working directory (the
    /// workspace), whole.
    fn script(&self, name: &str) -> String {
        format!(
            "{{ echo \"secret:$(cat \"$HOME/.ssh/id_ed25519\" 2>&1)\"; \
             if echo x > {out}/{name} 2>/dev/null; then echo write:ok; else echo write:refused; fi; \
             echo \"state:$(ls -A .toolvisor 2>&1 | tr '\\n' ' ')\"; \
             if (exec 5<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then echo connect:ok; else echo connect:refused; fi; \
             }} > probe-{name}.tmp; mv probe-{name}.tmp probe-{name}.txt",
            out = self.outside.display(),
            port = self.port,
        )
    }

    /// An MCP server: the probes, then the test MCP server.
    fn mcp(&self, name: &str, extra: &str) -> String {
        let cmd = format!("{}; exec {}", self.script(name), self.server.display());
        format!("[mcp.servers.{name}]\ncommand = [\"bash\", \"-c\", {cmd:?}]\n{extra}\n")
    }

    /// An external worker: the probes, then nothing (it never says `ready`).
    fn external(&self, name: &str, extra: &str) -> String {
        let cmd = format!("{}; exec sleep 600", self.script(name));
        format!("[workers.{name}]\ncommand = [\"bash\", \"-c\", {cmd:?}]\n{extra}\n")
    }

    fn wrote(&self, name: &str) -> bool {
        self.outside.join(name).exists()
    }
}

/// `serve` on a workspace with `config` and HOME at `home`, once it serves (its
/// workers may still be starting, or never become ready).
fn serve(config: &str, home: &Path, extra_env: &[(&str, &str)]) -> Server {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("toolvisor.toml"), config).unwrap();
    let mut env = vec![("HOME", home.to_str().unwrap())];
    env.extend_from_slice(extra_env);
    let (child, log) = spawn_serve_env(dir.path(), &env);
    let mut s = Server {
        dir,
        child: Some(child),
        log,
        log_seen: Vec::new(),
    };
    s.wait_log("serving", START_DEADLINE);
    s
}

/// What the probe `name` wrote, once it has.
fn result(s: &Server, name: &str) -> String {
    let path = s.ws().join(format!("probe-{name}.txt"));
    let end = Instant::now() + T;
    loop {
        if let Ok(text) = std::fs::read_to_string(&path) {
            return text;
        }
        assert!(Instant::now() < end, "{} never written", path.display());
        // The file appears whole (a rename); nothing to wait on but its existence.
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn line<'a>(text: &'a str, key: &str) -> &'a str {
    text.lines()
        .find_map(|l| l.strip_prefix(key))
        .unwrap_or_else(|| panic!("no {key} in {text:?}"))
}

/// The sandboxed one saw nothing and could do nothing of the four.
fn assert_confined(text: &str) {
    assert!(!line(text, "secret:").contains("DECOY"), "{text}");
    assert_eq!(line(text, "write:"), "refused", "{text}");
    assert_eq!(
        line(text, "state:").trim(),
        "",
        "state directory seen: {text}"
    );
    assert_eq!(line(text, "connect:"), "refused", "{text}");
}

/// The unsandboxed one did all four.
fn assert_free(text: &str) {
    assert!(line(text, "secret:").contains("DECOY-SSH"), "{text}");
    assert_eq!(line(text, "write:"), "ok", "{text}");
    assert!(line(text, "state:").contains("audit"), "{text}");
    assert_eq!(line(text, "connect:"), "ok", "{text}");
}

/// Whether this host gives commands namespaces (else the test says so and passes).
fn sandboxed(s: &Server, what: &str) -> bool {
    let yes = block(T, async { s.guards().await.namespaces });
    if !yes {
        eprintln!("{what}: no command namespaces on this host; skipping");
    }
    yes
}

#[test]
fn mcp_servers_are_confined_unless_off_and_get_the_network_only_when_asked() {
    let base = host_dir();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = Probe::new(base.path(), listener.local_addr().unwrap().port());
    let config = format!(
        "{ALLOW_ALL}\n{}{}{}",
        p.mcp("boxed", ""),
        p.mcp("open", "sandbox = \"off\""),
        p.mcp("net", "network = true"),
    );
    let s = serve(&config, &p.home, &[]);
    if !sandboxed(&s, "confined") {
        return;
    }
    assert_confined(&result(&s, "boxed"));
    assert!(
        !p.wrote("boxed"),
        "the sandboxed server wrote outside the workspace"
    );
    assert_free(&result(&s, "open"));
    assert!(p.wrote("open"));
    let net = result(&s, "net");
    assert_eq!(line(&net, "connect:"), "ok", "{net}");
    assert_eq!(line(&net, "write:"), "refused", "{net}");
    assert!(!line(&net, "secret:").contains("DECOY"), "{net}");
    // The sandboxed server still serves its tools over stdio.
    block(T, async {
        crate::mcp::support::wait_listed(&s, &["boxed__echo", "open__echo"]).await;
        let r = s.call("boxed__echo", json!({"text": "hi"})).await;
        assert_eq!((r.status, r.content.as_str()), (Status::Ok, "hi"), "{r:?}");
    });
}

#[test]
fn external_workers_are_confined_unless_off_and_get_the_network_only_when_asked() {
    let base = host_dir();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = Probe::new(base.path(), listener.local_addr().unwrap().port());
    let config = format!(
        "{ALLOW_ALL}\n{}{}{}",
        p.external("boxed", ""),
        p.external("open", "sandbox = \"off\""),
        p.external("net", "network = true"),
    );
    let s = serve(&config, &p.home, &[]);
    if !sandboxed(&s, "confined") {
        return;
    }
    assert_confined(&result(&s, "boxed"));
    assert!(!p.wrote("boxed"));
    assert_free(&result(&s, "open"));
    let net = result(&s, "net");
    assert_eq!(line(&net, "connect:"), "ok", "{net}");
    assert_eq!(line(&net, "write:"), "refused", "{net}");
}

/// The state of `group`'s worker, once it is `want` (or the deadline passed).
async fn wait_state(s: &Server, group: &str, want: &str) -> String {
    let end = Instant::now() + T;
    loop {
        let state = s
            .worker_status()
            .await
            .into_iter()
            .find(|w| w.group == group)
            .map(|w| w.state)
            .unwrap_or_default();
        if state == want || Instant::now() > end {
            return state;
        }
        // Status has no event for a worker's state: look again.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[test]
fn without_namespaces_a_sandboxed_server_or_worker_does_not_start_and_says_why() {
    let base = host_dir();
    let p = Probe::new(base.path(), 9);
    let config = format!(
        "{ALLOW_ALL}\n{}{}{}",
        p.mcp("boxed", ""),
        p.mcp("open", "sandbox = \"off\""),
        p.external("wboxed", ""),
    );
    let fail = (toolvisor_protocol::worker::SANDBOX_TEST_FAIL_VAR, "probe");
    let mut s = serve(&config, &p.home, &[fail]);
    let why = "cannot run in the command sandbox on this host";
    let logged = s.wait_log(why, T);
    assert!(logged.contains("boxed"), "{logged}");
    s.wait_log("external worker `wboxed`", T);
    block(T, async {
        assert_eq!(wait_state(&s, "mcp:boxed", "failed").await, "failed");
        assert_eq!(wait_state(&s, "wboxed", "failed").await, "failed");
        // `sandbox = "off"` still runs, unsandboxed (and says so).
        crate::mcp::support::wait_listed(&s, &["open__echo"]).await;
        let r = s.call("boxed__echo", json!({"text": "hi"})).await;
        assert_eq!(r.status, Status::Error, "{r:?}");
        let message = r.error.map(|e| e.message).unwrap_or_default();
        assert!(message.contains(why), "{message}");
    });
    s.wait_log("it runs unsandboxed, as the daemon's user", T);
    assert!(
        !s.ws().join("probe-boxed.txt").exists(),
        "the sandboxed one ran"
    );
    assert!(
        !s.ws().join("probe-wboxed.txt").exists(),
        "the sandboxed one ran"
    );
}

#[test]
fn a_domain_list_is_accepted_and_gives_no_network_yet() {
    let base = host_dir();
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let p = Probe::new(base.path(), listener.local_addr().unwrap().port());
    let config = format!(
        "{ALLOW_ALL}\n{}",
        p.mcp("listed", "network = [\"api.example.com\"]")
    );
    let mut s = serve(&config, &p.home, &[]);
    s.wait_log("egress proxy does not exist yet", T);
    if !sandboxed(&s, "confined") {
        return;
    }
    assert_eq!(line(&result(&s, "listed"), "connect:"), "refused");
}

/// Wait until none of `pids` is alive (a foreign process's death has no event to wait
/// on: look again, up to the deadline).
async fn wait_dead(pids: &[u32], what: &str) {
    let end = Instant::now() + T;
    while pids.iter().any(|&p| pid_alive(p)) {
        assert!(
            Instant::now() < end,
            "{what}: {pids:?} outlived their parent"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

#[test]
fn a_killed_worker_or_daemon_leaves_no_sandboxed_process_behind() {
    let (mcp_mark, ext_mark) = (unique_marker("mcp-tree"), unique_marker("ext-tree"));
    // Outside /tmp: the bash line names it, so its directory is not shown.
    let base = host_dir();
    let bin = base.path().join("test_mcp_server");
    std::fs::copy(test_mcp_server(), &bin).unwrap();
    let server = format!("sleep 600 & exec {}", bin.display());
    let config = format!(
        "{ALLOW_ALL}\n[mcp.servers.tree]\ncommand = [\"bash\", \"-c\", {server:?}]\n\
         env = {{ TREE_MARK = {mcp_mark:?} }}\n\
         [workers.tree]\ncommand = [\"bash\", \"-c\", \"sleep 600 & exec sleep 601\"]\n\
         env = {{ TREE_MARK = {ext_mark:?} }}\n"
    );
    let mut s = serve(&config, Path::new("/nonexistent-home"), &[]);
    if !sandboxed(&s, "confined") {
        return;
    }
    block(T, async {
        let first = wait_procs_with_env(&mcp_mark, "sleep", 1, T).await;
        // The MCP server's worker dies: the server's whole tree goes with it.
        for pid in s.worker_pids("mcp:tree").await {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        wait_dead(&first, "the MCP server's tree").await;
        wait_procs_with_env(&mcp_mark, "sleep", 1, T).await;
        wait_procs_with_env(&ext_mark, "sleep", 2, T).await;
    });
    // The daemon dies: every server and worker tree goes with it.
    s.kill9();
    block(T, async {
        for mark in [&mcp_mark, &ext_mark] {
            let left = wait_no_procs_with_env(mark, T).await;
            assert_eq!(left, Ok(()), "left behind");
        }
    });
}
