//! Keeping the table of finished jobs bounded, and one-line summaries.

use super::*;

/// Drop finished jobs read to their end, then the oldest finished beyond the cap.
pub(super) fn prune(t: &mut Table) {
    t.jobs.retain(|j| {
        let gone = j.finished() && j.lock().read_to_end;
        if gone {
            j.discard();
        }
        !gone
    });
    let finished = t.jobs.iter().filter(|j| j.finished()).count();
    let mut excess = finished.saturating_sub(MAX_FINISHED);
    t.jobs.retain(|j| {
        if excess > 0 && j.finished() {
            excess -= 1;
            j.discard();
            return false;
        }
        true
    });
}

/// At most `max` chars on one line.
pub(super) fn one_line(s: &str, max: usize) -> String {
    let flat: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        flat.chars()
            .take(max.saturating_sub(1))
            .chain(['…'])
            .collect()
    }
}
