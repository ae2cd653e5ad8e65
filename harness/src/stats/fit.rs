//! A straight line through points by least squares: memory against the
//! number of open connections, where the slope is what one more connection
//! costs and the intercept what the server costs with none.

use serde::Serialize;

/// `y = slope · x + intercept`, fitted by ordinary least squares.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct LineFit {
    pub slope: f64,
    pub intercept: f64,
    /// Coefficient of determination: 1 − SS_res / SS_tot. 1 when every
    /// point is on the line (and when the points do not vary at all).
    pub r2: f64,
    /// y − fitted y at each point, in the points' order: where the line
    /// does not hold shows here, not in one number.
    pub residuals: Vec<f64>,
}

/// The least-squares line through `(x, y)`; `None` with fewer than two
/// distinct x (no line is determined) or a non-finite value.
pub fn least_squares(points: &[(f64, f64)]) -> Option<LineFit> {
    if points.iter().any(|(x, y)| !x.is_finite() || !y.is_finite()) {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    if points.len() < 2 || sxx == 0.0 {
        return None;
    }
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let slope = sxy / sxx;
    let intercept = my - slope * mx;
    let residuals: Vec<f64> = points
        .iter()
        .map(|p| p.1 - (slope * p.0 + intercept))
        .collect();
    let ss_res: f64 = residuals.iter().map(|r| r * r).sum();
    let ss_tot: f64 = points.iter().map(|p| (p.1 - my).powi(2)).sum();
    let r2 = if ss_tot == 0.0 {
        1.0
    } else {
        1.0 - ss_res / ss_tot
    };
    Some(LineFit {
        slope,
        intercept,
        r2,
        residuals,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_on_a_line_give_that_line_exactly() {
        let f = least_squares(&[(0.0, 100.0), (64.0, 164.0), (128.0, 228.0)]).unwrap();
        assert_eq!((f.slope, f.intercept, f.r2), (1.0, 100.0, 1.0));
        assert_eq!(f.residuals, vec![0.0, 0.0, 0.0]);
    }

    #[test]
    fn noise_lowers_r2_and_shows_in_the_residuals() {
        // y = 2x + 1 with +1, -1, +1, -1 of noise: the least-squares line
        // of these four points, by hand (x̄ = 1.5, ȳ = 4, Sxy = 8, Sxx = 5).
        let f = least_squares(&[(0.0, 2.0), (1.0, 2.0), (2.0, 6.0), (3.0, 6.0)]).unwrap();
        assert!((f.slope - 1.6).abs() < 1e-12, "{f:?}");
        assert!((f.intercept - 1.6).abs() < 1e-12, "{f:?}");
        // SS_tot = 16, SS_res = 16 − 1.6 · 8 = 3.2.
        assert!((f.r2 - 0.8).abs() < 1e-12, "{f:?}");
        let back: f64 = f.residuals.iter().sum();
        assert!(back.abs() < 1e-12);
    }

    #[test]
    fn no_line_without_two_distinct_x() {
        assert_eq!(least_squares(&[]), None);
        assert_eq!(least_squares(&[(5.0, 1.0)]), None);
        assert_eq!(least_squares(&[(5.0, 1.0), (5.0, 2.0)]), None);
        assert_eq!(least_squares(&[(0.0, 1.0), (1.0, f64::NAN)]), None);
    }
}
