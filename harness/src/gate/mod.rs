//! `rig gate`: a counter-only, deterministic CI gate.
//!
//! In: a baseline file (TOML, checked in) naming a target spec, a tiny
//! matrix and suite, a repeat count, a request count, probe families and
//! per-counter limits. The suite's cases run `repeats` times, counted pass
//! only (no clean pass, so no timing is measured at all), each run on a
//! fresh server with exactly `requests` requests in the window.
//!
//! Out: per counter, the per-run values and their spread (max − min). A
//! counter is **deterministic** when `spread <= DET_REL_TOL × max(1, |max|)`
//! (per-request counts are integers divided by a fixed N, so identical runs
//! give bit-identical values; the tolerance only absorbs float summation
//! order). Only deterministic counters are compared with the baseline; the
//! others are listed as skipped with their spread. Nothing here reads a
//! clock to decide anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::probe::Family;
use crate::run::case::{run_case, Status};
use crate::run::output::OutDir;
use crate::run::{Passes, RunSettings};
use crate::scenario::Matrix;
use crate::symbolize::Symbolizer;
use crate::target::spec::TargetSpec;

/// Exit code of `rig gate` when at least one counter breaches its limit
/// (or a new call site breaches `max_new_sites`).
pub const EXIT_BREACH: i32 = 7;

/// Relative tolerance of the determinism rule (see the module docs).
pub const DET_REL_TOL: f64 = 1e-9;

/// Total counters `rig ab`'s `counted_metrics` can produce (kept in step
/// with it); per-site names are checked by shape in [`check_counter_name`].
pub const TOTALS: &[&str] = &[
    "syscalls/req",
    "allocs/req",
    "alloc bytes/req",
    "frees/req",
    "copy bytes/req",
    "copy calls/req",
    "lock acquisitions/req",
    "page faults/req",
];

const SITE_KINDS: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "free",
    "posix_memalign",
    "memalign",
    "aligned_alloc",
    "valloc",
    "pvalloc",
    "operator new",
    "operator new[]",
    "operator delete",
    "operator delete[]",
    "memcpy",
    "memmove",
    "memset",
];

/// One counter's limits.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Limit {
    /// Baseline value per request.
    pub value: f64,
    /// Breach when now > value × (1 + soft_pct/100).
    #[serde(default)]
    pub soft_pct: f64,
    /// Absolute ceiling: breach when now > hard.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hard: Option<f64>,
}

/// The baseline file.
#[derive(Clone, Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Baseline {
    /// Target spec, relative to the baseline file.
    pub target: String,
    /// Matrix, relative to the baseline file.
    pub matrix: String,
    pub suite: String,
    pub repeats: u32,
    pub requests: u64,
    pub probes: String,
    /// When set, more new call sites than this is a breach.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_sites: Option<usize>,
    #[serde(default)]
    pub counters: BTreeMap<String, Limit>,
}

fn is_site(name: &str) -> bool {
    name.contains(" @ ") || name.starts_with("syscall ")
}

/// Is `name` a counter rig can produce? A clear message when not.
pub fn check_counter_name(name: &str) -> Result<(), String> {
    if TOTALS.contains(&name) {
        return Ok(());
    }
    if let Some(sc) = name.strip_prefix("syscall ") {
        if !sc.is_empty() && !sc.contains(' ') {
            return Ok(());
        }
    }
    if let Some((head, site)) = name.split_once(" @ ") {
        let kind_ok = if head == "faults" {
            true
        } else if let Some(k) = head
            .strip_suffix(" calls")
            .or_else(|| head.strip_suffix(" bytes"))
        {
            // Copy kinds name the APIs sharing one implementation: `memcpy/memmove`.
            k.split('/').all(|part| SITE_KINDS.contains(&part))
        } else {
            false
        };
        if kind_ok && !site.trim().is_empty() {
            return Ok(());
        }
    }
    let near: Vec<&str> = TOTALS
        .iter()
        .copied()
        .filter(|t| edit_distance(t, name) <= 3)
        .collect();
    let hint = if near.is_empty() {
        String::new()
    } else {
        format!(" (did you mean `{}`?)", near.join("` or `"))
    };
    Err(format!(
        "unknown counter `{name}`{hint}; counters are one of {} or a call site: \
         `KIND calls @ FUNCTION (FILE:LINE)`, `KIND bytes @ …` (KIND: {}), `faults @ …`, `syscall NAME`",
        TOTALS.join(", "),
        SITE_KINDS.join(", ")
    ))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

impl Baseline {
    pub fn parse(path: &Path, text: &str) -> Result<Baseline> {
        let b: Baseline = toml::from_str(text).map_err(|e| {
            let (line, col) = e
                .span()
                .map(|s| crate::scenario::line_col(text, s.start))
                .unwrap_or((0, 0));
            anyhow::anyhow!("baseline {}:{line}:{col}: {}", path.display(), e.message())
        })?;
        let mut errs = Vec::new();
        for (name, l) in &b.counters {
            if let Err(e) = check_counter_name(name) {
                errs.push(e);
            }
            if !l.value.is_finite() || l.value < 0.0 {
                errs.push(format!("counter `{name}`: value must be a number >= 0"));
            }
            if !l.soft_pct.is_finite() || l.soft_pct < 0.0 {
                errs.push(format!("counter `{name}`: soft_pct must be >= 0"));
            }
        }
        if b.repeats < 2 {
            errs.push(format!(
                "repeats = {}: the determinism check needs at least 2 runs",
                b.repeats
            ));
        }
        if b.requests == 0 {
            errs.push("requests = 0: give a request count > 0".into());
        }
        if let Err(e) = Family::parse_list(&b.probes) {
            errs.push(format!("probes: {e}"));
        }
        if !errs.is_empty() {
            bail!("baseline {}: {}", path.display(), errs.join("; "));
        }
        Ok(b)
    }

    pub fn load(path: &Path) -> Result<Baseline> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading baseline {}", path.display()))?;
        Baseline::parse(path, &text)
    }

    /// The baseline as TOML, header first, counters sorted.
    pub fn to_toml(&self) -> String {
        let q = |s: &str| toml::Value::String(s.to_string()).to_string();
        let f = |v: f64| {
            if v.fract() == 0.0 && v.abs() < 1e15 {
                format!("{v:.1}")
            } else {
                format!("{v}")
            }
        };
        let mut o = String::from(
            "# rig gate baseline (README: \"Counter-only CI gates\"). Written by `rig gate --bless`;\n\
             # limits (soft_pct, hard, max_new_sites) are kept across blesses.\n",
        );
        o += &format!("target = {}\n", q(&self.target));
        o += &format!("matrix = {}\n", q(&self.matrix));
        o += &format!("suite = {}\n", q(&self.suite));
        o += &format!("repeats = {}\n", self.repeats);
        o += &format!("requests = {}\n", self.requests);
        o += &format!("probes = {}\n", q(&self.probes));
        if let Some(n) = self.max_new_sites {
            o += &format!("max_new_sites = {n}\n");
        }
        // Totals first, then call sites.
        let mut names: Vec<&String> = self.counters.keys().collect();
        names.sort_by_key(|n| (is_site(n), n.to_string()));
        for name in names {
            let l = &self.counters[name];
            o += &format!("\n[counters.{}]\nvalue = {}\n", q(name), f(l.value));
            o += &format!("soft_pct = {}\n", f(l.soft_pct));
            if let Some(h) = l.hard {
                o += &format!("hard = {}\n", f(h));
            }
        }
        o
    }
}

/// One counter over the runs.
#[derive(Clone, Debug, Serialize)]
pub struct Observed {
    pub name: String,
    pub values: Vec<f64>,
    pub spread: f64,
    pub deterministic: bool,
}

impl Observed {
    pub fn now(&self) -> f64 {
        crate::stats::median(&self.values).unwrap_or(f64::NAN)
    }
}

pub fn deterministic(values: &[f64]) -> (f64, bool) {
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let spread = max - min;
    (spread, spread <= DET_REL_TOL * max.abs().max(1.0))
}

#[derive(Clone, Debug, Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    Ok,
    SoftBreach,
    HardBreach,
    Skipped,
    New,
}

impl Verdict {
    pub fn word(&self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::SoftBreach => "soft breach",
            Verdict::HardBreach => "hard breach",
            Verdict::Skipped => "skipped",
            Verdict::New => "new",
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub counter: String,
    pub baseline: Option<f64>,
    pub now: Option<f64>,
    pub limit: Option<String>,
    pub verdict: Verdict,
    /// Why skipped, or the breach message.
    pub note: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct GateReport {
    pub baseline: PathBuf,
    pub target: String,
    pub case: String,
    pub repeats: u32,
    pub requests: u64,
    pub observed: Vec<Observed>,
    pub rows: Vec<Row>,
    pub breaches: Vec<String>,
}

impl GateReport {
    pub fn passed(&self) -> bool {
        self.breaches.is_empty()
    }
}

#[derive(Clone, Debug)]
pub struct GateSettings {
    pub baseline_path: PathBuf,
    pub baseline: Baseline,
    /// `--target`: a spec replacing the baseline's (as given, not relative).
    pub target_override: Option<PathBuf>,
    pub out: Option<PathBuf>,
    pub argv: Vec<String>,
}

fn rel(base: &Path, p: &str) -> PathBuf {
    let dir = base.parent().unwrap_or(Path::new("."));
    dir.join(p)
}

/// Run the suite `repeats` times (counted pass only) and observe every counter.
pub fn measure(s: &GateSettings, stop: &AtomicBool) -> Result<(String, String, Vec<Observed>)> {
    let b = &s.baseline;
    let target_path = s
        .target_override
        .clone()
        .unwrap_or_else(|| rel(&s.baseline_path, &b.target));
    let spec = TargetSpec::load(&target_path)
        .with_context(|| format!("target spec {}", target_path.display()))?;
    let tls = match &spec.tls_variant {
        Some(p) => Some(
            TargetSpec::load(p)
                .with_context(|| format!("tls_variant of {}", target_path.display()))?,
        ),
        None => None,
    };
    let matrix_path = rel(&s.baseline_path, &b.matrix);
    let matrix = Matrix::load(&matrix_path)?;
    let families = Family::parse_list(&b.probes)?;
    let names = vec![spec.name.clone()];
    let mut cases = matrix.expand(std::slice::from_ref(&b.suite), &names, Some(b.repeats))?;
    let per_repeat = cases.len() / b.repeats.max(1) as usize;
    if per_repeat != 1 {
        bail!(
            "suite `{}` of {} expands to {per_repeat} cases; a gate matrix must give exactly one (one protocol, path, topology, keep-alive setting, no rates)",
            b.suite,
            matrix_path.display()
        );
    }
    for c in &mut cases {
        c.counted_requests = b.requests;
    }
    let rs = RunSettings {
        targets: vec![(spec.clone(), tls.clone())],
        matrix_path: matrix_path.clone(),
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
        memory_mib: None,
        cpu_quota: None,
        argv: s.argv.clone(),
        verify_arms: false,
    };
    let mut out = match &s.out {
        Some(d) => {
            let o = OutDir::create(d)?;
            o.write_json(
                "manifest.json",
                &serde_json::json!({
                    "schema_version": 1,
                    "rig_version": env!("CARGO_PKG_VERSION"),
                    "argv": s.argv,
                    "baseline": s.baseline_path,
                    "target": target_path,
                    "spec": spec,
                }),
            )?;
            Some(o)
        }
        None => None,
    };
    let mut sym = Symbolizer::new();
    let mut runs = Vec::new();
    let mut failed = Vec::new();
    for c in &cases {
        if stop.load(Ordering::Relaxed) {
            crate::target::launch::cleanup_all();
            bail!("interrupted");
        }
        let r = run_case(&rs, c, &spec, tls.as_ref(), &mut sym);
        if let Some(o) = out.as_mut() {
            o.append_case(&r)?;
        }
        if r.status != Status::Ok || r.counted.is_none() {
            failed.push(format!("{}: {}", c.id, r.reasons.join("; ")));
            continue;
        }
        runs.push(crate::ab::counted_metrics(&r));
    }
    crate::target::launch::cleanup_all();
    if !failed.is_empty() {
        return Err(anyhow::Error::new(RunsFailed(failed)));
    }
    let case = cases[0]
        .id
        .rsplit_once('/')
        .map_or(cases[0].id.clone(), |(k, _)| k.to_string());
    let mut all: Vec<String> = runs.iter().flat_map(|m| m.keys().cloned()).collect();
    all.sort();
    all.dedup();
    let observed = all
        .into_iter()
        .map(|name| {
            // A site absent from a run did not happen in it: 0 per request.
            let values: Vec<f64> = runs
                .iter()
                .map(|m| m.get(&name).copied().unwrap_or(0.0))
                .collect();
            let (spread, det) = deterministic(&values);
            Observed {
                name,
                values,
                spread,
                deterministic: det,
            }
        })
        .collect();
    Ok((target_path.display().to_string(), case, observed))
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

/// Compare observed counters with the baseline.
pub fn compare(b: &Baseline, observed: &[Observed]) -> (Vec<Row>, Vec<String>) {
    let by_name: BTreeMap<&str, &Observed> =
        observed.iter().map(|o| (o.name.as_str(), o)).collect();
    let mut rows = Vec::new();
    let mut breaches = Vec::new();
    let eps = |v: f64| DET_REL_TOL * v.abs().max(1.0);
    for (name, l) in &b.counters {
        let soft = l.value * (1.0 + l.soft_pct / 100.0);
        let limit = match l.hard {
            Some(h) => format!("{soft:.3} (+{}%), hard {h:.3}", l.soft_pct),
            None => format!("{soft:.3} (+{}%)", l.soft_pct),
        };
        let now = match by_name.get(name.as_str()) {
            Some(o) if !o.deterministic => {
                rows.push(Row {
                    counter: name.clone(),
                    baseline: Some(l.value),
                    now: Some(o.now()),
                    limit: Some(limit),
                    verdict: Verdict::Skipped,
                    note: format!(
                        "non-deterministic: spread {:.6}/req over {} runs",
                        o.spread,
                        o.values.len()
                    ),
                });
                continue;
            }
            Some(o) => o.now(),
            None if is_site(name) => 0.0, // the site is gone: 0 per request
            None => {
                rows.push(Row {
                    counter: name.clone(),
                    baseline: Some(l.value),
                    now: None,
                    limit: Some(limit),
                    verdict: Verdict::Skipped,
                    note: "absent in the run (its probe family is not in `probes`)".into(),
                });
                continue;
            }
        };
        let (verdict, note) = if l.hard.is_some_and(|h| now > h + eps(h)) {
            let m = format!(
                "{name}: {now:.3}/req > hard limit {:.3} (baseline {:.3})",
                l.hard.unwrap_or_default(),
                l.value
            );
            breaches.push(format!("hard breach: {m}"));
            (Verdict::HardBreach, m)
        } else if now > soft + eps(soft) {
            let m = format!(
                "{name}: {now:.3}/req > {soft:.3} (baseline {:.3} + {}%)",
                l.value, l.soft_pct
            );
            breaches.push(format!("soft breach: {m}"));
            (Verdict::SoftBreach, m)
        } else if !by_name.contains_key(name.as_str()) {
            (Verdict::Ok, "site gone: 0/req now".into())
        } else {
            (Verdict::Ok, String::new())
        };
        rows.push(Row {
            counter: name.clone(),
            baseline: Some(l.value),
            now: Some(now),
            limit: Some(limit),
            verdict,
            note,
        });
    }
    let mut new_sites = Vec::new();
    for o in observed {
        if b.counters.contains_key(&o.name) {
            continue;
        }
        if !o.deterministic {
            rows.push(Row {
                counter: o.name.clone(),
                baseline: None,
                now: Some(o.now()),
                limit: None,
                verdict: Verdict::Skipped,
                note: format!(
                    "not in the baseline; non-deterministic: spread {:.6}/req",
                    o.spread
                ),
            });
            continue;
        }
        if is_site(&o.name) && o.now() > 0.0 {
            let m = format!("{}: new site, {:.1}/req", o.name, o.now());
            // A hot-path change shows up on every request; a site seen on a
            // few requests in a thousand (a runtime's occasional timer
            // wheel growth) can repeat its count by chance and must not
            // decide a gate. Bytes rows follow their calls row.
            if frequent(&o.name, observed) {
                new_sites.push(m.clone());
            }
            rows.push(Row {
                counter: o.name.clone(),
                baseline: None,
                now: Some(o.now()),
                limit: None,
                verdict: Verdict::New,
                note: m,
            });
        }
    }
    if let Some(max) = b.max_new_sites {
        if new_sites.len() > max {
            for m in &new_sites {
                breaches.push(format!("new site (max_new_sites = {max}): {m}"));
            }
        }
    }
    (rows, breaches)
}

/// A new site counts against `max_new_sites` when it happens on at least
/// half of the requests.
pub const NEW_SITE_MIN_PER_REQUEST: f64 = 0.5;

fn frequent(name: &str, observed: &[Observed]) -> bool {
    let calls_name = match name.split_once(" bytes @ ") {
        Some((kind, site)) => format!("{kind} calls @ {site}"),
        None => name.to_string(),
    };
    observed
        .iter()
        .find(|o| o.name == calls_name)
        .is_none_or(|o| o.now() >= NEW_SITE_MIN_PER_REQUEST)
}

pub fn run(s: &GateSettings, stop: &AtomicBool) -> Result<GateReport> {
    let (target, case, observed) = measure(s, stop)?;
    let (rows, breaches) = compare(&s.baseline, &observed);
    let report = GateReport {
        baseline: s.baseline_path.clone(),
        target,
        case,
        repeats: s.baseline.repeats,
        requests: s.baseline.requests,
        observed,
        rows,
        breaches,
    };
    if let Some(d) = &s.out {
        let p = d.join("gate.json");
        std::fs::write(&p, serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(report)
}

/// The baseline with every deterministic counter's value replaced by now;
/// limits kept for counters it had (soft_pct 0 for new ones); sites gone
/// from the run are dropped; non-deterministic counters are kept as they were.
pub fn blessed(b: &Baseline, observed: &[Observed]) -> (Baseline, Vec<String>) {
    let mut nb = b.clone();
    let mut notes = Vec::new();
    let by_name: BTreeMap<&str, &Observed> =
        observed.iter().map(|o| (o.name.as_str(), o)).collect();
    nb.counters.retain(|name, _| {
        let keep = !is_site(name) || by_name.contains_key(name.as_str());
        if !keep {
            notes.push(format!("dropped `{name}`: the site is gone"));
        }
        keep
    });
    for o in observed {
        if !o.deterministic {
            notes.push(format!(
                "not blessed `{}`: non-deterministic (spread {:.6}/req)",
                o.name, o.spread
            ));
            continue;
        }
        let now = o.now();
        if is_site(&o.name) && now == 0.0 {
            continue;
        }
        nb.counters
            .entry(o.name.clone())
            .and_modify(|l| l.value = now)
            .or_insert(Limit {
                value: now,
                soft_pct: 0.0,
                hard: None,
            });
    }
    (nb, notes)
}

/// `rig gate`: the command. Exit 0 pass (or blessed), 7 breach; errors
/// (bad baseline: 1, failed runs: 6, not root: 3) come back as `Err`.
pub fn cli(a: &crate::cli::GateArgs, stop: &AtomicBool) -> Result<i32> {
    let baseline = Baseline::load(&a.baseline)?;
    if !Family::parse_list(&baseline.probes)?.is_empty() {
        crate::probe::require_root()?;
    }
    let s = GateSettings {
        baseline_path: a.baseline.clone(),
        baseline,
        target_override: a.target.clone(),
        out: a.out.clone(),
        argv: std::env::args().collect(),
    };
    if a.bless {
        let (_, _, observed) = measure(&s, stop)?;
        let (nb, notes) = blessed(&s.baseline, &observed);
        for n in &notes {
            eprintln!("rig gate --bless: {n}");
        }
        std::fs::write(&a.baseline, nb.to_toml())
            .with_context(|| format!("writing {}", a.baseline.display()))?;
        println!(
            "rig gate --bless: wrote {} counters to {}",
            nb.counters.len(),
            a.baseline.display()
        );
        return Ok(0);
    }
    let r = run(&s, stop)?;
    print!("{}", render(&r));
    Ok(if r.passed() { 0 } else { EXIT_BREACH })
}

fn num(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{v:.3}"))
}

/// The terminal table and the verdict lines.
pub fn render(r: &GateReport) -> String {
    use comfy_table::{presets::UTF8_FULL_CONDENSED, Table};
    let mut o = format!(
        "rig gate: {} on {} — case {}, {} runs × {} requests, counted pass only\n",
        r.baseline.display(),
        r.target,
        r.case,
        r.repeats,
        r.requests
    );
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "counter", "baseline", "now", "delta", "limit", "verdict",
    ]);
    for row in &r.rows {
        let delta = match (row.baseline, row.now) {
            (Some(b), Some(n)) => format!("{:+.3}", n - b),
            _ => "-".into(),
        };
        let verdict = if row.verdict == Verdict::Skipped
            || (row.verdict == Verdict::Ok && !row.note.is_empty())
        {
            format!("{}: {}", row.verdict.word(), row.note)
        } else {
            row.verdict.word().to_string()
        };
        t.add_row(vec![
            row.counter.clone(),
            num(row.baseline),
            num(row.now),
            delta,
            row.limit.clone().unwrap_or("-".into()),
            verdict,
        ]);
    }
    o += &format!("{t}\n");
    let det = r.observed.iter().filter(|x| x.deterministic).count();
    o += &format!(
        "{det} of {} observed counters deterministic (spread 0 over {} runs)\n",
        r.observed.len(),
        r.repeats
    );
    for row in r.rows.iter().filter(|x| x.verdict == Verdict::New) {
        o += &format!("new: {}\n", row.note);
    }
    if r.breaches.is_empty() {
        o += "gate: PASS\n";
    } else {
        for b in &r.breaches {
            o += &format!("BREACH {b}\n");
        }
        o += &format!("gate: FAIL ({} breaches)\n", r.breaches.len());
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obs(name: &str, v: &[f64]) -> Observed {
        let (spread, d) = deterministic(v);
        Observed {
            name: name.into(),
            values: v.to_vec(),
            spread,
            deterministic: d,
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(check_counter_name("allocs/req").is_ok());
        assert!(check_counter_name("malloc calls @ f (a.c:3)").is_ok());
        assert!(check_counter_name("syscall sendto").is_ok());
        assert!(check_counter_name("memcpy/memmove bytes @ g (c.c:94)").is_ok());
        let e = check_counter_name("alocs/req").unwrap_err();
        assert!(e.contains("did you mean `allocs/req`"), "{e}");
        assert!(check_counter_name("mallc calls @ f").is_err());
    }

    #[test]
    fn compare_and_bless() {
        let text = r#"
target = "t.toml"
matrix = "m.toml"
suite = "work"
repeats = 3
requests = 10
probes = "alloc"
[counters."allocs/req"]
value = 3.0
soft_pct = 10.0
[counters."malloc calls @ f (a.c:1)"]
value = 1.0
"#;
        let b = Baseline::parse(Path::new("b.toml"), text).unwrap();
        let o = vec![
            obs("allocs/req", &[3.0, 3.0, 3.0]),
            obs("malloc calls @ f (a.c:9)", &[1.0, 1.0, 1.0]),
            obs("page faults/req", &[0.1, 0.2, 0.1]),
        ];
        let (rows, breaches) = compare(&b, &o);
        assert!(breaches.is_empty(), "{breaches:?}");
        assert!(rows.iter().any(|r| r.verdict == Verdict::New));
        let o2 = vec![obs("allocs/req", &[3.4, 3.4, 3.4])];
        let (_, breaches) = compare(&b, &o2);
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        let (nb, _) = blessed(&b, &o);
        assert_eq!(nb.counters["allocs/req"].soft_pct, 10.0);
        assert!(!nb.counters.contains_key("malloc calls @ f (a.c:1)"));
        assert!(!nb.counters.contains_key("page faults/req"));
        let again = Baseline::parse(Path::new("b.toml"), &nb.to_toml()).unwrap();
        assert_eq!(again.counters, nb.counters);
    }

    #[test]
    fn unknown_keys_are_errors() {
        let e = Baseline::parse(
            Path::new("b.toml"),
            "target=\"t\"\nmatrix=\"m\"\nsuite=\"s\"\nrepeats=3\nrequests=1\nprobes=\"alloc\"\nrepeat=2\n",
        )
        .unwrap_err();
        assert!(format!("{e}").contains("unknown field `repeat`"), "{e}");
    }
}
