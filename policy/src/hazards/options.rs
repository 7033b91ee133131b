//! GNU-style command lines read the way getopt_long reads them, for the checks of the
//! hazard table: short clusters (`-uo/tmp/x`), values stuck or apart, long options by
//! any prefix (which errs on the side of asking).

use super::Findings;
use crate::word::Word;

/// One item of a GNU-style command line.
#[derive(Debug, PartialEq)]
pub(super) enum Item<'a> {
    Short(char, Option<&'a Word>, &'a str),
    Long(&'a str, Option<&'a str>, Option<&'a Word>),
    Operand(&'a Word),
}

/// Parse `words` the way getopt_long does: `short_valued` letters and `long_valued`
/// names (or unambiguous abbreviations of them) take a value.
pub(super) fn parse<'a>(
    words: &'a [Word],
    short_valued: &str,
    long_valued: &[&str],
) -> Vec<Item<'a>> {
    parse_with(words, short_valued, "", long_valued)
}

/// Like [`parse`], with `optional` letters whose value can only be stuck to them
/// (`sed -i.bak`): they take the rest of their cluster, never the next word.
pub(super) fn parse_with<'a>(
    words: &'a [Word],
    short_valued: &str,
    optional: &str,
    long_valued: &[&str],
) -> Vec<Item<'a>> {
    let mut out = Vec::new();
    let mut i = 0;
    let mut operands_only = false;
    while let Some(w) = words.get(i) {
        i += 1;
        let t = w.text.as_str();
        if operands_only || t == "-" || !t.starts_with('-') {
            out.push(Item::Operand(w));
            continue;
        }
        if t == "--" {
            operands_only = true;
            continue;
        }
        if let Some(long) = t.strip_prefix("--") {
            match long.split_once('=') {
                Some((name, value)) => out.push(Item::Long(name, Some(value), Some(w))),
                None if long_valued.iter().any(|l| abbreviates(long, l)) => {
                    let v = words.get(i);
                    i += 1;
                    out.push(Item::Long(long, v.map(|w| w.text.as_str()), v));
                }
                None => out.push(Item::Long(long, None, None)),
            }
            continue;
        }
        let cluster = &t[1..];
        for (pos, c) in cluster.char_indices() {
            if optional.contains(c) {
                out.push(Item::Short(c, Some(w), &cluster[pos + c.len_utf8()..]));
                break;
            }
            if short_valued.contains(c) {
                let rest = &cluster[pos + c.len_utf8()..];
                if rest.is_empty() {
                    let v = words.get(i);
                    i += 1;
                    out.push(Item::Short(c, v, v.map_or("", |w| w.text.as_str())));
                } else {
                    out.push(Item::Short(c, Some(w), rest));
                }
                break;
            }
            out.push(Item::Short(c, None, ""));
        }
    }
    out
}

/// `given` names the long option `full` (GNU accepts unambiguous prefixes; any
/// prefix counts here, which errs on the side of asking).
pub(super) fn abbreviates(given: &str, full: &str) -> bool {
    !given.is_empty() && full.starts_with(given)
}

pub(super) fn long<'a>(
    items: &'a [Item<'a>],
    full: &str,
) -> impl Iterator<Item = Option<&'a str>> + 'a {
    let full = full.to_owned();
    items.iter().filter_map(move |i| match i {
        Item::Long(name, v, _) if abbreviates(name, &full) => Some(*v),
        _ => None,
    })
}

pub(super) fn has_long(items: &[Item<'_>], full: &str) -> bool {
    long(items, full).next().is_some()
}

pub(super) fn short<'a>(items: &'a [Item<'a>], c: char) -> impl Iterator<Item = &'a str> + 'a {
    items.iter().filter_map(move |i| match i {
        Item::Short(x, _, v) if *x == c => Some(*v),
        _ => None,
    })
}

pub(super) fn operands<'a>(items: &'a [Item<'a>]) -> impl Iterator<Item = &'a Word> + 'a {
    items.iter().filter_map(|i| match i {
        Item::Operand(w) => Some(*w),
        _ => None,
    })
}

/// Long options of `items` that name a hazard in `names`: the first match's full name.
pub(super) fn long_hazards(items: &[Item<'_>], names: &[&str], prog: &str, f: &mut Findings) {
    for n in names {
        if has_long(items, n) {
            f.arg(format!("{prog} --{n}"));
        }
    }
}
