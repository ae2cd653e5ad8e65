//! Sweeps: cases of one suite that differ in one parameter only
//! (connections, h2 streams per connection, or the open-loop rate), drawn
//! as curves against it. Each point is the median of the repeats, with the
//! band from the smallest to the largest repeat: the run-to-run variance is
//! on the chart, not averaged away.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::cases::fmt;
use crate::metrics::names::PER_REQUEST;
use crate::metrics::PerRequest;
use crate::results::case::CaseLine;

const PARAMS: &[(&str, &str)] = &[
    ("connections", "connections"),
    ("streams", "h2 streams per connection"),
    ("rate", "open-loop rate (req/s)"),
];

fn param(c: &CaseLine, p: &str) -> Option<f64> {
    match p {
        "rate" => c.load.as_ref()?.rate,
        "connections" => c.topology.as_ref()?.connections.map(|n| n as f64),
        _ => c.topology.as_ref()?.streams.map(|n| n as f64),
    }
}

/// Every coordinate of a case but `p` and the repeat, each as JSON.
fn key_without(c: &CaseLine, p: &str) -> String {
    fn json(v: &impl serde::Serialize) -> String {
        serde_json::to_string(v).unwrap_or_default()
    }
    let mut parts = vec![
        json(&c.suite),
        json(&c.target_name),
        json(&c.protocol),
        json(&c.path),
        json(&c.keepalive),
        json(&c.load.as_ref().and_then(|l| l.kind)),
    ];
    for (q, _) in PARAMS.iter().filter(|(q, _)| *q != p) {
        parts.push(format!("{:?}", param(c, q)));
    }
    parts.join("|")
}

/// The metrics of one run: rps and latency from the clean pass, counters
/// from the counted pass.
fn metrics(c: &CaseLine) -> Vec<(&'static str, Option<f64>)> {
    let l = c.clean.as_ref().map(|c| &c.load);
    let lat = l.map(|l| &l.latency);
    let us = |ns: Option<f64>| ns.map(|v| v / 1e3);
    let mut m = vec![
        ("rps", l.and_then(|l| l.rps)),
        ("p50", us(lat.and_then(|l| l.p50_ns))),
        ("p99", us(lat.and_then(|l| l.p99_ns))),
        ("p99.9", us(lat.and_then(|l| l.p999_ns))),
    ];
    let none = PerRequest::default();
    let per = c.counted.as_ref().map_or(&none, |k| &k.per_request);
    m.extend(per.values().map(|(t, v)| (t.label, v)));
    m
}

/// (points, band) of one metric over the sweep's x values.
fn curve(
    by_x: &BTreeMap<u64, Vec<&CaseLine>>,
    metric: &str,
) -> Option<(Vec<[f64; 2]>, Vec<Value>)> {
    let mut pts = Vec::new();
    let mut band = Vec::new();
    for (x, runs) in by_x {
        let x = f64::from_bits(*x);
        let mut v: Vec<f64> = runs
            .iter()
            .filter_map(|c| metrics(c).into_iter().find(|(k, _)| *k == metric)?.1)
            .filter(|v| v.is_finite())
            .collect();
        if v.is_empty() {
            continue;
        }
        v.sort_by(f64::total_cmp);
        let Some(med) = crate::stats::median(&v) else {
            continue;
        };
        pts.push([x, med]);
        band.push(json!([x, v[0], v[v.len() - 1]]));
    }
    (!pts.is_empty()).then_some((pts, band))
}

pub fn sweeps(cases: &[CaseLine], charts: &mut Map<String, Value>) -> Vec<Value> {
    let http: Vec<&CaseLine> = cases
        .iter()
        .filter(|c| c.kind == Some("http") && c.status == Some("ok"))
        .collect();
    let mut out = Vec::new();
    for (p, label) in PARAMS {
        // key → x (as bits, ordered for non-negative floats) → runs
        let mut groups: BTreeMap<String, BTreeMap<u64, Vec<&CaseLine>>> = BTreeMap::new();
        for c in &http {
            if let Some(x) = param(c, p) {
                groups
                    .entry(key_without(c, p))
                    .or_default()
                    .entry(x.to_bits())
                    .or_default()
                    .push(c);
            }
        }
        for by_x in groups.values().filter(|g| g.len() >= 2) {
            let first = by_x.values().next().and_then(|v| v.first()).copied();
            let Some(c0) = first else { continue };
            let n = out.len();
            let xs: Vec<f64> = by_x.keys().map(|b| f64::from_bits(*b)).collect();
            let title = format!(
                "{} · {} · {} {} · {} against {label}",
                c0.suite.unwrap_or_default(),
                c0.target_name.unwrap_or_default(),
                c0.protocol.unwrap_or_default(),
                c0.path.unwrap_or_default(),
                if c0.keepalive == Some(true) {
                    "keep-alive"
                } else {
                    "new connection per request"
                },
            );
            let mut ids = Vec::new();
            let mut add = |name: String, ylabel: &str, ylog: bool, series: Vec<Value>| {
                // Counters are small multiples; rps and latency full size.
                let small = !matches!(ylabel, "req/s" | "µs (log)");
                if series.is_empty() {
                    return;
                }
                let id = format!("sweep-{n}-{}", ids.len());
                charts.insert(
                    id.clone(),
                    json!({"title": name, "xlabel": label, "ylabel": ylabel, "x": "lin",
                           "ylog": ylog, "xticks": xs, "series": series, "small": small}),
                );
                ids.push(id);
            };
            let one = |m: &str| {
                curve(by_x, m)
                    .map(|(p, b)| json!({"name": m, "points": p, "band": b}))
                    .into_iter()
                    .collect::<Vec<_>>()
            };
            add("throughput".into(), "req/s", false, one("rps"));
            let lat: Vec<Value> = ["p50", "p99", "p99.9"]
                .iter()
                .flat_map(|m| one(m))
                .collect();
            add("latency, clean pass".into(), "µs (log)", true, lat);
            for t in &PER_REQUEST {
                add(t.label.to_string(), t.label, false, one(t.label));
            }
            let runs: usize = by_x.values().map(Vec::len).sum();
            out.push(json!({
                "title": title, "param": label, "charts": ids, "runs": runs,
                "values": xs.iter().map(|x| fmt(*x)).collect::<Vec<_>>(),
            }));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(conns: u64, repeat: u32, rps: f64, allocs: f64) -> Value {
        json!({"kind": "http", "status": "ok", "suite": "s", "target_name": "t",
               "protocol": "h1", "path": "/p", "keepalive": true, "repeat": repeat,
               "load": {"kind": "closed"}, "topology": {"connections": conns, "streams": 1},
               "clean": {"load": {"rps": rps, "latency": {"p50_ns": 1000, "p99_ns": 2000, "p999_ns": 3000}}},
               "counted": {"per_request": {"allocations": allocs}}})
    }

    #[test]
    fn a_suite_varying_connections_is_one_sweep_with_the_spread_of_repeats() {
        let lines = [
            case(1, 1, 100.0, 8.0),
            case(1, 2, 300.0, 8.0),
            case(1, 3, 200.0, 8.0),
            case(4, 1, 900.0, 8.0),
        ];
        let cases: Vec<CaseLine> = lines.iter().map(|c| CaseLine::of(c).unwrap()).collect();
        let mut charts = Map::new();
        let s = sweeps(&cases, &mut charts);
        assert_eq!(s.len(), 1, "{s:#?}");
        assert_eq!(s[0]["param"], "connections");
        assert_eq!(s[0]["runs"], 4);
        let rps = &charts[s[0]["charts"][0].as_str().unwrap()];
        assert_eq!(
            rps["series"][0]["points"],
            json!([[1.0, 200.0], [4.0, 900.0]])
        );
        assert_eq!(
            rps["series"][0]["band"],
            json!([[1.0, 100.0, 300.0], [4.0, 900.0, 900.0]])
        );
        // rps, latency and the one counter present.
        assert_eq!(s[0]["charts"].as_array().unwrap().len(), 3);
    }
}
