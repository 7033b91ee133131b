//! A policy that holds, end to end: one daemon in mode auto with a few prefixes
//! allowed, a corpus of bypass attempts (each would only create a marker file in the
//! workspace) that must all be refused with the marker absent, and benign developer
//! commands that must be allowed and run as before. Plus `explain` over the socket
//! and from the CLI, and hazards named in the audit log.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use toolvisor_protocol::client::Client;
use toolvisor_protocol::message::{ClientMessage, ServerMessage};
use toolvisor_protocol::{ErrorType, Status, ToolResult};

use crate::harness::*;

/// The issue's config: prefixes allowed in mode `auto`.
const PREFIXES: &[&str] = &[
    "git ", "ls", "cargo ", "echo ", "cat ", "head", "grep ", "wc", "find ", "awk ", "sed ",
    "tar ", "sort ", "env ", "make ",
];

fn config() -> String {
    let mut out = String::from("[policy]\nconfined = \"ask\"\nmode = \"auto\"\n");
    for p in PREFIXES {
        out.push_str(&format!(
            "\n[[policy.rules]]\ntool = \"run_command\"\naction = \"allow\"\n\
             conditions = [{{ param = \"command\", operator = \"startsWith\", value = \"{p}\" }}]\n"
        ));
    }
    out
}

/// A command that must not run unasked; `MARK` is replaced by its marker's name.
struct Attempt {
    cmd: &'static str,
    /// The call's `env`, if any.
    env: Option<(&'static str, &'static str)>,
    /// The file it would create, when a support file names it rather than `MARK`.
    marker: Option<&'static str>,
}

const fn a(cmd: &'static str) -> Attempt {
    Attempt {
        cmd,
        env: None,
        marker: None,
    }
}

const fn with_env(cmd: &'static str, key: &'static str, value: &'static str) -> Attempt {
    Attempt {
        cmd,
        env: Some((key, value)),
        marker: None,
    }
}

const fn named(cmd: &'static str, marker: &'static str) -> Attempt {
    Attempt {
        cmd,
        env: None,
        marker: Some(marker),
    }
}

/// Every class of the issue, several ways each.
const BYPASSES: &[Attempt] = &[
    // Substitutions inside expansions, heredocs and every construct.
    a("ls ${PATH#$(touch MARK)}"),
    a("echo ${PATH:+`touch MARK`}"),
    a("ls ${PATH%$(touch MARK)}"),
    a("ls ${PATH##$(touch MARK)}"),
    a("ls ${PATH%%`touch MARK`}"),
    a("echo ${PATH^$(touch MARK)}"),
    a("echo ${PATH^^$(touch MARK)}"),
    a("echo ${PATH,$(touch MARK)}"),
    a("echo ${PATH,,`touch MARK`}"),
    a("echo ${PATH/x/$(touch MARK)}"),
    a("echo ${PATH//$(touch MARK)/y}"),
    a("echo ${PATH/#$(touch MARK)/y}"),
    a("echo ${PATH/%`touch MARK`/y}"),
    a("echo ${NOPE:-$(touch MARK)}"),
    a("echo ${NOPE:=$(touch MARK)}"),
    a("echo ${NOPE-`touch MARK`}"),
    a("echo \"${NOPE:-$(touch MARK)}\""),
    a("echo ${PATH:0:$(touch MARK; echo 1)}"),
    a("echo ${PATH#\"$(touch MARK)\"}"),
    a("echo ${PATH:+\"a${NOPE:-$(touch MARK)}b\"}"),
    a("echo \"${PATH%%<(touch MARK)}\""),
    // Quotes bash does not take for quotes: a `'` in a double-quoted `${…}` operand, a
    // here-document body or arithmetic, and `\<newline>` between `$` and `(`.
    a("echo \"${NOPE:-'$(touch MARK)'}\""),
    a("grep x \"${NOPE-'`touch MARK`'}\" README.md"),
    a("for i in 1; do ls \"${PATH:+'$(touch MARK)'}\"; done"),
    a("echo \"${NOPE:-${NOPE2:-'$(touch MARK)'}}\" | cat"),
    a("cat <<EOF\n${NOPE:-'$(touch MARK)'}\nEOF"),
    a("echo \"${PATH:0:'$(touch MARK)'}\""),
    a("echo $(( '$(touch MARK)' ))"),
    a("echo \"$'$(touch MARK)'\""),
    a("echo ${NOPE:-$\\\n(touch MARK)}"),
    a("echo <\\\n(touch MARK)"),
    // Quotes `declare` takes off again: a `(…)` value given to an array.
    a("echo hi; declare DIRSTACK='($(touch MARK))'"),
    a("echo hi; a=(1); typeset a='($(touch MARK))'"),
    a("ls ${PATH#<(touch MARK)}"),
    a("echo ${a[$(touch MARK)]}"),
    a("echo $(( $(touch MARK) + 1 ))"),
    a("echo $[ $(touch MARK) 1 ]"),
    a("ls \"$(touch MARK)\""),
    a("ls `touch MARK`"),
    a("echo $(touch MARK)"),
    a("echo \"a $(touch MARK) b\""),
    a("echo \"$(echo \"$(touch MARK)\")\""),
    a("cat <(touch MARK)"),
    a("echo >(touch MARK)"),
    a("cat ${NOPE:-<(touch MARK)}"),
    a("cat <<EOF\n`touch MARK`\nEOF"),
    a("cat <<EOF\n$(touch MARK)\nEOF"),
    a("cat <<EOF\n${NOPE:-$(touch MARK)}\nEOF"),
    a("wc -l <<< \"$(touch MARK)\""),
    a("[[ $(touch MARK) ]] && ls"),
    a("[[ -n ${NOPE:-$(touch MARK)} ]] && ls"),
    a("case $(touch MARK) in *) ls;; esac"),
    a("for f in $(touch MARK); do ls; done"),
    a("for f in x; do ls $(touch MARK); done"),
    a("if ls `touch MARK`; then ls; fi"),
    a("{ ls; echo $(touch MARK); }"),
    a("(ls; echo $(touch MARK))"),
    a("ls | grep $(touch MARK)"),
    a("x=$(touch MARK) ls"),
    a("x=$(touch MARK); ls"),
    a("a[$(touch MARK)]=1; ls"),
    a("wc -l README.md $(touch MARK)"),
    a("git status --porcelain $(touch MARK)"),
    a("grep -r x . --include=$(touch MARK)"),
    a("echo ${x:=$(touch MARK)}"),
    // Text a parser could read differently from bash.
    a("ls $'\\''; touch MARK"),
    a("echo $\"$(touch MARK)\""),
    a("l\\\ns; touch MARK"),
    a("ls\r; touch MARK"),
    a("ls #\\\ntouch MARK"),
    a("ls\u{a0};touch MARK"),
    a("cat <<EOF\nx\nEOF\ntouch MARK"),
    a("cat <<'EOF'\nx\nEOF\ntouch MARK"),
    a("cat <<-EOF\n\tx\n\tEOF\ntouch MARK"),
    a("cat <<EOF; touch MARK\nx\nEOF"),
    a("cat <<EOF && touch MARK\nx\nEOF"),
    a("cat <<EOF | bash\ntouch MARK\nEOF"),
    a("env bash <<'EOF'\ntouch MARK\nEOF"),
    a("ls {fd}>MARK"),
    a("ls <>MARK"),
    // Separators and compound commands.
    a("ls ;touch MARK"),
    a("ls&&touch MARK"),
    a("ls|touch MARK"),
    a("ls&touch MARK"),
    a("ls\ntouch MARK"),
    a("echo ok; (touch MARK)"),
    a("{ touch MARK; }"),
    a("if ls; then touch MARK; fi"),
    a("for i in 1; do touch MARK; done"),
    a("while true; do touch MARK; break; done"),
    a("case x in x) touch MARK;; esac"),
    a("! touch MARK"),
    // Programs that run code through their arguments.
    a("git -c alias.x='!touch MARK' x"),
    a("git -c core.fsmonitor='touch MARK' status"),
    a("git -c alias.st='!touch MARK' st"),
    a("git -C . -c alias.x='!touch MARK' x"),
    a("git fetch --upload-pack='touch MARK' ."),
    a("git ls-remote --upload-pack='touch MARK' ."),
    a("git clone -u 'touch MARK' . cloned"),
    a("git -c protocol.ext.allow=always clone 'ext::sh -c touch% MARK' d"),
    a("git rebase --exec 'touch MARK' HEAD"),
    a("git config alias.pwn '!touch MARK' && git pwn"),
    a("git submodule foreach 'touch MARK'"),
    a("git bisect run touch MARK"),
    a("git difftool -y -x 'touch MARK' HEAD"),
    a("git log --output=MARK"),
    a("git format-patch -1 -o MARK"),
    a("git archive -o MARK HEAD"),
    a("find . -maxdepth 0 -exec touch MARK \\;"),
    a("find . -maxdepth 0 -execdir touch MARK \\;"),
    a("find . -maxdepth 0 -fprint MARK"),
    a("find . -maxdepth 0 -fls MARK"),
    a("find . -maxdepth 0 -fprintf MARK x"),
    a("find . -maxdepth 0 -exec sh -c 'touch MARK' \\;"),
    a("awk 'BEGIN{system(\"touch MARK\")}'"),
    a("awk 'BEGIN { system (\"touch MARK\") }'"),
    a("awk 'BEGIN{print \"x\" > \"MARK\"}'"),
    a("awk 'BEGIN{print \"x\" | \"touch MARK\"}'"),
    a("awk 'BEGIN{\"touch MARK\" | getline}'"),
    a("awk -v c='touch MARK' 'BEGIN{system(c)}'"),
    named("awk -f payload.awk", "mk_awkf"),
    a("ls | awk '{system(\"touch MARK\")}'"),
    a("sed -n '1e touch MARK' README.md"),
    a("sed 's/.*/touch MARK/e' README.md"),
    a("sed -n 'w MARK' README.md"),
    a("sed -n 's/a/b/w MARK' README.md"),
    a("sed --expression='1e touch MARK' README.md"),
    a("sed -e 's/a/b/' -e '1e touch MARK' README.md"),
    a("sed -n -i.x '1e touch MARK' data.txt"),
    named("sed -n -f payload.sed README.md", "mk_sedf"),
    a("cat README.md | sed 's/.*/touch MARK/e'"),
    a("tar --checkpoint=1 --checkpoint-action=exec='touch MARK' -cf /dev/null README.md"),
    a("tar -xf a.tar --to-command='touch MARK'"),
    a("tar --use-compress-program='touch MARK' -cf /dev/null README.md"),
    named("tar -cf /dev/null *", "mk_wild"),
    a("sort --compress-program='touch MARK' README.md"),
    a("env -S 'touch MARK'"),
    a("env bash -c 'touch MARK'"),
    a("env sh -c 'touch MARK'"),
    a("env touch MARK"),
    a("env -i touch MARK"),
    a("env -- touch MARK"),
    a("env X=1 sh -c 'touch MARK'"),
    a("grep x README.md | env touch MARK"),
    a("echo 'touch MARK' | env bash"),
    a("cargo run -- bash -c 'touch MARK'"),
    a("cargo --config 'build.rustc-wrapper=\"touch MARK\"' build"),
    a("make --eval='$(shell touch MARK)'"),
    named("make -f payload.mk", "mk_make"),
    named("make all SHELL=./mkshell.sh", "mk_shell"),
    // Environment that changes what runs.
    named("env PATH=.:/usr/bin:/bin ls", "mk_path"),
    named("PATH=.:$PATH ls", "mk_path"),
    named("PATH=.; ls", "mk_path"),
    named("export PATH=.:$PATH; ls", "mk_path"),
    named("./ls", "mk_path"),
    named("src/../ls", "mk_path"),
    named("BASH_CMDS[ls]=./ls; ls", "mk_path"),
    named("PATH[0]=.; ls", "mk_path"),
    named("for PATH in .; do ls; done", "mk_path"),
    named("echo ${BASH_CMDS[ls]:=./ls}; ls", "mk_path"),
    a("GIT_EDITOR='touch MARK' git commit --allow-empty"),
    a("EDITOR='touch MARK' git commit --allow-empty"),
    a("GIT_SSH_COMMAND='touch MARK' git fetch ssh://h/r"),
    a("RUSTC_WRAPPER='touch MARK' cargo --version"),
    Attempt {
        cmd: "git commit --allow-empty -m x",
        env: Some(("GIT_EDITOR", "touch MARK")),
        marker: None,
    },
    // A program by a path that only looks allowed.
    a("lsd94/../../../../../../../../../usr/bin/touch MARK"),
    a("/usr/bin/touch MARK"),
    a("command touch MARK"),
    // Shells, eval and friends.
    a("echo touch MARK | bash"),
    named("cat payload.sh | sh -s mk_pipe", "mk_pipe"),
    a("eval touch MARK"),
    a("eval 'touch MARK'"),
    named(". ./payload.sh mk_dot", "mk_dot"),
    named("source payload.sh mk_src", "mk_src"),
    a("exec touch MARK"),
    a("trap 'touch MARK' EXIT; ls"),
    a("alias ls='touch MARK'; ls"),
    a("ls() { touch MARK; }; ls"),
    a("function ls { touch MARK; }; ls"),
    a("coproc touch MARK"),
    a("echo x | xargs touch MARK"),
    // Values bash evaluates as code.
    with_env("echo $((X))", "X", "a[$(touch MARK)]"),
    with_env("echo ${!X}", "X", "a[$(touch MARK)]"),
    with_env("echo ${X@P}", "X", "$(touch MARK)"),
    with_env("[[ X -eq 1 ]] && ls", "X", "a[$(touch MARK)]"),
    with_env("[[ $X -gt 0 ]] && ls", "X", "a[$(touch MARK)]"),
    with_env("echo ${a[X]}", "X", "a[$(touch MARK)]"),
    with_env("(( X )) && ls", "X", "a[$(touch MARK)]"),
    with_env("echo $[X]", "X", "a[$(touch MARK)]"),
    with_env("echo ${PATH:X:1}", "X", "a[$(touch MARK)]"),
    with_env("echo $(( $X ))", "X", "a[$(touch MARK)]"),
    a("printf -v 'a[$(touch MARK)]' x"),
    a("ls; test -v 'a[$(touch MARK)]'"),
    a("ls; [ -v 'a[$(touch MARK)]' ]"),
    a("ls; : ${NOPE:=$(touch MARK)}"),
    a("ls; true $(touch MARK)"),
    // Writes where no rule looked.
    a("echo x > MARK"),
    a("echo x >> MARK"),
    a("ls &> MARK"),
    a("ls > MARK 2>&1"),
    a("ls >& MARK"),
    a("ls >| MARK"),
    a("cat README.md 1>MARK"),
    a("{ ls; } > MARK"),
    a("grep x README.md | head > MARK"),
    a("ls; > MARK"),
    a("ls && X=1 > MARK"),
];

/// Texts the old `sh` read as two commands; bash, and the policy, read one harmless
/// command. Allowed or not, nothing may be created.
const READ_ALIKE: &[&str] = &[
    "ls $'\\'; touch MARK; #'",
    "echo 'a'\\''; touch MARK; #'",
    "echo \\`touch MARK\\`",
    "ls $'\\x3b' touch MARK",
];

/// Developer commands that must be allowed and run as before.
const BENIGN: &[&str] = &[
    "ls",
    "ls -la",
    "ls src",
    "ls -1 | wc -l",
    "echo hello",
    "echo \"a; b\"",
    "echo 'single $(quoted)'",
    "echo $HOME",
    "echo \"$PWD\"",
    "echo ${HOME:-none}",
    "echo $((6 * 7))",
    "echo {a,b}",
    "echo *.md",
    "echo done # a comment",
    "echo $'tab\\there'",
    "echo ~",
    "cat README.md",
    "cat < README.md",
    "cat README.md | grep -c line",
    "cat <<'EOF'\nhello $(not run)\nEOF",
    "cat <<EOF\nhome is $HOME\nEOF",
    "head -n 2 README.md",
    "head -c 5 README.md",
    "head -n 1 README.md; wc -c README.md",
    "grep -n line README.md",
    "grep -rn alpha src",
    "grep -E '^(alpha|beta)' src/a.txt",
    "grep -c zzz README.md || true",
    "grep line README.md | wc -l",
    "wc -l README.md",
    "wc -w README.md data.txt",
    "find . -name '*.txt' -type f",
    "find . -name '*exec*'",
    "find src -type f | sort",
    "find . -maxdepth 1 -name '*.md' | wc -l",
    "awk '{print $1}' data.txt",
    "awk -F, '{print $2}' data.csv",
    "awk '$1 > 2 {print}' nums.txt",
    "awk 'BEGIN{s=0} {s+=$1} END{print s}' nums.txt",
    "awk '{print ($1 > 2)}' nums.txt",
    "awk 'NR==1' README.md",
    "sed 's/e/E/' README.md",
    "sed -n '1,2p' README.md",
    "sed -e 's/a/b/g' -e 's/l/L/' README.md",
    "sed -E 's/(al|be)/X/g' src/a.txt",
    "tar -tf a.tar",
    "tar -cf out.tar src",
    "tar -czf out.tgz README.md && tar -tzf out.tgz",
    "sort data.txt",
    "sort -u data.txt",
    "sort -t, -k2 data.csv",
    "sort -o sorted.txt data.txt",
    "sort -n nums.txt | head -n 1",
    "env",
    "env LANG=C ls",
    "env -u HOME ls",
    "LC_ALL=C sort data.txt",
    "make",
    "make -n all",
    "git status",
    "git status --short",
    "git log --oneline -n 1",
    "git log -1 --format=%s",
    "git diff --stat",
    "git rev-parse HEAD",
    "git branch --list",
    "git show --stat HEAD",
    "git grep -n alpha",
    "git -C . status",
    "git config --get user.name",
    "git config user.name",
    "git ls-files | grep \"\\.md$\" | wc -l",
    "git log --pretty=format:\"%h %s\" -n 1",
    "git diff --name-only HEAD",
    "awk '/alpha/ {n++} END {print n}' src/a.txt",
    "sed -n '/one/,/two/p' README.md",
    "echo \"line\" | sed 's/l/L/'",
    "make DEBUG=1 all",
    "cargo --version",
    "cargo --version && git --version",
    "ls && echo ok",
    "ls; echo done",
    "ls || echo never",
    "{ echo a; echo b; }",
    "(ls src)",
    "if [ -f README.md ]; then echo yes; fi",
    "[[ -d src ]] && ls src",
    "test -f README.md && echo yes",
    "for i in 1 2 3; do echo $i; done",
    "for f in src/*.txt; do wc -l \"$f\"; done",
    "x=1; echo $((x + 1))",
    "i=0; while [ $i -lt 3 ]; do i=$((i + 1)); done; echo $i",
    "case README.md in *.md) echo md;; esac",
    "while false; do echo never; done",
    "echo a > /dev/null",
    "ls 2>/dev/null",
    "ls nonexistent 2>/dev/null || echo missing",
    "ls 2>&1 | head -n 3",
    "'l's -la",
    "\\ls",
    "ls \\\n  -la",
];

fn write_exec(ws: &Path, name: &str, body: &str) {
    use std::os::unix::fs::PermissionsExt;
    let p = ws.join(name);
    std::fs::write(&p, body).expect("write script");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
}

fn sh(ws: &Path, program: &str, args: &[&str]) {
    let out = Command::new(program)
        .args(args)
        .current_dir(ws)
        .output()
        .expect("setup command");
    assert!(out.status.success(), "{program} {args:?}: {out:?}");
}

/// A workspace with files, a git repository and the support files attempts name.
fn setup(s: &Server) {
    let ws = s.ws();
    s.write("README.md", "line one alpha\nline two beta\n");
    s.write("data.txt", "b\na\nc\na\n");
    s.write("nums.txt", "1\n3\n5\n");
    s.write("data.csv", "x,2\ny,1\n");
    s.write("src/a.txt", "alpha\nbeta\n");
    s.write("Makefile", "all:\n\t@echo built\n");
    s.write("payload.awk", "BEGIN { system(\"touch mk_awkf\") }\n");
    s.write("payload.sed", "1e touch mk_sedf\n");
    s.write("payload.mk", "all:\n\ttouch mk_make\n");
    write_exec(ws, "payload.sh", "touch \"$1\"\n");
    write_exec(ws, "mkshell.sh", "#!/bin/sh\ntouch mk_shell\n");
    write_exec(ws, "ls", "#!/bin/sh\ntouch mk_path\n");
    std::fs::create_dir_all(ws.join("lsd94")).expect("mkdir");
    // Wildcard injection: a `*` hands these names to tar as options.
    s.write("--checkpoint=1", "");
    s.write("--checkpoint-action=exec=sh payload.sh mk_wild", "");
    sh(ws, "tar", &["-cf", "a.tar", "README.md"]);
    if !has_git() {
        return;
    }
    sh(ws, "git", &["init", "-q"]);
    sh(ws, "git", &["config", "user.name", "e2e"]);
    sh(ws, "git", &["config", "user.email", "e2e@example.com"]);
    sh(ws, "git", &["add", "README.md", "src", "Makefile"]);
    sh(ws, "git", &["commit", "-q", "-m", "init"]);
}

/// git is not on every machine: without it the commands that need it are left out.
fn has_git() -> bool {
    Command::new("git")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether this machine can run `cmd` as the corpus means it.
fn runnable(cmd: &str) -> bool {
    has_git() || !cmd.contains("git ")
}

fn marker_of(i: usize, at: &Attempt) -> String {
    at.marker.map_or_else(|| format!("mk_{i}"), str::to_owned)
}

fn args_of(cmd: &str, env: Option<(&str, &str)>, marker: &str) -> Value {
    let command = cmd.replace("MARK", marker);
    match env {
        Some((k, v)) => json!({"command": command, "env": {k: v.replace("MARK", marker)}}),
        None => json!({"command": command}),
    }
}

fn decision(r: &ToolResult) -> &str {
    r.meta["policy"]["decision"].as_str().unwrap_or("")
}

#[test]
fn bypass_attempts_are_refused_and_developer_commands_run() {
    assert!(BYPASSES.len() >= 100, "{} attempts", BYPASSES.len());
    assert!(BENIGN.len() >= 60, "{} benign commands", BENIGN.len());
    let s = Server::start(&config());
    setup(&s);
    let ws = s.ws().to_owned();
    let mut failures = Vec::new();
    block(Duration::from_secs(300), async {
        let mut c = s.client().await;
        for (i, at) in BYPASSES.iter().enumerate() {
            let marker = marker_of(i, at);
            let args = args_of(at.cmd, at.env, &marker);
            let r = call_on(&mut c, &format!("b{i}"), "run_command", args).await;
            let refused = r.status == Status::Denied
                && matches!(
                    r.error.as_ref().map(|e| e.kind),
                    Some(ErrorType::ConfirmationRequired | ErrorType::PolicyDenied)
                );
            if !refused || decision(&r) == "allow" {
                failures.push(format!(
                    "ran unasked: {:?}: {:?} {}",
                    at.cmd, r.status, r.content
                ));
            }
        }
        for (i, cmd) in READ_ALIKE.iter().enumerate() {
            let marker = format!("mk_alike_{i}");
            call_on(
                &mut c,
                &format!("r{i}"),
                "run_command",
                args_of(cmd, None, &marker),
            )
            .await;
        }
        for (i, cmd) in BENIGN.iter().enumerate().filter(|(_, c)| runnable(c)) {
            let r = call_on(
                &mut c,
                &format!("g{i}"),
                "run_command",
                json!({"command": cmd}),
            )
            .await;
            if r.status != Status::Ok || decision(&r) != "allow" {
                failures.push(format!(
                    "benign command not run: {cmd:?}: {:?} {} {:?}",
                    r.status, r.meta["policy"]["reason"], r.error
                ));
            }
        }
    });
    for (i, at) in BYPASSES.iter().enumerate() {
        let marker = marker_of(i, at);
        if ws.join(&marker).exists() {
            failures.push(format!("{marker} created by {:?}", at.cmd));
        }
    }
    for (i, cmd) in READ_ALIKE.iter().enumerate() {
        let marker = format!("mk_alike_{i}");
        if ws.join(&marker).exists() {
            failures.push(format!("{marker} created by {cmd:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn explain_over_the_socket_and_from_the_cli() {
    let s = Server::start(&config());
    block(T, async {
        let mut c: Client = s.client().await;
        let id = "x1".into();
        let msg = ClientMessage::Explain {
            id: "x1".into(),
            tool: "run_command".into(),
            args: json!({"command": "git status; rm -rf / && ls $(id)"}),
        };
        let m = c.request(&msg, &id).await.expect("explanation");
        let ServerMessage::Explanation {
            decision,
            parts: Some(parts),
            error: None,
            ..
        } = &m
        else {
            panic!("{m:?}");
        };
        assert_eq!(decision, "ask", "{m:?}");
        let words: Vec<String> = parts.iter().map(|p| p.words.join(" ")).collect();
        assert_eq!(words, ["git status", "rm -rf /", "ls $(id)", "id"], "{m:?}");
        assert_eq!(parts[0].rule, Some(0));
        assert_eq!(parts[0].decision, "allow");
        assert_eq!(parts[2].hazards, ["command substitution"]);
        // Nothing ran and nothing was recorded as a call.
        let audit =
            std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).unwrap_or_default();
        assert!(!audit.contains("rm -rf /"), "{audit}");
        let id = "x2".into();
        let msg = ClientMessage::Explain {
            id: "x2".into(),
            tool: "run_command".into(),
            args: json!({"cwd": 3}),
        };
        let m = c.request(&msg, &id).await.expect("explanation");
        assert!(
            matches!(&m, ServerMessage::Explanation { decision, error: Some(e), .. }
                if decision == "error" && e.kind == ErrorType::InvalidParams),
            "{m:?}"
        );
    });
    // The CLI asks the daemon…
    let out = toolvisor(
        s.ws(),
        &[
            "policy",
            "explain",
            "--json",
            "run_command",
            r#"{"command":"ls -la"}"#,
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("--json prints JSON");
    assert_eq!(
        (v["decision"].as_str(), v["rule"].as_u64()),
        (Some("allow"), Some(1)),
        "{v}"
    );
    // …and exits 0 whatever the decision, 2 on a usage error.
    let out = toolvisor(
        s.ws(),
        &[
            "policy",
            "explain",
            "run_command",
            r#"{"command":"rm -rf /"}"#,
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("decision: ask") && text.contains("rm -rf /"),
        "{text}"
    );
    let out = toolvisor(s.ws(), &["policy", "explain", "run_command", "not json"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn explain_with_a_config_needs_no_daemon() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cfg = dir.path().join("rules.toml");
    std::fs::write(&cfg, config()).expect("write config");
    let cfg = cfg.to_string_lossy().into_owned();
    let out = toolvisor(
        dir.path(),
        &[
            "policy",
            "explain",
            "--config",
            &cfg,
            "--json",
            "run_command",
            r#"{"command":"git -c a=b status"}"#,
        ],
    );
    assert!(out.status.success(), "{out:?}");
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["decision"], "ask", "{v}");
    assert_eq!(v["parts"][0]["hazards"], json!(["git -c"]), "{v}");
    assert!(
        v["reason"].as_str().is_some_and(|r| r.contains("git -c")),
        "{v}"
    );
    // Without --config and without a daemon it cannot answer.
    let out = toolvisor(
        dir.path(),
        &["policy", "explain", "run_command", r#"{"command":"ls"}"#],
    );
    assert_eq!(out.status.code(), Some(1), "{out:?}");
}

#[test]
fn hazards_are_named_in_the_audit_and_the_hint_allows_the_command() {
    let s = Server::start(&config());
    block(T, async {
        let mut c = s.client().await;
        let r = call_on(
            &mut c,
            "h1",
            "run_command",
            json!({"command": "git -c a=b status"}),
        )
        .await;
        assert_eq!(r.status, Status::Denied, "{r:?}");
        let r = call_on(
            &mut c,
            "h2",
            "run_command",
            json!({"command": "wc -l README.md > out.txt"}),
        )
        .await;
        assert_eq!(r.status, Status::Denied, "{r:?}");
        // The hint for a command no rule allows is a rule that matches it.
        let r = call_on(&mut c, "h3", "run_command", json!({"command": "pwd"})).await;
        let msg = r
            .error
            .as_ref()
            .map(|e| e.message.clone())
            .unwrap_or_default();
        assert!(msg.contains("value = \"pwd\""), "{msg}");
        let session = c.session.clone();
        let audit = std::fs::read_to_string(s.ws().join(".toolvisor/audit.jsonl")).expect("audit");
        let reason_of = |id: &str| {
            audit
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|r| {
                    r["call_id"] == json!(format!("{session}:{id}")) && r["kind"] == "rejected"
                })
                .map(|r| {
                    r["policy"]["reason"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .unwrap_or_default()
        };
        assert!(reason_of("h1").contains("git -c"), "{}", reason_of("h1"));
        assert!(
            reason_of("h2").contains("redirection to `out.txt`"),
            "{}",
            reason_of("h2")
        );
    });
}

/// The corpus is live: allowed without conditions, most attempts do create their
/// marker (so refusing them above is what kept the markers away).
#[test]
fn the_bypass_attempts_work_when_allowed() {
    let s = Server::start(ALLOW_ALL);
    setup(&s);
    let ws = s.ws().to_owned();
    block(Duration::from_secs(300), async {
        let mut c = s.client().await;
        for (i, at) in BYPASSES.iter().enumerate().filter(|(_, a)| runnable(a.cmd)) {
            let marker = marker_of(i, at);
            let args = args_of(at.cmd, at.env, &marker);
            call_on(&mut c, &format!("b{i}"), "run_command", args).await;
        }
    });
    let dead: Vec<&str> = BYPASSES
        .iter()
        .enumerate()
        .filter(|(_, a)| runnable(a.cmd))
        .filter(|(i, at)| !ws.join(marker_of(*i, at)).exists())
        .map(|(_, at)| at.cmd)
        .collect();
    eprintln!(
        "{} of {} attempts created no marker:\n{}",
        dead.len(),
        BYPASSES.len(),
        dead.join("\n")
    );
    assert!(
        dead.len() * 5 <= BYPASSES.len(),
        "too many attempts are not live"
    );
}
