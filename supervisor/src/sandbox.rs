//! The command sandbox as `serve` finds it at start: whether this host lets commands
//! have their own namespaces (one probe, whatever `workers.exec.sandbox` says, so a
//! reload may switch it on), and the one warning when `auto` falls back.

use std::path::{Path, PathBuf};

use crate::config::{Config, SandboxMode};

/// Why commands cannot have their own namespaces on this host: the probe's answer, in
/// the words of the workers' sandbox (the supervisor does not link the workers, so
/// the binary hands the answer over as text).
#[derive(Clone, Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoNamespaces(pub String);

/// The probe the binary wires in: runs the reap shim once in a minimal sandbox.
pub type ProbeFn = fn(&Path, &Path, &[PathBuf]) -> Result<(), NoNamespaces>;

/// Probe the host; `Err` says why commands cannot have namespaces here.
pub async fn probe(
    run_probe: ProbeFn,
    exe: &Path,
    workspace: &Path,
    state_dir: &Path,
    config: &Config,
) -> Result<(), NoNamespaces> {
    let (exe, ws) = (exe.to_path_buf(), workspace.to_path_buf());
    let hidden: Vec<PathBuf> = vec![state_dir.canonicalize().unwrap_or(state_dir.to_path_buf())];
    let result = tokio::task::spawn_blocking(move || run_probe(&exe, &ws, &hidden))
        .await
        .unwrap_or_else(|e| Err(NoNamespaces(format!("the probe failed: {e}"))));
    match (&result, config.workers.exec.exec_mode()) {
        (Err(why), SandboxMode::Auto) => tracing::warn!(
            "commands run without their own namespaces (Landlock and the reap shim only; see docs/SANDBOX.md): {why}"
        ),
        (Ok(()), SandboxMode::Off) => tracing::info!(
            "workers.exec.sandbox = \"off\": commands run without their own namespaces"
        ),
        _ => {}
    }
    result
}
