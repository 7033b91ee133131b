//! The check of git: the global options that run programs or move the repository,
//! the subcommands that run commands or hooks, and `config` that writes.

use super::options::*;
use super::*;

pub(super) fn git(a: &Args<'_>, f: &mut Findings) {
    let t: Vec<&str> = a.texts().collect();
    let mut i = 0;
    while let Some(&w) = t.get(i) {
        i += 1;
        if !w.starts_with('-') {
            i -= 1;
            break;
        }
        match w {
            "-c" | "--config-env" => {
                f.arg(format!("git {w}"));
                i += 1;
            }
            "-C" | "--work-tree" => {
                if a.outside(a.words.get(i)) {
                    f.arg(format!("git {w} outside the workspace"));
                }
                i += 1;
            }
            "--git-dir" => {
                f.arg("git --git-dir");
                i += 1;
            }
            "--namespace" | "--super-prefix" | "--list-cmds" => i += 1,
            w if w.starts_with("-c") && !w.starts_with("--") => f.arg("git -c"),
            w if w.starts_with("--config-env=") => f.arg("git --config-env"),
            w if w.starts_with("--exec-path=") => f.arg("git --exec-path"),
            w if w.starts_with("--git-dir=") => f.arg("git --git-dir"),
            w if w.starts_with("--work-tree=") && a.outside_text(&w["--work-tree=".len()..]) => {
                f.arg("git --work-tree outside the workspace");
            }
            _ => {}
        }
    }
    let sub = t.get(i).copied().unwrap_or("");
    let rest = t.get(i + 1..).unwrap_or(&[]);
    const LONG: &[&str] = &[
        "upload-pack",
        "receive-pack",
        "exec",
        "extcmd",
        "output",
        "output-directory",
        "open-files-in-pager",
        "template",
        "sendmail-cmd",
        "smtp-server",
        "to-cmd",
        "cc-cmd",
        "header-cmd",
        "httpd",
        "browser",
        "access-hook",
        "unsafe-paths",
    ];
    for w in rest {
        if let Some(long) = w.strip_prefix("--") {
            let name = long.split('=').next().unwrap_or(long);
            if let Some(h) = LONG.iter().find(|h| abbreviates(name, h)) {
                f.arg(format!("git --{h}"));
            }
            if sub == "clone" && abbreviates(name, "config") {
                f.arg("git clone --config");
            }
        } else if let Some(cluster) = w.strip_prefix('-') {
            let letter = |c: char| cluster.starts_with(c);
            let found = match sub {
                "clone" | "ls-remote" if letter('u') => Some("-u"),
                "clone" if letter('c') => Some("-c"),
                "rebase" if cluster.contains('x') => Some("-x"),
                "format-patch" | "archive" if letter('o') => Some("-o"),
                "grep" if letter('O') => Some("-O"),
                _ => None,
            };
            if let Some(o) = found {
                f.arg(format!("git {sub} {o}"));
            }
        }
    }
    if t.iter().any(|w| w.contains("ext::")) {
        f.arg("git ext:: URL");
    }
    match sub {
        "config" if git_config_writes(rest) => f.arg("git config"),
        "filter-branch" | "difftool" | "mergetool" | "instaweb" | "web--browse" | "remote-ext"
        | "daemon" => f.arg(format!("git {sub}")),
        "submodule" if rest.contains(&"foreach") => f.arg("git submodule foreach"),
        "bisect" if rest.first() == Some(&"run") => f.arg("git bisect run"),
        _ => {}
    }
}

/// `git config` that only reads (`--get`, `--list`, `get`, `list`).
pub(super) fn git_config_writes(rest: &[&str]) -> bool {
    const READ: &[&str] = &[
        "--get",
        "--get-all",
        "--get-regexp",
        "--get-urlmatch",
        "--get-color",
        "--get-colorbool",
        "-l",
        "--list",
    ];
    const EDIT: &[&str] = &[
        "-e",
        "--edit",
        "--add",
        "--unset",
        "--unset-all",
        "--replace-all",
        "--rename-section",
        "--remove-section",
    ];
    // Options whose value is the next word.
    const VALUED: &[&str] = &["-f", "--file", "--blob", "--type", "--default", "--comment"];
    let mut positional = Vec::new();
    let mut it = rest.iter();
    while let Some(w) = it.next() {
        if VALUED.contains(w) {
            it.next();
        } else if !w.starts_with('-') {
            positional.push(*w);
        }
    }
    if rest.iter().any(|w| EDIT.contains(w)) {
        return true;
    }
    if rest.iter().any(|w| READ.contains(w)) {
        return false;
    }
    match positional.first() {
        Some(&"get") | Some(&"list") => false,
        Some(&"set")
        | Some(&"unset")
        | Some(&"edit")
        | Some(&"rename-section")
        | Some(&"remove-section") => true,
        // `git config KEY` reads, `git config KEY VALUE` writes.
        _ => positional.len() != 1,
    }
}
