//! From the runs of every arm to verdicts: per case and metric the values
//! of each arm, compared with the first arm (counters proven deterministic
//! decided by their values; timings and counters that vary between runs of
//! one arm by their spread and a rank test), negative controls, and whether
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

/// Fewest runs of each arm that can prove a counter deterministic: two
/// equal runs happen by chance for a counter that moves by one event now
/// and then (an epoll_wait that returned two events at once), so one round
/// (two runs per arm) proves nothing and a counter is then compared by its
/// spread like a timing.
pub const PROOF_RUNS: usize = 3;

/// The family-wise level for counters that vary between runs of one arm:
/// stricter than timings' 5%, because a counter that moves with timing is
/// expected to be identical between identical arms, and a difference on it
/// must not come from a few lucky runs. Below 4 rounds no rank test can
/// reach it, so such a counter is never decided there.
pub const VARYING_COUNTER_ALPHA: f64 = 0.01;

/// A site present in every run of one arm at least this often per request,
/// and in no run of another, is a difference even when its count varies:
/// code that runs on every request of one arm and never in the other.
pub const ONE_ARM_SITE_MIN: f64 = 1.0;

/// One case's counted-pass counters: per arm, one map per successful run.
struct CountedCase {
    key: String,
    control: bool,
    runs: Vec<Vec<BTreeMap<String, f64>>>,
}

impl CountedCase {
    fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .runs
            .iter()
            .flatten()
            .flat_map(|m| m.keys().cloned())
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// `name` in each run of each arm; a site absent from a run did not
    /// happen in it: 0 per request.
    fn values(&self, name: &str) -> Vec<Vec<f64>> {
        self.runs
            .iter()
            .map(|runs| {
                runs.iter()
                    .map(|m| m.get(name).copied().unwrap_or(0.0))
                    .collect()
            })
            .collect()
    }
}

fn constant(v: &[f64]) -> bool {
    v.windows(2).all(|w| w[0] == w[1])
}

/// Counters that varied between two runs of one arm in some case or
/// control: they move with timing on this target, so no case may decide
/// them by their values.
fn varying_counters(cases: &[CountedCase]) -> std::collections::BTreeSet<String> {
    let mut out = std::collections::BTreeSet::new();
    for c in cases {
        for name in c.names() {
            if c.values(&name).iter().any(|v| !constant(v)) {
                out.insert(name);
            }
        }
    }
    out
}

/// Whether `values` (per arm) prove the counter deterministic: enough
/// runs of every arm, each arm constant, and the name never seen varying.
fn proven(values: &[Vec<f64>], varies_somewhere: bool) -> bool {
    !varies_somewhere && values.iter().all(|v| v.len() >= PROOF_RUNS && constant(v))
}

/// A varying site that runs at least [`ONE_ARM_SITE_MIN`] times per
/// request in every run of one arm and never in any run of another.
fn one_arm_only(values: &[Vec<f64>]) -> bool {
    let present = |v: &Vec<f64>| !v.is_empty() && v.iter().all(|x| *x >= ONE_ARM_SITE_MIN);
    let absent = |v: &Vec<f64>| !v.is_empty() && v.iter().all(|x| *x == 0.0);
    values.iter().any(present) && values.iter().any(absent)
}

/// Per case (in first-seen order) and metric, the values of each arm's
/// successful runs: timings and memory of the clean pass, every per-request
/// counter of the counted pass; and per case, the call sites whose
/// per-request counts really differ between arms.
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
    let mut counted = Vec::new();
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
                counter: false,
                exact: false,
                control,
                values,
            });
        }
        counted.push(CountedCase {
            key: key.clone(),
            control,
            runs: per_arm
                .iter()
                .map(|rs| {
                    rs.iter()
                        .filter(|r| r.counted.is_some())
                        .map(|r| crate::case::counted_metrics(r))
                        .collect()
                })
                .collect(),
        });
    }
    let varying = varying_counters(&counted);
    let mut code_differences = Vec::new();
    for c in &counted {
        let d = counted_values(c, &varying, &mut metrics);
        if !c.control {
            code_differences.push(d);
        }
    }
    // Per case in first-seen order: its clean metrics, then its counters.
    let order = |m: &MetricValues| keys.iter().position(|k| *k == m.case);
    metrics.sort_by_key(|m| (order(m), m.counter));
    (metrics, code_differences)
}

/// One case's counters: each total as a metric (into `metrics`), exact
/// only when proven deterministic; returns the call sites that really
/// differ between arms, with their medians.
fn counted_values(
    c: &CountedCase,
    varying: &std::collections::BTreeSet<String>,
    metrics: &mut Vec<MetricValues>,
) -> CodeDifference {
    let mut d = CodeDifference {
        case: c.key.clone(),
        sites: Vec::new(),
        varying_sites: 0,
    };
    for name in c.names() {
        let values = c.values(&name);
        let exact = proven(&values, varying.contains(&name));
        let is_site = name.contains(" @ ") || name.starts_with("syscall ");
        if is_site {
            let medians: Vec<f64> = values.iter().map(|v| med(v)).collect();
            let differs = medians.iter().any(|m| (m - medians[0]).abs() > 1e-9);
            if !exact && varying.contains(&name) {
                d.varying_sites += 1;
            }
            if (exact && differs) || (!exact && one_arm_only(&values)) {
                d.sites.push((name, medians));
            }
            continue;
        }
        metrics.push(MetricValues {
            case: c.key.clone(),
            metric: name,
            unit: "",
            lower_is_better: true,
            counter: true,
            exact,
            control: c.control,
            values,
        });
    }
    d
}

/// Each metric compared with the first arm.
fn compare_metrics(metrics: Vec<MetricValues>, n_arms: usize) -> Vec<MetricComparison> {
    // Timings, memory and counters not proven deterministic are noisy: a
    // verdict on them also needs the rank test, at a family-wise level over
    // the metrics of their kind compared (a Bonferroni split): 5% for
    // timings and memory, 1% for varying counters, main suites and controls
    // apart. Paired (Wilcoxon) once there are 6 pairs, else unpaired
    // (Mann-Whitney). Proven counters need no test: identical runs within
    // each arm and a constant difference are the whole story.
    let family = |m: &MetricValues| (m.counter, m.control);
    let family_size = |f: (bool, bool)| {
        metrics
            .iter()
            .filter(|m| !m.exact && family(m) == f)
            .count()
            .max(1)
    };
    let alpha_of = |f: (bool, bool)| {
        let level = if f.0 {
            VARYING_COUNTER_ALPHA
        } else {
            crate::stats::ALPHA
        };
        level / family_size(f) as f64
    };
    let alphas: Vec<((bool, bool), f64)> =
        [(false, false), (false, true), (true, false), (true, true)]
            .into_iter()
            .map(|f| (f, alpha_of(f)))
            .collect();
    metrics
        .into_iter()
        .map(|m| {
            let alpha = alphas
                .iter()
                .find(|(f, _)| *f == family(&m))
                .map_or(crate::stats::ALPHA, |(_, a)| *a);
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
                        return c;
                    }
                    let significant = c.test_applied && c.p_value.is_some_and(|p| p < alpha);
                    if matches!(c.verdict, Verdict::Better | Verdict::Worse) && !significant {
                        let kind = if m.counter {
                            "a counter that varies between runs of one arm (not deterministic on this target) needs p < "
                        } else {
                            "a timing verdict needs p < "
                        };
                        c.verdict = Verdict::NoDifference;
                        c.reason = format!(
                            "{}; but the rank test is {} ({kind}{alpha:.4}: {}% over the compared metrics of its kind)",
                            c.reason,
                            match c.p_value {
                                Some(p) if c.test_applied => format!("p = {p:.4}"),
                                _ => "not possible with this few runs".to_string(),
                            },
                            if m.counter { 1 } else { 5 }
                        );
                    } else if m.counter && c.verdict == Verdict::NoDifference {
                        c.reason = format!(
                            "{}; a counter that varies between runs of one arm: compared by its spread, not as exact",
                            c.reason
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
    // A counter that really differs: decided by its values (proven
    // deterministic) or beyond its spread by the rank test; never a
    // median that moved with timing.
    let code_differs = code_differences.iter().any(|d| !d.sites.is_empty())
        || compared.iter().any(|m| {
            m.values.counter
                && !m.values.control
                && m.vs_first
                    .iter()
                    .any(|c| matches!(c.verdict, Verdict::Better | Verdict::Worse))
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
        .filter(|m| !m.values.counter && !m.values.control)
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
