//! The server's stdout, with every message bounded: rmcp drops a line longer than
//! [`MAX_LINE`] without a word (its answer never comes, and the call would wait for
//! its deadline). Here such a line is cut where it outgrows the bound (rmcp then drops
//! the stub), the rest of it is skipped, and in its place comes an answer to the same
//! request id: an `isError` result whose text carries toolvisor's truncation marker and
//! says how large the answer was. The id is read from the line's first or last bytes,
//! where JSON-RPC libraries put it; a line without one found there is only dropped.

use std::collections::VecDeque;
use std::pin::Pin;
use std::task::{Context, Poll};

use serde_json::json;
use tokio::io::{AsyncRead, ReadBuf};

/// The longest line rmcp reads (its `DEFAULT_MAX_LINE_LENGTH`).
pub const MAX_LINE: usize = 16 * 1024 * 1024;
/// How much of a line's start and end is kept to find its id.
const KEEP: usize = 256;

/// `R`, with lines longer than the bound replaced by an error answer.
pub struct Bounded<R> {
    inner: R,
    max: usize,
    /// Bytes ready for the reader.
    out: VecDeque<u8>,
    /// The current line: its length, first and last bytes, its `\n` escapes.
    len: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    escaped_newlines: u64,
    prev: u8,
    /// Past the bound: skipping to the line's end.
    skipping: bool,
    eof: bool,
}

impl<R> Bounded<R> {
    pub fn new(inner: R) -> Bounded<R> {
        Bounded::with_max(inner, MAX_LINE)
    }

    fn with_max(inner: R, max: usize) -> Bounded<R> {
        Bounded {
            inner,
            max,
            out: VecDeque::new(),
            len: 0,
            head: Vec::new(),
            tail: VecDeque::new(),
            escaped_newlines: 0,
            prev: 0,
            skipping: false,
            eof: false,
        }
    }

    /// Take in bytes read from the server.
    fn take_in(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                if self.skipping {
                    self.answer_instead();
                } else {
                    self.out.push_back(b);
                }
                self.new_line();
                continue;
            }
            self.len += 1;
            if self.head.len() < KEEP {
                self.head.push(b);
            }
            if self.tail.len() == KEEP {
                self.tail.pop_front();
            }
            self.tail.push_back(b);
            if self.prev == b'\\' && b == b'n' {
                self.escaped_newlines += 1;
            }
            self.prev = b;
            if self.skipping {
                continue;
            }
            if self.len > self.max {
                // End the line here: rmcp drops (or cannot parse) the stub.
                self.out.push_back(b'\n');
                self.skipping = true;
            } else {
                self.out.push_back(b);
            }
        }
    }

    fn new_line(&mut self) {
        self.len = 0;
        self.head.clear();
        self.tail.clear();
        self.escaped_newlines = 0;
        self.prev = 0;
        self.skipping = false;
    }

    /// The answer that stands in for the oversized line, if its id can be found.
    fn answer_instead(&mut self) {
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        let Some(id) = id_at_start(&self.head).or_else(|| id_at_end(&tail)) else {
            tracing::warn!(
                "an MCP server sent a message of {} bytes (more than {}) with no id found; dropped",
                self.len,
                self.max
            );
            return;
        };
        let text = format!(
            "[Output truncated: {} lines and {} characters omitted]\n(the server's answer was {} bytes, more than the {} toolvisor reads from an MCP server)",
            self.escaped_newlines, self.len, self.len, self.max
        );
        let answer = json!({
            "jsonrpc": "2.0",
            "id": id,
            "result": {"content": [{"type": "text", "text": text}], "isError": true}
        });
        tracing::warn!(
            "an MCP server's answer of {} bytes exceeds {}: answered as an error",
            self.len,
            self.max
        );
        self.out.extend(answer.to_string().bytes());
        self.out.push_back(b'\n');
    }
}

/// The id of `{"jsonrpc":"2.0","id":…` or `{"id":…` at a line's start.
fn id_at_start(head: &[u8]) -> Option<serde_json::Value> {
    let s = std::str::from_utf8(head).ok()?;
    let s = s.trim_start().strip_prefix('{')?.trim_start();
    let s = match s.strip_prefix(r#""jsonrpc""#) {
        Some(rest) => {
            let rest = rest.trim_start().strip_prefix(':')?.trim_start();
            let rest = rest.strip_prefix(r#""2.0""#)?.trim_start();
            rest.strip_prefix(',')?.trim_start()
        }
        None => s,
    };
    let s = s.strip_prefix(r#""id""#)?.trim_start().strip_prefix(':')?;
    id_value(s.trim_start())
}

/// The id of `…"id":…}` at a line's end.
fn id_at_end(tail: &[u8]) -> Option<serde_json::Value> {
    let s = String::from_utf8_lossy(tail);
    let s = s.trim_end().strip_suffix('}')?;
    let at = s.rfind(r#""id""#)?;
    let rest = s[at + 4..].trim_start().strip_prefix(':')?.trim();
    let v = id_value(rest)?;
    // Nothing may follow the id but the object's end.
    (v.to_string().len() == rest.len()).then_some(v)
}

/// A number or a string without escapes at the start of `s`.
fn id_value(s: &str) -> Option<serde_json::Value> {
    if let Some(rest) = s.strip_prefix('"') {
        let end = rest.find('"')?;
        let id = &rest[..end];
        return (!id.contains('\\')).then(|| serde_json::Value::String(id.to_owned()));
    }
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '-'))
        .unwrap_or(s.len());
    s[..end].parse::<i64>().ok().map(serde_json::Value::from)
}

impl<R: AsyncRead + Unpin> AsyncRead for Bounded<R> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        loop {
            if !this.out.is_empty() {
                let n = this.out.len().min(buf.remaining());
                let (a, b) = this.out.as_slices();
                let from_a = n.min(a.len());
                buf.put_slice(&a[..from_a]);
                buf.put_slice(&b[..n - from_a]);
                this.out.drain(..n);
                return Poll::Ready(Ok(()));
            }
            if this.eof {
                return Poll::Ready(Ok(()));
            }
            let mut chunk = [0u8; 8192];
            let mut rb = ReadBuf::new(&mut chunk);
            match Pin::new(&mut this.inner).poll_read(cx, &mut rb) {
                Poll::Ready(Ok(())) => {
                    let got = rb.filled();
                    if got.is_empty() {
                        this.eof = true;
                    } else {
                        let got = got.to_vec();
                        this.take_in(&got);
                    }
                }
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn through(max: usize, input: &[u8]) -> String {
        let mut b = Bounded::with_max(input, max);
        let mut out = Vec::new();
        crate::mcp::tests::block_on(b.read_to_end(&mut out)).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn short_lines_pass_unchanged() {
        let input = b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\nnot json\n";
        assert_eq!(through(100, input), String::from_utf8_lossy(input));
    }

    #[test]
    fn a_long_answer_becomes_an_error_answer_to_its_id() {
        let big = "x\\n".repeat(100);
        for (line, id) in [
            (
                format!(r#"{{"jsonrpc":"2.0","id":7,"result":{{"t":"{big}"}}}}"#),
                json!(7),
            ),
            (
                format!(r#"{{"result":{{"t":"{big}"}},"jsonrpc":"2.0","id":"a-1"}}"#),
                json!("a-1"),
            ),
        ] {
            let out = through(120, format!("{line}\n{{\"after\":1}}\n").as_bytes());
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 3, "{out}");
            assert_eq!(lines[0].len(), 120);
            let answer: serde_json::Value = serde_json::from_str(lines[1]).unwrap();
            assert_eq!(answer["id"], id);
            assert_eq!(answer["result"]["isError"], true);
            let text = answer["result"]["content"][0]["text"].as_str().unwrap();
            assert!(
                text.starts_with("[Output truncated: 100 lines and "),
                "{text}"
            );
            assert_eq!(lines[2], "{\"after\":1}");
        }
        // No id where one is looked for: dropped, and what follows still passes.
        let out = through(
            10,
            b"{\"method\":\"x\",\"params\":{\"a\":\"bbbbbbbbbbbb\"}}\nok\n",
        );
        assert_eq!(out.lines().last(), Some("ok"));
    }
}
