//! `compare` and `benchstat_row` on hand-built sessions. Expected medians,
//! spreads and p-values: python3 + numpy 2 / scipy 1.17 (np.median,
//! scipy.stats.median_abs_deviation, mannwhitneyu / wilcoxon with
//! method="exact"), or exact fractions stated beside them.

use super::*;

const SEED: u64 = 0x5eed;

fn near(got: f64, want: f64) {
    assert!((got - want).abs() < 1e-9, "got {got}, want {want}");
}

#[test]
fn allocation_counter_down_by_one_in_every_run_is_better() {
    // 8 allocations/req in A, 7 in B, no noise at all.
    let c = compare(&[8.0; 5], &[7.0; 5], None, true, SEED);
    assert_eq!(c.verdict, Verdict::Better, "{}", c.reason);
    assert_eq!(
        c.reason,
        "95% interval -1..-1 excludes 0; |difference| 1 above spread 0; p=0.008"
    );
    assert_eq!((c.a_median, c.b_median, c.diff_median), (8.0, 7.0, -1.0));
    assert_eq!(c.within_spread, 0.0);
    let ci = c.ci.unwrap();
    assert_eq!((ci.lo, ci.hi, ci.level), (-1.0, -1.0, 0.95));
    assert_eq!(c.rel, Some(-0.125));
    // Complete separation of 5 v 5: 2 / C(10, 5).
    assert_eq!(c.test, RankTest::MannWhitneyU);
    near(c.p_value.unwrap(), 2.0 / 252.0);
    assert!(c.test_applied);
    assert!(c.outliers.is_empty());
}

#[test]
fn allocation_counter_up_by_one_is_worse() {
    let c = compare(&[7.0; 5], &[8.0; 5], None, true, SEED);
    assert_eq!(c.verdict, Verdict::Worse, "{}", c.reason);
}

#[test]
fn throughput_down_is_worse_when_higher_is_better() {
    let c = compare(&[8.0; 5], &[7.0; 5], None, false, SEED);
    assert_eq!(c.verdict, Verdict::Worse, "{}", c.reason);
}

#[test]
fn counter_shift_with_three_runs_needs_no_rank_test() {
    // 3 v 3 can never reach p < 0.05 (2 / C(6, 3) = 0.1), so rules 1-2
    // decide; the p-value is still reported.
    let c = compare(&[8.0; 3], &[7.0; 3], None, true, SEED);
    assert_eq!(c.verdict, Verdict::Better, "{}", c.reason);
    assert!(!c.test_applied);
    near(c.p_value.unwrap(), 0.1);
}

#[test]
fn paired_counter_shift_is_better() {
    // Two A B B A blocks: four pairs, all B − A = −1. Wilcoxon's smallest p
    // with 4 pairs is 2/16, so only rules 1-2 apply.
    let order = [
        (0, 8.0),
        (1, 7.0),
        (1, 7.0),
        (0, 8.0),
        (0, 8.0),
        (1, 7.0),
        (1, 7.0),
        (0, 8.0),
    ];
    let pairs = pair_blocks(&order, 0, 1);
    let c = compare(&[8.0; 4], &[7.0; 4], Some(&pairs), true, SEED);
    assert_eq!(c.verdict, Verdict::Better, "{}", c.reason);
    assert_eq!(c.pairs, Some(4));
    assert_eq!(c.test, RankTest::WilcoxonSignedRank);
    assert_eq!(c.p_value, Some(0.125));
    assert!(!c.test_applied);
    let ci = c.ci.unwrap();
    assert_eq!((ci.lo, ci.hi), (-1.0, -1.0));
}

#[test]
fn identical_counters_are_no_difference_with_a_zero_interval() {
    let c = compare(&[5.0; 6], &[5.0; 6], None, true, SEED);
    assert_eq!(c.verdict, Verdict::NoDifference);
    assert_eq!(c.diff_median, 0.0);
    let ci = c.ci.unwrap();
    assert_eq!((ci.lo, ci.hi), (0.0, 0.0));
    assert_eq!(c.p_value, Some(1.0));
    let paired = compare(&[5.0; 6], &[5.0; 6], Some(&[(5.0, 5.0); 6]), true, SEED);
    assert_eq!(paired.verdict, Verdict::NoDifference);
    assert_eq!(paired.ci.map(|i| (i.lo, i.hi)), Some((0.0, 0.0)));
}

#[test]
fn clear_shift_beyond_noise_is_better() {
    // np.median: 100.15 and 90.45; spreads 1.4826 * MAD: 0.96369, 0.74130;
    // complete separation, mannwhitneyu exact p = 2 / C(16, 8) = 1.554e-4.
    let a = [100.2, 99.1, 101.3, 100.8, 99.7, 100.1, 100.9, 99.5];
    let b = [90.3, 91.2, 89.8, 90.9, 90.1, 89.5, 91.0, 90.6];
    let c = compare(&a, &b, None, true, SEED);
    assert_eq!(c.verdict, Verdict::Better, "{}", c.reason);
    near(c.a_median, 100.15);
    near(c.b_median, 90.45);
    near(c.diff_median, -9.7);
    near(c.rel.unwrap(), -0.0968547179231155);
    near(c.a_spread, 0.96369);
    near(c.b_spread, 0.7413);
    near(c.within_spread, 0.96369);
    near(c.p_value.unwrap(), 2.0 / 12870.0);
    let ci = c.ci.unwrap();
    assert!(ci.lo <= -9.7 && -9.7 <= ci.hi && ci.hi < 0.0, "{ci:?}");
}

#[test]
fn overlapping_noisy_arms_are_no_difference() {
    let a = [10.0, 12.0, 9.0, 11.0, 13.0, 10.5];
    let b = [11.0, 9.5, 12.5, 10.0, 12.0, 10.8];
    let c = compare(&a, &b, None, true, SEED);
    assert_eq!(c.verdict, Verdict::NoDifference);
    assert!(c.reason.contains("includes 0"), "{}", c.reason);
    assert!(!c.test_applied || c.p_value.unwrap() >= ALPHA);
}

#[test]
fn paired_shift_smaller_than_within_arm_spread_is_no_difference() {
    // Load drifts 100 -> 200 across blocks; B is +~1 in every pair, so the
    // interval excludes 0 and Wilcoxon gives 2/256 = 0.0078125, but the arms
    // spread by 1.4826 * MAD = 44.478 and 44.070, far more than the difference: drift between sessions,
    // not a real effect.
    let a = [100.0, 120.0, 140.0, 160.0, 180.0, 200.0, 110.0, 150.0];
    let d = [1.0, 1.2, 0.9, 1.1, 1.0, 0.8, 1.3, 1.05];
    let b: Vec<f64> = a.iter().zip(d).map(|(a, d)| a + d).collect();
    let pairs: Vec<(f64, f64)> = a.iter().copied().zip(b.iter().copied()).collect();
    let c = compare(&a, &b, Some(&pairs), true, SEED);
    assert_eq!(c.verdict, Verdict::NoDifference);
    near(c.diff_median, 1.025);
    near(c.within_spread, 44.478);
    near(c.p_value.unwrap(), 0.0078125);
    assert!(c.ci.unwrap().excludes_zero());
    assert_eq!(c.reason, "|difference| 1.025 within spread 44.48");
}

#[test]
fn rank_test_veto_with_enough_pairs_is_no_difference() {
    // Six pairs, B − A = 5, 6, 7, 8, -0.5, 9: the bootstrap interval excludes
    // 0 (a resample median <= 0 needs four draws of -0.5, P = 0.0087) and
    // 6.5 beats the spreads (0.7413, 2.2239), but wilcoxon exact p = 0.0625.
    let a = [100.0, 101.0, 99.0, 100.0, 102.0, 100.0];
    let b = [105.0, 107.0, 106.0, 108.0, 101.5, 109.0];
    let pairs: Vec<(f64, f64)> = a.iter().copied().zip(b.iter().copied()).collect();
    let c = compare(&a, &b, Some(&pairs), true, SEED);
    assert_eq!(c.verdict, Verdict::NoDifference);
    assert!(c.test_applied);
    near(c.p_value.unwrap(), 0.0625);
    near(c.diff_median, 6.5);
    near(c.within_spread, 2.2239);
    assert!(c.ci.unwrap().excludes_zero());
    assert!(c.reason.starts_with("p=0.062"), "{}", c.reason);
}

#[test]
fn fewer_than_three_runs_is_inconclusive() {
    let c = compare(&[8.0, 8.0], &[7.0; 5], None, true, SEED);
    assert_eq!(c.verdict, Verdict::Inconclusive);
    assert_eq!(c.reason, "arm A: 2 runs, 3 needed");
    let c = compare(&[8.0; 4], &[7.0; 4], Some(&[(8.0, 7.0); 2]), true, SEED);
    assert_eq!(c.verdict, Verdict::Inconclusive);
    assert_eq!(c.reason, "pairs: 2 runs, 3 needed");
    let c = compare(&[], &[], None, true, SEED);
    assert_eq!(c.verdict, Verdict::Inconclusive);
    assert!(c.a_median.is_nan() && c.ci.is_none() && c.p_value.is_none());
}

#[test]
fn a_failed_run_is_inconclusive() {
    let c = compare(&[8.0, f64::NAN, 8.0, 8.0], &[7.0; 4], None, true, SEED);
    assert_eq!(c.verdict, Verdict::Inconclusive);
    assert_eq!(c.reason, "arm A: a run has a non-finite value");
}

#[test]
fn slow_first_run_is_flagged_not_dropped() {
    // A's first run pays lazy binding: median 100.5, MAD 1.5, limit 7.78.
    let a = [120.0, 100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 104.0];
    let b = [100.0, 101.0, 99.0, 100.0, 102.0, 98.0, 101.0, 100.0];
    let c = compare(&a, &b, None, true, SEED);
    assert_eq!(
        c.outliers,
        vec![Outlier {
            arm: Arm::A,
            run: 0,
            value: 120.0
        }]
    );
    assert!(c.a_first_run_outlier && !c.b_first_run_outlier);
    assert_eq!(c.a_runs, 8);
    near(c.a_median, 100.5);
    assert_eq!(c.verdict, Verdict::NoDifference);
}

#[test]
fn same_seed_gives_the_same_comparison() {
    let a = [10.0, 12.0, 9.0, 11.0, 13.0, 10.5];
    let b = [11.0, 9.5, 12.5, 10.0, 12.0, 10.8];
    assert_eq!(
        compare(&a, &b, None, true, 7),
        compare(&a, &b, None, true, 7)
    );
}

#[test]
fn zero_baseline_has_no_relative_change() {
    let c = compare(&[0.0; 4], &[2.0; 4], None, true, SEED);
    assert_eq!(c.rel, None);
    assert_eq!(c.verdict, Verdict::Worse, "{}", c.reason);
}

#[test]
fn benchstat_rows_read_like_benchstat() {
    assert_eq!(
        benchstat_header(),
        vec!["metric", "A", "B", "Δ (95% CI)", "p", "verdict"]
    );
    let c = compare(&[8.0; 5], &[7.0; 5], None, true, SEED);
    assert_eq!(
        benchstat_row("allocs/req", &c, ""),
        vec![
            "allocs/req",
            "8 ± 0",
            "7 ± 0",
            "-12.50% (-12.50% .. -12.50%)",
            "p=0.008 n=5+5",
            "better"
        ]
    );
    let order = [(0, 8.0), (1, 7.0), (1, 7.0), (0, 8.0)];
    let pairs = pair_blocks(&order, 0, 1);
    let c = compare(&[8.0, 8.0], &[7.0, 7.0], Some(&pairs), true, SEED);
    assert_eq!(
        benchstat_row("allocs/req", &c, ""),
        vec![
            "allocs/req",
            "8 ± 0",
            "7 ± 0",
            "-12.50% (-12.50% .. -12.50%)",
            "p=0.500 n=2 pairs unused",
            "inconclusive"
        ]
    );
    let c = compare(&[0.0; 4], &[2.0; 4], None, true, SEED);
    assert_eq!(
        benchstat_row("mmap/req", &c, "calls"),
        vec![
            "mmap/req",
            "0 ± 0 calls",
            "2 ± 0 calls",
            "+2 (+2 .. +2) calls",
            "p=0.029 n=4+4",
            "worse"
        ]
    );
    let a = [100.2, 99.1, 101.3, 100.8, 99.7, 100.1, 100.9, 99.5];
    let b = [90.3, 91.2, 89.8, 90.9, 90.1, 89.5, 91.0, 90.6];
    let row = benchstat_row("cpu/req", &compare(&a, &b, None, true, SEED), "µs");
    assert_eq!(row[1], "100.2 ± 0.9637 µs");
    assert_eq!(row[2], "90.45 ± 0.7413 µs");
    assert!(row[3].starts_with("-9.69% ("), "{}", row[3]);
    assert_eq!(row[4], "p<0.001 n=8+8");
}
