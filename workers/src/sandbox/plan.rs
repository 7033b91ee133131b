//! The mount plan of one command's sandbox: which host paths become writable, which
//! stay read-only inside them, and what is hidden. Pure decisions over a [`View`] of
//! the file system, so they are tested without namespaces; [`super::mount`] runs them.
//!
//! The whole host tree is mounted read-only first; the plan lists what goes on top, in
//! order. Protection that survives renames: a protected path is its own read-only
//! mount, and every directory between it and the writable root that contains it is
//! pinned (bound onto itself). The kernel refuses to rename or remove a mount point
//! (`EBUSY`), so `mv .git g2; mkdir .git` fails at the first step, and the protected
//! file can be neither replaced, removed, hard-linked (`EXDEV`) nor written.

use std::path::{Path, PathBuf};

pub use super::observe::Stamp;

/// Where commands get their private, empty temp directory.
pub const PRIVATE_TMP: &str = "/tmp";
/// Also empty and private: the host's daemons keep their sockets here (`docker.sock`,
/// the D-Bus system bus, databases), and a read-only mount does not stop `connect()`.
pub const PRIVATE_RUN: &str = "/run";
/// What of the host's `/run` a command with the network still sees: the stub resolver's
/// files (`/etc/resolv.conf` often points there).
pub const RESOLVER: &str = "/run/systemd/resolve";
/// Also private (POSIX shared memory), inside the minimal `/dev`.
pub const PRIVATE_SHM: &str = "/dev/shm";
/// The command's own `/dev`.
pub const DEV: &str = "/dev";
/// How deep `.git/modules` is searched for submodule repositories.
const MODULES_DEPTH: usize = 4;

/// What is at a path (not following a final symlink).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Kind {
    /// Nothing there.
    #[default]
    Missing,
    /// A directory.
    Dir,
    /// Anything else that is not a symlink.
    File,
    /// A symlink (never followed).
    Symlink,
}

/// The file system the plan is made from (the host's, at the command's start).
pub trait View {
    /// What is at `p`.
    fn kind(&self, p: &Path) -> Kind;
    /// Subdirectories of `p` (none when unreadable).
    fn subdirs(&self, p: &Path) -> Vec<PathBuf>;
    /// Every entry of directory `p`, sorted (none when unreadable): a hidden pattern
    /// with a wildcard is matched against them.
    fn entries(&self, _p: &Path) -> Vec<PathBuf> {
        Vec::new()
    }
    /// Where the symlink at `p` leads, fully resolved (None: it leads nowhere).
    fn target(&self, _p: &Path) -> Option<PathBuf> {
        None
    }
    /// The text of file `p` when it is at most `max` bytes (a git configuration).
    fn read(&self, _p: &Path, _max: u64) -> Option<String> {
        None
    }
    /// What is at `p` and which object it is (views that know no identities: the
    /// kind alone).
    fn stamp(&self, p: &Path) -> Stamp {
        Stamp::of_kind(self.kind(p))
    }
}

/// The real file system.
pub struct HostView;

impl View for HostView {
    fn kind(&self, p: &Path) -> Kind {
        Stamp::of_host(p).kind
    }

    fn stamp(&self, p: &Path) -> Stamp {
        Stamp::of_host(p)
    }

    fn subdirs(&self, p: &Path) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(p) else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = rd
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.path())
            .collect();
        out.sort();
        out
    }

    fn entries(&self, p: &Path) -> Vec<PathBuf> {
        let Ok(rd) = std::fs::read_dir(p) else {
            return Vec::new();
        };
        let mut out: Vec<PathBuf> = rd.flatten().map(|e| e.path()).collect();
        out.sort();
        out
    }

    fn target(&self, p: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(p).ok()
    }

    fn read(&self, p: &Path, max: u64) -> Option<String> {
        use std::io::Read;
        let f = std::fs::File::open(p).ok()?;
        let mut text = String::new();
        f.take(max).read_to_string(&mut text).ok()?;
        Some(text)
    }
}

/// One step of the plan. Paths are host paths; the mount code puts them under the new
/// root it builds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// A fresh tmpfs (the private `/tmp` and `/run`).
    Tmpfs(PathBuf),
    /// The host tree at this path, read-only (inside a private directory).
    Shown(PathBuf),
    /// A minimal `/dev` of its own: `null`, `zero`, `full`, `random`, `urandom` and
    /// `tty` from the host, a new `pts` instance, a private `shm`. No disk, no other
    /// device: a read-only mount does not stop writing (or reading) a device node.
    Dev,
    /// The host tree at this path, writable.
    Writable(PathBuf),
    /// A staged command's workspace root: an overlay with the host tree at this path as
    /// its lower layer and its writes going to `upper` (outside the workspace), so the
    /// command sees its own changes and the host's tree is left as it was.
    Overlay {
        /// The root (the lower layer, and where the overlay is mounted).
        path: PathBuf,
        /// The overlay's upper directory (the held changes).
        upper: PathBuf,
        /// Its work directory (same file system as `upper`).
        work: PathBuf,
    },
    /// Create this directory (git's own `hooks`, so a missing one cannot be planted),
    /// before it is made read-only.
    MakeDir(PathBuf),
    /// Create this file with this content when it is missing, before it is made
    /// read-only: git's `commondir` holding `.` (the repository itself, what a missing
    /// one means), so a command cannot plant one that sends git to a config and hooks
    /// of its own.
    MakeFile {
        /// The file.
        path: PathBuf,
        /// What it holds.
        content: &'static str,
    },
    /// Bind the directory onto itself, writable: it cannot be renamed or removed.
    Pin(PathBuf),
    /// Bind onto itself, read-only (recursively).
    ReadOnly(PathBuf),
    /// Cover with an empty read-only directory (`dir`) or with `/dev/null`.
    Hide {
        /// What to cover.
        path: PathBuf,
        /// Whether it is a directory.
        dir: bool,
    },
    /// A fresh `/proc` for the command's PID namespace.
    Proc,
}

impl Step {
    fn path(&self) -> Option<&Path> {
        match self {
            Step::Tmpfs(p)
            | Step::Shown(p)
            | Step::Writable(p)
            | Step::Overlay { path: p, .. }
            | Step::MakeDir(p)
            | Step::MakeFile { path: p, .. }
            | Step::Pin(p)
            | Step::ReadOnly(p)
            | Step::Hide { path: p, .. } => Some(p),
            Step::Dev | Step::Proc => None,
        }
    }
}

/// The inputs of a plan (from [`super::spec::SandboxSpec`]).
#[derive(Clone, Copy, Debug)]
pub struct Inputs<'a> {
    /// The workspace roots.
    pub roots: &'a [PathBuf],
    /// More paths the command may write.
    pub writable: &'a [PathBuf],
    /// Workspace-relative names kept read-only inside the roots.
    pub protected: &'a [PathBuf],
    /// Absolute paths kept read-only (the config file).
    pub read_only: &'a [PathBuf],
    /// Absolute paths covered up (the state directory, the socket, credential stores);
    /// a component may be a glob (`~/.cargo/credentials*`), see [`super::hidden`].
    pub hidden: &'a [PathBuf],
    /// The command has the host's network (then it keeps the host's resolver files).
    pub network: bool,
    /// The daemon's home directory (`~/` in a git configuration).
    pub home: Option<&'a Path>,
    /// A staged command's staging directory: each writable root becomes an overlay
    /// whose upper layer is in it ([`toolvisor_os::staged`] layout).
    pub stage: Option<&'a Path>,
    /// Host paths inside the private `/tmp` or `/run` to show read-only: the program
    /// of an MCP server or external worker that lives there (a checkout under `/tmp`).
    pub shown: &'a [PathBuf],
    /// Hidden paths this command may see (`run_command`'s `reveal`): a match of
    /// `hidden` that is one of them or lies under one is left as it is.
    pub reveal: &'a [PathBuf],
}

/// The steps for `inputs` over `view`, in the order they must run.
pub fn plan(inputs: &Inputs<'_>, view: &dyn View) -> Vec<Step> {
    let writable = writable_paths(inputs, view);
    let mut steps = vec![Step::Tmpfs(PRIVATE_TMP.into())];
    if view.kind(Path::new(PRIVATE_RUN)) == Kind::Dir {
        steps.push(Step::Tmpfs(PRIVATE_RUN.into()));
        if inputs.network && view.kind(Path::new(RESOLVER)) == Kind::Dir {
            steps.push(Step::Shown(RESOLVER.into()));
        }
    }
    if view.kind(Path::new(DEV)) == Kind::Dir {
        steps.push(Step::Dev);
    }
    for p in inputs.shown {
        let private = p.starts_with(PRIVATE_TMP) || p.starts_with(PRIVATE_RUN);
        if private && view.kind(p) == Kind::Dir && !steps.contains(&Step::Shown(p.clone())) {
            steps.push(Step::Shown(p.clone()));
        }
    }
    steps.extend(writable.iter().map(|w| writable_step(w, inputs)));
    let mut guards = Vec::new();
    for root in inputs.roots.iter().filter(|r| writable.contains(r)) {
        guards.extend(root_guards(root, inputs.protected, view));
        guards.extend(git_guards(root, inputs.home, view));
    }
    for p in inputs.read_only {
        if matches!(view.kind(p), Kind::Dir | Kind::File) {
            guards.push(Step::ReadOnly(p.clone()));
        }
    }
    for p in inputs
        .hidden
        .iter()
        .flat_map(|h| super::hidden::expand(h, view))
        .filter(|p| !inputs.reveal.iter().any(|r| p.starts_with(r)))
    {
        match view.kind(&p) {
            Kind::Dir => guards.push(Step::Hide { path: p, dir: true }),
            Kind::File => guards.push(Step::Hide {
                path: p,
                dir: false,
            }),
            Kind::Missing | Kind::Symlink => {}
        }
    }
    steps.extend(order(guards, &writable, view));
    steps.push(Step::Proc);
    steps
}

/// How writable path `w` is mounted: as it is, or, for a root of a staged command, as
/// an overlay that holds its changes.
fn writable_step(w: &Path, inputs: &Inputs<'_>) -> Step {
    let root = inputs.roots.iter().position(|r| r == w);
    match (inputs.stage, root) {
        (Some(dir), Some(i)) => Step::Overlay {
            path: w.to_path_buf(),
            upper: toolvisor_os::staged::upper(dir, i),
            work: toolvisor_os::staged::work(dir, i),
        },
        _ => Step::Writable(w.to_path_buf()),
    }
}

/// What the repository's git configuration makes the host run from `root`
/// ([`super::gitcfg`]): read-only, and a configured hooks directory that is missing
/// made first (so it cannot be planted).
fn git_guards(root: &Path, home: Option<&Path>, view: &dyn View) -> Vec<Step> {
    let mut out = Vec::new();
    for (p, kind) in super::gitcfg::guarded(root, home, view) {
        if kind == Kind::Dir && view.kind(&p) == Kind::Missing {
            out.push(Step::MakeDir(p.clone()));
        }
        out.push(Step::ReadOnly(p));
    }
    out
}

/// Roots and writable paths that exist, deduplicated, shallow first.
fn writable_paths(inputs: &Inputs<'_>, view: &dyn View) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in inputs.roots.iter().chain(inputs.writable) {
        if p.is_absolute() && matches!(view.kind(p), Kind::Dir | Kind::File) && !out.contains(p) {
            out.push(p.clone());
        }
    }
    out.sort_by_key(|p| p.components().count());
    out
}

/// The read-only steps for one workspace root: its protected names that exist, git's
/// `hooks` (made when missing), a `.git` file (a worktree's pointer), and the config
/// and hooks of submodule repositories under `.git/modules`.
fn root_guards(root: &Path, names: &[PathBuf], view: &dyn View) -> Vec<Step> {
    let mut out = Vec::new();
    let git = root.join(".git");
    match view.kind(&git) {
        Kind::Dir => {
            let hooks = git.join("hooks");
            if view.kind(&hooks) == Kind::Missing {
                out.push(Step::MakeDir(hooks));
            }
            let common = git.join("commondir");
            match view.kind(&common) {
                Kind::Missing => {
                    out.push(Step::MakeFile {
                        path: common.clone(),
                        content: ".\n",
                    });
                    out.push(Step::ReadOnly(common));
                }
                Kind::File => out.push(Step::ReadOnly(common)),
                // Not git's (a bind mount would follow a symlink): left as it is.
                Kind::Dir | Kind::Symlink => {}
            }
            modules(&git.join("modules"), view, MODULES_DEPTH, &mut out);
        }
        Kind::File => out.push(Step::ReadOnly(git)),
        _ => {}
    }
    for name in names {
        let p = root.join(name);
        let planted = out.contains(&Step::MakeDir(p.clone()));
        if planted || matches!(view.kind(&p), Kind::Dir | Kind::File) {
            out.push(Step::ReadOnly(p));
        }
    }
    out
}

/// Submodule repositories (`.git/modules/<name>/…` with a `config`): their config and
/// hooks are as dangerous as the top repository's.
fn modules(dir: &Path, view: &dyn View, depth: usize, out: &mut Vec<Step>) {
    if depth == 0 {
        return;
    }
    for sub in view.subdirs(dir) {
        if view.kind(&sub.join("config")) == Kind::File {
            out.push(Step::ReadOnly(sub.join("config")));
            if view.kind(&sub.join("hooks")) == Kind::Dir {
                out.push(Step::ReadOnly(sub.join("hooks")));
            }
            modules(&sub.join("modules"), view, depth - 1, out);
        } else {
            modules(&sub, view, depth - 1, out);
        }
    }
}

/// Add the pins, drop what needs no step (read-only already, invisible, covered by
/// another step), and order shallow first (directories made before anything).
fn order(guards: Vec<Step>, writable: &[PathBuf], view: &dyn View) -> Vec<Step> {
    let mut kept: Vec<Step> = Vec::new();
    for g in guards {
        let Some(p) = g.path().map(Path::to_path_buf) else {
            continue;
        };
        let home = innermost(writable, &p);
        let private = p.starts_with(PRIVATE_TMP) || p.starts_with(PRIVATE_RUN);
        let invisible = private && home.is_none();
        let needed = match &g {
            Step::ReadOnly(_) | Step::MakeDir(_) | Step::MakeFile { .. } => {
                home.is_some_and(|w| *w != p)
            }
            _ => !invisible,
        };
        if !needed || kept.contains(&g) {
            continue;
        }
        if let Some(w) = home {
            for a in between(w, &p) {
                let pin = Step::Pin(a.clone());
                if view.kind(&a) == Kind::Dir && !kept.contains(&pin) {
                    kept.push(pin);
                }
            }
        }
        kept.push(g);
    }
    let covers = |s: &Step| matches!(s, Step::ReadOnly(_) | Step::Hide { .. });
    let covering: Vec<PathBuf> = kept
        .iter()
        .filter(|s| covers(s))
        .filter_map(|s| s.path().map(Path::to_path_buf))
        .collect();
    kept.retain(|s| {
        let Some(p) = s.path() else { return true };
        let under = covering.iter().any(|c| p != c && p.starts_with(c));
        let same_as_cover = matches!(s, Step::Pin(_)) && covering.iter().any(|c| c == p);
        !(under || same_as_cover)
    });
    kept.sort_by_key(|s| {
        let rank = usize::from(!matches!(s, Step::MakeDir(_) | Step::MakeFile { .. }));
        let depth = s.path().map_or(0, |p| p.components().count());
        (rank, depth)
    });
    kept
}

/// The innermost writable path containing `p`.
fn innermost<'w>(writable: &'w [PathBuf], p: &Path) -> Option<&'w PathBuf> {
    writable
        .iter()
        .filter(|w| p.starts_with(w))
        .max_by_key(|w| w.components().count())
}

/// The directories strictly between `outer` and `inner` (shallow first).
fn between(outer: &Path, inner: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut cur = inner.parent();
    while let Some(c) = cur {
        if c == outer || !c.starts_with(outer) {
            break;
        }
        out.push(c.to_path_buf());
        cur = c.parent();
    }
    out.reverse();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<PathBuf> {
        super::super::protect::names(&[PathBuf::from("deep/er/secret")])
    }

    struct Ws {
        dir: tempfile::TempDir,
    }

    impl Ws {
        fn new() -> Ws {
            // Not under /tmp: the plan treats paths there specially.
            let base = super::super::test_base();
            Ws {
                dir: tempfile::tempdir_in(base).unwrap(),
            }
        }
        fn root(&self) -> PathBuf {
            self.dir.path().canonicalize().unwrap()
        }
        fn mkdir(&self, rel: &str) {
            std::fs::create_dir_all(self.root().join(rel)).unwrap();
        }
        fn touch(&self, rel: &str) {
            let p = self.root().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "x").unwrap();
        }
    }

    fn run(ws: &Ws, read_only: &[PathBuf], hidden: &[PathBuf]) -> Vec<Step> {
        let roots = [ws.root()];
        let protected = names();
        let inputs = Inputs {
            roots: &roots,
            writable: &[],
            protected: &protected,
            read_only,
            hidden,
            network: false,
            home: None,
            stage: None,
            shown: &[],
            reveal: &[],
        };
        plan(&inputs, &HostView)
    }

    #[test]
    fn git_is_pinned_and_its_config_and_hooks_are_read_only() {
        let ws = Ws::new();
        ws.touch(".git/config");
        ws.mkdir(".git/hooks");
        ws.touch(".envrc");
        ws.touch("deep/er/secret");
        let r = ws.root();
        let steps = run(&ws, &[], &[]);
        assert_eq!(steps[0], Step::Tmpfs(PRIVATE_TMP.into()));
        let pos = |s: &Step| {
            steps
                .iter()
                .position(|x| x == s)
                .unwrap_or_else(|| panic!("{s:?} in {steps:?}"))
        };
        let w = pos(&Step::Writable(r.clone()));
        let pin = pos(&Step::Pin(r.join(".git")));
        let cfg = pos(&Step::ReadOnly(r.join(".git/config")));
        assert!(w < pin && pin < cfg, "{steps:?}");
        pos(&Step::ReadOnly(r.join(".git/hooks")));
        pos(&Step::ReadOnly(r.join(".envrc")));
        pos(&Step::Pin(r.join("deep")));
        pos(&Step::Pin(r.join("deep/er")));
        pos(&Step::ReadOnly(r.join("deep/er/secret")));
        assert_eq!(steps.last(), Some(&Step::Proc));
        assert!(
            !steps.contains(&Step::ReadOnly(r.join(".vscode"))),
            "missing names get no step"
        );
    }

    #[test]
    fn git_commondir_is_planted_as_the_repository_itself_and_read_only() {
        let ws = Ws::new();
        ws.touch(".git/config");
        ws.mkdir(".git/hooks");
        let r = ws.root();
        let steps = run(&ws, &[], &[]);
        let common = r.join(".git/commondir");
        let made = steps
            .iter()
            .position(|s| {
                *s == Step::MakeFile {
                    path: common.clone(),
                    content: ".\n",
                }
            })
            .expect("a missing commondir is made");
        let ro = steps
            .iter()
            .position(|s| *s == Step::ReadOnly(common.clone()))
            .expect("and made read-only");
        assert!(made < ro, "{steps:?}");
        // One that exists is covered as it is.
        ws.touch(".git/commondir");
        let steps = run(&ws, &[], &[]);
        assert!(steps.contains(&Step::ReadOnly(common.clone())));
        assert!(!steps.iter().any(|s| matches!(s, Step::MakeFile { .. })));
    }

    #[test]
    fn missing_hooks_are_made_first_and_a_git_file_is_read_only() {
        let ws = Ws::new();
        ws.touch(".git/config");
        let r = ws.root();
        let steps = run(&ws, &[], &[]);
        let make = steps
            .iter()
            .position(|s| *s == Step::MakeDir(r.join(".git/hooks")))
            .expect("hooks made");
        let ro = steps
            .iter()
            .position(|s| *s == Step::ReadOnly(r.join(".git/hooks")))
            .expect("hooks read-only");
        assert!(make < ro);
        let ws2 = Ws::new();
        ws2.touch(".git");
        let steps = run(&ws2, &[], &[]);
        assert!(steps.contains(&Step::ReadOnly(ws2.root().join(".git"))));
        assert!(!steps.iter().any(|s| matches!(s, Step::MakeDir(_))));
    }

    #[test]
    fn submodules_config_and_hooks_are_read_only() {
        let ws = Ws::new();
        ws.touch(".git/config");
        ws.mkdir(".git/hooks");
        ws.touch(".git/modules/lib/config");
        ws.mkdir(".git/modules/lib/hooks");
        ws.touch(".git/modules/a/b/config");
        let r = ws.root();
        let steps = run(&ws, &[], &[]);
        for p in [
            ".git/modules/lib/config",
            ".git/modules/lib/hooks",
            ".git/modules/a/b/config",
        ] {
            assert!(steps.contains(&Step::ReadOnly(r.join(p))), "{p}: {steps:?}");
        }
        assert!(steps.contains(&Step::Pin(r.join(".git/modules/a/b"))));
    }

    #[test]
    fn hidden_and_config_paths() {
        let ws = Ws::new();
        ws.mkdir(".toolvisor/artifacts");
        ws.touch("conf/toolvisor.toml");
        let r = ws.root();
        let outside = Ws::new();
        outside.touch("state/toolvisor.sock");
        let hidden = [
            r.join(".toolvisor"),
            r.join(".toolvisor/toolvisor.sock"),
            outside.root().join("state/toolvisor.sock"),
            PathBuf::from("/tmp/toolvisor-abc.sock"),
            PathBuf::from("/run/user/0/toolvisor-abc.sock"),
        ];
        let ro = [
            r.join("conf/toolvisor.toml"),
            PathBuf::from("/etc/hostname"),
        ];
        let steps = run(&ws, &ro, &hidden);
        assert!(steps.contains(&Step::Hide {
            path: r.join(".toolvisor"),
            dir: true
        }));
        assert!(
            !steps.iter().any(|s| s.path() == Some(&hidden[1])),
            "under a hidden directory: nothing to do"
        );
        assert!(steps.contains(&Step::Hide {
            path: outside.root().join("state/toolvisor.sock"),
            dir: false
        }));
        assert!(
            !steps.iter().any(|s| matches!(s, Step::Hide { path, .. }
                if path.starts_with(PRIVATE_TMP) || path.starts_with(PRIVATE_RUN))),
            "private directories hide their content already: {steps:?}"
        );
        assert!(steps.contains(&Step::Pin(r.join("conf"))));
        assert!(steps.contains(&Step::ReadOnly(r.join("conf/toolvisor.toml"))));
        assert!(
            !steps.contains(&Step::ReadOnly("/etc/hostname".into())),
            "outside writable paths everything is read-only already"
        );
    }

    #[test]
    fn a_protected_directory_is_not_also_pinned_and_its_children_need_nothing() {
        let ws = Ws::new();
        ws.touch(".git/config");
        ws.mkdir(".git/hooks");
        let r = ws.root();
        let roots = [r.clone()];
        let protected = super::super::protect::names(&[PathBuf::from(".git")]);
        let inputs = Inputs {
            roots: &roots,
            writable: &[],
            protected: &protected,
            read_only: &[],
            hidden: &[],
            network: false,
            home: None,
            stage: None,
            shown: &[],
            reveal: &[],
        };
        let steps = plan(&inputs, &HostView);
        assert!(steps.contains(&Step::ReadOnly(r.join(".git"))), "{steps:?}");
        assert!(!steps.contains(&Step::Pin(r.join(".git"))), "{steps:?}");
        assert!(!steps.contains(&Step::ReadOnly(r.join(".git/config"))));
    }

    #[test]
    fn a_staged_root_is_an_overlay_with_its_guards_on_top() {
        let ws = Ws::new();
        ws.touch(".git/config");
        ws.mkdir(".git/hooks");
        let r = ws.root();
        let extra = ws.root().join(".vscode");
        ws.mkdir(".vscode");
        let roots = [r.clone()];
        let writable = [PathBuf::from("/nonexistent-writable")];
        let protected = names();
        let stage = Path::new("/state/staged/abc");
        let inputs = Inputs {
            roots: &roots,
            writable: &writable,
            protected: &protected,
            read_only: &[],
            hidden: &[],
            network: false,
            home: None,
            stage: Some(stage),
            shown: &[],
            reveal: &[],
        };
        let steps = plan(&inputs, &HostView);
        let overlay = Step::Overlay {
            path: r.clone(),
            upper: stage.join("0/upper"),
            work: stage.join("0/work"),
        };
        let at = |s: &Step| steps.iter().position(|x| x == s);
        let o = at(&overlay).unwrap_or_else(|| panic!("{steps:?}"));
        assert!(!steps.contains(&Step::Writable(r.clone())), "{steps:?}");
        for guard in [
            Step::ReadOnly(r.join(".git/config")),
            Step::ReadOnly(extra.clone()),
        ] {
            let g = at(&guard).unwrap_or_else(|| panic!("{guard:?} in {steps:?}"));
            assert!(g > o, "{guard:?} goes on top of the overlay: {steps:?}");
        }
        let unstaged = Inputs {
            stage: None,
            ..inputs
        };
        assert!(plan(&unstaged, &HostView).contains(&Step::Writable(r)));
    }

    #[test]
    fn between_lists_intermediate_directories() {
        assert_eq!(
            between(Path::new("/w"), Path::new("/w/a/b/c")),
            vec![PathBuf::from("/w/a"), PathBuf::from("/w/a/b")]
        );
        assert!(between(Path::new("/w"), Path::new("/w/a")).is_empty());
    }
}
