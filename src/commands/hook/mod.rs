//! `toolvisor hook claude-code|codex|gemini`: one hook event of an agent host on
//! stdin, answered on stdout in that host's JSON (allow / deny / ask with a reason, or
//! `{}`: no opinion). Whatever goes wrong — a malformed or unknown event, a tool with no
//! counterpart, another workspace, a broken config — is no opinion, said on stderr,
//! exit 0: a hook never breaks its host. docs/HOSTS.md.

mod claude;
mod codex;
mod decide;
mod event;
mod gemini;

use std::io::Read;

use serde_json::{Map, Value};

use crate::workspace::Resolved;
use event::{Answer, Decision, Event, Phase};

/// The agent hosts whose hook events toolvisor answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Host {
    ClaudeCode,
    Codex,
    Gemini,
}

impl Host {
    /// The audit's `client` for this host's calls.
    pub fn client(self) -> &'static str {
        match self {
            Host::ClaudeCode => "claude-code",
            Host::Codex => "codex",
            Host::Gemini => "gemini-cli",
        }
    }
}

/// The most of an event read from stdin (a 1 MiB command escaped in JSON fits).
const MAX_EVENT_BYTES: u64 = 16 << 20;

/// Answer one event; always exit 0.
pub fn run(host: Host, r: &Resolved) -> i32 {
    let (name, answer) = match read_event(host, r) {
        Ok(e) => {
            let answer = answer(host, r, &e);
            (e.name, answer)
        }
        Err(why) => (String::new(), Answer::NoOpinion(why)),
    };
    reply(host, &name, &answer)
}

/// No workspace could be resolved: no opinion.
pub fn unresolved(host: Host, why: &str) -> i32 {
    reply(host, "", &Answer::NoOpinion(why.to_owned()))
}

fn reply(host: Host, name: &str, answer: &Answer) -> i32 {
    if let Answer::NoOpinion(why) = answer {
        eprintln!("toolvisor hook: no opinion: {why}");
    }
    let out = match host {
        Host::ClaudeCode => claude::render(name, answer, true),
        Host::Codex => claude::render(name, answer, false),
        Host::Gemini => gemini::render(name, answer),
    };
    println!("{out}");
    0
}

fn read_event(host: Host, r: &Resolved) -> Result<Event, String> {
    let mut buf = Vec::new();
    std::io::stdin()
        .lock()
        .take(MAX_EVENT_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(|e| format!("cannot read the event: {e}"))?;
    if buf.len() as u64 > MAX_EVENT_BYTES {
        return Err(format!("the event is over {MAX_EVENT_BYTES} bytes"));
    }
    let v: Value =
        serde_json::from_slice(&buf).map_err(|e| format!("the event is not JSON: {e}"))?;
    let ws = &r.workspace;
    match host {
        Host::ClaudeCode => claude::parse(&v, ws, claude::claude_tools),
        Host::Codex => claude::parse(&v, ws, codex::tools),
        Host::Gemini => gemini::parse(&v, ws),
    }
}

fn answer(host: Host, r: &Resolved, e: &Event) -> Answer {
    if let Err(why) = ours(r, e) {
        return Answer::NoOpinion(why);
    }
    let calls = match &e.calls {
        Ok(c) => c,
        Err(why) => return Answer::NoOpinion(why.clone()),
    };
    let who = decide::Reporter {
        client: host.client(),
        call_id: &e.call_id,
        record: e.phase == Phase::Before,
    };
    match &e.phase {
        Phase::After { ok, summary } => {
            decide::after(r, &who, calls, *ok, summary);
            Answer::NoOpinion("the call has run".into())
        }
        Phase::Before | Phase::Permission => {
            let a = decide::before(r, &who, calls);
            wrap(r, e, a)
        }
    }
}

/// The event is about this workspace: it has a config or a daemon, and the host runs
/// at or below it.
fn ours(r: &Resolved, e: &Event) -> Result<(), String> {
    let served = r.state_dir.join("lock").exists() || r.socket.exists();
    if !r.config_file.is_file() && !served {
        return Err(format!(
            "{} is not a toolvisor workspace (no toolvisor.toml)",
            r.workspace.display()
        ));
    }
    let Some(cwd) = &e.cwd else { return Ok(()) };
    let cwd = cwd.canonicalize().unwrap_or_else(|_| cwd.clone());
    if cwd.starts_with(&r.workspace) {
        Ok(())
    } else {
        Err(format!(
            "the host runs in {}, outside the workspace {}",
            cwd.display(),
            r.workspace.display()
        ))
    }
}

/// With `[hooks] wrap = true`, an allowed shell command comes back rewritten to run
/// inside the sandbox: `toolvisor exec -- bash -c '<command>'`.
fn wrap(r: &Resolved, e: &Event, a: Answer) -> Answer {
    let Answer::Decided {
        decision: Decision::Allow,
        reason,
        ..
    } = &a
    else {
        return a;
    };
    let shell = matches!(&e.calls, Ok(c) if c.len() == 1 && c[0].tool == "run_command");
    if !shell || !r.config().is_ok_and(|c| c.hooks.wrap) {
        return a;
    }
    let Some(command) = event::text(&e.input, "command") else {
        return a;
    };
    if command.contains('\0') {
        return Answer::Decided {
            decision: Decision::Deny,
            reason: "toolvisor: the command holds a NUL byte, which no shell can run".into(),
            rewrite: None,
        };
    }
    let mut input: Map<String, Value> = e.input.clone();
    input.insert("command".into(), wrapped(command).into());
    Answer::Decided {
        decision: Decision::Allow,
        reason: format!("{reason} (runs inside toolvisor's sandbox)"),
        rewrite: Some(input),
    }
}

/// `command` as a `toolvisor exec` command line (this very binary, by its path).
pub fn wrapped(command: &str) -> String {
    let exe = std::env::current_exe()
        .ok()
        .and_then(|p| p.to_str().map(str::to_owned))
        .unwrap_or_else(|| "toolvisor".into());
    let head = super::quote::line(&[exe.as_str(), "exec", "--", "bash", "-c"]);
    format!("{head} {}", super::quote::word(command))
}
