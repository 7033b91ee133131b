//! Where a command's workspace, config file, state directory and socket are.
//!
//! Client commands run from anywhere inside a workspace: without `--workspace` they
//! take the nearest ancestor of the current directory that has a `toolvisor.toml` or a
//! served `.toolvisor/` (one holding a `lock` or a socket). `serve` and `init` take the
//! current directory itself: a workspace is never widened by accident.
//!
//! Reaching a running daemon needs only its socket, so client commands do not parse the
//! whole configuration: they read `server.state_dir` alone, and a file that does not
//! even parse as TOML gives the default state directory with a note on stderr. The
//! daemon keeps serving on its last good configuration meanwhile, and `status`,
//! `audit verify` and `mcp` must still reach it.

use std::path::{Path, PathBuf};

use toolvisor_supervisor::config::Config;

/// The config file's name in a workspace.
pub const CONFIG_NAME: &str = "toolvisor.toml";
/// The default state directory's name in a workspace.
pub const STATE_NAME: &str = ".toolvisor";

/// How the workspace is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discovery {
    /// The current directory (or `--workspace`) as it is: `serve`, `init`.
    Here,
    /// The nearest workspace at or above the current directory: client commands.
    Nearest,
}

/// Where the pieces are, resolved from the flags.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub workspace: PathBuf,
    pub config_file: PathBuf,
    /// `--config` was given (a local `policy explain` then decides under it).
    pub explicit_config: bool,
    pub state_dir: PathBuf,
    pub socket: PathBuf,
    pub explicit_socket: Option<PathBuf>,
    /// Said once on stderr by client commands: the config file has a mistake, so the
    /// state directory may be a guess (`serve` reports the mistake itself, and stops).
    pub note: Option<String>,
}

impl Resolved {
    /// The whole configuration, strictly checked (for `serve` and a local
    /// `policy explain`): a bad file is an error naming the key and line.
    pub fn config(&self) -> Result<Config, String> {
        Config::load(&self.config_file).map_err(|e| e.to_string())
    }
}

/// Resolve `--workspace`, `--config` and `--socket` (each optional).
pub fn resolve(
    workspace: Option<&Path>,
    config: Option<&Path>,
    socket: Option<&Path>,
    how: Discovery,
) -> Result<Resolved, String> {
    let workspace = match (workspace, how) {
        (Some(ws), _) => canonical(ws)?,
        (None, Discovery::Here) => canonical(Path::new("."))?,
        (None, Discovery::Nearest) => {
            let here = canonical(Path::new("."))?;
            nearest(&here).unwrap_or(here)
        }
    };
    let config_file = config.map_or_else(|| workspace.join(CONFIG_NAME), Path::to_owned);
    if config.is_some() && !config_file.exists() {
        return Err(format!(
            "config file {} does not exist",
            config_file.display()
        ));
    }
    let (state_dir, note) = state_dir_of(&config_file);
    let state_dir = absolute(&workspace, &state_dir);
    let state_dir = state_dir.canonicalize().unwrap_or(state_dir);
    let socket_path = socket.map_or_else(
        || toolvisor_supervisor::serve::state_dir::socket_path(&state_dir, &workspace),
        Path::to_owned,
    );
    Ok(Resolved {
        workspace,
        config_file,
        explicit_config: config.is_some(),
        state_dir,
        socket: socket_path,
        explicit_socket: socket.map(Path::to_owned),
        note,
    })
}

fn canonical(p: &Path) -> Result<PathBuf, String> {
    p.canonicalize()
        .map_err(|e| format!("workspace {}: {e}", p.display()))
}

fn absolute(base: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_owned()
    } else {
        base.join(p)
    }
}

/// The nearest directory at or above `dir` that is a workspace.
pub fn nearest(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| is_workspace(d))
        .map(Path::to_owned)
}

/// A directory with a config file, or with a state directory a daemon has served.
fn is_workspace(d: &Path) -> bool {
    let state = d.join(STATE_NAME);
    d.join(CONFIG_NAME).is_file()
        || (state.is_dir()
            && (state.join("lock").exists() || state.join("toolvisor.sock").exists()))
}

/// `server.state_dir` from the config file, read leniently: the default when the file
/// is missing or does not say; the default and a note when it cannot be read.
pub fn state_dir_of(config_file: &Path) -> (PathBuf, Option<String>) {
    let default = PathBuf::from(STATE_NAME);
    let text = match std::fs::read_to_string(config_file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (default, None),
        Err(e) => {
            let note = format!(
                "cannot read {} ({e}); looking for the daemon in the default state directory",
                config_file.display()
            );
            return (default, Some(note));
        }
    };
    match lenient_state_dir(&text) {
        Ok(Some(dir)) => (dir, broken_note(&text, config_file)),
        Ok(None) => (default, broken_note(&text, config_file)),
        Err(why) => {
            let note = format!(
                "{} is not valid TOML ({why}); looking for the daemon in the default state directory {STATE_NAME}/",
                config_file.display()
            );
            (default, Some(note))
        }
    }
}

/// `server.state_dir` of a TOML text that may be wrong elsewhere; `Err` when the text
/// is not TOML at all.
fn lenient_state_dir(text: &str) -> Result<Option<PathBuf>, String> {
    let table: toml::Table = text
        .parse()
        .map_err(|e: toml::de::Error| e.message().trim().to_owned())?;
    Ok(table
        .get("server")
        .and_then(|s| s.get("state_dir"))
        .and_then(|v| v.as_str())
        .map(PathBuf::from))
}

/// A note when the file parses as TOML but not as a configuration: the daemon keeps
/// its last good one, and the next SIGHUP would be refused.
fn broken_note(text: &str, path: &Path) -> Option<String> {
    let err = Config::parse(text, &path.display().to_string()).err()?;
    Some(format!(
        "{err} — a running daemon keeps its last good configuration until this is fixed (then SIGHUP)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_nearest_workspace_is_found_from_below() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().canonicalize().unwrap();
        let deep = ws.join("a/b/c");
        std::fs::create_dir_all(&deep).unwrap();
        assert_eq!(
            nearest(&deep),
            nearest(&ws),
            "nothing below the temp dir yet"
        );
        std::fs::write(ws.join(CONFIG_NAME), "").unwrap();
        assert_eq!(nearest(&deep), Some(ws.clone()));
        // A served state directory marks a workspace too; an empty one does not.
        let inner = ws.join("a");
        std::fs::create_dir_all(inner.join(STATE_NAME)).unwrap();
        assert_eq!(nearest(&deep), Some(ws.clone()));
        std::fs::write(inner.join(STATE_NAME).join("lock"), "").unwrap();
        assert_eq!(nearest(&deep), Some(inner));
    }

    #[test]
    fn a_broken_config_still_names_its_state_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = tmp.path().join(CONFIG_NAME);
        assert_eq!(state_dir_of(&cfg), (PathBuf::from(STATE_NAME), None));
        std::fs::write(&cfg, "[server]\nstate_dir = \"/run/tv\"\n").unwrap();
        assert_eq!(state_dir_of(&cfg), (PathBuf::from("/run/tv"), None));
        // A typo elsewhere: the state dir still counts, and a note says what is wrong.
        std::fs::write(
            &cfg,
            "[server]\nstate_dir = \"st\"\n[policy]\nmode = \"autoo\"\n",
        )
        .unwrap();
        let (dir, note) = state_dir_of(&cfg);
        assert_eq!(dir, PathBuf::from("st"));
        let note = note.unwrap();
        assert!(
            note.contains("autoo") && note.contains("last good"),
            "{note}"
        );
        // Not TOML at all: the default, and a note.
        std::fs::write(&cfg, "[server\nstate_dir = 3").unwrap();
        let (dir, note) = state_dir_of(&cfg);
        assert_eq!(dir, PathBuf::from(STATE_NAME));
        assert!(note.unwrap().contains("not valid TOML"));
    }
}
