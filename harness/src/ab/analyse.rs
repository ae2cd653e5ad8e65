//! From the runs of every arm to verdicts: per case and metric the values
//! of each arm, compared with the first arm (exact counters decided by
//! their values, timings by a rank test), negative controls, and whether
//! equal outputs are evidence.

use std::collections::BTreeMap;

use crate::case::{CaseResult, Status};
use crate::metrics::CaseKey;
use crate::stats::{compare, Verdict};

use super::*;

const CLEAN_METRICS: &[(&str, &str, bool)] = &[
    ("rps", "req/s", false),
    ("cpu_us_per_request", "µs", true),
    ("p50_us", "µs", true),
    ("p99_us", "µs", true),
    ("rss_max_kib", "KiB", true),
];

fn clean_metric(r: &CaseResult, name: &str) -> Option<f64> {
    let c = r.clean.as_ref()?;
    Some(match name {
        "rps" => c.load.rps,
        "cpu_us_per_request" => c.server.cpu_us_per_request?,
        "p50_us" => c.load.latency.p50_ns as f64 / 1e3,
        "p99_us" => c.load.latency.p99_ns as f64 / 1e3,
        "rss_max_kib" => c.server.rss_max_kib as f64,
        _ => return None,
    })
}

fn med(v: &[f64]) -> f64 {
    crate::stats::median(v).unwrap_or(f64::NAN)
}

/// An exact, deterministic counter: the same value in every run of each
/// arm is the whole story, with any number of runs (no p-value needed).
/// `None` when either arm varies (or has no runs): the usual rules decide.
pub fn exact_verdict(a: &[f64], b: &[f64], lower_is_better: bool) -> Option<(Verdict, String)> {
    let constant = |v: &[f64]| v.first().filter(|x| v.iter().all(|y| y == *x)).copied();
    let (x, y) = (constant(a)?, constant(b)?);
    if x == y {
        return Some((
            Verdict::NoDifference,
            format!("exact counter: {x} in every run of both arms"),
        ));
    }
    let better = (y < x) == lower_is_better;
    Some((
        if better { Verdict::Better } else { Verdict::Worse },
        format!(
            "exact counter: {x} in every run of the first arm ({} runs), {y} in every run of this arm ({} runs): a deterministic difference, decided without a test",
            a.len(),
            b.len()
        ),
    ))
}

/// The one-line timing summary: the decided differences, or why none.
pub fn timing_summary(decided: &[String], undecided: bool) -> String {
    match (decided.is_empty(), undecided) {
        (false, _) => format!("timings: {}", decided.join("; ")),
        (true, true) => "timings: too few runs to decide timings (add --rounds)".to_string(),
        (true, false) => "timings: no difference beyond the within-arm spread".to_string(),
    }
}

pub(super) fn analyse(
    s: &AbSettings,
    names: &[String],
    results: Vec<(usize, u32, CaseResult)>,
    equality: Option<EqualityReport>,
    order: Vec<String>,
    interrupted: bool,
) -> AbReport {
    let n_arms = names.len();
    let failed_runs: Vec<String> = results
        .iter()
        .filter(|(_, _, r)| r.status == Status::Failed)
        .map(|(_, _, r)| format!("{}: {}", r.case.id, r.reasons.join("; ")))
        .collect();
    let (metrics, code_differences) = collect(s, n_arms, &results);
    let case_keys = results
        .iter()
        .map(|(_, _, r)| (r.case.id.clone(), CaseKey::of(&r.case).path_form()))
        .collect();
    let compared = compare_metrics(metrics, n_arms);
    let drift = drift(&compared, names);
    let evidence = evidence(equality.as_ref(), &code_differences, &compared);
    let mut verdict = summary(&compared, names);
    if !drift.is_empty() {
        verdict.push_str(" — IN DOUBT: a negative control moved");
    }
    if !failed_runs.is_empty() {
        verdict = format!(
            "IN DOUBT: {} of {} runs failed and are left out — {verdict}",
            failed_runs.len(),
            results.len()
        );
    }
    let measured = results.iter().any(|(_, _, r)| r.status.measured());
    if !measured {
        verdict = if interrupted {
            format!(
                "interrupted by SIGINT/SIGTERM before any run was measured ({} finished; cases.jsonl has them)",
                results.len()
            )
        } else {
            format!(
                "nothing was measured: all {} run(s) were skipped (cases.jsonl says why)",
                results.len()
            )
        };
    }
    AbReport {
        schema_version: 1,
        arms: names.to_vec(),
        rounds: s.rounds,
        order,
        interrupted,
        measured,
        failed_runs,
        equality,
        code_differences,
        evidence,
        metrics: compared,
        drift,
        verdict,
        case_keys,
    }
}

/// Per case (in first-seen order) and metric, the values of each arm's
/// successful runs: timings and memory of the clean pass, every per-request
/// counter of the counted pass; and per case, the call sites whose
/// per-request counts differ between arms.
fn collect(
    s: &AbSettings,
    n_arms: usize,
    results: &[(usize, u32, CaseResult)],
) -> (Vec<MetricValues>, Vec<CodeDifference>) {
    let mut keys: Vec<String> = Vec::new();
    for (_, _, r) in results {
        let k = CaseKey::of(&r.case).path_form();
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    let mut metrics = Vec::new();
    let mut code_differences = Vec::new();
    for key in &keys {
        let control = s.controls.iter().any(|c| key.starts_with(&format!("{c}/")));
        let of_arm = |arm: usize| -> Vec<&CaseResult> {
            results
                .iter()
                .filter(|(a, _, r)| {
                    *a == arm && CaseKey::of(&r.case).path_form() == *key && r.status.measured()
                })
                .map(|(_, _, r)| r)
                .collect()
        };
        let per_arm: Vec<Vec<&CaseResult>> = (0..n_arms).map(of_arm).collect();
        for &(name, unit, lower) in CLEAN_METRICS {
            let values: Vec<Vec<f64>> = per_arm
                .iter()
                .map(|rs| rs.iter().filter_map(|r| clean_metric(r, name)).collect())
                .collect();
            if values.iter().all(|v| v.is_empty()) {
                continue;
            }
            metrics.push(MetricValues {
                case: key.clone(),
                metric: name.to_string(),
                unit,
                lower_is_better: lower,
                exact: false,
                control,
                values,
            });
        }
        let sites = counted_values(key, control, &per_arm, &mut metrics);
        if !control {
            code_differences.push(CodeDifference {
                case: key.clone(),
                sites,
            });
        }
    }
    (metrics, code_differences)
}

/// One case's counted-pass counters: each exact counter as a metric (into
/// `metrics`); returns the per-site counters whose medians differ between
/// arms, with those medians.
fn counted_values(
    key: &str,
    control: bool,
    per_arm: &[Vec<&CaseResult>],
    metrics: &mut Vec<MetricValues>,
) -> Vec<(String, Vec<f64>)> {
    let counted: Vec<Vec<BTreeMap<String, f64>>> = per_arm
        .iter()
        .map(|rs| {
            rs.iter()
                .filter(|r| r.counted.is_some())
                .map(|r| crate::case::counted_metrics(r))
                .collect()
        })
        .collect();
    let mut names_all: Vec<String> = counted
        .iter()
        .flatten()
        .flat_map(|m| m.keys().cloned())
        .collect();
    names_all.sort();
    names_all.dedup();
    let mut sites = Vec::new();
    for name in names_all {
        // A site absent from a run did not happen in it: 0 per request.
        let values: Vec<Vec<f64>> = counted
            .iter()
            .map(|runs| {
                runs.iter()
                    .map(|m| m.get(&name).copied().unwrap_or(0.0))
                    .collect()
            })
            .collect();
        let medians: Vec<f64> = values.iter().map(|v| med(v)).collect();
        let is_site = name.contains(" @ ") || name.starts_with("syscall ");
        if is_site {
            if medians.iter().any(|m| (m - medians[0]).abs() > 1e-9) {
                sites.push((name.clone(), medians));
            }
            continue;
        }
        metrics.push(MetricValues {
            case: key.to_string(),
            metric: name,
            unit: "",
            lower_is_better: true,
            exact: true,
            control,
            values,
        });
    }
    sites
}

/// Each metric compared with the first arm.
fn compare_metrics(metrics: Vec<MetricValues>, n_arms: usize) -> Vec<MetricComparison> {
    // Timings and memory are noisy: a verdict on them also needs the rank
    // test, at a family-wise 5% over all the timing metrics compared (a
    // Bonferroni split). Paired (Wilcoxon) once there are 6 pairs, else
    // unpaired (Mann-Whitney). Exact counters need no test: identical runs
    // within each arm and a constant difference are the whole story.
    let timing_count = |control: bool| {
        metrics
            .iter()
            .filter(|m| !m.exact && m.control == control)
            .count()
            .max(1)
    };
    let (alpha_main, alpha_control) = (
        crate::stats::ALPHA / timing_count(false) as f64,
        crate::stats::ALPHA / timing_count(true) as f64,
    );
    metrics
        .into_iter()
        .map(|m| {
            let vs_first = (1..n_arms)
                .map(|i| {
                    let pairs: Vec<(f64, f64)> = m.values[0]
                        .iter()
                        .zip(m.values[i].iter())
                        .map(|(a, b)| (*a, *b))
                        .collect();
                    let paired = (pairs.len() >= 6).then_some(pairs.as_slice());
                    let mut c = compare(&m.values[0], &m.values[i], paired, m.lower_is_better, 0x5eed);
                    if m.exact {
                        if let Some((v, why)) =
                            exact_verdict(&m.values[0], &m.values[i], m.lower_is_better)
                        {
                            c.verdict = v;
                            c.reason = why;
                        }
                    }
                    let alpha = if m.control { alpha_control } else { alpha_main };
                    let significant = c.test_applied && c.p_value.is_some_and(|p| p < alpha);
                    if !m.exact && matches!(c.verdict, Verdict::Better | Verdict::Worse) && !significant {
                        c.verdict = Verdict::NoDifference;
                        c.reason = format!(
                            "{}; but the rank test is {} (a timing verdict needs p < {alpha:.4}: 5% over the compared timing metrics)",
                            c.reason,
                            match c.p_value {
                                Some(p) if c.test_applied => format!("p = {p:.4}"),
                                _ => "not possible with this few runs".to_string(),
                            }
                        );
                    }
                    c
                })
                .collect();
            MetricComparison { values: m, vs_first }
        })
        .collect()
}

/// Negative controls that moved: the machine moved, not the code.
fn drift(compared: &[MetricComparison], names: &[String]) -> Vec<String> {
    compared
        .iter()
        .filter(|m| m.values.control)
        .flat_map(|m| {
            m.vs_first
                .iter()
                .enumerate()
                .filter(|(_, c)| matches!(c.verdict, Verdict::Better | Verdict::Worse))
                .map(move |(i, _)| {
                    format!(
                        "negative control {} {} moved ({} vs {}): the machine moved, so the verdict is in doubt",
                        m.values.case,
                        m.values.metric,
                        names[i + 1],
                        names[0]
                    )
                })
        })
        .collect()
}

/// Whether byte-identical outputs are evidence: only next to proof that the
/// arms executed different code.
fn evidence(
    equality: Option<&EqualityReport>,
    code_differences: &[CodeDifference],
    compared: &[MetricComparison],
) -> String {
    let outputs_equal = equality.is_none_or(|e| e.differences.iter().all(|d| d.is_empty()));
    let code_differs = code_differences.iter().any(|d| !d.sites.is_empty())
        || compared.iter().any(|m| {
            m.values.exact && !m.values.control && m.vs_first.iter().any(|c| c.diff_median != 0.0)
        });
    let compared_runs = compared
        .iter()
        .any(|m| m.values.values.iter().all(|v| !v.is_empty()));
    match (outputs_equal, code_differs) {
        _ if !compared_runs => "nothing to compare: no case has a successful run in every arm (see failed_runs)".to_string(),
        (true, true) => "outputs are byte-identical AND the arms executed different code (counters differ, listed per call site): the equality is evidence".to_string(),
        (true, false) => "outputs are byte-identical, but the arms are indistinguishable by every counter: nothing shows the changed code ran, so the equality is NOT evidence".to_string(),
        (false, _) => "outputs DIFFER between arms (see equality.differences)".to_string(),
    }
}

/// The one-line timing verdict: each decided timing difference, or why
/// there is none.
fn summary(compared: &[MetricComparison], names: &[String]) -> String {
    let timing: Vec<&MetricComparison> = compared
        .iter()
        .filter(|m| !m.values.exact && !m.values.control)
        .collect();
    let mut verdict_parts = Vec::new();
    for m in &timing {
        for (i, c) in m.vs_first.iter().enumerate() {
            if matches!(c.verdict, Verdict::Better | Verdict::Worse) {
                verdict_parts.push(format!(
                    "{} {} {}: {} ({:+.1}%)",
                    names[i + 1],
                    m.values.case,
                    m.values.metric,
                    c.verdict.word(),
                    c.rel.unwrap_or(f64::NAN) * 100.0
                ));
            }
        }
    }
    let undecided = timing
        .iter()
        .flat_map(|m| m.vs_first.iter())
        .any(|c| !c.test_applied || c.verdict == Verdict::Inconclusive);
    timing_summary(&verdict_parts, undecided)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exact_counter_constant_in_each_arm_is_decided_with_any_number_of_runs() {
        let (v, why) = exact_verdict(&[4.0, 4.0], &[3.0, 3.0], true).unwrap();
        assert_eq!(v, Verdict::Better, "{why}");
        assert!(why.contains("decided without a test"), "{why}");
        assert_eq!(
            exact_verdict(&[3.0], &[4.0], true).unwrap().0,
            Verdict::Worse
        );
        assert_eq!(
            exact_verdict(&[3.0, 3.0], &[3.0], true).unwrap().0,
            Verdict::NoDifference
        );
        // A varying arm is left to the usual rules.
        assert!(exact_verdict(&[4.0, 5.0], &[3.0, 3.0], true).is_none());
        assert!(exact_verdict(&[], &[3.0], true).is_none());
    }

    #[test]
    fn the_timing_summary_says_when_runs_were_too_few_to_decide() {
        assert_eq!(
            timing_summary(&[], true),
            "timings: too few runs to decide timings (add --rounds)"
        );
        assert_eq!(
            timing_summary(&[], false),
            "timings: no difference beyond the within-arm spread"
        );
        assert!(timing_summary(&["B x: worse (+3.0%)".into()], true).contains("worse"));
    }
}
