use super::*;
use std::os::unix::ffi::OsStrExt;
use toolvisor_os::staged::Fingerprint;

struct Case {
    _t: tempfile::TempDir,
    root: PathBuf,
    dir: PathBuf,
}

fn case() -> Case {
    let t = tempfile::tempdir().unwrap();
    let (root, dir) = (t.path().join("ws"), t.path().join("staged/id"));
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(staged::upper(&dir, 0)).unwrap();
    Case { _t: t, root, dir }
}

fn held(c: &Case, rel: &str, kind: ChangeKind) -> Held {
    Held {
        root: 0,
        rel: rel.as_bytes().to_vec(),
        path: rel.to_owned(),
        kind,
        before: staged::fingerprint(&c.root.join(rel)).unwrap(),
    }
}

fn upper(c: &Case, rel: &str) -> PathBuf {
    let p = staged::upper(&c.dir, 0).join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    p
}

#[test]
fn every_change_is_applied_with_modes_and_links() {
    let c = case();
    std::fs::write(c.root.join("old"), "a\n").unwrap();
    std::fs::write(c.root.join("gone"), "g\n").unwrap();
    std::fs::write(upper(&c, "old"), "b\n").unwrap();
    std::fs::write(upper(&c, "sub/new"), "x\n").unwrap();
    std::fs::set_permissions(upper(&c, "sub/new"), std::fs::Permissions::from_mode(0o750)).unwrap();
    std::os::unix::fs::symlink("old", upper(&c, "link")).unwrap();
    let m = Manifest {
        id: "id".into(),
        changes: vec![
            held(&c, "gone", ChangeKind::Deleted),
            held(&c, "link", ChangeKind::Created),
            held(&c, "old", ChangeKind::Modified),
            held(&c, "sub/new", ChangeKind::Created),
        ],
    };
    let done = apply_staged(&m, &c.dir, std::slice::from_ref(&c.root)).unwrap();
    assert_eq!(done.len(), 4);
    assert!(!c.root.join("gone").exists());
    assert_eq!(std::fs::read_to_string(c.root.join("old")).unwrap(), "b\n");
    assert_eq!(
        std::fs::read_to_string(c.root.join("sub/new")).unwrap(),
        "x\n"
    );
    let mode = std::fs::metadata(c.root.join("sub/new"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o7777, 0o750);
    assert_eq!(
        std::fs::read_link(c.root.join("link")).unwrap(),
        Path::new("old")
    );
    let left: Vec<_> = std::fs::read_dir(&c.root)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().as_bytes().starts_with(b".toolvisor-staged-"))
        .collect();
    assert!(left.is_empty(), "no temporaries left");
}

#[test]
fn one_stale_path_applies_nothing() {
    let c = case();
    std::fs::write(c.root.join("a"), "1\n").unwrap();
    std::fs::write(c.root.join("b"), "1\n").unwrap();
    std::fs::write(upper(&c, "a"), "2\n").unwrap();
    std::fs::write(upper(&c, "b"), "2\n").unwrap();
    let m = Manifest {
        id: "id".into(),
        changes: vec![
            held(&c, "a", ChangeKind::Modified),
            held(&c, "b", ChangeKind::Modified),
        ],
    };
    std::fs::write(c.root.join("b"), "meanwhile\n").unwrap();
    let e = apply_staged(&m, &c.dir, std::slice::from_ref(&c.root)).unwrap_err();
    assert!(
        matches!(&e, ApplyError::Stale { path } if path == "b"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(c.root.join("a")).unwrap(), "1\n");
}

#[test]
fn a_failure_part_way_puts_everything_back() {
    let c = case();
    std::fs::write(c.root.join("a"), "1\n").unwrap();
    std::fs::write(c.root.join("gone"), "g\n").unwrap();
    std::fs::write(upper(&c, "a"), "2\n").unwrap();
    std::fs::write(upper(&c, "b"), "new\n").unwrap();
    std::fs::write(upper(&c, "x/f"), "f\n").unwrap();
    let m = Manifest {
        id: "id".into(),
        changes: vec![
            held(&c, "a", ChangeKind::Modified),
            held(&c, "b", ChangeKind::Created),
            held(&c, "gone", ChangeKind::Deleted),
            held(&c, "x/f", ChangeKind::Created),
        ],
    };
    // `x` appears as a file: `x/f` is still missing (not stale), but its parent
    // cannot be made, after `gone`, `a` and `b` were done.
    std::fs::write(c.root.join("x"), "in the way\n").unwrap();
    let e = apply_staged(&m, &c.dir, std::slice::from_ref(&c.root)).unwrap_err();
    assert!(
        matches!(&e, ApplyError::Io { path, .. } if path == "x/f"),
        "{e}"
    );
    assert_eq!(std::fs::read_to_string(c.root.join("a")).unwrap(), "1\n");
    assert_eq!(std::fs::read_to_string(c.root.join("gone")).unwrap(), "g\n");
    assert!(!c.root.join("b").exists());
    let mut names: Vec<_> = std::fs::read_dir(&c.root)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a", "gone", "x"], "nothing left behind");
}

#[test]
fn a_parent_turned_symlink_is_stale() {
    let c = case();
    std::fs::write(upper(&c, "d/f"), "x").unwrap();
    let m = Manifest {
        id: "id".into(),
        changes: vec![held(&c, "d/f", ChangeKind::Created)],
    };
    let elsewhere = c._t.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, c.root.join("d")).unwrap();
    let e = apply_staged(&m, &c.dir, std::slice::from_ref(&c.root)).unwrap_err();
    assert!(matches!(e, ApplyError::Stale { .. }), "{e}");
    assert!(!elsewhere.join("f").exists());
}

#[test]
fn paths_that_leave_the_root_are_refused() {
    let c = case();
    for rel in ["../x", "/etc/passwd", ""] {
        let h = Held {
            root: 0,
            rel: rel.as_bytes().to_vec(),
            path: rel.into(),
            kind: ChangeKind::Created,
            before: Fingerprint::Missing,
        };
        let m = Manifest {
            id: "id".into(),
            changes: vec![h],
        };
        let e = apply_staged(&m, &c.dir, std::slice::from_ref(&c.root)).unwrap_err();
        assert!(matches!(e, ApplyError::Outside { .. }), "{rel}: {e}");
    }
}
