//! What a scenario reports: checks against the bars, extra figures and notes; printed as a table,
//! saved as JSON and rendered into BENCHMARKS.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

/// Which side of the bar passes.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Bar {
    AtLeast,
    AtMost,
    Below,
    /// Reported without a bar (always passes).
    None,
}

#[derive(Clone, Debug, Serialize)]
pub struct Baseline {
    pub name: String,
    pub value: f64,
}

/// One figure compared with its bar.
#[derive(Clone, Debug, Serialize)]
pub struct Check {
    pub name: String,
    pub value: f64,
    pub unit: String,
    pub bar: Bar,
    pub limit: f64,
    /// What the figure is compared with in the same run, when there is something to compare.
    pub baseline: Option<Baseline>,
    /// value / baseline.
    pub ratio: Option<f64>,
    /// When the bar is on the ratio rather than on the value.
    pub bar_on_ratio: bool,
    pub pass: bool,
}

impl Check {
    pub fn new(name: &str, value: f64, unit: &str, bar: Bar, limit: f64) -> Check {
        let mut c = Check {
            name: name.into(),
            value,
            unit: unit.into(),
            bar,
            limit,
            baseline: None,
            ratio: None,
            bar_on_ratio: false,
            pass: false,
        };
        c.evaluate();
        c
    }

    /// A figure reported for information, with no bar.
    pub fn info(name: &str, value: f64, unit: &str) -> Check {
        Check::new(name, value, unit, Bar::None, 0.0)
    }

    /// Adds a baseline; the ratio is value / baseline.
    pub fn baseline(mut self, name: &str, value: f64) -> Check {
        self.ratio = (value > 0.0).then(|| self.value / value);
        self.baseline = Some(Baseline {
            name: name.into(),
            value,
        });
        self.evaluate();
        self
    }

    /// Puts the bar on the ratio instead of the value.
    pub fn bar_on_ratio(mut self) -> Check {
        self.bar_on_ratio = true;
        self.evaluate();
        self
    }

    fn evaluate(&mut self) {
        let x = if self.bar_on_ratio {
            self.ratio
        } else {
            Some(self.value)
        };
        self.pass = match x {
            Some(x) if x.is_finite() => match self.bar {
                Bar::AtLeast => x >= self.limit,
                Bar::AtMost => x <= self.limit,
                Bar::Below => x < self.limit,
                Bar::None => true,
            },
            _ => false,
        };
    }

    /// "pass", "FAIL", or "info" for a figure without a bar.
    pub fn result_text(&self) -> &'static str {
        match (self.bar, self.pass) {
            (Bar::None, _) => "info",
            (_, true) => "pass",
            (_, false) => "FAIL",
        }
    }

    pub fn bar_text(&self) -> String {
        let op = match self.bar {
            Bar::AtLeast => "≥",
            Bar::AtMost => "≤",
            Bar::Below => "<",
            Bar::None => return "— (no bar)".into(),
        };
        if self.bar_on_ratio {
            format!("ratio {op} {}", fmt_num(self.limit))
        } else {
            format!("{op} {} {}", fmt_num(self.limit), self.unit)
                .trim_end()
                .to_string()
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub scenario: String,
    pub quick: bool,
    pub checks: Vec<Check>,
    /// Other figures worth keeping (percentiles, counts, durations).
    pub figures: BTreeMap<String, Value>,
    pub notes: Vec<String>,
    /// Set when the scenario could not run to the end.
    pub error: Option<String>,
    pub elapsed_s: f64,
}

impl Report {
    pub fn new(scenario: &str, quick: bool) -> Report {
        Report {
            scenario: scenario.into(),
            quick,
            checks: vec![],
            figures: BTreeMap::new(),
            notes: vec![],
            error: None,
            elapsed_s: 0.0,
        }
    }

    pub fn check(&mut self, check: Check) {
        self.checks.push(check);
    }

    pub fn figure(&mut self, name: &str, value: impl Into<Value>) {
        self.figures.insert(name.into(), value.into());
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub fn passed(&self) -> bool {
        self.error.is_none() && !self.checks.is_empty() && self.checks.iter().all(|c| c.pass)
    }

    pub fn verdict(&self) -> &'static str {
        if self.error.is_some() {
            "ERROR"
        } else if self.passed() {
            "pass"
        } else {
            "FAIL"
        }
    }

    /// A plain-text table for the terminal.
    pub fn table(&self) -> String {
        let mut rows = vec![[
            "check".to_string(),
            "figure".into(),
            "bar".into(),
            "baseline".into(),
            "ratio".into(),
            "result".into(),
        ]];
        for c in &self.checks {
            rows.push([
                c.name.clone(),
                format!("{} {}", fmt_num(c.value), c.unit).trim_end().to_string(),
                c.bar_text(),
                c.baseline
                    .as_ref()
                    .map(|b| format!("{} ({})", fmt_num(b.value), b.name))
                    .unwrap_or_else(|| "—".into()),
                c.ratio.map(|r| format!("{r:.2}")).unwrap_or_else(|| "—".into()),
                c.result_text().into(),
            ]);
        }
        let widths: Vec<usize> = (0..6)
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        let mut out = format!("== {} ({:.1} s) — {}\n", self.scenario, self.elapsed_s, self.verdict());
        for (n, row) in rows.iter().enumerate() {
            for (i, cell) in row.iter().enumerate() {
                let pad = widths[i] - cell.chars().count();
                let _ = write!(out, "{cell}{}  ", " ".repeat(pad));
            }
            out = out.trim_end().to_string();
            out.push('\n');
            if n == 0 {
                let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
                out.push_str(&"-".repeat(total));
                out.push('\n');
            }
        }
        for (k, v) in &self.figures {
            let _ = writeln!(out, "  {k}: {v}");
        }
        for n in &self.notes {
            let _ = writeln!(out, "  note: {n}");
        }
        if let Some(e) = &self.error {
            let _ = writeln!(out, "  error: {e}");
        }
        out
    }
}

/// Numbers at a useful precision: 3 significant digits below 100, whole numbers above.
pub fn fmt_num(x: f64) -> String {
    if !x.is_finite() {
        return format!("{x}");
    }
    let a = x.abs();
    if a >= 100.0 || a == 0.0 {
        format!("{x:.0}")
    } else if a >= 10.0 {
        format!("{x:.1}")
    } else if a >= 1.0 {
        format!("{x:.2}")
    } else {
        format!("{x:.3}")
    }
}

/// Median of a sample (the figures of a noisy machine are reported as medians).
pub fn median(xs: &[f64]) -> f64 {
    percentile(xs, 50.0)
}

/// Nearest-rank percentile of an unsorted sample; NaN when empty.
pub fn percentile(xs: &[f64], p: f64) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    let mut v = xs.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil().max(1.0) as usize;
    v[rank.min(v.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let xs: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&xs, 50.0), 50.0);
        assert_eq!(percentile(&xs, 99.0), 99.0);
        assert_eq!(percentile(&xs, 100.0), 100.0);
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn bars_and_ratios() {
        let c = Check::new("tps", 60.0, "tickets/s", Bar::AtLeast, 0.6)
            .baseline("pgbench", 100.0)
            .bar_on_ratio();
        assert!(c.pass);
        assert_eq!(c.ratio, Some(0.6));
        let c = Check::new("p99", 120.0, "ms", Bar::Below, 100.0);
        assert!(!c.pass);
        let c = Check::new("nan", f64::NAN, "ms", Bar::Below, 100.0);
        assert!(!c.pass);
    }
}
