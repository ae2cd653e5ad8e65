//! Determinism of a counter over the runs, and the comparison with the
//! baseline's limits.

use std::collections::BTreeMap;

use serde::Serialize;

use super::*;

/// Relative tolerance of the determinism rule for the eBPF counters (see
/// the module docs).
pub const DET_REL_TOL: f64 = 1e-9;

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

/// Compare observed counters with the baseline: a row per baseline
/// counter, then one per counter the baseline does not have.
pub fn compare(b: &Baseline, observed: &[Observed]) -> (Vec<Row>, Vec<String>) {
    let by_name: BTreeMap<&str, &Observed> =
        observed.iter().map(|o| (o.name.as_str(), o)).collect();
    let mut rows = Vec::new();
    let mut breaches = Vec::new();
    for (name, l) in &b.counters {
        rows.push(baseline_row(b, name, l, &by_name, &mut breaches));
    }
    new_site_rows(b, observed, &mut rows, &mut breaches);
    (rows, breaches)
}

/// The row of baseline counter `name`: skipped (non-deterministic or
/// absent), ok, or a breach (also added to `breaches`).
fn baseline_row(
    b: &Baseline,
    name: &String,
    l: &Limit,
    by_name: &BTreeMap<&str, &Observed>,
    breaches: &mut Vec<String>,
) -> Row {
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
            return Row {
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
            };
        }
        Some(o) => o.now(),
        None if is_site(name) => 0.0, // the site is gone: 0 per request
        None => {
            return Row {
                counter: name.clone(),
                baseline: Some(l.value),
                now: None,
                limit: Some(limit),
                verdict: Verdict::Skipped,
                note: "absent in the run (its probe family is not in `probes`, or its backend does not count it)".into(),
            };
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
    Row {
        counter: name.clone(),
        baseline: Some(l.value),
        now: Some(now),
        limit: Some(limit),
        verdict,
        note,
    }
}

/// Rows of counters the baseline does not have; new call sites beyond
/// `max_new_sites` are breaches.
fn new_site_rows(
    b: &Baseline,
    observed: &[Observed],
    rows: &mut Vec<Row>,
    breaches: &mut Vec<String>,
) {
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
}

/// A new site counts against `max_new_sites` when it happens on at least
/// half of the requests.
pub const NEW_SITE_MIN_PER_REQUEST: f64 = 0.5;

pub(crate) fn frequent(name: &str, observed: &[Observed]) -> bool {
    let calls_name = match name.split_once(" bytes @ ") {
        Some((kind, site)) => format!("{kind} calls @ {site}"),
        None => name.to_string(),
    };
    observed
        .iter()
        .find(|o| o.name == calls_name)
        .is_none_or(|o| o.now() >= NEW_SITE_MIN_PER_REQUEST)
}
