//! Parsing the config: defaults, the documented example, errors that name key and line.

use super::*;

#[test]
fn empty_config_is_the_defaults() {
    assert_eq!(Config::parse("", "t").unwrap(), Config::default());
}

#[test]
fn design_example_parses() {
    let text = r#"
[workspace]
private = "."
[server]
state_dir = ".toolvisor"
drain_grace_ms = 10000
max_open_calls = 64
[supervisor]
restart_max = 5
restart_window_ms = 30000
backoff_initial_ms = 100
backoff_max_ms = 5000
cooldown_ms = 30000
[policy]
mode = "auto"
confirm_timeout_ms = 60000
[[policy.rules]]
tool = "run_command"
action = "allow"
conditions = [{ param = "command", operator = "startsWith", value = "cargo " }]
[workers.exec]
count = 2
queue_max = 256
default_timeout_ms = 30000
max_timeout_ms = 600000
max_rss_mb = 512
env_passthrough = ["PATH", "HOME", "LANG"]
env = { RUST_BACKTRACE = "1" }
writable = ["~/.cargo", "~/.cache"]
max_jobs = 64
[edit]
preview_ttl_ms = 600000
[limits]
file_max = 10240
file_keep = 5120
shell_max = 10240
shell_head = 1024
shell_tail = 4096
list_max = 1000
list_keep = 500
search_max = 100
search_keep = 50
max_frame_bytes = 8388608
artifacts_max_bytes = 67108864
artifacts_total_bytes = 536870912
[audit]
fsync = "always"
max_bytes = 67108864
"#;
    let cfg = Config::parse(text, "t").unwrap();
    assert_eq!(cfg.policy.rules.len(), 1);
    assert_eq!(cfg.workers.exec.env["RUST_BACKTRACE"], "1");
    assert_eq!(cfg.workers.count("search"), 2);
    assert_eq!(cfg.workers.count("edit"), 1);
    assert_eq!(cfg.workers.count("exec"), 2);
}

#[test]
fn unknown_key_is_named_with_its_line() {
    let err = Config::parse("[server]\nmax_open_calls = 3\nbogus_key = 1\n", "t").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("bogus_key"), "{text}");
    assert!(text.contains("line 3"), "{text}");
}

#[test]
fn ill_typed_values_name_their_key() {
    let err = Config::parse("[server]\n\n[limits]\nfile_max = \"big\"\n", "t").unwrap_err();
    let text = err.to_string();
    assert!(text.contains("`limits.file_max`"), "{text}");
    assert!(text.contains("line 4"), "{text}");
    let err = Config::parse("[policy]\nmode = \"sometimes\"\n", "t").unwrap_err();
    assert!(err.to_string().contains("`policy.mode`"), "{err}");
    let rules = "[[policy.rules]]\ntool = \"ls\"\naction = \"allow\"\n\
                     [[policy.rules]]\ntool = \"grep\"\naction = 3\n";
    let err = Config::parse(rules, "t").unwrap_err();
    assert!(
        err.to_string().contains("`policy.rules[1].action`"),
        "{err}"
    );
    let err = Config::parse("[workers.exec]\nenv = { A = 1 }\n", "t").unwrap_err();
    assert!(err.to_string().contains("`workers.exec.env.A`"), "{err}");
}

#[test]
fn sandbox_keys_parse_and_belong_to_exec() {
    let cfg = Config::parse(
            "[workers.exec]\nsandbox = \"required\"\nnetwork = true\nprotected = [\"secrets\", \"./a/b\"]\n\
             [workers.exec.limits]\nmemory_mb = 512\ncpu_s = 10\n\
             [[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\nnetwork = true\n\
             [limits]\nmany_max = 4096\nline_max = 2048\n",
            "t",
        )
        .unwrap();
    let e = &cfg.workers.exec;
    assert_eq!(e.sandbox, Some(SandboxMode::Required));
    assert!(e.network.allowed());
    assert_eq!(
        (e.limits.memory_mb, e.limits.pids, e.limits.cpu_s),
        (512, 1024, 10)
    );
    assert_eq!(cfg.policy.rules[0].network, Some(Network::All(true)));
    assert_eq!((cfg.limits.many_max, cfg.limits.line_max), (4096, 2048));
    assert_eq!(
        Config::default().workers.exec.exec_mode(),
        SandboxMode::Auto
    );
    for (bad, key) in [
        (
            "[workers.exec]\nsandbox = \"maybe\"\n",
            "workers.exec.sandbox",
        ),
        ("[workers.search]\nnetwork = true\n", "workers.search"),
        (
            "[workers.exec]\nprotected = [\"/etc\"]\n",
            "workers.exec.protected",
        ),
        (
            "[workers.exec]\nprotected = [\"../up\"]\n",
            "workers.exec.protected",
        ),
        ("[workers.exec.limits]\nmemory = 5\n", "memory"),
        ("[limits]\nline_max = 10\n", "limits.line_max"),
    ] {
        let err = Config::parse(bad, "t").unwrap_err().to_string();
        assert!(err.contains(key), "{bad}: {err}");
    }
}

#[test]
fn bad_value_is_named() {
    let err = Config::parse("[policy]\nmode = \"reckless\"\n", "t").unwrap_err();
    assert!(err.to_string().contains("reckless"), "{err}");
    let err = Config::parse("[workers.search]\ncount = 0\n", "t").unwrap_err();
    assert!(err.to_string().contains("workers.search.count"), "{err}");
}

#[test]
fn web_and_skills_tables_parse_and_are_checked() {
    let c = Config::parse(
        "[web]\nallow_private = true\nmax_bytes = 1024\ntimeout_ms = 500\nsearch_url = \"http://127.0.0.1:8888/search\"\n[skills]\npaths = [\"skills\"]\n[workers.web]\ncount = 2\n",
        "t",
    )
    .unwrap();
    assert!(c.web.allow_private);
    assert_eq!(c.web.max_bytes, 1024);
    assert_eq!(c.skills.paths, ["skills"]);
    assert_eq!(c.workers.count("web"), 2);
    assert_eq!(c.workers.count("state"), 1);
    let d = Config::default();
    assert!(!d.web.allow_private);
    assert_eq!(d.web.max_bytes, 10 << 20);
    assert_eq!(d.web.timeout_ms, 30_000);
    assert_eq!(d.skills.paths, [".skills", ".claude/skills"]);
    for (bad, key) in [
        ("[web]\nmax_bytes = 0\n", "web.max_bytes"),
        ("[web]\ntimeout_ms = 0\n", "web.timeout_ms"),
        (
            "[web]\nsearch_url = \"file:///etc/passwd\"\n",
            "web.search_url",
        ),
        ("[skills]\npaths = [\"../elsewhere\"]\n", "skills.paths"),
        ("[skills]\npaths = [\"/etc\"]\n", "skills.paths"),
        ("[web]\nallow_privat = true\n", "allow_privat"),
        ("[workers.state]\ncommand = [\"x\"]\n", "workers.state"),
    ] {
        let e = Config::parse(bad, "t").unwrap_err().to_string();
        assert!(e.contains(key), "{bad}: {e}");
    }
}
