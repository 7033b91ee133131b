//! Reading a log back: [`scan`] walks one segment's bytes and checks every line and
//! every link; [`verify_dir`] chains segments and `audit.head`. Recovery (at open) and
//! `toolvisor audit verify` share this code so they can never disagree on what
//! "damaged" means.

use std::fs;
use std::path::{Path, PathBuf};

use super::chain::{self, GENESIS, LineFault};
use super::segments::{self, Head};

/// The last good record before a point in the chain: what the next record must
/// follow (`seq + 1`, `prev == hash`). An empty `hash` means "unknown" (after a line
/// too damaged to read), and the next `prev` is taken on trust.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Link {
    /// Its `seq`.
    pub seq: u64,
    /// Its `hash` (empty: unknown).
    pub hash: String,
}

/// One good record, as much as recovery and `tail` need.
#[derive(Clone, Debug)]
pub struct Entry {
    /// Its place in the chain.
    pub seq: u64,
    /// Its hash (the next record's `prev`).
    pub hash: String,
    /// Its `kind` (`requested`, `completed`, …).
    pub kind: String,
    /// When it was committed.
    pub ts: String,
    /// The call it is about, if any (recovery pairs `requested` with `completed` by it).
    pub call_id: Option<String>,
    /// The trace it belongs to, if any (`tail --trace`).
    pub trace_id: Option<String>,
    /// Byte offset just past this record's newline.
    pub end: u64,
}

/// A damaged record: `seq` is its position in the chain when known (the seq it
/// should have), else the seq it claims.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Fault {
    /// Where in the chain.
    pub seq: u64,
    /// Where in the file (the line's first byte).
    pub offset: u64,
    /// What is wrong with it.
    pub detail: String,
}

/// A torn tail: the bytes from `offset` to the end (a last line without its newline,
/// or a last line that is not JSON).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Torn {
    /// Where the torn part starts.
    pub offset: u64,
    /// How many bytes it has.
    pub len: u64,
}

/// The result of reading one segment.
#[derive(Clone, Debug, Default)]
pub struct Scan {
    /// The good records, in order.
    pub entries: Vec<Entry>,
    /// The damaged ones.
    pub faults: Vec<Fault>,
    /// A torn tail, if the segment ends in one.
    pub torn: Option<Torn>,
}

impl Scan {
    /// The last good record, or `before` when the segment has none.
    pub fn last_link(&self, before: Option<&Link>) -> Option<Link> {
        match self.entries.last() {
            Some(e) => Some(Link {
                seq: e.seq,
                hash: e.hash.clone(),
            }),
            None => before.cloned(),
        }
    }
}

/// Checks every line of `bytes`. `before` is the last record of the previous segment;
/// without it the first record must be seq 1 with `prev` = 64 zeros, or (older
/// segments removed) is taken as the start of the chain.
pub fn scan(bytes: &[u8], before: Option<&Link>) -> Scan {
    let (body_len, torn) = split_torn(bytes);
    let mut out = Scan {
        torn,
        ..Scan::default()
    };
    let mut expected = before.cloned();
    let mut offset = 0u64;
    for line in bytes[..body_len].split_inclusive(|&b| b == b'\n') {
        let end = offset + line.len() as u64;
        let text = &line[..line.len() - 1];
        match chain::check_line(text) {
            Ok(s) => {
                if let Some(detail) = link_fault(expected.as_ref(), s.seq, &s.prev) {
                    let seq = expected.as_ref().map_or(s.seq, |e| e.seq + 1);
                    out.faults.push(Fault {
                        seq,
                        offset,
                        detail,
                    });
                }
                expected = Some(Link {
                    seq: s.seq,
                    hash: s.hash.clone(),
                });
                out.entries.push(Entry {
                    seq: s.seq,
                    hash: s.hash,
                    kind: s.kind,
                    ts: s.ts,
                    call_id: s.call_id,
                    trace_id: s.trace_id,
                    end,
                });
            }
            Err(fault) => {
                let seq = expected
                    .as_ref()
                    .map_or_else(|| claimed(&fault), |e| e.seq + 1);
                out.faults.push(Fault {
                    seq,
                    offset,
                    detail: describe(&fault),
                });
                expected = Some(Link {
                    seq,
                    hash: String::new(),
                });
            }
        }
        offset = end;
    }
    out
}

/// Splits off a torn tail: bytes after the last newline, plus the last complete line
/// when it is not JSON (a crash can leave a block of zeros ending in a newline).
fn split_torn(bytes: &[u8]) -> (usize, Option<Torn>) {
    let body = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
    let mut start = body;
    if body > 0 {
        let last_start = bytes[..body - 1]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let last = &bytes[last_start..body - 1];
        if serde_json::from_slice::<serde_json::Value>(last).is_err() {
            start = last_start;
        }
    }
    let torn = (start < bytes.len()).then(|| Torn {
        offset: start as u64,
        len: (bytes.len() - start) as u64,
    });
    (start, torn)
}

fn link_fault(expected: Option<&Link>, seq: u64, prev: &str) -> Option<String> {
    match expected {
        Some(e) if seq != e.seq + 1 => Some(format!(
            "seq {seq} follows seq {} (records missing or reordered)",
            e.seq
        )),
        Some(e) if !e.hash.is_empty() && prev != e.hash => {
            Some(format!("prev does not match the hash of seq {}", e.seq))
        }
        None if seq == 1 && prev != GENESIS => Some("seq 1 must have prev = 64 zeros".into()),
        _ => None,
    }
}

fn claimed(f: &LineFault) -> u64 {
    match f {
        LineFault::NotJson | LineFault::Malformed(_, None) => 0,
        LineFault::Malformed(_, Some(s)) | LineFault::NotCanonical(s) | LineFault::BadHash(s) => *s,
    }
}

fn describe(f: &LineFault) -> String {
    match f {
        LineFault::NotJson => "line is not a JSON object".into(),
        LineFault::Malformed(field, _) => format!("field `{field}` missing or of the wrong type"),
        LineFault::NotCanonical(_) => "line is not in canonical form (bytes changed)".into(),
        LineFault::BadHash(_) => "hash does not match the record (record changed)".into(),
    }
}

/// A problem found by [`verify_dir`], in the file it was found in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// The segment.
    pub file: PathBuf,
    /// What is wrong, and where.
    pub fault: Fault,
}

/// Everything `verify` learnt.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Damage to the log itself: `verify` fails when there is any.
    pub problems: Vec<Problem>,
    /// What is worth knowing but is not damage (an unreadable `audit.head`).
    pub warnings: Vec<String>,
    /// Good records read.
    pub records: u64,
    /// Segment files read.
    pub segments: usize,
    /// The oldest `seq` still on disk.
    pub first_seq: Option<u64>,
    /// The newest.
    pub last_seq: Option<u64>,
}

impl Report {
    /// The first bad seq (smallest), if any.
    pub fn first_bad(&self) -> Option<u64> {
        self.problems.iter().map(|p| p.fault.seq).min()
    }
}

/// Verifies `files` as consecutive segments of one chain, in the order given; with
/// no files, every segment of `dir` and `audit.head` too. The head is read before the
/// segments so a live writer (which writes the head after the log) cannot make a
/// complete log look cut short.
pub fn verify_dir(dir: &Path, files: &[PathBuf]) -> Report {
    let mut report = Report::default();
    let head = if files.is_empty() {
        read_head_noting(dir, &mut report)
    } else {
        None
    };
    let list = if files.is_empty() {
        segments::all(dir).unwrap_or_else(|e| {
            report
                .warnings
                .push(format!("cannot list {}: {e}", dir.display()));
            Vec::new()
        })
    } else {
        files.to_vec()
    };
    report.segments = list.len();
    let mut link: Option<Link> = None;
    for (i, path) in list.iter().enumerate() {
        link = verify_one(path, i + 1 == list.len(), link, head.as_ref(), &mut report);
    }
    if let Some(h) = &head {
        check_head_reached(dir, h, link.as_ref(), &mut report);
    }
    report
}

fn read_head_noting(dir: &Path, report: &mut Report) -> Option<Head> {
    match segments::read_head(dir) {
        Ok(h) => h,
        Err(e) => {
            report.warnings.push(e.to_string());
            None
        }
    }
}

/// Verifies one segment after `link`; returns the new last link.
fn verify_one(
    path: &Path,
    is_last: bool,
    link: Option<Link>,
    head: Option<&Head>,
    report: &mut Report,
) -> Option<Link> {
    let bytes = match fs::read(path) {
        Ok(b) => b,
        Err(e) => {
            let seq = link.as_ref().map_or(1, |l| l.seq + 1);
            let detail = format!("cannot read: {e}");
            report.problems.push(Problem {
                file: path.into(),
                fault: Fault {
                    seq,
                    offset: 0,
                    detail,
                },
            });
            return link;
        }
    };
    let scan = scan(&bytes, link.as_ref());
    if let Some(t) = scan.torn {
        let seq = scan.last_link(link.as_ref()).map_or(1, |l| l.seq + 1);
        let what = format!(
            "torn tail: {} byte(s) at offset {} without a complete record",
            t.len, t.offset
        );
        if is_last {
            report.warnings.push(format!(
                "{}: {what} (a write in progress, or cut at the next start)",
                path.display()
            ));
        } else {
            let fault = Fault {
                seq,
                offset: t.offset,
                detail: what,
            };
            report.problems.push(Problem {
                file: path.into(),
                fault,
            });
        }
    }
    if report.first_seq.is_none() {
        if let Some(first) = scan.entries.first().filter(|e| e.seq > 1 && link.is_none()) {
            report.warnings.push(format!(
                "chain starts at seq {} (earlier segments not present)",
                first.seq
            ));
        }
        report.first_seq = scan.entries.first().map(|e| e.seq);
    }
    if let Some(h) = head {
        check_head_hash(path, h, &scan, report);
    }
    for fault in scan.faults.iter().cloned() {
        report.problems.push(Problem {
            file: path.into(),
            fault,
        });
    }
    report.records += scan.entries.len() as u64;
    let last = scan.last_link(link.as_ref());
    report.last_seq = last.as_ref().map(|l| l.seq);
    last
}

fn check_head_hash(path: &Path, head: &Head, scan: &Scan, report: &mut Report) {
    let Ok(i) = scan.entries.binary_search_by_key(&head.seq, |e| e.seq) else {
        return;
    };
    let e = &scan.entries[i];
    if e.hash != head.hash {
        let detail = "hash differs from the one audit.head recorded (record rewritten)".into();
        let fault = Fault {
            seq: e.seq,
            offset: 0,
            detail,
        };
        report.problems.push(Problem {
            file: path.into(),
            fault,
        });
    }
}

fn check_head_reached(dir: &Path, head: &Head, last: Option<&Link>, report: &mut Report) {
    let last_seq = last.map_or(0, |l| l.seq);
    if head.seq > last_seq {
        let detail = format!(
            "log ends at seq {last_seq} but audit.head says seq {}: cut short",
            head.seq
        );
        let fault = Fault {
            seq: last_seq + 1,
            offset: 0,
            detail,
        };
        report.problems.push(Problem {
            file: segments::active_path(dir),
            fault,
        });
    }
}

#[cfg(test)]
pub(crate) mod tests;
