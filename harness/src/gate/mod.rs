//! `rig gate`: a counter-only, deterministic CI gate.
//!
//! In: a baseline file (TOML, checked in) naming a target spec, a tiny
//! matrix and suite, a repeat count, a request count, probe families, an
//! optional instructions backend and per-counter limits. The suite's cases
//! run `repeats` times, counted pass only (no clean pass, so no timing is
//! measured at all), each run on a fresh server with exactly `requests`
//! requests in the window. With `instructions` set, each case also gets
//! `repeats` instruction windows ([`crate::probe::instructions`]: perf when
//! the host has a PMU, else callgrind), each on a fresh server.
//!
//! Out: per counter, the per-run values and their spread (max − min). A
//! counter is **deterministic** when `spread <= tol × max(1, |max|)`. For
//! the eBPF counters `tol` is [`DET_REL_TOL`]: per-request counts are
//! integers divided by a fixed N, so identical runs give bit-identical
//! values and the tolerance only absorbs float summation order. For
//! instruction counters `tol` is the baseline's
//! `instructions_tolerance_pct` (default [`INSTR_TOL_PCT_DEFAULT`] %): two
//! callgrind windows agree to within 0.1% (fixtures/calib/COSTS.md), a
//! hardware counter has skid and interrupts. The same tolerance is the
//! resolution of the comparison. A baseline may also set
//! `rare_events_per_req`: event counts (calls, syscalls, faults) whose
//! runs differ by at most that much per request are deterministic at that
//! resolution, and so are bytes counters within that many events' worth of
//! bytes (bytes per event of the site, or of the total). An async runtime does some work on a
//! few requests in a thousand (a timer wheel growing, an `epoll_wait` that
//! found nothing), which a hot-path change (at least one event on every
//! request) cannot hide behind. Only deterministic counters are compared
//! with the baseline; the others are listed as skipped with their spread.
//! Nothing here reads a clock to decide anything.
//!
//! A suite expanding to several cases keys every counter by its case
//! (`h1 /calib c1: allocs/req`); a one-case suite keeps the bare names.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use crate::probe::instructions::{self as instr, Backend, Choice};
use crate::probe::Family;
use crate::run::case::{run_case, Status};
use crate::run::output::OutDir;
use crate::run::{Passes, RunSettings};
use crate::scenario::{Case, Matrix, Proto};
use crate::symbolize::Symbolizer;
use crate::target::spec::TargetSpec;

/// Exit code of `rig gate` when at least one counter breaches its limit
/// (or a new call site breaches `max_new_sites`).
pub const EXIT_BREACH: i32 = 7;

/// Relative tolerance of the determinism rule for the eBPF counters (see
/// the module docs).
pub const DET_REL_TOL: f64 = 1e-9;

/// Largest `rare_events_per_req` a baseline may set: a change on half of
/// the requests must never look like noise.
pub const RARE_EVENTS_MAX: f64 = 0.1;

/// How far apart two values of a counter may be and still be equal.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Tol {
    /// Relative to max(1, |value|).
    pub rel: f64,
    /// Absolute, per request.
    pub abs: f64,
}

impl Tol {
    pub const EXACT: Tol = Tol {
        rel: DET_REL_TOL,
        abs: 0.0,
    };

    pub fn eps(self, v: f64) -> f64 {
        (self.rel * v.abs().max(1.0)).max(self.abs)
    }
}

/// Is `name` (without a case key) a count of events (calls, syscalls,
/// faults, lock acquisitions), not bytes or instructions?
pub fn is_event_count(name: &str) -> bool {
    !is_instr(name) && !name.contains("bytes")
}

/// The events counter a bytes counter is made of: `alloc bytes/req` →
/// `allocs/req`, `copy bytes/req` → `copy calls/req`, `KIND bytes @ SITE` →
/// `KIND calls @ SITE` (case key kept).
pub fn events_of(name: &str) -> Option<String> {
    let (case, n) = split_case(name);
    let ev = match n {
        "alloc bytes/req" => "allocs/req".to_string(),
        "copy bytes/req" => "copy calls/req".to_string(),
        _ => {
            let (kind, site) = n.split_once(" bytes @ ")?;
            format!("{kind} calls @ {site}")
        }
    };
    Some(match case {
        Some(c) => format!("{c}: {ev}"),
        None => ev,
    })
}

/// Default `instructions_tolerance_pct`: the relative spread (percent)
/// within which instruction counters are deterministic and equal.
pub const INSTR_TOL_PCT_DEFAULT: f64 = 0.1;

/// Total instructions per request (perf or callgrind).
pub const INSTRUCTIONS: &str = "instructions/req";

/// Self instructions of one function per request (callgrind): `Ir @ NAME`.
pub const IR_SITE: &str = "Ir @ ";

/// A function's self instructions become a counter (observed, blessed, or
/// a new site) when they are at least this share (percent) of the
/// instructions per request in some run, or when the baseline names it.
pub const FN_MIN_SHARE_PCT: f64 = 1.0;

/// Uncounted requests before each instruction window (lazy binding, first
/// touch), as `rig attach --drive` does.
pub const INSTR_WARMUP: u64 = 200;

/// Every total counter name: the eBPF totals of [`crate::ab::counted_metrics`]
/// and [`INSTRUCTIONS`]. Per-site names are checked by shape in
/// [`check_counter_name`].
pub fn totals() -> impl Iterator<Item = &'static str> {
    crate::ab::TOTAL_COUNTERS
        .iter()
        .copied()
        .chain(std::iter::once(INSTRUCTIONS))
}

/// Is `name` (without a case key) an instruction counter?
pub fn is_instr(name: &str) -> bool {
    name == INSTRUCTIONS || name.starts_with(IR_SITE)
}

/// `"h1 /calib c1: allocs/req"` → `(Some("h1 /calib c1"), "allocs/req")`;
/// a bare name → `(None, name)`.
pub fn split_case(name: &str) -> (Option<&str>, &str) {
    match name.split_once(": ") {
        Some((case, rest)) if !case.contains(" @ ") && !case.starts_with("syscall ") => {
            (Some(case), rest)
        }
        _ => (None, name),
    }
}

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
    /// Instructions per request: `"auto"` (perf when the host has a PMU,
    /// else callgrind), `"perf"` or `"callgrind"`. Unset: not measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions: Option<String>,
    /// The backend that measured the blessed instruction values (written
    /// by `--bless`); another backend's numbers are never compared with them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_backend: Option<String>,
    /// Relative tolerance (percent) of instruction counters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instructions_tolerance_pct: Option<f64>,
    /// Event counts within this many per request of each other are equal
    /// (see the module docs); at most [`RARE_EVENTS_MAX`]. Unset: exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rare_events_per_req: Option<f64>,
    /// Cargo profile (`"debug"`/`"release"`) of the rig-peer binary the
    /// values were blessed with, for targets run via `{rig_peer}` (written by
    /// `--bless`): a release rig-peer does not allocate like a debug one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default)]
    pub counters: BTreeMap<String, Limit>,
}

fn is_site(name: &str) -> bool {
    let name = split_case(name).1;
    name.contains(" @ ") || name.starts_with("syscall ")
}

/// Is `name` a counter rig can produce? A clear message when not. A case
/// key (`h1 /calib c1: `) in front is allowed; whether it names a case of
/// the suite is checked once the suite is expanded.
pub fn check_counter_name(name: &str) -> Result<(), String> {
    let name = split_case(name).1;
    if totals().any(|t| t == name) {
        return Ok(());
    }
    if let Some(sc) = name.strip_prefix("syscall ") {
        if !sc.is_empty() && !sc.contains(' ') {
            return Ok(());
        }
    }
    if let Some((head, site)) = name.split_once(" @ ") {
        let kind_ok = if head == "faults" || head == "Ir" {
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
    let near: Vec<&str> = totals().filter(|t| edit_distance(t, name) <= 3).collect();
    let hint = if near.is_empty() {
        String::new()
    } else {
        format!(" (did you mean `{}`?)", near.join("` or `"))
    };
    Err(format!(
        "unknown counter `{name}`{hint}; counters are one of {} or a call site: \
         `KIND calls @ FUNCTION (FILE:LINE)`, `KIND bytes @ …` (KIND: {}), `faults @ …`, `syscall NAME`, \
         `Ir @ FUNCTION` (self instructions, callgrind); with several cases, `CASE: COUNTER`",
        totals().collect::<Vec<_>>().join(", "),
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
        match &b.instructions {
            Some(c) => {
                if let Err(e) = Choice::parse(c) {
                    errs.push(format!("instructions: {e}"));
                }
            }
            None => {
                if let Some(n) = b.counters.keys().find(|n| is_instr(split_case(n).1)) {
                    errs.push(format!(
                        "counter `{n}` needs instructions measured: add `instructions = \"auto\"`"
                    ));
                }
            }
        }
        if let Some(bk) = &b.instructions_backend {
            if Backend::parse(bk).is_none() {
                errs.push(format!(
                    "instructions_backend = \"{bk}\": give \"perf\" or \"callgrind\""
                ));
            }
        }
        if let Some(r) = b.rare_events_per_req {
            if !r.is_finite() || !(0.0..=RARE_EVENTS_MAX).contains(&r) {
                errs.push(format!(
                    "rare_events_per_req = {r}: give a number from 0 to {RARE_EVENTS_MAX} \
                     (more would hide a change on a tenth of the requests)"
                ));
            }
        }
        if let Some(t) = b.instructions_tolerance_pct {
            if !t.is_finite() || t < 0.0 {
                errs.push("instructions_tolerance_pct must be a number >= 0".into());
            }
        }
        if b.profile.as_deref().is_some_and(|p| p.trim().is_empty()) {
            errs.push("profile = \"\": give the cargo profile, e.g. \"debug\"".into());
        }
        if !errs.is_empty() {
            bail!("baseline {}: {}", path.display(), errs.join("; "));
        }
        Ok(b)
    }

    /// Relative tolerance of instruction counters (a fraction, not percent).
    pub fn instr_rel_tol(&self) -> f64 {
        self.instructions_tolerance_pct
            .unwrap_or(INSTR_TOL_PCT_DEFAULT)
            / 100.0
    }

    /// The tolerance of counter `name` (with or without a case key). A
    /// bytes counter gets `rare_events_per_req` events' worth of bytes:
    /// `bytes_per_event` is its value over its events counter's
    /// ([`events_of`]), the largest seen.
    pub fn tol(&self, name: &str, bytes_per_event: Option<f64>) -> Tol {
        let n = split_case(name).1;
        let rare = self.rare_events_per_req.unwrap_or(0.0);
        if is_instr(n) {
            Tol {
                rel: self.instr_rel_tol(),
                abs: 0.0,
            }
        } else if is_event_count(n) {
            Tol {
                rel: DET_REL_TOL,
                abs: rare,
            }
        } else {
            Tol {
                rel: DET_REL_TOL,
                abs: rare * bytes_per_event.unwrap_or(0.0),
            }
        }
    }

    /// [`Baseline::tol`] from the baseline's own values.
    fn tol_of_baseline(&self, name: &str) -> Tol {
        let ratio = events_of(name).and_then(|ev| {
            let e = self.counters.get(&ev)?.value;
            (e > 0.0).then(|| self.counters[name].value / e)
        });
        self.tol(name, ratio)
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
        if let Some(c) = &self.instructions {
            o += &format!("instructions = {}\n", q(c));
        }
        if let Some(c) = &self.instructions_backend {
            o += &format!("instructions_backend = {}\n", q(c));
        }
        if let Some(t) = self.instructions_tolerance_pct {
            o += &format!("instructions_tolerance_pct = {}\n", f(t));
        }
        if let Some(r) = self.rare_events_per_req {
            o += &format!("rare_events_per_req = {}\n", f(r));
        }
        if let Some(p) = &self.profile {
            o += &format!("profile = {}\n", q(p));
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
    /// Tolerance of this counter (determinism and comparison).
    pub tol: Tol,
    pub deterministic: bool,
}

impl Observed {
    pub fn new(name: String, values: Vec<f64>, tol: Tol) -> Observed {
        let (spread, deterministic) = deterministic(&values, tol);
        Observed {
            name,
            values,
            spread,
            tol,
            deterministic,
        }
    }

    pub fn now(&self) -> f64 {
        crate::stats::median(&self.values).unwrap_or(f64::NAN)
    }
}

/// Spread (max − min) of `values`, and whether it is within `tol` of the
/// largest.
pub fn deterministic(values: &[f64], tol: Tol) -> (f64, bool) {
    let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = values.iter().copied().fold(f64::INFINITY, f64::min);
    let spread = max - min;
    (spread, spread <= tol.eps(max))
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

#[derive(Clone, Debug, Serialize)]
pub struct GateReport {
    pub baseline: PathBuf,
    pub target: String,
    pub binary: Option<BinaryId>,
    /// Case ids (without the repeat), and the key of each when there are several.
    pub cases: Vec<(String, String)>,
    pub repeats: u32,
    pub requests: u64,
    pub instructions: Option<InstrInfo>,
    /// The baseline's `rare_events_per_req`.
    pub rare_events_per_req: Option<f64>,
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
    /// `--bless`: measure for a new baseline (the blessed instructions
    /// backend is not enforced).
    pub blessing: bool,
}

fn rel(base: &Path, p: &str) -> PathBuf {
    let dir = base.parent().unwrap_or(Path::new("."));
    dir.join(p)
}

/// The cargo profile a `{rig_peer}` binary was built with: the name of the
/// directory holding it (`target/debug/rig-peer`, `…/release/rig-peer`).
pub fn profile_of(binary: &Path) -> Option<String> {
    Some(binary.parent()?.file_name()?.to_string_lossy().into_owned())
}

fn uses_rig_peer(spec: &TargetSpec) -> bool {
    spec.argv.iter().any(|a| a.contains("{rig_peer}"))
}

fn binary_id(spec: &TargetSpec) -> Option<BinaryId> {
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

/// A case's key in counter names: protocol, path, connections (× streams),
/// `close` without keep-alive. The target's name is not in it, so a
/// `--target` build under test keys its counters like the baseline.
pub fn case_key(c: &Case) -> String {
    let mut k = match c.protocol {
        Some(p) => p.name().to_string(),
        None => format!("{:?}", c.kind).to_lowercase(),
    };
    if let Some(p) = &c.path {
        k += &format!(" {p}");
    }
    if let Some(t) = c.topology {
        k += &format!(" c{}", t.connections);
        if t.streams > 1 {
            k += &format!("x{}", t.streams);
        }
    }
    if !c.keepalive {
        k += " close";
    }
    k
}

/// A case id without its repeat (`…/#2`).
fn base_id(id: &str) -> String {
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
fn observe(runs: &[BTreeMap<String, f64>], b: &Baseline) -> Vec<Observed> {
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
fn instr_metrics(w: &crate::probe::callgrind::InstrWindow) -> BTreeMap<String, f64> {
    let mut m = BTreeMap::new();
    m.insert(INSTRUCTIONS.to_string(), w.ir_per_request);
    for f in &w.functions {
        *m.entry(format!("{IR_SITE}{}", f.name)).or_insert(0.0) += f.self_ir;
    }
    m
}

/// Keep the functions that matter: at least [`FN_MIN_SHARE_PCT`] of the
/// instructions per request in some run, or named by the baseline.
fn keep_functions(runs: &mut [BTreeMap<String, f64>], wanted: &dyn Fn(&str) -> bool) {
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
                crate::target::spec::RIG_PEER_ENV
            );
        }
    }
    let matrix_path = rel(&s.baseline_path, &b.matrix);
    let matrix = Matrix::load(&matrix_path)?;
    let families = Family::parse_list(&b.probes)?;
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
    let mut distinct: Vec<(String, String, Case)> = Vec::new();
    for c in &cases {
        let id = base_id(&c.id);
        if !distinct.iter().any(|(i, _, _)| *i == id) {
            distinct.push((id, case_key(c), c.clone()));
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
    let keyed = |key: &str, name: &str| {
        if multi {
            format!("{key}: {name}")
        } else {
            name.to_string()
        }
    };
    // The instructions backend, before anything runs.
    let backend = match &b.instructions {
        None => None,
        Some(c) => {
            let choice = Choice::parse(c).map_err(|e| anyhow::anyhow!("instructions: {e}"))?;
            let (backend, why) = instr::select(choice, &crate::report::host::detect_pmu())?;
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
            for (id, _, c) in &distinct {
                if c.protocol != Some(Proto::H1) || !c.keepalive || c.path.is_none() {
                    bail!(
                        "case {id}: instruction windows speak HTTP/1.1 on one keep-alive connection; \
                         measure instructions in an h1 keep-alive suite"
                    );
                }
            }
            Some((backend, why))
        }
    };
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
                    "binary": binary,
                    "spec": spec,
                    "host": crate::report::host::HostFacts::gather(),
                }),
            )?;
            Some(o)
        }
        None => None,
    };
    let mut sym = Symbolizer::new();
    // Per case key: one metrics map per run.
    let mut runs: BTreeMap<String, Vec<BTreeMap<String, f64>>> = BTreeMap::new();
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
        runs.entry(case_key(c))
            .or_default()
            .push(crate::ab::counted_metrics(&r));
    }
    crate::target::launch::cleanup_all();
    if !failed.is_empty() {
        return Err(anyhow::Error::new(RunsFailed(failed)));
    }
    let mut observed = Vec::new();
    for (key, rs) in &runs {
        for mut o in observe(rs, b) {
            o.name = keyed(key, &o.name);
            observed.push(o);
        }
    }
    let instructions = match backend {
        None => None,
        Some((backend, why)) => {
            let tol = b.instr_rel_tol();
            let mut note = String::new();
            for (id, key, c) in &distinct {
                let path = c.path.as_deref().unwrap_or("/");
                let mut windows = Vec::new();
                for i in 0..b.repeats {
                    if stop.load(Ordering::Relaxed) {
                        crate::target::launch::cleanup_all();
                        bail!("interrupted");
                    }
                    let w = instr::measure(backend, &spec, path, b.requests, INSTR_WARMUP)
                        .with_context(|| {
                            format!(
                                "{id}: instruction window {} of {} ({})",
                                i + 1,
                                b.repeats,
                                backend.name()
                            )
                        })?;
                    note = w.note.clone();
                    windows.push(instr_metrics(&w));
                }
                let wanted = |n: &str| b.counters.contains_key(&keyed(key, n));
                keep_functions(&mut windows, &wanted);
                for mut o in observe(&windows, b) {
                    o.name = keyed(key, &o.name);
                    observed.push(o);
                }
            }
            Some(InstrInfo {
                backend,
                why,
                tolerance_pct: tol * 100.0,
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
    for (name, l) in &b.counters {
        let tol = by_name
            .get(name.as_str())
            .map_or_else(|| b.tol_of_baseline(name), |o| o.tol);
        let eps = |v: f64| tol.eps(v);
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
                    note: "absent in the run (its probe family is not in `probes`, or its backend does not count it)".into(),
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
    let m = measure(s, stop)?;
    let (rows, breaches) = compare(&s.baseline, &m.observed);
    let report = GateReport {
        baseline: s.baseline_path.clone(),
        target: m.target,
        binary: m.binary,
        cases: m.cases,
        repeats: s.baseline.repeats,
        requests: s.baseline.requests,
        instructions: m.instructions,
        rare_events_per_req: s.baseline.rare_events_per_req,
        observed: m.observed,
        rows,
        breaches,
    };
    if let Some(d) = &s.out {
        let p = d.join("gate.json");
        crate::fsutil::write_new(&p, &serde_json::to_vec_pretty(&report)?)
            .with_context(|| format!("writing {}", p.display()))?;
    }
    Ok(report)
}

/// The baseline with every deterministic counter's value replaced by now;
/// limits kept for counters it had (soft_pct 0 for new ones); sites gone
/// from the run are dropped; non-deterministic counters are kept as they
/// were. The instructions backend, its tolerance and (for `{rig_peer}`
/// targets) the build profile are recorded.
pub fn blessed(b: &Baseline, m: &Measured) -> (Baseline, Vec<String>) {
    let observed = &m.observed;
    let mut nb = b.clone();
    let mut notes = Vec::new();
    if let Some(i) = &m.instructions {
        nb.instructions_backend = Some(i.backend.name().to_string());
        nb.instructions_tolerance_pct = Some(i.tolerance_pct);
    }
    nb.profile = m.binary.as_ref().and_then(|x| x.profile.clone());
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
        blessing: a.bless,
    };
    if a.bless {
        let m = measure(&s, stop)?;
        if let Some(i) = &m.instructions {
            println!("rig gate --bless: instructions counted by {}", i.why);
        }
        let (nb, notes) = blessed(&s.baseline, &m);
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
    let cases = match r.cases.as_slice() {
        [(id, _)] => format!("case {id}"),
        many => format!(
            "{} cases ({})",
            many.len(),
            many.iter()
                .map(|(_, k)| k.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        ),
    };
    let mut o = format!(
        "rig gate: {} on {} — {cases}, {} runs × {} requests, counted pass only\n",
        r.baseline.display(),
        r.target,
        r.repeats,
        r.requests
    );
    if let Some(b) = &r.binary {
        o += &format!(
            "binary: {} (sha256 {}{})\n",
            b.path.display(),
            &b.sha256[..16.min(b.sha256.len())],
            b.profile
                .as_ref()
                .map_or(String::new(), |p| format!(", {p} build"))
        );
    }
    if let Some(i) = &r.instructions {
        o += &format!(
            "instructions: {} windows per case counted by {}; deterministic and compared within {}%\n",
            i.windows, i.why, i.tolerance_pct
        );
    }
    if let Some(r) = r.rare_events_per_req.filter(|r| *r > 0.0) {
        o += &format!(
            "event counts (calls, syscalls, faults) within {r}/req of each other are equal, bytes within {r} events' worth (rare_events_per_req)\n"
        );
    }
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
        "{det} of {} observed counters deterministic over {} runs (spread within each counter's tolerance)\n",
        r.observed.len(),
        r.repeats
    );
    if let Some(i) = &r.instructions {
        o += &format!("note: {}\n", i.note);
    }
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
        Observed::new(name.into(), v.to_vec(), Tol::EXACT)
    }

    fn measured(observed: Vec<Observed>) -> Measured {
        Measured {
            target: "t.toml".into(),
            binary: None,
            cases: vec![("http/t/h1/work/c1x1/ka".into(), "h1 /work c1".into())],
            instructions: None,
            observed,
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
        let (nb, _) = blessed(&b, &measured(o));
        assert_eq!(nb.counters["allocs/req"].soft_pct, 10.0);
        assert!(!nb.counters.contains_key("malloc calls @ f (a.c:1)"));
        assert!(!nb.counters.contains_key("page faults/req"));
        let again = Baseline::parse(Path::new("b.toml"), &nb.to_toml()).unwrap();
        assert_eq!(again.counters, nb.counters);
    }

    #[test]
    fn case_keys_and_instruction_names() {
        assert_eq!(
            split_case("h1 /calib c1: allocs/req"),
            (Some("h1 /calib c1"), "allocs/req")
        );
        assert_eq!(split_case("allocs/req"), (None, "allocs/req"));
        assert_eq!(
            split_case("malloc calls @ f (a.c:3)"),
            (None, "malloc calls @ f (a.c:3)")
        );
        assert!(check_counter_name("h1 /work c1: malloc calls @ f (a.c:3)").is_ok());
        assert!(check_counter_name("instructions/req").is_ok());
        assert!(
            check_counter_name("h2c /plain c4x8: Ir @ hyper::proto::h1::role::parse_headers")
                .is_ok()
        );
        assert!(check_counter_name("instructons/req")
            .unwrap_err()
            .contains("did you mean `instructions/req`"));
        // An instruction counter needs `instructions` set.
        let e = Baseline::parse(
            Path::new("b.toml"),
            "target=\"t\"\nmatrix=\"m\"\nsuite=\"s\"\nrepeats=2\nrequests=1\nprobes=\"alloc\"\n[counters.\"instructions/req\"]\nvalue=1.0\n",
        )
        .unwrap_err();
        assert!(
            format!("{e}").contains("add `instructions = \"auto\"`"),
            "{e}"
        );
    }

    /// Instruction counters are judged with the baseline's tolerance
    /// (0.1% by default), the others exactly.
    #[test]
    fn instruction_counters_use_the_stated_tolerance() {
        let text =
            "target=\"t\"\nmatrix=\"m\"\nsuite=\"s\"\nrepeats=2\nrequests=1\nprobes=\"alloc\"\n\
                    instructions=\"auto\"\n[counters.\"instructions/req\"]\nvalue=10000.0\n\
                    [counters.\"allocs/req\"]\nvalue=3.0\n";
        let b = Baseline::parse(Path::new("b.toml"), text).unwrap();
        let ins = |v: &[f64]| {
            Observed::new(
                "instructions/req".into(),
                v.to_vec(),
                b.tol("instructions/req", None),
            )
        };
        // 0.05% apart: deterministic, and within the comparison's resolution.
        let o = vec![ins(&[10005.0, 10000.0]), obs("allocs/req", &[3.0, 3.0])];
        assert!(o[0].deterministic);
        let (_, breaches) = compare(&b, &o);
        assert!(breaches.is_empty(), "{breaches:?}");
        // 0.2% apart: not deterministic, skipped and said so.
        let o = vec![ins(&[10020.0, 10000.0])];
        assert!(!o[0].deterministic);
        let (rows, _) = compare(&b, &o);
        assert!(rows[1].note.starts_with("non-deterministic"), "{rows:?}");
        // 0.2% more in every window: a breach.
        let o = vec![ins(&[10020.0, 10020.0]), obs("allocs/req", &[3.0, 3.0])];
        let (_, breaches) = compare(&b, &o);
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        assert!(breaches[0].contains("instructions/req: 10020.000/req > 10000.000"));
        // The eBPF counters stay exact.
        let o = vec![obs("allocs/req", &[3.001, 3.001])];
        assert_eq!(compare(&b, &o).1.len(), 1);
    }

    /// `rare_events_per_req` makes near-integer event counts comparable;
    /// bytes stay exact, and a change on every request still breaches.
    #[test]
    fn rare_events_tolerance_applies_to_event_counts_only() {
        let text =
            "target=\"t\"\nmatrix=\"m\"\nsuite=\"s\"\nrepeats=3\nrequests=1\nprobes=\"alloc\"\n\
                    rare_events_per_req=0.01\n[counters.\"allocs/req\"]\nvalue=4.003\n";
        let b = Baseline::parse(Path::new("b.toml"), text).unwrap();
        let o = |n: &str, v: &[f64]| Observed::new(n.into(), v.to_vec(), b.tol(n, None));
        assert!(o("allocs/req", &[4.003, 4.002, 4.003]).deterministic);
        assert!(o("malloc calls @ f (a.rs:1)", &[3.003, 3.002, 3.001]).deterministic);
        // Bytes without an events counter are exact; with one, they get
        // 0.01 events' worth (here about 2220 B per allocation: 22.2 B).
        assert!(!o("alloc bytes/req", &[8888.087, 8887.9, 8888.087]).deterministic);
        let runs: Vec<BTreeMap<String, f64>> =
            [(4.003, 8888.087), (4.002, 8885.9), (4.004, 8890.0)]
                .iter()
                .map(|(n, by)| {
                    BTreeMap::from([
                        ("allocs/req".to_string(), *n),
                        ("alloc bytes/req".to_string(), *by),
                    ])
                })
                .collect();
        let seen = observe(&runs, &b);
        let bytes = seen.iter().find(|o| o.name == "alloc bytes/req").unwrap();
        assert!(bytes.deterministic, "{bytes:?}");
        let most = [8888.087 / 4.003, 8885.9 / 4.002, 8890.0 / 4.004]
            .into_iter()
            .fold(0.0, f64::max);
        assert!((bytes.tol.abs - 0.01 * most).abs() < 1e-9, "{bytes:?}");
        assert!(!o("allocs/req", &[4.003, 4.05, 4.003]).deterministic);
        let (_, breaches) = compare(&b, &[o("allocs/req", &[4.005, 4.004, 4.005])]);
        assert!(breaches.is_empty(), "{breaches:?}");
        let (_, breaches) = compare(&b, &[o("allocs/req", &[5.002, 5.003, 5.002])]);
        assert_eq!(breaches.len(), 1, "{breaches:?}");
        let e = Baseline::parse(Path::new("b.toml"), &text.replace("0.01", "0.5")).unwrap_err();
        assert!(format!("{e}").contains("rare_events_per_req = 0.5"), "{e}");
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
