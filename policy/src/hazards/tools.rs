//! The checks of everyday tools with an option that runs a command (rg, fd, zip,
//! man, less, vim, emacs, sqlite3).

use super::options::*;
use super::*;

pub(super) fn rg(a: &Args<'_>, f: &mut Findings) {
    let items = parse(a.words, "", &["pre"]);
    if items
        .iter()
        .any(|i| matches!(i, Item::Long(n, _, _) if *n == "pre" || n.starts_with("pre=")))
    {
        f.arg("rg --pre");
    }
}

pub(super) fn fd(a: &Args<'_>, f: &mut Findings) {
    let items = parse(a.words, "", &[]);
    if short(&items, 'x').next().is_some() || has_long(&items, "exec") {
        f.arg(format!("{} --exec", a.prog));
    }
    if short(&items, 'X').next().is_some() || has_long(&items, "exec-batch") {
        f.arg(format!("{} --exec-batch", a.prog));
    }
}

pub(super) fn zip(a: &Args<'_>, f: &mut Findings) {
    if a.texts()
        .any(|t| t.starts_with("-TT") || t.starts_with("--unzip-command"))
    {
        f.arg("zip --unzip-command");
    }
}

pub(super) fn man(a: &Args<'_>, f: &mut Findings) {
    let items = parse(
        a.words,
        "PHLMmSsCe",
        &["pager", "html", "config-file", "preprocessor"],
    );
    if short(&items, 'P').next().is_some() || has_long(&items, "pager") {
        f.arg("man --pager");
    }
    if short(&items, 'H').next().is_some() || has_long(&items, "html") {
        f.arg("man --html");
    }
}

pub(super) fn less(a: &Args<'_>, f: &mut Findings) {
    if a.texts()
        .any(|t| t.starts_with('+') || t.starts_with("--lesskey"))
    {
        f.arg(format!("{} +command", a.prog));
    }
}

pub(super) fn vim(a: &Args<'_>, f: &mut Findings) {
    if a.texts().any(|t| {
        t.starts_with('+') || matches!(t, "-c" | "--cmd" | "-S" | "-u" | "-s" | "-w" | "-W")
    }) {
        f.arg(format!("{} command", a.prog));
    }
}

pub(super) fn emacs(a: &Args<'_>, f: &mut Findings) {
    if a.texts().any(|t| {
        matches!(
            t,
            "-l" | "-f" | "--load" | "--funcall" | "--eval" | "--script" | "-x"
        ) || t.starts_with("--eval=")
            || t.starts_with("--load=")
    }) {
        f.arg("emacs code");
    }
}

pub(super) fn sqlite(a: &Args<'_>, f: &mut Findings) {
    if a.texts()
        .any(|t| t.contains(".shell") || t.contains(".system") || t == "-init" || t == "-cmd")
    {
        f.arg("sqlite3 shell command");
    }
}
