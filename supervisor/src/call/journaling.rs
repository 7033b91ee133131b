//! Every call that may change the workspace is captured by the undo journal
//! ([`crate::undo`]) around its run: a command or an MCP / external tool over the whole
//! journaled workspace, an edit tool over the path it names. The result says whether
//! what it changed can be undone (`meta.undo`: `true`, or why not). A background job's
//! capture stays open until the supervisor sees the job has ended (a later
//! `read_output`, `list_processes`, `kill_process` or `wait` that says so), or the
//! daemon's next start.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde_json::Value;
use toolvisor_protocol::tools::{EDIT, EXEC, META, SEARCH, STATE, WEB};
use toolvisor_protocol::worker::{Outcome, Roots};

use crate::call::host_config;
use crate::call::router::Call;
use crate::call::service::Service;
use crate::config::Config;
use crate::undo::{CallInfo, Journal};

/// The journal and what the call path keeps beside it.
pub struct Undo {
    /// The journal (`None`: it could not be opened, and why).
    pub journal: Result<Arc<Journal>, String>,
    roots: Roots,
    /// Background jobs whose capture is still open: process handle → capture.
    jobs: Mutex<std::collections::HashMap<String, Capture>>,
}

/// A call's capture.
pub(crate) struct Capture {
    journal: Journaled,
    /// The call's audit id.
    call: String,
    /// Protected names missing when it began (a command that creates one has it moved
    /// aside: [`host_config`]).
    watch: Vec<PathBuf>,
}

/// Where the journal stands on a call.
enum Journaled {
    /// The call changes nothing in the workspace.
    None,
    /// It may, but the journal cannot capture it (why).
    Failed(String),
    /// Open.
    Open(u64),
}

impl Undo {
    /// Open the journal in `state_dir/undo` over the writable roots, bounded by
    /// `[undo] max_bytes` and flushed as `[audit] fsync` says.
    pub fn open(state_dir: &Path, roots: Roots, config: &Config) -> Undo {
        let (max_bytes, fsync) = (config.undo.max_bytes, config.audit.fsync);
        let scope = crate::undo::snapshot::Scope {
            roots: std::iter::once(roots.private.clone())
                .chain(roots.shared.clone())
                .collect(),
            skip: vec![state_dir.to_path_buf()],
        };
        let started = Instant::now();
        let journal = Journal::open(&state_dir.join("undo"), scope, max_bytes, fsync)
            .map(Arc::new)
            .map_err(|e| format!("the undo journal cannot be opened: {e}"));
        match &journal {
            Ok(j) => {
                let j = j.clone();
                let spawned =
                    std::thread::Builder::new()
                        .name("undo-warm".into())
                        .spawn(move || {
                            j.warm();
                            tracing::info!("undo journal ready in {:?}", started.elapsed());
                        });
                if let Err(e) = spawned {
                    tracing::warn!(
                        "the undo journal's first snapshot waits for the first call: {e}"
                    );
                }
            }
            Err(e) => tracing::error!("{e}"),
        }
        Undo {
            journal,
            roots,
            jobs: Default::default(),
        }
    }

    /// Take up a reloaded configuration's `[audit] fsync`.
    pub fn reconfigure(&self, config: &Config) {
        if let Ok(j) = &self.journal {
            j.set_fsync(config.audit.fsync);
        }
    }

    /// The workspace roots.
    pub fn roots(&self) -> &Roots {
        &self.roots
    }

    /// The roots commands may write: `private` and `shared`.
    fn writable_roots(&self) -> Vec<PathBuf> {
        std::iter::once(self.roots.private.clone())
            .chain(self.roots.shared.clone())
            .collect()
    }

    /// The host path(s) a workspace path names (`scope:rest`, relative to the private
    /// root, or absolute), and where a symlinked parent leads.
    fn host_paths(&self, path: &str) -> Vec<PathBuf> {
        let lexical = match path.split_once(":/") {
            Some(("private", rest)) => self.roots.private.join(rest),
            Some(("shared", rest)) => match &self.roots.shared {
                Some(r) => r.join(rest),
                None => return Vec::new(),
            },
            Some(("public", _)) => return Vec::new(),
            _ if Path::new(path).is_absolute() => PathBuf::from(path),
            _ => self.roots.private.join(path),
        };
        let lexical = normalise(&lexical);
        let mut out = vec![lexical.clone()];
        if let (Some(parent), Some(name)) = (lexical.parent(), lexical.file_name())
            && let Ok(real) = parent.canonicalize()
            && real != parent
        {
            out.push(real.join(name));
        }
        out
    }
}

/// `.` and `..` folded without touching the file system.
fn normalise(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::ParentDir => {
                out.pop();
            }
            std::path::Component::CurDir => {}
            c => out.push(c),
        }
    }
    out
}

/// What a call of `tool` may change: `None` nothing, `Some(None)` anything in the
/// workspace, `Some(Some(paths))` those paths.
fn reach(call: &Call<'_>, service: &Service, undo: &Undo) -> Option<Option<Vec<PathBuf>>> {
    let tool = call.tool;
    match tool.group.as_str() {
        g if [SEARCH, WEB, STATE, META].contains(&g) => None,
        EXEC => matches!(tool.name.as_str(), "run_command" | "write_input").then_some(None),
        EDIT => {
            let path = match tool.name.as_str() {
                "write_file" | "edit_file" => call.req.args.get("path")?.as_str()?.to_owned(),
                "apply_file_change" => {
                    let token = crate::call::changes::change_token(&call.req.args);
                    if service.staged().peek(token, Instant::now()).is_ok() {
                        // A staged command's held changes may remove whole trees: the
                        // capture covers the workspace, so each removed path is kept.
                        return Some(None);
                    }
                    let previews = service.previews();
                    match previews.peek(token, Instant::now()) {
                        Ok(c) => c.path.clone(),
                        // An unusable token changes nothing.
                        Err(_) => return None,
                    }
                }
                _ => return None,
            };
            Some(Some(undo.host_paths(&path)))
        }
        // MCP servers and external workers: whatever they may write.
        _ => Some(None),
    }
}

impl Service {
    /// Begin capturing what `call` may change.
    pub(crate) async fn capture_begin(&self, call: &Call<'_>, call_id: &str) -> Capture {
        let undo = self.undo();
        let reach = reach(call, self, undo);
        let watch = match &reach {
            Some(None) => host_config::missing(&undo.writable_roots()),
            _ => Vec::new(),
        };
        let journal = self.journal_begin(call, call_id, reach).await;
        Capture {
            journal,
            call: call_id.to_owned(),
            watch,
        }
    }

    async fn journal_begin(
        &self,
        call: &Call<'_>,
        call_id: &str,
        reach: Option<Option<Vec<PathBuf>>>,
    ) -> Journaled {
        let Some(paths) = reach else {
            return Journaled::None;
        };
        let journal = match &self.undo().journal {
            Ok(j) => j.clone(),
            Err(e) => return Journaled::Failed(e.clone()),
        };
        let info = CallInfo {
            call: call_id.to_owned(),
            session: call.session.id.clone(),
            trace: call.req.trace_id.clone(),
            tool: call.tool.name.clone(),
        };
        match tokio::task::spawn_blocking(move || journal.begin(info, paths)).await {
            Ok(Ok(id)) => Journaled::Open(id),
            Ok(Err(e)) => Journaled::Failed(format!("the undo journal failed: {e}")),
            Err(e) => Journaled::Failed(format!("the undo journal failed: {e}")),
        }
    }

    /// End `cap` and say in `meta.undo` whether the call can be undone; close the
    /// captures of background jobs `outcome` says have ended.
    pub(crate) async fn capture_end(&self, cap: Capture, outcome: &mut Outcome) {
        self.close_ended_jobs(outcome).await;
        if let Some(handle) = background(outcome) {
            let open = matches!(cap.journal, Journaled::Open(_));
            if open || !cap.watch.is_empty() {
                lock(&self.undo().jobs).insert(handle, cap);
            }
            outcome.meta.entry("undo").or_insert(Value::Bool(true));
            return;
        }
        let undo = self.finish_capture(cap, outcome).await;
        outcome.meta.entry("undo").or_insert(undo);
    }

    /// Move aside what the call created that it must not have, then record its changes.
    async fn finish_capture(&self, cap: Capture, outcome: &mut Outcome) -> Value {
        host_config::quarantine(&cap.watch, &self.paths().state_dir, &cap.call, outcome);
        let id = match cap.journal {
            Journaled::None => return Value::Bool(true),
            Journaled::Failed(why) => return Value::String(format!("not undoable: {why}")),
            Journaled::Open(id) => id,
        };
        let Ok(journal) = self.undo().journal.clone() else {
            return Value::from("not undoable: the undo journal is not open");
        };
        tokio::task::spawn_blocking(move || journal.finish(id))
            .await
            .unwrap_or_else(|e| Value::String(format!("not undoable: {e}")))
    }

    /// Finish the captures of the jobs `outcome` reports ended.
    async fn close_ended_jobs(&self, outcome: &mut Outcome) {
        let ended = ended_jobs(outcome);
        if ended.is_empty() {
            return;
        }
        let caps: Vec<Capture> = {
            let mut jobs = lock(&self.undo().jobs);
            ended.iter().filter_map(|h| jobs.remove(h)).collect()
        };
        for cap in caps {
            // What the job created is said in this result, which saw it end.
            self.finish_capture(cap, outcome).await;
        }
    }
}

pub(crate) use toolvisor_os::sync::lock;

/// The handle of the background job `outcome` started, if it is still running.
fn background(o: &Outcome) -> Option<String> {
    let running = o.meta.get("running").and_then(Value::as_bool)?;
    let handle = o.meta.get("process").and_then(Value::as_str)?;
    running.then(|| handle.to_owned())
}

/// The handles of jobs `outcome` says are no longer running.
fn ended_jobs(o: &Outcome) -> Vec<String> {
    let mut out = Vec::new();
    let done = |m: &serde_json::Map<String, Value>| {
        m.get("running").and_then(Value::as_bool) == Some(false)
            || m.get("state").and_then(Value::as_str) == Some("exited")
    };
    if done(&o.meta)
        && let Some(h) = o.meta.get("process").and_then(Value::as_str)
    {
        out.push(h.to_owned());
    }
    if let Some(rows) = o.meta.get("processes").and_then(Value::as_array) {
        for r in rows.iter().filter_map(Value::as_object) {
            let handle = r.get("handle").or_else(|| r.get("process"));
            if done(r)
                && let Some(h) = handle.and_then(Value::as_str)
            {
                out.push(h.to_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn undo_at(root: &Path) -> Undo {
        Undo {
            journal: Err("none".into()),
            roots: Roots {
                private: root.to_path_buf(),
                shared: Some(root.join("sh")),
                public: None,
            },
            jobs: Default::default(),
        }
    }

    #[test]
    fn workspace_paths_name_host_paths() {
        let u = undo_at(Path::new("/w"));
        assert_eq!(u.host_paths("src/a.rs"), [PathBuf::from("/w/src/a.rs")]);
        assert_eq!(u.host_paths("private:/x/../y"), [PathBuf::from("/w/y")]);
        assert_eq!(u.host_paths("shared:/z"), [PathBuf::from("/w/sh/z")]);
        assert!(u.host_paths("public:/z").is_empty());
        assert_eq!(u.host_paths("/w/q"), [PathBuf::from("/w/q")]);
    }

    /// One captured call that writes a file in `w`; the journal's flush count after it.
    fn flushes_for_one_call(j: &Journal, w: &Path, name: &str) -> u64 {
        let info = CallInfo {
            call: format!("s1:{name}"),
            session: "s1".into(),
            trace: None,
            tool: "run_command".into(),
        };
        let id = j.begin(info, None).unwrap();
        std::fs::write(w.join(name), name).unwrap();
        assert_eq!(j.finish(id), Value::Bool(true));
        j.sync_count()
    }

    #[test]
    fn the_audit_fsync_setting_reaches_the_journal_at_start_and_reload() {
        let d = tempfile::tempdir().unwrap();
        let w = d.path().join("w");
        std::fs::create_dir_all(&w).unwrap();
        let config =
            |fsync: &str| Config::parse(&format!("[audit]\nfsync = \"{fsync}\"\n"), "t").unwrap();
        let roots = Roots {
            private: w.clone(),
            shared: None,
            public: None,
        };
        let undo = Undo::open(&d.path().join("state"), roots, &config("never"));
        let j = undo.journal.clone().unwrap();
        assert_eq!(
            flushes_for_one_call(&j, &w, "a"),
            0,
            "fsync = never: no flush"
        );
        undo.reconfigure(&config("always"));
        assert!(
            flushes_for_one_call(&j, &w, "b") > 0,
            "fsync = always: flushed"
        );
        undo.reconfigure(&config("never"));
        let before = j.sync_count();
        assert_eq!(flushes_for_one_call(&j, &w, "c"), before, "never again");
    }

    #[test]
    fn ended_jobs_are_read_from_single_and_listed_results() {
        let mut o = Outcome::ok("x".into());
        o.meta.insert("process".into(), "w0-1".into());
        o.meta.insert("running".into(), false.into());
        o.meta.insert(
            "processes".into(),
            serde_json::json!([{"handle": "w0-2", "running": false}, {"handle": "w0-3", "running": true}]),
        );
        assert_eq!(ended_jobs(&o), ["w0-1", "w0-2"]);
        assert_eq!(background(&o), None);
    }
}
