//! A confirmation question on the terminal: what the call would do (tool, risk,
//! description, paths, the command or the diff), who asks, the time left — kept
//! current once a second on the line above the prompt — and the prompt itself.
//!
//! A question never outlives its answer: when it is over without a word from this
//! keyboard (another connection answered, it timed out, the daemon went away), the
//! prompt and the time line are erased and one line says what happened instead, so no
//! `[y/N]` is ever left on screen for a question that is already decided.

use std::time::Instant;

use crate::term::{CLEAR_LINE, err, human_secs, sanitize};

/// Save the cursor, go up a line, erase it (the rest is written, then restore).
const UP_AND_CLEAR: &str = "\x1b7\x1b[1A\r\x1b[2K";
const RESTORE: &str = "\x1b8";

/// What a `confirm_required` asks about.
pub struct Ask<'a> {
    pub tool: &'a str,
    pub risk: &'a str,
    pub description: &'a str,
    pub locations: &'a [String],
    pub preview: Option<&'a str>,
}

/// A question on screen.
pub struct Question {
    tty: bool,
    deadline: Instant,
    who: String,
    shown_left: u64,
    open: bool,
}

impl Question {
    /// Show `ask`, asked by `who`, open until `deadline`, ending with `prompt`.
    pub fn show(ask: &Ask<'_>, who: &str, deadline: Instant, prompt: &str, tty: bool) -> Question {
        let q = Question {
            tty,
            deadline,
            who: sanitize(who, false),
            shown_left: secs_left(deadline, Instant::now()),
            open: true,
        };
        let one = |t: &str| sanitize(t, false);
        let mut text = format!(
            "\n== {} ({} risk): {}\n",
            one(ask.tool),
            one(ask.risk),
            one(ask.description)
        );
        if !ask.locations.is_empty() {
            let paths: Vec<String> = ask.locations.iter().map(|l| one(l)).collect();
            text.push_str(&format!("   paths: {}\n", paths.join(", ")));
        }
        if let Some(p) = ask.preview {
            text.push_str(&sanitize(p.trim_end(), true));
            text.push('\n');
        }
        text.push_str(&q.time_line(q.shown_left));
        text.push('\n');
        text.push_str(prompt);
        err(&text);
        q
    }

    fn time_line(&self, left: u64) -> String {
        format!("   asked by {} · {} left", self.who, human_secs(left))
    }

    /// Whether its time is up at `now`.
    pub fn expired(&self, now: Instant) -> bool {
        now >= self.deadline
    }

    /// Keep the time left current (on a terminal; a pipe gets it once).
    pub fn tick(&mut self, now: Instant) {
        let left = secs_left(self.deadline, now);
        if !self.open || !self.tty || left == self.shown_left {
            return;
        }
        self.shown_left = left;
        err(&format!("{UP_AND_CLEAR}{}{RESTORE}", self.time_line(left)));
    }

    /// The question is over without an answer typed here: erase the prompt and the time
    /// line, and say `outcome` instead.
    pub fn withdraw(&mut self, outcome: &str) {
        if !self.open {
            return;
        }
        self.open = false;
        if self.tty {
            err(&format!("{CLEAR_LINE}\x1b[1A{CLEAR_LINE}{outcome}\n"));
        } else {
            err(&format!("\n{outcome}\n"));
        }
    }

    /// The person answered here (their Enter already moved to a new line).
    pub fn answered(&mut self) {
        self.open = false;
    }
}

/// Whole seconds left, rounded up (a question with 0.4 s left still has "1 s").
fn secs_left(deadline: Instant, now: Instant) -> u64 {
    let left = deadline.saturating_duration_since(now);
    left.as_secs() + u64::from(left.subsec_nanos() > 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn time_left_rounds_up_and_stops_at_zero() {
        let now = Instant::now();
        assert_eq!(secs_left(now + Duration::from_millis(400), now), 1);
        assert_eq!(secs_left(now + Duration::from_secs(60), now), 60);
        assert_eq!(secs_left(now, now + Duration::from_secs(1)), 0);
    }
}
