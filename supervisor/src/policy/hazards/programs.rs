//! The checks of the table's programs that run code or build things: git, find,
//! xargs, awk, sed, sort, uniq, tar, env, cargo, make.

use super::builtins::env_assignment;
use super::options::*;
use super::*;
use crate::policy::{awk, sed};

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

pub(super) fn awk_check(a: &Args<'_>, f: &mut Findings) {
    let items = parse_with(
        a.words,
        "fvFeilEWZ",
        "dDLop",
        &[
            "file",
            "assign",
            "field-separator",
            "source",
            "include",
            "load",
            "exec",
            "profile",
            "dump-variables",
            "pretty-print",
        ],
    );
    let sandbox = items
        .iter()
        .any(|i| matches!(i, Item::Long("sandbox", None, None)));
    for (opt, long) in [
        ('f', "file"),
        ('E', "exec"),
        ('i', "include"),
        ('l', "load"),
        ('W', "W"),
    ] {
        if short(&items, opt).next().is_some() || has_long(&items, long) {
            f.arg(format!("{} -{opt}", a.prog));
        }
    }
    for long in ["profile", "dump-variables", "pretty-print"] {
        if has_long(&items, long) {
            f.arg(format!("{} --{long}", a.prog));
        }
    }
    // (program text, known now)
    let mut programs: Vec<(&str, bool)> = items
        .iter()
        .filter_map(|i| match i {
            Item::Short('e', v, t) => Some((*t, v.is_none_or(|w| w.literal()))),
            Item::Long(n, Some(t), w) if abbreviates(n, "source") => {
                Some((*t, w.is_none_or(|w| w.literal())))
            }
            _ => None,
        })
        .collect();
    let uses_files = short(&items, 'f').next().is_some() || has_long(&items, "file");
    if programs.is_empty() && !uses_files {
        programs.extend(
            operands(&items)
                .next()
                .map(|w| (w.text.as_str(), w.literal())),
        );
    }
    for (text, known) in programs {
        if !known {
            f.arg(format!("{} program known only at run time", a.prog));
        } else if !sandbox {
            for h in awk::hazards(text) {
                f.arg(format!("{} {h}", a.prog));
            }
        }
    }
}

pub(super) fn sed_check(a: &Args<'_>, f: &mut Findings) {
    let items = parse_with(a.words, "efl", "i", &["expression", "file", "line-length"]);
    if short(&items, 'f').next().is_some() || has_long(&items, "file") {
        f.arg(format!("{} -f", a.prog));
    }
    let sandbox = items
        .iter()
        .any(|i| matches!(i, Item::Long("sandbox", None, None)));
    let mut scripts: Vec<Option<&str>> = items
        .iter()
        .filter_map(|i| match i {
            Item::Short('e', v, s) => Some(v.map(|w| w.literal()).unwrap_or(true).then_some(*s)),
            Item::Long(n, v, w) if abbreviates(n, "expression") => {
                Some(w.is_none_or(|w| w.literal()).then_some(v.unwrap_or("")))
            }
            _ => None,
        })
        .collect();
    let mut files = operands(&items);
    if scripts.is_empty() && !has_long(&items, "file") && short(&items, 'f').next().is_none() {
        scripts.extend(files.next().map(|w| w.literal().then_some(w.text.as_str())));
    }
    for s in scripts {
        match s {
            None => f.arg(format!("{} script known only at run time", a.prog)),
            Some(_) if sandbox => {}
            Some(s) => match sed::hazards(s) {
                Ok(hs) => hs
                    .into_iter()
                    .for_each(|h| f.arg(format!("{} {h}", a.prog))),
                Err(why) => f.arg(format!("{} script not understood ({why})", a.prog)),
            },
        }
    }
    let in_place = short(&items, 'i').next().is_some() || has_long(&items, "in-place");
    if in_place && files.any(|w| a.outside(Some(w))) {
        f.arg(format!("{} -i outside the workspace", a.prog));
    }
}

pub(super) fn sort(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "ktSTo",
        &[
            "key",
            "field-separator",
            "buffer-size",
            "temporary-directory",
            "output",
            "compress-program",
            "parallel",
            "batch-size",
            "files0-from",
            "random-source",
            "sort",
        ],
    );
    long_hazards(&items, &["compress-program"], "sort", f);
    let outs = short(&items, 'o').chain(long(&items, "output").map(|v| v.unwrap_or("")));
    for o in outs.collect::<Vec<_>>() {
        if a.outside_text(o) || o.contains('$') {
            f.arg("sort -o outside the workspace");
        }
    }
}

pub(super) fn uniq(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "fsw",
        &["skip-fields", "skip-chars", "check-chars"],
    );
    if let Some(out) = operands(&items).nth(1)
        && a.outside(Some(out))
    {
        f.arg("uniq output outside the workspace");
    }
}

pub(super) fn tar(a: &Args<'_>, f: &mut Findings) {
    // Old style: the first word is a cluster of letters without a dash (`tar xzf a.tgz`).
    let mut words: Vec<Word> = a.words.to_vec();
    if let Some(first) = words.first()
        && !first.text.starts_with('-')
        && first.text.chars().all(|c| c.is_ascii_alphabetic())
    {
        let letters: Vec<char> = first.text.chars().collect();
        let mut expanded: Vec<Word> = Vec::new();
        let mut values = words[1..].iter();
        let mut after: Vec<Word> = Vec::new();
        for c in letters {
            let mut w = first.clone();
            w.text = format!("-{c}");
            w.known = w.text.len();
            expanded.push(w);
            if "fCITXbgHKLNVF".contains(c)
                && let Some(v) = values.next()
            {
                expanded.push(v.clone());
            }
        }
        after.extend(values.cloned());
        expanded.extend(after);
        words = expanded;
    }
    let items = parse(
        &words,
        "fCITXbgHKLNVIF",
        &[
            "file",
            "directory",
            "files-from",
            "exclude-from",
            "blocking-factor",
            "listed-incremental",
            "format",
            "starting-file",
            "tape-length",
            "newer",
            "label",
            "use-compress-program",
            "info-script",
            "new-volume-script",
            "to-command",
            "checkpoint-action",
            "rsh-command",
            "index-file",
            "volno-file",
            "transform",
            "exclude",
            "owner",
            "group",
            "mode",
            "mtime",
        ],
    );
    long_hazards(
        &items,
        &[
            "checkpoint-action",
            "to-command",
            "use-compress-program",
            "info-script",
            "new-volume-script",
            "rsh-command",
            "absolute-names",
        ],
        "tar",
        f,
    );
    for (c, name) in [('I', "-I"), ('F', "-F"), ('P', "-P")] {
        if short(&items, c).next().is_some() {
            f.arg(format!("tar {name}"));
        }
    }
    let extracting = short(&items, 'x').next().is_some()
        || has_long(&items, "extract")
        || has_long(&items, "get");
    let writing = ['c', 'r', 'u', 'A']
        .iter()
        .any(|c| short(&items, *c).next().is_some())
        || ["create", "append", "update", "catenate"]
            .iter()
            .any(|l| has_long(&items, l));
    let dirs: Vec<&str> = short(&items, 'C')
        .chain(long(&items, "directory").map(|v| v.unwrap_or("")))
        .collect();
    if extracting && dirs.iter().any(|d| a.outside_text(d) || d.contains('$')) {
        f.arg("tar -x outside the workspace");
    }
    let archives: Vec<&str> = short(&items, 'f')
        .chain(long(&items, "file").map(|v| v.unwrap_or("")))
        .collect();
    let force_local = has_long(&items, "force-local");
    for ar in archives {
        if ar.contains(':') && !force_local {
            f.arg("tar remote archive");
        }
        if writing && (a.outside_text(ar) || ar.contains('$')) {
            f.arg("tar writes outside the workspace");
        }
    }
    for l in ["index-file", "volno-file", "listed-incremental"] {
        for v in long(&items, l) {
            if v.is_none_or(|v| a.outside_text(v)) {
                f.arg(format!("tar --{l} outside the workspace"));
            }
        }
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
