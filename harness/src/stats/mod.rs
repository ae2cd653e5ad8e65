//! Statistics for A/B sessions: is arm B really different from arm A?
//!
//! In: per-run values of one metric for each arm, in run order (and, for an
//! interleaved A B B A … session, the adjacent (A, B) pairs from
//! [`pair_blocks`]). Out: a [`Comparison`]: medians, spreads, the median
//! difference with a 95% bootstrap interval, a rank-test p-value, flagged
//! outliers and a [`Verdict`] with the reason for it. Pure functions on plain
//! data, no I/O; same inputs and seed, same `Comparison`.
//!
//! # The verdict rule
//!
//! Absolute numbers drift 10–35% between sessions, so a difference is called
//! real only when all three hold:
//!
//! 1. the 95% percentile-bootstrap interval of the median difference (B − A)
//!    excludes 0;
//! 2. the absolute median difference exceeds the within-arm spread, the larger
//!    of the two arms' 1.4826·MAD (half the range when an arm's MAD is 0, see
//!    [`spread`]): a shift smaller than the run-to-run noise of either arm is
//!    not worth acting on even when the interval is tight;
//! 3. the rank test gives p < 0.05, when the runs are enough for it to ever
//!    do so. Paired data (pairs given) uses Wilcoxon signed-rank on the pair
//!    differences, otherwise Mann-Whitney U on the two arms. With all values
//!    of one sign Wilcoxon cannot go below 2/2ⁿ, so it needs 6 non-zero
//!    differences; Mann-Whitney cannot go below 2/C(na+nb, na), so it needs
//!    4 v 4 runs. With fewer the p-value is still reported but not required,
//!    and rules 1–2 decide alone.
//!
//! Then B is `Better` or `Worse` by the sign of the difference and
//! `lower_is_better`; if any rule fails it is `NoDifference`, with the
//! failed rules in `reason`. Fewer than 3 runs in either arm (or 3 pairs
//! when paired), or a non-finite value, is `Inconclusive`.
//!
//! With pairs, the difference is the median of the paired differences and
//! its interval resamples whole pairs; without, it is median(B) − median(A)
//! with the arms resampled independently.
//!
//! Deterministic counters fall out of the same rule with no special case:
//! identical runs in both arms give a difference of 0 and a zero interval
//! (`NoDifference`); 8 allocations against 7 in every run give spread 0 and
//! the interval [−1, −1], which excludes 0 (`Better` when lower is better).
//!
//! Outliers (modified z-score > 3.5, see [`outlier_runs`]) are flagged, never
//! dropped: the medians are already robust to them, and a flagged first run
//! (warm-up leaking into the window) is a finding about the rig, not noise.

mod bootstrap;
mod fit;
mod pairing;
mod rank;
mod summary;
mod table;

use serde::Serialize;

pub use bootstrap::{bootstrap_median_diff, bootstrap_paired_median, Interval, SplitMix64, LEVEL};
pub use fit::{least_squares, LineFit};
pub use pairing::{pair_blocks, paired_diffs};
pub use rank::{
    mann_whitney_min_p, mann_whitney_u, normal_sf, wilcoxon_min_p, wilcoxon_signed_rank,
    EXACT_MAX_N,
};
pub use summary::{mad, median, outlier_runs, per_request, spread, MAD_TO_SIGMA, OUTLIER_Z};
pub use table::{benchstat_header, benchstat_row};

use table::num;

/// Resamples behind every interval `compare` reports.
pub const BOOTSTRAP_RESAMPLES: usize = 10_000;

/// Fewest runs per arm (or pairs) for any verdict but `Inconclusive`.
pub const MIN_RUNS: usize = 3;

/// Rank-test significance level.
pub const ALPHA: f64 = 0.05;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Better,
    Worse,
    NoDifference,
    /// Too few runs, or a failed (non-finite) run.
    Inconclusive,
}

impl Verdict {
    pub fn word(self) -> &'static str {
        match self {
            Verdict::Better => "better",
            Verdict::Worse => "worse",
            Verdict::NoDifference => "no difference",
            Verdict::Inconclusive => "inconclusive",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Arm {
    A,
    B,
}

/// A flagged run: `run` indexes that arm's values.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Outlier {
    pub arm: Arm,
    pub run: usize,
    pub value: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RankTest {
    WilcoxonSignedRank,
    MannWhitneyU,
}

/// One metric, arm B against arm A. Medians and spreads are NaN only for an
/// empty or non-finite arm (the verdict is then `Inconclusive`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Comparison {
    pub a_runs: usize,
    pub b_runs: usize,
    /// Number of (A, B) pairs when the comparison is paired.
    pub pairs: Option<usize>,
    pub a_median: f64,
    pub b_median: f64,
    /// 1.4826·MAD, or half the range when the MAD is 0.
    pub a_spread: f64,
    pub b_spread: f64,
    /// B − A: median of paired differences, or difference of medians.
    pub diff_median: f64,
    /// `diff_median / |a_median|`; `None` when A's median is 0.
    pub rel: Option<f64>,
    /// 95% bootstrap interval of `diff_median`.
    pub ci: Option<Interval>,
    pub test: RankTest,
    pub p_value: Option<f64>,
    /// Whether the runs were enough for `test` to reach p < 0.05, and so
    /// whether rule 3 took part in the verdict.
    pub test_applied: bool,
    /// max(a_spread, b_spread).
    pub within_spread: f64,
    pub verdict: Verdict,
    /// Why: the failed rules, or what the verdict rests on.
    pub reason: String,
    pub lower_is_better: bool,
    pub outliers: Vec<Outlier>,
    pub a_first_run_outlier: bool,
    pub b_first_run_outlier: bool,
}

/// Compares arm `b` against arm `a` under the rule in the module docs.
///
/// `pairs` are adjacent `(a, b)` runs from [`pair_blocks`]; give them
/// whenever the session was interleaved. `seed` drives the bootstrap.
pub fn compare(
    a: &[f64],
    b: &[f64],
    pairs: Option<&[(f64, f64)]>,
    lower_is_better: bool,
    seed: u64,
) -> Comparison {
    let diffs = pairs.map(paired_diffs);
    let nan_if_none = |x: Option<f64>| x.unwrap_or(f64::NAN);
    let (a_median, b_median) = (nan_if_none(median(a)), nan_if_none(median(b)));
    let (a_spread, b_spread) = (nan_if_none(spread(a)), nan_if_none(spread(b)));
    let within_spread = if a_spread.is_nan() || b_spread.is_nan() {
        f64::NAN
    } else {
        a_spread.max(b_spread)
    };
    let (diff_median, ci, test, p_value, min_p) = match &diffs {
        Some(d) => {
            let nonzero = d.iter().filter(|&&x| x != 0.0).count();
            (
                nan_if_none(median(d)),
                bootstrap_paired_median(d, BOOTSTRAP_RESAMPLES, seed),
                RankTest::WilcoxonSignedRank,
                wilcoxon_signed_rank(d),
                wilcoxon_min_p(nonzero),
            )
        }
        None => (
            b_median - a_median,
            bootstrap_median_diff(a, b, BOOTSTRAP_RESAMPLES, seed),
            RankTest::MannWhitneyU,
            mann_whitney_u(a, b),
            mann_whitney_min_p(a.len(), b.len()),
        ),
    };
    let rel = (a_median != 0.0 && a_median.is_finite()).then(|| diff_median / a_median.abs());

    let outliers: Vec<Outlier> = [(Arm::A, a), (Arm::B, b)]
        .into_iter()
        .flat_map(|(arm, v)| {
            outlier_runs(v).into_iter().map(move |run| Outlier {
                arm,
                run,
                value: v[run],
            })
        })
        .collect();
    let first_flagged = |arm| outliers.iter().any(|o| o.arm == arm && o.run == 0);

    let mut c = Comparison {
        a_runs: a.len(),
        b_runs: b.len(),
        pairs: pairs.map(<[_]>::len),
        a_median,
        b_median,
        a_spread,
        b_spread,
        diff_median,
        rel,
        ci,
        test,
        p_value,
        test_applied: min_p < ALPHA,
        within_spread,
        verdict: Verdict::Inconclusive,
        reason: String::new(),
        lower_is_better,
        a_first_run_outlier: first_flagged(Arm::A),
        b_first_run_outlier: first_flagged(Arm::B),
        outliers,
    };
    (c.verdict, c.reason) = judge(&c, a, b, diffs.as_deref());
    c
}

fn judge(c: &Comparison, a: &[f64], b: &[f64], diffs: Option<&[f64]>) -> (Verdict, String) {
    let inconclusive = |why: String| (Verdict::Inconclusive, why);
    for (name, v) in [("arm A", a), ("arm B", b)]
        .into_iter()
        .chain(diffs.map(|d| ("pairs", d)))
    {
        if v.len() < MIN_RUNS {
            return inconclusive(format!("{name}: {} runs, {MIN_RUNS} needed", v.len()));
        }
        if v.iter().any(|x| !x.is_finite()) {
            return inconclusive(format!("{name}: a run has a non-finite value"));
        }
    }
    let Some(ci) = c.ci else {
        return inconclusive("no bootstrap interval".into());
    };

    let mut failed = Vec::new();
    if !ci.excludes_zero() {
        failed.push(format!(
            "95% interval {}..{} includes 0",
            num(ci.lo),
            num(ci.hi)
        ));
    }
    if c.diff_median.abs() <= c.within_spread {
        failed.push(format!(
            "|difference| {} within spread {}",
            num(c.diff_median.abs()),
            num(c.within_spread)
        ));
    }
    let p = c.p_value.unwrap_or(1.0);
    if c.test_applied && p >= ALPHA {
        failed.push(format!("p={p:.3} not below {ALPHA}"));
    }
    if !failed.is_empty() {
        return (Verdict::NoDifference, failed.join("; "));
    }

    let lower = c.diff_median < 0.0;
    let verdict = if lower == c.lower_is_better {
        Verdict::Better
    } else {
        Verdict::Worse
    };
    let test = if c.test_applied {
        format!("p={p:.3}")
    } else {
        "too few runs for the rank test to reach p<0.05, not required".into()
    };
    (
        verdict,
        format!(
            "95% interval {}..{} excludes 0; |difference| {} above spread {}; {test}",
            num(ci.lo),
            num(ci.hi),
            num(c.diff_median.abs()),
            num(c.within_spread)
        ),
    )
}

#[cfg(test)]
mod tests;
