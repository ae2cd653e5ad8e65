//! The gate's runs: the suite `repeats` times (counted pass only) and the
//! instruction windows, observed as counters.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use serde::Serialize;

use super::*;
use crate::case::run_case;
use crate::case::{Passes, RunSettings};
use crate::launch::spec::TargetSpec;
use crate::metrics::CaseKey;
use crate::probe::instructions::{self as instr, Backend, Choice};
use crate::probe::Family;
use crate::report::output::OutDir;
use crate::scenario::{Case, Matrix, Proto};
use crate::symbolize::Symbolizer;

/// A function's self instructions become a counter (observed, blessed, or
/// a new site) when they are at least this share (percent) of the
/// instructions per request in some run, or when the baseline names it.
pub const FN_MIN_SHARE_PCT: f64 = 1.0;

/// Who counted the instructions, and how they are judged.
#[derive(Clone, Debug, Serialize)]
pub struct InstrInfo {
    pub backend: Backend,
    /// Why this backend (the PMU detection, or the baseline's choice).
    pub why: String,
    pub tolerance_pct: f64,
    /// Windows per case (= repeats).
    pub windows: u32,
    pub note: String,
}

/// The file the target spec runs (argv[0] resolved), for the report.
#[derive(Clone, Debug, Serialize)]
pub struct BinaryId {
    pub path: PathBuf,
    pub sha256: String,
    /// For a `{rig_peer}` target: the cargo profile directory it was built
    /// into (`debug`, `release`).
    pub profile: Option<String>,
}

/// The cargo profile a `{rig_peer}` binary was built with: the name of the
/// directory holding it (`target/debug/rig-peer`, `…/release/rig-peer`).
pub fn profile_of(binary: &Path) -> Option<String> {
    Some(binary.parent()?.file_name()?.to_string_lossy().into_owned())
}

pub(crate) fn uses_rig_peer(spec: &TargetSpec) -> bool {
    spec.argv.iter().any(|a| a.contains("{rig_peer}"))
}

pub(crate) fn binary_id(spec: &TargetSpec) -> Option<BinaryId> {
    use sha2::Digest;
    let path = spec.inspect_command().ok()?.program;
    let bytes = std::fs::read(&path).ok()?;
    let sha256 = format!("{:x}", sha2::Sha256::digest(&bytes));
    let profile = if uses_rig_peer(spec) {
        profile_of(&path)
    } else {
        None
    };
    Some(BinaryId {
        path,
        sha256,
        profile,
    })
}

/// A case id without its repeat (`…/#2`).
pub(crate) fn base_id(id: &str) -> String {
    id.rsplit_once("/#")
        .map_or(id.to_string(), |(k, _)| k.to_string())
}

/// What [`measure`] saw.
pub struct Measured {
    pub target: String,
    pub binary: Option<BinaryId>,
    pub cases: Vec<(String, String)>,
    pub instructions: Option<InstrInfo>,
    pub observed: Vec<Observed>,
}

/// Observed counters of `runs` (one map per run): a name absent from a run
/// did not happen in it (0 per request).
pub(crate) fn observe(runs: &[BTreeMap<String, f64>], b: &Baseline) -> Vec<Observed> {
    // Bytes per event of a bytes counter: the largest over the runs.
    let per_event = |name: &str| -> Option<f64> {
        let ev = events_of(name)?;
        runs.iter()
            .filter_map(|m| {
                let e = *m.get(&ev)?;
                (e > 0.0).then(|| m.get(name).copied().unwrap_or(0.0) / e)
            })
            .reduce(f64::max)
    };
    let tol = |name: &str| b.tol(name, per_event(name));
    let mut all: Vec<&String> = runs.iter().flat_map(|m| m.keys()).collect();
    all.sort();
    all.dedup();
    all.into_iter()
        .map(|name| {
            let values = runs
                .iter()
                .map(|m| m.get(name).copied().unwrap_or(0.0))
                .collect();
            Observed::new(name.clone(), values, tol(name))
        })
        .collect()
}

/// One instruction window as counters: `instructions/req`, and `Ir @ f`
/// for every function (self instructions per request, contexts and
/// objects of the same name summed).
pub(crate) fn instr_metrics(w: &crate::probe::callgrind::InstrWindow) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert(INSTRUCTIONS.to_string(), w.ir_per_request);
    for f in &w.functions {
        *m.entry(format!("{IR_SITE}{}", f.name)).or_insert(0.0) += f.self_ir;
    }
    m
}

/// Keep the functions that matter: at least [`FN_MIN_SHARE_PCT`] of the
/// instructions per request in some run, or named by the baseline.
pub(crate) fn keep_functions(runs: &mut [BTreeMap<String, f64>], wanted: &dyn Fn(&str) -> bool) {
    let big: std::collections::BTreeSet<String> = runs
        .iter()
        .flat_map(|m| {
            let total = m.get(INSTRUCTIONS).copied().unwrap_or(0.0);
            m.iter()
                .filter(move |(k, v)| {
                    k.starts_with(IR_SITE) && **v >= total * FN_MIN_SHARE_PCT / 100.0
                })
                .map(|(k, _)| k.clone())
        })
        .collect();
    for m in runs.iter_mut() {
        m.retain(|k, _| !k.starts_with(IR_SITE) || big.contains(k) || wanted(k));
    }
}

/// Run the suite `repeats` times (counted pass only), then the instruction
/// windows when asked for, and observe every counter.
pub fn measure(s: &GateSettings, stop: &AtomicBool) -> Result<Measured> {
    let b = &s.baseline;
    let (target_path, spec, tls, binary) = gate_target(s)?;
    let matrix_path = rel(&s.baseline_path, &b.matrix);
    let matrix = Matrix::load(&matrix_path)?;
    let families = Family::parse_list(&b.probes)?;
    let (cases, distinct) = gate_cases(b, &matrix, &matrix_path, &spec)?;
    let multi = distinct.len() > 1;
    // The instructions backend, before anything runs.
    let backend = instructions_backend(s, &distinct)?;
    let rs = counted_settings(s, &spec, tls.as_ref(), &matrix_path, matrix, families);
    let mut out = gate_out_dir(s, &target_path, binary.as_ref(), &spec)?;
    let manifest = |o: &OutDir, objects: &[crate::launch::start::ObjectFact]| {
        write_gate_manifest(o, s, &target_path, binary.as_ref(), &spec, Some(objects))
    };
    let runs = counted_runs(
        &rs,
        &cases,
        &spec,
        tls.as_ref(),
        out.as_mut(),
        &manifest,
        stop,
    )?;
    let mut observed = Vec::new();
    for (key, rs) in &runs {
        for mut o in observe(rs, b) {
            o.name = keyed(multi, key, &o.name);
            observed.push(o);
        }
    }
    let instructions = match backend {
        None => None,
        Some((backend, why)) => {
            let windows = InstrWindows {
                b,
                spec: &spec,
                backend,
                multi,
            };
            let note = windows.observe(&distinct, &mut observed, stop)?;
            Some(InstrInfo {
                backend,
                why,
                tolerance_pct: b.instr_rel_tol() * 100.0,
                windows: b.repeats,
                note,
            })
        }
    };
    Ok(Measured {
        target: target_path.display().to_string(),
        binary,
        cases: distinct.into_iter().map(|(id, key, _)| (id, key)).collect(),
        instructions,
        observed,
    })
}

/// The suite's run: the counted pass only, `repeats` times, on `spec`.
fn counted_settings(
    s: &GateSettings,
    spec: &TargetSpec,
    tls: Option<&TargetSpec>,
    matrix_path: &Path,
    matrix: Matrix,
    families: Vec<Family>,
) -> RunSettings {
    let b = &s.baseline;
    RunSettings {
        targets: vec![(spec.clone(), tls.cloned())],
        matrix_path: matrix_path.to_path_buf(),
        matrix,
        suites: vec![b.suite.clone()],
        out: s.out.clone().unwrap_or_default(),
        families,
        passes: Passes {
            clean: false,
            counted: true,
        },
        repeats: Some(b.repeats),
        server_cpus: None,
        client_cpus: None,
        spin: None,
        memory_mib: None,
        cpu_quota: None,
        argv: s.argv.clone(),
        verify_arms: false,
    }
}

/// The output directory of `--out`, its manifest naming the baseline, the
/// target and the binary it runs.
fn gate_out_dir(
    s: &GateSettings,
    target_path: &Path,
    binary: Option<&BinaryId>,
    spec: &TargetSpec,
) -> Result<Option<OutDir>> {
    let Some(d) = &s.out else {
        return Ok(None);
    };
    let o = OutDir::create(d)?;
    write_gate_manifest(&o, s, target_path, binary, spec, None)?;
    Ok(Some(o))
}

/// The manifest of `--out`: the baseline, the target, the binary it runs
/// and, once the first launch has recorded them, `targets[]` as `rig run`
/// writes it (the objects it mapped, hashed, and the commit of the work
/// tree its executable is in), so `rig compare` reads a gate's directory
/// as a build like a run's.
fn write_gate_manifest(
    o: &OutDir,
    s: &GateSettings,
    target_path: &Path,
    binary: Option<&BinaryId>,
    spec: &TargetSpec,
    objects: Option<&[crate::launch::start::ObjectFact]>,
) -> Result<()> {
    let targets = objects.map(|objects| {
        let git = objects
            .first()
            .and_then(|exe| crate::gitfacts::of(Path::new(&exe.path)));
        serde_json::json!([{"name": spec.name, "objects": objects, "git": git}])
    });
    let mut m = serde_json::json!({
        "baseline": s.baseline_path,
        "target": target_path,
        "binary": binary,
        "spec": spec,
    });
    if let Some(t) = targets {
        m["targets"] = t;
    }
    o.write_manifest(&s.argv, &m)
}

/// A counter's name in a multi-case suite carries its case key.
fn keyed(multi: bool, key: &str, name: &str) -> String {
    if multi {
        format!("{key}: {name}")
    } else {
        name.to_string()
    }
}

/// The target spec (the baseline's or `--target`), its TLS variant, and the
/// binary it runs; a `{rig_peer}` build of another profile than the
/// baseline's is refused (unless blessing).
fn gate_target(
    s: &GateSettings,
) -> Result<(PathBuf, TargetSpec, Option<TargetSpec>, Option<BinaryId>)> {
    let b = &s.baseline;
    let target_path = s
        .target_override
        .clone()
        .unwrap_or_else(|| rel(&s.baseline_path, &b.target));
    let mut spec = TargetSpec::load(&target_path)
        .with_context(|| format!("target spec {}", target_path.display()))?;
    let mut tls = match &spec.tls_variant {
        Some(p) => Some(
            TargetSpec::load(p)
                .with_context(|| format!("tls_variant of {}", target_path.display()))?,
        ),
        None => None,
    };
    if let Some(u) = &s.user {
        for t in std::iter::once(&mut spec).chain(tls.as_mut()) {
            t.user = Some(u.clone());
            t.group = None;
        }
    }
    let binary = binary_id(&spec);
    if let (Some(want), Some(got)) = (
        b.profile.as_deref(),
        binary.as_ref().and_then(|x| x.profile.as_deref()),
    ) {
        if !s.blessing && want != got {
            bail!(
                "baseline {} was blessed with a {want} build of rig-peer, but {{rig_peer}} is {} ({got}): \
                 a {got} build allocates and copies differently; point ${} at a {want} build or bless a {got} baseline",
                s.baseline_path.display(),
                binary.as_ref().map_or(String::new(), |x| x.path.display().to_string()),
                crate::launch::spec::RIG_PEER_ENV
            );
        }
    }
    Ok((target_path, spec, tls, binary))
}

/// A case id, its key, and the case (its first repeat).
type Distinct = Vec<(String, String, Case)>;

/// The suite's cases (every repeat, `requests` each) and the distinct ones
/// with their keys; the baseline's counter names must fit them.
fn gate_cases(
    b: &Baseline,
    matrix: &Matrix,
    matrix_path: &Path,
    spec: &TargetSpec,
) -> Result<(Vec<Case>, Distinct)> {
    let names = vec![spec.name.clone()];
    let mut cases = matrix.expand(std::slice::from_ref(&b.suite), &names, Some(b.repeats))?;
    if cases.is_empty() {
        bail!(
            "suite `{}` of {} expands to no case",
            b.suite,
            matrix_path.display()
        );
    }
    for c in &mut cases {
        c.counted_requests = b.requests;
    }
    // Distinct cases (first repeat of each), with their keys.
    let mut distinct: Distinct = Vec::new();
    for c in &cases {
        let id = base_id(&c.id);
        if !distinct.iter().any(|(i, _, _)| *i == id) {
            distinct.push((id, CaseKey::of(c).to_string(), c.clone()));
        }
    }
    for (i, (id, key, _)) in distinct.iter().enumerate() {
        if let Some((other, _, _)) = distinct[..i].iter().find(|(_, k, _)| k == key) {
            bail!(
                "cases {other} and {id} of suite `{}` have the same key `{key}` \
                 (protocol, path, connections, keep-alive); a gate suite must not vary anything else",
                b.suite
            );
        }
    }
    check_counter_cases(b, &distinct)?;
    Ok((cases, distinct))
}

/// A multi-case suite names each counter's case; a one-case suite does not.
fn check_counter_cases(b: &Baseline, distinct: &Distinct) -> Result<()> {
    let multi = distinct.len() > 1;
    let keys: Vec<&str> = distinct.iter().map(|(_, k, _)| k.as_str()).collect();
    for name in b.counters.keys() {
        match (split_case(name).0, multi) {
            (Some(k), true) if keys.contains(&k) => {}
            (None, false) => {}
            (Some(k), true) => bail!(
                "baseline counter `{name}`: `{k}` is not a case of suite `{}` (its cases: {})",
                b.suite,
                keys.join(", ")
            ),
            (None, true) => bail!(
                "baseline counter `{name}`: suite `{}` has {} cases, so every counter names its case \
                 (`CASE: COUNTER`, cases: {})",
                b.suite,
                keys.len(),
                keys.join(", ")
            ),
            (Some(k), false) => bail!(
                "baseline counter `{name}`: suite `{}` has one case, so counters carry no case key (`{k}: `)",
                b.suite
            ),
        }
    }
    Ok(())
}

/// The baseline's instructions backend on this host, if it asks for one;
/// refused when the blessed values came from the other backend, or when a
/// case is not h1 keep-alive.
fn instructions_backend(
    s: &GateSettings,
    distinct: &Distinct,
) -> Result<Option<(Backend, String)>> {
    let b = &s.baseline;
    let Some(c) = &b.instructions else {
        return Ok(None);
    };
    let choice = Choice::parse(c).map_err(|e| anyhow::anyhow!("instructions: {e}"))?;
    let (backend, why) = instr::select(choice, &crate::host::detect_pmu())?;
    if let Some(blessed) = b.instructions_backend.as_deref() {
        if !s.blessing && blessed != backend.name() {
            bail!(
                "baseline {}: its instruction values were measured with {blessed}, this run would use {why}; \
                 the two count differently (callgrind bills rep movsb per byte), so they are never compared: \
                 bless on this host, or set instructions = \"{blessed}\"",
                s.baseline_path.display()
            );
        }
    }
    for (id, _, c) in distinct {
        let h1_keepalive = c
            .http()
            .is_some_and(|h| h.protocol == Proto::H1 && h.keepalive);
        if !h1_keepalive {
            bail!(
                "case {id}: instruction windows speak HTTP/1.1 on one keep-alive connection; \
                 measure instructions in an h1 keep-alive suite"
            );
        }
    }
    Ok(Some((backend, why)))
}

/// Every case's counted pass, `repeats` times: per case key, one metrics
/// map per run. Any failed run fails the gate ([`RunsFailed`]). The first
/// launch's objects go into the manifest (`manifest`).
fn counted_runs(
    rs: &RunSettings,
    cases: &[Case],
    spec: &TargetSpec,
    tls: Option<&TargetSpec>,
    mut out: Option<&mut OutDir>,
    manifest: &dyn Fn(&OutDir, &[crate::launch::start::ObjectFact]) -> Result<()>,
    stop: &AtomicBool,
) -> Result<BTreeMap<String, Vec<BTreeMap<String, f64>>>> {
    let mut sym = Symbolizer::new();
    let mut recorded = false;
    let mut runs: BTreeMap<String, Vec<BTreeMap<String, f64>>> = BTreeMap::new();
    let mut failed = Vec::new();
    for c in cases {
        if stop.load(Ordering::Relaxed) {
            crate::launch::start::cleanup_all();
            bail!("interrupted");
        }
        let mut r = run_case(rs, c, spec, tls, &mut sym);
        let interrupted = stop.load(Ordering::Relaxed);
        if interrupted {
            // rig stopped the target under this case: not a failure of the
            // target, and its part-counted pass is not data.
            r = crate::case::CaseResult::skipped(
                c,
                format!(
                    "{} during this case: rig stopped its target",
                    crate::interrupt::interrupted_by()
                ),
            );
        }
        if let Some(o) = out.as_deref_mut() {
            o.append_case(&r)?;
            if let (false, Some(objects)) = (recorded, &r.objects) {
                manifest(o, objects)?;
                recorded = true;
            }
        }
        if interrupted {
            crate::launch::start::cleanup_all();
            bail!("interrupted");
        }
        if !r.status.measured() || r.counted.is_none() {
            failed.push(format!("{}: {}", c.id, r.reasons.join("; ")));
            continue;
        }
        runs.entry(CaseKey::of(c).to_string())
            .or_default()
            .push(crate::case::counted_metrics(&r));
    }
    crate::launch::start::cleanup_all();
    if !failed.is_empty() {
        return Err(anyhow::Error::new(RunsFailed(failed)));
    }
    Ok(runs)
}

/// The instruction windows of a gate: `repeats` per distinct case, each on
/// a fresh server.
struct InstrWindows<'a> {
    b: &'a Baseline,
    spec: &'a TargetSpec,
    backend: Backend,
    multi: bool,
}

impl InstrWindows<'_> {
    /// Measure every case's windows and add their counters to `observed`;
    /// returns the backend's note.
    fn observe(
        &self,
        distinct: &Distinct,
        observed: &mut Vec<Observed>,
        stop: &AtomicBool,
    ) -> Result<String> {
        let b = self.b;
        let mut note = String::new();
        for (id, key, c) in distinct {
            let path = c.http().map_or("/", |h| h.path.as_str());
            let mut windows = Vec::new();
            for i in 0..b.repeats {
                if stop.load(Ordering::Relaxed) {
                    crate::launch::start::cleanup_all();
                    bail!("interrupted");
                }
                let w = crate::window::instructions::measure(
                    self.backend,
                    self.spec,
                    path,
                    b.requests,
                    crate::window::WarmUp::INSTRUCTIONS_DEFAULT,
                )
                .with_context(|| {
                    format!(
                        "{id}: instruction window {} of {} ({})",
                        i + 1,
                        b.repeats,
                        self.backend.name()
                    )
                })?;
                note = w.note.clone();
                windows.push(instr_metrics(&w));
            }
            let wanted = |n: &str| b.counters.contains_key(&keyed(self.multi, key, n));
            keep_functions(&mut windows, &wanted);
            for mut o in observe(&windows, b) {
                o.name = keyed(self.multi, key, &o.name);
                observed.push(o);
            }
        }
        Ok(note)
    }
}

/// Some runs failed: a gate cannot pass on missing runs.
#[derive(Debug)]
pub struct RunsFailed(pub Vec<String>);

impl std::fmt::Display for RunsFailed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} gate run(s) failed, so the gate cannot decide: {}",
            self.0.len(),
            self.0.join(" | ")
        )
    }
}

impl std::error::Error for RunsFailed {}
