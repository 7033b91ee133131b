//! The differential test of the policy's reading of quotes against the real bash
//! (docs/POLICY.md, §3.1 Quoting). A deterministic generator enumerates commands that
//! hide a substitution creating a marker file — every `${…}` operator × the quoting
//! around the substitution × the quoting around the `${…}` (none, `"…"`, `$"…"`, a
//! here-document body, a `declare` value) × the program × the statement around it —
//! and asks the policy with rules that allow `echo `, `cat `, `grep ` and `ls`. Every
//! command the policy allows is then run by `bash --noprofile --norc -c` in an empty
//! directory: if the marker appears, the policy allowed a command whose substitution
//! bash ran.
//!
//! The unit test runs a fixed slice (a stride through the enumeration, plus the
//! reported attacks); `scripts/policy-diff.sh` runs every variant (the ignored test).

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::json;
use toolvisor_protocol::tools::builtin;
use toolvisor_protocol::worker::Roots;

use super::{Policy, ToolNames};
use crate::config::{Action, Condition, Mode, Operator, PolicyConfig, Rule};

/// The marker file a substitution creates.
const MARK: &str = "MARK";

/// What bash runs: each creates `MARK` when bash expands it.
const PAYLOADS: &[&str] = &[
    "$(touch MARK)",
    "`touch MARK`",
    "<(touch MARK)",
    "$((x[$(touch MARK)]))",
    "$\\\n(touch MARK)",
    "<\\\n(touch MARK)",
    "${y:-$(touch MARK)}",
];

/// The quoting around the payload, `{P}` (or `{E}`, escaped), inside the operand.
const QUOTINGS: &[&str] = &[
    "{P}",
    "'{P}'",
    "\"{P}\"",
    "$'{P}'",
    "$\"{P}\"",
    "\\{P}",
    "\"'{P}'\"",
    // The payload spelled with ANSI-C escapes (`$'\x24(touch MARK)'`): no `$(` in the
    // text, but bash decodes it and, where it reads the value again, runs it.
    "$'{E}'",
];

/// The payload with `$`, `` ` ``, `<` written as ANSI-C escapes.
fn escaped(payload: &str) -> String {
    payload
        .replace('$', "\\x24")
        .replace('`', "\\x60")
        .replace('<', "\\x3c")
}

/// The expansions around the quoted payload, `{W}`. `x` is unset and `PWD` set, so that
/// each operator expands its operand.
const OPERATORS: &[&str] = &[
    "{W}",
    "${x:-{W}}",
    "${x-{W}}",
    "${x:={W}}",
    "${x={W}}",
    "${PWD:+{W}}",
    "${PWD+{W}}",
    "${x:?{W}}",
    "${x?{W}}",
    "${PWD#{W}}",
    "${PWD##{W}}",
    "${PWD%{W}}",
    "${PWD%%{W}}",
    "${PWD/{W}/r}",
    "${PWD//{W}/r}",
    "${PWD/#{W}/r}",
    "${PWD/%{W}/r}",
    "${PWD/?/{W}}",
    "${PWD//?/{W}}",
    "${PWD^{W}}",
    "${PWD^^{W}}",
    "${PWD,{W}}",
    "${PWD,,{W}}",
    "${PWD:{W}}",
    "${PWD:0:{W}}",
    "${PWD[{W}]}",
    "${x:-${y:-{W}}}",
    "$(({W}))",
];

/// Where the expansion sits in the command's word.
#[derive(Clone, Copy, Debug)]
enum Wrapper {
    Unquoted,
    Double,
    Translated,
    Heredoc,
    QuotedHeredoc,
    /// The value of `declare` for an array (bash re-reads a `(…)` value), in single
    /// quotes and in double quotes, after the host.
    DeclareSingle,
    DeclareDouble,
}

const WRAPPERS: &[Wrapper] = &[
    Wrapper::Unquoted,
    Wrapper::Double,
    Wrapper::Translated,
    Wrapper::Heredoc,
    Wrapper::QuotedHeredoc,
    Wrapper::DeclareSingle,
    Wrapper::DeclareDouble,
];

/// The programs the rules allow.
const HOSTS: &[&str] = &["echo", "cat", "grep x", "ls"];

/// The statement around the command, `{C}` (its line) and `{H}` (its here-document, if
/// any, which bash reads after the line).
const CONTEXTS: &[&str] = &[
    "{C}{H}",
    "for i in 1; do {C}{H}\ndone",
    "{C} | cat{H}",
    "true && {C}{H}",
    "echo \"$({C}{H}\n)\"",
];

/// One generated command and where it came from.
struct Variant {
    command: String,
    label: String,
}

/// How many variants the generator makes.
fn total() -> usize {
    PAYLOADS.len()
        * QUOTINGS.len()
        * OPERATORS.len()
        * WRAPPERS.len()
        * HOSTS.len()
        * CONTEXTS.len()
}

/// The `index`th variant of the full enumeration (mixed radix, payload fastest).
fn variant(index: usize) -> Variant {
    let mut i = index;
    let mut pick = |n: usize| {
        let k = i % n;
        i /= n;
        k
    };
    let (p, q, o) = (
        pick(PAYLOADS.len()),
        pick(QUOTINGS.len()),
        pick(OPERATORS.len()),
    );
    let (w, h, c) = (
        pick(WRAPPERS.len()),
        pick(HOSTS.len()),
        pick(CONTEXTS.len()),
    );
    let operand = QUOTINGS[q]
        .replace("{P}", PAYLOADS[p])
        .replace("{E}", &escaped(PAYLOADS[p]));
    let expansion = OPERATORS[o].replace("{W}", &operand);
    let (line, heredoc) = match WRAPPERS[w] {
        Wrapper::Unquoted => (format!("{} {expansion}", HOSTS[h]), String::new()),
        Wrapper::Double => (format!("{} \"{expansion}\"", HOSTS[h]), String::new()),
        Wrapper::Translated => (format!("{} $\"{expansion}\"", HOSTS[h]), String::new()),
        Wrapper::Heredoc => (format!("{} <<EOF", HOSTS[h]), format!("\n{expansion}\nEOF")),
        Wrapper::QuotedHeredoc => (
            format!("{} <<'EOF'", HOSTS[h]),
            format!("\n{expansion}\nEOF"),
        ),
        Wrapper::DeclareSingle => (
            format!("{} .; declare DIRSTACK='({expansion})'", HOSTS[h]),
            String::new(),
        ),
        Wrapper::DeclareDouble => (
            format!("{} .; declare DIRSTACK=\"({expansion})\"", HOSTS[h]),
            String::new(),
        ),
    };
    let command = CONTEXTS[c].replace("{H}", &heredoc).replace("{C}", &line);
    Variant {
        command,
        label: format!(
            "payload {p}, quoting {q}, operator {o}, wrapper {w:?}, host {h}, context {c}",
            w = WRAPPERS[w]
        ),
    }
}

/// The attacks as reported, always in the slice.
const REPORTED: &[&str] = &[
    "echo \"${x:-'$(touch MARK)'}\"",
    "cat \"${x:-'$(touch MARK)'}\"",
    "grep x \"${x:-'$(touch MARK)'}\"",
    "ls \"${x:-'$(touch MARK)'}\"",
    "for i in 1; do echo \"${x:-'$(touch MARK)'}\"; done",
    "echo \"${x:-'$(touch MARK)'}\" | cat",
    "cat <<EOF\n${x:-'$(touch MARK)'}\nEOF",
    "echo ${x:-$\\\n(touch MARK)}",
    "echo \"${x:-$\\\n(touch MARK)}\"",
    "echo \"${x:-${y:-'$(touch MARK)'}}\"",
    "echo \"${x:-'`touch MARK`'}\"",
    "echo \"${PWD:0:'$(touch MARK)'}\"",
    "echo $(('$(touch MARK)'))",
    "echo \"$'$(touch MARK)'\"",
    "echo $\"'$(touch MARK)'\"",
    "echo $(\\\n(x[$(touch MARK)]))",
    "echo hi; declare DIRSTACK='($(touch MARK))'",
    "echo hi; a=(1); typeset a='($(touch MARK))'",
    "echo \"${x:-'$(touch MARK)'}\"; [[ 'a[$(touch MARK)]' -eq 1 ]]",
    "echo \"${x:-$'\\x24(touch MARK)'}\"",
    "echo $(( $'\\x24(touch MARK)' ))",
    "echo hi; a[$'\\x24(touch MARK)']=1",
];

fn policy() -> Policy {
    let allow = |prefix: &str| Rule {
        conditions: vec![Condition {
            param: "command".into(),
            operator: Operator::StartsWith,
            value: prefix.into(),
        }],
        ..Rule::new("run_command", Action::Allow)
    };
    let cfg = PolicyConfig {
        mode: Mode::Ask,
        confined: crate::config::Confined::Ask,
        confirm_timeout_ms: 60_000,
        rules: ["echo ", "cat ", "grep ", "ls"]
            .into_iter()
            .map(allow)
            .collect(),
    };
    let roots = Roots {
        private: "/ws".into(),
        shared: None,
        public: None,
    };
    Policy::new(&cfg, &roots, &ToolNames::of(&builtin())).unwrap()
}

/// Does bash create the marker when it runs `command` in `dir`? The output is read to
/// its end, so a process substitution still running after bash exits is waited for.
fn bash_runs_payload(dir: &Path, command: &str) -> bool {
    let _ = std::fs::remove_file(dir.join(MARK));
    let out = Command::new("timeout")
        .args(["10", "bash", "--noprofile", "--norc", "-c", command])
        .current_dir(dir)
        .env_clear()
        .env("PATH", "/usr/local/bin:/usr/bin:/bin")
        .stdin(Stdio::null())
        .output()
        .expect("bash runs");
    assert_ne!(
        out.status.code(),
        Some(124),
        "bash timed out on {command:?}"
    );
    dir.join(MARK).exists()
}

#[derive(Debug, Default)]
struct Counts {
    generated: usize,
    allowed: usize,
    allowed_and_ran: Vec<String>,
    /// Asked commands bash runs no substitution in (the cost of asking when unsure),
    /// when the asked ones are run too.
    asked_inert: Option<usize>,
}

/// Decide each command; run the allowed ones in bash (and the asked ones too when
/// `run_asked`, to count what asking costs).
fn check(commands: impl Iterator<Item = Variant>, run_asked: bool) -> Counts {
    let p = policy();
    let tools = builtin();
    let def = tools
        .iter()
        .find(|d| d.name == "run_command")
        .expect("run_command is built in");
    let dir = tempfile::tempdir().unwrap();
    let mut counts = Counts::default();
    for v in commands {
        counts.generated += 1;
        let d = p.decide(def, &json!({ "command": v.command }));
        if d.action != Action::Allow {
            if run_asked && !bash_runs_payload(dir.path(), &v.command) {
                *counts.asked_inert.get_or_insert(0) += 1;
            }
            continue;
        }
        counts.allowed += 1;
        if bash_runs_payload(dir.path(), &v.command) {
            counts
                .allowed_and_ran
                .push(format!("{:?} ({})", v.command, v.label));
        }
    }
    counts
}

fn report(counts: &Counts) {
    eprintln!(
        "policy differential: {} generated, {} allowed, {} allowed and ran",
        counts.generated,
        counts.allowed,
        counts.allowed_and_ran.len()
    );
    if let Some(n) = counts.asked_inert {
        eprintln!("  of the asked, {n} run no substitution in bash (asked to be safe)");
    }
    for c in counts.allowed_and_ran.iter().take(40) {
        eprintln!("  allowed, and bash ran its substitution: {c}");
    }
}

/// Every 331st variant (a prime stride, so each dimension's values all come round)
/// and the reported attacks: a few hundred commands, seconds.
#[test]
fn policy_reads_quotes_as_bash_does_slice() {
    // The harness sees a substitution bash runs (else every count below is vacuous).
    let dir = tempfile::tempdir().unwrap();
    for live in [
        "echo $(touch MARK)",
        "cat <(touch MARK)",
        "echo $\\\n(touch MARK)",
    ] {
        assert!(bash_runs_payload(dir.path(), live), "{live:?}");
    }
    let stride = (0..total()).step_by(331).map(variant);
    let reported = REPORTED.iter().map(|c| Variant {
        command: (*c).to_owned(),
        label: "reported".into(),
    });
    let counts = check(stride.chain(reported), true);
    report(&counts);
    assert!(counts.generated > 400);
    assert!(
        counts.allowed > 0,
        "the inert variants must be allowed, or the test proves nothing"
    );
    assert_eq!(counts.allowed_and_ran, Vec::<String>::new());
}

/// Every variant: `scripts/policy-diff.sh` (minutes).
#[test]
#[ignore = "minutes; run by scripts/policy-diff.sh"]
fn policy_reads_quotes_as_bash_does_full() {
    let counts = check((0..total()).map(variant), false);
    report(&counts);
    assert_eq!(counts.allowed_and_ran, Vec::<String>::new());
}
