//! The terminal side of the client commands: answers read from the keyboard only while
//! a question is shown ([`keys`]), a spinner while a call runs silently ([`spinner`]),
//! and confirmation questions that show who asks and the time left and are withdrawn
//! when they are over ([`question`]). Everything here writes to stderr, and only draws
//! (escape sequences, a line rewritten in place) when stderr is a terminal: a pipe or
//! a log file gets plain lines.

pub mod keys;
pub mod question;
pub mod spinner;

use std::io::{IsTerminal, Write};

/// Back to the start of the line and erase it.
pub const CLEAR_LINE: &str = "\r\x1b[2K";

/// Whether stderr is a terminal we may draw on.
pub fn stderr_is_tty() -> bool {
    std::io::stderr().is_terminal()
}

/// Write `text` to stderr now (it is unbuffered, but be explicit about the flush).
pub fn err(text: &str) {
    let mut e = std::io::stderr().lock();
    let _ = e.write_all(text.as_bytes());
    let _ = e.flush();
}

/// The width of stdout's terminal in columns (`COLUMNS`, else 100, when unknown).
pub fn width() -> usize {
    let mut ws = nix::pty::Winsize {
        ws_row: 0,
        ws_col: 0,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCGWINSZ writes one `winsize` into `ws`, which lives for the call.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    if rc == 0 && ws.ws_col > 0 {
        return usize::from(ws.ws_col);
    }
    std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse().ok())
        .filter(|c| *c > 0)
        .unwrap_or(100)
}

/// "42 s", "3 min 5 s": a duration for people.
pub fn human_secs(secs: u64) -> String {
    if secs < 120 {
        format!("{secs} s")
    } else {
        format!("{} min {} s", secs / 60, secs % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human_secs(0), "0 s");
        assert_eq!(human_secs(59), "59 s");
        assert_eq!(human_secs(125), "2 min 5 s");
    }
}
