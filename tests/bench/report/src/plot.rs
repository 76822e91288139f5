// SPDX-License-Identifier: GPL-2.0
//! The PNG: cost against size, log-log. Left, the time inside the client of
//! one register + deregister cycle (median, with the interquartile range as
//! a bar); right, the client's kernel memory per live registration divided
//! by its GPU pages, against the target line (32 B + 256 B / pages), where
//! a fixed cost shows as a slope and the per-page cost as the floor.
//!
//! Text needs a TrueType font: plotters' `ab_glyph` backend is given the
//! first of `$BENCH_FONT` and a few usual system paths that exists. Without
//! one (or with `BENCH_FONT=none`) the plot is drawn without any text, and
//! the caller is told so.

use std::error::Error;
use std::path::Path;

use plotters::prelude::*;
use plotters::style::FontStyle;

use crate::analysis::{memory_target, Analysis};
use crate::table::size_name;

const FONT_PATHS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/TTF/DejaVuSans.ttf",
    "/usr/share/fonts/dejavu/DejaVuSans.ttf",
    "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/liberation/LiberationSans-Regular.ttf",
    "/usr/share/fonts/truetype/freefont/FreeSans.ttf",
    "/usr/share/fonts/noto/NotoSans-Regular.ttf",
];

/// Registers a font for "sans-serif"; returns its path, or None.
pub fn load_font() -> Option<String> {
    let env = std::env::var("BENCH_FONT").ok();
    if env.as_deref() == Some("none") {
        return None;
    }
    let candidates = env
        .iter()
        .map(String::as_str)
        .chain(FONT_PATHS.iter().copied());
    for p in candidates {
        if let Ok(bytes) = std::fs::read(p) {
            let leaked: &'static [u8] = Box::leak(bytes.into_boxed_slice());
            if plotters::style::register_font("sans-serif", FontStyle::Normal, leaked).is_ok() {
                return Some(p.to_string());
            }
        }
    }
    None
}

fn human_bytes(b: f64) -> String {
    if b < 100.0 {
        format!("{b:.0} B")
    } else if b >= (1u64 << 20) as f64 {
        format!("{:.0} MiB", b / (1u64 << 20) as f64)
    } else if b >= 1024.0 {
        format!("{:.0} KiB", b / 1024.0)
    } else {
        format!("{b:.0} B")
    }
}

fn color(i: usize) -> RGBColor {
    const C: [RGBColor; 8] = [
        RGBColor(0xd6, 0x27, 0x28),
        RGBColor(0x1f, 0x77, 0xb4),
        RGBColor(0xff, 0x7f, 0x0e),
        RGBColor(0x2c, 0xa0, 0x2c),
        RGBColor(0x94, 0x67, 0xbd),
        RGBColor(0x8c, 0x56, 0x4b),
        RGBColor(0xe3, 0x77, 0xc2),
        RGBColor(0x17, 0xbe, 0xcf),
    ];
    C[i % C.len()]
}

/// Range of a positive log axis holding every value, widened a little.
fn log_range(values: impl Iterator<Item = f64>) -> std::ops::Range<f64> {
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for v in values.filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return 1.0..10.0;
    }
    (lo / 2.0)..(hi * 2.0)
}

pub fn draw(a: &Analysis, out: &Path, text: bool) -> Result<(), Box<dyn Error>> {
    let root = BitMapBackend::new(out, (1400, 620)).into_drawing_area();
    root.fill(&WHITE)?;
    let body = if text {
        root.titled(
            "nvidia-peermem-rs vs reference C client (TCG VM, debug kernel)",
            ("sans-serif", 22),
        )?
    } else {
        root.clone()
    };
    let (left, right) = body.split_horizontally(760);
    let sizes = a
        .cycles
        .iter()
        .map(|c| c.size as f64)
        .chain(a.memory.iter().map(|m| m.size as f64));
    let xr = log_range(sizes);
    let mut ticks: Vec<f64> = a
        .cycles
        .iter()
        .map(|c| c.size as f64)
        .chain(a.memory.iter().map(|m| m.size as f64))
        .collect();
    ticks.sort_by(f64::total_cmp);
    ticks.dedup();

    // time
    let yr = log_range(
        a.cycles
            .iter()
            .flat_map(|c| [c.client.p25 / 1e3, c.client.p75 / 1e3]),
    );
    let mut chart = ChartBuilder::on(&left);
    chart.margin(12);
    if text {
        chart
            .caption(
                "client time per register+deregister cycle",
                ("sans-serif", 18),
            )
            .x_label_area_size(40)
            .y_label_area_size(70);
    }
    let mut chart = chart.build_cartesian_2d(
        xr.clone().log_scale().with_key_points(ticks.clone()),
        yr.log_scale(),
    )?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("registration size")
            .y_desc("microseconds (median, IQR bar)")
            .x_label_formatter(&|x| size_name(x.round() as u64))
            .y_label_formatter(&|y| format!("{y:.0}"));
    } else {
        mesh.disable_x_axis().disable_y_axis();
    }
    mesh.draw()?;
    for (i, label) in a.labels.iter().enumerate() {
        let rows: Vec<_> = a.cycles.iter().filter(|c| &c.label == label).collect();
        if rows.is_empty() {
            continue;
        }
        let col = color(i);
        let thin = label.starts_with("ref/");
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .map(|c| (c.size as f64, c.client.median / 1e3))
            .collect();
        let style = col.stroke_width(if thin { 1 } else { 2 });
        let series = chart.draw_series(LineSeries::new(pts.clone(), style))?;
        if text {
            series
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col));
        }
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, col.filled())))?;
        chart.draw_series(rows.iter().map(|c| {
            PathElement::new(
                vec![
                    (c.size as f64, c.client.p25 / 1e3),
                    (c.size as f64, c.client.p75 / 1e3),
                ],
                col,
            )
        }))?;
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
    }

    // memory
    let per_page = |bytes: u64, pages: u64| bytes as f64 / pages.max(1) as f64;
    let target_pts: Vec<(f64, f64)> = a
        .memory
        .iter()
        .map(|m| (m.size as f64, per_page(memory_target(m.pages), m.pages)))
        .collect();
    let yr = log_range(
        a.memory
            .iter()
            .map(|m| per_page(m.client, m.pages))
            .chain(target_pts.iter().map(|p| p.1)),
    );
    let mut chart = ChartBuilder::on(&right);
    chart.margin(12);
    if text {
        chart
            .caption(
                "client memory per live registration, per GPU page",
                ("sans-serif", 18),
            )
            .x_label_area_size(40)
            .y_label_area_size(70);
    }
    let mut chart =
        chart.build_cartesian_2d(xr.log_scale().with_key_points(ticks), yr.log_scale())?;
    let mut mesh = chart.configure_mesh();
    if text {
        mesh.x_desc("registration size")
            .y_desc("bytes per 64 KiB GPU page")
            .x_label_formatter(&|x| size_name(x.round() as u64))
            .y_label_formatter(&|y| human_bytes(*y));
    } else {
        mesh.disable_x_axis().disable_y_axis();
    }
    mesh.draw()?;
    let mut tp = target_pts;
    tp.sort_by(|a, b| a.0.total_cmp(&b.0));
    tp.dedup_by(|a, b| a.0 == b.0);
    let series = chart.draw_series(LineSeries::new(tp, BLACK.stroke_width(3)))?;
    if text {
        series
            .label("target: 32 B/page + 256 B")
            .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    }
    for (i, label) in a.labels.iter().enumerate() {
        let rows: Vec<_> = a.memory.iter().filter(|m| &m.label == label).collect();
        if rows.is_empty() {
            continue;
        }
        let col = color(i);
        let pts: Vec<(f64, f64)> = rows
            .iter()
            .map(|m| (m.size as f64, per_page(m.client, m.pages)))
            .collect();
        let series = chart.draw_series(LineSeries::new(pts.clone(), col.stroke_width(2)))?;
        if text {
            series
                .label(label.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], col));
        }
        chart.draw_series(pts.iter().map(|p| Circle::new(*p, 3, col.filled())))?;
    }
    if text {
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 14))
            .draw()?;
    }
    root.present()?;
    Ok(())
}
