//! The plot of DynamoDB cost per turn against conversation length, as a small SVG: requests
//! per turn and kilobytes received per turn, on a logarithmic length axis.

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
