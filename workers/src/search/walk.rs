//! The discovery walk shared by `ls`, `glob`, `grep` and `read_many_files`' globs.
//!
//! One parallel walk (`ignore`'s `build_parallel`) with the contract's filters:
//! `.gitignore` inside or outside a git repository (`require_git(false)`), dot-files only
//! with `include_hidden`, never `.git`, never a protected path, no symlink followed. The
//! order in which threads find entries is random, so callers sort what they collect.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use ignore::{DirEntry, WalkBuilder, WalkState};

use crate::paths::Resolved;
use crate::{ToolContext, ToolError};

/// What the walk may show.
#[derive(Clone, Debug, Default)]
pub struct WalkOptions {
    pub include_hidden: bool,
    /// Deepest level below the walked directory (1 = its direct entries); None = all.
    pub max_depth: Option<usize>,
}

/// The kind of an entry, without following symlinks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    /// Symlinks and special files.
    Other,
}

/// One entry the walk found.
#[derive(Clone, Debug)]
pub struct Found {
    /// Relative to the root (what `glob`/`grep` print).
    pub rel: PathBuf,
    /// Relative to the walked directory (what `ls` prints).
    pub under: PathBuf,
    pub kind: Kind,
}

/// Per-thread state of a walk: sees each entry, says whether to go on.
pub trait Visitor: Send {
    /// `false` stops the whole walk.
    fn visit(&mut self, found: &Found) -> bool;
}

/// Walk `dir` (opened through the resolver first, so it is confined, not protected, not
/// in `.git` and a directory) with one visitor per thread; returns every thread's visitor.
///
/// A cancelled call stops the walk and returns `Cancelled`.
pub fn walk<V, M>(
    ctx: &ToolContext,
    dir: &Resolved,
    opts: &WalkOptions,
    make: M,
) -> Result<Vec<V>, ToolError>
where
    V: Visitor,
    M: Fn() -> V + Sync,
{
    super::guard::refuse_git(dir)?;
    let fd = ctx.resolver.open_dir(dir)?;
    super::guard::refuse_git_fd(ctx, dir, &fd)?;
    drop(fd);
    let root_path = ctx.resolver.root_path(dir.root).to_path_buf();
    if opts.max_depth == Some(1) {
        return walk_one_level(ctx, dir, opts, &root_path, make());
    }
    let done = Mutex::new(Vec::new());
    let share = WalkShare::enter();
    let mut b = builder(ctx, &dir.host, opts);
    b.threads(share.threads());
    b.build_parallel().run(|| {
        let mut slot = Slot {
            visitor: Some(make()),
            done: &done,
        };
        let (cancel, root_path, base) = (ctx.cancel.clone(), &root_path, &dir.host);
        Box::new(move |entry| {
            if cancel.is_cancelled() {
                return WalkState::Quit;
            }
            let Some(found) = entry.ok().and_then(|e| found_of(&e, root_path, base)) else {
                return WalkState::Continue;
            };
            let go_on = slot.visitor.as_mut().is_none_or(|v| v.visit(&found));
            if go_on {
                WalkState::Continue
            } else {
                WalkState::Quit
            }
        })
    });
    ctx.cancel.check()?;
    done.into_inner()
        .map_err(|_| ToolError::internal("a walk thread panicked"))
}

/// One directory's entries, read on this thread: starting walker threads costs more
/// than reading one directory (a plain `ls` is the common case).
fn walk_one_level<V: Visitor>(
    ctx: &ToolContext,
    dir: &Resolved,
    opts: &WalkOptions,
    root_path: &Path,
    mut visitor: V,
) -> Result<Vec<V>, ToolError> {
    for entry in builder(ctx, &dir.host, opts).build() {
        ctx.cancel.check()?;
        let Some(found) = entry.ok().and_then(|e| found_of(&e, root_path, &dir.host)) else {
            continue;
        };
        if !visitor.visit(&found) {
            break;
        }
    }
    Ok(vec![visitor])
}

/// The configured `WalkBuilder` for `host_dir`.
fn builder(ctx: &ToolContext, host_dir: &Path, opts: &WalkOptions) -> WalkBuilder {
    let mut b = WalkBuilder::new(host_dir);
    b.hidden(!opts.include_hidden)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(false)
        .ignore(true)
        .parents(true)
        .require_git(false)
        .follow_links(false)
        .max_depth(opts.max_depth);
    // Only the protected paths below the walked directory can be met (one that holds
    // it was refused when the directory was opened): most walks check none per entry.
    let protected: Vec<PathBuf> = (ctx.resolver.protected.iter())
        .filter(|p| p.starts_with(host_dir))
        .cloned()
        .collect();
    b.filter_entry(move |e| {
        e.file_name() != ".git" && !protected.iter().any(|p| e.path().starts_with(p))
    });
    b
}

/// A [`Found`] for a walk entry (None for the walked directory itself).
fn found_of(e: &DirEntry, root_path: &Path, base: &Path) -> Option<Found> {
    if e.depth() == 0 {
        return None;
    }
    let kind = match e.file_type() {
        Some(t) if t.is_dir() => Kind::Dir,
        Some(t) if t.is_file() => Kind::File,
        _ => Kind::Other,
    };
    Some(Found {
        rel: below(e.path(), root_path)?.to_path_buf(),
        under: below(e.path(), base)?.to_path_buf(),
        kind,
    })
}

/// `path` relative to `dir`, when `dir` is a prefix of it: [`Path::strip_prefix`] by
/// bytes first (walk entries are `dir` joined with names, so their bytes start with
/// `dir`'s; comparing components per entry cost more than the rest of the entry).
fn below<'a>(path: &'a Path, dir: &Path) -> Option<&'a Path> {
    let (p, d) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    let rest = p.strip_prefix(d).and_then(|rest| match rest {
        [] => Some(rest),
        [b'/', tail @ ..] if !d.ends_with(b"/") => Some(tail),
        _ if d.ends_with(b"/") => Some(rest),
        _ => None,
    });
    // Only names (no empty or `.` component, no trailing `/`) read the same both ways.
    let plain =
        |r: &[u8]| r.is_empty() || r.split(|b| *b == b'/').all(|c| !c.is_empty() && c != b".");
    match rest {
        Some(rest) if plain(rest) => Some(Path::new(OsStr::from_bytes(rest))),
        _ => path.strip_prefix(dir).ok(),
    }
}

/// Parallel walks running in this worker process right now.
static WALKS: AtomicUsize = AtomicUsize::new(0);

/// A walk's share of the walker threads: `min(ncpu, 4)` divided among the walks
/// running at once in this process (at least one each). Under many concurrent greps
/// each walk gets one thread, so a worker never runs more CPU-bound threads than
/// walks, and the machine keeps room for the supervisor.
struct WalkShare {
    threads: usize,
}

impl WalkShare {
    fn enter() -> Self {
        let running = WALKS.fetch_add(1, Ordering::AcqRel) + 1;
        let budget = std::thread::available_parallelism().map_or(2, |n| n.get().min(4));
        WalkShare {
            threads: share_of(budget, running),
        }
    }

    fn threads(&self) -> usize {
        self.threads
    }
}

/// Walker threads of one walk among `running`: `budget` shared, at least one.
fn share_of(budget: usize, running: usize) -> usize {
    (budget / running.max(1)).max(1)
}

impl Drop for WalkShare {
    fn drop(&mut self) {
        WALKS.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Hands a thread's visitor back when the walk drops the thread's closure.
struct Slot<'a, V> {
    visitor: Option<V>,
    done: &'a Mutex<Vec<V>>,
}

impl<V> Drop for Slot<'_, V> {
    fn drop(&mut self) {
        if let (Some(v), Ok(mut done)) = (self.visitor.take(), self.done.lock()) {
            done.push(v);
        }
    }
}

/// A path for output: `/`-separated, lossy for non-UTF-8 names.
pub fn lossy(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::super::testutil::ws;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn below_is_strip_prefix() {
        use std::path::Path;
        for (path, dir) in [
            ("/ws/a/b.rs", "/ws"),
            ("/ws/a/b.rs", "/ws/"),
            ("/ws/a/b.rs", "/ws/a"),
            ("/ws", "/ws"),
            ("/wsx/a", "/ws"),
            ("/ws//a", "/ws"),
            ("/ws/./a", "/ws"),
            ("/a", "/"),
            ("/", "/"),
            ("/ws/a", "/other"),
            ("/ws/a/", "/ws"),
            ("/ws/.", "/ws"),
            ("/ws/..", "/ws"),
        ] {
            let (p, d) = (Path::new(path), Path::new(dir));
            assert_eq!(
                super::below(p, d),
                p.strip_prefix(d).ok(),
                "{path} below {dir}"
            );
        }
    }

    #[test]
    fn walks_share_the_thread_budget() {
        assert_eq!(super::share_of(2, 1), 2);
        assert_eq!(super::share_of(2, 2), 1);
        assert_eq!(super::share_of(4, 2), 2);
        assert_eq!(super::share_of(4, 3), 1);
        assert_eq!(super::share_of(2, 16), 1);
        assert_eq!(super::share_of(1, 0), 1);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(32))]

        /// Property 24: files matched by `.gitignore` (no git repository around) are absent
        /// from `glob`, `grep` and recursive `ls`; the others are present.
        #[test]
        fn gitignore_is_respected(names in proptest::collection::btree_set("[a-c]{1,2}/[a-c]{1,2}\\.(log|rs)", 1..10),
                                  rule in prop_oneof!["\\*\\.log", "a/", "b\\*", "/c"]) {
            let w = ws();
            w.write(".gitignore", format!("{rule}\n"));
            let clash = |n: &String| names.iter().any(|m| m.starts_with(&format!("{n}/")));
            for n in names.iter().filter(|n| !clash(n)) {
                w.write(n, "needle\n");
            }
            let ignored = |n: &str| {
                let (dir, file) = n.split_once('/').unwrap();
                match rule.as_str() {
                    "*.log" => file.ends_with(".log"),
                    "a/" => dir == "a",
                    "b*" => dir.starts_with('b') || file.starts_with('b'),
                    _ => dir == "c",
                }
            };
            let want: Vec<String> = names.iter().filter(|n| !ignored(n)).cloned().collect();
            let glob = w.run("glob", json!({"pattern": "**"}));
            prop_assert_eq!(glob.content.lines().collect::<Vec<_>>(), want.iter().map(String::as_str).collect::<Vec<_>>());
            let grep = w.run("grep", json!({"pattern": "needle"}));
            let want_grep: Vec<String> = want.iter().map(|n| format!("{n}:1: needle")).collect();
            prop_assert_eq!(grep.content.lines().map(str::to_owned).collect::<Vec<_>>(), want_grep);
            let ls = w.run("ls", json!({"path": ".", "recursive": true}));
            for n in &names {
                prop_assert_eq!(ls.content.lines().any(|l| l == n), !ignored(n), "{}", n);
            }
        }
    }
}
