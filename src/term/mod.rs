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

/// Text from the daemon made safe to show on a terminal: control characters (escape
/// sequences could clear the screen, move the cursor or redraw a prompt) and the
/// Unicode controls that reorder text are shown as `\x1b`, `\u{202e}`… instead of
/// acting. A call's command, diff, description and client name are chosen by whoever
/// asks, possibly a prompt-injected agent; the person must see what is really there.
/// `multiline` keeps newlines and tabs (a command, a diff); otherwise they are shown
/// escaped too (a name, a one-line description).
pub fn sanitize(text: &str, multiline: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let reorders = matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}');
        match c {
            '\n' | '\t' if multiline => out.push(c),
            c if c.is_control() => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if reorders => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out
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
    fn control_characters_are_shown_not_obeyed() {
        let evil = "rm -rf ~\x1b[2K\rls\u{202e}txt.exe\x07";
        let shown = sanitize(evil, true);
        assert_eq!(shown, "rm -rf ~\\x1b[2K\\x0dls\\u{202e}txt.exe\\x07");
        assert!(!shown.chars().any(|c| c.is_control()));
        assert_eq!(sanitize("a\nb\tc", true), "a\nb\tc");
        assert_eq!(sanitize("a\nb", false), "a\\x0ab");
        assert_eq!(sanitize("naïve ✓", false), "naïve ✓");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(human_secs(0), "0 s");
        assert_eq!(human_secs(59), "59 s");
        assert_eq!(human_secs(125), "2 min 5 s");
    }
}
