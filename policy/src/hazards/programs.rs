//! The checks of the table's programs that run other commands or build things: find,
//! xargs, env, cargo, make.

use super::builtins::env_assignment;
use super::options::*;
use super::*;

pub(super) fn find(a: &Args<'_>, f: &mut Findings) {
    const RUNS: &[&str] = &["-exec", "-execdir", "-ok", "-okdir"];
    const WRITES: &[&str] = &["-fprint", "-fprint0", "-fprintf", "-fls", "-delete"];
    let mut i = 0;
    while let Some(t) = a.text(i) {
        if RUNS.contains(&t) {
            f.arg(format!("find {t}"));
            let end = (i + 1..a.words.len())
                .find(|&j| matches!(a.text(j), Some(";" | "+")))
                .unwrap_or(a.words.len());
            if end > i + 1 {
                f.nested.push(i + 1..end);
            }
            i = end;
        } else if WRITES.contains(&t) {
            f.arg(format!("find {t}"));
        }
        i += 1;
    }
}

pub(super) fn xargs(a: &Args<'_>, f: &mut Findings) {
    let items = parse_with(
        a.words,
        "adEILnPs",
        "eil",
        &[
            "arg-file",
            "delimiter",
            "eof",
            "replace",
            "max-lines",
            "max-args",
            "max-procs",
            "max-chars",
            "process-slot-var",
        ],
    );
    let Some(first) = operands(&items).next() else {
        return;
    };
    let start = a
        .words
        .iter()
        .position(|w| std::ptr::eq(w, first))
        .unwrap_or(a.words.len());
    f.nested.push(start..a.words.len());
    let replace: Vec<&str> = items
        .iter()
        .filter_map(|i| match i {
            Item::Short('I', _, v) => Some(*v),
            Item::Short('i', _, v) => Some(if v.is_empty() { "{}" } else { *v }),
            Item::Long(n, v, _) if abbreviates(n, "replace") => Some(v.unwrap_or("{}")),
            _ => None,
        })
        .collect();
    let replaced = replace
        .iter()
        .any(|r| !r.is_empty() && first.text.contains(r));
    if !first.literal() || replaced || runs_code(&first.text) {
        f.arg(format!("xargs {}", first.text));
    }
}

pub(super) fn env(a: &Args<'_>, f: &mut Findings) {
    let mut i = 0;
    while let Some(t) = a.text(i) {
        if t == "--" {
            i += 1;
            break;
        }
        if !t.starts_with('-') || t == "-" {
            break;
        }
        i += 1;
        let long = t
            .strip_prefix("--")
            .map(|l| l.split('=').next().unwrap_or(l));
        let split = match long {
            Some(l) => abbreviates(l, "split-string"),
            None => t.contains('S'),
        };
        if split {
            f.arg("env -S");
            return;
        }
        let valued = match long {
            Some(l) => !t.contains('=') && ["unset", "chdir"].iter().any(|o| abbreviates(l, o)),
            None => t.ends_with('u') || t.ends_with('C'),
        };
        if valued {
            i += 1;
        }
    }
    while let Some(t) = a.text(i).filter(|t| t.contains('=')) {
        env_assignment(t, f);
        i += 1;
    }
    if i < a.words.len() {
        f.nested.push(i..a.words.len());
    }
}

pub(super) fn cargo(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "pjCZ",
        &[
            "config",
            "manifest-path",
            "target-dir",
            "artifact-dir",
            "out-dir",
            "package",
            "jobs",
            "bin",
            "example",
            "test",
            "bench",
            "features",
            "target",
            "profile",
            "color",
            "message-format",
            "root",
            "index",
            "registry",
            "git",
            "branch",
            "tag",
            "rev",
            "path",
            "exclude",
            "lockfile-path",
        ],
    );
    long_hazards(&items, &["config"], "cargo", f);
    if let Some(sub) = operands(&items).next()
        && matches!(sub.text.as_str(), "install" | "uninstall")
    {
        f.arg(format!("cargo {}", sub.text));
    }
    for l in ["manifest-path", "target-dir", "artifact-dir", "out-dir"] {
        for v in long(&items, l) {
            if v.is_none_or(|v| a.outside_text(v) || v.contains('$')) {
                f.arg(format!("cargo --{l} outside the workspace"));
            }
        }
    }
    if short(&items, 'C').any(|v| a.outside_text(v)) {
        f.arg("cargo -C outside the workspace");
    }
}

pub(super) fn make(a: &Args<'_>, f: &mut Findings) {
    let items = parse_with(
        a.words,
        "CfIoWE",
        "jlO",
        &[
            "directory",
            "file",
            "makefile",
            "include-dir",
            "old-file",
            "assume-old",
            "what-if",
            "new-file",
            "assume-new",
            "eval",
        ],
    );
    for (c, name) in [('f', "-f"), ('E', "--eval")] {
        if short(&items, c).next().is_some() {
            f.arg(format!("make {name}"));
        }
    }
    long_hazards(&items, &["file", "makefile", "eval"], "make", f);
    let dirs = short(&items, 'C')
        .chain(short(&items, 'I'))
        .chain(long(&items, "directory").map(|v| v.unwrap_or("")))
        .chain(long(&items, "include-dir").map(|v| v.unwrap_or("")));
    if dirs
        .collect::<Vec<_>>()
        .iter()
        .any(|d| a.outside_text(d) || d.contains('$'))
    {
        f.arg("make -C/-I outside the workspace");
    }
    if operands(&items).any(make_override_runs) {
        f.arg("make variable override");
    }
}

/// `make NAME=VALUE`: a variable that names a program or the shell, or a value a
/// recipe would hand to the shell with its metacharacters (`DEBUG='1; cmd'`,
/// `X='$(shell cmd)'`), can run anything. `DEBUG=1`, `V=1` cannot.
fn make_override_runs(w: &Word) -> bool {
    let Some((name, value)) = w.text.split_once('=') else {
        return false;
    };
    let name = name.trim_end_matches(['+', ':', '?', '!']);
    let special = name.starts_with("MAKE") || name.starts_with("SHELL") || name.starts_with('.');
    let plain = value
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "_.,:/=+@%- ".contains(c));
    !w.literal() || special || is_env_hazard(name) || !plain
}
