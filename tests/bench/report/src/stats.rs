// SPDX-License-Identifier: GPL-2.0
//! Order statistics of repeated samples.

use serde_json::{json, Value};

/// Median and spread of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
    pub median: f64,
    pub p25: f64,
    pub p75: f64,
    pub min: f64,
    pub max: f64,
}

/// Linear interpolation between closest ranks (the usual "type 7").
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let pos = q * (sorted.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

impl Summary {
    /// None for an empty set.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut s = samples.to_vec();
        s.sort_by(f64::total_cmp);
        Some(Summary {
            n: s.len(),
            median: quantile(&s, 0.5),
            p25: quantile(&s, 0.25),
            p75: quantile(&s, 0.75),
            min: s[0],
            max: s[s.len() - 1],
        })
    }

    /// Interquartile range relative to the median, in percent.
    pub fn iqr_pct(&self) -> f64 {
        if self.median == 0.0 {
            0.0
        } else {
            100.0 * (self.p75 - self.p25) / self.median
        }
    }

    pub fn to_json(self) -> Value {
        json!({
            "n": self.n,
            "median": self.median,
            "p25": self.p25,
            "p75": self.p75,
            "min": self.min,
            "max": self.max,
            "iqr_pct": self.iqr_pct(),
        })
    }
}

/// Least-squares slope of log(y) against log(x): 1.0 is linear growth.
pub fn loglog_slope(points: &[(f64, f64)]) -> Option<f64> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(x, y)| *x > 0.0 && *y > 0.0)
        .map(|(x, y)| (x.ln(), y.ln()))
        .collect();
    if pts.len() < 2 {
        return None;
    }
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_quartiles() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]).unwrap();
        assert_eq!(
            (s.median, s.p25, s.p75, s.min, s.max),
            (3.0, 2.0, 4.0, 1.0, 5.0)
        );
        let e = Summary::of(&[1.0, 2.0]).unwrap();
        assert_eq!(e.median, 1.5);
        assert!(Summary::of(&[]).is_none());
        assert!((s.iqr_pct() - 66.666).abs() < 0.01);
    }

    #[test]
    fn slopes() {
        let lin: Vec<(f64, f64)> = [1.0, 10.0, 100.0].iter().map(|&x| (x, 3.0 * x)).collect();
        assert!((loglog_slope(&lin).unwrap() - 1.0).abs() < 1e-9);
        let flat = [(1.0, 5.0), (100.0, 5.0)];
        assert!(loglog_slope(&flat).unwrap().abs() < 1e-9);
        assert!(loglog_slope(&[(1.0, 1.0)]).is_none());
    }
}
