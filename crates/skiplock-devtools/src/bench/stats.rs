//! Pure summaries of repeated measurements: median with min and max, percentiles.

use serde::Serialize;

/// Median, min and max of one figure.
#[derive(Debug, Clone, Serialize)]
pub struct Stat {
    /// Median.
    pub median: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Stat {
    /// Summarises samples.
    pub fn of(samples: &[f64]) -> Stat {
        let mut s = samples.to_vec();
        s.sort_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal));
        let median = if s.is_empty() {
            0.0
        } else if s.len() % 2 == 1 {
            s[s.len() / 2]
        } else {
            (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
        };
        Stat {
            median,
            min: s.first().copied().unwrap_or(0.0),
            max: s.last().copied().unwrap_or(0.0),
        }
    }

    /// Summarises samples, or None when there are none (a skipped part).
    pub fn of_some(samples: &[f64]) -> Option<Stat> {
        (!samples.is_empty()).then(|| Stat::of(samples))
    }
}

/// The percentile `p` (0–100) of sorted samples, nearest rank.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_min_max() {
        let s = Stat::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Stat::of(&[1.0, 2.0, 3.0, 4.0]).median, 2.5);
        assert_eq!(Stat::of(&[]).median, 0.0);
        assert!(Stat::of_some(&[]).is_none());
        assert_eq!(Stat::of_some(&[7.0]).map(|s| s.median), Some(7.0));
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 100.0);
        assert_eq!(percentile(&v, 99.0), 198.0);
        assert_eq!(percentile(&v, 100.0), 200.0);
        assert_eq!(percentile(&[5.0], 99.0), 5.0);
        assert_eq!(percentile(&[], 50.0), 0.0);
    }
}
