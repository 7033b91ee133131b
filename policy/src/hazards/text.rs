//! The checks of text tools and archivers, whose scripts or options run commands or
//! write files: awk and sed (their programs read as each parses them), sort, uniq,
//! tar.

use super::options::*;
use super::*;
use crate::{awk, sed};

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
