//! One scenario's figures, printed as a table row or as one JSON object.

use std::fmt::Write;

use super::sample::Latency;

/// A figure beyond the common ones.
#[derive(Clone, Debug)]
pub enum Extra {
    /// A number.
    Number(f64),
    /// A count.
    Count(u64),
    /// Text.
    Text(String),
}

/// What one scenario reports.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The scenario's name.
    pub scenario: &'static str,
    /// Operations (cycles, tasks, handoffs, sales, commands) per second.
    pub ops_per_s: f64,
    /// p50, p99 and max in ms, when the scenario has latencies.
    pub latency: Option<(f64, f64, f64)>,
    /// The physical floor to compare with (ops/s), when there is one.
    pub floor_ops_per_s: Option<f64>,
    /// Scenario-specific figures, in order.
    pub extras: Vec<(&'static str, Extra)>,
}

impl Report {
    /// A report with `ops_per_s` and the latency quantiles of `latency`.
    pub fn new(scenario: &'static str, ops_per_s: f64, latency: &Latency) -> Self {
        Self {
            scenario,
            ops_per_s,
            latency: (latency.count() > 0).then(|| {
                (
                    latency.quantile_ms(0.5),
                    latency.quantile_ms(0.99),
                    latency.max_ms(),
                )
            }),
            ..Self::default()
        }
    }

    /// Adds a figure.
    pub fn extra(mut self, key: &'static str, value: Extra) -> Self {
        self.extras.push((key, value));
        self
    }

    /// `ops_per_s / floor_ops_per_s`.
    pub fn ratio_to_floor(&self) -> Option<f64> {
        self.floor_ops_per_s
            .filter(|floor| *floor > 0.0)
            .map(|floor| self.ops_per_s / floor)
    }

    /// One JSON object on one line.
    pub fn to_json(&self) -> String {
        let mut out = format!("{{\"scenario\":\"{}\"", self.scenario);
        // A NaN or infinity is `null`: bare NaN is not JSON.
        let number = |out: &mut String, key: &str, value: Option<f64>| {
            let _ = match value {
                Some(v) if v.is_finite() => write!(out, ",\"{key}\":{}", round(v)),
                _ => write!(out, ",\"{key}\":null"),
            };
        };
        number(&mut out, "ops_per_s", Some(self.ops_per_s));
        number(&mut out, "p50_ms", self.latency.map(|l| l.0));
        number(&mut out, "p99_ms", self.latency.map(|l| l.1));
        number(&mut out, "max_ms", self.latency.map(|l| l.2));
        if self.floor_ops_per_s.is_some() {
            number(&mut out, "floor_ops_per_s", self.floor_ops_per_s);
            number(&mut out, "ratio_to_floor", self.ratio_to_floor());
        }
        for (key, value) in &self.extras {
            match value {
                Extra::Number(v) => number(&mut out, key, Some(*v)),
                Extra::Count(n) => {
                    let _ = write!(out, ",\"{key}\":{n}");
                }
                Extra::Text(text) => {
                    let _ = write!(out, ",\"{key}\":\"{}\"", escape(text));
                }
            }
        }
        out.push('}');
        out
    }
}

fn round(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

fn escape(text: &str) -> String {
    text.chars()
        .flat_map(|c| match c {
            '"' => vec!['\\', '"'],
            '\\' => vec!['\\', '\\'],
            c if c.is_control() => vec![' '],
            c => vec![c],
        })
        .collect()
}

/// The reports as a text table.
pub fn table(reports: &[Report]) -> String {
    let mut out = format!(
        "{:<13} {:>10} {:>8} {:>8} {:>8} {:>10} {:>6}  {}\n",
        "scenario", "ops/s", "p50 ms", "p99 ms", "max ms", "floor/s", "ratio", "notes"
    );
    let cell = |v: Option<f64>, digits: usize| match v {
        Some(v) => format!("{v:.digits$}"),
        None => "-".into(),
    };
    for r in reports {
        let notes: Vec<String> = r
            .extras
            .iter()
            .map(|(key, value)| match value {
                Extra::Number(v) if v.abs() < 1.0 => format!("{key}={v:.3}"),
                Extra::Number(v) => format!("{key}={v:.1}"),
                Extra::Count(n) => format!("{key}={n}"),
                Extra::Text(text) => format!("{key}={text}"),
            })
            .collect();
        let _ = writeln!(
            out,
            "{:<13} {:>10.0} {:>8} {:>8} {:>8} {:>10} {:>6}  {}",
            r.scenario,
            r.ops_per_s,
            cell(r.latency.map(|l| l.0), 2),
            cell(r.latency.map(|l| l.1), 2),
            cell(r.latency.map(|l| l.2), 2),
            cell(r.floor_ops_per_s, 0),
            cell(r.ratio_to_floor(), 2),
            notes.join(" ")
        );
    }
    out
}
