// SPDX-License-Identifier: GPL-2.0
//! PNG plot of a bench run: registration/deregistration latency against
//! size (log-log) and direct vs bounce bandwidth against size. Text uses
//! the embedded DejaVu Sans (no system font or fontconfig needed).

use std::path::Path;
use std::sync::Once;

use plotters::prelude::*;

use crate::bench::{size_label, BenchResult};
use crate::error::Error;

static FONT: Once = Once::new();

fn register_font() {
    FONT.call_once(|| {
        // An error leaves text undrawn; the plot itself still renders.
        let _ = plotters::style::register_font(
            "sans-serif",
            FontStyle::Normal,
            dejavu::sans::regular(),
        );
    });
}

/// Renders `b` to a 1200x500 PNG at `out`.
pub fn render(b: &BenchResult, out: &Path) -> Result<(), Error> {
    register_font();
    if b.results.is_empty() {
        return Err(Error::Msg("no results to plot".into()));
    }
    let root = BitMapBackend::new(out, (1200, 500)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let (left, right) = root.split_horizontally(600);
    latency(b, &left).map_err(|e| format!("latency plot: {e}"))?;
    bandwidth(b, &right).map_err(|e| format!("bandwidth plot: {e}"))?;
    root.present()
        .map_err(|e| format!("{}: {e}", out.display()))?;
    Ok(())
}

/// A named, coloured line of (x, y) points.
type Series<'a> = (&'a str, RGBColor, Vec<(f64, f64)>);

type Area<'a> = DrawingArea<BitMapBackend<'a>, plotters::coord::Shift>;

/// Sizes are plotted as log2(size), so ticks fall on powers of two.
fn x_of(size: u64) -> f64 {
    (size.max(1) as f64).log2()
}

fn size_range(b: &BenchResult) -> (f64, f64) {
    let min = b.results.iter().map(|r| r.size).min().unwrap_or(1);
    let max = b.results.iter().map(|r| r.size).max().unwrap_or(2);
    (x_of(min) - 0.5, x_of(max) + 0.5)
}

/// Tick label: the size at integer log2 positions, nothing elsewhere.
fn x_label(x: &f64) -> String {
    if (x - x.round()).abs() < 1e-6 && *x >= 0.0 && *x < 63.0 {
        size_label(1u64 << (x.round() as u32))
    } else {
        String::new()
    }
}

fn x_ticks(xmin: f64, xmax: f64) -> usize {
    ((xmax - xmin).round() as usize + 1).clamp(2, 24)
}

fn latency(b: &BenchResult, area: &Area) -> Result<(), Box<dyn std::error::Error>> {
    let reg: Vec<(f64, f64)> = b
        .results
        .iter()
        .filter_map(|r| r.reg_ns.map(|s| (x_of(r.size), s.median / 1000.0)))
        .collect();
    let dereg: Vec<(f64, f64)> = b
        .results
        .iter()
        .filter_map(|r| r.dereg_ns.map(|s| (x_of(r.size), s.median / 1000.0)))
        .collect();
    let all: Vec<f64> = reg
        .iter()
        .chain(&dereg)
        .map(|p| p.1)
        .filter(|v| *v > 0.0)
        .collect();
    let (ymin, ymax) = if all.is_empty() {
        (0.1, 10.0)
    } else {
        (
            all.iter().cloned().fold(f64::MAX, f64::min) / 2.0,
            all.iter().cloned().fold(0.0, f64::max) * 2.0,
        )
    };
    let (xmin, xmax) = size_range(b);
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("Registration latency ({})", b.backend),
            ("sans-serif", 20),
        )
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(xmin..xmax, (ymin..ymax).log_scale())?;
    chart
        .configure_mesh()
        .x_desc("size (log scale)")
        .y_desc("median latency (us)")
        .x_labels(x_ticks(xmin, xmax))
        .x_label_formatter(&x_label)
        .draw()?;
    if all.is_empty() {
        area.draw(&Text::new(
            "no registration figures (no RDMA device?)",
            (120, 240),
            ("sans-serif", 16),
        ))?;
        return Ok(());
    }
    for (data, colour, name) in [(&reg, RED, "register"), (&dereg, BLUE, "deregister")] {
        if data.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(
                data.iter().cloned(),
                colour.stroke_width(2),
            ))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        chart.draw_series(data.iter().map(|p| Circle::new(*p, 4, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

fn bandwidth(b: &BenchResult, area: &Area) -> Result<(), Box<dyn std::error::Error>> {
    let series: Vec<Series> = vec![
        (
            "direct (RDMA into GPU, one write at a time, loopback)",
            RGBColor(0, 140, 0),
            b.results
                .iter()
                .filter_map(|r| r.direct_mib_s.map(|v| (x_of(r.size), v)))
                .collect(),
        ),
        (
            "bounce (host buffer + copy)",
            RGBColor(200, 100, 0),
            b.results
                .iter()
                .filter_map(|r| r.bounce_mib_s.map(|v| (x_of(r.size), v)))
                .collect(),
        ),
        (
            "host->GPU copy alone",
            RGBColor(120, 120, 120),
            b.results
                .iter()
                .filter_map(|r| r.copy_mib_s.map(|v| (x_of(r.size), v)))
                .collect(),
        ),
    ];
    let ymax = series
        .iter()
        .flat_map(|s| s.2.iter().map(|p| p.1))
        .fold(0.0, f64::max)
        .max(1.0)
        * 1.2;
    let (xmin, xmax) = size_range(b);
    let mut chart = ChartBuilder::on(area)
        .caption("Host to GPU write bandwidth", ("sans-serif", 20))
        .margin(15)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(xmin..xmax, 0.0..ymax)?;
    chart
        .configure_mesh()
        .x_desc("size (log scale)")
        .y_desc("MiB/s")
        .x_labels(x_ticks(xmin, xmax))
        .x_label_formatter(&x_label)
        .draw()?;
    for (name, colour, data) in series {
        if data.is_empty() {
            continue;
        }
        chart
            .draw_series(LineSeries::new(
                data.iter().cloned(),
                colour.stroke_width(2),
            ))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour));
        chart.draw_series(data.iter().map(|p| Circle::new(*p, 4, colour.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::{SizeResult, Stats};

    #[test]
    fn renders_a_png_with_text() {
        let b = BenchResult {
            backend: "sim".into(),
            platform: "test".into(),
            method: "m".into(),
            results: [65536u64, 1 << 20, 16 << 20]
                .iter()
                .enumerate()
                .map(|(i, s)| SizeResult {
                    size: *s,
                    iterations: 5,
                    reg_ns: Stats::of(&[1000.0 * (i + 1) as f64]),
                    dereg_ns: Stats::of(&[500.0 * (i + 1) as f64]),
                    direct_mib_s: Some(1000.0 + i as f64),
                    bounce_mib_s: Some(500.0),
                    copy_mib_s: Some(900.0),
                    ..Default::default()
                })
                .collect(),
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("b.png");
        render(&b, &p).unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[1..4], b"PNG");
        assert!(bytes.len() > 10_000, "suspiciously small: {}", bytes.len());
        let empty = BenchResult::default();
        assert!(render(&empty, &p).is_err());
    }
}
