//! Shells, interpreters, wrappers and bash builtins: code in arguments, commands run
//! by other commands, options that change how bash reads the rest, and variables a
//! command sets.

use super::options::abbreviates;
use super::*;

pub(super) fn shell(a: &Args<'_>, f: &mut Findings) {
    let mut script = None;
    for (i, w) in a.words.iter().enumerate() {
        let t = w.text.as_str();
        if t == "--" || !t.starts_with('-') && !t.starts_with('+') {
            break;
        }
        let runs = if let Some(long) = t.strip_prefix("--") {
            ["rcfile", "init-file", "command", "init-command"]
                .iter()
                .any(|l| abbreviates(long.split('=').next().unwrap_or(long), l))
        } else {
            t[1..].contains(['c', 'C'])
        };
        if runs {
            f.structural(format!("{} -c", a.prog));
            script = a
                .words
                .get(i + 1)
                .filter(|w| w.literal())
                .map(|w| w.text.clone());
            break;
        }
    }
    f.script = script;
}

/// `cargo run -- bash -c '…'`, `ssh host sh -c …`: a script handed on to a shell
/// somewhere in the arguments.
pub(super) fn shell_in_arguments(a: &Args<'_>, f: &mut Findings) {
    for (i, w) in a.words.iter().enumerate() {
        if !is_shell(&w.text) {
            continue;
        }
        let flagged = a.words[i + 1..]
            .iter()
            .any(|x| x.text.starts_with('-') && !x.text.starts_with("--") && x.text.contains('c'));
        if flagged {
            f.arg(format!("{} -c in the arguments", basename(&w.text)));
            return;
        }
    }
}

pub(super) fn inline_code(a: &Args<'_>, row: &(&str, &str, &[&str]), f: &mut Findings) {
    let (name, shorts, longs) = *row;
    for w in a.words {
        let t = w.text.as_str();
        if t == "--" {
            break;
        }
        let inline = if let Some(long) = t.strip_prefix("--") {
            let long = long.split('=').next().unwrap_or(long);
            longs.iter().any(|l| abbreviates(long, l))
        } else if let Some(cluster) = t.strip_prefix('-') {
            cluster
                .chars()
                .take_while(|c| c.is_ascii_alphabetic())
                .any(|c| shorts.contains(c))
        } else {
            name == "deno" && t == "eval"
        };
        if inline {
            f.structural(format!("{name} inline code"));
            return;
        }
    }
}

/// The command a wrapper runs is a part of its own.
pub(super) fn wrapped(a: &Args<'_>, row: &(&str, &str, &[&str], usize), f: &mut Findings) {
    let (name, short_valued, long_valued, leading) = *row;
    if name == "command"
        && a.words
            .first()
            .is_some_and(|w| w.text.starts_with("-v") || w.text.starts_with("-V"))
    {
        return;
    }
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
        if let Some(long) = t.strip_prefix("--") {
            if !long.contains('=') && long_valued.iter().any(|l| abbreviates(long, l)) {
                i += 1;
            }
        } else if t.len() == 2 && short_valued.contains(&t[1..]) {
            i += 1;
        }
    }
    if name == "sudo" || name == "doas" {
        while a
            .text(i)
            .is_some_and(|t| t.contains('=') && !t.starts_with('='))
        {
            env_assignment(a.text(i).unwrap_or_default(), f);
            i += 1;
        }
    }
    i += leading;
    if i < a.words.len() {
        f.nested.push(i..a.words.len());
    }
}

pub(super) fn builtin(prog: &str, a: &Args<'_>, f: &mut Findings) {
    let subscripted = |w: &Word| w.text.contains('[') || !w.literal();
    match prog {
        "enable" if a.texts().any(|t| t.starts_with('-') && t.contains('f')) => {
            f.structural("enable -f");
        }
        "hash" if a.texts().any(|t| t.starts_with('-') && t.contains('p')) => {
            f.structural("hash -p");
        }
        "set" => set_options(a, f),
        "shopt" => shopt_options(a, f),
        "printf" => {
            let mut it = a.words.iter();
            while let Some(w) = it.next() {
                if w.text == "-v" && it.next().is_some_and(subscripted)
                    || w.text.starts_with("-v") && w.text.len() > 2 && w.text.contains('[')
                {
                    f.structural("a variable name with a subscript");
                }
            }
        }
        "test" | "[" => {
            let mut it = a.words.iter();
            while let Some(w) = it.next() {
                if w.text == "-v" && it.next().is_some_and(subscripted) {
                    f.structural("a variable name with a subscript");
                }
            }
        }
        p if NAME_BUILTINS.contains(&p) && a.words.iter().any(|w| w.text.contains('[')) => {
            f.structural("a variable name with a subscript");
        }
        "declare" | "typeset" | "local" | "export" | "readonly"
            if a.texts()
                .any(|t| t.starts_with(['-', '+']) && t.contains(['i', 'n'])) =>
        {
            f.structural(format!("{prog} -i/-n"));
        }
        _ => {}
    }
    if matches!(
        prog,
        "declare" | "typeset" | "local" | "export" | "readonly"
    ) {
        for t in a.texts().filter(|t| !t.starts_with(['-', '+'])) {
            env_assignment(t, f);
        }
    }
    // Builtins that store into the variables they are given (`printf -v PATH .`).
    if matches!(
        prog,
        "read" | "mapfile" | "readarray" | "printf" | "getopts" | "wait"
    ) {
        for t in a.texts().filter(|t| !t.starts_with('-')) {
            if is_env_hazard(t) && t.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
                f.structural(format!("sets {}", t.split('[').next().unwrap_or(t)));
            }
        }
    }
}

/// `set` options that change how bash reads the rest of the command.
pub(super) fn set_options(a: &Args<'_>, f: &mut Findings) {
    let mut it = a.words.iter();
    while let Some(w) = it.next() {
        let t = w.text.as_str();
        if t == "--" || !(t.starts_with('-') || t.starts_with('+')) {
            break;
        }
        if t[1..].contains(['k', 'H']) {
            f.structural(format!("set {t}"));
        }
        if t.ends_with('o') {
            match it.next() {
                Some(o) if !o.literal() => f.structural("set -o"),
                Some(o)
                    if matches!(
                        o.text.as_str(),
                        "keyword" | "posix" | "history" | "histexpand"
                    ) =>
                {
                    f.structural(format!("set -o {}", o.text));
                }
                _ => {}
            }
        }
    }
}

/// `shopt` options that change parsing or make aliases and debugging hooks live.
pub(super) fn shopt_options(a: &Args<'_>, f: &mut Findings) {
    const HARMLESS: &[&str] = &[
        "nullglob",
        "failglob",
        "dotglob",
        "globstar",
        "nocaseglob",
        "nocasematch",
        "lastpipe",
        "inherit_errexit",
        "pipefail",
        "errexit",
        "nounset",
        "xtrace",
    ];
    let setting = a
        .texts()
        .any(|t| t.starts_with('-') && t.contains(['s', 'o']));
    if !setting {
        return;
    }
    for w in a.words.iter().filter(|w| !w.text.starts_with('-')) {
        if !w.literal() || !HARMLESS.contains(&w.text.as_str()) {
            f.structural(format!("shopt {}", w.text));
        }
    }
}

/// `KEY=value` that sets an environment hazard.
pub(super) fn env_assignment(t: &str, f: &mut Findings) {
    if let Some((key, _)) = t.split_once('=')
        && is_env_hazard(key.trim_end_matches('+'))
    {
        let key = key.trim_end_matches('+');
        f.arg(format!("sets {}", key.split('[').next().unwrap_or(key)));
    }
}
