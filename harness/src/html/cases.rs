//! The matrix table and each case's section, from `cases.jsonl` lines.

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::chart;
use super::flames::Flames;
use crate::metrics::names::PER_REQUEST_FIELDS;

/// Probe families in the order the page shows them.
pub const FAMILIES: &[&str] = &[
    "alloc", "copy", "locks", "syscalls", "faults", "sched", "cpu",
];

pub fn slug_of(c: &Value) -> String {
    crate::scenario::slug(c["id"].as_str().unwrap_or_default())
}

/// A number as the page prints it: integers exactly, others to about three
/// significant digits.
pub fn fmt(v: f64) -> String {
    if !v.is_finite() {
        return "—".into();
    }
    if v.fract() == 0.0 && v.abs() < 1e15 {
        return format!("{}", v as i64);
    }
    let a = v.abs();
    if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

fn cell(v: Option<f64>) -> Value {
    match v {
        Some(x) if x.is_finite() => json!({"v": fmt(x), "s": x}),
        _ => json!({"v": "—", "s": null}),
    }
}

fn text(v: impl Into<String>) -> Value {
    json!({"v": v.into(), "s": null})
}

pub fn load_text(c: &Value) -> String {
    match c["load"]["kind"].as_str() {
        Some("open") => format!("open {}/s", fmt(c["load"]["rate"].as_f64().unwrap_or(0.0))),
        Some(k) => k.to_string(),
        None => "—".into(),
    }
}

pub fn topology_text(c: &Value) -> String {
    let t = &c["topology"];
    match (t["connections"].as_u64(), t["streams"].as_u64()) {
        (Some(n), Some(s)) => format!("{n}x{s}"),
        _ => "—".into(),
    }
}

fn us(ns: &Value) -> Option<f64> {
    ns.as_f64().map(|x| x / 1e3)
}

/// A case as the page needs it. A counted pass's attribution holds every
/// stack of the window (tens of MB per case for a real server): its top
/// sites are taken here, one case at a time, and the rest of it dropped, so
/// the page of a long run is built in bounded memory.
pub fn slim(mut c: Value) -> Value {
    if c["counted"].is_object() {
        let sites = top_sites(&c["counted"], 10);
        let a = c["counted"]["attribution"].take();
        c["counted"]["top_sites"] = Value::Array(sites);
        c["counted"]["attribution"] = json!({
            "complete": a["complete"], "window": a["window"], "losses": a["losses"],
            "processes": a["processes"],
        });
    }
    c
}

/// The matrix: columns, and a row per case.
pub fn matrix(cases: &[Value]) -> Value {
    let counters: Vec<&(&str, &str)> = PER_REQUEST_FIELDS
        .iter()
        .filter(|(k, _)| {
            cases
                .iter()
                .any(|c| c["counted"]["per_request"][*k].is_number())
        })
        .collect();
    let mut columns: Vec<Value> = [
        "case", "suite", "target", "protocol", "path", "load", "conns", "ka", "status",
    ]
    .iter()
    .map(|l| json!({"label": l, "numeric": false}))
    .collect();
    for l in [
        "rps",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "CPU µs/req",
        "RSS max KiB",
    ] {
        columns.push(json!({"label": l, "numeric": true}));
    }
    for (_, l) in &counters {
        columns.push(json!({"label": l, "numeric": true, "counter": true}));
    }
    let rows: Vec<Value> = cases.iter().map(|c| matrix_row(c, &counters)).collect();
    let distinct = |f: &dyn Fn(&Value) -> String| {
        let mut v: Vec<String> = rows.iter().map(f).collect();
        v.sort();
        v.dedup();
        v
    };
    json!({
        "columns": columns,
        "rows": rows,
        "suites": distinct(&|r| r["suite"].as_str().unwrap_or_default().to_string()),
        "protocols": distinct(&|r| r["protocol"].as_str().unwrap_or_default().to_string()),
        "targets": distinct(&|r| r["target"].as_str().unwrap_or_default().to_string()),
    })
}

/// The matrix row of case `c`: its columns in order, then `counters`.
fn matrix_row(c: &Value, counters: &[&(&str, &str)]) -> Value {
    let clean = &c["clean"];
    let lat = &clean["load"]["latency"];
    let rss = clean["server"]["rss_max_kib"]
        .as_f64()
        .or(c["memory"]["proc"]["rss_kib"].as_f64())
        .or(c["memslope"]["opened"]
            .as_array()
            .and_then(|o| o.last())
            .and_then(|p| p["rss_bytes"].as_f64())
            .map(|b| b / 1024.0));
    let mut cells = vec![
        text(c["id"].as_str().unwrap_or_default()),
        text(c["suite"].as_str().unwrap_or_default()),
        text(c["target_name"].as_str().unwrap_or_default()),
        text(c["protocol"].as_str().unwrap_or("—")),
        text(c["path"].as_str().unwrap_or("—")),
        text(load_text(c)),
        text(topology_text(c)),
        text(match (c["kind"].as_str(), c["keepalive"].as_bool()) {
            (Some("http"), Some(true)) => "ka",
            (Some("http"), Some(false)) => "new",
            _ => "—",
        }),
        text(c["status"].as_str().unwrap_or_default()),
        cell(clean["load"]["rps"].as_f64()),
        cell(us(&lat["p50_ns"])),
        cell(us(&lat["p99_ns"])),
        cell(us(&lat["p999_ns"])),
        cell(clean["server"]["cpu_us_per_request"].as_f64()),
        cell(rss),
    ];
    for (k, _) in counters {
        cells.push(cell(c["counted"]["per_request"][*k].as_f64()));
    }
    json!({
        "id": c["id"], "slug": slug_of(c), "suite": c["suite"],
        "target": c["target_name"], "protocol": c["protocol"].as_str().unwrap_or("—"),
        "status": c["status"], "cells": cells,
    })
}

/// Each case's section; its charts go into `charts` under ids it names.
pub fn views(cases: &[Value], flames: &Flames, charts: &mut Map<String, Value>) -> Vec<Value> {
    cases
        .iter()
        .map(|c| {
            let slug = slug_of(c);
            let id = c["id"].as_str().unwrap_or_default();
            let mut plots = Vec::new();
            if let Some(h) = c["clean"]["load"]["histogram"].as_object() {
                let lat = chart::percentile_chart(
                    "latency, clean pass (from the scheduled send in open loop)",
                    &[
                        ("latency", &h["latency"]),
                        ("request latency", &h["request_latency"]),
                    ],
                );
                if let Some(v) = lat {
                    charts.insert(format!("latency-{slug}"), v);
                    plots.push(json!({"kind": "latency", "chart": format!("latency-{slug}")}));
                }
                match chart::percentile_chart(
                    "dispatch lag (actual − scheduled send)",
                    &[("dispatch lag", &h["dispatch_lag"])],
                ) {
                    Some(v) => {
                        charts.insert(format!("lag-{slug}"), v);
                        plots.push(json!({"kind": "lag", "chart": format!("lag-{slug}")}));
                    }
                    None => plots.push(json!({"kind": "lag", "none":
                        "no dispatch lag recorded (closed loop: each request is sent when the last one returns)"})),
                }
            }
            if let Some(series) = c["clean"]["series"].as_array().filter(|s| s.len() > 1) {
                let (mem, cpu) = chart::series_charts(series);
                charts.insert(format!("memory-{slug}"), mem);
                charts.insert(format!("cpu-{slug}"), cpu);
                plots.push(json!({"kind": "memory", "chart": format!("memory-{slug}")}));
                plots.push(json!({"kind": "cpu", "chart": format!("cpu-{slug}")}));
            }
            if let Some(v) = chart::memslope_chart(&c["memslope"]) {
                charts.insert(format!("memslope-{slug}"), v);
                plots.push(json!({"kind": "memslope", "chart": format!("memslope-{slug}")}));
            }
            if let Some((lat, mem)) = chart::soak_charts(&c["soak"]) {
                charts.insert(format!("soak-latency-{slug}"), lat);
                charts.insert(format!("soak-memory-{slug}"), mem);
                plots.push(json!({"kind": "soak-latency", "chart": format!("soak-latency-{slug}")}));
                plots.push(json!({"kind": "soak-memory", "chart": format!("soak-memory-{slug}")}));
            }
            if let Some(v) = chart::live_chart(&c["live"]) {
                charts.insert(format!("live-{slug}"), v);
                plots.push(json!({"kind": "live", "chart": format!("live-{slug}")}));
            }
            let counted = &c["counted"];
            json!({
                "id": id,
                "slug": slug,
                "status": c["status"],
                "reasons": c["reasons"],
                "kind": c["kind"],
                "plots": plots,
                "clean": clean_facts(&c["clean"]),
                "memory": c["memory"]["proc"],
                "counted": counted.is_object(),
                "requests": requests(counted),
                "complete": counted["attribution"]["complete"],
                "losses": counted["attribution"]["losses"],
                "sites": counted["top_sites"],
                "processes": counted["attribution"]["processes"],
                "flames": flames.of(&slug, false),
                "live_heap": live_heap_view(&c["memslope"]["live_heap"]),
            })
        })
        .collect()
}

fn clean_facts(clean: &Value) -> Value {
    if !clean.is_object() {
        return Value::Null;
    }
    let l = &clean["load"];
    json!({
        "succeeded": l["succeeded"], "errors": l["errors"], "rps": l["rps"].as_f64().map(fmt),
        "scheduled": l["scheduled"], "on_time": l["on_time"], "late": l["late"],
        "generator_late": l["generator_late"], "expired": l["expired"],
        "queue_p50_us": l["queue_delay"]["p50_ns"].as_f64().map(|ns| fmt(ns / 1e3)),
        "queue_p99_us": l["queue_delay"]["p99_ns"].as_f64().map(|ns| fmt(ns / 1e3)),
        "generator_saturated": clean["generator_saturated"],
        "client_us": clean["client_us_per_request"].as_f64().map(fmt),
        "samples": clean["series"].as_array().map_or(0, Vec::len),
    })
}

fn requests(counted: &Value) -> Option<u64> {
    counted["attribution"]["window"]["requests"]
        .as_u64()
        .or(counted["load"]["succeeded"].as_u64())
        .filter(|n| *n > 0)
}

/// A site as one line: the function (or module+offset) and file:line.
pub fn site_label(s: &Value) -> String {
    let name = match s["function"].as_str() {
        Some(f) => f.to_string(),
        None => match s["module"].as_str() {
            Some(m) => format!(
                "{}+{:#x} (unnamed)",
                m.rsplit('/').next().unwrap_or(m),
                s["module_offset"].as_u64().unwrap_or(0)
            ),
            None => format!("{:#x} (no module)", s["addr"].as_u64().unwrap_or(0)),
        },
    };
    match (s["file"].as_str(), s["line"].as_u64()) {
        (Some(f), Some(l)) => format!("{name} ({}:{l})", f.rsplit('/').next().unwrap_or(f)),
        _ => name,
    }
}

fn amount_unit(family: &str) -> Option<&'static str> {
    match family {
        "alloc" | "copy" => Some("bytes"),
        "locks" => Some("wait ns"),
        "sched" => Some("off-CPU ns"),
        "cpu" => Some("sampled ns"),
        _ => None,
    }
}

/// The top user sites of each family, per request: the first frame outside
/// the wrappers of every counted stack, summed over events and processes.
/// Allocations made inside another counted one (`inner`) are left out, as
/// they are of every total.
pub fn top_sites(counted: &Value, top: usize) -> Vec<Value> {
    let Some(n) = requests(counted) else {
        return Vec::new();
    };
    let st = &counted["attribution"]["stacks"];
    let Some(rows) = st["rows"].as_array() else {
        return Vec::new();
    };
    // family → site → (events, amount)
    let mut by: BTreeMap<String, BTreeMap<String, (f64, f64)>> = BTreeMap::new();
    for r in rows.iter().filter(|r| r["inner"] != true) {
        let fam = r["family"].as_str().unwrap_or_default();
        // Frees are events of the alloc family, but no allocations.
        let is_free = matches!(
            r["event"].as_str(),
            Some("free" | "operator delete" | "operator delete[]")
        );
        let fam = if fam == "alloc" && is_free {
            "frees"
        } else {
            fam
        }
        .to_string();
        let label = match r["stack"].as_str() {
            Some(k) => {
                let s = &st["stacks"][k];
                let i = s["user_site"].as_u64().unwrap_or(0) as usize;
                s["frames"]
                    .get(i)
                    .map_or_else(|| "(empty stack)".to_string(), site_label)
            }
            None => match r["kernel_stack"].as_str() {
                Some(k) => format!(
                    "[kernel] {}",
                    st["kernel"][k][0].as_str().unwrap_or("(unnamed)")
                ),
                None => "(no stack)".to_string(),
            },
        };
        let (count, amount) = (
            r["count"].as_f64().unwrap_or(0.0),
            r["amount"].as_f64().unwrap_or(0.0),
        );
        // A lock site's events are its acquisitions, as in the terminal
        // and the flamegraphs: an unlock or a contended wait is not one
        // more; the wait is its amount.
        let (count, amount) = if fam == "locks" {
            match r["event"].as_str() {
                Some("lock" | "trylock") => (count, 0.0),
                Some("contended (futex wait)") => (0.0, amount),
                _ => continue,
            }
        } else {
            (count, amount)
        };
        let e = by.entry(fam).or_default().entry(label).or_default();
        e.0 += count;
        e.1 += amount;
    }
    let per = n as f64;
    let mut out = Vec::new();
    let shown = FAMILIES.iter().flat_map(|f| {
        if *f == "alloc" {
            vec!["alloc", "frees"]
        } else {
            vec![*f]
        }
    });
    for fam in shown {
        let Some(sites) = by.get(fam) else { continue };
        let mut v: Vec<(&String, &(f64, f64))> = sites.iter().collect();
        let unit = amount_unit(fam);
        v.sort_by(|a, b| {
            let key = |x: &(f64, f64)| if unit.is_some() { x.1 } else { x.0 };
            key(b.1).total_cmp(&key(a.1)).then(a.0.cmp(b.0))
        });
        let total: (f64, f64) = v
            .iter()
            .fold((0.0, 0.0), |t, (_, x)| (t.0 + x.0, t.1 + x.1));
        out.push(json!({
            "family": fam,
            "unit": unit,
            "sites": v.len(),
            "total_events": fmt(total.0 / per),
            "total_amount": unit.map(|_| fmt(total.1 / per)),
            "rows": v.iter().take(top).map(|(site, (c, a))| json!({
                "site": site, "events": fmt(c / per), "amount": unit.map(|_| fmt(a / per)),
            })).collect::<Vec<_>>(),
        }));
    }
    out
}

/// A memslope case's live heap: bytes per connection in all and its sites
/// (those holding bytes per connection or after close); `null` without one.
fn live_heap_view(h: &Value) -> Value {
    if !h.is_object() {
        return Value::Null;
    }
    let fit = match (h["fit"]["slope"].as_f64(), h["fit"]["r2"].as_f64()) {
        (Some(s), Some(r2)) => format!("{s:.0} B per connection (R² {r2:.3})"),
        _ => "no line (fewer than two tiers)".to_string(),
    };
    let rows = |key: &str| -> Vec<Value> {
        h[key]
            .as_array()
            .map(|s| s.as_slice())
            .unwrap_or_default()
            .iter()
            .filter(|s| {
                s["bytes_per_connection"].as_f64().unwrap_or(0.0).abs() >= 0.5
                    || s["bytes_after_close"].as_u64().unwrap_or(0) > 0
            })
            .map(|s| {
                json!({
                    "site": s["label"],
                    "kind": s["kind"],
                    "per_conn": format!("{:.0}", s["bytes_per_connection"].as_f64().unwrap_or(0.0)),
                    "blocks_per_conn": format!("{:.2}", s["blocks_per_connection"].as_f64().unwrap_or(0.0)),
                    "after_close": s["bytes_after_close"],
                })
            })
            .collect()
    };
    json!({
        "fit": fit,
        "after_close_bytes": h["after_close"]["bytes"],
        "after_close_blocks": h["after_close"]["blocks"],
        "unmatched_frees": h["unmatched_frees"],
        "complete": h["complete"],
        "dropped": h["dropped"],
        "rows": rows("sites"),
        "user_rows": rows("user_sites"),
    })
}
