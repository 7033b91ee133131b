//! The state directory: created 0700 with a `.gitignore` of `*`, held with an exclusive
//! `flock` so one supervisor serves a workspace, with the pidfile and the socket inside
//! (or, when the path would pass the 107-byte limit of Unix sockets, in the runtime
//! directory).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};

/// Longest path a Unix socket address holds.
const SUN_PATH_MAX: usize = 107;

/// Why `serve` cannot take the state directory (it then exits 1).
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// It cannot be created or set up.
    #[error("cannot prepare the state directory {path}: {source}")]
    Dir {
        /// The directory.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// Someone else's, or not a plain directory: using it would hand them the socket
    /// and the audit log.
    #[error(
        "the state directory {path} is not ours, not a directory, or a symlink (owner uid {uid}, we are {me}); refusing to use it"
    )]
    NotOurs {
        /// The directory.
        path: String,
        /// Its owner.
        uid: u32,
        /// This process's uid.
        me: u32,
    },
    /// Another supervisor holds the lock: two would share one audit chain.
    #[error("another toolvisor is already serving this workspace (lock {path} is held{pid})")]
    Locked {
        /// The lock file.
        path: String,
        /// ` by pid N` when the pid file says so, else empty.
        pid: String,
    },
    /// The socket cannot be bound.
    #[error("cannot bind the socket {path}: {source}")]
    Bind {
        /// The socket path.
        path: String,
        /// Why.
        source: std::io::Error,
    },
}

/// The locked state directory. Dropping it releases the lock.
#[derive(Debug)]
pub struct StateDir {
    /// The directory (created mode 0700 if it was missing).
    pub dir: PathBuf,
    /// Where the socket is bound.
    pub socket: PathBuf,
    /// The file naming the serving pid (for the `Locked` message of a second one).
    pub pidfile: PathBuf,
    _lock: Flock<File>,
}

/// Where the socket of a workspace's state directory lives: inside it, or, when that
/// path is too long for a Unix socket, `$XDG_RUNTIME_DIR` (or `/tmp`) under a name
/// made of the first 16 hex digits of the SHA-256 of the workspace path.
pub fn socket_path(state_dir: &Path, workspace: &Path) -> PathBuf {
    let inside = state_dir.join("toolvisor.sock");
    if inside.as_os_str().len() <= SUN_PATH_MAX {
        return inside;
    }
    let digest = Sha256::digest(workspace.as_os_str().as_encoded_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    let base = std::env::var_os("XDG_RUNTIME_DIR")
        .map(PathBuf::from)
        .filter(|p| p.is_dir())
        .unwrap_or_else(|| PathBuf::from("/tmp"));
    base.join(format!("toolvisor-{hex}.sock"))
}

/// What `.gitignore` in the state directory says: everything in it stays out of git (an
/// agent's `git add -A` must not commit the audit log or the socket).
pub const GITIGNORE: &str =
    "# toolvisor's state: sockets, the audit log, artifacts. Never commit it.\n*\n";

/// Write `<dir>/.gitignore` unless one is there (a user's own is left alone).
pub fn write_gitignore(dir: &Path) -> std::io::Result<()> {
    let path = dir.join(".gitignore");
    match OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)
    {
        Ok(mut f) => f.write_all(GITIGNORE.as_bytes()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(e),
    }
}

impl StateDir {
    /// Create (0700) and lock the state directory; refuse if another instance holds it.
    pub fn acquire(dir: &Path, workspace: &Path) -> Result<StateDir, StateError> {
        let derr = |source| StateError::Dir {
            path: dir.display().to_string(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(derr)?;
        let meta = std::fs::symlink_metadata(dir).map_err(derr)?;
        let me = nix::unistd::getuid().as_raw();
        use std::os::unix::fs::MetadataExt;
        if !meta.is_dir() || meta.uid() != me {
            return Err(StateError::NotOurs {
                path: dir.display().to_string(),
                uid: meta.uid(),
                me,
            });
        }
        if meta.permissions().mode() & 0o077 != 0 {
            tracing::warn!(
                "the state directory {} was mode {:o}; setting it to 0700",
                dir.display(),
                meta.permissions().mode() & 0o7777
            );
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(derr)?;
        }
        write_gitignore(dir).map_err(derr)?;
        std::fs::create_dir_all(dir.join("artifacts")).map_err(derr)?;
        let lock_path = dir.join("lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(derr)?;
        let pidfile = dir.join("toolvisor.pid");
        let lock =
            Flock::lock(file, FlockArg::LockExclusiveNonblock).map_err(|_| StateError::Locked {
                path: lock_path.display().to_string(),
                pid: std::fs::read_to_string(&pidfile)
                    .map(|p| format!(" by pid {}", p.trim()))
                    .unwrap_or_default(),
            })?;
        let dir = dir.canonicalize().map_err(derr)?;
        Ok(StateDir {
            socket: socket_path(&dir, workspace),
            pidfile,
            dir,
            _lock: lock,
        })
    }

    /// Write our pid (replacing any stale pidfile: we hold the lock).
    pub fn write_pidfile(&self) -> std::io::Result<()> {
        let tmp = self.dir.join("toolvisor.pid.tmp");
        let mut f = OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)?;
        writeln!(f, "{}", std::process::id())?;
        std::fs::rename(tmp, &self.pidfile)
    }

    /// Bind the socket 0600 from the first moment. Under the lock, a leftover file is
    /// a dead instance's socket and is replaced.
    pub fn bind(&self, socket: &Path) -> Result<tokio::net::UnixListener, StateError> {
        let berr = |source| StateError::Bind {
            path: socket.display().to_string(),
            source,
        };
        match std::fs::symlink_metadata(socket) {
            Ok(m) if m.file_type().is_symlink() || m.is_dir() => {
                return Err(berr(std::io::Error::other(
                    "the socket path is a symlink or a directory",
                )));
            }
            Ok(m) => {
                use std::os::unix::fs::FileTypeExt;
                if m.file_type().is_socket() {
                    tracing::info!("replacing a dead instance's socket {}", socket.display());
                } else {
                    tracing::warn!(
                        "removing a file that is not a socket at {}",
                        socket.display()
                    );
                }
                std::fs::remove_file(socket).map_err(berr)?
            }
            Err(_) => {}
        }
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
        let bound = std::os::unix::net::UnixListener::bind(socket);
        nix::sys::stat::umask(old);
        let std_listener = bound.map_err(berr)?;
        std_listener.set_nonblocking(true).map_err(berr)?;
        tokio::net::UnixListener::from_std(std_listener).map_err(berr)
    }

    /// Remove the socket and the pidfile (clean shutdown).
    pub fn cleanup(&self) {
        let _ = std::fs::remove_file(&self.socket);
        let _ = std::fs::remove_file(&self.pidfile);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_instance_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".toolvisor");
        let first = StateDir::acquire(&dir, tmp.path()).unwrap();
        first.write_pidfile().unwrap();
        let err = StateDir::acquire(&dir, tmp.path()).unwrap_err();
        assert!(matches!(err, StateError::Locked { .. }), "{err}");
        assert!(err.to_string().contains(&std::process::id().to_string()));
        drop(first);
        StateDir::acquire(&dir, tmp.path()).unwrap();
    }

    #[test]
    fn state_dir_is_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("st");
        let _s = StateDir::acquire(&dir, tmp.path()).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn the_state_dir_keeps_itself_out_of_git() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(".toolvisor");
        drop(StateDir::acquire(&dir, tmp.path()).unwrap());
        let ignore = dir.join(".gitignore");
        assert_eq!(std::fs::read_to_string(&ignore).unwrap(), GITIGNORE);
        assert!(GITIGNORE.lines().any(|l| l == "*"));
        // A user's own file is left as it is.
        std::fs::write(&ignore, "audit.jsonl\n").unwrap();
        drop(StateDir::acquire(&dir, tmp.path()).unwrap());
        assert_eq!(std::fs::read_to_string(&ignore).unwrap(), "audit.jsonl\n");
    }

    #[test]
    fn long_paths_put_the_socket_in_the_runtime_dir() {
        let long = PathBuf::from("/tmp").join("x".repeat(120));
        let p = socket_path(&long, Path::new("/w"));
        assert!(p.as_os_str().len() <= SUN_PATH_MAX, "{}", p.display());
        assert!(
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("toolvisor-")
        );
    }
}
