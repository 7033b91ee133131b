//! What a repository's git configuration makes the person's own `git` run from the
//! workspace, outside any sandbox: the hooks directory (`core.hooksPath`), every file
//! the configuration includes (`include.path`, `includeIf.*.path`), and the workspace
//! files named by keys whose value is a program (`core.fsmonitor`, `core.sshCommand`,
//! filter, diff and merge drivers, credential helpers, `!` aliases, editors, pagers…).
//! The plan keeps each of them read-only for commands, and the edit tools refuse them,
//! as they do `.git/config` itself — otherwise one allowed command plants a hook or an
//! fsmonitor that runs the next time the person types `git status`.
//!
//! The configuration is read the way git reads it (sections, subsections, quoting,
//! escapes, continuations, includes relative to the including file, `~/` as `$HOME`),
//! through the plan's [`View`] so a spare sandbox notices an edited file (each file's
//! identity and change time are among its observations).

use std::path::{Path, PathBuf};

use super::plan::{Kind, View};

/// How deep includes are followed (git's own limit is 10).
const MAX_INCLUDE_DEPTH: usize = 10;
/// A configuration file larger than this is not read (git configs are a few KiB).
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Keys whose value is a program to run (lower-case `section.key`, the subsection
/// left out: `filter.lfs.clean` is `filter.clean`).
const PROGRAM_KEYS: [&str; 21] = [
    "core.fsmonitor",
    "core.sshcommand",
    "core.editor",
    "core.pager",
    "core.askpass",
    "core.hookspath",
    "credential.helper",
    "filter.clean",
    "filter.smudge",
    "filter.process",
    "diff.textconv",
    "diff.command",
    "diff.external",
    "merge.driver",
    "sequence.editor",
    "gpg.program",
    "interactive.difffilter",
    "web.browser",
    "browser.cmd",
    "browser.path",
    "uploadpack.packobjectshook",
];

/// What the configuration of the repository at `root` (a workspace root) makes git run
/// or read, as host paths inside `root`: `(path, kind)` where a `Dir` that is missing
/// is the hooks directory to make (so it cannot be planted) and anything else exists.
pub fn guarded(root: &Path, home: Option<&Path>, view: &dyn View) -> Vec<(PathBuf, Kind)> {
    let git = root.join(".git");
    if view.kind(&git) != Kind::Dir {
        return Vec::new();
    }
    let mut entries = Vec::new();
    let mut files = Vec::new();
    // The system's and the person's own configuration apply to this repository too (a
    // relative `core.hooksPath` there names a directory in every repository).
    let mut sources = vec![PathBuf::from("/etc/gitconfig")];
    if let Some(h) = home {
        sources.push(h.join(".gitconfig"));
        sources.push(h.join(".config/git/config"));
    }
    sources.push(git.join("config"));
    for f in &sources {
        read_config(f, home, view, 0, &mut entries, &mut files);
    }
    let mut out: Vec<(PathBuf, Kind)> = Vec::new();
    let mut add = |p: PathBuf, kind: Kind| {
        if p.starts_with(root) && p != root && !out.iter().any(|(q, _)| *q == p) {
            out.push((p, kind));
        }
    };
    // `.git/config` itself is guarded already.
    for f in files.into_iter().filter(|f| *f != git.join("config")) {
        let (f, k) = followed(f, view);
        if matches!(k, Kind::File | Kind::Dir) {
            add(f, k);
        }
    }
    for (key, value) in &entries {
        if key == "core.hookspath" {
            let (dir, k) = followed(resolve(value.trim(), root, home), view);
            if matches!(k, Kind::Dir | Kind::Missing) {
                add(dir, Kind::Dir);
            }
            continue;
        }
        let program =
            PROGRAM_KEYS.contains(&key.as_str()) || (key == "alias" && value.starts_with('!'));
        if !program {
            continue;
        }
        for word in words(value.trim_start_matches('!')) {
            let (p, k) = followed(resolve(&word, root, home), view);
            if matches!(k, Kind::File | Kind::Dir) {
                add(p, k);
            }
        }
    }
    for name in [".husky", ".githooks"] {
        let (p, k) = followed(root.join(name), view);
        if k == Kind::Dir {
            add(p, Kind::Dir);
        }
    }
    out
}

/// What [`guarded`] finds under each of `roots` now, relative to its root: for the
/// edit tools, which refuse these names like the built-in protected ones.
pub fn guarded_names(roots: &[&Path], home: Option<&Path>) -> Vec<PathBuf> {
    let view = super::plan::HostView;
    let mut out = Vec::new();
    for root in roots {
        for (p, _) in guarded(root, home, &view) {
            if let Ok(rel) = p.strip_prefix(root) {
                out.push(rel.to_path_buf());
            }
        }
    }
    out
}

/// `value` as a path the way git takes one: `~/` under HOME, relative under `base`;
/// `.` and `..` taken away lexically (a `..` must not make a path outside look inside).
fn resolve(value: &str, base: &Path, home: Option<&Path>) -> PathBuf {
    let joined = match (value.strip_prefix("~/"), home) {
        (Some(rest), Some(h)) => h.join(rest),
        _ => base.join(value),
    };
    let mut out = PathBuf::from("/");
    for c in joined.components() {
        match c {
            std::path::Component::Normal(n) => out.push(n),
            std::path::Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// What is at `p`, a symlink followed to where it leads (a mount on the link's own
/// path would leave its target writable).
fn followed(p: PathBuf, view: &dyn View) -> (PathBuf, Kind) {
    match view.kind(&p) {
        Kind::Symlink => match view.target(&p) {
            Some(t) => {
                let k = view.kind(&t);
                (t, k)
            }
            None => (p, Kind::Missing),
        },
        k => (p, k),
    }
}

/// The words of a shell command line (quotes removed; good enough to find the file
/// names in it, and a word that is not a path names nothing).
fn words(cmd: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in cmd.chars() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, c) if c.is_whitespace() || ";|&()<>".contains(c) => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            (_, c) => cur.push(c),
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Read one configuration file into `entries` (`section.key` lower-case, the
/// subsection dropped; `alias.NAME` kept as `alias`), following its includes.
fn read_config(
    file: &Path,
    home: Option<&Path>,
    view: &dyn View,
    depth: usize,
    entries: &mut Vec<(String, String)>,
    files: &mut Vec<PathBuf>,
) {
    if depth > MAX_INCLUDE_DEPTH || files.contains(&file.to_path_buf()) {
        return;
    }
    if view.kind(file) != Kind::File {
        return;
    }
    files.push(file.to_path_buf());
    let Some(text) = view.read(file, MAX_CONFIG_BYTES) else {
        return;
    };
    let dir = file.parent().unwrap_or(Path::new("/"));
    for (section, key, value) in parse(&text) {
        let include = key == "path" && (section == "include" || section == "includeif");
        if include {
            let target = resolve(&value, dir, home);
            read_config(&target, home, view, depth + 1, entries, files);
            continue;
        }
        let name = match section.as_str() {
            "alias" => "alias".to_owned(),
            _ => format!("{section}.{key}"),
        };
        entries.push((name, value));
    }
}

/// `(section, key, value)` of every variable in a git configuration text: section
/// and key lower-case, the subsection left out, the value unquoted and unescaped. A
/// key without `=` is a boolean true.
pub fn parse(text: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let mut line = line.trim_start().to_owned();
        if line.starts_with('[') {
            let Some(end) = line.find(']') else { continue };
            let head = &line[1..end];
            let name = head.split(['"', ' ', '\t', '.']).next().unwrap_or("");
            section = name.trim().to_lowercase();
            line = line[end + 1..].trim_start().to_owned();
            if line.is_empty() {
                continue;
            }
        }
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        let (key, rest) = match line.find('=') {
            Some(i) => (line[..i].trim().to_lowercase(), line[i + 1..].to_owned()),
            None => {
                let key = line.split([' ', '\t', '#', ';']).next().unwrap_or("");
                out.push((section.clone(), key.to_lowercase(), "true".to_owned()));
                continue;
            }
        };
        let mut raw = rest;
        // A value continues on the next line after a backslash at its end.
        while raw.trim_end().ends_with('\\') && !raw.trim_end().ends_with("\\\\") {
            let trimmed = raw.trim_end();
            raw = trimmed[..trimmed.len() - 1].to_owned();
            match lines.next() {
                Some(next) => raw.push_str(next),
                None => break,
            }
        }
        out.push((section.clone(), key, unquote(&raw)));
    }
    out
}

/// A value as git reads it: quotes removed, `\"`, `\\`, `\n`, `\t` unescaped, a
/// comment (`#`, `;`) outside quotes ending it, surrounding blanks dropped.
fn unquote(raw: &str) -> String {
    let mut out = String::new();
    let mut quoted = false;
    let mut chars = raw.trim().chars();
    while let Some(c) = chars.next() {
        match c {
            '"' => quoted = !quoted,
            '\\' => match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('b') => {
                    out.pop();
                }
                Some(o) => out.push(o),
                None => {}
            },
            '#' | ';' if !quoted => break,
            c => out.push(c),
        }
    }
    out.trim_end().to_owned()
}

#[cfg(test)]
mod tests {
    use super::super::plan::HostView;
    use super::*;

    #[test]
    fn a_config_is_read_as_git_reads_it() {
        let text = "[core]\n\thooksPath = .husky/_ # husky\n  fsmonitor = \"tools/fsmon.sh\"\n\
                    [filter \"lfs\"]\n\tclean = git-lfs clean -- %f\n[alias]\n\tst = !./scripts/st.sh --x\n\
                    [include]\n\tpath = ../shared.gitconfig\n[diff \"bin\"] textconv = ./conv \\\n  --flag\n\
                    [bare]\n";
        let got = parse(text);
        let has =
            |s: &str, k: &str, v: &str| got.iter().any(|e| e == &(s.into(), k.into(), v.into()));
        assert!(has("core", "hookspath", ".husky/_"), "{got:?}");
        assert!(has("core", "fsmonitor", "tools/fsmon.sh"), "{got:?}");
        assert!(has("filter", "clean", "git-lfs clean -- %f"), "{got:?}");
        assert!(has("alias", "st", "!./scripts/st.sh --x"), "{got:?}");
        assert!(has("include", "path", "../shared.gitconfig"), "{got:?}");
        assert!(has("diff", "textconv", "./conv   --flag"), "{got:?}");
    }

    #[test]
    fn hooks_includes_and_programs_in_the_workspace_are_guarded() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(r.join(".git")).unwrap();
        std::fs::create_dir_all(r.join("tools")).unwrap();
        std::fs::create_dir_all(r.join(".githooks")).unwrap();
        std::fs::write(r.join("tools/fsmon.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(r.join("tools/cred.sh"), "#!/bin/sh\n").unwrap();
        std::fs::write(
            r.join(".git/config"),
            "[core]\n\thooksPath = .husky/_\n\tfsmonitor = tools/fsmon.sh\n[include]\n\tpath = ../project.gitconfig\n",
        )
        .unwrap();
        std::fs::write(
            r.join("project.gitconfig"),
            "[credential]\n\thelper = !tools/cred.sh get\n[alias]\n\tx = !sh -c 'echo hi'\n",
        )
        .unwrap();
        let got = guarded(&r, None, &HostView);
        let paths: Vec<&PathBuf> = got.iter().map(|(p, _)| p).collect();
        assert!(paths.contains(&&r.join("project.gitconfig")), "{got:?}");
        assert!(
            got.contains(&(r.join(".husky/_"), Kind::Dir)),
            "missing: made: {got:?}"
        );
        assert!(paths.contains(&&r.join("tools/fsmon.sh")), "{got:?}");
        assert!(paths.contains(&&r.join("tools/cred.sh")), "{got:?}");
        assert!(paths.contains(&&r.join(".githooks")), "{got:?}");
        assert!(
            !paths.contains(&&r.join(".git/config")),
            "guarded already: {got:?}"
        );
        assert!(!paths.iter().any(|p| !p.starts_with(&r)), "{got:?}");
    }

    #[test]
    fn includes_that_loop_or_leave_the_workspace_end() {
        let d = tempfile::tempdir().unwrap();
        let r = d.path().canonicalize().unwrap();
        std::fs::create_dir_all(r.join(".git")).unwrap();
        std::fs::write(
            r.join(".git/config"),
            "[include]\n\tpath = ../a.cfg\n\tpath = /etc/hostname\n",
        )
        .unwrap();
        std::fs::write(
            r.join("a.cfg"),
            "[include]\n\tpath = .git/config\n\tpath = a.cfg\n",
        )
        .unwrap();
        let got = guarded(&r, None, &HostView);
        assert_eq!(got, vec![(r.join("a.cfg"), Kind::File)]);
    }
}
