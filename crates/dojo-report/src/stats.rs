//! Rates with confidence intervals, as every report and benchmark states them.
//!
//! A resolve rate over a handful of tasks means little without its interval, and every stage
//! (rollout summaries, training evaluations, selection tables, benchmark notes) reports one, so
//! the formula lives here once.

/// A share of successes with its 95% Wilson score interval.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rate {
    pub successes: u64,
    pub trials: u64,
    /// successes / trials (0 when there were no trials).
    pub value: f64,
    pub low: f64,
    pub high: f64,
}

/// z for a two-sided 95% interval.
const Z95: f64 = 1.959_963_984_540_054;

/// The 95% Wilson score interval of `successes` out of `trials`. Chosen over the normal
/// approximation because it stays inside [0, 1] and is meaningful at 0/n and n/n, which small
/// evaluations hit all the time. Zero trials give the whole range [0, 1].
pub fn wilson(successes: u64, trials: u64) -> Rate {
    if trials == 0 {
        return Rate {
            successes,
            trials,
            value: 0.0,
            low: 0.0,
            high: 1.0,
        };
    }
    let n = trials as f64;
    let p = successes.min(trials) as f64 / n;
    let z2 = Z95 * Z95;
    let denom = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denom;
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denom;
    // At 0/n and n/n one bound is exactly 0 or 1; rounding would leave 1e-16 off it.
    let low = if successes == 0 {
        0.0
    } else {
        (centre - half).max(0.0)
    };
    let high = if successes >= trials {
        1.0
    } else {
        (centre + half).min(1.0)
    };
    Rate {
        successes,
        trials,
        value: p,
        low,
        high,
    }
}

impl std::fmt::Display for Rate {
    /// `3/20 = 15.0% [5.2%, 36.0%]`
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{} = {:.1}% [{:.1}%, {:.1}%]",
            self.successes,
            self.trials,
            100.0 * self.value,
            100.0 * self.low,
            100.0 * self.high
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_published_values() {
        // statsmodels.stats.proportion.proportion_confint(3, 20, method="wilson")
        let r = wilson(3, 20);
        assert!((r.low - 0.052_368).abs() < 1e-5, "{r:?}");
        assert!((r.high - 0.360_419).abs() < 1e-5, "{r:?}");
        assert_eq!(r.to_string(), "3/20 = 15.0% [5.2%, 36.0%]");
    }

    #[test]
    fn edges_stay_in_range() {
        let zero = wilson(0, 13);
        assert_eq!(zero.low, 0.0);
        assert!(zero.high > 0.2 && zero.high < 0.25, "{zero:?}");
        let all = wilson(13, 13);
        assert_eq!(all.high, 1.0);
        assert!((all.low - (1.0 - zero.high)).abs() < 1e-12);
        let none = wilson(0, 0);
        assert_eq!((none.low, none.high), (0.0, 1.0));
    }
}
