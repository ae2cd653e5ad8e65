//! `rig ab`: did the change make the server cheaper, and where?
//!
//! In: two or more arms (target specs, typically one `extends` the other
//! and swaps a binary, an `LD_LIBRARY_PATH` directory or an `LD_PRELOAD`),
//! the suites to run and negative-control suites, a round count. Out: a new
//! directory with `manifest.json`, `cases.jsonl` (every case of every run),
//! `ab.json`, `ab.md` and `ab.bmf.json` (Bencher Metric Format), and a
//! benchstat-like table.
//!
//! Runs go in palindromic blocks (A B B A, or A B C C B A), a fresh server
//! for every pass of every case, each launch proven to map its arm's own
//! files (`identity`). Outputs are compared byte for byte (`equality`), and
//! equality is only called evidence next to proof that the arms ran
//! different code: a counter or call site that differs between them.

pub mod equality;
pub mod export;

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::case::{run_case, CaseResult, Status};
use crate::case::{Passes, RunSettings};
use crate::launch::identity;
use crate::launch::spec::TargetSpec;
use crate::metrics::CaseKey;
use crate::probe::Family;
use crate::report::output::OutDir;
use crate::scenario::{Case, Matrix};
use crate::stats::{compare, Comparison, Verdict};
use crate::symbolize::Symbolizer;

/// One arm: a name and its target spec (with its TLS variant, if any).
#[derive(Clone, Debug)]
pub struct Arm {
    pub name: String,
    pub spec: TargetSpec,
    pub tls: Option<TargetSpec>,
}

#[derive(Clone, Debug)]
pub struct AbSettings {
    pub arms: Vec<Arm>,
    pub matrix_path: PathBuf,
    pub matrix: Matrix,
    pub suites: Vec<String>,
    pub controls: Vec<String>,
    pub rounds: u32,
    pub out: PathBuf,
    pub families: Vec<Family>,
    pub passes: Passes,
    pub server_cpus: Option<Vec<usize>>,
    pub client_cpus: Option<Vec<usize>>,
    pub memory_mib: Option<u64>,
    pub cpu_quota: Option<f64>,
    /// Response headers whose values are masked before comparing.
    pub masks: Vec<String>,
    pub argv: Vec<String>,
}

/// The arm order of one round: A B … then … B A.
pub fn block_order(arms: usize) -> Vec<usize> {
    (0..arms).chain((0..arms).rev()).collect()
}

/// One metric of one case: per-arm values in run order.
#[derive(Clone, Debug, Serialize)]
pub struct MetricValues {
    pub case: String,
    pub metric: String,
    pub unit: &'static str,
    pub lower_is_better: bool,
    /// Exact counters (the counted pass) or timings (the clean pass).
    pub exact: bool,
    pub control: bool,
    pub values: Vec<Vec<f64>>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MetricComparison {
    #[serde(flatten)]
    pub values: MetricValues,
    /// Arm i (i ≥ 1) against arm 0.
    pub vs_first: Vec<Comparison>,
}

/// What the counted passes say about whether the arms ran different code.
#[derive(Clone, Debug, Serialize)]
pub struct CodeDifference {
    pub case: String,
    /// Call sites (or syscalls) whose per-request count or bytes differ:
    /// `(site, arm medians)`.
    pub sites: Vec<(String, Vec<f64>)>,
}

#[derive(Clone, Debug, Serialize)]
pub struct EqualityReport {
    pub masks: Vec<String>,
    pub paths: Vec<String>,
    /// Per arm i ≥ 1: differences against arm 0 (empty = byte-identical).
    pub differences: Vec<Vec<String>>,
    pub responses: Vec<Vec<equality::Captured>>,
}

#[derive(Serialize)]
pub struct AbReport {
    pub schema_version: u32,
    pub arms: Vec<String>,
    pub rounds: u32,
    pub order: Vec<String>,
    pub interrupted: bool,
    pub failed_runs: Vec<String>,
    pub equality: Option<EqualityReport>,
    pub code_differences: Vec<CodeDifference>,
    /// One sentence: do outputs and counters together show the change ran?
    pub evidence: String,
    pub metrics: Vec<MetricComparison>,
    /// Negative controls that moved: the machine moved.
    pub drift: Vec<String>,
    pub verdict: String,
}

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

/// Send each endpoint of each arm's spec to a fresh server and compare.
fn check_equality(s: &AbSettings, rs: &RunSettings) -> Result<EqualityReport> {
    let paths: Vec<String> = s.arms[0]
        .spec
        .endpoints
        .iter()
        .filter(|e| e.method == "GET")
        .map(|e| e.path.clone())
        .collect();
    let mut responses = Vec::new();
    for (i, arm) in s.arms.iter().enumerate() {
        let opts = crate::launch::start::LaunchOptions {
            server_cpus: rs.server_cpus.clone(),
            memory_limit_mib: rs.memory_mib,
            cpu_quota: rs.cpu_quota,
            ready_timeout: None,
            label: format!("{}-equality", arm.name),
        };
        let l = crate::launch::start::launch(&arm.spec, &opts)
            .with_context(|| format!("launching arm {} for the output comparison", arm.name))?;
        let expected =
            crate::launch::identity::expected_objects(&arm.spec).map_err(anyhow::Error::msg)?;
        if let Err(why) = identity::verify(&arm.name, &expected, &l) {
            bail!("{why}");
        }
        let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), l.port);
        let mut got = Vec::new();
        for p in &paths {
            got.push(
                equality::capture(addr, p, &s.masks)
                    .map_err(anyhow::Error::msg)
                    .with_context(|| format!("arm {} ({i})", arm.name))?,
            );
        }
        l.stop(std::time::Duration::from_secs(2));
        responses.push(got);
    }
    let differences = responses[1..]
        .iter()
        .map(|r| equality::differences(&responses[0], r))
        .collect();
    Ok(EqualityReport {
        masks: s.masks.clone(),
        paths,
        differences,
        responses,
    })
}

/// Run the comparison. `stop` ends it after the current case.
pub fn run(s: &AbSettings, stop: &AtomicBool) -> Result<AbReport> {
    if s.arms.len() < 2 {
        bail!("rig ab needs at least two arms (--arm A=FILE --arm B=FILE)");
    }
    let names: Vec<String> = s.arms.iter().map(|a| a.name.clone()).collect();
    let mut suites = s.suites.clone();
    suites.extend(s.controls.iter().cloned());
    let all: Vec<Case> = s.matrix.expand(&suites, &names, Some(1))?;
    let rs = RunSettings {
        targets: s
            .arms
            .iter()
            .map(|a| (a.spec.clone(), a.tls.clone()))
            .collect(),
        matrix_path: s.matrix_path.clone(),
        matrix: s.matrix.clone(),
        suites: suites.clone(),
        out: s.out.clone(),
        families: s.families.clone(),
        passes: s.passes,
        repeats: Some(1),
        server_cpus: s.server_cpus.clone(),
        client_cpus: s.client_cpus.clone(),
        memory_mib: s.memory_mib,
        cpu_quota: s.cpu_quota,
        argv: s.argv.clone(),
        verify_arms: true,
    };
    let mut out = OutDir::create(&s.out)?;
    let expected: Vec<Vec<identity::Expected>> = s
        .arms
        .iter()
        .map(|a| crate::launch::identity::expected_objects(&a.spec).map_err(anyhow::Error::msg))
        .collect::<Result<_>>()?;
    out.write_manifest(
        &s.argv,
        &serde_json::json!({
            "arms": s.arms.iter().zip(&expected).map(|(a, e)| serde_json::json!({
                "name": a.name, "spec": a.spec, "expected_objects": e,
            })).collect::<Vec<_>>(),
            "suites": s.suites, "controls": s.controls, "rounds": s.rounds,
            "families": s.families, "masks": s.masks,
        }),
    )?;

    let equality = check_equality(s, &rs)?;

    let mut order_names = Vec::new();
    let mut results: Vec<(usize, u32, CaseResult)> = Vec::new();
    let mut runs_of = vec![0u32; s.arms.len()];
    let mut sym = Symbolizer::new();
    let mut interrupted = false;
    'rounds: for _round in 1..=s.rounds.max(1) {
        for arm in block_order(s.arms.len()) {
            if stop.load(Ordering::Relaxed) {
                interrupted = true;
                break 'rounds;
            }
            runs_of[arm] += 1;
            let run = runs_of[arm];
            order_names.push(format!("{}{run}", s.arms[arm].name));
            for c in all.iter().filter(|c| c.target == arm) {
                let mut c = c.clone();
                c.repeat = run;
                c.id = format!("{}#{run}", c.id.trim_end_matches("#1"));
                if stop.load(Ordering::Relaxed) {
                    interrupted = true;
                    break 'rounds;
                }
                let (spec, tls) = &rs.targets[arm];
                let mut r = run_case(&rs, &c, spec, tls.as_ref(), &mut sym);
                if stop.load(Ordering::Relaxed) {
                    // rig stopped the target under this case: not data.
                    interrupted = true;
                    r = CaseResult::skipped(
                        &c,
                        "interrupted by SIGINT/SIGTERM during this case".into(),
                    );
                    out.append_case(&r)?;
                    break 'rounds;
                }
                if r.status == Status::Failed {
                    eprintln!("rig ab: {} failed: {}", c.id, r.reasons.join("; "));
                }
                out.append_case(&r)?;
                results.push((arm, run, r));
            }
        }
    }
    crate::launch::start::cleanup_all();

    let report = analyse(s, &names, results, equality, order_names, interrupted);
    out.write_json("ab.json", &report)?;
    crate::fsutil::write_new(&s.out.join("ab.md"), markdown(&report).as_bytes())?;
    crate::fsutil::write_new(
        &s.out.join("ab.bmf.json"),
        &serde_json::to_vec_pretty(&export::bmf(&report))?,
    )?;
    Ok(report)
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
            "exact counter: {x} in every run of the first arm ({} runs), {y} in every run of this              arm ({} runs): a deterministic difference, decided without a test",
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

fn analyse(
    s: &AbSettings,
    names: &[String],
    results: Vec<(usize, u32, CaseResult)>,
    equality: EqualityReport,
    order: Vec<String>,
    interrupted: bool,
) -> AbReport {
    let n_arms = names.len();
    let failed_runs: Vec<String> = results
        .iter()
        .filter(|(_, _, r)| r.status == Status::Failed)
        .map(|(_, _, r)| format!("{}: {}", r.case.id, r.reasons.join("; ")))
        .collect();
    let mut keys: Vec<String> = Vec::new();
    for (_, _, r) in &results {
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
                    *a == arm && CaseKey::of(&r.case).path_form() == *key && r.status == Status::Ok
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
                case: key.clone(),
                metric: name,
                unit: "",
                lower_is_better: true,
                exact: true,
                control,
                values,
            });
        }
        if !control {
            code_differences.push(CodeDifference {
                case: key.clone(),
                sites,
            });
        }
    }
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
    let compared: Vec<MetricComparison> = metrics
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
        .collect();
    let drift: Vec<String> = compared
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
        .collect();
    let outputs_equal = equality.differences.iter().all(|d| d.is_empty());
    let code_differs = code_differences.iter().any(|d| !d.sites.is_empty())
        || compared.iter().any(|m| {
            m.values.exact && !m.values.control && m.vs_first.iter().any(|c| c.diff_median != 0.0)
        });
    let compared_runs = compared
        .iter()
        .any(|m| m.values.values.iter().all(|v| !v.is_empty()));
    let evidence = match (outputs_equal, code_differs) {
        _ if !compared_runs => "nothing to compare: no case has a successful run in every arm (see failed_runs)".to_string(),
        (true, true) => "outputs are byte-identical AND the arms executed different code (counters differ, listed per call site): the equality is evidence".to_string(),
        (true, false) => "outputs are byte-identical, but the arms are indistinguishable by every counter: nothing shows the changed code ran, so the equality is NOT evidence".to_string(),
        (false, _) => "outputs DIFFER between arms (see equality.differences)".to_string(),
    };
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
    let mut verdict = timing_summary(&verdict_parts, undecided);
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
    AbReport {
        schema_version: 1,
        arms: names.to_vec(),
        rounds: s.rounds,
        order,
        interrupted,
        failed_runs,
        equality: Some(equality),
        code_differences,
        evidence,
        metrics: compared,
        drift,
        verdict,
    }
}

fn delta_text(c: &Comparison) -> String {
    match c.rel {
        Some(r) => format!("{:+.2}%", r * 100.0),
        None => format!("{:+.3}", c.diff_median),
    }
}

fn ci_text(c: &Comparison) -> String {
    c.ci.map_or("-".into(), |i| format!("{:.3} .. {:.3}", i.lo, i.hi))
}

/// The benchstat-like terminal table.
pub fn render(r: &AbReport) -> String {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let mut out = String::new();
    out.push_str(&format!(
        "rig ab: arms {} — run order {}\n",
        r.arms.join(", "),
        r.order.join(" ")
    ));
    for (i, arm) in r.arms.iter().enumerate().skip(1) {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
            "case".to_string(),
            "metric".to_string(),
            format!("{} median", r.arms[0]),
            format!("{arm} median"),
            "delta".to_string(),
            "95% CI of Δ".to_string(),
            "p".to_string(),
            "verdict".to_string(),
        ]);
        for m in &r.metrics {
            let c = &m.vs_first[i - 1];
            if m.values.exact
                && c.diff_median == 0.0
                && c.ci.is_some_and(|i| i.lo == 0.0 && i.hi == 0.0)
            {
                continue; // identical exact counters: summarized below
            }
            t.add_row(vec![
                format!(
                    "{}{}",
                    m.values.case,
                    if m.values.control { " [control]" } else { "" }
                ),
                m.values.metric.clone(),
                format!("{:.3}", c.a_median),
                format!("{:.3}", c.b_median),
                delta_text(c),
                ci_text(c),
                c.p_value.map_or("-".into(), |p| format!("{p:.3}")),
                c.verdict.word().to_string(),
            ]);
        }
        out.push_str(&format!("{t}\n"));
        let same = r
            .metrics
            .iter()
            .filter(|m| m.values.exact && m.vs_first[i - 1].diff_median == 0.0)
            .count();
        out.push_str(&format!(
            "{same} exact counters identical between {} and {arm}\n",
            r.arms[0]
        ));
    }
    for d in &r.code_differences {
        if d.sites.is_empty() {
            out.push_str(&format!(
                "{}: no call site differs between the arms\n",
                d.case
            ));
        }
        for (site, meds) in &d.sites {
            let v = meds
                .iter()
                .map(|m| format!("{m:.3}"))
                .collect::<Vec<_>>()
                .join(" vs ");
            out.push_str(&format!("{}: {site}: {v} per request\n", d.case));
        }
    }
    if let Some(e) = &r.equality {
        for (i, d) in e.differences.iter().enumerate() {
            if d.is_empty() {
                out.push_str(&format!(
                    "outputs: {} answers byte-identical to {} on {} (masked: {})\n",
                    r.arms[i + 1],
                    r.arms[0],
                    e.paths.join(", "),
                    e.masks.join(", ")
                ));
            } else {
                out.push_str(&format!(
                    "outputs: {} differs from {}: {}\n",
                    r.arms[i + 1],
                    r.arms[0],
                    d.join("; ")
                ));
            }
        }
    }
    out.push_str(&format!("evidence: {}\n", r.evidence));
    for d in &r.drift {
        out.push_str(&format!("drift: {d}\n"));
    }
    for f in &r.failed_runs {
        out.push_str(&format!("failed: {f}\n"));
    }
    out.push_str(&format!("verdict: {}\n", r.verdict));
    out
}

/// The same, as markdown.
pub fn markdown(r: &AbReport) -> String {
    let mut md = format!(
        "# rig ab: {}\n\nRun order: {}\n\n## Evidence\n\n{}\n\n## Verdict\n\n{}\n\n",
        r.arms.join(" vs "),
        r.order.join(" "),
        r.evidence,
        r.verdict
    );
    md.push_str("## Call sites that differ (per request, arm medians)\n\n| case | site | medians |\n|---|---|---|\n");
    for d in &r.code_differences {
        for (site, meds) in &d.sites {
            let v = meds
                .iter()
                .map(|m| format!("{m:.3}"))
                .collect::<Vec<_>>()
                .join(" / ");
            md.push_str(&format!(
                "| {} | {} | {} |\n",
                d.case,
                site.replace('|', "\\|"),
                v
            ));
        }
    }
    md.push_str("\n## Metrics\n\n| case | metric | arm | A median | B median | delta | 95% CI | p | verdict |\n|---|---|---|---|---|---|---|---|---|\n");
    for m in &r.metrics {
        for (i, c) in m.vs_first.iter().enumerate() {
            md.push_str(&format!(
                "| {} | {} | {} | {:.3} | {:.3} | {} | {} | {} | {} |\n",
                m.values.case,
                m.values.metric,
                r.arms[i + 1],
                c.a_median,
                c.b_median,
                delta_text(c),
                ci_text(c),
                c.p_value.map_or("-".into(), |p| format!("{p:.3}")),
                c.verdict.word()
            ));
        }
    }
    for d in &r.drift {
        md.push_str(&format!("\n**Drift:** {d}\n"));
    }
    md
}

#[cfg(test)]
mod tests {

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

    use super::*;

    #[test]
    fn blocks_are_palindromes() {
        assert_eq!(block_order(2), vec![0, 1, 1, 0]);
        assert_eq!(block_order(3), vec![0, 1, 2, 2, 1, 0]);
    }
}
