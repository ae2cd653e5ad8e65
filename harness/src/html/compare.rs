//! The `rig ab` and `rig gate` parts of the page, from `ab.json` /
//! `gate.json` and the cases of the run.

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::cases::fmt;
use super::Inputs;
use crate::results::ab::{AbView, Metric};
use crate::results::case::CaseLine;
use crate::results::gate::{GateView, Observed};
use crate::results::manifest::ManifestView;

fn num(v: &Option<f64>) -> String {
    v.map_or_else(|| "—".to_string(), fmt)
}

/// `PATH sha256 0123456789ab…` of one verified or expected object.
fn object_line(path: Option<&str>, sha256: Option<&str>) -> String {
    let short: String = sha256.unwrap_or_default().chars().take(12).collect();
    format!("{} sha256 {short}…", path.unwrap_or_default())
}

/// Which objects each launch of each arm proved it mapped.
fn proofs(cases: &[CaseLine]) -> Vec<Value> {
    let mut out = Vec::new();
    for c in cases {
        for (pass, l) in c.launches() {
            let Some(p) = &l.arm_proof else {
                continue;
            };
            let objects: Vec<String> = p
                .verified
                .iter()
                .map(|o| object_line(o.path, o.sha256))
                .collect();
            out.push(json!({
                "case": c.id, "target": c.target_name, "pass": pass, "pid": l.pid,
                "processes": p.processes, "objects": objects,
            }));
        }
    }
    out
}

pub fn ab(inp: &Inputs, cases: &[CaseLine]) -> serde_json::Result<Value> {
    let s = AbView::deserialize(&inp.summary)?;
    let expected: Vec<Value> = ManifestView::of(&inp.manifest)
        .arms
        .iter()
        .map(|a| {
            json!({
                "name": a.name,
                "objects": a.expected_objects.iter()
                    .map(|o| object_line(o.path, o.sha256))
                    .collect::<Vec<_>>(),
            })
        })
        .collect();
    let metrics: Vec<Value> = s.metrics.iter().map(|m| metric(m, &s.arms)).collect();
    let sites: Vec<Value> = s
        .code_differences
        .iter()
        .map(|d| {
            json!({
                "case": d.case,
                "sites": d.sites.iter().map(|(site, medians)| json!({
                    "site": site,
                    "medians": medians.iter().map(num).collect::<Vec<_>>(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    Ok(json!({
        "arms": s.arms, "expected": expected, "proofs": proofs(cases),
        "rounds": s.rounds, "order": s.order, "interrupted": s.interrupted,
        "failed_runs": s.failed_runs, "equality": s.equality, "evidence": s.evidence,
        "metrics": metrics, "code_differences": sites, "drift": s.drift, "verdict": s.verdict,
    }))
}

/// One metric of `ab.json`: each arm's raw values, and every arm after the
/// first against the first.
fn metric(m: &Metric, arms: &[&str]) -> Value {
    let raw: Vec<String> = m
        .values
        .iter()
        .zip(arms)
        .map(|(v, arm)| {
            let vals: Vec<String> = v.iter().map(num).collect();
            format!("{arm}: {}", vals.join(" "))
        })
        .collect();
    let vs: Vec<Value> = m
        .vs_first
        .iter()
        .zip(arms.iter().skip(1))
        .map(|(c, arm)| {
            json!({
                "arm": arm,
                "a_median": num(&c.a_median), "b_median": num(&c.b_median),
                "diff": num(&c.diff_median),
                "rel": c.rel.map(|r| format!("{:+.1}%", r * 100.0)),
                "ci": c.ci.as_ref().map(|i| format!("[{}, {}]", num(&i.lo), num(&i.hi))),
                "p": c.p_value.map(|p| format!("{p:.3}")),
                "verdict": c.verdict, "reason": c.reason,
            })
        })
        .collect();
    json!({
        "case": m.case, "metric": m.metric, "unit": m.unit,
        "exact": m.exact, "control": m.control, "raw": raw, "vs": vs,
    })
}

/// A row of the gate's table on the page.
#[derive(Serialize)]
struct GateRow<'a> {
    counter: &'a str,
    /// A counter that names a call site: a breach there is the site to
    /// look at first.
    site: bool,
    baseline: String,
    now: String,
    limit: &'a Value,
    verdict: &'a str,
    breach: bool,
    note: &'a Value,
    runs: Vec<String>,
    deterministic: &'a Value,
}

pub fn gate(g: &Value) -> serde_json::Result<Value> {
    let g = GateView::deserialize(g)?;
    let breaches = g.breaches.as_deref().unwrap_or_default();
    let rows: Vec<GateRow> = g
        .rows
        .iter()
        .map(|r| {
            let name = r.counter.unwrap_or_default();
            let o = g.observed.iter().find(|o| o.name == Some(name));
            let verdict = r.verdict.unwrap_or_default();
            // A breach, or a new site the baseline's `max_new_sites` refused.
            let breach = verdict.ends_with("breach")
                || breaches.iter().any(|b| b.contains(&format!("{name}: ")));
            GateRow {
                counter: name,
                site: name.contains(" @ "),
                baseline: num(&r.baseline),
                now: num(&r.now),
                limit: &r.limit,
                verdict,
                breach,
                note: &r.note,
                runs: o
                    .map(|o| o.values.as_slice())
                    .unwrap_or_default()
                    .iter()
                    .map(num)
                    .collect(),
                deterministic: o.map_or(&Value::Null, |o: &Observed| &o.deterministic),
            }
        })
        .collect();
    let breaching_sites: Vec<&GateRow> = rows.iter().filter(|r| r.breach && r.site).collect();
    Ok(json!({
        "passed": breaches.is_empty(),
        "baseline": g.baseline, "target": g.target, "binary": g.binary,
        "repeats": g.repeats, "requests": g.requests, "breaches": g.breaches,
        "breaching_sites": breaching_sites, "rows": rows,
    }))
}
