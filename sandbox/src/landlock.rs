//! Landlock: self-confinement of a worker process at start, and the stricter domain
//! the reap shim stacks for the commands it runs.
//!
//! Only writes are handled (reads stay allowed everywhere, so `search` can still read
//! anything the resolver lets it). Per group:
//! - `search`, `web` and `meta`: no writes at all;
//! - `state`: its store (`STATE/store`, the workers crate's `state::store::dir`) and
//!   nothing else;
//! - `edit`: the roots, and its temp-name journals (`STATE/edit-temps`, the workers
//!   crate's `edit::temps::dir`);
//! - `exec`: the roots, the temp dir, `/dev/null`, `workers.exec.writable`, and the
//!   state directory, because the exec worker itself writes artifacts there.
//!
//! Commands must not get the state directory, so the `toolvisor reap` shim stacks a
//! second, stricter domain ([`command_writable`], passed as `--confine --write P...`)
//! before it starts the command. Landlock domains only ever narrow, so the command
//! ends with the intersection: everything but the state directory (unless the state
//! directory sits inside a root, where Landlock cannot carve it out).
//!
//! `ABI::V5` on purpose: V9 would also block connecting to unix sockets.

use std::path::{Path, PathBuf};
use toolvisor_protocol::tools;

use landlock::{
    ABI, AccessFs, CompatLevel, Compatible, LandlockStatus, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, path_beneath_rules,
};
use toolvisor_protocol::worker::WorkerInit;

/// The ABI the rules are written against; older kernels degrade (best effort).
const TARGET_ABI: ABI = ABI::V5;

/// Confine this process according to its group; returns the Landlock ABI enforced.
///
/// Call it at the start of the worker process, before building the tokio runtime:
/// before ABI V8 a domain only applies to the calling thread (and what it spawns).
///
/// An exec worker whose commands get namespaces stays out of Landlock: a Landlock
/// domain forbids `mount` and `pivot_root`, which the shims it starts need to build
/// each command's root (the commands themselves get a domain inside it).
///
/// `own`: the directories under the state directory that the group itself writes —
/// the `edit` worker's temp-name journals, the `state` worker's store; the worker
/// passes them, the sandbox does not know the tools' layout.
pub fn confine(init: &WorkerInit, cgroups: &[PathBuf], own: &[PathBuf]) -> Option<u32> {
    if init.group == tools::EXEC && init.exec.sandbox.namespaces {
        return None;
    }
    let paths = match init.group.as_str() {
        tools::EDIT => {
            let mut p = roots(init);
            p.extend(own.iter().cloned());
            p
        }
        tools::EXEC => {
            let mut p = command_writable(init);
            p.push(init.state_dir.clone());
            p.extend(cgroups.iter().cloned());
            p
        }
        // The state worker writes its store and nothing else.
        tools::STATE => own.to_vec(),
        _ => Vec::new(), // search, web, meta, and anything unknown: read-only
    };
    restrict_writes(&paths)
}

/// Where commands may write: the roots, the temp dir, `/dev/null`, `/dev/tty` (whoever
/// opens it gets their own controlling terminal, if any: a command in a terminal may
/// talk to it) and the configured extra paths (a leading `~/` expanded with HOME;
/// missing paths are skipped later).
pub fn command_writable(init: &WorkerInit) -> Vec<PathBuf> {
    let mut p = roots(init);
    p.push(std::env::temp_dir());
    p.push(PathBuf::from("/dev/null"));
    p.push(PathBuf::from("/dev/tty"));
    let home = std::env::var_os("HOME").map(PathBuf::from);
    p.extend(
        init.exec
            .writable
            .iter()
            .filter_map(|w| expand_home(w, home.as_deref())),
    );
    p
}

fn roots(init: &WorkerInit) -> Vec<PathBuf> {
    let r = &init.roots;
    std::iter::once(r.private.clone())
        .chain(r.shared.clone())
        .chain(r.public.clone())
        .collect()
}

/// `~/x` → `$HOME/x`; `~` alone → `$HOME`; None when HOME is needed but unset.
pub(crate) fn expand_home(p: &Path, home: Option<&Path>) -> Option<PathBuf> {
    match p.strip_prefix("~") {
        Ok(rest) => home.map(|h| h.join(rest)),
        Err(_) => Some(p.to_path_buf()),
    }
}

/// Allow writes only beneath `paths` (missing ones ignored) for this thread and what
/// it starts from now on. Returns the ABI enforced, None when Landlock is unavailable.
pub fn restrict_writes(paths: &[PathBuf]) -> Option<u32> {
    restrict(paths, TARGET_ABI)
}

/// [`restrict_writes`] for a command inside its namespace sandbox, where it also may
/// connect only to Unix sockets beneath `paths` (Landlock ABI 9, on kernels that have
/// it): a daemon's socket elsewhere on the read-only host (`/run/docker.sock`) is then
/// out of reach too. Older kernels apply what they support.
pub fn restrict_command(paths: &[PathBuf]) -> Option<u32> {
    restrict(paths, ABI::V9)
}

fn restrict(paths: &[PathBuf], abi: ABI) -> Option<u32> {
    let write = AccessFs::from_write(abi);
    let result = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(write)
        .and_then(|r| r.create())
        .and_then(|r| r.add_rules(path_beneath_rules(paths, write)))
        .and_then(|r| r.restrict_self());
    match result {
        Ok(status) if status.ruleset != RulesetStatus::NotEnforced => {
            Some(abi_number(status.landlock, abi))
        }
        Ok(_) => {
            tracing::warn!("Landlock is not available on this kernel: writes are not confined");
            None
        }
        Err(e) => {
            tracing::warn!("Landlock confinement failed: {e}");
            None
        }
    }
}

/// The ABI actually in force: the kernel's, capped at the one we target.
fn abi_number(status: LandlockStatus, target: ABI) -> u32 {
    let abi = ABI::from(status).min(target);
    [
        ABI::V1,
        ABI::V2,
        ABI::V3,
        ABI::V4,
        ABI::V5,
        ABI::V6,
        ABI::V7,
        ABI::V8,
        ABI::V9,
    ]
    .iter()
    .position(|a| *a == abi)
    .map_or(0, |i| i as u32 + 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use toolvisor_protocol::worker::{ExecSettings, Limits, Roots};

    fn init(group: &str, root: &Path, state: &Path, writable: Vec<PathBuf>) -> WorkerInit {
        WorkerInit {
            generation: 0,
            web: Default::default(),
            skills: Default::default(),
            mcp: None,
            group: group.into(),
            index: 0,
            roots: Roots {
                private: root.to_path_buf(),
                shared: None,
                public: None,
            },
            protected: vec![],
            state_dir: state.to_path_buf(),
            limits: Limits::default(),
            exec: ExecSettings {
                writable,
                ..ExecSettings::default()
            },
        }
    }

    #[test]
    fn home_expansion() {
        let h = Path::new("/home/u");
        assert_eq!(
            expand_home(Path::new("~/.cache"), Some(h)),
            Some(h.join(".cache"))
        );
        assert_eq!(expand_home(Path::new("~"), Some(h)), Some(h.to_path_buf()));
        assert_eq!(expand_home(Path::new("~/x"), None), None);
        assert_eq!(
            expand_home(Path::new("/abs"), None),
            Some(PathBuf::from("/abs"))
        );
    }

    #[test]
    fn writable_sets_per_group() {
        let i = init(
            "exec",
            Path::new("/w"),
            Path::new("/s"),
            vec!["/extra".into()],
        );
        let c = command_writable(&i);
        assert!(c.contains(&PathBuf::from("/w")));
        assert!(c.contains(&PathBuf::from("/extra")));
        assert!(c.contains(&PathBuf::from("/dev/null")));
        assert!(
            !c.contains(&PathBuf::from("/s")),
            "commands never get the state dir"
        );
    }

    /// Run `script` in a child confined by `paths` (the restriction is applied in the
    /// forked child: Landlock would otherwise confine this test thread for good).
    fn confined_sh(paths: &[PathBuf], script: &str) -> std::process::ExitStatus {
        let paths = paths.to_vec();
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(script);
        // SAFETY: the test accepts allocation after fork (glibc's malloc is fork-safe);
        // the ruleset must be built in the child to leave this process unconfined.
        unsafe {
            cmd.pre_exec(move || {
                restrict_writes(&paths);
                Ok(())
            });
        }
        cmd.status().unwrap()
    }

    #[test]
    fn stacked_domains_keep_the_intersection() {
        let probe = restrict_probe();
        if probe.is_none() {
            eprintln!("Landlock unavailable here: skipping");
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let (w, s) = (ws.path().to_path_buf(), state.path().to_path_buf());
        // Worker-like domain: both writable.
        let both = [w.clone(), s.clone(), "/dev/null".into()];
        let script = format!("echo a > {}/a && echo b > {}/b", w.display(), s.display());
        assert!(confined_sh(&both, &script).success());
        // Shim-like: the state dir dropped; a second domain stacks on the first.
        let script = format!(
            "echo x > /dev/null && echo a > {}/a2 && ! (echo b > {}/b2) 2>/dev/null",
            w.display(),
            s.display()
        );
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(&script);
        let (outer, inner) = (both.to_vec(), vec![w.clone(), "/dev/null".into()]);
        // SAFETY: as in confined_sh.
        unsafe {
            cmd.pre_exec(move || {
                restrict_writes(&outer);
                restrict_writes(&inner);
                Ok(())
            });
        }
        assert!(cmd.status().unwrap().success());
        assert!(!s.join("b2").exists());
        // Reads stay allowed everywhere, even with no writes at all.
        assert!(confined_sh(&[], &format!("cat {}/b", s.display())).success());
    }

    /// Whether Landlock enforces here, found in a throwaway child.
    fn restrict_probe() -> Option<()> {
        let dir = tempfile::tempdir().unwrap();
        let st = confined_sh(
            &[],
            &format!("if echo x > {}/f; then exit 1; fi", dir.path().display()),
        );
        st.success().then_some(())
    }

    #[test]
    fn search_group_cannot_write() {
        if restrict_probe().is_none() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let i = init("search", dir.path(), dir.path(), vec![]);
        let mut cmd = std::process::Command::new("sh");
        let d = dir.path().display();
        cmd.arg("-c").arg(format!(
            "if echo x > {d}/f; then exit 1; fi; cat /proc/self/stat"
        ));
        // SAFETY: as in confined_sh.
        unsafe {
            cmd.pre_exec(move || {
                let abi = confine(&i, &[], &[]);
                if abi.is_none() {
                    return Err(std::io::Error::from_raw_os_error(libc::ENOSYS));
                }
                Ok(())
            });
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(!dir.path().join("f").exists());
    }

    #[test]
    fn state_group_writes_only_its_store() {
        if restrict_probe().is_none() {
            return;
        }
        let ws = tempfile::tempdir().unwrap();
        let state = tempfile::tempdir().unwrap();
        let store = state.path().join("store");
        std::fs::create_dir(&store).unwrap();
        let i = init("state", ws.path(), state.path(), vec![]);
        let own = store.clone();
        let (w, s, st) = (ws.path().display(), state.path().display(), store.display());
        let mut cmd = std::process::Command::new("sh");
        cmd.arg("-c").arg(format!(
            "echo ok > {st}/memory.json && mv {st}/memory.json {st}/m2 \
             && ! (echo x > {s}/audit.jsonl) 2>/dev/null && ! (echo x > {w}/f) 2>/dev/null"
        ));
        // SAFETY: as in confined_sh.
        unsafe {
            cmd.pre_exec(move || {
                confine(&i, &[], std::slice::from_ref(&own))
                    .map(|_| ())
                    .ok_or_else(|| std::io::Error::from_raw_os_error(libc::ENOSYS))
            });
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert!(store.join("m2").exists());
        assert!(!state.path().join("audit.jsonl").exists());
        assert!(!ws.path().join("f").exists());
    }
}
