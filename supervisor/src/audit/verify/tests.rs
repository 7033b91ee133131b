use super::*;
use crate::audit::chain::seal;
use serde_json::{Map, json};

/// A log of `n` records as bytes, with its hashes.
pub(crate) fn make_log(n: u64) -> (Vec<u8>, Vec<String>) {
    let mut out = Vec::new();
    let mut hashes = Vec::new();
    let mut prev = GENESIS.to_owned();
    for seq in 1..=n {
        let mut f = Map::new();
        f.insert("call_id".into(), json!(format!("c{seq}")));
        f.insert("n".into(), json!(seq * 3));
        prev = seal(
            seq,
            "2026-01-01T00:00:00.000Z",
            "requested",
            f,
            &prev,
            &mut out,
        );
        hashes.push(prev.clone());
    }
    (out, hashes)
}

fn line_offset(bytes: &[u8], line: usize) -> usize {
    bytes
        .split_inclusive(|&b| b == b'\n')
        .take(line)
        .map(<[u8]>::len)
        .sum()
}

#[test]
fn clean_log_scans_without_faults() {
    let (bytes, hashes) = make_log(5);
    let s = scan(&bytes, None);
    assert!(s.faults.is_empty() && s.torn.is_none());
    assert_eq!(s.entries.len(), 5);
    assert_eq!(s.entries[4].hash, hashes[4]);
    assert_eq!(s.entries[4].end, bytes.len() as u64);
}

#[test]
fn torn_tail_without_newline_or_not_json() {
    let (mut bytes, _) = make_log(3);
    let good = bytes.len() as u64;
    bytes.extend_from_slice(b"{\"seq\":4,\"ts\"");
    let s = scan(&bytes, None);
    assert_eq!(
        s.torn,
        Some(Torn {
            offset: good,
            len: 13
        })
    );
    assert!(s.faults.is_empty());
    let (mut bytes, _) = make_log(3);
    bytes.extend_from_slice(b"\0\0\0\0\n");
    let s = scan(&bytes, None);
    assert_eq!(
        s.torn,
        Some(Torn {
            offset: good,
            len: 5
        })
    );
    assert_eq!(s.entries.len(), 3);
}

#[test]
fn flipped_byte_in_the_middle_is_reported_at_its_seq() {
    let (mut bytes, _) = make_log(9);
    let at = line_offset(&bytes, 4) + 20; // inside seq 5
    bytes[at] ^= 0x01;
    let s = scan(&bytes, None);
    assert_eq!(s.faults.first().map(|f| f.seq), Some(5), "{:?}", s.faults);
}

#[test]
fn removed_record_is_reported() {
    let (bytes, _) = make_log(6);
    let (a, b) = (line_offset(&bytes, 2), line_offset(&bytes, 3));
    let cut: Vec<u8> = [&bytes[..a], &bytes[b..]].concat();
    let s = scan(&cut, None);
    assert_eq!(s.faults.len(), 1);
    assert_eq!(s.faults[0].seq, 3);
}

#[test]
fn every_bit_flip_is_detected_with_the_head() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, hashes) = make_log(4);
    segments::write_head(dir.path(), 4, &hashes[3]).unwrap();
    let path = segments::active_path(dir.path());
    fs::write(&path, &bytes).unwrap();
    assert!(verify_dir(dir.path(), &[]).problems.is_empty());
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut b = bytes.clone();
            b[i] ^= 1 << bit;
            fs::write(&path, &b).unwrap();
            let r = verify_dir(dir.path(), &[]);
            assert!(
                !r.problems.is_empty(),
                "flip of bit {bit} at byte {i} went unnoticed"
            );
        }
    }
}

#[test]
fn head_beyond_the_log_means_cut_short() {
    let dir = tempfile::tempdir().unwrap();
    let (bytes, hashes) = make_log(5);
    let three = line_offset(&bytes, 3);
    fs::write(segments::active_path(dir.path()), &bytes[..three]).unwrap();
    segments::write_head(dir.path(), 5, &hashes[4]).unwrap();
    let r = verify_dir(dir.path(), &[]);
    assert_eq!(r.first_bad(), Some(4), "{:?}", r.problems);
}
