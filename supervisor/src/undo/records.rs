//! The journal file (`undo/journal.jsonl`): one JSON record per line, appended (and
//! flushed to disk when `[audit] fsync = "always"`) before the call's result is sent.
//! A torn last line (the daemon or the machine died writing it) is dropped when the
//! file is read back. Dropping the oldest records to stay within the bound rewrites
//! the file (to a temporary name, then renamed).

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::snapshot::Change;

/// What one call changed in the workspace.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallEntry {
    /// The call's audit id (`s3:c7`).
    pub call: String,
    /// Its session.
    pub session: String,
    /// Its trace, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// The tool.
    pub tool: String,
    /// When it began and ended (ms since the epoch).
    pub started_ms: u64,
    /// When its changes were recorded.
    pub ended_ms: u64,
    /// What it changed, in path order.
    pub changes: Vec<Change>,
    /// Why not all of it can be put back (`None`: all of it can).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_undoable: Option<String>,
    /// The daemon stopped while the call ran; its changes were recorded at the next
    /// start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// One line of the journal.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Record {
    /// A call's changes.
    Call(CallEntry),
    /// An undo is about to change these paths back (written first, so an undo cut
    /// short by a crash is finished at the next start).
    UndoBegin {
        /// The undo's own id (`s3:u1`, or `cli:…`).
        by: String,
        /// The calls being undone, newest first.
        calls: Vec<String>,
    },
    /// Those calls are undone (the undo's own changes are its `call` record).
    Undone {
        /// The undo's id.
        by: String,
        /// The calls.
        calls: Vec<String>,
    },
}

/// The journal file, open for appending.
pub struct RecordFile {
    path: PathBuf,
    file: File,
}

impl RecordFile {
    /// Open (or make) the journal at `path` and read every whole record in it; a torn
    /// tail is cut off.
    pub fn open(path: &Path) -> io::Result<(RecordFile, Vec<Record>)> {
        let mut records = Vec::new();
        let mut good_len = 0u64;
        if let Ok(f) = File::open(path) {
            let mut rd = io::BufReader::new(f);
            let mut line = Vec::new();
            loop {
                line.clear();
                let n = rd.read_until(b'\n', &mut line)?;
                if n == 0 || line.last() != Some(&b'\n') {
                    break;
                }
                match serde_json::from_slice::<Record>(&line) {
                    Ok(r) => records.push(r),
                    Err(_) => break,
                }
                good_len += n as u64;
            }
        }
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .read(true)
            .open(path)?;
        if file.metadata()?.len() != good_len {
            file.set_len(good_len)?;
        }
        Ok((
            RecordFile {
                path: path.to_path_buf(),
                file,
            },
            records,
        ))
    }

    /// Append `r`, and flush it to disk when `sync`.
    pub fn append(&mut self, r: &Record, sync: bool) -> io::Result<()> {
        let mut line = serde_json::to_vec(r).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
        if sync {
            self.file.sync_data()?;
        }
        Ok(())
    }

    /// Replace the whole file with `records` (after the oldest were dropped). Always
    /// flushed before the rename, whatever `fsync` says: a rename of unflushed data
    /// could lose every record at a power cut, not only the last ones.
    pub fn rewrite(&mut self, records: &[Record]) -> io::Result<()> {
        let tmp = self.path.with_extension("jsonl.tmp");
        {
            let mut w = io::BufWriter::new(File::create(&tmp)?);
            for r in records {
                serde_json::to_writer(&mut w, r).map_err(io::Error::other)?;
                w.write_all(b"\n")?;
            }
            w.flush()?;
            w.get_ref().sync_data()?;
        }
        std::fs::rename(&tmp, &self.path)?;
        self.file = OpenOptions::new()
            .append(true)
            .read(true)
            .open(&self.path)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(call: &str) -> Record {
        Record::Call(CallEntry {
            call: call.into(),
            session: "s1".into(),
            trace: None,
            tool: "run_command".into(),
            started_ms: 1,
            ended_ms: 2,
            changes: Vec::new(),
            not_undoable: None,
            interrupted: false,
        })
    }

    #[test]
    fn records_come_back_and_a_torn_tail_is_cut() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("journal.jsonl");
        let (mut f, none) = RecordFile::open(&p).unwrap();
        assert!(none.is_empty());
        f.append(&entry("s1:a"), true).unwrap();
        f.append(&entry("s1:b"), false).unwrap();
        drop(f);
        let mut bytes = std::fs::read(&p).unwrap();
        bytes.extend_from_slice(b"{\"type\":\"call\",\"cal");
        std::fs::write(&p, &bytes).unwrap();
        let (mut f, back) = RecordFile::open(&p).unwrap();
        assert_eq!(back, [entry("s1:a"), entry("s1:b")]);
        f.append(&entry("s1:c"), true).unwrap();
        f.rewrite(&[entry("s1:c")]).unwrap();
        f.append(&entry("s1:d"), false).unwrap();
        drop(f);
        assert_eq!(
            RecordFile::open(&p).unwrap().1,
            [entry("s1:c"), entry("s1:d")]
        );
    }
}
