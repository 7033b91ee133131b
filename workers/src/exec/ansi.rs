//! A terminal's output as text for the model: escape sequences (colours, cursor moves,
//! titles) dropped and `\r\n` read as `\n`; the artifact keeps the bytes as they came.
//!
//! The parsing is `vte`'s (the parser of the Alacritty terminal): what it calls a
//! printed character or a line feed is kept, everything it recognises as a control
//! sequence is dropped, and so are other control characters than tab, line feed and a
//! lone carriage return (a progress bar's "go back to the start of the line").
//!
//! Pages of a terminal's output must not end inside an escape sequence (its rest would
//! show as text on the next page): [`complete_prefix`] finds where one may end.

use vte::{Params, Parser, Perform};

/// Collects the text of what the parser reports.
#[derive(Default)]
struct Collect {
    text: String,
    /// A carriage return seen and not yet written: dropped when a line feed follows.
    cr: bool,
    /// How many things the parser reported (characters, controls, sequences).
    events: u64,
    /// Where each line feed written ends in the input (when fed byte by byte).
    line_ends: Vec<usize>,
    pos: usize,
}

impl Collect {
    fn flush_cr(&mut self) {
        if std::mem::take(&mut self.cr) {
            self.text.push('\r');
        }
    }
}

impl Perform for Collect {
    fn print(&mut self, c: char) {
        self.events += 1;
        self.flush_cr();
        self.text.push(c);
    }

    fn execute(&mut self, byte: u8) {
        self.events += 1;
        match byte {
            b'\n' => {
                self.cr = false;
                self.text.push('\n');
                self.line_ends.push(self.pos);
            }
            b'\r' => {
                self.flush_cr();
                self.cr = true;
            }
            b'\t' => {
                self.flush_cr();
                self.text.push('\t');
            }
            _ => {}
        }
    }

    fn hook(&mut self, _: &Params, _: &[u8], _: bool, _: char) {
        self.events += 1;
    }

    fn put(&mut self, _: u8) {
        self.events += 1;
    }

    fn unhook(&mut self) {
        self.events += 1;
    }

    fn osc_dispatch(&mut self, _: &[&[u8]], _: bool) {
        self.events += 1;
    }

    fn csi_dispatch(&mut self, _: &Params, _: &[u8], _: bool, _: char) {
        self.events += 1;
    }

    fn esc_dispatch(&mut self, _: &[u8], _: bool, _: u8) {
        self.events += 1;
    }
}

/// The text of a whole piece of terminal output.
pub(crate) fn strip(bytes: &[u8]) -> String {
    let mut s = Stripper::default();
    let mut text = s.push(bytes);
    if s.out.cr {
        text.push('\r');
    }
    text
}

/// The text of terminal output that arrives in pieces (a sequence or a character may
/// be split between two): each [`Stripper::push`] returns the text completed so far.
#[derive(Default)]
pub(crate) struct Stripper {
    parser: Parser,
    out: Collect,
}

impl Stripper {
    pub(crate) fn push(&mut self, bytes: &[u8]) -> String {
        self.parser.advance(&mut self.out, bytes);
        std::mem::take(&mut self.out.text)
    }
}

/// A page of terminal output as text, with where each of its lines ends in `bytes`
/// (the offset after the line feed), so a page can be cut after a given line.
pub(crate) fn page_text(bytes: &[u8]) -> (String, Vec<usize>) {
    let mut parser = Parser::new();
    let mut out = Collect::default();
    for (i, b) in bytes.iter().enumerate() {
        out.pos = i + 1;
        parser.advance(&mut out, std::slice::from_ref(b));
    }
    if out.cr {
        out.text.push('\r');
    }
    (out.text, out.line_ends)
}

/// How much of `bytes` (terminal output starting where a sequence could start) ends
/// where nothing is left unfinished: not inside an escape sequence or a UTF-8
/// character, and not right after a carriage return (its line feed may follow).
pub(crate) fn complete_prefix(bytes: &[u8]) -> usize {
    let mut parser = Parser::new();
    let mut out = Collect::default();
    let mut end = 0;
    for (i, &b) in bytes.iter().enumerate() {
        let before = out.events;
        parser.advance(&mut out, &[b]);
        if out.events != before && b != b'\r' {
            end = i + 1;
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequences_go_and_crlf_becomes_lf() {
        let raw = b"\x1b[1;31merror\x1b[0m: x\r\n\tok\r\n\x1b]0;title\x07done\r";
        assert_eq!(strip(raw), "error: x\n\tok\ndone\r");
        assert_eq!(strip(b"10%\r20%\r\x1b[K30%\r\n"), "10%\r20%\r30%\n");
        assert_eq!(strip("é€\r\n".as_bytes()), "é€\n");
        assert_eq!(strip(b"a\x07b\x08c"), "abc", "other controls are dropped");
    }

    #[test]
    fn a_stream_split_anywhere_strips_the_same() {
        let raw = "\x1b[32mgreen\x1b[0m é\r\nnext\x1b]2;t\x1b\\ line\r\n".as_bytes();
        let whole = strip(raw);
        for cut in 0..raw.len() {
            let mut s = Stripper::default();
            let mut text = s.push(&raw[..cut]);
            text.push_str(&s.push(&raw[cut..]));
            assert_eq!(text, whole, "cut at {cut}");
        }
    }

    #[test]
    fn pages_end_where_nothing_is_unfinished() {
        assert_eq!(complete_prefix(b"abc"), 3);
        assert_eq!(complete_prefix(b"ab\x1b[3"), 2, "inside a CSI");
        assert_eq!(complete_prefix(b"ab\x1b[31m"), 7);
        assert_eq!(complete_prefix(b"ab\x1b]0;tit"), 2, "inside an OSC");
        assert_eq!(complete_prefix(b"line\r"), 4, "its line feed may follow");
        assert_eq!(complete_prefix(b"line\r\n"), 6);
        let euro = "€".as_bytes();
        assert_eq!(complete_prefix(&[b'a', euro[0], euro[1]]), 1);
        assert_eq!(complete_prefix(b""), 0);
    }

    #[test]
    fn page_text_knows_where_lines_end() {
        let raw = b"\x1b[1mone\x1b[0m\r\ntwo\r\nthr";
        let (text, ends) = page_text(raw);
        assert_eq!(text, "one\ntwo\nthr");
        assert_eq!(ends, vec![13, 18]);
        assert_eq!(&raw[..ends[0]], b"\x1b[1mone\x1b[0m\r\n");
    }
}
