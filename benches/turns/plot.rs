//! The plots of `make bench`: DynamoDB cost per turn against conversation length (requests and
//! kilobytes received per turn, on a logarithmic length axis), and part `sizes`' start and turn
//! times against the memory size.

use std::fmt::Write as _;

use super::storage::StorageRow;

const WIDTH: f64 = 640.0;
const HEIGHT: f64 = 360.0;
const LEFT: f64 = 70.0;
const RIGHT: f64 = 70.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;

/// The SVG document.
pub(crate) fn storage_svg(rows: &[StorageRow]) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let (min_len, max_len) = (
        rows.iter().map(|r| r.messages).min().unwrap_or(1).max(1) as f64,
        rows.iter().map(|r| r.messages).max().unwrap_or(10).max(2) as f64,
    );
    let x = |messages: u64| {
        LEFT + plot_w * ((messages as f64).log10() - min_len.log10()) / (max_len.log10() - min_len.log10())
    };
    let max_requests = rows.iter().map(|r| r.requests).fold(1.0, f64::max) * 1.25;
    let max_kb = rows.iter().map(|r| r.bytes_received / 1024.0).fold(1.0, f64::max) * 1.25;
    let y = |value: f64, max: f64| TOP + plot_h * (1.0 - value / max);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="14">DynamoDB cost of one turn against conversation length</text>
<line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>
<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/>
<line x1="{}" y1="{TOP}" x2="{}" y2="{}" stroke="black"/>
"##,
        WIDTH / 2.0,
        TOP + plot_h,
        LEFT + plot_w,
        TOP + plot_h,
        TOP + plot_h,
        LEFT + plot_w,
        LEFT + plot_w,
        TOP + plot_h,
    );
    for row in rows {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            x(row.messages),
            TOP + plot_h + 18.0,
            row.messages
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">messages in the conversation (log scale)</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 10.0
    );
    for i in 0..=4 {
        let f = f64::from(i) / 4.0;
        let _ = writeln!(
            svg,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="#1f77b4">{:.1}</text><text x="{:.1}" y="{:.1}" fill="#d62728">{:.1}</text>"##,
            LEFT - 6.0,
            y(max_requests * f, max_requests) + 4.0,
            max_requests * f,
            LEFT + plot_w + 6.0,
            y(max_kb * f, max_kb) + 4.0,
            max_kb * f
        );
    }
    let series = |value: &dyn Fn(&StorageRow) -> f64, max: f64, color: &str| {
        let points: Vec<String> = rows
            .iter()
            .map(|r| format!("{:.1},{:.1}", x(r.messages), y(value(r), max)))
            .collect();
        let dots: String = points
            .iter()
            .map(|p| {
                let (px, py) = p.split_once(',').unwrap_or(("0", "0"));
                format!(r#"<circle cx="{px}" cy="{py}" r="3" fill="{color}"/>"#)
            })
            .collect();
        format!(
            r#"<polyline fill="none" stroke="{color}" stroke-width="2" points="{}"/>{dots}"#,
            points.join(" ")
        )
    };
    let _ = writeln!(svg, "{}", series(&|r| r.requests, max_requests, "#1f77b4"));
    let _ = writeln!(
        svg,
        "{}",
        series(&|r| r.bytes_received / 1024.0, max_kb, "#d62728")
    );
    let _ = write!(
        svg,
        r##"<text x="{:.1}" y="{:.1}" fill="#1f77b4">requests per turn (left)</text>
<text x="{:.1}" y="{:.1}" fill="#d62728">KiB read per turn (right)</text>
</svg>
"##,
        LEFT + 10.0,
        TOP + 14.0,
        LEFT + 10.0,
        TOP + 30.0
    );
    svg
}

/// One line of [`sizes_svg`]: its name, colour and a value per memory size (NaN: none).
pub(crate) struct Line {
    pub(crate) name: &'static str,
    pub(crate) color: &'static str,
    pub(crate) values: Vec<f64>,
}

/// The plot of part `sizes`: milliseconds against the memory size, both axes logarithmic, a
/// line per program.
pub(crate) fn sizes_svg(title: &str, sizes_mb: &[u32], lines: &[Line]) -> String {
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let log = |v: f64| v.max(1e-3).log10();
    let (x_min, x_max) = (
        log(f64::from(*sizes_mb.first().unwrap_or(&128))),
        log(f64::from(*sizes_mb.last().unwrap_or(&1769))),
    );
    let values = || {
        lines
            .iter()
            .flat_map(|l| l.values.iter().copied())
            .filter(|v| v.is_finite() && *v > 0.0)
    };
    if values().next().is_none() {
        return format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="40"><text x="10" y="24">{title}: no figures</text></svg>
"#
        );
    }
    // Whole decades around the values, so that the grid lines are 1, 10, 100 ms.
    let y_min = values().fold(f64::INFINITY, f64::min).log10().floor();
    let y_max = values().fold(0.0, f64::max).log10().ceil().max(y_min + 1.0);
    let x = |mb: f64| LEFT + plot_w * (log(mb) - x_min) / (x_max - x_min).max(1e-9);
    let y = |v: f64| TOP + plot_h * (1.0 - (log(v) - y_min) / (y_max - y_min));
    let mut svg = String::new();
    let _ = writeln!(
        svg,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{:.1}" y="22" text-anchor="middle" font-size="14">{title}</text>
<line x1="{LEFT}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="black"/>
<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{:.1}" stroke="black"/>"##,
        WIDTH / 2.0,
        TOP + plot_h,
        LEFT + plot_w,
        TOP + plot_h,
        TOP + plot_h,
    );
    for &mb in sizes_mb {
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{mb}</text>"#,
            x(f64::from(mb)),
            TOP + plot_h + 18.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">the function's memory size, MB (its CPU share; log scale)</text>"#,
        LEFT + plot_w / 2.0,
        HEIGHT - 10.0
    );
    let mut decade = y_min;
    while decade <= y_max {
        let value = 10f64.powf(decade);
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{value} ms</text>"##,
            LEFT + plot_w,
            LEFT - 6.0,
            y(value) + 4.0,
            py = y(value),
        );
        decade += 1.0;
    }
    for (i, line) in lines.iter().enumerate() {
        let points: Vec<(f64, f64)> = sizes_mb
            .iter()
            .zip(&line.values)
            .filter(|(_, v)| v.is_finite() && **v > 0.0)
            .map(|(&mb, &v)| (x(f64::from(mb)), y(v)))
            .collect();
        let path: Vec<String> = points.iter().map(|(px, py)| format!("{px:.1},{py:.1}")).collect();
        let _ = writeln!(
            svg,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" points="{}"/>"#,
            line.color,
            path.join(" ")
        );
        for (px, py) in &points {
            let _ = writeln!(
                svg,
                r#"<circle cx="{px:.1}" cy="{py:.1}" r="3" fill="{}"/>"#,
                line.color
            );
        }
        let _ = writeln!(
            svg,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end" fill="{}">{}</text>"#,
            LEFT + plot_w - 4.0,
            TOP + 14.0 + 16.0 * i as f64,
            line.color,
            line.name
        );
    }
    svg.push_str("</svg>\n");
    svg
}
