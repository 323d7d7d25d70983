//! `turnstile-bench --against PATH`: the same scenarios against this build and another
//! binary (an older build), on one Redis, alternating the two in rounds (A B, then
//! B A, …) so that the machine's drift falls on both alike. Each figure is printed for
//! both, with the ratio this / against (the median of the rounds' ratios) and its
//! spread (the lowest and highest round). On a shared machine only a figure measured
//! this way compares two builds.

use std::fmt::Write;

use super::report::{Extra, Report};

/// One scenario's reports, a pair per round: (this build, the other).
#[derive(Debug, Default)]
pub struct Rounds {
    pub scenario: &'static str,
    pub pairs: Vec<(Report, Report)>,
}

/// A figure's values over the rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Compared {
    pub figure: String,
    pub this: Vec<f64>,
    pub against: Vec<f64>,
}

impl Compared {
    /// The median of the two sides' values.
    pub fn medians(&self) -> (f64, f64) {
        (median(&self.this), median(&self.against))
    }

    /// Each round's ratio this / against (rounds where the other is 0 are left out).
    pub fn ratios(&self) -> Vec<f64> {
        self.this
            .iter()
            .zip(&self.against)
            .filter(|(_, against)| **against != 0.0)
            .map(|(this, against)| this / against)
            .collect()
    }

    /// The median ratio and its spread (lowest, highest), if any round has one.
    pub fn ratio(&self) -> Option<(f64, f64, f64)> {
        let ratios = self.ratios();
        let low = ratios.iter().copied().reduce(f64::min)?;
        let high = ratios.iter().copied().reduce(f64::max)?;
        Some((median(&ratios), low, high))
    }
}

fn median(values: &[f64]) -> f64 {
    let mut sorted: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if sorted.is_empty() {
        return f64::NAN;
    }
    sorted.sort_by(f64::total_cmp);
    let mid = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[mid]
    } else {
        (sorted[mid - 1] + sorted[mid]) / 2.0
    }
}

/// The numeric figures of a report, by name, in its order.
fn figures(report: &Report) -> Vec<(String, f64)> {
    let mut out = vec![("ops_per_s".to_owned(), report.ops_per_s)];
    if let Some((p50, p99, max)) = report.latency {
        out.extend([
            ("p50_ms".to_owned(), p50),
            ("p99_ms".to_owned(), p99),
            ("max_ms".to_owned(), max),
        ]);
    }
    if let Some(ratio) = report.ratio_to_floor() {
        out.push(("ratio_to_floor".to_owned(), ratio));
    }
    for (key, value) in &report.extras {
        match value {
            Extra::Number(v) => out.push(((*key).to_owned(), *v)),
            Extra::Count(n) => out.push(((*key).to_owned(), *n as f64)),
            Extra::Text(_) => {}
        }
    }
    out
}

impl Rounds {
    /// Every figure both sides reported in every round.
    pub fn compared(&self) -> Vec<Compared> {
        let Some((first, _)) = self.pairs.first() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (figure, _) in figures(first) {
            let value = |report: &Report| {
                figures(report)
                    .into_iter()
                    .find(|(name, _)| *name == figure)
                    .map(|(_, v)| v)
            };
            let this: Option<Vec<f64>> = self.pairs.iter().map(|(a, _)| value(a)).collect();
            let against: Option<Vec<f64>> = self.pairs.iter().map(|(_, b)| value(b)).collect();
            if let (Some(this), Some(against)) = (this, against) {
                out.push(Compared {
                    figure,
                    this,
                    against,
                });
            }
        }
        out
    }

    /// One JSON object: the scenario, the rounds, and per figure both sides' values,
    /// the median ratio and its spread.
    pub fn to_json(&self) -> String {
        let number = |v: f64| {
            if v.is_finite() {
                format!("{}", (v * 1000.0).round() / 1000.0)
            } else {
                "null".to_owned()
            }
        };
        let list = |values: &[f64]| {
            let items: Vec<String> = values.iter().map(|v| number(*v)).collect();
            format!("[{}]", items.join(","))
        };
        let mut out = format!(
            "{{\"scenario\":\"{}\",\"rounds\":{},\"figures\":{{",
            self.scenario,
            self.pairs.len()
        );
        for (n, compared) in self.compared().iter().enumerate() {
            let (this, against) = compared.medians();
            let (ratio, low, high) = compared.ratio().unwrap_or((f64::NAN, f64::NAN, f64::NAN));
            let _ = write!(
                out,
                "{}\"{}\":{{\"this\":{},\"against\":{},\"this_rounds\":{},\"against_rounds\":{},\
                 \"ratio\":{},\"ratio_min\":{},\"ratio_max\":{}}}",
                if n > 0 { "," } else { "" },
                compared.figure,
                number(this),
                number(against),
                list(&compared.this),
                list(&compared.against),
                number(ratio),
                number(low),
                number(high),
            );
        }
        out.push_str("}}");
        out
    }
}

/// The comparison as a text table: a row per figure.
pub fn table(all: &[Rounds]) -> String {
    let mut out = format!(
        "{:<14} {:<22} {:>12} {:>12} {:>7}  {}\n",
        "scenario", "figure", "this", "against", "ratio", "spread"
    );
    for rounds in all {
        for compared in rounds.compared() {
            let (this, against) = compared.medians();
            let (ratio, spread) = match compared.ratio() {
                Some((ratio, low, high)) => (format!("{ratio:.2}"), format!("{low:.2}–{high:.2}")),
                None => ("-".to_owned(), "-".to_owned()),
            };
            let _ = writeln!(
                out,
                "{:<14} {:<22} {:>12} {:>12} {:>7}  {}",
                rounds.scenario,
                compared.figure,
                format_value(this),
                format_value(against),
                ratio,
                spread
            );
        }
    }
    out
}

fn format_value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ops: f64, p99: f64) -> Report {
        Report {
            scenario: "lock",
            ops_per_s: ops,
            latency: Some((1.0, p99, 2.0 * p99)),
            ..Report::default()
        }
        .extra("mode", Extra::Text("x".into()))
        .extra("redis_us_per_op", Extra::Number(ops / 1000.0))
    }

    #[test]
    fn each_figure_gets_both_medians_and_the_median_ratio_with_its_spread() {
        let rounds = Rounds {
            scenario: "lock",
            pairs: vec![
                (report(120.0, 2.0), report(100.0, 1.0)),
                (report(90.0, 2.0), report(100.0, 2.0)),
                (report(150.0, 4.0), report(100.0, 2.0)),
            ],
        };
        let compared = rounds.compared();
        let names: Vec<&str> = compared.iter().map(|c| c.figure.as_str()).collect();
        assert_eq!(
            names,
            ["ops_per_s", "p50_ms", "p99_ms", "max_ms", "redis_us_per_op"]
        );
        let ops = &compared[0];
        assert_eq!(ops.medians(), (120.0, 100.0));
        assert_eq!(ops.ratio(), Some((1.2, 0.9, 1.5)));
        let p99 = &compared[2];
        assert_eq!(p99.ratio(), Some((2.0, 1.0, 2.0)));
        let json: serde_json::Value = serde_json::from_str(&rounds.to_json()).unwrap();
        assert_eq!(json["rounds"], 3);
        assert_eq!(json["figures"]["ops_per_s"]["ratio"], 1.2);
        assert_eq!(json["figures"]["ops_per_s"]["this_rounds"][2], 150.0);
        assert!(table(&[rounds]).contains("0.90–1.50"));
    }
}
