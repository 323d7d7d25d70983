//! The queue page's charts of its last hour, drawn on the server as SVG (no script, no
//! chart library): deliveries per minute as bars, tasks waiting as a line. Only numbers
//! go into the markup; the colours come from the stylesheet (light and dark).

use std::fmt::Write;

use super::html::{Html, Part};
use crate::queue::Minute;

const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 120.0;
/// Room on the left for the axis' top value.
const LEFT: f64 = 44.0;
/// Room at the bottom for the time labels.
const BOTTOM: f64 = 16.0;

/// Both charts, each with a caption a screen reader reads.
pub(super) fn charts(minutes: &[Minute]) -> Html {
    let delivered: Vec<u64> = minutes.iter().map(|m| m.delivered).collect();
    let waiting: Vec<Option<u64>> = minutes.iter().map(|m| m.waiting).collect();
    let total: u64 = delivered.iter().sum();
    let now_waiting = waiting.iter().rev().flatten().next().copied();
    let mut out = Html::new();
    out.raw("<div class=\"charts\">\n");
    figure(
        &mut out,
        "Deliveries per minute, last hour",
        format_args!("{total} deliveries in the last hour"),
        bars(&delivered),
    );
    let summary = match now_waiting {
        Some(n) => format!("{n} waiting at the last record"),
        None => "nothing recorded in the last hour".to_owned(),
    };
    figure(
        &mut out,
        "Tasks waiting, last hour",
        &summary,
        line(&waiting),
    );
    out.raw("</div>\n");
    out
}

fn figure(out: &mut Html, title: &str, summary: impl Part + Copy, body: Html) {
    html!(out;
        "<figure class=\"chart\"><figcaption>", title, " <span class=\"muted\">(", summary,
        ")</span></figcaption><svg viewBox=\"0 0 ", WIDTH, " ", HEIGHT,
        "\" role=\"img\" aria-label=\"", title, ": ", summary, "\">", body, "</svg></figure>\n"
    );
}

/// The frame: the top value on the left, "60m ago" and "now" under the plot.
fn frame(top: u64) -> Html {
    let base = HEIGHT - BOTTOM;
    let x = LEFT - 4.0;
    let mut svg = Html::new();
    html!(svg;
        "<line class=\"axis\" x1=\"", LEFT, "\" y1=\"", base, "\" x2=\"", WIDTH, "\" y2=\"", base,
        "\"/><text class=\"label\" x=\"", x, "\" y=\"10\" text-anchor=\"end\">", top,
        "</text><text class=\"label\" x=\"", x, "\" y=\"", base,
        "\" text-anchor=\"end\">0</text><text class=\"label\" x=\"", LEFT, "\" y=\"", HEIGHT,
        "\">60m ago</text><text class=\"label\" x=\"", WIDTH, "\" y=\"", HEIGHT,
        "\" text-anchor=\"end\">now</text>"
    );
    svg
}

/// The plot's x of slot `n` of `count`, and the width of one.
fn slot(n: usize, count: usize) -> (f64, f64) {
    let step = (WIDTH - LEFT) / count.max(1) as f64;
    (LEFT + step * n as f64, step)
}

/// The y of `value` under a top of `top`.
fn y(value: u64, top: u64) -> f64 {
    let plot = HEIGHT - BOTTOM - 12.0;
    HEIGHT - BOTTOM - plot * value as f64 / top.max(1) as f64
}

fn bars(values: &[u64]) -> Html {
    let top = values.iter().copied().max().unwrap_or(0).max(1);
    let mut svg = frame(top);
    for (n, &value) in values.iter().enumerate() {
        if value == 0 {
            continue;
        }
        let (x, step) = slot(n, values.len());
        let top_y = y(value, top);
        html!(svg;
            "<rect class=\"bar\" x=\"", format_args!("{:.1}", x + 1.0),
            "\" y=\"", format_args!("{top_y:.1}"),
            "\" width=\"", format_args!("{:.1}", (step - 2.0).max(1.0)),
            "\" height=\"", format_args!("{:.1}", HEIGHT - BOTTOM - top_y), "\"/>"
        );
    }
    svg
}

fn line(values: &[Option<u64>]) -> Html {
    let top = values.iter().flatten().copied().max().unwrap_or(0).max(1);
    let mut svg = frame(top);
    // A step across each minute: a minute alone is a short line, not a point.
    let mut points = String::new();
    for (n, value) in values.iter().enumerate() {
        let (x, step) = slot(n, values.len());
        if let Some(v) = value {
            let y = y(*v, top);
            let gap = if points.is_empty() { "" } else { " " };
            let _ = write!(points, "{gap}{x:.1},{y:.1} {:.1},{y:.1}", x + step);
        }
    }
    if !points.is_empty() {
        html!(svg; "<polyline class=\"line\" points=\"", points, "\"/>");
    }
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_draw_a_bar_per_busy_minute_and_a_point_per_recorded_one() {
        let minutes: Vec<Minute> = (0..60)
            .map(|n| Minute {
                at_ms: n * 60_000,
                delivered: if n % 10 == 0 { 5 } else { 0 },
                waiting: (n >= 30).then_some(n as u64),
            })
            .collect();
        let svg = charts(&minutes).into_string();
        assert_eq!(svg.matches("<rect class=\"bar\"").count(), 6);
        let points = svg.split("points=\"").nth(1).unwrap();
        assert_eq!(points[..points.find('"').unwrap()].split(' ').count(), 60);
        assert!(svg.contains("30 deliveries in the last hour"));
        assert!(svg.contains("59 waiting at the last record"));
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
