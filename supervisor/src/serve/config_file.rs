//! A workspace served without a `toolvisor.toml` gets an empty one at start.
//!
//! The config file is protected from commands and edit tools, but a protection is a
//! read-only mount of a file that exists: were the file missing, a command could create
//! it, and the next reload (or start) would read the policy an agent wrote. An empty
//! file means exactly what a missing one means (every default), and once it exists it
//! is covered like any config. `toolvisor init` replaces this placeholder without
//! `--force`.

use std::io::Write;
use std::path::Path;

/// What the placeholder holds: a comment, so it parses as the defaults.
pub const PLACEHOLDER: &str = "# toolvisor: every setting at its default. `toolvisor init --force` writes a \
commented starter; docs/CONFIG.md names every key.\n";

/// Create `config_file` holding [`PLACEHOLDER`] when it does not exist. Whether it was
/// created; an error when it could not be (then commands may plant one: said at start).
pub fn ensure(config_file: &Path) -> std::io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let created = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(config_file);
    match created {
        Ok(mut f) => {
            f.write_all(PLACEHOLDER.as_bytes())?;
            f.sync_all()?;
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether `text` is the placeholder (nobody edited it since serve wrote it).
pub fn is_placeholder(text: &str) -> bool {
    text == PLACEHOLDER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_once_and_read_as_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("toolvisor.toml");
        assert!(ensure(&p).unwrap());
        assert!(!ensure(&p).unwrap(), "an existing file is left alone");
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(is_placeholder(&text));
        assert_eq!(
            crate::config::Config::parse(&text, "t").unwrap(),
            crate::config::Config::default()
        );
    }
}
