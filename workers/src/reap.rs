//! `toolvisor reap [OPTIONS] -- CMD...`: the single-threaded subreaper shim every
//! command runs under (DESIGN §2 "No orphans"). OWNER: exec helper.
//!
//! Why a separate process: a child subreaper must reap whatever it adopts, and
//! `waitpid(-1)` inside the tokio worker would steal the exit statuses tokio waits for.
//! This shim has no runtime and one thread of its own, so reaping everything is safe.
//!
//! What it does:
//! 1. becomes a child subreaper, so every orphaned descendant (`setsid`, double fork)
//!    re-parents to it instead of escaping to PID 1;
//! 2. gets SIGTERM as its parent-death signal (and checks `--ppid` against the race
//!    before the `prctl`);
//! 3. optionally stacks a stricter Landlock domain (`--confine --write P...`) so the
//!    command cannot write where the exec worker may (its artifacts directory);
//! 4. starts the command in its own process group with `TOOLVISOR_INSTANCE` set;
//! 5. when the command exits, or the shim gets SIGTERM/SIGINT/SIGHUP (cancel, timeout,
//!    worker death), kills every descendant (TERM, then KILL after the grace), reaps
//!    them all, and exits with the command's status: the same exit code, or death by
//!    the same signal (re-raised with the default disposition), so the worker sees
//!    exactly what the command did.
//!
//! Signals are handled with the self-pipe trick rather than a blocked mask + `sigwait`,
//! because a signal mask is per thread: the handlers work whatever threads the hosting
//! process has (the unit tests host the shim inside the multi-threaded test binary).

use std::collections::{HashMap, HashSet};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{SaFlags, SigAction, SigHandler, SigSet, Signal, kill, killpg, sigaction};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpid, getppid};

/// Exit code when the shim's own arguments are wrong (EX_USAGE).
const EX_USAGE: i32 = 64;
/// Exit code when the command cannot be started (like a shell).
const EX_NOEXEC: i32 = 127;
/// The environment marker the supervisor looks for at start to kill leftovers.
pub const MARKER_VAR: &str = "TOOLVISOR_INSTANCE";
/// Default grace between SIGTERM and SIGKILL (DESIGN §4).
pub const DEFAULT_GRACE: Duration = Duration::from_secs(2);
/// After SIGKILL, how long to keep trying before giving up on unkillable (D-state)
/// processes rather than hanging forever.
const KILL_CAP: Duration = Duration::from_secs(5);
/// How often the TERM phase rescans for processes forked after the last scan.
const RESCAN: Duration = Duration::from_millis(100);

/// Parsed `toolvisor reap` arguments.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ShimArgs {
    /// The worker's pid: if our parent is already someone else, the worker died
    /// before our parent-death signal was armed.
    pub ppid: Option<i32>,
    /// Value of `TOOLVISOR_INSTANCE` for the command.
    pub instance: Option<String>,
    pub grace: Duration,
    /// Apply a Landlock write allow-list (`paths`) before starting the command.
    pub confine: bool,
    pub write: Vec<PathBuf>,
    /// The command and its arguments.
    pub argv: Vec<String>,
}

/// Parse `[--ppid N] [--instance ID] [--grace-ms N] [--confine] [--write P]... -- CMD...`.
pub fn parse(args: Vec<String>) -> Result<ShimArgs, String> {
    let mut out = ShimArgs {
        grace: DEFAULT_GRACE,
        ..ShimArgs::default()
    };
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--" => {
                out.argv = it.collect();
                break;
            }
            "--ppid" => out.ppid = Some(value("--ppid")?.parse().map_err(|_| "bad --ppid")?),
            "--instance" => out.instance = Some(value("--instance")?),
            "--grace-ms" => {
                let ms: u64 = value("--grace-ms")?.parse().map_err(|_| "bad --grace-ms")?;
                out.grace = Duration::from_millis(ms);
            }
            "--confine" => out.confine = true,
            "--write" => out.write.push(PathBuf::from(value("--write")?)),
            other => return Err(format!("unknown option {other:?}")),
        }
    }
    if out.argv.is_empty() {
        return Err("usage: toolvisor reap [OPTIONS] -- COMMAND [ARGS...]".into());
    }
    Ok(out)
}

/// Entry point of `toolvisor reap`; returns the exit code (or does not return when
/// the command died by a signal: the shim then dies by the same signal).
pub fn main(args: Vec<String>) -> i32 {
    match parse(args) {
        Ok(a) => run(&a),
        Err(msg) => {
            eprintln!("toolvisor reap: {msg}");
            EX_USAGE
        }
    }
}

/// Run the shim with parsed arguments.
pub fn run(a: &ShimArgs) -> i32 {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!("toolvisor reap: cannot become a child subreaper: {e}");
    }
    let _ = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM);
    if a.ppid.is_some_and(|p| getppid().as_raw() != p) {
        return 128 + Signal::SIGTERM as i32; // the worker is gone already
    }
    let pipe = match SelfPipe::install() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("toolvisor reap: cannot install signal handlers: {e}");
            return EX_NOEXEC;
        }
    };
    if a.confine {
        crate::sandbox::restrict_writes(&a.write);
    }
    let child = match spawn(a) {
        Ok(pid) => pid,
        Err(e) => {
            eprintln!("toolvisor reap: cannot run {:?}: {e}", a.argv[0]);
            return EX_NOEXEC;
        }
    };
    let mut status = None;
    while status.is_none() {
        reap_all(child, &mut status);
        if status.is_some() || pipe.wait(None).terminate {
            break;
        }
    }
    kill_tree(getpid(), child, a.grace, &pipe, &mut status);
    finish(status)
}

/// Start the command in its own process group; the handlers we installed are reset
/// to the default by `execve`, and std resets the signal mask.
fn spawn(a: &ShimArgs) -> std::io::Result<Pid> {
    let mut cmd = std::process::Command::new(&a.argv[0]);
    cmd.args(&a.argv[1..]).process_group(0);
    if let Some(id) = &a.instance {
        cmd.env(MARKER_VAR, id);
    }
    // The shim reaps with waitpid(-1); the std handle is never waited on.
    let child = cmd.spawn()?;
    Ok(Pid::from_raw(child.id() as i32))
}

/// Reap every exited child without blocking; record the command's status.
fn reap_all(command: Pid, status: &mut Option<WaitStatus>) {
    loop {
        match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) | Err(_) => return,
            Ok(s) if s.pid() == Some(command) => *status = Some(s),
            Ok(_) => {}
        }
    }
}

/// Kill every descendant of `me` (TERM, then KILL after `grace`) and reap them all.
/// Returns once none is left, or after the KILL phase's cap.
pub fn kill_tree(
    me: Pid,
    command: Pid,
    grace: Duration,
    pipe: &SelfPipe,
    status: &mut Option<WaitStatus>,
) {
    let start = Instant::now();
    let kill_at = start + grace;
    let mut termed: HashSet<i32> = HashSet::new();
    reap_all(command, status);
    if has_no_children(me) {
        // The common case: nothing left. Every orphan is reparented to us (we are a
        // subreaper), so no child means no descendant: skip the scan of all of /proc.
        return;
    }
    loop {
        reap_all(command, status);
        let found = descendants(me.as_raw());
        if found.is_empty() {
            return;
        }
        let now = Instant::now();
        if now >= kill_at + KILL_CAP {
            eprintln!("toolvisor reap: {} processes survive SIGKILL", found.len());
            return;
        }
        let sig = if now >= kill_at {
            Signal::SIGKILL
        } else {
            Signal::SIGTERM
        };
        signal_all(command, &found, sig, &mut termed);
        let wait = if sig == Signal::SIGKILL {
            Duration::from_millis(20)
        } else {
            RESCAN.min(kill_at.saturating_duration_since(now))
        };
        pipe.wait(Some(wait));
    }
}

/// Send `sig` to the command's group and to each found process; TERM only once per
/// process (a handler may be cleaning up), followed by CONT so a stopped one sees it.
fn signal_all(command: Pid, found: &[i32], sig: Signal, termed: &mut HashSet<i32>) {
    if sig == Signal::SIGKILL || termed.insert(-command.as_raw()) {
        let _ = killpg(command, sig);
        let _ = killpg(command, Signal::SIGCONT);
    }
    for &pid in found {
        if sig == Signal::SIGKILL || termed.insert(pid) {
            let _ = kill(Pid::from_raw(pid), sig);
            let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
        }
    }
}

/// Whether `me` has no child at all, per the kernel's own lists (one per thread);
/// `false` when a list cannot be read (then the caller scans).
fn has_no_children(me: Pid) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", me.as_raw())) else {
        return false;
    };
    tasks.flatten().all(|t| {
        std::fs::read_to_string(t.path().join("children")).is_ok_and(|l| l.trim().is_empty())
    })
}

/// Every process whose parent chain leads to `root` (zombies included), from /proc.
pub fn descendants(root: i32) -> Vec<i32> {
    let parents = process_parents();
    let mut memo: HashMap<i32, bool> = HashMap::new();
    let mut out = Vec::new();
    for &pid in parents.keys() {
        if pid != root && leads_to(pid, root, &parents, &mut memo) {
            out.push(pid);
        }
    }
    out.sort_unstable();
    out
}

/// Whether `pid`'s ancestry reaches `root` (memoised; bounded against cycles).
fn leads_to(
    pid: i32,
    root: i32,
    parents: &HashMap<i32, i32>,
    memo: &mut HashMap<i32, bool>,
) -> bool {
    let mut chain = Vec::new();
    let mut cur = pid;
    let answer = loop {
        if let Some(&known) = memo.get(&cur) {
            break known;
        }
        match parents.get(&cur) {
            Some(&pp) if pp == root => break true,
            Some(&pp) if pp > 1 && chain.len() < 4096 => {
                chain.push(cur);
                cur = pp;
            }
            _ => break false,
        }
    };
    memo.insert(pid, answer);
    for p in chain {
        memo.insert(p, answer);
    }
    answer
}

/// pid → parent pid for every process in /proc.
fn process_parents() -> HashMap<i32, i32> {
    let mut map = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return map;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some(ppid) = read_ppid(pid) {
            map.insert(pid, ppid);
        }
    }
    map
}

/// The parent pid from `/proc/<pid>/stat` (the field after the state, after the last
/// `)`, since the command name may contain spaces and parentheses).
pub fn read_ppid(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Exit like the command did: same code, or death by the same signal.
fn finish(status: Option<WaitStatus>) -> i32 {
    match status {
        Some(WaitStatus::Exited(_, code)) => code,
        Some(WaitStatus::Signaled(_, sig, _)) => die_by(sig),
        _ => 128 + Signal::SIGKILL as i32,
    }
}

/// Re-raise `sig` on ourselves with its default action; the fallback code is the
/// shell's convention for a signal death.
fn die_by(sig: Signal) -> i32 {
    let _ = nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_CORE, 0, 0);
    let dfl = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: restoring the default disposition installs no handler.
    let _ = unsafe { sigaction(sig, &dfl) };
    let mut set = SigSet::empty();
    set.add(sig);
    let _ = set.thread_unblock();
    let _ = kill(getpid(), sig);
    128 + sig as i32
}

/// Write end of the self-pipe, for the signal handler.
static PIPE_WRITE: AtomicI32 = AtomicI32::new(-1);

/// Async-signal-safe handler: one byte naming the signal into the self-pipe.
extern "C" fn on_signal(sig: libc::c_int) {
    let fd = PIPE_WRITE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = sig as u8;
        // SAFETY: write(2) is async-signal-safe; errno is saved and restored.
        unsafe {
            let saved = *libc::__errno_location();
            libc::write(fd, (&byte as *const u8).cast(), 1);
            *libc::__errno_location() = saved;
        }
    }
}

/// What [`SelfPipe::wait`] saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct Woken {
    /// SIGTERM, SIGINT or SIGHUP arrived: time to kill the tree.
    pub terminate: bool,
}

/// Signals turned into readable bytes on a pipe, so one `poll` waits for child exits,
/// termination requests and timeouts together.
pub struct SelfPipe {
    read: OwnedFd,
    _write: OwnedFd,
}

impl SelfPipe {
    /// Create the pipe and install handlers for SIGCHLD, SIGTERM, SIGINT, SIGHUP.
    pub fn install() -> nix::Result<Self> {
        let flags = nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK;
        let (read, write) = nix::unistd::pipe2(flags)?;
        PIPE_WRITE.store(write.as_raw_fd(), Ordering::SeqCst);
        let act = SigAction::new(
            SigHandler::Handler(on_signal),
            SaFlags::SA_RESTART | SaFlags::SA_NOCLDSTOP,
            SigSet::empty(),
        );
        for sig in [
            Signal::SIGCHLD,
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
        ] {
            // SAFETY: the handler only calls write(2) on a pipe (async-signal-safe).
            unsafe { sigaction(sig, &act) }?;
        }
        Ok(SelfPipe {
            read,
            _write: write,
        })
    }

    /// Wait until a signal arrives (or `timeout` passes) and drain the pipe.
    pub fn wait(&self, timeout: Option<Duration>) -> Woken {
        // Round up so a sub-millisecond remainder does not spin.
        let ms = timeout.map_or(-1, |d| {
            d.as_micros().div_ceil(1000).min(60_000) as libc::c_int
        });
        let mut fd = libc::pollfd {
            fd: self.read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut fd, 1, ms) };
        if r < 0 && Errno::last() != Errno::EINTR {
            return Woken::default();
        }
        self.drain()
    }

    fn drain(&self) -> Woken {
        let mut woken = Woken::default();
        let mut buf = [0u8; 64];
        while let Ok(n @ 1..) = nix::unistd::read(&self.read, &mut buf) {
            for &b in &buf[..n] {
                let b = i32::from(b);
                if b == libc::SIGTERM || b == libc::SIGINT || b == libc::SIGHUP {
                    woken.terminate = true;
                }
            }
        }
        woken
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Name of the env var that turns [`shim_entry`] into a shim (JSON array of args).
    pub(crate) const TEST_SHIM_VAR: &str = "TOOLVISOR_TEST_SHIM";

    /// Not a test: when the test binary is re-executed with `TOOLVISOR_TEST_SHIM`, this
    /// "test" becomes `toolvisor reap`. The launcher redirects libtest's own stdout
    /// and stderr to /dev/null and hands the real ones over as fds 3 and 4.
    #[test]
    fn shim_entry() {
        let Ok(json) = std::env::var(TEST_SHIM_VAR) else {
            return;
        };
        let args: Vec<String> = serde_json::from_str(&json).expect("shim args");
        // SAFETY: the other thread of this process (libtest's main) only waits for us.
        unsafe { std::env::remove_var(TEST_SHIM_VAR) };
        for (from, to) in [(3, 1), (4, 2)] {
            // SAFETY: plain fd juggling at start, before anything else uses them.
            unsafe {
                libc::dup2(from, to);
                libc::close(from);
            }
        }
        std::process::exit(main(args));
    }

    #[test]
    fn parse_options_and_command() {
        let a = parse(
            [
                "--ppid",
                "7",
                "--instance",
                "abc",
                "--grace-ms",
                "50",
                "--confine",
                "--write",
                "/tmp",
                "--",
                "sh",
                "-c",
                "echo hi",
            ]
            .map(String::from)
            .to_vec(),
        )
        .unwrap();
        assert_eq!(a.ppid, Some(7));
        assert_eq!(a.instance.as_deref(), Some("abc"));
        assert_eq!(a.grace, Duration::from_millis(50));
        assert!(a.confine);
        assert_eq!(a.write, vec![PathBuf::from("/tmp")]);
        assert_eq!(a.argv, ["sh", "-c", "echo hi"]);
        assert!(parse(vec!["--".into()]).is_err());
        assert!(parse(vec!["--bogus".into(), "--".into(), "x".into()]).is_err());
        assert_eq!(main(vec![]), EX_USAGE);
    }

    #[test]
    fn ppid_is_parsed_after_parenthesised_names() {
        let me = std::process::id() as i32;
        assert_eq!(read_ppid(me), Some(nix::unistd::getppid().as_raw()));
        let parents = HashMap::from([(10, 5), (11, 10), (12, 1), (5, 1)]);
        let mut memo = HashMap::new();
        assert!(leads_to(11, 5, &parents, &mut memo));
        assert!(leads_to(10, 5, &parents, &mut memo));
        assert!(!leads_to(12, 5, &parents, &mut memo));
    }
}
