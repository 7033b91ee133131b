//! The table: rows, targets, PASS/MISS, and how values are written.

use super::*;

/// One line of the table.
pub(super) struct Row {
    pub(super) issue: u8,
    pub(super) what: String,
    pub(super) toolvisor: String,
    pub(super) baseline: String,
    pub(super) ratio: Option<f64>,
    /// How the ratio column shows `ratio`: `×` for a ratio, or the unit of an
    /// absolute value (calls/s, ms) when the target is absolute.
    pub(super) unit: &'static str,
    pub(super) target: String,
    /// `Some(pass)` when the row has a target.
    pub(super) pass: Option<bool>,
    /// Shown instead of PASS/MISS when set: the row does not compare like with like.
    pub(super) flag: Option<String>,
}

#[derive(Default)]
pub(super) struct Table {
    pub(super) rows: Vec<Row>,
    pub(super) notes: Vec<String>,
}

impl Table {
    pub(super) fn push(
        &mut self,
        issue: u8,
        what: impl Into<String>,
        toolvisor: String,
        baseline: String,
        ratio: Option<f64>,
        target: Option<Target>,
    ) {
        let what = what.into();
        let (target, pass) = match (target, ratio) {
            (Some(t), Some(r)) => (t.to_string(), Some(t.holds(r))),
            (Some(t), None) => (t.to_string(), Some(false)),
            (None, _) => (String::new(), None),
        };
        eprintln!("  [{issue}] {what}: {toolvisor} | {baseline} | {ratio:?} {target} {pass:?}");
        self.rows.push(Row {
            issue,
            what,
            toolvisor,
            baseline,
            ratio,
            unit: "×",
            target,
            pass,
            flag: None,
        });
    }

    /// Mark the last row as not comparable (shown instead of PASS/MISS, and on stderr).
    pub(super) fn flag_last(&mut self, why: &str) {
        if let Some(r) = self.rows.last_mut() {
            eprintln!("  !!! {}: {why}", r.what);
            r.flag = Some(format!("**{why}**"));
        }
    }

    /// A row whose target is an absolute value in `unit`, not a ratio.
    pub(super) fn push_abs(
        &mut self,
        issue: u8,
        what: impl Into<String>,
        toolvisor: String,
        baseline: String,
        (value, unit): (f64, &'static str),
        target: Target,
    ) {
        self.push(issue, what, toolvisor, baseline, Some(value), Some(target));
        if let Some(r) = self.rows.last_mut() {
            r.unit = unit;
            r.target = format!("{} {unit}", r.target);
        }
    }

    /// A measurement that could not be made.
    pub(super) fn failed(&mut self, issue: u8, what: &str, why: &str, target: Option<Target>) {
        self.push(
            issue,
            what,
            format!("n/a ({why})"),
            String::new(),
            None,
            target,
        );
    }

    pub(super) fn print(&self) {
        println!("| # | measurement | toolvisor | baseline | ratio | target | result |");
        println!("|---|---|---|---|---|---|---|");
        for r in &self.rows {
            println!(
                "| {} | {} | {} | {} | {} | {} | {} |",
                r.issue,
                r.what,
                r.toolvisor,
                r.baseline,
                r.ratio.map_or(String::new(), |x| match r.unit {
                    "×" => format!("{x:.2}×"),
                    unit => format!("{x:.0} {unit}"),
                }),
                r.target,
                match (&r.flag, r.pass) {
                    (Some(flag), _) => flag.as_str(),
                    (None, Some(true)) => "PASS",
                    (None, Some(false)) => "**MISS**",
                    (None, None) => "",
                }
            );
        }
        println!();
        for n in &self.notes {
            println!("- {n}");
        }
    }
}

/// A row's target: the ratio (toolvisor / baseline, or a value) at most or at least.
#[derive(Clone, Copy)]
pub(super) enum Target {
    AtMost(f64),
    AtLeast(f64),
}

impl Target {
    pub(super) fn holds(self, x: f64) -> bool {
        match self {
            Target::AtMost(t) => x <= t,
            Target::AtLeast(t) => x >= t,
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::AtMost(t) => write!(f, "≤ {t}"),
            Target::AtLeast(t) => write!(f, "≥ {t}"),
        }
    }
}

pub(super) fn lat(r: &Run) -> String {
    format!("p50 {} / p99 {} ms", ms(r.p50()), ms(r.p99()))
}

pub(super) fn lat_rate(r: &Run) -> String {
    format!("{}, {:.0}/s", lat(r), r.rate())
}

pub(super) fn ratio(a: Duration, b: Duration) -> Option<f64> {
    (b > Duration::ZERO).then(|| a.as_secs_f64() / b.as_secs_f64())
}

pub(super) fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0))
}
