//! Coming back after an outage: reopening the running segment, checking its tail against
//! what was written, and setting aside a file that does not match.

use super::*;

impl Writer {
    pub(super) fn reopen(&mut self) -> io::Result<(File, Map<String, Value>)> {
        let mut file = segments::open_active(&self.dir)?;
        let actual = file.metadata()?.len();
        if actual < self.len || !self.tail_matches(&mut file)? {
            return self.quarantine_running(actual);
        }
        let mut details = Map::new();
        if actual > self.len {
            let mut extra = Vec::new();
            file.seek(SeekFrom::Start(self.len))?;
            file.read_to_end(&mut extra)?;
            file.set_len(self.len)?;
            file.sync_all()?;
            details.insert("dropped_bytes".into(), json!(extra.len()));
            details.insert("dropped_sha256".into(), chain::sha256_hex(&extra).into());
        }
        Ok((file, details))
    }

    /// Whether the last committed line on disk still carries the hash we committed.
    pub(super) fn tail_matches(&self, file: &mut File) -> io::Result<bool> {
        if self.len == 0 {
            return Ok(true);
        }
        let line = last_line(file, self.len)?;
        Ok(chain::check_line(&line)
            .is_ok_and(|s| s.seq == self.last.seq && s.hash == self.last.hash))
    }

    /// The file changed under us while we were down: set it aside (rename) and go on
    /// in a new segment, linked to what we know we committed.
    pub(super) fn quarantine_running(
        &mut self,
        actual: u64,
    ) -> io::Result<(File, Map<String, Value>)> {
        let broken = segments::roll(&self.dir)?;
        let file = segments::open_active(&self.dir)?;
        let had = self.len;
        self.len = 0;
        tracing::error!(file = %broken.display(), "audit log changed while unavailable; set aside");
        let mut details = Map::new();
        details.insert("broken_file".into(), file_name(&broken).into());
        details.insert(
            "detail".into(),
            format!("file was {actual} bytes, {had} committed, or its last record changed").into(),
        );
        Ok((file, details))
    }
}
