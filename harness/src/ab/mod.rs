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

mod analyse;
pub mod equality;
pub mod export;
mod render;

use analyse::analyse;
pub use analyse::{exact_verdict, timing_summary};
pub use render::{markdown, render};

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use crate::case::{run_case, CaseResult, Status};
use crate::case::{Passes, RunSettings};
use crate::launch::identity;
use crate::launch::spec::TargetSpec;
use crate::probe::Family;
use crate::report::output::OutDir;
use crate::scenario::{Case, Matrix};
use crate::stats::Comparison;
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
    /// A counter of the counted pass (false: a timing or memory value of
    /// the clean pass).
    pub counter: bool,
    /// A counter proven deterministic on this target: the same value in
    /// every run of every arm's case (at least [`analyse::PROOF_RUNS`]
    /// runs each), and never varying between runs of one arm in any other
    /// case or control of the session. Only these are decided by their
    /// values; every other metric by its spread and a rank test.
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
    /// Call sites (or syscalls) whose per-request count or bytes really
    /// differ: proven deterministic and different, or at least once per
    /// request in every run of one arm and never in any run of another.
    /// `(site, arm medians)`.
    pub sites: Vec<(String, Vec<f64>)>,
    /// Call sites whose counts vary between runs of one arm (they move
    /// with timing, e.g. how many events one epoll_wait returns): never
    /// taken as a difference on their medians.
    pub varying_sites: usize,
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
    /// At least one run of some arm was measured (false: every case was
    /// skipped, e.g. a path no arm serves).
    pub measured: bool,
    pub failed_runs: Vec<String>,
    pub equality: Option<EqualityReport>,
    pub code_differences: Vec<CodeDifference>,
    /// One sentence: do outputs and counters together show the change ran?
    pub evidence: String,
    pub metrics: Vec<MetricComparison>,
    /// Negative controls that moved: the machine moved.
    pub drift: Vec<String>,
    pub verdict: String,
    /// Every run's case id → its case key ([`CaseKey::path_form`]): the
    /// runs the differential flamegraphs sum into one case. Not in ab.json.
    ///
    /// [`CaseKey::path_form`]: crate::metrics::CaseKey::path_form
    #[serde(skip)]
    pub case_keys: std::collections::BTreeMap<String, String>,
}

/// One GET of `path` over HTTP/3 to `addr`, trusting what the spec's `h3`
/// entry says.
fn h3_fetch_spec(
    addr: SocketAddr,
    t: &crate::launch::spec::TlsSpec,
    path: &str,
) -> crate::load::LoadSpec {
    crate::load::LoadSpec {
        addr,
        protocol: crate::load::Protocol::H3 {
            ca_pem: t.ca.clone().unwrap_or_default(),
            server_name: t.server_name.clone(),
            insecure: t.insecure,
        },
        endpoint: crate::load::Endpoint {
            path: path.to_string(),
            expect: crate::load::Expect {
                status: 200,
                content_type: None,
                body: crate::load::ExpectBody::Any,
            },
        },
        connections: 1,
        streams: 1,
        client_cpus: None,
        threads: Some(1),
        spin: None,
        request_timeout: crate::load::REQUEST_TIMEOUT,
        deadline: None,
    }
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
            // Plain HTTP/1.1 where the arm serves it; over TLS where its TCP
            // port speaks only TLS; over HTTP/3 where that is all it serves.
            let protocols = &arm.spec.protocols;
            let captured = match (&protocols.h2_tls, &protocols.h3) {
                _ if protocols.h1 || protocols.h2c => equality::capture(addr, p, &s.masks),
                (Some(t), _) => equality::capture_tls(addr, t, p, &s.masks),
                (None, Some(t)) if !protocols.tcp() => {
                    let ls = h3_fetch_spec(addr, t, p);
                    equality::capture_h3(&ls, &s.masks)
                }
                _ => equality::capture(addr, p, &s.masks),
            };
            got.push(
                captured
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

/// `rig ab`: the comparison, its table, flamegraphs (differential too) and
/// report.html. Exit 130 when interrupted, 6 when a run failed or nothing
/// was measured.
pub fn command(s: &AbSettings, stop: &AtomicBool) -> Result<i32> {
    let report = run(s, stop)?;
    print!("{}", render(&report));
    let flames = crate::flamegraph::write_ab(&s.out, &report.arms, &report.case_keys)?;
    print!("{}", crate::flamegraph::where_written(&s.out, &flames));
    // After the flamegraphs: the page embeds them.
    crate::html::write_or_warn(&s.out);
    println!("results: {}", s.out.display());
    print!("{}", crate::html::report_line(&s.out));
    if !report.measured && !report.interrupted {
        eprintln!("rig ab: {}", report.verdict);
    }
    Ok(if report.interrupted {
        crate::exit::INTERRUPTED
    } else if !report.failed_runs.is_empty() || !report.measured {
        crate::exit::CASE_FAILED
    } else {
        crate::exit::OK
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
        spin: None,
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
            // `git`: the commit of the work tree the arm's binary is in
            // (`rig compare` names a step's commits by it).
            "arms": s.arms.iter().zip(&expected).map(|(a, e)| serde_json::json!({
                "name": a.name, "spec": a.spec, "expected_objects": e,
                "git": e.iter().find(|x| x.via == "binary")
                    .and_then(|x| crate::gitfacts::of(&x.path)),
            })).collect::<Vec<_>>(),
            "suites": s.suites, "controls": s.controls, "rounds": s.rounds,
            "families": s.families, "masks": s.masks,
        }),
    )?;

    // A signal during the output comparison (a launch, most often) ends
    // the comparison before any case: ab.json still says interrupted.
    let equality = match check_equality(s, &rs) {
        Ok(e) => Some(e),
        Err(_) if stop.load(Ordering::Relaxed) => None,
        Err(e) => return Err(e),
    };
    let (order_names, results, interrupted) = match equality {
        Some(_) => run_rounds(s, &rs, &all, &mut out, stop)?,
        None => (Vec::new(), Vec::new(), true),
    };
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

/// Every round's palindromic block of arms, each arm's cases on fresh
/// servers. Returns the run order (`A1 B1 B2 A2`), every finished case with
/// its arm and run number, and whether a signal ended it early (the case
/// it interrupted is written as skipped, not as data).
#[allow(clippy::type_complexity)]
fn run_rounds(
    s: &AbSettings,
    rs: &RunSettings,
    all: &[Case],
    out: &mut OutDir,
    stop: &AtomicBool,
) -> Result<(Vec<String>, Vec<(usize, u32, CaseResult)>, bool)> {
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
                let mut r = run_case(rs, &c, spec, tls.as_ref(), &mut sym);
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
    Ok((order_names, results, interrupted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_are_palindromes() {
        assert_eq!(block_order(2), vec![0, 1, 1, 0]);
        assert_eq!(block_order(3), vec![0, 1, 2, 2, 1, 0]);
    }
}
