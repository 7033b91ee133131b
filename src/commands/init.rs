//! `toolvisor init [--force]`: a commented starter `toolvisor.toml` and the state
//! directory's `.gitignore` (`*`), so the audit log, the socket and the artifacts stay
//! out of git from the start. An existing `toolvisor.toml` is kept unless `--force`.

use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::Path;

use crate::workspace::{CONFIG_NAME, Resolved};

/// The starter configuration (it parses to the defaults).
pub const STARTER: &str = include_str!("starter.toml");

pub fn run(r: &Resolved, force: bool) -> i32 {
    match init(r, force) {
        Ok(lines) => {
            for l in lines {
                println!("{l}");
            }
            println!("next: `toolvisor serve` here, then `toolvisor status` from another terminal");
            0
        }
        Err((code, why)) => {
            eprintln!("toolvisor: {why}");
            code
        }
    }
}

/// Write the files; what was done, line by line.
fn init(r: &Resolved, force: bool) -> Result<Vec<String>, (i32, String)> {
    let mut done = Vec::new();
    let config = r.workspace.join(CONFIG_NAME);
    let config = if r.explicit_config {
        r.config_file.clone()
    } else {
        config
    };
    write_config(&config, force)?;
    done.push(format!("wrote {}", config.display()));
    let state = &r.state_dir;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(state)
        .map_err(|e| (1, format!("cannot create {}: {e}", state.display())))?;
    toolvisor_supervisor::serve::state_dir::write_gitignore(state).map_err(|e| {
        (
            1,
            format!("cannot write {}/.gitignore: {e}", state.display()),
        )
    })?;
    done.push(format!(
        "{}/.gitignore keeps toolvisor's state out of git",
        state.display()
    ));
    Ok(done)
}

fn write_config(path: &Path, force: bool) -> Result<(), (i32, String)> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).mode(0o644);
    // The empty file serve writes where there was none is replaced like no file.
    let placeholder = std::fs::read_to_string(path)
        .is_ok_and(|t| toolvisor_supervisor::serve::config_file::is_placeholder(&t));
    if force || placeholder {
        opts.create(true).truncate(true);
    } else {
        opts.create_new(true);
    }
    let mut f = opts.open(path).map_err(|e| match e.kind() {
        std::io::ErrorKind::AlreadyExists => (
            1,
            format!(
                "{} exists; keeping it (`toolvisor init --force` replaces it)",
                path.display()
            ),
        ),
        _ => (1, format!("cannot write {}: {e}", path.display())),
    })?;
    f.write_all(STARTER.as_bytes())
        .map_err(|e| (1, format!("cannot write {}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use toolvisor_supervisor::config::Config;

    #[test]
    fn the_starter_is_the_defaults() {
        assert_eq!(
            Config::parse(STARTER, "starter").unwrap(),
            Config::default()
        );
    }

    #[test]
    fn every_commented_key_is_a_real_key() {
        // Uncommenting any example line must still give a valid configuration.
        let uncommented: String = STARTER
            .lines()
            .map(|l| {
                let t = l.trim_start();
                let code = t.strip_prefix("# ").unwrap_or(t);
                let looks_like_toml = code.starts_with('[')
                    || code
                        .split_once(" = ")
                        .is_some_and(|(k, _)| !k.contains(' '));
                if looks_like_toml { code } else { l }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let cfg = Config::parse(&uncommented, "uncommented")
            .unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
        assert_eq!(cfg.policy.rules.len(), 1);
    }
}
