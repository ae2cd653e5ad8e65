//! `rig run`: the scenario matrix against fresh servers, case by case.
//!
//! In: `RunSettings` (targets, matrix, suites, passes, budgets, pinning).
//! Out: a new directory with `manifest.json` (written first), `cases.jsonl`
//! (a line per finished case) and `report.json` (rewritten after every case,
//! so it exists even when a case or rig itself fails), plus a terminal table.
//! Per case: a clean pass (no uprobes: throughput, latency, CPU, memory) and
//! a counted pass (probes attached: exact per-request counters), each on a
//! fresh server process, never mixed.

pub mod table;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::Result;
use serde::Serialize;

use crate::launch::spec::TargetSpec;
use crate::launch::start::ObjectFact;
use crate::load::hist;
use crate::probe::Family;
use crate::scenario::Case;
use crate::symbolize::Symbolizer;

pub use crate::case::{CaseResult, Passes, RunSettings, Status};
use crate::report::output::OutDir;

/// Bumped on any incompatible change to manifest.json, cases.jsonl or
/// report.json (documented in docs/run-schema.md).
pub const SCHEMA_VERSION: u32 = 1;

#[derive(Serialize)]
struct TargetManifest {
    name: String,
    spec: TargetSpec,
    tls_variant: Option<TargetSpec>,
    /// The executable and every mapped object of its first launch, hashed.
    objects: Option<Vec<ObjectFact>>,
    /// The uid and gid its first launch ran as.
    uid: Option<u32>,
    gid: Option<u32>,
    /// The commit of the git work tree the executable lives in, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    git: Option<crate::gitfacts::GitFacts>,
}

#[derive(Serialize)]
struct Manifest<'a> {
    matrix: String,
    suites: &'a [String],
    families: &'a [Family],
    passes: Passes,
    server_cpus: &'a Option<Vec<usize>>,
    client_cpus: &'a Option<Vec<usize>>,
    memory_mib: Option<u64>,
    cpu_quota: Option<f64>,
    targets: Vec<TargetManifest>,
    cases: Vec<String>,
    /// The open-loop dispatcher's spin window and the wake-up calibration it
    /// came from, measured at start on the first client CPU (each case's
    /// generator threads calibrate again: `clean.load.dispatch`).
    dispatch: Dispatch,
}

#[derive(Clone, Serialize)]
#[serde(untagged)]
enum Dispatch {
    Facts(crate::load::DispatchFacts),
    Failed { calibration_error: String },
}

/// Cases that differ only by repeat, merged: medians of per-run values and
/// latency from the merged histograms (p99s are never averaged).
#[derive(Clone, Debug, Serialize)]
pub struct Group {
    pub key: String,
    pub runs: usize,
    pub failed: usize,
    pub rps_median: Option<f64>,
    pub cpu_us_per_request_median: Option<f64>,
    pub latency_merged: Option<hist::HistSummary>,
    pub rss_max_kib: Option<u64>,
}

#[derive(Serialize)]
pub struct Report<'a> {
    pub schema_version: u32,
    pub rig_version: &'static str,
    pub complete: bool,
    pub interrupted: bool,
    pub ok: usize,
    /// Measured, but the load generator was late for more than 1% of the
    /// scheduled requests.
    pub limited: usize,
    pub failed: usize,
    pub skipped: usize,
    pub cases: &'a [CaseResult],
    pub groups: Vec<Group>,
}

/// The median of the finite values of `v` (`None` without one).
fn median(mut v: Vec<f64>) -> Option<f64> {
    v.retain(|x| x.is_finite());
    crate::stats::median(&v)
}

pub fn groups(results: &[CaseResult]) -> Vec<Group> {
    let mut by: BTreeMap<String, Vec<&CaseResult>> = BTreeMap::new();
    for r in results {
        let key = r
            .case
            .id
            .rsplit_once("/#")
            .map_or(r.case.id.clone(), |(k, _)| k.to_string());
        by.entry(key).or_default().push(r);
    }
    by.into_iter()
        .map(|(key, rs)| {
            let cleans: Vec<_> = rs.iter().filter_map(|r| r.clean.as_ref()).collect();
            let merged =
                hist::merge_encoded(cleans.iter().map(|c| c.load.histogram.latency.as_str()))
                    .ok()
                    .filter(|h| !h.is_empty())
                    .map(|h| hist::summarize(&h));
            Group {
                key,
                runs: rs.len(),
                failed: rs.iter().filter(|r| r.status == Status::Failed).count(),
                rps_median: median(cleans.iter().map(|c| c.load.rps).collect()),
                cpu_us_per_request_median: median(
                    cleans
                        .iter()
                        .filter_map(|c| c.server.cpu_us_per_request)
                        .collect(),
                ),
                latency_merged: merged,
                rss_max_kib: cleans
                    .iter()
                    .map(|c| c.server.rss_max_kib)
                    .chain(
                        rs.iter()
                            .filter_map(|r| r.memory.as_ref())
                            .map(|m| m.proc.rss_kib),
                    )
                    .max(),
            }
        })
        .collect()
}

/// `rig run`: the matrix run, its table, top sites and flamegraphs, and
/// report.html. Exit 130 when interrupted, 6 when a case failed or nothing
/// was measured.
pub fn command(s: &RunSettings, stop: &AtomicBool) -> Result<i32> {
    let results = run(s, stop)?;
    crate::outln!("{}", table::render(&results));
    let counted = results
        .iter()
        .filter_map(|r| Some((r.case.id.as_str(), &r.counted.as_ref()?.attribution)));
    crate::out!("{}", crate::flamegraph::top_sites(counted, 3));
    let flames = crate::flamegraph::write_cases(&s.out)?;
    crate::out!("{}", crate::flamegraph::where_written(&s.out, &flames));
    // After the flamegraphs: the page embeds them.
    crate::html::write_or_warn(&s.out);
    crate::outln!("results: {}", s.out.display());
    crate::out!("{}", crate::html::report_line(&s.out));
    let failed = results.iter().any(|r| r.status == Status::Failed);
    let measured = results.iter().any(|r| r.status.measured());
    if !measured && !failed {
        crate::errln!(
            "rig: nothing was measured: all {} case(s) were skipped (see the reasons above and in {}/report.json)",
            results.len(),
            s.out.display()
        );
    }
    Ok(if stop.load(Ordering::Relaxed) {
        crate::exit::INTERRUPTED
    } else if failed || !measured {
        crate::exit::CASE_FAILED
    } else {
        crate::exit::OK
    })
}

/// Run the matrix. `stop` (Ctrl-C) ends the run after the current case; the
/// report is written either way.
// Long by design: the case loop and the Ctrl-C watcher share one thread
// scope, and the report is rewritten after every case inside it.
pub fn run(rs: &RunSettings, stop: &AtomicBool) -> Result<Vec<CaseResult>> {
    let names: Vec<String> = rs.targets.iter().map(|(t, _)| t.name.clone()).collect();
    let cases: Vec<Case> = rs.matrix.expand(&rs.suites, &names, rs.repeats)?;
    let mut out = OutDir::create(&rs.out)?;
    let first_cpu = rs.client_cpus.as_ref().and_then(|c| c.first().copied());
    let dispatch = match rs.spin {
        Some(d) => Dispatch::Facts(crate::load::DispatchFacts::given(d)),
        None => match crate::load::calibrate_on(first_cpu) {
            Ok(f) => Dispatch::Facts(f),
            Err(calibration_error) => Dispatch::Failed { calibration_error },
        },
    };
    let dispatch = &dispatch;
    let mut targets: Vec<TargetManifest> = rs
        .targets
        .iter()
        .map(|(t, tls)| TargetManifest {
            name: t.name.clone(),
            spec: t.clone(),
            tls_variant: tls.clone(),
            objects: None,
            uid: None,
            gid: None,
            git: None,
        })
        .collect();
    let write_manifest =
        |out: &OutDir, targets: Vec<TargetManifest>| -> Result<Vec<TargetManifest>> {
            let m = Manifest {
                matrix: rs.matrix_path.display().to_string(),
                suites: &rs.suites,
                families: &rs.families,
                passes: rs.passes,
                server_cpus: &rs.server_cpus,
                client_cpus: &rs.client_cpus,
                memory_mib: rs.memory_mib,
                cpu_quota: rs.cpu_quota,
                targets,
                cases: cases.iter().map(|c| c.id.clone()).collect(),
                dispatch: dispatch.clone(),
            };
            out.write_manifest(&rs.argv, &m)?;
            Ok(m.targets)
        };
    targets = write_manifest(&out, targets)?;

    let bar = indicatif::ProgressBar::new(cases.len() as u64);
    bar.set_style(
        indicatif::ProgressStyle::with_template("{elapsed_precise} [{bar:30}] {pos}/{len} {msg}")
            .expect("static template")
            .progress_chars("=> "),
    );
    let mut sym = Symbolizer::new();
    let mut results: Vec<CaseResult> = Vec::new();
    let mut interrupted = false;
    // Ctrl-C must not wait for a long case to finish: stop the running
    // target (rig started it), which ends the case's load at once.
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| -> Result<()> {
        scope.spawn(|| {
            while !done.load(Ordering::Relaxed) {
                if stop.load(Ordering::Relaxed) {
                    crate::launch::start::cleanup_all();
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        });
        let result = (|| -> Result<()> {
            for (i, case) in cases.iter().enumerate() {
                if stop.load(Ordering::Relaxed) {
                    // Every case not yet started is skipped at once, its
                    // lines written in one append and the report once
                    // after the loop: marking and rewriting report.json
                    // case by case took a minute for 2000 suites.
                    interrupted = true;
                    let why = format!(
                        "rig was {} before this case",
                        crate::interrupt::interrupted_by()
                    );
                    let rest: Vec<CaseResult> = cases[i..]
                        .iter()
                        .map(|c| CaseResult::skipped(c, why.clone()))
                        .collect();
                    out.append_cases(&rest)?;
                    results.extend(rest);
                    break;
                }
                bar.set_message(case.id.clone());
                let (spec, tls) = &rs.targets[case.target];
                let mut r = crate::case::run_case(rs, case, spec, tls.as_ref(), &mut sym);
                if stop.load(Ordering::Relaxed) {
                    // rig stopped its target under it: not a failure of the
                    // target, and its part-measured passes are not data.
                    interrupted = true;
                    r = CaseResult::skipped(
                        case,
                        format!(
                            "{} during this case: rig stopped its target; nothing of this \
                             case is reported",
                            crate::interrupt::interrupted_by()
                        ),
                    );
                }
                bar.inc(1);
                if r.status == Status::Failed {
                    bar.println(format!(
                        "rig: case {} failed: {}",
                        case.id,
                        r.reasons.join("; ")
                    ));
                }
                out.append_case(&r)?;
                // The first launch of a target records what it mapped, hashed.
                if targets[case.target].objects.is_none() && r.objects.is_some() {
                    targets[case.target].objects = r.objects.clone();
                    targets[case.target].git = r
                        .objects
                        .as_ref()
                        .and_then(|o| o.first())
                        .and_then(|exe| crate::gitfacts::of(std::path::Path::new(&exe.path)));
                    let launch = r
                        .clean
                        .as_ref()
                        .map(|c| &c.launch)
                        .or(r.counted.as_ref().map(|c| &c.launch));
                    targets[case.target].uid = launch.and_then(|l| l.uid);
                    targets[case.target].gid = launch.and_then(|l| l.gid);
                    targets = write_manifest(&out, targets)?;
                }
                results.push(r);
                if !interrupted {
                    write_report(&out, &results, interrupted, cases.len())?;
                }
            }
            Ok(())
        })();
        done.store(true, Ordering::Relaxed);
        result
    })?;
    bar.finish_and_clear();
    crate::launch::start::cleanup_all();
    write_report(&out, &results, interrupted, cases.len())?;
    Ok(results)
}

fn write_report(
    out: &OutDir,
    results: &[CaseResult],
    interrupted: bool,
    total: usize,
) -> Result<()> {
    let count = |s: Status| results.iter().filter(|r| r.status == s).count();
    let report = Report {
        schema_version: SCHEMA_VERSION,
        rig_version: env!("CARGO_PKG_VERSION"),
        complete: results.len() == total && !interrupted,
        interrupted,
        ok: count(Status::Ok),
        limited: count(Status::Limited),
        failed: count(Status::Failed),
        skipped: count(Status::Skipped),
        cases: results,
        groups: groups(results),
    };
    out.write_json("report.json", &report)
}
