//! The baseline file: its TOML format, validation and tolerances.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use super::*;
use crate::probe::instructions::{Backend, Choice};
use crate::probe::Family;

/// Largest `rare_events_per_req` a baseline may set: a change on half of
/// the requests must never look like noise.
pub const RARE_EVENTS_MAX: f64 = 0.1;

/// Default `instructions_tolerance_pct`: the relative spread (percent)
/// within which instruction counters are deterministic and equal.
pub const INSTR_TOL_PCT_DEFAULT: f64 = 0.1;

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
    /// Counters held exactly even when `rare_events_per_req` is set: name
    /// prefixes (a trailing `*` reads the same), e.g. `"syscall recvfrom @"`
    /// for the request path's syscalls by call site, while a runtime's
    /// timer-driven ones keep the tolerance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub exact: Vec<String>,
    /// Cargo profile (`"debug"`/`"release"`) of the rig-peer binary the
    /// values were blessed with, for targets run via `{rig_peer}` (written by
    /// `--bless`): a release rig-peer does not allocate like a debug one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    #[serde(default)]
    pub counters: BTreeMap<String, Limit>,
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
        let mut unknown = false;
        for (name, l) in &b.counters {
            if let Err(e) = check_counter_name(name) {
                errs.push(e);
                unknown = true;
            }
            if !l.value.is_finite() || (l.value < 0.0 && !may_be_negative(name)) {
                errs.push(format!("counter `{name}`: value must be a number >= 0"));
            }
            if !l.soft_pct.is_finite() || l.soft_pct < 0.0 {
                errs.push(format!("counter `{name}`: soft_pct must be >= 0"));
            }
            // A NaN ceiling is never exceeded (every comparison with it is
            // false): the gate would pass whatever was measured.
            if let Some(h) = l.hard.filter(|h| !h.is_finite() || *h < 0.0) {
                errs.push(format!(
                    "counter `{name}`: hard = {h}: give a number >= 0 (a NaN ceiling never \
                     breaches, a negative one always does)"
                ));
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
        if unknown {
            errs.push(counter_forms());
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
        let held_exactly = self
            .exact
            .iter()
            .any(|p| n.starts_with(p.trim_end_matches('*')));
        let rare = if held_exactly {
            0.0
        } else {
            self.rare_events_per_req.unwrap_or(0.0)
        };
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
    pub(crate) fn tol_of_baseline(&self, name: &str) -> Tol {
        let ratio = events_of(name).and_then(|ev| {
            let e = self.counters.get(&ev)?.value;
            (e > 0.0).then(|| self.counters[name].value / e)
        });
        self.tol(name, ratio)
    }

    pub fn load(path: &Path) -> Result<Baseline> {
        let text = crate::fsutil::read_config(path)
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
            "# rig gate baseline (docs/guide.md: \"Counter-only CI gates\"). Written by `rig gate --bless`;\n\
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
        if !self.exact.is_empty() {
            let list: Vec<String> = self.exact.iter().map(|e| q(e)).collect();
            o += &format!("exact = [{}]\n", list.join(", "));
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

pub(crate) fn rel(base: &Path, p: &str) -> PathBuf {
    let dir = base.parent().unwrap_or(Path::new("."));
    dir.join(p)
}
