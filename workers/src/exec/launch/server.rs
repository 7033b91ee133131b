//! A long-lived process the daemon starts from its config — an MCP server, an external
//! worker — in the command sandbox: the `toolvisor reap` command line that runs it,
//! built by the launcher every command goes through ([`ShimLauncher`]), with the same
//! view (roots and `workers.exec.writable` writable, the rest read-only, protected and
//! hidden paths, the state directory and socket hidden, a private `/tmp`), the same
//! limits except CPU time (a server lives as long as the daemon), and only `lo` unless
//! `network`. The shim kills the process's whole tree when its parent dies.

use std::path::{Path, PathBuf};

use toolvisor_protocol::worker::WorkerInit;

use super::{ShimFds, ShimLauncher};
use crate::reap::ShimArgsError;

/// Why a server cannot be started in the sandbox.
#[derive(Debug, thiserror::Error)]
pub enum ServerSandboxError {
    /// The host cannot build the sandbox (no user namespaces).
    #[error(
        "it cannot run in the command sandbox on this host ({0}); it is not started (`sandbox = \"off\"` in its section runs it unsandboxed)"
    )]
    Refused(String),
    /// The command line is empty.
    #[error("the command is empty")]
    NoCommand,
    /// The shim's arguments do not serialise.
    #[error("cannot write the reap shim's arguments: {0}")]
    Args(#[from] ShimArgsError),
}

/// What to run in the sandbox.
#[derive(Clone, Copy, Debug)]
pub struct ServerSpec<'a> {
    /// The program and its arguments.
    pub argv: &'a [String],
    /// Give it the host's network (else only `lo`).
    pub network: bool,
    /// Descriptors it keeps besides 0, 1 and 2 (an external worker's fd 3).
    pub keep_fds: &'a [i32],
}

/// The whole command line (program first) that runs `spec` under the reap shim in the
/// command sandbox `init` describes, its working directory the workspace. The caller
/// starts it with the environment the server gets, its working directory the
/// workspace, and nothing past fd 2 but `keep_fds`.
pub fn command_line(
    init: &WorkerInit,
    spec: ServerSpec<'_>,
) -> Result<Vec<String>, ServerSandboxError> {
    if let Some(why) = &init.exec.sandbox.refused {
        return Err(ServerSandboxError::Refused(why.clone()));
    }
    if spec.argv.is_empty() {
        return Err(ServerSandboxError::NoCommand);
    }
    let launcher = ShimLauncher::for_init(init, false, true);
    let cwd = workspace(init);
    let none = ShimFds {
        report: None,
        control: None,
        netns: None,
    };
    let mut a = launcher.args(
        (&init.exec.instance, &cwd, spec.network),
        none,
        (None, &super::Widen::default()),
    );
    if let Some(s) = a.sandbox.as_mut() {
        // Not `workers.exec.network`: the server's own word.
        s.network = spec.network;
        s.shown = program_dirs(spec.argv, &cwd);
    }
    a.rlimits.cpu_s = None;
    a.keep_fds = spec.keep_fds.to_vec();
    a.argv = spec.argv.to_vec();
    let mut out = vec![launcher.program.to_string_lossy().into_owned()];
    out.extend(
        launcher
            .prefix
            .iter()
            .map(|p| p.to_string_lossy().into_owned()),
    );
    out.extend(a.to_args()?);
    Ok(out)
}

/// The directories of the files the command line names (its program, a script) that
/// lie in the private `/tmp` or `/run`, which would otherwise hide them: they are shown
/// read-only. A program found on `PATH` is outside them, or it is not shown either.
fn program_dirs(argv: &[String], cwd: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for word in argv {
        let p = Path::new(word);
        if !(p.is_absolute() || word.contains('/')) {
            continue;
        }
        let abs = cwd.join(p);
        let Ok(real) = abs.canonicalize() else {
            continue;
        };
        let Some(dir) = real.parent().filter(|_| real.is_file()) else {
            continue;
        };
        let private = dir.starts_with("/tmp") || dir.starts_with("/run");
        if private
            && dir != Path::new("/tmp")
            && dir != Path::new("/run")
            && !out.iter().any(|o| o == dir)
        {
            out.push(dir.to_path_buf());
        }
    }
    out
}

/// The workspace, canonical (the sandbox checks it enters the same directory).
fn workspace(init: &WorkerInit) -> PathBuf {
    let p = &init.roots.private;
    p.canonicalize().unwrap_or_else(|_| p.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_in_the_private_tmp_are_shown_and_others_not() {
        let d = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
        let prog = d.path().join("bin/server");
        std::fs::create_dir_all(prog.parent().unwrap()).unwrap();
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        let argv = vec![
            prog.to_string_lossy().into_owned(),
            "--flag".into(),
            "python3".into(),
        ];
        let real = prog.parent().unwrap().canonicalize().unwrap();
        assert_eq!(program_dirs(&argv, Path::new("/")), [real]);
        let argv = vec!["/bin/sh".to_owned(), "-c".into(), "x".into()];
        assert!(program_dirs(&argv, Path::new("/")).is_empty());
    }
    use crate::reap::parse;

    fn init() -> WorkerInit {
        use toolvisor_protocol::worker::{ExecSettings, Roots};
        let mut exec = ExecSettings {
            exe: "/bin/toolvisor".into(),
            ..ExecSettings::default()
        };
        exec.sandbox.network = true;
        exec.sandbox.limits.cpu_s = 5;
        WorkerInit {
            group: "mcp:s".into(),
            index: 0,
            roots: Roots {
                private: "/w".into(),
                shared: None,
                public: None,
            },
            protected: vec![],
            state_dir: "/w/.toolvisor".into(),
            limits: Default::default(),
            exec,
            generation: 0,
            web: Default::default(),
            skills: Default::default(),
            mcp: None,
        }
    }

    #[test]
    fn a_server_runs_under_the_shim_in_the_sandbox() {
        let argv = ["python3".to_string(), "w.py".into()];
        let spec = ServerSpec {
            argv: &argv,
            network: false,
            keep_fds: &[3],
        };
        let line = command_line(&init(), spec).unwrap();
        assert_eq!(line[..2], ["/bin/toolvisor", "reap"]);
        let a = parse(line[2..].to_vec()).unwrap();
        assert_eq!(a.argv, argv);
        assert_eq!(a.keep_fds, [3]);
        assert!(a.confine);
        assert_eq!(a.rlimits.cpu_s, None);
        let s = a.sandbox.unwrap();
        assert!(!s.network, "workers.exec.network is not the server's");
        assert_eq!(s.cwd, PathBuf::from("/w"));
        let on = ServerSpec {
            network: true,
            ..spec
        };
        let a = parse(command_line(&init(), on).unwrap()[2..].to_vec()).unwrap();
        assert!(a.sandbox.unwrap().network);
    }

    #[test]
    fn no_sandbox_no_start() {
        let mut i = init();
        i.exec.sandbox.refused = Some("no user namespaces".into());
        let spec = ServerSpec {
            argv: &["x".to_string()],
            network: false,
            keep_fds: &[],
        };
        let e = command_line(&i, spec).unwrap_err().to_string();
        assert!(
            e.contains("no user namespaces") && e.contains("sandbox = \"off\""),
            "{e}"
        );
        let empty = ServerSpec { argv: &[], ..spec };
        assert!(command_line(&init(), empty).is_err());
    }
}
