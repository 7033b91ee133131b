//! Guards verified, not configured: at start, after a reload and for `toolvisor
//! doctor`, a canary command runs through the real path (the exec pool, a real command
//! sandbox, no policy) and tries each way out — an inherited descriptor, a read of a
//! hidden path, a write outside the workspace, a write to a protected path, the
//! daemon's socket, an outbound connection with the network off, a signal to a process
//! outside, a per-user kernel counter — and the supervisor checks from outside what
//! the canary could not fake (the file it must not have made, the connection it must
//! not have opened). Each guard is then `true` or the reason it failed
//! (`status.guards.verified`, an audit `guards_verified` record, `toolvisor doctor`).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::audit::record::GuardsVerified;
use crate::service::Service;
use crate::workers::pool::Job;

/// The guards a canary checks, in the order `doctor` prints them.
pub const GUARDS: [&str; 8] = [
    "descriptors",
    "hidden",
    "write_outside",
    "protected",
    "socket",
    "network",
    "signal",
    "counters",
];

/// How long the canary may run.
const CANARY_DEADLINE: Duration = Duration::from_secs(30);
/// The session the canary's call is counted under.
const SESSION: &str = "guard-canary";

/// The boundary is verified when every guard held; else the ones that did not, and why.
fn boundary_of(verdicts: &BTreeMap<String, Value>) -> Result<(), String> {
    let failed: Vec<String> = verdicts
        .iter()
        .filter(|(_, v)| **v != Value::Bool(true))
        .map(|(name, why)| format!("{name}: {}", why.as_str().unwrap_or("not verified")))
        .collect();
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("guards not verified: {}", failed.join("; ")))
    }
}

/// Run the canaries and record what they found: `status.guards.verified` and a
/// `guards_verified` audit record. Returns the verdicts.
pub async fn verify(service: &Arc<Service>) -> BTreeMap<String, Value> {
    let verdicts = match Canary::prepare(service) {
        Ok(c) => c.run(service).await,
        Err(why) => all_failed(&format!("the canary could not be prepared: {why}")),
    };
    let all = verdicts.values().all(|v| *v == Value::Bool(true));
    if all {
        tracing::info!("guards verified: {}", GUARDS.join(", "));
    } else {
        for (name, why) in verdicts.iter().filter(|(_, v)| **v != Value::Bool(true)) {
            tracing::warn!(guard = %name, "guard NOT verified: {why}");
        }
    }
    service.set_verified(verdicts.clone());
    service.policy().boundary().set(boundary_of(&verdicts));
    let fields: Map<String, Value> = verdicts.clone().into_iter().collect();
    service.audit().record_detached(&GuardsVerified {
        verified: &fields,
        all,
    });
    verdicts
}

/// Every guard failed for one reason.
fn all_failed(why: &str) -> BTreeMap<String, Value> {
    GUARDS
        .iter()
        .map(|g| ((*g).to_owned(), Value::String(why.to_owned())))
        .collect()
}

/// What the canary is given, and what the supervisor checks afterwards.
struct Canary {
    /// A file in the (hidden) state directory, holding `token`.
    secret: std::path::PathBuf,
    token: String,
    /// Where the canary tries to write outside the workspace.
    outside: std::path::PathBuf,
    /// A protected path it tries to append to.
    protected: std::path::PathBuf,
    /// A listener on the host's loopback that nothing may reach.
    listener: std::net::TcpListener,
}

impl Canary {
    fn prepare(service: &Service) -> std::io::Result<Canary> {
        let paths = service.paths();
        let token = format!("canary-{:016x}", rand_u64());
        let secret = paths.state_dir.join("guard-canary");
        std::fs::write(&secret, &token)?;
        let outside =
            outside_dir(&paths.workspace).join(format!(".toolvisor-canary-{:016x}", rand_u64()));
        let protected = match paths.config_file.is_file() {
            true => paths.config_file.clone(),
            false => paths.state_dir.join("guard-canary"),
        };
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        Ok(Canary {
            secret,
            token,
            outside,
            protected,
            listener,
        })
    }

    /// The canary's script: one `guard NAME ok|reason` line per guard.
    fn script(&self, service: &Service) -> std::io::Result<String> {
        let paths = service.paths();
        let port = self.listener.local_addr()?.port();
        let host_inotify = std::fs::read_to_string("/proc/sys/user/max_inotify_instances")
            .unwrap_or_default()
            .trim()
            .to_owned();
        let q = |p: &Path| quote(&p.to_string_lossy());
        Ok(format!(
            r#"say() {{ printf 'guard %s %s\n' "$1" "$2"; }}
ls /proc/$$/fd > /tmp/.fds
fds=$(sort -n /tmp/.fds | tr '\n' ' ')
if [ "$fds" = "0 1 2 " ]; then say descriptors ok; else say descriptors "a command holds descriptors $fds"; fi
if grep -qs {token} {secret}; then say hidden "a command read {secret_text}"; else say hidden ok; fi
(: > {outside}) 2>/dev/null; say write_outside ok
if (: >> {protected}) 2>/dev/null; then say protected "a command could write {protected_text}"; else say protected ok; fi
if [ -e {socket} ]; then say socket "a command sees the daemon's socket"; else say socket ok; fi
if (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null; then say network "a command reached the host's loopback"; else say network ok; fi
if kill -0 {daemon} 2>/dev/null && [ "$(cat /proc/{daemon}/comm 2>/dev/null)" = toolvisor ]; then say signal "a command can signal the daemon"; else say signal ok; fi
mine=$(cat /proc/sys/user/max_inotify_instances 2>/dev/null)
if [ -n "$mine" ] && [ -n "{host_inotify}" ] && [ "$mine" -lt "{host_inotify}" ]; then say counters ok; else say counters "a command may use all {host_inotify} inotify instances (it has ${{mine:-?}})"; fi
"#,
            token = quote(&self.token),
            secret = q(&self.secret),
            secret_text = self.secret.display(),
            outside = q(&self.outside),
            protected = q(&self.protected),
            protected_text = self.protected.display(),
            socket = q(&paths.socket),
            daemon = std::process::id(),
        ))
    }

    async fn run(self, service: &Arc<Service>) -> BTreeMap<String, Value> {
        let script = match self.script(service) {
            Ok(s) => s,
            Err(e) => return all_failed(&format!("the canary could not be written: {e}")),
        };
        let Some(pool) = service.pools().get(toolvisor_protocol::tools::EXEC) else {
            return all_failed("there is no exec group");
        };
        let job = Job {
            call: service.next_call(),
            name: "guard-canary".into(),
            tool: toolvisor_protocol::tools::run_command::NAME.into(),
            args: json!({ "command": script }),
            stream: false,
            timeout: CANARY_DEADLINE,
            rerunnable: false,
            output: None,
            worker: None,
            session: SESSION.into(),
            network: false,
            egress: None,
            takeover: false,
        };
        let end = pool.run(job, &CancellationToken::new()).await;
        let mut verdicts = self.judge(&end.outcome);
        self.check_outside(&mut verdicts);
        let _ = std::fs::remove_file(&self.secret);
        verdicts
    }

    /// The canary's own report, guard by guard.
    fn judge(&self, outcome: &toolvisor_protocol::worker::Outcome) -> BTreeMap<String, Value> {
        let reported = parse_report(&outcome.content);
        let mut out = BTreeMap::new();
        for g in GUARDS {
            let verdict = match reported.get(g) {
                Some(r) if r == "ok" => Value::Bool(true),
                Some(r) => Value::String(r.clone()),
                None => Value::String(match &outcome.error {
                    Some(e) => format!("the canary command did not run: {}", e.message),
                    None => "the canary command did not report this guard".to_owned(),
                }),
            };
            out.insert(g.to_owned(), verdict);
        }
        out
    }

    /// What the canary cannot fake: the file outside must not exist, and nothing may
    /// have connected to the loopback listener.
    fn check_outside(&self, verdicts: &mut BTreeMap<String, Value>) {
        if self.outside.exists() {
            let _ = std::fs::remove_file(&self.outside);
            verdicts.insert(
                "write_outside".into(),
                Value::String(format!("a command wrote {}", self.outside.display())),
            );
        }
        if self.listener.accept().is_ok() {
            verdicts.insert(
                "network".into(),
                Value::String("a command reached the host's loopback".into()),
            );
        }
    }
}

/// A directory outside the workspace that the host shares with commands: the
/// workspace's parent, unless that is under `/tmp` (a command's `/tmp` is its own, so a
/// write there proves nothing), then `$HOME`, then `/var/tmp`. Whether the canary's
/// write got through is judged on the host, where it would have landed.
fn outside_dir(workspace: &Path) -> std::path::PathBuf {
    let shared = |p: &Path| !p.starts_with("/tmp") && p.is_dir();
    let parent = workspace.parent().filter(|p| shared(p));
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    parent
        .map(Path::to_path_buf)
        .or(home.filter(|h| shared(h) && !workspace.starts_with(h)))
        .unwrap_or_else(|| "/var/tmp".into())
}

/// `guard NAME rest…` lines as NAME → rest.
fn parse_report(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("guard "))
        .filter_map(|l| l.split_once(' '))
        .map(|(n, r)| (n.to_owned(), r.trim().to_owned()))
        .collect()
}

/// `s` as one single-quoted shell word.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A random number from the kernel (names and tokens the canary cannot guess).
fn rand_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    let read = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut b));
    if read.is_err() {
        // No /dev/urandom: the clock still differs run to run.
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
        return now.map_or(0, |d| d.as_nanos() as u64) ^ u64::from(std::process::id());
    }
    u64::from_ne_bytes(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_read_guard_by_guard() {
        let r = parse_report("noise\nguard hidden ok\nguard network a command reached x\n");
        assert_eq!(r["hidden"], "ok");
        assert_eq!(r["network"], "a command reached x");
        assert!(!r.contains_key("noise"));
    }

    #[test]
    fn quoting_survives_quotes() {
        assert_eq!(quote("a'b"), r"'a'\''b'");
    }
}
