//! The resolver against real directories: every form of path, every way out of a root
//! (symlinks, `..`, races that flip a symlink during the open), protected paths and
//! artifacts.

use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use toolvisor_protocol::ErrorType;
use toolvisor_protocol::worker::Roots;

use super::*;
use crate::ToolError;

/// A workspace with `ws/` (the root) and a sibling `outside/` holding a secret.
struct Fixture {
    _tmp: tempfile::TempDir,
    ws: PathBuf,
    outside: PathBuf,
}

fn fixture() -> Fixture {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().canonicalize().unwrap();
    let ws = base.join("ws");
    let outside = base.join("outside");
    std::fs::create_dir_all(ws.join("src")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(ws.join("src/a.rs"), "inside").unwrap();
    std::fs::write(outside.join("secret"), "SECRET").unwrap();
    Fixture {
        _tmp: tmp,
        ws,
        outside,
    }
}

fn resolver(f: &Fixture, protected: &[PathBuf]) -> Resolver {
    let roots = Roots {
        private: f.ws.clone(),
        shared: Some(f.outside.clone()),
        public: None,
    };
    Resolver::new(&roots, protected).unwrap()
}

fn read(r: &Resolver, path: &str) -> Result<String, ToolError> {
    let res = r.resolve(path)?;
    let mut s = String::new();
    r.open_read(&res)?.read_to_string(&mut s).unwrap();
    Ok(s)
}

fn kind<T: std::fmt::Debug>(r: Result<T, ToolError>) -> ErrorType {
    r.unwrap_err().kind
}

#[test]
fn resolves_relative_scoped_and_absolute_forms() {
    let f = fixture();
    let r = resolver(&f, &[]);
    let a = r.resolve("src/./x/../a.rs").unwrap();
    assert_eq!((a.root, a.rel.as_path()), (0, Path::new("src/a.rs")));
    assert_eq!(a.display, "src/a.rs");
    assert_eq!(a.host, f.ws.join("src/a.rs"));
    assert_eq!(r.resolve(".").unwrap().display, ".");
    assert_eq!(r.resolve("private:/src").unwrap().rel, Path::new("src"));
    let s = r.resolve("shared:/secret").unwrap();
    assert_eq!((s.root, s.display.as_str()), (1, "shared:/secret"));
    let abs = r.resolve(f.ws.join("src/a.rs").to_str().unwrap()).unwrap();
    assert_eq!((abs.root, abs.rel.as_path()), (0, Path::new("src/a.rs")));
}

#[test]
fn refuses_bad_forms() {
    let f = fixture();
    let r = resolver(&f, &[]);
    assert_eq!(kind(r.resolve("")), ErrorType::InvalidParams);
    assert_eq!(kind(r.resolve("a\0b")), ErrorType::InvalidParams);
    let e = r.resolve("public:/x").unwrap_err();
    assert_eq!(e.kind, ErrorType::InvalidParams);
    assert!(e.message.contains("public"), "{}", e.message);
    assert_eq!(
        kind(r.resolve("../outside/secret")),
        ErrorType::PathOutsideWorkspace
    );
    assert_eq!(
        kind(r.resolve("src/../../x")),
        ErrorType::PathOutsideWorkspace
    );
    assert_eq!(
        kind(r.resolve("shared:/../ws")),
        ErrorType::PathOutsideWorkspace
    );
    assert_eq!(
        kind(r.resolve("/etc/passwd")),
        ErrorType::PathOutsideWorkspace
    );
}

#[test]
fn opens_and_maps_errors() {
    let f = fixture();
    let r = resolver(&f, &[]);
    assert_eq!(read(&r, "src/a.rs").unwrap(), "inside");
    assert_eq!(read(&r, "shared:/secret").unwrap(), "SECRET");
    assert_eq!(kind(read(&r, "nope.txt")), ErrorType::FileNotFoundError);
    assert_eq!(kind(read(&r, "src/a.rs/x")), ErrorType::FileNotFoundError);
    assert_eq!(kind(read(&r, "src")), ErrorType::InvalidParams);
    assert_eq!(
        kind(r.open_dir(&r.resolve("src/a.rs").unwrap())),
        ErrorType::InvalidParams
    );
    assert!(r.open_dir(&r.resolve(".").unwrap()).is_ok());
}

fn symlink_cases(r: &Resolver, f: &Fixture) {
    symlink_cases_with(r, f, read);
}

/// Symlinks out of the root, opened with `read`: `PathOutsideWorkspace`.
fn symlink_cases_with(
    r: &Resolver,
    f: &Fixture,
    read: fn(&Resolver, &str) -> Result<String, ToolError>,
) {
    std::os::unix::fs::symlink(&f.outside, f.ws.join("out")).unwrap();
    std::os::unix::fs::symlink("../outside/secret", f.ws.join("rel")).unwrap();
    assert_eq!(kind(read(r, "out/secret")), ErrorType::PathOutsideWorkspace);
    assert_eq!(kind(read(r, "rel")), ErrorType::PathOutsideWorkspace);
    assert_eq!(
        kind(r.open_dir(&r.resolve("out").unwrap())),
        ErrorType::PathOutsideWorkspace
    );
}

#[test]
fn symlinks_out_of_the_root_are_refused() {
    let f = fixture();
    let r = resolver(&f, &[]);
    symlink_cases(&r, &f);
    // A relative symlink that stays inside works with openat2.
    std::os::unix::fs::symlink("src/a.rs", f.ws.join("ok")).unwrap();
    if r.has_openat2() {
        assert_eq!(read(&r, "ok").unwrap(), "inside");
    }
}

#[test]
fn fallback_walk_refuses_symlinks() {
    let f = fixture();
    let mut r = resolver(&f, &[]);
    r.openat2 = false;
    assert_eq!(read(&r, "src/a.rs").unwrap(), "inside");
    assert_eq!(kind(read(&r, "src/none")), ErrorType::FileNotFoundError);
    symlink_cases(&r, &f);
}

#[test]
fn protected_paths_are_refused_even_through_symlinks() {
    let f = fixture();
    let state = f.ws.join(".toolvisor");
    std::fs::create_dir(&state).unwrap();
    std::fs::write(state.join("audit.jsonl"), "x").unwrap();
    std::os::unix::fs::symlink(".toolvisor", f.ws.join("st")).unwrap();
    let r = resolver(&f, std::slice::from_ref(&state));
    assert_eq!(
        kind(read(&r, ".toolvisor/audit.jsonl")),
        ErrorType::PermissionError
    );
    assert_eq!(
        kind(r.open_dir(&r.resolve(".toolvisor").unwrap())),
        ErrorType::PermissionError
    );
    if r.has_openat2() {
        assert_eq!(kind(read(&r, "st/audit.jsonl")), ErrorType::PermissionError);
        let st = r.resolve("st/new.txt").unwrap();
        assert_eq!(kind(r.open_parent(&st, false)), ErrorType::PermissionError);
    }
}

/// `open_walked`, the open of the search tools for what a walk found, read to the end.
fn read_walked(r: &Resolver, path: &str) -> Result<String, ToolError> {
    let (mut file, len) = r.open_walked(&r.resolve(path)?)?;
    let mut s = String::new();
    file.read_to_string(&mut s).unwrap();
    assert_eq!(len, s.len() as u64, "the size is the file's");
    Ok(s)
}

#[test]
fn walked_opens_are_confined_and_refuse_protected_paths() {
    for openat2 in [true, false] {
        let f = fixture();
        let state = f.ws.join(".toolvisor");
        std::fs::create_dir(&state).unwrap();
        std::fs::write(state.join("audit.jsonl"), "x").unwrap();
        std::os::unix::fs::symlink(".toolvisor", f.ws.join("st")).unwrap();
        std::os::unix::fs::symlink("src/a.rs", f.ws.join("ok")).unwrap();
        let mut r = resolver(&f, std::slice::from_ref(&state));
        r.openat2 = openat2 && r.has_openat2();
        assert_eq!(read_walked(&r, "src/a.rs").unwrap(), "inside");
        assert_eq!(
            kind(read_walked(&r, "src")),
            ErrorType::InvalidParams,
            "a directory"
        );
        assert_eq!(
            kind(read_walked(&r, ".toolvisor/audit.jsonl")),
            ErrorType::PermissionError
        );
        // Through a symlink: the full open, which checks the real path (the fallback
        // refuses every symlink).
        let (through, inside) = (read_walked(&r, "st/audit.jsonl"), read_walked(&r, "ok"));
        if r.openat2 {
            assert_eq!(kind(through), ErrorType::PermissionError);
            assert_eq!(inside.unwrap(), "inside");
        } else {
            assert_eq!(kind(through), ErrorType::PathOutsideWorkspace);
            assert_eq!(kind(inside), ErrorType::PathOutsideWorkspace);
        }
        symlink_cases_with(&r, &f, read_walked);
    }
}

#[test]
fn race_symlink_flip_never_leaks_the_outside_to_walked_opens() {
    let f = fixture();
    let r = resolver(&f, &[]);
    race_with(&r, &f, 5000, read_walked);
}

fn read_artifact(r: &Resolver, path: &str) -> Result<String, ToolError> {
    let a = r
        .artifact(path)?
        .ok_or_else(|| ToolError::invalid("not an artifact"))?;
    let mut s = String::new();
    r.open_artifact(&a)?.read_to_string(&mut s).unwrap();
    Ok(s)
}

#[test]
fn artifacts_are_named_only_as_direct_children() {
    let f = fixture();
    let state = f.ws.join(".toolvisor");
    std::fs::create_dir_all(state.join("artifacts")).unwrap();
    let r = resolver(&f, std::slice::from_ref(&state)).with_artifacts(&state);
    let named = |p: &str| r.artifact(p).unwrap();
    let a = named(".toolvisor/artifacts/c1.log").unwrap();
    assert_eq!(
        (a.name.to_str(), a.display.as_str()),
        (Some("c1.log"), ".toolvisor/artifacts/c1.log")
    );
    let abs = state.join("artifacts/c1.log");
    assert_eq!(named(abs.to_str().unwrap()).unwrap().name, "c1.log");
    assert!(named("./.toolvisor/x/../artifacts/c1.log").is_some());
    let a = named("artifacts:/./c1.log").unwrap();
    assert_eq!(
        (a.name.to_str(), a.display.as_str()),
        (Some("c1.log"), "artifacts:/c1.log")
    );
    for not in [
        ".toolvisor/artifacts",
        ".toolvisor/audit.jsonl",
        ".toolvisor/artifacts/../audit.jsonl",
        ".toolvisor/artifacts/sub/x.log",
        "src/a.rs",
        "/etc/passwd",
    ] {
        assert_eq!(named(not), None, "{not}");
    }
    for (bad, want) in [
        ("artifacts:/", ErrorType::PermissionError),
        ("artifacts:/a/b.log", ErrorType::PermissionError),
        ("artifacts:/../audit.jsonl", ErrorType::PathOutsideWorkspace),
    ] {
        assert_eq!(kind(r.artifact(bad)), want, "{bad}");
    }
    let plain = resolver(&f, &[]);
    assert_eq!(plain.artifact(".toolvisor/artifacts/c1.log").unwrap(), None);
}

#[test]
fn artifacts_open_but_nothing_else_in_the_state_directory() {
    let f = fixture();
    let state = f.ws.join(".toolvisor");
    let arts = state.join("artifacts");
    std::fs::create_dir_all(&arts).unwrap();
    std::fs::write(arts.join("c1.log"), "full").unwrap();
    std::fs::write(state.join("audit.jsonl"), "AUDIT").unwrap();
    std::os::unix::fs::symlink("../audit.jsonl", arts.join("evil.log")).unwrap();
    std::fs::hard_link(state.join("audit.jsonl"), arts.join("hard.log")).unwrap();
    std::fs::create_dir(arts.join("d")).unwrap();
    let r = resolver(&f, std::slice::from_ref(&state)).with_artifacts(&state);
    assert_eq!(
        read_artifact(&r, ".toolvisor/artifacts/c1.log").unwrap(),
        "full"
    );
    assert_eq!(
        kind(read_artifact(&r, ".toolvisor/artifacts/evil.log")),
        ErrorType::PermissionError
    );
    // A hard link has the right place and name but another file's content.
    assert_eq!(
        kind(read_artifact(&r, ".toolvisor/artifacts/hard.log")),
        ErrorType::PermissionError
    );
    assert_eq!(
        kind(read_artifact(&r, ".toolvisor/artifacts/d")),
        ErrorType::InvalidParams
    );
    assert_eq!(
        kind(read_artifact(&r, ".toolvisor/artifacts/none.log")),
        ErrorType::FileNotFoundError
    );
    // `artifacts` swapped for a link to the state directory: the real path gives it away.
    std::fs::rename(&arts, state.join("old")).unwrap();
    std::os::unix::fs::symlink(".", &arts).unwrap();
    assert_eq!(
        kind(read_artifact(&r, ".toolvisor/artifacts/audit.jsonl")),
        ErrorType::PermissionError
    );
    // The ordinary path stays protected.
    assert_eq!(
        kind(read(&r, ".toolvisor/audit.jsonl")),
        ErrorType::PermissionError
    );
}

#[test]
fn artifacts_outside_every_root_are_read_by_absolute_path() {
    let f = fixture();
    let state = f.ws.parent().unwrap().join("state");
    std::fs::create_dir_all(state.join("artifacts")).unwrap();
    std::fs::write(state.join("artifacts/c1.log"), "full").unwrap();
    std::fs::write(state.join("audit.jsonl"), "AUDIT").unwrap();
    let r = resolver(&f, std::slice::from_ref(&state)).with_artifacts(&state);
    let abs = state.join("artifacts/c1.log");
    assert_eq!(read_artifact(&r, abs.to_str().unwrap()).unwrap(), "full");
    assert_eq!(read_artifact(&r, "artifacts:/c1.log").unwrap(), "full");
    let audit = state.join("audit.jsonl");
    assert_eq!(r.artifact(audit.to_str().unwrap()).unwrap(), None);
    assert_eq!(
        kind(r.resolve(audit.to_str().unwrap())),
        ErrorType::PathOutsideWorkspace
    );
}

#[test]
fn open_dir_create_makes_parents_beneath_the_root() {
    let f = fixture();
    let r = resolver(&f, &[]);
    let res = r.resolve("a/b/c/file.txt").unwrap();
    let (fd, name) = r.open_parent(&res, true).unwrap();
    assert_eq!(name, "file.txt");
    assert!(f.ws.join("a/b/c").is_dir());
    assert_eq!(real_path(&fd).unwrap(), f.ws.join("a/b/c"));
    assert_eq!(
        kind(r.open_parent(&r.resolve("src/a.rs/x/y").unwrap(), true)),
        ErrorType::InvalidParams
    );
    assert_eq!(
        kind(r.open_parent(&r.resolve(".").unwrap(), true)),
        ErrorType::InvalidParams
    );
    std::os::unix::fs::symlink(&f.outside, f.ws.join("out")).unwrap();
    let o = r.resolve("out/sub/f").unwrap();
    assert_eq!(
        kind(r.open_parent(&o, true)),
        ErrorType::PathOutsideWorkspace
    );
    assert!(!f.outside.join("sub").exists());
}

/// A thread flips `ws/d` between a real directory and a symlink to the outside
/// while this thread opens `d/f`: every open reads the inside file or is refused.
fn race(r: &Resolver, f: &Fixture, rounds: usize) {
    race_with(r, f, rounds, read);
}

/// [`race`] with another way to open and read.
fn race_with(
    r: &Resolver,
    f: &Fixture,
    rounds: usize,
    read: fn(&Resolver, &str) -> Result<String, ToolError>,
) {
    let d = f.ws.join("d");
    let real = f.ws.join("d_real");
    std::fs::create_dir(&real).unwrap();
    std::fs::write(real.join("f"), "inside").unwrap();
    std::fs::write(f.outside.join("f"), "SECRET").unwrap();
    let link = f.ws.join("d_link");
    std::os::unix::fs::symlink(&f.outside, &link).unwrap();
    std::fs::rename(&real, &d).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let flipper = {
        let (stop, d, real, link) = (stop.clone(), d.clone(), real.clone(), link.clone());
        std::thread::spawn(move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Swap the real dir out and the symlink in, then back.
                std::fs::rename(&d, &real).unwrap();
                std::fs::rename(&link, &d).unwrap();
                std::fs::rename(&d, &link).unwrap();
                std::fs::rename(&real, &d).unwrap();
                flips += 1;
            }
            flips
        })
    };
    let (mut inside, mut refused) = (0, 0);
    for _ in 0..rounds {
        match read(r, "d/f") {
            Ok(s) => {
                assert_eq!(s, "inside", "read the outside secret");
                inside += 1;
            }
            Err(e) if e.kind == ErrorType::PathOutsideWorkspace => refused += 1,
            Err(e) if e.kind == ErrorType::FileNotFoundError => {}
            Err(e) => panic!("unexpected error {e}"),
        }
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(
        flips > 0 && inside + refused > 0,
        "{flips} {inside} {refused}"
    );
}

#[test]
fn race_symlink_flip_never_leaks_the_outside() {
    let f = fixture();
    let r = resolver(&f, &[]);
    race(&r, &f, 5000);
}

#[test]
fn race_symlink_flip_never_leaks_the_outside_fallback() {
    let f = fixture();
    let mut r = resolver(&f, &[]);
    r.openat2 = false;
    race(&r, &f, 5000);
}
