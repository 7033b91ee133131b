//! Recovery at open (docs/AUDIT.md "Recovery at start"): cut a torn tail, complete
//! interrupted calls, and set aside a segment whose chain is broken or that
//! `audit.head` shows was cut short.
//! Damage is recorded in the log itself (`recovered`) and returned to the caller;
//! a damaged file is renamed, never rewritten.

use std::fs::{self, File};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::chain::{GENESIS, sha256_hex};
use super::record;
use super::segments::{self, Head, HeadError};
use super::verify::{self, Entry, Link, Problem, Scan};
use super::writer::{Pending, Shared, Writer, file_name};
use super::{AuditError, io_err};
use crate::config::AuditConfig;

/// What recovery found and did; logged by the caller, and each item is also a record.
#[derive(Clone, Debug, Default)]
pub struct Recovery {
    /// Bytes cut from the active file's tail (0 when none).
    pub torn_bytes: u64,
    /// Where the cut bytes were saved.
    pub torn_saved_to: Option<PathBuf>,
    /// Calls that got a `completed` with status `interrupted`.
    pub interrupted: Vec<String>,
    /// Chain breaks, rewritten records and a cut-short log.
    pub problems: Vec<Problem>,
    /// The damaged active file, renamed to this rotated-segment name.
    pub set_aside: Option<PathBuf>,
    /// `audit.head` could not be read.
    pub head_unreadable: Option<HeadError>,
    /// The last seq after recovery's own records.
    pub last_seq: u64,
}

impl Recovery {
    /// Nothing needed repairing.
    pub fn is_clean(&self) -> bool {
        self.torn_bytes == 0 && self.interrupted.is_empty() && self.problems.is_empty()
    }
}

/// Opens the log in `dir`, repairs what can be repaired, and returns a writer whose
/// recovery records are already committed (or parked if the disk refuses them).
pub(crate) fn open(
    dir: &Path,
    cfg: &AuditConfig,
    shared: Arc<Shared>,
) -> Result<(Writer, Recovery), AuditError> {
    let mut rec = Recovery::default();
    let head = segments::read_head(dir).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "audit.head unreadable; cut-short check skipped");
        rec.head_unreadable = Some(e);
        None
    });
    let previous = previous_segment(dir)?;
    let active = segments::active_path(dir);
    let mut file = segments::open_active(dir).map_err(|e| io_err(&active, e))?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)
        .map_err(|e| io_err(&active, e))?;
    // Links across segments are verify's job: re-checking them here would set aside
    // the segment after every earlier quarantine, on every start.
    let scan = verify::scan(&bytes, None);
    let before = previous.as_ref().and_then(|p| p.last_link(None));
    rec.problems = problems_of(&active, &scan, head.as_ref(), before.as_ref());
    let mut pending = Vec::new();
    let (file, len, last) = if rec.problems.is_empty() {
        let len = cut_torn(dir, &file, &bytes, &scan, &mut rec, &mut pending)?;
        let last = scan.last_link(before.as_ref()).unwrap_or(Link {
            seq: 0,
            hash: GENESIS.into(),
        });
        (file, len, last)
    } else {
        drop(file);
        let (file, last) = set_aside(dir, &scan, head.as_ref(), &mut rec, &mut pending)?;
        (file, 0, last)
    };
    let mut entries: Vec<&Entry> = previous.iter().flat_map(|p| p.entries.iter()).collect();
    entries.extend(scan.entries.iter());
    for (call_id, ts) in open_calls(&entries) {
        pending.push(Pending::internal(
            "completed",
            record::interrupted(&call_id, &ts),
        ));
        rec.interrupted.push(call_id);
    }
    let mut writer = Writer::new(dir.to_owned(), cfg, shared.clone(), file, len, last);
    writer.commit(pending);
    rec.last_seq = shared.last_seq.load(std::sync::atomic::Ordering::SeqCst);
    Ok((writer, rec))
}

/// The newest rotated segment, scanned: its last record continues the chain and its
/// open calls may be completed in the active file.
fn previous_segment(dir: &Path) -> Result<Option<Scan>, AuditError> {
    let list = segments::rotated(dir).map_err(|e| io_err(dir, e))?;
    let Some((_, path)) = list.last() else {
        return Ok(None);
    };
    let bytes = fs::read(path).map_err(|e| io_err(path, e))?;
    Ok(Some(verify::scan(&bytes, None)))
}

/// Faults inside the file, a head that the file does not reach, or a head hash that
/// differs from the record it names.
fn problems_of(
    path: &Path,
    scan: &Scan,
    head: Option<&Head>,
    before: Option<&Link>,
) -> Vec<Problem> {
    let mut out: Vec<Problem> = scan
        .faults
        .iter()
        .map(|f| Problem {
            file: path.into(),
            fault: f.clone(),
        })
        .collect();
    let Some(h) = head else { return out };
    let last = scan.last_link(before).map_or(0, |l| l.seq);
    let fault = if h.seq > last {
        let detail = format!(
            "log ends at seq {last} but audit.head says seq {}: cut short",
            h.seq
        );
        Some(verify::Fault {
            seq: last + 1,
            offset: 0,
            detail,
        })
    } else {
        scan.entries
            .iter()
            .find(|e| e.seq == h.seq && e.hash != h.hash)
            .map(|e| verify::Fault {
                seq: e.seq,
                offset: 0,
                detail: "record differs from audit.head".into(),
            })
    };
    out.extend(fault.map(|fault| Problem {
        file: path.into(),
        fault,
    }));
    out
}

/// Cuts a torn tail (saving the bytes beside the log) and returns the good length.
fn cut_torn(
    dir: &Path,
    file: &File,
    bytes: &[u8],
    scan: &Scan,
    rec: &mut Recovery,
    pending: &mut Vec<Pending>,
) -> Result<u64, AuditError> {
    let Some(torn) = scan.torn else {
        return Ok(bytes.len() as u64);
    };
    let dropped = &bytes[torn.offset as usize..];
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis();
    let saved = dir.join(format!("audit.torn-{ms}.bin"));
    fs::write(&saved, dropped).map_err(|e| io_err(&saved, e))?;
    let active = segments::active_path(dir);
    file.set_len(torn.offset).map_err(|e| io_err(&active, e))?;
    file.sync_all().map_err(|e| io_err(&active, e))?;
    tracing::warn!(bytes = torn.len, saved = %saved.display(), "audit log: torn last line cut");
    let details = json!({
        "dropped_bytes": torn.len,
        "dropped_sha256": sha256_hex(dropped),
        "saved_to": file_name(&saved),
    });
    pending.push(Pending::internal(
        "recovered",
        record::recovered("torn_tail", details),
    ));
    rec.torn_bytes = torn.len;
    rec.torn_saved_to = Some(saved);
    Ok(torn.offset)
}

/// Renames the damaged active file to the next segment name and starts a new one.
/// The chain continues after the highest seq seen (in the file or in the head), so
/// no seq is ever reused.
fn set_aside(
    dir: &Path,
    scan: &Scan,
    head: Option<&Head>,
    rec: &mut Recovery,
    pending: &mut Vec<Pending>,
) -> Result<(File, Link), AuditError> {
    let broken = segments::roll(dir).map_err(|e| io_err(dir, e))?;
    let file = segments::open_active(dir).map_err(|e| io_err(dir, e))?;
    let first = rec.problems.iter().map(|p| p.fault.seq).min().unwrap_or(0);
    for p in &mut rec.problems {
        p.file.clone_from(&broken);
    }
    let reason = if rec
        .problems
        .iter()
        .any(|p| p.fault.detail.contains("cut short"))
    {
        "cut_short"
    } else {
        "chain_break"
    };
    tracing::error!(file = %broken.display(), first_bad_seq = first, reason, "audit log damaged; set aside, new segment started");
    let problems: Vec<Value> = rec
        .problems
        .iter()
        .take(20)
        .map(|p| json!({"seq": p.fault.seq, "detail": p.fault.detail}))
        .collect();
    let details =
        json!({"broken_file": file_name(&broken), "first_bad_seq": first, "problems": problems});
    pending.push(Pending::internal(
        "recovered",
        record::recovered(reason, details),
    ));
    rec.set_aside = Some(broken);
    Ok((file, continue_after(scan, head)))
}

fn continue_after(scan: &Scan, head: Option<&Head>) -> Link {
    let entry = scan.entries.last().map(|e| Link {
        seq: e.seq,
        hash: e.hash.clone(),
    });
    let head = head.map(|h| Link {
        seq: h.seq,
        hash: h.hash.clone(),
    });
    let best = match (entry, head) {
        (Some(e), Some(h)) => Some(if h.seq >= e.seq { h } else { e }),
        (e, h) => e.or(h),
    };
    let mut link = best.unwrap_or(Link {
        seq: 0,
        hash: GENESIS.into(),
    });
    let max_fault = scan.faults.iter().map(|f| f.seq).max().unwrap_or(0);
    link.seq = link.seq.max(max_fault);
    link
}

/// `requested` records without a `completed`, oldest first, with their `ts`.
/// Pairs by call id in order, so a call id reused by another session still pairs.
fn open_calls(entries: &[&Entry]) -> Vec<(String, String)> {
    let mut order: Vec<(u64, String, String)> = Vec::new();
    for e in entries {
        let Some(id) = &e.call_id else { continue };
        match e.kind.as_str() {
            "requested" => {
                order.push((e.seq, id.clone(), e.ts.clone()));
            }
            "completed" => {
                if let Some(i) = order.iter().position(|(_, c, _)| c == id) {
                    order.remove(i);
                }
            }
            _ => {}
        }
    }
    order.into_iter().map(|(_, id, ts)| (id, ts)).collect()
}
