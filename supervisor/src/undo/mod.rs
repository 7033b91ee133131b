//! The undo journal (docs/UNDO.md): what every call changed in the workspace, kept so
//! it can be put back.
//!
//! A call that may change the workspace is captured: [`Journal::begin`] takes a
//! snapshot of what it may touch (the whole journaled workspace for a command or an MCP
//! tool, the named paths for an edit tool), keeping the content of every file it has
//! not kept yet; [`Journal::finish`] takes it again when the call ends (a background
//! job's when the job ends) and records the difference. [`Journal::undo`] puts paths
//! back ([`restore`]). Pieces: [`node`] (one path's state), [`snapshot`] (snapshots and
//! diffing), [`walk`] (listing and `lstat`ing the tree), [`store`] (contents by hash),
//! [`records`] (the journal file).

mod changes;
pub mod node;
pub mod records;
pub mod restore;
pub mod safe;
pub mod snapshot;
pub mod store;
mod upkeep;
mod walk;

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::config::Fsync;

use node::{Node, same_state};
use records::{CallEntry, Record, RecordFile};
use snapshot::{Change, Keeper, Scope, Tree};
use store::Store;

use changes::{blob_sizes, coalesce, merge, not_undoable};

/// Which call is captured.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CallInfo {
    /// The audit id (`s3:c7`).
    pub call: String,
    /// Its session.
    pub session: String,
    /// Its trace.
    pub trace: Option<String>,
    /// The tool.
    pub tool: String,
}

/// A capture not yet finished.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Open {
    info: CallInfo,
    /// The paths captured (`None`: the whole journaled workspace).
    #[serde(with = "node::opt_paths")]
    paths: Option<Vec<PathBuf>>,
    before: Tree,
    started_ms: u64,
    /// How many records the journal had when it began: later ones may have changed
    /// the same paths.
    records_at_begin: usize,
}

/// Which calls an undo takes.
#[derive(Clone, Debug, PartialEq)]
pub enum Select {
    /// These calls (audit ids).
    Calls(Vec<String>),
    /// Every call of this trace.
    Trace(String),
    /// The newest `n` calls that changed something.
    Last(usize),
}

/// What an undo did.
#[derive(Debug, Default)]
pub struct Report {
    /// The calls undone (newest first).
    pub calls: Vec<String>,
    /// The result's fields.
    pub undone: restore::Undone,
}

/// The journal: one per daemon.
pub struct Journal {
    inner: Mutex<Inner>,
}

struct Inner {
    dir: PathBuf,
    scope: Scope,
    store: Store,
    max_bytes: u64,
    /// Size of every blob in the store.
    sizes: HashMap<String, u64>,
    used: u64,
    /// The newest snapshot of the journaled workspace.
    index: Tree,
    records: Vec<Record>,
    file: RecordFile,
    open: HashMap<u64, Open>,
    next_open: u64,
    /// Whether records (and the contents they name) are flushed to disk: the audit
    /// log's `fsync` setting.
    fsync: Fsync,
    /// How many flushes the journal asked for (tests read it).
    syncs: u64,
}

/// Keep contents in the store while they fit under the bound.
struct Bounded<'a> {
    store: &'a Store,
    sizes: &'a mut HashMap<String, u64>,
    used: &'a mut u64,
    max: u64,
}

impl Keeper for Bounded<'_> {
    fn keep(&mut self, file: &mut std::fs::File, size: u64) -> io::Result<(String, bool)> {
        if size.saturating_add(*self.used) > self.max {
            return Ok((Store::hash(file)?.sha256, false));
        }
        let h = self.store.put(file)?;
        if !self.sizes.contains_key(&h.sha256) {
            self.sizes.insert(h.sha256.clone(), h.size);
            *self.used += h.size;
        }
        Ok((h.sha256, true))
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn lock(m: &Mutex<Inner>) -> std::sync::MutexGuard<'_, Inner> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Journal {
    /// Open the journal under `dir` (`<state>/undo`): read the records, record what
    /// calls cut short by the daemon's end changed, finish an undo cut short, and take
    /// the first snapshot. `fsync` says whether what it writes is flushed to disk
    /// before a call goes on (`[audit] fsync`).
    pub fn open(dir: &Path, scope: Scope, max_bytes: u64, fsync: Fsync) -> io::Result<Journal> {
        std::fs::create_dir_all(dir.join("open"))?;
        let store = Store::open(&dir.join("blobs"))?;
        let (file, records) = RecordFile::open(&dir.join("journal.jsonl"))?;
        let sizes = blob_sizes(&dir.join("blobs"));
        let used = sizes.values().sum();
        let mut inner = Inner {
            dir: dir.to_path_buf(),
            scope,
            store,
            max_bytes,
            sizes,
            used,
            index: Tree::default(),
            records,
            file,
            open: HashMap::new(),
            next_open: 1,
            fsync,
            syncs: 0,
        };
        inner.recover_open();
        inner.finish_cut_undos();
        inner.make_room();
        Ok(Journal {
            inner: Mutex::new(inner),
        })
    }

    /// Take the first snapshot of the workspace (reading every journaled file once), so
    /// the first call does not pay for it. Run off the start-up path: a capture waits
    /// for it.
    pub fn warm(&self) {
        lock(&self.inner).refresh_index();
    }

    /// Flush (or not) from now on, as `[audit] fsync` now says.
    pub fn set_fsync(&self, fsync: Fsync) {
        lock(&self.inner).fsync = fsync;
    }

    /// How many times the journal flushed to disk so far.
    pub fn sync_count(&self) -> u64 {
        lock(&self.inner).syncs
    }

    /// Begin capturing `info` over `paths` (`None`: the whole journaled workspace).
    pub fn begin(&self, info: CallInfo, paths: Option<Vec<PathBuf>>) -> io::Result<u64> {
        lock(&self.inner).begin(info, paths)
    }

    /// End capture `id`: record what changed. Returns `meta.undo`: `true`, or why not
    /// all of it can be undone.
    pub fn finish(&self, id: u64) -> Value {
        lock(&self.inner).finish(id, false)
    }

    /// Undo the calls `select` names that `may` allows (a session's own, or any for a
    /// person); `by` is the undo's own id.
    pub fn undo(
        &self,
        by: &str,
        select: &Select,
        may: &dyn Fn(&str) -> bool,
        dry_run: bool,
    ) -> io::Result<Report> {
        lock(&self.inner).undo(by, select, may, dry_run)
    }

    /// The session that made call `call`, when the journal has it.
    pub fn session_of(&self, call: &str) -> Option<String> {
        lock(&self.inner)
            .entries()
            .find(|e| e.call == call)
            .map(|e| e.session.clone())
    }
}

impl Inner {
    fn keeper(&mut self) -> (Bounded<'_>, &Scope, &mut Tree) {
        (
            Bounded {
                store: &self.store,
                sizes: &mut self.sizes,
                used: &mut self.used,
                max: self.max_bytes,
            },
            &self.scope,
            &mut self.index,
        )
    }

    fn refresh_index(&mut self) {
        let (mut k, scope, index) = self.keeper();
        *index = scope.take(index, &mut k);
    }

    /// Snapshot `paths` (or everything) and fold it into the index.
    fn snapshot(&mut self, paths: Option<&[PathBuf]>) -> Tree {
        let (mut k, scope, index) = self.keeper();
        match paths {
            None => {
                *index = scope.take(index, &mut k);
                index.clone()
            }
            Some(paths) => {
                let t = scope.take_paths(paths, index, &mut k);
                for p in paths {
                    match t.0.get(p) {
                        Some(s) => index.0.insert(p.clone(), s.clone()),
                        None => index.0.remove(p),
                    };
                }
                t
            }
        }
    }

    fn begin(&mut self, info: CallInfo, paths: Option<Vec<PathBuf>>) -> io::Result<u64> {
        let paths = paths.map(|p| self.scope.with_missing_ancestors(&p));
        let before = self.snapshot(paths.as_deref());
        let id = self.next_open;
        self.next_open += 1;
        let open = Open {
            info,
            paths,
            before,
            started_ms: now_ms(),
            records_at_begin: self.records.len(),
        };
        let bytes = rmp_serde::to_vec_named(&open).map_err(io::Error::other)?;
        let path = self.open_path(id);
        std::fs::write(&path, bytes)?;
        // The first snapshot and the contents it names, on disk before the call runs.
        self.sync_store()?;
        self.open.insert(id, open);
        Ok(id)
    }

    fn open_path(&self, id: u64) -> PathBuf {
        self.dir.join("open").join(format!("{id}.bin"))
    }

    fn finish(&mut self, id: u64, interrupted: bool) -> Value {
        let Some(open) = self.open.remove(&id) else {
            return Value::from("not undoable: its changes were not captured");
        };
        let changes = self.changes_since(&open);
        let not_undoable = not_undoable(&changes, &self.store);
        let undo = match &not_undoable {
            None => Value::Bool(true),
            Some(why) => Value::String(why.clone()),
        };
        if !changes.is_empty() {
            let entry = CallEntry {
                call: open.info.call,
                session: open.info.session,
                trace: open.info.trace,
                tool: open.info.tool,
                started_ms: open.started_ms,
                ended_ms: now_ms(),
                changes,
                not_undoable,
                interrupted,
            };
            if let Err(e) = self.append(Record::Call(entry)) {
                tracing::error!("the undo journal could not record a call: {e}");
                return Value::from(format!(
                    "not undoable: the journal could not be written ({e})"
                ));
            }
        }
        let _ = std::fs::remove_file(self.open_path(id));
        self.make_room();
        undo
    }

    /// What changed since `open` began (what later calls recorded left out).
    fn changes_since(&mut self, open: &Open) -> Vec<Change> {
        let changes = match open.paths.as_deref() {
            // The index is the whole new snapshot: compared in place, not copied.
            None => {
                self.refresh_index();
                snapshot::diff(&open.before, &self.index)
            }
            Some(paths) => snapshot::diff(&open.before, &self.snapshot(Some(paths))),
        };
        self.attribute(changes, open.records_at_begin)
    }

    /// Leave out of `changes` what calls recorded since the capture began made, and
    /// end a path's change where such a call took it over.
    fn attribute(&self, changes: Vec<Change>, since: usize) -> Vec<Change> {
        let mut later: HashMap<&Path, &Change> = HashMap::new();
        for r in self.records.iter().skip(since) {
            if let Record::Call(e) = r {
                for c in &e.changes {
                    later.insert(&c.path, c);
                }
            }
        }
        changes
            .into_iter()
            .filter_map(|mut c| {
                let Some(l) = later.get(c.path.as_path()) else {
                    return Some(c);
                };
                if !same_state(c.after.as_ref(), l.after.as_ref()) {
                    return Some(c);
                }
                c.after = l.before.clone();
                (!same_state(c.before.as_ref(), c.after.as_ref())).then_some(c)
            })
            .collect()
    }

    fn append(&mut self, r: Record) -> io::Result<()> {
        // The contents a record names reach the disk before the record.
        self.sync_store()?;
        let sync = self.fsync == Fsync::Always;
        self.file.append(&r, sync)?;
        self.syncs += u64::from(sync);
        self.records.push(r);
        Ok(())
    }

    /// Flush what was written in the state directory's file system, when `fsync` asks.
    fn sync_store(&mut self) -> io::Result<()> {
        if self.fsync == Fsync::Never {
            return Ok(());
        }
        self.syncs += 1;
        self.store.sync()
    }

    fn entries(&self) -> impl DoubleEndedIterator<Item = &CallEntry> {
        self.records.iter().filter_map(|r| match r {
            Record::Call(e) => Some(e),
            _ => None,
        })
    }

    fn undone_calls(&self) -> HashMap<&str, &str> {
        let mut m = HashMap::new();
        for r in &self.records {
            if let Record::Undone { by, calls } = r {
                for c in calls {
                    m.insert(c.as_str(), by.as_str());
                }
            }
        }
        m
    }

    fn undo(
        &mut self,
        by: &str,
        select: &Select,
        may: &dyn Fn(&str) -> bool,
        dry_run: bool,
    ) -> io::Result<Report> {
        let (chosen, refused) = self.choose(select, may);
        let mut report = Report::default();
        report.undone.not_undoable = refused;
        if chosen.is_empty() {
            return Ok(report);
        }
        if !dry_run {
            self.append(Record::UndoBegin {
                by: by.to_owned(),
                calls: chosen.clone(),
            })?;
        }
        let entries: Vec<&CallEntry> = chosen
            .iter()
            .filter_map(|c| self.entries().rev().find(|e| &e.call == c))
            .collect();
        let done = restore::undo(&entries, &self.store, &self.scope.roots, dry_run);
        report.calls = chosen;
        merge(&mut report.undone, done);
        if !dry_run {
            self.record_undo(by, &report)?;
        }
        Ok(report)
    }

    /// The calls `select` names, newest first, and the refused ones with why.
    fn choose(
        &self,
        select: &Select,
        may: &dyn Fn(&str) -> bool,
    ) -> (Vec<String>, Vec<(String, String)>) {
        let undone = self.undone_calls();
        let mut refused = Vec::new();
        let eligible = |e: &CallEntry| may(&e.session) && !undone.contains_key(e.call.as_str());
        let chosen: Vec<String> = match select {
            Select::Calls(ids) => {
                let mut out = Vec::new();
                for id in ids {
                    let found = self.entries().rev().find(|e| &e.call == id);
                    let running = self.open.values().any(|o| &o.info.call == id);
                    match found {
                        None if running => refused.push((id.clone(), "it is still running (a background job): its changes are recorded when it ends; undo it then".to_owned())),
                        None => refused.push((id.clone(), "nothing it changed is in the journal: it changed nothing in the workspace, ran before the journal, or was dropped over [undo] max_bytes".to_owned())),
                        Some(e) if !may(&e.session) => refused.push((id.clone(), "it is another session's call: only a person (an interactive session) may undo those".to_owned())),
                        Some(e) => match undone.get(e.call.as_str()) {
                            Some(by) => refused.push((id.clone(), format!("already undone (by {by})"))),
                            None => out.push(e.call.clone()),
                        },
                    }
                }
                // Newest first, whatever order they were named in.
                let order: HashMap<&str, usize> = self
                    .entries()
                    .enumerate()
                    .map(|(i, e)| (e.call.as_str(), i))
                    .collect();
                out.sort_by_key(|c| std::cmp::Reverse(order.get(c.as_str()).copied()));
                out.dedup();
                out
            }
            Select::Trace(t) => self
                .entries()
                .rev()
                .filter(|e| {
                    e.trace.as_deref() == Some(t.as_str()) && e.tool != "undo" && eligible(e)
                })
                .map(|e| e.call.clone())
                .collect(),
            Select::Last(n) => self
                .entries()
                .rev()
                .filter(|e| e.tool != "undo" && eligible(e))
                .take(*n)
                .map(|e| e.call.clone())
                .collect(),
        };
        (chosen, refused)
    }

    /// Journal what the undo changed (so it can be undone in turn) and which calls it
    /// undid.
    fn record_undo(&mut self, by: &str, report: &Report) -> io::Result<()> {
        let u = &report.undone;
        if !u.changes.is_empty() {
            let (session, _) = by.split_once(':').unwrap_or((by, ""));
            let changes = coalesce(&u.changes);
            self.append(Record::Call(CallEntry {
                call: by.to_owned(),
                session: session.to_owned(),
                trace: None,
                tool: "undo".into(),
                started_ms: now_ms(),
                ended_ms: now_ms(),
                changes,
                not_undoable: None,
                interrupted: false,
            }))?;
        }
        let clean: Vec<String> = report
            .calls
            .iter()
            .filter(|c| !u.not_undoable.iter().any(|(n, _)| n == *c))
            .cloned()
            .collect();
        self.append(Record::Undone {
            by: by.to_owned(),
            calls: clean,
        })?;
        // The undo changed the workspace: the index must see it.
        let paths: Vec<PathBuf> = u.changes.iter().map(|c| c.path.clone()).collect();
        self.snapshot(Some(&paths));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
