//! Staged commands on the call path: a `run_command` with `stage: true` comes back
//! from the exec worker with the record of its held changes (`meta.staged_record`);
//! the supervisor takes it out, keeps it behind a single-use token (`meta.token`,
//! expiring with `[edit] preview_ttl_ms` like a preview's), and `apply_file_change`
//! with that token writes every held change or none ([`apply::apply_staged`]). The
//! supervisor applies them: it is not confined by Landlock, and the staging directory
//! (`STATE/staged/<id>`) is removed when the token is used, expires or is evicted,
//! and at start for what an earlier daemon left.

use std::path::{Component, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use toolvisor_os::staged::{self, Manifest};
use toolvisor_protocol::ErrorType;
use toolvisor_protocol::tools::run_command;
use toolvisor_protocol::worker::{Outcome, STAGED_META};

use crate::call::previews::{PreviewStore, TokenError};
use crate::call::router::{Ran, fail};
use crate::call::service::Service;

pub mod apply;

pub use apply::{AppliedPath, ApplyError, apply_staged};

/// A staging directory, removed with its last owner (the token's entry in the store,
/// or the apply that took it).
#[derive(Debug)]
pub struct StagingDir(PathBuf);

impl Drop for StagingDir {
    fn drop(&mut self) {
        if let Err(e) = staged::remove(&self.0) {
            tracing::warn!("cannot remove staging directory {:?}: {e}", self.0);
        }
    }
}

/// A staged command's held changes, waiting for their token.
#[derive(Debug)]
pub struct Staged {
    /// What was held, and what the workspace had.
    pub manifest: Manifest,
    /// The workspace roots when the command ran (0: `private`, 1: `shared`).
    pub roots: Vec<PathBuf>,
    /// Where the changes are.
    pub dir: StagingDir,
}

impl Staged {
    /// One line per change (`created new`), for a confirmation.
    pub fn summary(&self) -> String {
        let lines: Vec<String> = self
            .manifest
            .changes
            .iter()
            .map(|h| format!("{} {}", h.kind.as_str(), h.path))
            .collect();
        lines.join("\n")
    }
}

/// Why a worker's record is not kept.
fn check(m: &Manifest, roots: usize) -> Result<(), String> {
    if !staged::valid_id(&m.id) {
        return Err(format!("bad staging id {:?}", m.id));
    }
    for h in &m.changes {
        let plain = h
            .rel_path()
            .components()
            .all(|c| matches!(c, Component::Normal(_)));
        if h.root >= roots || !plain || h.rel.is_empty() {
            return Err(format!("bad staged path {:?}", h.path));
        }
    }
    Ok(())
}

impl Service {
    pub(crate) fn staged(&self) -> std::sync::MutexGuard<'_, PreviewStore<Staged>> {
        self.staged.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The roots a staged command's overlays covered, in the sandbox's order.
    fn stage_roots(&self) -> Vec<PathBuf> {
        match crate::workers::init::workspace_roots(&self.paths().workspace, &self.config()) {
            Ok(r) => std::iter::once(r.private).chain(r.shared).collect(),
            Err(_) => Vec::new(),
        }
    }

    /// Take a staged command's record out of its outcome and hand the client a token
    /// for it instead. Only `run_command`'s record is kept (any other tool's is dropped).
    pub(crate) fn hold_staged(&self, tool: &str, o: &mut Outcome) {
        let Some(record) = o.meta.remove(STAGED_META) else {
            return;
        };
        if tool != run_command::NAME {
            return;
        }
        let manifest: Manifest = match serde_json::from_value(record) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("a staged command's record is unreadable: {e}");
                return;
            }
        };
        let roots = self.stage_roots();
        if let Err(why) = check(&manifest, roots.len()) {
            tracing::warn!("a staged command's record is refused: {why}");
            return;
        }
        let dir = StagingDir(staged::dir(&self.paths().state_dir, &manifest.id));
        let ttl = Duration::from_millis(self.config().edit.preview_ttl_ms);
        let held = Staged {
            manifest,
            roots,
            dir,
        };
        let token = self.staged().issue(held, Instant::now(), ttl);
        o.meta.insert("token".into(), Value::String(token));
    }

    /// Apply a staged command's changes by `token`: None when the token is not a staged
    /// one (a preview's, or unknown), so the caller tries the previews.
    pub(crate) async fn apply_staged_token(&self, token: &str) -> Option<(Outcome, Ran)> {
        let held = match self.staged().take(token, Instant::now()) {
            Ok(h) => h,
            Err(TokenError::Unknown) => return None,
            Err(e) => {
                let message = e
                    .to_string()
                    .replace("preview the change", "run the command");
                return Some((fail(e.error_type(), message), None));
            }
        };
        let done = tokio::task::spawn_blocking(move || {
            let r = apply_staged(&held.manifest, &held.dir.0, &held.roots);
            drop(held);
            r
        })
        .await;
        let outcome = match done {
            Ok(Ok(applied)) => applied_outcome(&applied),
            Ok(Err(e)) => fail(error_type(&e), e.to_string()),
            Err(e) => fail(ErrorType::InternalError, format!("the apply failed: {e}")),
        };
        Some((outcome, None))
    }

    /// Drop staged changes whose token expired (their directories go with them).
    pub(crate) fn prune_staged(&self) {
        self.staged().prune(Instant::now());
    }
}

/// The contract's error type of a failed apply.
fn error_type(e: &ApplyError) -> ErrorType {
    match e {
        ApplyError::Stale { .. } => ErrorType::StaleChange,
        ApplyError::Outside { .. } => ErrorType::PathOutsideWorkspace,
        ApplyError::Io { source, .. } if source.kind() == std::io::ErrorKind::PermissionDenied => {
            ErrorType::PermissionError
        }
        ApplyError::Io { .. } => ErrorType::InternalError,
    }
}

/// What `apply_file_change` answers for a staged token: the changes written.
fn applied_outcome(applied: &[AppliedPath]) -> Outcome {
    let mut text = format!("Applied {} staged change(s):\n", applied.len());
    for a in applied {
        text.push_str(&format!("{} {}\n", a.kind.as_str(), a.path));
    }
    let mut o = Outcome::ok(text);
    let changes: Vec<Value> = applied
        .iter()
        .map(|a| json!({"path": a.path, "kind": a.kind.as_str()}))
        .collect();
    o.meta.insert("changes".into(), Value::Array(changes));
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_os::staged::{ChangeKind, Fingerprint, Held};

    fn held(dir: &std::path::Path) -> Staged {
        std::fs::create_dir_all(staged::upper(dir, 0)).unwrap();
        Staged {
            manifest: Manifest {
                id: "abc".into(),
                changes: vec![Held {
                    root: 0,
                    rel: b"new".to_vec(),
                    path: "new".into(),
                    kind: ChangeKind::Created,
                    before: Fingerprint::Missing,
                }],
            },
            roots: vec![dir.to_path_buf()],
            dir: StagingDir(dir.to_path_buf()),
        }
    }

    #[test]
    fn an_expired_token_takes_its_staging_directory_with_it() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("staged/abc");
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        let ttl = Duration::from_secs(60);
        let token = store.issue(held(&dir), t0, ttl);
        store.prune(t0 + ttl / 2);
        assert!(dir.exists());
        assert_eq!(
            store.peek(&token, t0).map(Staged::summary).ok().as_deref(),
            Some("created new")
        );
        store.prune(t0 + ttl);
        assert!(!dir.exists(), "expired: removed");
        assert!(matches!(
            store.take(&token, t0 + ttl),
            Err(TokenError::Expired)
        ));
    }

    #[test]
    fn a_used_token_takes_its_staging_directory_with_it() {
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("staged/abc");
        let mut store = PreviewStore::new();
        let t0 = Instant::now();
        let token = store.issue(held(&dir), t0, Duration::from_secs(60));
        drop(store.take(&token, t0));
        assert!(!dir.exists());
    }

    #[test]
    fn records_that_leave_their_roots_are_refused() {
        let t = tempfile::tempdir().unwrap();
        let mut s = held(&t.path().join("x"));
        assert!(check(&s.manifest, 1).is_ok());
        assert!(check(&s.manifest, 0).is_err(), "no such root");
        s.manifest.changes[0].rel = b"../out".to_vec();
        assert!(check(&s.manifest, 1).is_err());
        s.manifest.changes[0].rel = b"ok".to_vec();
        s.manifest.id = "../x".into();
        assert!(check(&s.manifest, 1).is_err());
    }
}
