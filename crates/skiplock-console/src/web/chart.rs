//! The overview's throughput chart, drawn on the server as SVG: it needs no script, works
//! offline and prints. One stacked bar per minute (completed below, failed above), a
//! rounded scale, and a `<title>` per bar with the exact numbers (shown on hover).

use std::fmt::Write as _;

use chrono::{DateTime, Utc};

/// Chart width and height in SVG units (the CSS scales it to the page).
pub const WIDTH: f64 = 1200.0;
/// See [`WIDTH`].
pub const HEIGHT: f64 = 220.0;
const LEFT: f64 = 84.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 24.0;

/// One minute of the chart.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bar {
    /// The minute's start.
    pub minute: DateTime<Utc>,
    /// Jobs completed in it.
    pub completed: i64,
    /// Jobs failed for good (discarded) in it.
    pub failed: i64,
}

/// The smallest of 1, 2, 5, 10, 20, 50, … that is at least `n` (and at least 1): the
/// top of the scale, so the axis label is a round number.
pub fn nice_max(n: i64) -> i64 {
    let mut step: i64 = 1;
    loop {
        for m in [1, 2, 5] {
            let v = step.saturating_mul(m);
            if v >= n || v == i64::MAX {
                return v;
            }
        }
        step = step.saturating_mul(10);
    }
}

/// The chart as a standalone `<svg>` element. Everything in it is numbers and times the
/// console formats itself (no stored text), so it is inserted into the page unescaped.
pub fn throughput_svg(bars: &[Bar]) -> String {
    let top = nice_max(
        bars.iter()
            .map(|b| b.completed.max(0).saturating_add(b.failed.max(0)))
            .max()
            .unwrap_or(0),
    );
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let slot = plot_w / bars.len().max(1) as f64;
    let bar_w = (slot * 0.8).max(1.0);
    let y = |v: i64| plot_h * (v.max(0) as f64 / top as f64);
    let total_c: i64 = bars.iter().map(|b| b.completed.max(0)).sum();
    let total_f: i64 = bars.iter().map(|b| b.failed.max(0)).sum();
    let mut s = String::with_capacity(8_192);
    let _ = write!(
        s,
        r#"<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="Jobs per minute, last {n} minutes: {total_c} completed, {total_f} failed" xmlns="http://www.w3.org/2000/svg">"#,
        n = bars.len()
    );
    // Axes and the scale.
    let base = TOP + plot_h;
    let _ = write!(
        s,
        r#"<line class="axis" x1="{LEFT}" y1="{base}" x2="{x2}" y2="{base}"/><line class="grid" x1="{LEFT}" y1="{TOP}" x2="{x2}" y2="{TOP}"/><text class="label" x="{lx}" y="{ty}" text-anchor="end">{top_text}/min</text><text class="label" x="{lx}" y="{base}" text-anchor="end">0</text>"#,
        x2 = WIDTH - RIGHT,
        lx = LEFT - 6.0,
        ty = TOP + 4.0,
        top_text = crate::web::format::count(top),
    );
    for (i, b) in bars.iter().enumerate() {
        let x = LEFT + slot * i as f64 + (slot - bar_w) / 2.0;
        let hc = y(b.completed);
        let hf = y(b.failed);
        let _ = write!(
            s,
            r#"<g><title>{t}: {c} completed, {f} failed</title><rect class="hit" x="{hx:.1}" y="{TOP}" width="{slot:.1}" height="{plot_h}"/>"#,
            t = b.minute.format("%H:%M"),
            c = b.completed,
            f = b.failed,
            hx = LEFT + slot * i as f64,
        );
        if hc > 0.0 {
            let _ = write!(
                s,
                r#"<rect class="ok" x="{x:.1}" y="{:.1}" width="{bar_w:.1}" height="{hc:.1}"/>"#,
                base - hc
            );
        }
        if hf > 0.0 {
            let _ = write!(
                s,
                r#"<rect class="bad" x="{x:.1}" y="{:.1}" width="{bar_w:.1}" height="{hf:.1}"/>"#,
                base - hc - hf
            );
        }
        s.push_str("</g>");
    }
    // Time labels: the first minute, the middle one, the last.
    if let (Some(first), Some(last)) = (bars.first(), bars.last()) {
        let ly = HEIGHT - 6.0;
        let mid = &bars[bars.len() / 2];
        let _ = write!(
            s,
            r#"<text class="label" x="{LEFT}" y="{ly}">{}</text><text class="label" x="{mx:.1}" y="{ly}" text-anchor="middle">{}</text><text class="label" x="{ex}" y="{ly}" text-anchor="end">{} UTC</text>"#,
            first.minute.format("%H:%M"),
            mid.minute.format("%H:%M"),
            last.minute.format("%H:%M"),
            mx = LEFT + slot * (bars.len() / 2) as f64 + slot / 2.0,
            ex = WIDTH - RIGHT,
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    #[test]
    fn the_scale_tops_out_at_a_round_number() {
        assert_eq!(nice_max(0), 1);
        assert_eq!(nice_max(1), 1);
        assert_eq!(nice_max(2), 2);
        assert_eq!(nice_max(3), 5);
        assert_eq!(nice_max(7), 10);
        assert_eq!(nice_max(11), 20);
        assert_eq!(nice_max(4_999), 5_000);
        assert_eq!(nice_max(5_001), 10_000);
        assert_eq!(nice_max(i64::MAX), i64::MAX);
    }

    #[test]
    fn one_bar_per_minute_with_its_numbers_and_heights_to_scale() {
        let t0 = DateTime::parse_from_rfc3339("2026-12-01T10:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        let bars: Vec<Bar> = (0..60)
            .map(|i| Bar {
                minute: t0 + Duration::minutes(i),
                completed: if i == 59 { 80 } else { 0 },
                failed: if i == 59 { 20 } else { 0 },
            })
            .collect();
        let svg = throughput_svg(&bars);
        assert_eq!(svg.matches("<g>").count(), 60);
        assert!(svg.contains("<title>10:59: 80 completed, 20 failed</title>"));
        assert!(svg.contains(">100/min<"), "{svg}");
        assert!(
            svg.contains("80 completed, 20 failed\""),
            "aria label: {svg}"
        );
        // The full bar reaches the top of the plot: completed 80% and failed 20% of it.
        let plot_h = HEIGHT - TOP - BOTTOM;
        assert!(svg.contains(&format!("height=\"{:.1}\"", plot_h * 0.8)));
        assert!(svg.contains(&format!("height=\"{:.1}\"", plot_h * 0.2)));
        assert_eq!(svg.matches("class=\"ok\"").count(), 1);
        assert!(svg.contains(">10:00<") && svg.contains(">10:59 UTC<"));
        // An empty hour still draws its axes, and nothing is negative.
        let empty = throughput_svg(&[]);
        assert!(empty.starts_with("<svg") && empty.ends_with("</svg>"));
        let odd = throughput_svg(&[Bar {
            minute: t0,
            completed: -5,
            failed: -1,
        }]);
        assert!(!odd.contains("class=\"ok\"") && !odd.contains("height=\"-"));
    }
}
