//! The journal's upkeep: calls left open by a crash, undos cut short, and keeping the
//! journal within its bounds (the oldest records and unreferenced contents go first).

use super::*;

impl Inner {
    /// Captures the daemon's end cut short: record what their calls changed, as far as
    /// the workspace now tells.
    pub(super) fn recover_open(&mut self) {
        let dir = self.dir.join("open");
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return;
        };
        let mut found: Vec<(u64, Open)> = rd
            .flatten()
            .filter_map(|e| {
                let id = e.file_name().to_str()?.strip_suffix(".bin")?.parse().ok()?;
                let bytes = std::fs::read(e.path()).ok()?;
                Some((id, rmp_serde::from_slice::<Open>(&bytes).ok()?))
            })
            .collect();
        found.sort_by_key(|(id, _)| *id);
        for (id, mut open) in found {
            open.records_at_begin = open.records_at_begin.min(self.records.len());
            self.open.insert(id, open);
            self.finish(id, true);
        }
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let _ = std::fs::remove_file(e.path());
        }
    }

    /// An undo whose `undo_begin` has no `undone` after it was cut short: run it again
    /// (undo is idempotent).
    pub(super) fn finish_cut_undos(&mut self) {
        let mut begun: Vec<(String, Vec<String>)> = Vec::new();
        for r in &self.records {
            match r {
                Record::UndoBegin { by, calls } => begun.push((by.clone(), calls.clone())),
                Record::Undone { by, .. } => begun.retain(|(b, _)| b != by),
                Record::Call(_) => {}
            }
        }
        for (by, calls) in begun {
            tracing::warn!("finishing the undo {by} the daemon's end cut short");
            let _ = self.undo(&by, &Select::Calls(calls), &|_| true, false);
        }
    }

    /// Keep the blobs within the bound: past three quarters of it, drop the oldest
    /// records until half is used, then remove the blobs nothing refers to.
    pub(super) fn make_room(&mut self) {
        if self.used <= self.max_bytes / 4 * 3 {
            return;
        }
        let mut dropped = 0;
        while self.used > self.max_bytes / 2 && dropped < self.records.len() {
            dropped += 1;
            let live = self.referenced(dropped);
            self.used = live.iter().filter_map(|s| self.sizes.get(*s)).sum();
        }
        if dropped > 0 {
            let keep: Vec<Record> = self.records.split_off(dropped);
            self.records = keep;
            for o in self.open.values_mut() {
                o.records_at_begin = o.records_at_begin.saturating_sub(dropped);
            }
            if let Err(e) = self.file.rewrite(&self.records) {
                tracing::error!("the undo journal could not drop its oldest records: {e}");
            }
        }
        self.sweep();
    }

    /// The blobs referred to by the index, open captures and the records from `from` on.
    pub(super) fn referenced(&self, from: usize) -> HashSet<&str> {
        let index = self.index.0.values().map(|s| Some(&s.node));
        let open = self
            .open
            .values()
            .flat_map(|o| o.before.0.values().map(|s| Some(&s.node)));
        let records = self.records.iter().skip(from).flat_map(|r| match r {
            Record::Call(e) => e
                .changes
                .iter()
                .flat_map(|c| [c.before.as_ref(), c.after.as_ref()])
                .collect::<Vec<_>>(),
            _ => Vec::new(),
        });
        index
            .chain(open)
            .chain(records)
            .flatten()
            .filter_map(Node::blob)
            .collect()
    }

    /// Remove every blob nothing refers to.
    pub(super) fn sweep(&mut self) {
        let live: HashSet<String> = self.referenced(0).into_iter().map(str::to_owned).collect();
        let dead: Vec<String> = self
            .sizes
            .keys()
            .filter(|k| !live.contains(*k))
            .cloned()
            .collect();
        for d in dead {
            self.store.remove(&d);
            self.sizes.remove(&d);
        }
        self.used = self.sizes.values().sum();
    }
}
