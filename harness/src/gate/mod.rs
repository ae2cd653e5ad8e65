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
//! Out: per counter, the per-run values and their spread (max − min), and
//! with `--out` also `gate.bmf.json`, `gate.md`, `gate.junit.xml`
//! ([`export`]) and `flame/<case>/` flamegraphs. A
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

mod baseline;
mod bless;
mod compare;
mod export;
mod measure;
mod render;
#[cfg(test)]
mod tests;

pub use crate::metrics::names::*;
pub use baseline::*;
pub use bless::*;
pub use compare::*;
pub use export::*;
pub use measure::*;
pub use render::*;

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;

use anyhow::{Context, Result};
use serde::Serialize;

/// Exit code of `rig gate` when at least one counter breaches its limit
/// (or a new call site breaches `max_new_sites`).
pub const EXIT_BREACH: i32 = crate::exit::GATE_BREACH;

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
    /// `--user`: the user the server runs as, over the spec's own `user`.
    pub user: Option<String>,
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
        write_exports(d, &report)?;
        crate::report::flame::outdir::cases(d, crate::scenario::slug)
            .with_context(|| format!("writing flamegraphs in {}/flame", d.display()))?;
        crate::html::write_or_warn(d);
    }
    Ok(report)
}

/// `rig gate`: the command. Exit 0 pass (or blessed), [`EXIT_BREACH`]
/// breach; errors (bad baseline: 1, failed runs: 6, not root: 3) come back
/// as `Err`.
pub fn command(s: &GateSettings, stop: &AtomicBool) -> Result<i32> {
    let r = if s.blessing {
        bless(s, stop)
    } else {
        run(s, stop).map(|r| {
            crate::out!("{}", render(&r));
            if r.passed() {
                0
            } else {
                EXIT_BREACH
            }
        })
    };
    if r.is_err() && stop.load(std::sync::atomic::Ordering::Relaxed) {
        write_interrupted(s)?;
    }
    if let (Ok(_), Some(d)) = (&r, &s.out) {
        crate::out!("{}", crate::html::report_line(d));
    }
    r
}

/// A SIGINT/SIGTERM ended the gate before its verdict: `gate.json` (when
/// `--out` is given) says so, beside the cases that finished.
fn write_interrupted(s: &GateSettings) -> Result<()> {
    let Some(d) = s.out.as_ref().filter(|d| d.is_dir()) else {
        return Ok(());
    };
    let p = d.join("gate.json");
    let v = serde_json::json!({
        "baseline": s.baseline_path,
        "interrupted": true,
        "passed": null,
        "note": "interrupted by SIGINT/SIGTERM before every run finished: no verdict; \
                 cases.jsonl has the runs that finished",
    });
    crate::fsutil::write_new(&p, &serde_json::to_vec_pretty(&v)?)
        .with_context(|| format!("writing {}", p.display()))
}
