//! Location, spread and outliers of one arm's per-run values.
//!
//! Every function here refuses (`None`) an empty slice or one holding a
//! non-finite value: a NaN is a failed run upstream, and sorting it into a
//! median would turn a failure into a number.

/// Makes the MAD estimate σ for normal data: 1 / Φ⁻¹(3/4), the constant R's
/// `mad()` and scipy's `median_abs_deviation(scale="normal")` use.
pub const MAD_TO_SIGMA: f64 = 1.4826;

/// Modified z-score above which a run is flagged (Iglewicz and Hoaglin, 1993).
pub const OUTLIER_Z: f64 = 3.5;

/// `v` sorted ascending, or `None` when empty or holding a non-finite value.
pub(crate) fn sorted(v: &[f64]) -> Option<Vec<f64>> {
    if v.is_empty() || v.iter().any(|x| !x.is_finite()) {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    Some(s)
}

/// Median of an already sorted, non-empty slice.
pub(crate) fn median_sorted(s: &[f64]) -> f64 {
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Quantile `q` (0..=1) of an already sorted, non-empty slice, linear
/// interpolation between order statistics (Hyndman and Fan type 7, numpy's
/// default), so a constant slice gives exactly that constant.
pub(crate) fn quantile_sorted(s: &[f64], q: f64) -> f64 {
    let h = (s.len() - 1) as f64 * q;
    let lo = h.floor() as usize;
    match s.get(lo + 1) {
        Some(&next) => s[lo] + (h - lo as f64) * (next - s[lo]),
        None => s[lo],
    }
}

pub fn median(v: &[f64]) -> Option<f64> {
    sorted(v).map(|s| median_sorted(&s))
}

/// Median absolute deviation from the median, unscaled.
pub fn mad(v: &[f64]) -> Option<f64> {
    let m = median(v)?;
    let dev: Vec<f64> = v.iter().map(|x| (x - m).abs()).collect();
    median(&dev)
}

/// Within-arm spread: 1.4826·MAD, or half the range when the MAD is 0.
///
/// The MAD is 0 as soon as more than half the runs are identical, which is
/// common for quantized counters (7, 7, 7, 9, 11). Calling that arm's spread
/// 0 would let any difference "exceed" it although the arm was seen to vary by
/// 4; half the range is the smallest spread consistent with what was
/// observed. An arm whose runs are all identical has spread exactly 0.
pub fn spread(v: &[f64]) -> Option<f64> {
    let s = sorted(v)?;
    let mad = mad(&s)?;
    if mad > 0.0 {
        Some(MAD_TO_SIGMA * mad)
    } else {
        Some((s[s.len() - 1] - s[0]) / 2.0)
    }
}

/// Indices of runs whose modified z-score |x − median| / (1.4826·MAD)
/// exceeds 3.5. Flagged, never dropped.
///
/// With a MAD of 0 a majority of runs agree exactly, and any run that does
/// not is flagged: for a counter that should be deterministic, the run that
/// differs (typically the first: lazy binding, first touch) is the one to
/// look at. Empty for an empty or non-finite slice.
pub fn outlier_runs(v: &[f64]) -> Vec<usize> {
    let (Some(m), Some(mad)) = (median(v), mad(v)) else {
        return Vec::new();
    };
    let limit = OUTLIER_Z * MAD_TO_SIGMA * mad;
    v.iter()
        .enumerate()
        .filter(|(_, &x)| (x - m).abs() > limit)
        .map(|(i, _)| i)
        .collect()
}

/// `total` per request, or `None` when the request count is unknown or
/// zero (then nothing is per request). Every per-request value rig shows is
/// this one division: `metrics` re-exports it for the commands, and the
/// report's terminal table and flamegraph sites, which sit below `metrics`
/// (it is built from their `Attribution`), reach it here.
pub fn per_request(total: u64, requests: Option<u64>) -> Option<f64> {
    let n = requests.filter(|n| *n > 0)?;
    Some(total as f64 / n as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values: python3 + numpy 2 / scipy 1.17,
    // np.median(x), scipy.stats.median_abs_deviation(x),
    // np.quantile(x, q) (method="linear").

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
    }

    #[test]
    fn median_refuses_empty_and_non_finite() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[1.0, f64::NAN, 2.0]), None);
        assert_eq!(median(&[1.0, f64::INFINITY]), None);
        assert_eq!(mad(&[]), None);
        assert_eq!(spread(&[f64::NAN]), None);
    }

    #[test]
    fn mad_matches_scipy() {
        // np.median -> 12.25; median_abs_deviation -> 1.75
        let x = [10.0, 12.0, 11.0, 15.0, 13.0, 40.0, 12.5, 9.0];
        assert_eq!(median(&x), Some(12.25));
        assert_eq!(mad(&x), Some(1.75));
        assert_eq!(spread(&x), Some(1.4826 * 1.75));
    }

    #[test]
    fn spread_falls_back_to_half_range_when_mad_is_zero() {
        // MAD of 7,7,7,9,11 is 0 (three of five deviations are 0).
        let x = [7.0, 7.0, 7.0, 9.0, 11.0];
        assert_eq!(mad(&x), Some(0.0));
        assert_eq!(spread(&x), Some(2.0));
    }

    #[test]
    fn spread_of_identical_runs_is_zero() {
        assert_eq!(spread(&[8.0; 5]), Some(0.0));
    }

    #[test]
    fn quantile_interpolates_like_numpy() {
        // np.quantile([1,2,3,4,10], [0, .025, .5, .975, 1])
        //   -> [1.0, 1.1, 3.0, 9.4, 10.0]
        let s = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(quantile_sorted(&s, 0.0), 1.0);
        assert!((quantile_sorted(&s, 0.025) - 1.1).abs() < 1e-12);
        assert_eq!(quantile_sorted(&s, 0.5), 3.0);
        assert!((quantile_sorted(&s, 0.975) - 9.4).abs() < 1e-12);
        assert_eq!(quantile_sorted(&s, 1.0), 10.0);
        assert_eq!(quantile_sorted(&[5.0; 4], 0.975), 5.0);
    }

    #[test]
    fn flags_a_slow_first_run_without_dropping_it() {
        // np.median -> 100.5, median_abs_deviation -> 1.5, so the limit is
        // 3.5 * 1.4826 * 1.5 = 7.78; 120 is 19.5 away, 104 only 3.5.
        let x = [120.0, 100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 104.0];
        assert_eq!((median(&x), mad(&x)), (Some(100.5), Some(1.5)));
        assert_eq!(outlier_runs(&x), vec![0]);
    }

    #[test]
    fn with_zero_mad_flags_every_run_off_the_majority() {
        assert_eq!(outlier_runs(&[9.0, 7.0, 7.0, 7.0, 7.0]), vec![0]);
        assert!(outlier_runs(&[7.0; 4]).is_empty());
        assert!(outlier_runs(&[]).is_empty());
    }
}
