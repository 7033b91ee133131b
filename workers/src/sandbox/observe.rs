//! What a mount plan saw of the host, so that a sandbox built ahead of its command (a
//! spare, see docs/SANDBOX.md) can be checked against the host as it is at claim time.
//!
//! [`plan::plan`](super::plan::plan) is a pure function of its inputs and of the
//! answers its [`View`] gave, asked in an order that depends only on earlier answers.
//! [`Recording`] keeps every answer; when [`Observations::changed`] finds each one
//! still the same, a plan made now would be the very same plan. Answers carry the
//! identity of what is there (device, inode, birth time, and a file's change time), not
//! only its kind: a protected path replaced on the host (renamed over, removed and made
//! again) loses the spare's mount on it, and only its identity tells.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::plan::{Kind, View};

/// What is at a path, and which object it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// Its kind (`Missing` when nothing is there; then the rest is zero).
    pub kind: Kind,
    /// Device (major, minor).
    pub dev: (u32, u32),
    /// Inode.
    pub ino: u64,
    /// Birth time (seconds, nanoseconds) where the file system keeps one.
    pub birth: Option<(i64, u32)>,
    /// Change time, for what is not a directory (a directory's changes with every
    /// entry made in it, which says nothing about the directory itself).
    pub changed: Option<(i64, u32)>,
}

impl Stamp {
    /// Only the kind is known (views that do not tell identities).
    pub fn of_kind(kind: Kind) -> Stamp {
        Stamp {
            kind,
            ..Stamp::default()
        }
    }

    /// `lstat` of `p` through `statx` (a final symlink is not followed).
    pub fn of_host(p: &Path) -> Stamp {
        use rustix::fs::{AtFlags, CWD, FileType, StatxFlags};
        let mask = StatxFlags::BASIC_STATS | StatxFlags::BTIME;
        let Ok(st) = rustix::fs::statx(CWD, p, AtFlags::SYMLINK_NOFOLLOW, mask) else {
            return Stamp::of_kind(Kind::Missing);
        };
        let kind = match FileType::from_raw_mode(u32::from(st.stx_mode)) {
            FileType::Directory => Kind::Dir,
            FileType::Symlink => Kind::Symlink,
            _ => Kind::File,
        };
        let time = |t: rustix::fs::StatxTimestamp| (t.tv_sec, t.tv_nsec);
        let has_birth = st.stx_mask & StatxFlags::BTIME.bits() != 0;
        Stamp {
            kind,
            dev: (st.stx_dev_major, st.stx_dev_minor),
            ino: st.stx_ino,
            birth: has_birth.then(|| time(st.stx_btime)),
            changed: (kind != Kind::Dir).then(|| time(st.stx_ctime)),
        }
    }
}

/// One answer a view gave.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Seen {
    /// `kind(path)` (with the identity behind it).
    Stamp(PathBuf, Stamp),
    /// `subdirs(path)`.
    Subdirs(PathBuf, Vec<PathBuf>),
    /// `entries(path)`.
    Entries(PathBuf, Vec<PathBuf>),
    /// `target(path)`.
    Target(PathBuf, Option<PathBuf>),
}

/// Every answer a plan was made from, in the order asked.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observations(pub Vec<Seen>);

impl Observations {
    /// The first answer `view` now gives differently (None: the plan would be the
    /// same). Cheap: one `statx` per path, one directory read per `subdirs`.
    pub fn changed(&self, view: &dyn View) -> Option<&Seen> {
        self.0.iter().find(|s| match s {
            Seen::Stamp(p, was) => view.stamp(p) != *was,
            Seen::Subdirs(p, was) => view.subdirs(p) != *was,
            Seen::Entries(p, was) => view.entries(p) != *was,
            Seen::Target(p, was) => view.target(p) != *was,
        })
    }
}

/// A [`View`] that answers like `inner` and keeps every answer.
pub struct Recording<'v> {
    inner: &'v dyn View,
    seen: RefCell<Vec<Seen>>,
}

impl<'v> Recording<'v> {
    /// Record what `inner` answers.
    pub fn new(inner: &'v dyn View) -> Self {
        Recording {
            inner,
            seen: RefCell::new(Vec::new()),
        }
    }

    /// The answers given so far.
    pub fn into_observations(self) -> Observations {
        Observations(self.seen.into_inner())
    }
}

impl View for Recording<'_> {
    fn kind(&self, p: &Path) -> Kind {
        self.stamp(p).kind
    }

    fn stamp(&self, p: &Path) -> Stamp {
        let s = self.inner.stamp(p);
        self.seen.borrow_mut().push(Seen::Stamp(p.to_path_buf(), s));
        s
    }

    fn subdirs(&self, p: &Path) -> Vec<PathBuf> {
        let d = self.inner.subdirs(p);
        self.seen
            .borrow_mut()
            .push(Seen::Subdirs(p.to_path_buf(), d.clone()));
        d
    }

    fn entries(&self, p: &Path) -> Vec<PathBuf> {
        let e = self.inner.entries(p);
        self.seen
            .borrow_mut()
            .push(Seen::Entries(p.to_path_buf(), e.clone()));
        e
    }

    /// A read is recorded as the file's identity and change time: any write to it
    /// moves its change time, so an unchanged stamp means the same text.
    fn read(&self, p: &Path, max: u64) -> Option<String> {
        self.stamp(p);
        self.inner.read(p, max)
    }

    fn target(&self, p: &Path) -> Option<PathBuf> {
        let t = self.inner.target(p);
        self.seen
            .borrow_mut()
            .push(Seen::Target(p.to_path_buf(), t.clone()));
        t
    }
}

#[cfg(test)]
mod tests {
    use super::super::plan::{HostView, Inputs, plan};
    use super::*;

    fn ws() -> (tempfile::TempDir, PathBuf) {
        // Not under /tmp: the plan treats paths there specially.
        let base = super::super::test_base();
        let d = tempfile::tempdir_in(base).unwrap();
        let r = d.path().canonicalize().unwrap();
        (d, r)
    }

    fn observe(root: &Path) -> Observations {
        let roots = [root.to_path_buf()];
        let protected = super::super::protect::names(&[PathBuf::from("deep/er/secret")]);
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
        let rec = Recording::new(&HostView);
        let steps = plan(&inputs, &rec);
        let obs = rec.into_observations();
        assert_eq!(steps, plan(&inputs, &HostView), "recording changes nothing");
        obs
    }

    #[test]
    fn every_answer_is_recorded_and_an_unchanged_host_passes() {
        let (_d, r) = ws();
        std::fs::create_dir_all(r.join(".git/modules/sub/hooks")).unwrap();
        std::fs::write(r.join(".git/modules/sub/config"), "x").unwrap();
        let obs = observe(&r);
        let has = |p: &Path| {
            obs.0
                .iter()
                .any(|s| matches!(s, Seen::Stamp(q, st) if q == p && st.ino != 0))
        };
        assert!(has(&r.join(".git")) && has(&r.join(".git/modules/sub/config")));
        assert!(obs.0.iter().any(|s| matches!(s, Seen::Subdirs(..))));
        assert_eq!(obs.changed(&HostView), None);
        // Writing inside the workspace (not a path the plan looked at) changes nothing.
        std::fs::write(r.join("notes.txt"), "x").unwrap();
        std::fs::create_dir(r.join("src")).unwrap();
        assert_eq!(obs.changed(&HostView), None);
    }

    #[test]
    fn a_git_made_after_the_plan_is_a_change() {
        let (_d, r) = ws();
        let obs = observe(&r);
        std::fs::create_dir_all(r.join(".git/hooks")).unwrap();
        assert_eq!(
            obs.changed(&HostView),
            Some(&Seen::Stamp(r.join(".git"), Stamp::of_kind(Kind::Missing)))
        );
    }

    #[test]
    fn a_protected_file_replaced_or_made_is_a_change() {
        let (_d, r) = ws();
        std::fs::write(r.join(".envrc"), "a").unwrap();
        let obs = observe(&r);
        // Replaced by rename: same kind, another inode.
        std::fs::write(r.join("x"), "b").unwrap();
        std::fs::rename(r.join("x"), r.join(".envrc")).unwrap();
        assert!(
            matches!(obs.changed(&HostView), Some(Seen::Stamp(p, _)) if *p == r.join(".envrc"))
        );
        // A protected name made after the plan.
        let obs = observe(&r);
        std::fs::create_dir_all(r.join("deep/er")).unwrap();
        std::fs::write(r.join("deep/er/secret"), "s").unwrap();
        assert!(obs.changed(&HostView).is_some());
    }

    #[test]
    fn a_pinned_directory_made_again_is_a_change() {
        let (_d, r) = ws();
        std::fs::create_dir_all(r.join("deep/er")).unwrap();
        std::fs::write(r.join("deep/er/secret"), "s").unwrap();
        let obs = observe(&r);
        std::fs::rename(r.join("deep"), r.join("deep2")).unwrap();
        std::fs::create_dir_all(r.join("deep/er")).unwrap();
        std::fs::rename(r.join("deep2/er/secret"), r.join("deep/er/secret")).unwrap();
        assert!(obs.changed(&HostView).is_some(), "{obs:?}");
    }

    /// A view from a table, to check the claim logic without a file system.
    struct Table(std::collections::HashMap<PathBuf, Stamp>);

    impl View for Table {
        fn kind(&self, p: &Path) -> Kind {
            self.stamp(p).kind
        }
        fn stamp(&self, p: &Path) -> Stamp {
            self.0
                .get(p)
                .copied()
                .unwrap_or(Stamp::of_kind(Kind::Missing))
        }
        fn subdirs(&self, p: &Path) -> Vec<PathBuf> {
            let mut v: Vec<PathBuf> = self
                .0
                .iter()
                .filter(|(q, s)| q.parent() == Some(p) && s.kind == Kind::Dir)
                .map(|(q, _)| q.clone())
                .collect();
            v.sort();
            v
        }
    }

    #[test]
    fn the_check_compares_identities_and_listings() {
        let dir = |ino| Stamp {
            kind: Kind::Dir,
            ino,
            ..Stamp::default()
        };
        let mut t = Table(
            [
                ("/w/.git".into(), dir(5)),
                ("/w/.git/modules".into(), dir(6)),
            ]
            .into_iter()
            .collect(),
        );
        let rec = Recording::new(&t);
        assert_eq!(rec.kind(Path::new("/w/.git")), Kind::Dir);
        assert!(rec.subdirs(Path::new("/w/.git/modules")).is_empty());
        assert_eq!(rec.kind(Path::new("/w/.envrc")), Kind::Missing);
        let obs = rec.into_observations();
        assert_eq!(obs.0.len(), 3);
        assert_eq!(obs.changed(&t), None);
        t.0.insert("/w/.git/modules/m".into(), dir(7));
        assert!(matches!(obs.changed(&t), Some(Seen::Subdirs(..))));
        t.0.remove(Path::new("/w/.git/modules/m"));
        t.0.insert("/w/.git".into(), dir(9));
        assert!(matches!(obs.changed(&t), Some(Seen::Stamp(p, _)) if p == Path::new("/w/.git")));
    }
}
