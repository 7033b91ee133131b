//! A spinner with the elapsed time, on stderr, while a call runs without output: a
//! long silent command (a build, a test suite) is visibly alive. It draws only on a
//! terminal, only after a short quiet spell, and only where it cannot break a line of
//! the command's own output; it is erased before anything else is written, so it never
//! ends up in the output.

use std::time::{Duration, Instant};

use crate::term::{CLEAR_LINE, err};

/// How long the call must have been quiet before the spinner shows.
pub const QUIET: Duration = Duration::from_millis(300);
/// How often it moves.
pub const FRAME: Duration = Duration::from_millis(100);

const FRAMES: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

pub struct Spinner {
    enabled: bool,
    label: String,
    started: Instant,
    quiet_since: Instant,
    shown: bool,
    frame: usize,
}

impl Spinner {
    /// A spinner for `label`; `enabled` only when stderr is a terminal.
    pub fn new(label: &str, enabled: bool) -> Spinner {
        let now = Instant::now();
        Spinner {
            enabled,
            label: label.to_owned(),
            started: now,
            quiet_since: now,
            shown: false,
            frame: 0,
        }
    }

    /// The line it would draw at `now`.
    pub fn line(&self, now: Instant) -> String {
        let secs = now.saturating_duration_since(self.started).as_secs_f64();
        format!(
            "{} {} {secs:.1}s",
            FRAMES[self.frame % FRAMES.len()],
            self.label
        )
    }

    /// Draw the next frame if the call has been quiet long enough; `may_draw` is false
    /// while the cursor sits in the middle of a line of output.
    pub fn tick(&mut self, now: Instant, may_draw: bool) {
        if !self.enabled || !may_draw || now.saturating_duration_since(self.quiet_since) < QUIET {
            return;
        }
        self.frame += 1;
        err(&format!("{CLEAR_LINE}{}", self.line(now)));
        self.shown = true;
    }

    /// Something else is about to be written: erase the spinner, and wait for a new
    /// quiet spell before showing it again.
    pub fn interrupt(&mut self) {
        self.clear();
        self.quiet_since = Instant::now();
    }

    /// Erase it if it is on screen.
    pub fn clear(&mut self) {
        if self.shown {
            err(CLEAR_LINE);
            self.shown = false;
        }
    }
}

impl Drop for Spinner {
    fn drop(&mut self) {
        self.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_shows_the_label_and_the_elapsed_time() {
        let s = Spinner::new("run_command", false);
        let l = s.line(s.started + Duration::from_millis(12_345));
        assert!(l.ends_with(" run_command 12.3s"), "{l}");
    }

    #[test]
    fn a_disabled_spinner_never_draws() {
        let mut s = Spinner::new("x", false);
        s.tick(Instant::now() + Duration::from_secs(5), true);
        assert!(!s.shown);
    }
}
