//! Rank tests: Wilcoxon signed-rank (paired) and Mann-Whitney U (two arms).
//!
//! Both return a two-sided p-value, `2 · min(P(T ≤ t), P(T ≥ t))` capped at
//! 1, the definition scipy uses. Small samples get the exact permutation
//! distribution of the rank statistic *given the observed ranks*: ties share
//! their average rank and the distribution is enumerated over those ranks
//! (doubled, so they are integers), which is exact with or without ties.
//! Quantized counters tie constantly, and a normal approximation on five runs
//! a side is not an answer. Larger samples use the normal approximation with
//! tie-corrected variance and a 0.5 continuity correction.

/// Largest sample (non-zero differences, or runs per arm) tested exactly.
pub const EXACT_MAX_N: usize = 25;

/// Doubled average ranks (1-based) of `v`, and the sizes of its tie groups.
fn doubled_midranks(v: &[f64]) -> (Vec<u64>, Vec<u64>) {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&i, &j| v[i].total_cmp(&v[j]));
    let mut ranks = vec![0; v.len()];
    let mut ties = Vec::new();
    let mut start = 0;
    while start < idx.len() {
        let mut end = start + 1;
        while end < idx.len() && v[idx[end]] == v[idx[start]] {
            end += 1;
        }
        // Positions start..end hold ranks start+1..=end; twice their mean:
        let doubled = (start + 1 + end) as u64;
        for &i in &idx[start..end] {
            ranks[i] = doubled;
        }
        ties.push((end - start) as u64);
        start = end;
    }
    (ranks, ties)
}

/// Σ (t³ − t) over tie groups, the usual variance correction term.
fn tie_term(ties: &[u64]) -> f64 {
    ties.iter().map(|&t| (t as f64).powi(3) - t as f64).sum()
}

/// Two-sided p from an exact count distribution `counts[s]` over statistic
/// values `s`, at the observed value `t`.
fn two_sided_exact(counts: &[f64], t: usize) -> f64 {
    let all: f64 = counts.iter().sum();
    let le: f64 = counts[..=t].iter().sum();
    let ge: f64 = counts[t..].iter().sum();
    (2.0 * le.min(ge) / all).min(1.0)
}

/// Two-sided p for a statistic `deviation` away from its null mean, with a
/// 0.5 continuity correction, under a normal null with variance `var`.
fn two_sided_normal(deviation: f64, var: f64) -> f64 {
    if var <= 0.0 {
        return 1.0;
    }
    let z = (deviation.abs() - 0.5).max(0.0) / var.sqrt();
    (2.0 * normal_sf(z)).min(1.0)
}

/// P(Z > z) for a standard normal Z.
pub fn normal_sf(z: f64) -> f64 {
    0.5 * libm::erfc(z / std::f64::consts::SQRT_2)
}

/// Wilcoxon signed-rank test of paired differences against a median of 0;
/// two-sided p.
///
/// Zero differences are dropped before ranking (Wilcoxon's original
/// treatment, scipy's `zero_method="wilcox"`): a pair that did not move says
/// nothing about direction. All-zero input gives 1.0. `None` for empty or
/// non-finite input. Exact for up to [`EXACT_MAX_N`] non-zero differences:
/// under the null each rank is positive with probability ½, so the count of
/// sign patterns per W⁺ is a subset-sum over the (doubled) ranks.
pub fn wilcoxon_signed_rank(diffs: &[f64]) -> Option<f64> {
    if diffs.is_empty() || diffs.iter().any(|d| !d.is_finite()) {
        return None;
    }
    let nonzero: Vec<f64> = diffs.iter().copied().filter(|&d| d != 0.0).collect();
    if nonzero.is_empty() {
        return Some(1.0);
    }
    let abs: Vec<f64> = nonzero.iter().map(|d| d.abs()).collect();
    let (ranks, ties) = doubled_midranks(&abs);
    let w_plus: u64 = ranks
        .iter()
        .zip(&nonzero)
        .filter(|(_, &d)| d > 0.0)
        .map(|(&r, _)| r)
        .sum();
    let n = nonzero.len();
    if n <= EXACT_MAX_N {
        let total: u64 = ranks.iter().sum();
        let mut counts = vec![0.0; total as usize + 1];
        counts[0] = 1.0;
        for &r in &ranks {
            for s in (r as usize..=total as usize).rev() {
                counts[s] += counts[s - r as usize];
            }
        }
        return Some(two_sided_exact(&counts, w_plus as usize));
    }
    let n = n as f64;
    let mean = n * (n + 1.0) / 4.0;
    let var = n * (n + 1.0) * (2.0 * n + 1.0) / 24.0 - tie_term(&ties) / 48.0;
    Some(two_sided_normal(w_plus as f64 / 2.0 - mean, var))
}

/// Mann-Whitney U test (Wilcoxon rank-sum) of arm `a` against arm `b`;
/// two-sided p. `None` for an empty or non-finite arm.
///
/// Exact when both arms have at most [`EXACT_MAX_N`] runs: the number of ways
/// to pick `b`'s rank set from the pooled (doubled) ranks, by rank sum.
/// Otherwise normal, with variance `na·nb/12 · (N + 1 − Σ(t³−t)/(N(N−1)))`.
pub fn mann_whitney_u(a: &[f64], b: &[f64]) -> Option<f64> {
    if a.is_empty() || b.is_empty() || a.iter().chain(b).any(|x| !x.is_finite()) {
        return None;
    }
    let pooled: Vec<f64> = a.iter().chain(b).copied().collect();
    let (ranks, ties) = doubled_midranks(&pooled);
    let (na, nb) = (a.len(), b.len());
    let rank_sum_b: u64 = ranks[na..].iter().sum();
    if na <= EXACT_MAX_N && nb <= EXACT_MAX_N {
        // ways[k][s]: subsets of k pooled runs whose doubled ranks sum to s.
        let max_sum: u64 = ranks.iter().sum();
        let width = max_sum as usize + 1;
        let mut ways = vec![vec![0.0; width]; nb + 1];
        ways[0][0] = 1.0;
        for (seen, &r) in ranks.iter().enumerate() {
            let r = r as usize;
            for k in (1..=nb.min(seen + 1)).rev() {
                let (below, at) = ways.split_at_mut(k);
                for s in (r..width).rev() {
                    at[0][s] += below[k - 1][s - r];
                }
            }
        }
        return Some(two_sided_exact(&ways[nb], rank_sum_b as usize));
    }
    let (na, nb) = (na as f64, nb as f64);
    let n = na + nb;
    let u_b = rank_sum_b as f64 / 2.0 - nb * (nb + 1.0) / 2.0;
    let var = na * nb / 12.0 * ((n + 1.0) - tie_term(&ties) / (n * (n - 1.0)));
    Some(two_sided_normal(u_b - na * nb / 2.0, var))
}

/// Smallest two-sided p the Wilcoxon test can produce with `n` non-zero
/// differences: every difference of one sign, 2 / 2ⁿ. Below 0.05 from n = 6.
pub fn wilcoxon_min_p(n: usize) -> f64 {
    (2.0 / 2f64.powi(n.min(1024) as i32)).min(1.0)
}

/// Smallest two-sided p the Mann-Whitney test can produce with arms of `na`
/// and `nb` runs: complete separation, 2 / C(na + nb, na). Below 0.05 from
/// 4 v 4 (or 3 v 5).
pub fn mann_whitney_min_p(na: usize, nb: usize) -> f64 {
    // C(na + nb, na) built up as a running product, exact while it fits.
    let mut c = 1.0;
    for i in 0..na.min(nb) {
        c = c * (na.max(nb) + i + 1) as f64 / (i + 1) as f64;
    }
    (2.0 / c).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(got: Option<f64>, want: f64) {
        let got = got.expect("a p-value");
        assert!(
            (got - want).abs() <= 1e-12 * want.max(1e-300) + 1e-15,
            "got {got:e}, want {want:e}"
        );
    }

    #[test]
    fn midranks_average_ties() {
        // scipy.stats.rankdata([3, 1, 3, 2, 3]) -> [4, 1, 4, 2, 4]
        let (r, t) = doubled_midranks(&[3.0, 1.0, 3.0, 2.0, 3.0]);
        assert_eq!(r, vec![8, 2, 8, 4, 8]);
        assert_eq!(t, vec![1, 1, 3]);
    }

    #[test]
    fn normal_sf_matches_scipy() {
        // scipy.stats.norm.sf(z)
        close(Some(normal_sf(0.0)), 0.5);
        close(Some(normal_sf(1.959963984540054)), 0.025);
        close(Some(normal_sf(5.0)), 2.866515718791933e-07);
        close(Some(normal_sf(-1.0)), 0.8413447460685429);
    }

    #[test]
    fn wilcoxon_exact_without_ties_matches_scipy() {
        // scipy.stats.wilcoxon(d, method="exact").pvalue -> 0.064453125
        let d = [1.2, -0.4, 3.1, 2.2, -1.7, 0.9, 2.8, 1.5, -0.2, 4.0];
        close(wilcoxon_signed_rank(&d), 0.064453125);
        let negated: Vec<f64> = d.iter().map(|x| -x).collect();
        close(wilcoxon_signed_rank(&negated), 0.064453125);
    }

    #[test]
    fn wilcoxon_exact_with_ties_and_zeros_matches_enumeration() {
        // Two zeros dropped, ten non-zero with tied |d|. python3 enumerating
        // all 2^10 sign patterns over scipy.stats.rankdata(|d|) midranks:
        // W+ = 45, two-sided p = 2 * P(W+ >= 45) = 0.08984375.
        let d = [1.0, 1.0, -1.0, 2.0, 2.0, 0.0, 3.0, -2.0, 1.0, 0.0, 2.5, 1.0];
        close(wilcoxon_signed_rank(&d), 0.08984375);
    }

    #[test]
    fn wilcoxon_one_signed_differences_reach_two_over_two_to_the_n() {
        close(wilcoxon_signed_rank(&[-1.0; 6]), 2.0 / 64.0);
        close(wilcoxon_signed_rank(&[-1.0; 5]), 2.0 / 32.0);
        close(
            wilcoxon_signed_rank(&[0.5, 1.0, 2.0, 3.0, 4.0, 5.0]),
            2.0 / 64.0,
        );
    }

    #[test]
    fn wilcoxon_normal_approximation_above_25_matches_scipy() {
        // 40 differences, 8 zeros -> 32 non-zero, heavy ties.
        // scipy.stats.wilcoxon(d, method="approx", correction=True,
        // zero_method="wilcox").pvalue -> 0.22135344360432918
        let d = [
            0.5, 2.5, 2.0, -0.5, -0.0, -0.5, 1.5, 0.5, 1.5, -2.5, 2.5, 0.5, 1.5, 0.0, -0.0, 1.0,
            1.5, 0.0, 0.0, 1.5, -1.0, -2.0, 1.0, -0.5, -2.5, -1.0, -0.5, -1.5, -2.0, 0.5, 1.5, 0.0,
            -0.5, 1.0, 1.5, -0.0, 1.0, 2.0, 0.0, -1.0,
        ];
        close(wilcoxon_signed_rank(&d), 0.22135344360432918);
    }

    #[test]
    fn wilcoxon_edge_cases() {
        assert_eq!(wilcoxon_signed_rank(&[0.0; 4]), Some(1.0));
        assert_eq!(wilcoxon_signed_rank(&[]), None);
        assert_eq!(wilcoxon_signed_rank(&[1.0, f64::NAN]), None);
    }

    #[test]
    fn mann_whitney_exact_without_ties_matches_scipy() {
        // scipy.stats.mannwhitneyu(a, b, method="exact").pvalue
        //   -> 0.022144522144522144
        let a = [10.1, 11.4, 9.8, 10.6, 12.0, 10.9];
        let b = [11.9, 12.5, 10.7, 13.1, 12.2, 11.5, 12.8];
        close(mann_whitney_u(&a, &b), 0.022144522144522144);
        close(mann_whitney_u(&b, &a), 0.022144522144522144);
    }

    #[test]
    fn mann_whitney_exact_with_ties_matches_enumeration() {
        // python3 enumerating all C(13, 7) = 1716 rank sets for b over
        // scipy.stats.rankdata midranks: p = 0.04312354312354312.
        let a = [3.0, 4.0, 4.0, 5.0, 7.0, 7.0];
        let b = [4.0, 6.0, 7.0, 8.0, 8.0, 9.0, 9.0];
        close(mann_whitney_u(&a, &b), 0.04312354312354312);
        close(mann_whitney_u(&b, &a), 0.04312354312354312);
    }

    #[test]
    fn mann_whitney_separated_constant_arms_reach_two_over_binomial() {
        // Same enumeration, C(10, 5) = 252: p = 2/252 = 0.007936507936507936.
        close(mann_whitney_u(&[8.0; 5], &[7.0; 5]), 2.0 / 252.0);
        assert_eq!(mann_whitney_u(&[8.0; 5], &[8.0; 5]), Some(1.0));
    }

    #[test]
    fn mann_whitney_normal_approximation_above_25_matches_scipy() {
        // scipy.stats.mannwhitneyu(a, b, method="asymptotic",
        // use_continuity=True).pvalue -> 0.03338592152314759 (either order)
        let a = [
            7.0, 10.0, 10.0, 9.0, 8.0, 9.0, 8.0, 7.0, 10.0, 8.0, 12.0, 11.0, 6.0, 11.0, 8.0, 10.0,
            10.0, 6.0, 10.0, 9.0, 12.0, 8.0, 11.0, 8.0, 9.0, 8.0, 13.0, 11.0, 15.0, 11.0,
        ];
        let b = [
            13.0, 13.0, 10.0, 11.0, 14.0, 10.0, 11.0, 11.0, 12.0, 10.0, 11.0, 11.0, 11.0, 9.0,
            13.0, 8.0, 9.0, 8.0, 13.0, 10.0, 9.0, 9.0, 12.0, 9.0, 8.0, 12.0, 9.0, 10.0,
        ];
        close(mann_whitney_u(&a, &b), 0.03338592152314759);
        close(mann_whitney_u(&b, &a), 0.03338592152314759);
    }

    #[test]
    fn mann_whitney_refuses_empty_and_non_finite_arms() {
        assert_eq!(mann_whitney_u(&[], &[1.0]), None);
        assert_eq!(mann_whitney_u(&[1.0], &[f64::INFINITY]), None);
    }

    #[test]
    fn exact_tests_hold_up_at_the_largest_exact_size() {
        // 25 v 25 and 25 differences, no ties: C(50, 25) = 1.3e14 and 2^25
        // sign patterns, still exact in f64. scipy.stats.mannwhitneyu /
        // wilcoxon(method="exact").pvalue -> 0.005855324831595379 and
        // 0.00032907724380493164.
        let a = [
            60.2, 37.22, 52.09, 47.16, 47.74, 48.92, 39.9, 48.84, 45.67, 66.61, 51.13, 48.24,
            48.59, 46.66, 44.72, 48.05, 52.41, 48.81, 54.79, 49.0, 50.12, 57.73, 52.73, 47.47,
            49.09,
        ];
        let b = [
            55.7, 62.68, 51.65, 51.78, 58.01, 48.57, 51.54, 57.41, 55.9, 53.46, 56.35, 38.86,
            58.11, 48.2, 44.66, 54.38, 56.5, 50.78, 47.62, 53.13, 52.74, 60.03, 56.74, 53.97,
            58.56,
        ];
        close(mann_whitney_u(&a, &b), 0.005855324831595379);
        let d = [
            0.41, 0.38, 1.58, 1.28, 0.87, 1.3, -0.04, 1.01, -0.91, 1.85, 0.59, 0.68, 1.1, 0.49,
            0.25, 1.69, 0.62, -0.42, 0.94, -1.21, 2.16, 0.33, 0.55, 2.76, 2.65,
        ];
        close(wilcoxon_signed_rank(&d), 0.00032907724380493164);
    }

    #[test]
    fn smallest_attainable_p_values() {
        assert_eq!(wilcoxon_min_p(5), 0.0625);
        assert_eq!(wilcoxon_min_p(6), 0.03125);
        assert_eq!(wilcoxon_min_p(0), 1.0);
        close(Some(mann_whitney_min_p(3, 3)), 0.1);
        close(Some(mann_whitney_min_p(3, 4)), 2.0 / 35.0);
        close(Some(mann_whitney_min_p(4, 4)), 2.0 / 70.0);
        close(Some(mann_whitney_min_p(5, 3)), 2.0 / 56.0);
    }
}
