//! A family's smoothed peak GPU memory.

/// Weight of the newest peak, as the founding document asks.
pub const DEFAULT_ALPHA: f64 = 0.3;

/// What is known about a family: its smoothed peak memory per GPU and how many pods fed it.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct FamilyHistory {
    /// Exponentially smoothed peak GPU memory per device, in bytes.
    pub smoothed_peak_bytes: f64,
    /// Number of peaks folded in.
    pub samples: u32,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HistoryError {
    #[error("rightSizing.alpha must be a number in (0, 1], got {0}")]
    Alpha(f64),
}

/// Checks a smoothing factor.
pub fn check_alpha(alpha: f64) -> Result<f64, HistoryError> {
    if alpha.is_finite() && alpha > 0.0 && alpha <= 1.0 {
        Ok(alpha)
    } else {
        Err(HistoryError::Alpha(alpha))
    }
}

impl FamilyHistory {
    /// Folds in one pod's peak: `alpha · peak + (1 − alpha) · previous`. The first peak is taken
    /// as it is, so a young family is not pulled towards zero.
    pub fn observe(self, peak_bytes: f64, alpha: f64) -> FamilyHistory {
        let peak = peak_bytes.max(0.0);
        let smoothed = if self.samples == 0 {
            peak
        } else {
            alpha * peak + (1.0 - alpha) * self.smoothed_peak_bytes
        };
        FamilyHistory {
            smoothed_peak_bytes: smoothed,
            samples: self.samples.saturating_add(1),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn smoothing_follows_the_founding_formula() {
        let h = FamilyHistory::default().observe(10.0, DEFAULT_ALPHA);
        assert_eq!((h.smoothed_peak_bytes, h.samples), (10.0, 1));
        let h = h.observe(20.0, DEFAULT_ALPHA);
        assert!((h.smoothed_peak_bytes - 13.0).abs() < 1e-9);
        assert_eq!(h.samples, 2);
        assert!(check_alpha(0.0).is_err() && check_alpha(1.5).is_err());
        assert!(check_alpha(f64::NAN).is_err() && check_alpha(1.0).is_ok());
    }
}
