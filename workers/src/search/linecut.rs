//! A reader that cuts every line at a byte limit, for searching files whose lines may
//! be huge: the searcher then never buffers more than the limit of one line (a 1 GiB
//! line would otherwise be held whole). The newline of a cut line is kept, so line
//! numbers stay right; what was dropped is recorded per line for the marker.
//!
//! Matches in the dropped part of a line are not found (docs/PROTOCOL.md, `grep`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::io::Read;
use std::rc::Rc;

/// Dropped bytes per (1-based) line number, shared with whoever reports matches.
pub type Cuts = Rc<RefCell<BTreeMap<u64, u64>>>;

/// See the module doc.
pub struct LineCut<R> {
    inner: R,
    max: usize,
    /// Bytes of the current line passed on so far.
    col: usize,
    /// The current line's number.
    line: u64,
    cuts: Cuts,
    buf: Vec<u8>,
    pos: usize,
    len: usize,
}

impl<R: Read> LineCut<R> {
    pub fn new(inner: R, max: usize, cuts: Cuts) -> Self {
        LineCut {
            inner,
            max: max.max(1),
            col: 0,
            line: 1,
            cuts,
            buf: vec![0; 64 * 1024],
            pos: 0,
            len: 0,
        }
    }
}

impl<R: Read> Read for LineCut<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let mut written = 0;
        while written < out.len() {
            if self.pos == self.len {
                if written > 0 {
                    break; // hand over what we have before blocking on more
                }
                self.len = self.inner.read(&mut self.buf)?;
                self.pos = 0;
                if self.len == 0 {
                    break;
                }
            }
            let chunk = &self.buf[self.pos..self.len];
            let (upto, newline) = match chunk.iter().position(|&b| b == b'\n') {
                Some(i) => (i, true),
                None => (chunk.len(), false),
            };
            // Bytes of this line we may still pass on, then the newline itself.
            let pass = upto.min(self.max - self.col.min(self.max));
            let pass = pass.min(out.len() - written);
            out[written..written + pass].copy_from_slice(&chunk[..pass]);
            written += pass;
            self.col += pass;
            self.pos += pass;
            if pass < upto && self.col >= self.max {
                // Over the limit: drop the rest of this line up to its newline.
                let dropped = (upto - pass) as u64;
                *self.cuts.borrow_mut().entry(self.line).or_insert(0) += dropped;
                self.pos += upto - pass;
                continue;
            }
            if pass == upto && newline {
                if written == out.len() {
                    break;
                }
                out[written] = b'\n';
                written += 1;
                self.pos += 1;
                self.col = 0;
                self.line += 1;
            }
        }
        Ok(written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(input: &[u8], max: usize, read_size: usize) -> (Vec<u8>, BTreeMap<u64, u64>) {
        let cuts: Cuts = Rc::default();
        let mut r = LineCut::new(input, max, Rc::clone(&cuts));
        let mut out = Vec::new();
        let mut buf = vec![0; read_size];
        loop {
            let n = r.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            out.extend_from_slice(&buf[..n]);
        }
        let c = cuts.borrow().clone();
        (out, c)
    }

    #[test]
    fn long_lines_are_cut_and_counted() {
        let input = b"short\nabcdefghij\nxy\nlonglonglong";
        for read_size in [1, 3, 7, 4096] {
            let (out, cuts) = cut(input, 4, read_size);
            assert_eq!(out, b"shor\nabcd\nxy\nlong", "read size {read_size}");
            assert_eq!(cuts, BTreeMap::from([(1, 1), (2, 6), (4, 8)]));
        }
        let (out, cuts) = cut(input, 100, 5);
        assert_eq!(out, input);
        assert!(cuts.is_empty());
    }
}
