use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::PermissionsExt;

use proptest::prelude::*;

use super::*;

struct Fixture {
    _dir: tempfile::TempDir,
    w: PathBuf,
    state: PathBuf,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let w = dir.path().join("w");
    let state = dir.path().join("state");
    std::fs::create_dir_all(&w).unwrap();
    Fixture {
        w: w.canonicalize().unwrap(),
        state,
        _dir: dir,
    }
}

impl Fixture {
    fn journal(&self, max: u64) -> Journal {
        let scope = Scope {
            roots: vec![self.w.clone()],
            skip: vec![],
        };
        Journal::open(&self.state, scope, max, crate::config::Fsync::Always).unwrap()
    }
}

fn info(call: &str) -> CallInfo {
    CallInfo {
        call: call.into(),
        session: call.split(':').next().unwrap().into(),
        trace: Some("t".into()),
        tool: "run_command".into(),
    }
}

/// Every path under `root`: its kind, mode and content (or link target).
fn fingerprint(root: &Path) -> BTreeMap<PathBuf, (String, u32, Vec<u8>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let m = std::fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(root).unwrap().to_path_buf();
            let mode = m.permissions().mode() & 0o7777;
            if m.file_type().is_symlink() {
                let t = std::fs::read_link(&p).unwrap();
                out.insert(rel, ("link".into(), 0, t.into_os_string().into_vec()));
            } else if m.is_dir() {
                out.insert(rel, ("dir".into(), mode, Vec::new()));
                stack.push(p);
            } else {
                out.insert(rel, ("file".into(), mode, std::fs::read(&p).unwrap()));
            }
        }
    }
    out
}

fn all(_: &str) -> bool {
    true
}

#[test]
fn a_command_that_wiped_a_tree_is_undone_whole() {
    let f = fixture();
    for i in 0..50 {
        let d = f.w.join(format!("src/m{}", i % 5));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(format!("f{i}.rs")), format!("// {i}\n")).unwrap();
    }
    std::fs::set_permissions(
        f.w.join("src/m1/f1.rs"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let start = fingerprint(&f.w);
    let j = f.journal(1 << 30);
    let id = j.begin(info("s1:c1"), None).unwrap();
    std::fs::remove_dir_all(f.w.join("src")).unwrap();
    std::fs::write(f.w.join("src"), "now a file").unwrap();
    assert_eq!(j.finish(id), Value::Bool(true));
    let r = j.undo("s1:u1", &Select::Last(1), &all, false).unwrap();
    assert!(r.undone.conflicts.is_empty(), "{:?}", r.undone.conflicts);
    assert_eq!(fingerprint(&f.w), start);
    // Undoing the undo does it again.
    let r = j
        .undo("s1:u2", &Select::Calls(vec!["s1:u1".into()]), &all, false)
        .unwrap();
    assert!(r.undone.conflicts.is_empty(), "{:?}", r.undone.conflicts);
    assert_eq!(std::fs::read(f.w.join("src")).unwrap(), b"now a file");
}

#[test]
fn a_path_changed_since_is_a_conflict_and_the_rest_is_undone() {
    let f = fixture();
    std::fs::write(f.w.join("a"), "a0").unwrap();
    std::fs::write(f.w.join("b"), "b0").unwrap();
    let j = f.journal(1 << 30);
    let id = j.begin(info("s1:c1"), None).unwrap();
    std::fs::write(f.w.join("a"), "a1").unwrap();
    std::fs::write(f.w.join("b"), "b1").unwrap();
    j.finish(id);
    std::fs::write(f.w.join("a"), "someone else").unwrap();
    let dry = j.undo("s1:u0", &Select::Last(1), &all, true).unwrap();
    assert_eq!(dry.undone.restored.len(), 1);
    assert_eq!(
        std::fs::read(f.w.join("b")).unwrap(),
        b"b1",
        "a dry run changes nothing"
    );
    let r = j.undo("s1:u1", &Select::Last(1), &all, false).unwrap();
    assert_eq!(r.undone.conflicts.len(), 1);
    assert_eq!(r.undone.conflicts[0].0, f.w.join("a"));
    assert_eq!(std::fs::read(f.w.join("a")).unwrap(), b"someone else");
    assert_eq!(std::fs::read(f.w.join("b")).unwrap(), b"b0");
}

#[test]
fn calls_of_other_sessions_are_refused_unless_allowed() {
    let f = fixture();
    let j = f.journal(1 << 30);
    let id = j.begin(info("s2:c1"), None).unwrap();
    std::fs::write(f.w.join("x"), "x").unwrap();
    j.finish(id);
    let mine = |s: &str| s == "s1";
    let r = j
        .undo("s1:u1", &Select::Calls(vec!["s2:c1".into()]), &mine, false)
        .unwrap();
    assert!(r.calls.is_empty());
    assert_eq!(r.undone.not_undoable.len(), 1);
    assert!(f.w.join("x").exists());
    let r = j.undo("s1:u2", &Select::Last(5), &mine, false).unwrap();
    assert!(r.calls.is_empty(), "last N counts only what may be undone");
}

#[test]
fn a_file_over_the_bound_is_reported_not_undoable() {
    let f = fixture();
    std::fs::write(f.w.join("big"), vec![7u8; 64 * 1024]).unwrap();
    let j = f.journal(16 * 1024);
    let id = j.begin(info("s1:c1"), None).unwrap();
    std::fs::write(f.w.join("big"), "small now").unwrap();
    let undo = j.finish(id);
    assert!(
        undo.as_str().is_some_and(|s| s.contains("max_bytes")),
        "{undo}"
    );
    let r = j.undo("s1:u1", &Select::Last(1), &all, false).unwrap();
    assert_eq!(r.undone.not_undoable.len(), 1);
    assert_eq!(std::fs::read(f.w.join("big")).unwrap(), b"small now");
}

#[test]
fn a_capture_cut_short_by_the_daemons_end_is_recorded_at_the_next_start() {
    let f = fixture();
    std::fs::write(f.w.join("a"), "before").unwrap();
    {
        let j = f.journal(1 << 30);
        j.begin(info("s1:c1"), None).unwrap();
        std::fs::write(f.w.join("a"), "after").unwrap();
        // The daemon dies: no finish.
    }
    let j = f.journal(1 << 30);
    let r = j
        .undo("s9:u1", &Select::Calls(vec!["s1:c1".into()]), &all, false)
        .unwrap();
    assert_eq!(r.undone.restored, [f.w.join("a")]);
    assert_eq!(std::fs::read(f.w.join("a")).unwrap(), b"before");
}

#[test]
fn an_undo_cut_short_is_finished_at_the_next_start() {
    let f = fixture();
    std::fs::write(f.w.join("a"), "before").unwrap();
    {
        let j = f.journal(1 << 30);
        let id = j.begin(info("s1:c1"), None).unwrap();
        std::fs::write(f.w.join("a"), "after").unwrap();
        std::fs::write(f.w.join("b"), "made").unwrap();
        j.finish(id);
        // The undo began, put back `a`, and the daemon died before `b`.
        lock(&j.inner)
            .append(Record::UndoBegin {
                by: "s1:u1".into(),
                calls: vec!["s1:c1".into()],
            })
            .unwrap();
        std::fs::write(f.w.join("a"), "before").unwrap();
    }
    let _j = f.journal(1 << 30);
    assert_eq!(std::fs::read(f.w.join("a")).unwrap(), b"before");
    assert!(!f.w.join("b").exists());
}

#[test]
fn concurrent_captures_keep_what_each_made() {
    let f = fixture();
    let j = f.journal(1 << 30);
    let long = j.begin(info("s1:job"), None).unwrap();
    std::fs::write(f.w.join("job-out"), "1").unwrap();
    let edit = j
        .begin(info("s2:e1"), Some(vec![f.w.join("edited")]))
        .unwrap();
    std::fs::write(f.w.join("edited"), "e").unwrap();
    j.finish(edit);
    j.finish(long);
    let r = j
        .undo("s2:u", &Select::Calls(vec!["s2:e1".into()]), &all, false)
        .unwrap();
    assert_eq!(r.undone.removed, [f.w.join("edited")]);
    assert!(f.w.join("job-out").exists(), "the job's file is the job's");
    let r = j
        .undo("s1:u", &Select::Calls(vec!["s1:job".into()]), &all, false)
        .unwrap();
    assert_eq!(r.undone.removed, [f.w.join("job-out")]);
}

/// One step a call may take.
#[derive(Clone, Debug)]
enum Op {
    Write(usize, Vec<u8>, u32),
    Remove(usize),
    Mkdir(usize),
    Link(usize, usize),
    Chmod(usize, u32),
}

fn names() -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = ["a", "b", "d", "d/x", "d/y", "d/e/f", "g"]
        .iter()
        .map(PathBuf::from)
        .collect();
    v.push(PathBuf::from("nl\nname"));
    v.push(PathBuf::from(OsString::from_vec(b"bad\xffname".to_vec())));
    v
}

fn op() -> impl Strategy<Value = Op> {
    let n = names().len();
    let mode = prop::sample::select(vec![0o644u32, 0o600, 0o755]);
    prop_oneof![
        (
            0..n,
            prop::collection::vec(any::<u8>(), 0..40),
            mode.clone()
        )
            .prop_map(|(i, c, m)| Op::Write(i, c, m)),
        (0..n).prop_map(Op::Remove),
        (0..n).prop_map(Op::Mkdir),
        (0..n, 0..n).prop_map(|(i, t)| Op::Link(i, t)),
        (0..n, mode).prop_map(|(i, m)| Op::Chmod(i, m)),
    ]
}

fn apply(w: &Path, op: &Op) {
    let names = names();
    let p = |i: usize| w.join(&names[i]);
    let clear = |p: &Path| {
        let _ = std::fs::remove_file(p).or_else(|_| std::fs::remove_dir_all(p));
    };
    match op {
        Op::Write(i, c, m) => {
            let p = p(*i);
            if let Some(parent) = p.parent()
                && (std::fs::create_dir_all(parent).is_err() || !parent.is_dir())
            {
                return;
            }
            clear(&p);
            if std::fs::write(&p, c).is_ok() {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*m));
            }
        }
        Op::Remove(i) => clear(&p(*i)),
        Op::Mkdir(i) => {
            let _ = std::fs::create_dir_all(p(*i));
        }
        Op::Link(i, t) => {
            let p = p(*i);
            clear(&p);
            let _ = std::os::unix::fs::symlink(&names[*t], &p);
        }
        Op::Chmod(i, m) => {
            let p = p(*i);
            if std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_file()) {
                let _ = std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*m));
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Any sequence of calls (commands over the whole workspace, edits over the paths
    /// they name), undone all together, gives back the tree byte for byte, modes
    /// included.
    #[test]
    fn undoing_every_call_restores_the_tree(
        start in prop::collection::vec(op(), 0..8),
        calls in prop::collection::vec((any::<bool>(), prop::collection::vec(op(), 1..5)), 1..6),
    ) {
        let f = fixture();
        for o in &start {
            apply(&f.w, o);
        }
        let before = fingerprint(&f.w);
        let j = f.journal(1 << 30);
        for (n, (whole, ops)) in calls.iter().enumerate() {
            let paths = if *whole {
                None
            } else {
                // An edit tool names its paths: only writes, each named.
                Some(ops.iter().map(|o| match o {
                    Op::Write(i, ..) | Op::Remove(i) | Op::Mkdir(i) | Op::Link(i, _) | Op::Chmod(i, _) => f.w.join(&names()[*i]),
                }).collect())
            };
            let edits_only = |o: &&Op| matches!(o, Op::Write(..) | Op::Chmod(..));
            let id = j.begin(info(&format!("s1:c{n}")), paths.clone()).unwrap();
            for o in ops.iter().filter(|o| paths.is_none() || edits_only(o)) {
                if paths.is_some() {
                    // An edit never goes through a directory it did not name.
                    if let Op::Write(i, ..) = o
                        && names()[*i].components().count() > 1
                    {
                        continue;
                    }
                    if let Op::Write(i, ..) = o
                        && f.w.join(&names()[*i]).is_dir()
                    {
                        continue;
                    }
                }
                apply(&f.w, o);
            }
            prop_assert_eq!(j.finish(id), Value::Bool(true));
        }
        let worked = fingerprint(&f.w);
        let r = j.undo("s1:u", &Select::Last(usize::MAX), &all, false).unwrap();
        prop_assert!(r.undone.conflicts.is_empty(), "{:?}", r.undone.conflicts);
        prop_assert_eq!(fingerprint(&f.w), before);
        // And undoing that undo brings the work back.
        let r = j.undo("s1:v", &Select::Calls(vec!["s1:u".into()]), &all, false).unwrap();
        prop_assert!(r.undone.conflicts.is_empty(), "{:?}", r.undone.conflicts);
        prop_assert_eq!(fingerprint(&f.w), worked);
    }
}

#[test]
fn an_undo_never_reaches_through_a_directory_swapped_for_a_symlink() {
    let f = fixture();
    let outside = f.w.parent().unwrap().join("home");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join(".bashrc"), "the person's").unwrap();
    let j = f.journal(1 << 30);
    // Call A copies a file of the person's into d/; a later call swaps d for a link to
    // the person's directory, and the person is asked to undo A only.
    let a = j.begin(info("s1:a"), None).unwrap();
    std::fs::create_dir(f.w.join("d")).unwrap();
    std::fs::write(f.w.join("d/.bashrc"), "the person's").unwrap();
    j.finish(a);
    let b = j.begin(info("s1:b"), None).unwrap();
    std::fs::remove_dir_all(f.w.join("d")).unwrap();
    std::os::unix::fs::symlink(&outside, f.w.join("d")).unwrap();
    j.finish(b);
    let r = j
        .undo("s1:u", &Select::Calls(vec!["s1:a".into()]), &all, false)
        .unwrap();
    assert!(!r.undone.conflicts.is_empty());
    assert_eq!(
        std::fs::read(outside.join(".bashrc")).unwrap(),
        b"the person's"
    );
}

#[test]
fn a_snapshot_never_reads_through_a_symlinked_directory() {
    let f = fixture();
    let outside = f.w.parent().unwrap().join("secrets");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("key"), "secret").unwrap();
    std::os::unix::fs::symlink(&outside, f.w.join("d")).unwrap();
    let scope = Scope {
        roots: vec![f.w.clone()],
        skip: vec![],
    };
    let store = Store::open(&f.state.join("blobs")).unwrap();
    let t = scope.take_paths(
        &[f.w.join("d/key")],
        &Tree::default(),
        &mut snapshot::KeepAll(&store),
    );
    assert!(t.0.is_empty(), "{t:?}");
}
