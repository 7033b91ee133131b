//! Where things are, fixed for the life of the process: what the service and every
//! worker's init are built from.

use std::path::PathBuf;

/// Where things are, fixed for the life of the process.
#[derive(Clone, Debug)]
pub struct Paths {
    /// The workspace served (canonical).
    pub workspace: PathBuf,
    /// The state directory (locked by this process).
    pub state_dir: PathBuf,
    /// The socket clients connect to.
    pub socket: PathBuf,
    /// The config file in use, if one exists (protected from the tools).
    pub config_file: PathBuf,
    /// This binary: workers and the reap shim are it, re-executed.
    pub exe: PathBuf,
    /// Whether commands can have their own namespaces here (probed once at start),
    /// or why not.
    pub namespaces: Result<(), crate::sandbox::NoNamespaces>,
    /// Puts an external worker's command under the reap shim in the command sandbox.
    pub wrap_worker: crate::workers::confine::WrapFn,
}
