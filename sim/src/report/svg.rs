//! Hand-written SVG line charts: no plotting dependency, readable in any browser.

use std::fmt::Write;

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 420.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 190.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

const PALETTE: [&str; 12] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf", "#393b79", "#ad494a",
];

pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
}

pub struct Chart<'a> {
    pub title: &'a str,
    pub x_label: &'a str,
    pub y_label: &'a str,
    /// Plot x on a log10 scale (x must be > 0).
    pub log_x: bool,
    /// Step lines (for CDFs and bucketed curves) instead of straight segments.
    pub step: bool,
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn nice_ticks(lo: f64, hi: f64, count: usize) -> Vec<f64> {
    let span = (hi - lo).max(1e-12);
    let raw = span / count as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let mut ticks = Vec::new();
    let mut t = (lo / step).ceil() * step;
    while t <= hi + 1e-9 * span {
        ticks.push(t);
        t += step;
    }
    ticks
}

fn label(value: f64) -> String {
    if value.abs() >= 100.0 || value == value.round() {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// Renders a chart; series beyond the palette reuse colours with dashes.
pub fn render(chart: &Chart<'_>, series: &[Series]) -> String {
    let tx = |x: f64| if chart.log_x { x.max(1e-9).log10() } else { x };
    let points = series.iter().flat_map(|s| s.points.iter());
    let (mut x0, mut x1, mut y0, mut y1) =
        (f64::INFINITY, f64::NEG_INFINITY, 0.0_f64, f64::NEG_INFINITY);
    for &(x, y) in points {
        x0 = x0.min(tx(x));
        x1 = x1.max(tx(x));
        y0 = y0.min(y);
        y1 = y1.max(y);
    }
    if !x0.is_finite() {
        (x0, x1, y1) = (0.0, 1.0, 1.0);
    }
    if x1 <= x0 {
        x1 = x0 + 1.0;
    }
    if y1 <= y0 {
        y1 = y0 + 1.0;
    }
    y1 *= 1.05;
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let px = |x: f64| LEFT + (tx(x) - x0) / (x1 - x0) * plot_w;
    let py = |y: f64| TOP + plot_h - (y - y0) / (y1 - y0) * plot_h;

    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(svg, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="22" font-size="15" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        escape(chart.title)
    );
    for t in nice_ticks(y0, y1, 6) {
        let y = py(t);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y + 4.0,
            label(t)
        );
    }
    for t in nice_ticks(x0, x1, 8) {
        let x = LEFT + (t - x0) / (x1 - x0) * plot_w;
        let text = if chart.log_x {
            super::format::duration(10f64.powf(t))
        } else {
            label(t)
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#f0f0f0"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 16.0,
            text
        );
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>"##
    );
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 12.0,
        escape(chart.x_label)
    );
    let _ = writeln!(
        svg,
        r#"<text x="16" y="{:.1}" text-anchor="middle" transform="rotate(-90 16 {:.1})">{}</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(chart.y_label)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let dash = if i >= PALETTE.len() {
            r#" stroke-dasharray="5,3""#
        } else {
            ""
        };
        let mut path = String::new();
        let mut previous_y: Option<f64> = None;
        for &(x, y) in &s.points {
            if chart.step
                && let Some(prev) = previous_y
            {
                let _ = write!(path, "{:.1},{:.1} ", px(x), py(prev));
            }
            let _ = write!(path, "{:.1},{:.1} ", px(x), py(y));
            previous_y = Some(y);
        }
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5"{dash} points="{}"/>"#,
            path.trim_end()
        );
        let ly = TOP + 14.0 + i as f64 * 16.0;
        let lx = LEFT + plot_w + 12.0;
        let _ = writeln!(
            svg,
            r#"<line x1="{lx:.1}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="{colour}" stroke-width="3"{dash}/><text x="{:.1}" y="{ly:.1}">{}</text>"#,
            ly - 4.0,
            lx + 18.0,
            ly - 4.0,
            lx + 24.0,
            escape(&s.name)
        );
    }
    svg.push_str("</svg>\n");
    svg
}

/// Averages consecutive points so a chart has at most `max` of them.
pub fn downsample(points: &[(f64, f64)], max: usize) -> Vec<(f64, f64)> {
    if points.len() <= max || max == 0 {
        return points.to_vec();
    }
    let group = points.len().div_ceil(max);
    points
        .chunks(group)
        .map(|chunk| {
            let n = chunk.len() as f64;
            (chunk[0].0, chunk.iter().map(|p| p.1).sum::<f64>() / n)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_a_well_formed_chart() {
        let chart = Chart {
            title: "a < b",
            x_label: "x",
            y_label: "y",
            log_x: false,
            step: true,
        };
        let svg = render(
            &chart,
            &[Series {
                name: "q&1".into(),
                points: vec![(0.0, 0.0), (1.0, 2.0)],
            }],
        );
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("a &lt; b") && svg.contains("q&amp;1"));
        assert_eq!(svg.matches("<polyline").count(), 1);
    }

    #[test]
    fn downsampling_averages_groups() {
        let points: Vec<(f64, f64)> = (0..10).map(|i| (f64::from(i), f64::from(i))).collect();
        let out = downsample(&points, 5);
        assert_eq!(out.len(), 5);
        assert_eq!(out[0], (0.0, 0.5));
    }
}
