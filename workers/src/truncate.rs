//! Output truncation (docs/PROTOCOL.md §11.3): cuts on UTF-8 boundaries, one marker line, counts.
//!
//! OWNER: search helper.
//!
//! Pure functions, shared by the search tools (files, listings, searches) and exec (shell
//! output). Limits count bytes; a cut never splits a UTF-8 character, so a kept part may be
//! up to 3 bytes shorter than the limit. Every truncation adds exactly one marker line,
//! [`marker`], and reports the same numbers in a [`Truncated`].

use toolvisor_protocol::Truncated;
use toolvisor_protocol::worker::Limits;

/// Text after truncation, and what was left out (None when nothing was).
#[derive(Clone, Debug, PartialEq)]
pub struct Cut {
    /// The kept text, marker included.
    pub text: String,
    /// What was left out.
    pub truncated: Option<Truncated>,
}

impl Cut {
    fn whole(text: String) -> Self {
        Cut {
            text,
            truncated: None,
        }
    }
}

/// The one marker line (no trailing newline). For listings and searches `lines` counts
/// the omitted entries or matches.
pub fn marker(lines: u64, bytes: u64) -> String {
    format!("[Output truncated: {lines} lines and {bytes} characters omitted]")
}

/// The largest index `<= max` that is a char boundary of `s`.
pub fn floor_boundary(s: &str, max: usize) -> usize {
    if max >= s.len() {
        return s.len();
    }
    (0..=max)
        .rev()
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(0)
}

/// The largest index `<= max` in `b` that does not fall inside a UTF-8 sequence.
fn floor_boundary_bytes(b: &[u8], max: usize) -> usize {
    if max >= b.len() {
        return b.len();
    }
    (0..=max)
        .rev()
        .find(|&i| !is_continuation(b[i]))
        .unwrap_or(0)
}

/// The smallest index `>= min` in `b` that does not fall inside a UTF-8 sequence.
fn ceil_boundary_bytes(b: &[u8], min: usize) -> usize {
    (min..b.len())
        .find(|&i| !is_continuation(b[i]))
        .unwrap_or(b.len())
}

fn is_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

/// Lines in `s`: newline characters, plus one for a final line without a newline.
pub fn count_lines(s: &[u8]) -> u64 {
    let nl = s.iter().filter(|&&b| b == b'\n').count() as u64;
    nl + u64::from(!s.is_empty() && !s.ends_with(b"\n"))
}

fn count_newlines(s: &[u8]) -> u64 {
    s.iter().filter(|&&b| b == b'\n').count() as u64
}

/// `text`, then the marker on a line of its own.
fn with_marker(mut text: String, lines: u64, bytes: u64) -> Cut {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&marker(lines, bytes));
    Cut {
        text,
        truncated: Some(Truncated {
            omitted_bytes: bytes,
            omitted_lines: lines,
            full_output: None,
        }),
    }
}

/// Keep the first `keep` bytes of `text` when it is longer than `max` bytes.
///
/// Omitted lines are the lines not kept whole (a line cut in the middle counts).
pub fn text(text: &str, max: usize, keep: usize) -> Cut {
    text_counted(
        text,
        text.len() as u64,
        count_lines(text.as_bytes()),
        max,
        keep,
    )
}

/// Like [`text`], when only a prefix of the text is at hand (a file read as a stream):
/// `total_bytes` and `total_lines` describe the whole text, `prefix` holds at least
/// `keep` bytes of it when `total_bytes > max`, else all of it.
pub fn text_counted(
    prefix: &str,
    total_bytes: u64,
    total_lines: u64,
    max: usize,
    keep: usize,
) -> Cut {
    if total_bytes <= max as u64 {
        return Cut::whole(prefix.to_owned());
    }
    let at = floor_boundary(prefix, keep.min(max));
    let kept = &prefix[..at];
    let lines = total_lines.saturating_sub(count_newlines(kept.as_bytes()));
    with_marker(
        kept.to_owned(),
        lines,
        total_bytes.saturating_sub(at as u64),
    )
}

/// A file's content under `limits.file_max` / `file_keep`.
pub fn file(content: &str, limits: &Limits) -> Cut {
    text(content, limits.file_max, limits.file_keep)
}

/// Entries joined one per line (no trailing newline); over `max` entries keep the first
/// `keep`. The marker's bytes count the omitted entries with their newlines.
pub fn entries(entries: &[String], max: usize, keep: usize) -> Cut {
    let total_bytes: u64 = entries.iter().map(|e| e.len() as u64 + 1).sum();
    entries_counted(entries, entries.len() as u64, total_bytes, max, keep)
}

/// Like [`entries`], when only the first entries are at hand and the rest were counted:
/// `total` entries in all, `total_bytes` bytes in all (each entry's length plus one for
/// its newline). `shown` must hold at least `min(total, keep)` entries when
/// `total > max`, else all of them.
pub fn entries_counted(
    shown: &[String],
    total: u64,
    total_bytes: u64,
    max: usize,
    keep: usize,
) -> Cut {
    if total <= max as u64 {
        return Cut::whole(shown.join("\n"));
    }
    let keep = keep.min(max).min(shown.len());
    let kept = &shown[..keep];
    let kept_bytes: u64 = kept.iter().map(|e| e.len() as u64 + 1).sum();
    with_marker(
        kept.join("\n"),
        total - keep as u64,
        total_bytes.saturating_sub(kept_bytes),
    )
}

/// A listing under `limits.list_max` / `list_keep`.
pub fn listing(lines: &[String], limits: &Limits) -> Cut {
    entries(lines, limits.list_max, limits.list_keep)
}

/// Shell output from its captured head and tail.
///
/// `head` is the start of the output (at least `shell_head` bytes of it when there is
/// that much), `tail` what the caller kept of the end, *not overlapping* `head`;
/// `total_bytes` and `total_lines` count the whole output (lines as [`count_lines`] does).
/// When everything is at hand and within `shell_max` the text is whole; otherwise it is
/// the first `shell_head` bytes, the marker line, and the last `shell_tail` bytes, cut on
/// character boundaries. Invalid UTF-8 is converted lossily after cutting.
pub fn shell(head: &[u8], tail: &[u8], total_bytes: u64, total_lines: u64, limits: &Limits) -> Cut {
    shell_with(head, tail, (total_bytes, total_lines), limits, &|b| {
        String::from_utf8_lossy(b).into_owned()
    })
}

/// [`shell`], with the kept bytes turned into text by `render` (a terminal's output
/// loses its escape sequences there). `totals` are (bytes, lines) of the whole output.
pub fn shell_with(
    head: &[u8],
    tail: &[u8],
    (total_bytes, total_lines): (u64, u64),
    limits: &Limits,
    render: &dyn Fn(&[u8]) -> String,
) -> Cut {
    let captured = (head.len() + tail.len()) as u64;
    if captured >= total_bytes && total_bytes <= limits.shell_max as u64 {
        let mut all = head.to_vec();
        all.extend_from_slice(tail);
        return Cut::whole(render(&all));
    }
    let h = &head[..floor_boundary_bytes(head, limits.shell_head)];
    let start = tail.len().saturating_sub(limits.shell_tail);
    let t = &tail[ceil_boundary_bytes(tail, start)..];
    let kept_lines = count_newlines(h) + count_lines(t);
    let omitted_bytes = total_bytes.saturating_sub((h.len() + t.len()) as u64);
    let omitted_lines = total_lines.saturating_sub(kept_lines);
    let mut cut = with_marker(render(h), omitted_lines, omitted_bytes);
    cut.text.push('\n');
    cut.text.push_str(&render(t));
    cut
}

/// [`shell`] for output that was captured whole.
pub fn shell_whole(out: &[u8], limits: &Limits) -> Cut {
    let split = floor_boundary_bytes(out, limits.shell_head);
    let (head, tail) = out.split_at(split);
    shell(head, tail, out.len() as u64, count_lines(out), limits)
}

/// Make an outcome fit in a frame (`limits.max_frame_bytes`) with room to spare for
/// what the supervisor adds: past half the frame, `content` keeps its first quarter of
/// a frame and the marker, and `display` (when it is not the content) its first 64 KiB.
/// A result never fails for its size; `truncated` counts what was cut.
pub fn fit_frame(o: &mut toolvisor_protocol::worker::Outcome, max_frame: usize) {
    const DISPLAY_KEEP: usize = 64 * 1024;
    if o.content.len() + o.display.len() <= max_frame / 2 {
        return;
    }
    let same = o.display == o.content;
    let keep = max_frame / 4;
    if o.content.len() > keep {
        let at = floor_boundary(&o.content, keep);
        let cut = text_counted(
            &o.content[..at],
            o.content.len() as u64,
            count_lines(o.content.as_bytes()),
            at,
            at,
        );
        if let Some(t) = &cut.truncated {
            let sum = o.truncated.get_or_insert_with(Truncated::default);
            sum.omitted_bytes += t.omitted_bytes;
            sum.omitted_lines += t.omitted_lines;
        }
        o.content = cut.text;
    }
    if same {
        o.display = o.content.clone();
    } else if o.display.len() > DISPLAY_KEEP {
        let at = floor_boundary(&o.display, DISPLAY_KEEP);
        o.display.truncate(at);
        o.display.push_str("\n[display truncated]");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn outcomes_fit_their_frame() {
        let mut o = toolvisor_protocol::worker::Outcome::ok("line\n".repeat(10_000));
        fit_frame(&mut o, 8192);
        assert!(
            o.content.len() + o.display.len() <= 8192,
            "{}",
            o.content.len()
        );
        assert!(
            o.content.ends_with(&marker(9_591, 47_952)),
            "{}",
            &o.content[o.content.len() - 80..]
        );
        assert_eq!(o.display, o.content);
        let t = o.truncated.unwrap();
        assert_eq!((t.omitted_lines, t.omitted_bytes), (9_591, 47_952));
        let mut small = toolvisor_protocol::worker::Outcome::ok("ok".into());
        fit_frame(&mut small, 8192);
        assert_eq!(small.content, "ok");
        assert!(small.truncated.is_none());
    }

    fn limits(max: usize, keep: usize) -> Limits {
        Limits {
            file_max: max,
            file_keep: keep,
            shell_max: max,
            shell_head: keep / 4,
            shell_tail: keep - keep / 4,
            list_max: max,
            list_keep: keep,
            search_max: max,
            search_keep: keep,
            ..Limits::default()
        }
    }

    #[test]
    fn short_text_is_whole() {
        let c = file("hello\n", &Limits::default());
        assert_eq!(c, Cut::whole("hello\n".into()));
    }

    #[test]
    fn file_cut_has_one_marker_and_counts() {
        let c = text("ab\ncd\nef\n", 4, 4);
        assert_eq!(
            c.text,
            "ab\nc\n[Output truncated: 2 lines and 5 characters omitted]"
        );
        let t = c.truncated.unwrap();
        assert_eq!((t.omitted_lines, t.omitted_bytes), (2, 5));
    }

    #[test]
    fn cut_does_not_split_a_char() {
        let c = text("ééé", 3, 3);
        assert!(c.text.starts_with("é\n[Output truncated"), "{}", c.text);
        assert_eq!(c.truncated.unwrap().omitted_bytes, 4);
    }

    #[test]
    fn listing_keeps_first_entries() {
        let e: Vec<String> = (0..5).map(|i| format!("f{i}")).collect();
        let c = entries(&e, 3, 2);
        assert_eq!(
            c.text,
            "f0\nf1\n[Output truncated: 3 lines and 9 characters omitted]"
        );
    }

    #[test]
    fn shell_keeps_head_and_tail() {
        let out: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let l = Limits {
            shell_max: 100,
            shell_head: 20,
            shell_tail: 30,
            ..Limits::default()
        };
        let c = shell_whole(out.as_bytes(), &l);
        assert!(c.text.starts_with("line 0\nline 1\nline 2"));
        assert!(c.text.ends_with("line 98\nline 99\n"));
        assert_eq!(c.text.matches("[Output truncated").count(), 1);
        let t = c.truncated.unwrap();
        assert_eq!(t.omitted_bytes, out.len() as u64 - 50);
    }

    proptest! {
        #[test]
        fn text_cut_properties(s in "(\\PC|\n){0,300}", max in 0usize..200, keep in 0usize..200) {
            let keep = keep.min(max);
            let c = text(&s, max, keep);
            match &c.truncated {
                None => prop_assert_eq!(&c.text, &s),
                Some(t) => {
                    let m = marker(t.omitted_lines, t.omitted_bytes);
                    prop_assert!(c.text.ends_with(&m));
                    prop_assert_eq!(c.text.matches("[Output truncated").count(), s.matches("[Output truncated").count() + 1);
                    let kept = c.text[..c.text.len() - m.len()].trim_end_matches('\n');
                    let kept_len = s.len() - t.omitted_bytes as usize;
                    prop_assert!(kept_len <= keep);
                    prop_assert!(kept_len + 3 >= keep || kept_len == s.len());
                    prop_assert!(s.starts_with(&s[..kept_len]));
                    prop_assert!(kept.len() <= kept_len && s[..kept_len].starts_with(kept));
                    prop_assert!(c.text.len() <= keep + 1 + m.len());
                    let all = count_lines(s.as_bytes());
                    let whole_kept = count_newlines(&s.as_bytes()[..kept_len]);
                    prop_assert_eq!(t.omitted_lines + whole_kept, all);
                }
            }
        }

        #[test]
        fn entries_properties(e in proptest::collection::vec("[a-z./é]{0,12}", 0..60), max in 0usize..40, keep in 0usize..40) {
            let keep = keep.min(max);
            let c = entries(&e, max, keep);
            if e.len() <= max {
                prop_assert!(c.truncated.is_none());
                prop_assert_eq!(c.text, e.join("\n"));
            } else {
                let t = c.truncated.unwrap();
                prop_assert_eq!(t.omitted_lines as usize + keep, e.len());
                let omitted: usize = e[keep..].iter().map(|x| x.len() + 1).sum();
                prop_assert_eq!(t.omitted_bytes as usize, omitted);
                prop_assert!(c.text.starts_with(&e[..keep].join("\n")));
            }
        }

        #[test]
        fn shell_properties(s in "(\\PC|\n){0,400}", max in 8usize..200, keep in 4usize..100) {
            let l = limits(max, keep.min(max));
            let c = shell_whole(s.as_bytes(), &l);
            match &c.truncated {
                None => { prop_assert!(s.len() <= max); prop_assert_eq!(&c.text, &s); }
                Some(t) => {
                    prop_assert!(s.len() > max);
                    let m = marker(t.omitted_lines, t.omitted_bytes);
                    let (_, rest) = c.text.rsplit_once(&format!("{m}\n")).unwrap();
                    prop_assert!(s.ends_with(rest) && rest.len() <= l.shell_tail);
                    let head_len = s.len() - t.omitted_bytes as usize - rest.len();
                    prop_assert!(head_len <= l.shell_head);
                    prop_assert!(c.text.starts_with(&s[..head_len]));
                    prop_assert_eq!(c.text.matches(&m).count(), 1);
                }
            }
        }
    }
}
