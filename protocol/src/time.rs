//! RFC 3339 timestamps, in UTC, for the fields both sides write: the audit log's `ts`
//! and call times, a grant's `expires_at`, a background job's start in
//! `list_processes`. One formatter, so every time a client reads has the same shape;
//! no date crate is needed for it (the civil date is computed here).

use std::time::{SystemTime, UNIX_EPOCH};

/// `2025-01-31T12:00:00Z`: whole seconds, where a reader wants a short time (the
/// process table). Times before 1970 print as the epoch.
pub fn rfc3339(t: SystemTime) -> String {
    format(t, false)
}

/// `2026-08-07T12:34:56.789Z`: milliseconds, for records whose order within a second
/// matters (the audit log). Times before 1970 print as the epoch.
pub fn rfc3339_millis(t: SystemTime) -> String {
    format(t, true)
}

fn format(t: SystemTime, millis: bool) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (y, m, day) = civil_from_days((secs / 86_400) as i64);
    let sod = secs % 86_400;
    let (h, min, s) = (sod / 3600, sod % 3600 / 60, sod % 60);
    if millis {
        let ms = d.subsec_millis();
        format!("{y:04}-{m:02}-{day:02}T{h:02}:{min:02}:{s:02}.{ms:03}Z")
    } else {
        format!("{y:04}-{m:02}-{day:02}T{h:02}:{min:02}:{s:02}Z")
    }
}

/// Days since 1970-01-01 → (year, month, day), proleptic Gregorian (H. Hinnant's
/// `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m as u32, d as u32)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn rfc3339_formats_utc() {
        assert_eq!(rfc3339(SystemTime::UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_709_210_096);
        assert_eq!(rfc3339(t), "2024-02-29T12:34:56Z");
    }

    fn at(secs: u64, ms: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms)
    }

    #[test]
    fn timestamps_are_rfc3339_utc_millis() {
        assert_eq!(rfc3339_millis(at(0, 0)), "1970-01-01T00:00:00.000Z");
        assert_eq!(
            rfc3339_millis(at(951_782_400, 7)),
            "2000-02-29T00:00:00.007Z"
        );
        assert_eq!(
            rfc3339_millis(at(1_700_000_000, 999)),
            "2023-11-14T22:13:20.999Z"
        );
        assert_eq!(
            rfc3339_millis(at(4_107_542_399, 0)),
            "2100-02-28T23:59:59.000Z"
        );
        assert_eq!(
            rfc3339_millis(at(1_709_164_800, 0)),
            "2024-02-29T00:00:00.000Z"
        );
        assert_eq!(
            rfc3339_millis(at(1_735_689_599, 0)),
            "2024-12-31T23:59:59.000Z"
        );
    }

    #[test]
    fn seconds_drop_the_millis_the_audit_form_keeps() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_millis(1_700_000_000_999);
        assert_eq!(rfc3339(t), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_millis(t), "2023-11-14T22:13:20.999Z");
    }

    #[test]
    fn times_before_1970_print_as_the_epoch() {
        let t = SystemTime::UNIX_EPOCH - Duration::from_secs(1);
        assert_eq!(rfc3339(t), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_millis(t), "1970-01-01T00:00:00.000Z");
    }
}
