//! The output module's tests: capture, artifacts, coalescing, the pump.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustix::fs::FlockOperation;
use toolvisor_protocol::worker::Limits;

use super::*;
use crate::OutputSink;
use toolvisor_protocol::worker::FromWorker;

fn limits(max: usize, head: usize, tail: usize) -> Limits {
    Limits {
        shell_max: max,
        shell_head: head,
        shell_tail: tail,
        ..Limits::default()
    }
}

#[test]
fn small_output_is_whole() {
    let mut c = Capture::new(&limits(100, 10, 20), Box::new(|| None));
    c.record(b"hello ");
    c.record(b"world\n");
    let (text, t) = c.finish(Path::new("/w"));
    assert_eq!(text, "hello world\n");
    assert!(t.is_none());
}

#[test]
fn large_output_keeps_head_tail_and_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let arts = Artifacts::new(dir.path(), &Limits::default());
    let a2 = Arc::clone(&arts);
    let mut c = Capture::new(
        &limits(100, 10, 20),
        Box::new(move || a2.create("call-1").ok()),
    );
    let mut all = Vec::new();
    for i in 0..50 {
        let line = format!("line {i}\n");
        all.extend_from_slice(line.as_bytes());
        c.record(line.as_bytes());
    }
    assert!(
        c.tail.len() <= 20 && c.full.is_empty(),
        "memory stays bounded"
    );
    let (text, t) = c.finish(dir.path());
    let t = t.unwrap();
    assert!(
        text.starts_with("line 0\nlin\n[Output truncated: "),
        "{text}"
    );
    assert!(text.ends_with("line 48\nline 49\n"), "{text}");
    assert_eq!(text.matches("[Output truncated").count(), 1);
    assert_eq!(t.full_output.as_deref(), Some("artifacts/call-1.log"));
    assert_eq!(
        full_output_name(&arts.dir.join("call-1.log"), Path::new("/elsewhere")),
        "artifacts:/call-1.log"
    );
    assert_eq!(
        std::fs::read(dir.path().join("artifacts/call-1.log")).unwrap(),
        all
    );
    let f = File::open(dir.path().join("artifacts/call-1.log")).unwrap();
    assert!(
        rustix::fs::flock(&f, FlockOperation::NonBlockingLockExclusive).is_ok(),
        "a finished artifact is no longer locked"
    );
}

#[test]
fn artifact_cap_and_directory_pruning() {
    let dir = tempfile::tempdir().unwrap();
    let l = Limits {
        artifacts_max_bytes: 10,
        artifacts_total_bytes: 25,
        ..Limits::default()
    };
    let arts = Artifacts::new(dir.path(), &l);
    for name in ["a", "b", "c"] {
        let mut f = arts.create(name).unwrap();
        f.write(b"0123456789abcdef");
        assert_eq!(f.written, 10);
        let t = std::time::SystemTime::now() - Duration::from_secs(100);
        let file = File::options().write(true).open(&f.path).unwrap();
        file.set_modified(t + Duration::from_secs(name.as_bytes()[0] as u64))
            .unwrap();
    }
    let held = arts.create("d").unwrap();
    let names: Vec<String> = std::fs::read_dir(&arts.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.contains(&"a.log".to_string()),
        "oldest removed: {names:?}"
    );
    assert!(names.contains(&"c.log".to_string()) && names.contains(&"d.log".into()));
    drop(held);
}

/// A file still being written (its writer holds the lock: here another `Artifacts`,
/// as another worker process would) is never pruned, even when it is the oldest:
/// a new file then gets only the room left; once its writer is gone, it is pruned.
#[test]
fn files_being_written_are_not_pruned_by_any_worker() {
    let dir = tempfile::tempdir().unwrap();
    let l = Limits {
        artifacts_max_bytes: 10,
        artifacts_total_bytes: 15,
        ..Limits::default()
    };
    let other_worker = Artifacts::new(dir.path(), &l);
    let mut writing = other_worker.create("old").unwrap();
    writing.write(b"0123456789");
    let this_worker = Artifacts::new(dir.path(), &l);
    let mut f = this_worker.create("new").unwrap();
    f.write(b"0123456789");
    assert!(writing.path.exists(), "a file being written was pruned");
    assert_eq!(f.written, 5, "only the room left under the total");
    drop(f);
    drop(writing);
    let mut g = this_worker.create("newer").unwrap();
    g.write(b"0123456789");
    assert_eq!(g.written, 10);
    assert!(
        !dir.path().join("artifacts/old.log").exists(),
        "no longer written: prunable"
    );
}

/// However many writers (of any worker process: threads with their own `Artifacts`
/// here) grow at once, the directory never holds more than its total, as seen under
/// its lock (which every reservation and prune takes; sizes only shrink outside it).
#[test]
fn the_total_holds_at_every_moment() {
    let dir = tempfile::tempdir().unwrap();
    let l = Limits {
        artifacts_max_bytes: 3 << 20,
        artifacts_total_bytes: 4 << 20,
        ..Limits::default()
    };
    let state = dir.path().to_path_buf();
    let arts = state.join("artifacts");
    std::fs::create_dir_all(&arts).unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (done, arts) = (Arc::clone(&done), arts.clone());
        std::thread::spawn(move || {
            let mut worst = 0u64;
            // One last sample after the writers are done, however the threads were
            // scheduled: what they left is in the directory then.
            loop {
                let last = done.load(std::sync::atomic::Ordering::SeqCst);
                let lock = File::open(&arts).unwrap();
                rustix::fs::flock(&lock, FlockOperation::LockShared).unwrap();
                let total: u64 = std::fs::read_dir(&arts)
                    .unwrap()
                    .flatten()
                    .filter_map(|e| e.metadata().ok())
                    .map(|m| m.len())
                    .sum();
                drop(lock);
                worst = worst.max(total);
                if last {
                    break;
                }
            }
            worst
        })
    };
    let writers: Vec<_> = (0..4)
        .map(|i| {
            let (state, l) = (state.clone(), l.clone());
            std::thread::spawn(move || {
                let arts = Artifacts::new(&state, &l);
                let chunk = vec![b'x'; 64 * 1024];
                for round in 0..3 {
                    let mut f = arts.create(&format!("w{i}-{round}")).unwrap();
                    for _ in 0..32 {
                        f.write(&chunk);
                    }
                }
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let worst = sampler.join().unwrap();
    assert!(worst <= 4 << 20, "the directory held {worst} bytes");
    assert!(worst >= 2 << 20, "the sampler saw little ({worst})");
}

#[test]
fn a_taken_name_gets_a_suffix_and_is_never_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let arts = Artifacts::new(dir.path(), &Limits::default());
    let mut paths = Vec::new();
    for i in 0..3 {
        let mut f = arts.create("c1").unwrap();
        f.write(format!("output {i}").as_bytes());
        paths.push(f.path.clone());
    }
    let names: Vec<_> = paths
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["c1.log", "c1-2.log", "c1-3.log"]);
    for (i, p) in paths.iter().enumerate() {
        assert_eq!(std::fs::read_to_string(p).unwrap(), format!("output {i}"));
    }
    // A name freed (pruned, removed) is the documented name again.
    std::fs::remove_file(&paths[0]).unwrap();
    assert_eq!(arts.create("c1").unwrap().path, paths[0]);
}

#[test]
fn a_planted_symlink_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let arts = Artifacts::new(dir.path(), &Limits::default());
    std::fs::create_dir_all(&arts.dir).unwrap();
    let victim = dir.path().join("audit.jsonl");
    std::fs::write(&victim, "keep").unwrap();
    std::os::unix::fs::symlink(&victim, arts.dir.join("c1.log")).unwrap();
    let mut f = arts.create("c1").unwrap();
    f.write(b"new");
    assert!(f.path.ends_with("c1-2.log"), "{}", f.path.display());
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep");
}

/// Several exec workers (separate processes, so separate `Artifacts`) creating the
/// same call id at once each get their own file.
#[test]
fn concurrent_creates_with_one_id_do_not_collide() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().to_path_buf();
    let barrier = Arc::new(std::sync::Barrier::new(8));
    let threads: Vec<_> = (0..8)
        .map(|i| {
            let (state, barrier) = (state.clone(), Arc::clone(&barrier));
            std::thread::spawn(move || {
                let arts = Artifacts::new(&state, &Limits::default());
                barrier.wait();
                let mut f = arts.create("cli-1").unwrap();
                f.write(format!("worker {i}").as_bytes());
                (i, f.path.clone())
            })
        })
        .collect();
    let got: Vec<(usize, PathBuf)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let distinct: std::collections::HashSet<&PathBuf> = got.iter().map(|g| &g.1).collect();
    assert_eq!(distinct.len(), 8, "{got:?}");
    for (i, p) in &got {
        assert_eq!(std::fs::read_to_string(p).unwrap(), format!("worker {i}"));
    }
}

#[test]
fn names_are_sanitized() {
    assert_eq!(sanitize_name("abc-1_2.x", 1), "abc-1_2.x");
    assert_eq!(sanitize_name("../etc/passwd", 1), "_etc_passwd");
    assert_eq!(sanitize_name("..", 7), "call-7");
    assert_eq!(sanitize_name("a b/ü", 1), "a_b__");
}

#[test]
fn incomplete_chars_are_held_back() {
    assert_eq!(complete_prefix(b"abc"), 3);
    let e = "é".as_bytes();
    assert_eq!(complete_prefix(&[b'a', e[0]]), 1);
    assert_eq!(complete_prefix(&[b'a', e[0], e[1]]), 3);
    let euro = "€".as_bytes();
    assert_eq!(complete_prefix(&euro[..2]), 0);
    assert_eq!(complete_prefix(&[0xFF]), 1, "invalid bytes are not held");
}

#[tokio::test]
async fn coalescer_frames_are_bounded_and_utf8_whole() {
    let (out, mut rx) = crate::context::Outgoing::pair(1024);
    let mut c = Coalescer::new(OutputSink { call: 1, out });
    let text = "é".repeat(20_000); // 40 000 bytes, fed in odd-sized pieces
    for piece in text.as_bytes().chunks(4097) {
        c.push(Stream::Stdout, piece).await;
    }
    c.push(Stream::Stderr, b"err").await;
    c.flush(true).await;
    drop(c);
    let mut out = String::new();
    let mut streams = Vec::new();
    while let Some(FromWorker::Output { data, stream, .. }) = rx.recv().await {
        assert!(data.len() <= CHUNK && !data.contains('\u{FFFD}'));
        streams.push(stream);
        out.push_str(&data);
    }
    assert_eq!(out, format!("{text}err"));
    assert_eq!(streams.last().map(String::as_str), Some("stderr"));
}
