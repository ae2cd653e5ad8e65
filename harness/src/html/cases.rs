//! The matrix table and each case's section, from `cases.jsonl` lines.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{json, Map, Value};

use super::chart;
use super::flames::Flames;
use crate::metrics::names::{Total, PER_REQUEST};

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

/// A stretch of the case list as the page shows it: one case, or a run of
/// consecutive cases skipped for the same reasons. An interrupted run skips
/// every case not yet started (thousands, for a large matrix): one row and
/// one section say so, the cases' ids listed in a collapsed `<details>`.
pub enum Part<'a> {
    One(&'a Value),
    Skipped(&'a [Value]),
}

/// Shorter runs keep a row each: a summary would save nothing there.
const SKIPPED_RUN: usize = 3;

fn is_skipped(c: &Value) -> bool {
    c["status"] == "skipped"
}

/// The cases in order, runs of at least [`SKIPPED_RUN`] skipped cases with
/// the same reasons each as one part. One pass over the cases.
pub fn parts(cases: &[Value]) -> Vec<Part<'_>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cases.len() {
        let c = &cases[i];
        let mut end = i + 1;
        if is_skipped(c) {
            while end < cases.len()
                && is_skipped(&cases[end])
                && cases[end]["reasons"] == c["reasons"]
            {
                end += 1;
            }
        }
        if end - i >= SKIPPED_RUN {
            out.push(Part::Skipped(&cases[i..end]));
        } else {
            out.extend(cases[i..end].iter().map(Part::One));
        }
        i = end;
    }
    out
}

/// The reasons of a run of skipped cases, as one line.
fn reasons_text(c: &Value) -> String {
    c["reasons"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect::<Vec<_>>()
        .join("; ")
}

/// The anchor of a run of skipped cases: its first case's, which no other
/// part has.
fn run_anchor(run: &[Value]) -> String {
    format!("skipped-{}", slug_of(&run[0]))
}

#[derive(Serialize)]
pub struct Matrix<'a> {
    columns: Vec<Column>,
    rows: Vec<Entry<'a>>,
    suites: Vec<&'a str>,
    protocols: Vec<&'a str>,
    targets: Vec<&'a str>,
}

#[derive(Serialize)]
struct Column {
    label: &'static str,
    numeric: bool,
    counter: bool,
}

/// A cell: its text, and the number it sorts by.
#[derive(Serialize)]
struct Cell<'a> {
    v: Cow<'a, str>,
    s: Option<f64>,
}

impl<'a> Cell<'a> {
    fn num(v: Option<f64>) -> Cell<'a> {
        match v {
            Some(x) if x.is_finite() => Cell {
                v: fmt(x).into(),
                s: Some(x),
            },
            _ => Cell::text("—"),
        }
    }

    fn text(v: impl Into<Cow<'a, str>>) -> Cell<'a> {
        Cell {
            v: v.into(),
            s: None,
        }
    }
}

/// The filters' coordinates of a case.
#[derive(Serialize)]
struct Coordinates<'a> {
    id: &'a str,
    suite: &'a str,
    target: &'a str,
    protocol: &'a str,
}

impl<'a> Coordinates<'a> {
    fn of(c: &'a Value) -> Coordinates<'a> {
        Coordinates {
            id: c["id"].as_str().unwrap_or_default(),
            suite: c["suite"].as_str().unwrap_or_default(),
            target: c["target_name"].as_str().unwrap_or_default(),
            protocol: c["protocol"].as_str().unwrap_or("—"),
        }
    }
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
enum Entry<'a> {
    Case {
        #[serde(flatten)]
        at: Coordinates<'a>,
        slug: String,
        status: &'a str,
        cells: Vec<Cell<'a>>,
    },
    Skipped {
        anchor: String,
        reasons: String,
        cases: Vec<Coordinates<'a>>,
    },
}

/// The matrix: columns, and a row per part.
pub fn matrix<'a>(cases: &'a [Value], parts: &[Part<'a>]) -> Matrix<'a> {
    // The counters any case has, in one pass over the cases: most cases
    // of an interrupted run have no counted pass at all.
    let mut has = vec![false; PER_REQUEST.len()];
    for c in cases {
        if let Some(per) = c["counted"]["per_request"].as_object() {
            for (i, t) in PER_REQUEST.iter().enumerate() {
                has[i] |= per.get(t.field).is_some_and(Value::is_number);
            }
        }
    }
    let counters: Vec<&Total> = PER_REQUEST
        .iter()
        .zip(&has)
        .filter_map(|(f, has)| has.then_some(f))
        .collect();
    let column = |label, numeric, counter| Column {
        label,
        numeric,
        counter,
    };
    let mut columns: Vec<Column> = [
        "case", "suite", "target", "protocol", "path", "load", "conns", "ka", "status",
    ]
    .into_iter()
    .map(|l| column(l, false, false))
    .collect();
    for l in [
        "rps",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "CPU µs/req",
        "RSS max KiB",
    ] {
        columns.push(column(l, true, false));
    }
    for Total { label: l, .. } in &counters {
        columns.push(column(l, true, true));
    }
    let rows = parts
        .iter()
        .map(|p| match p {
            Part::One(c) => matrix_row(c, &counters),
            Part::Skipped(run) => Entry::Skipped {
                anchor: run_anchor(run),
                reasons: reasons_text(&run[0]),
                cases: run.iter().map(Coordinates::of).collect(),
            },
        })
        .collect();
    let at: Vec<Coordinates> = cases.iter().map(Coordinates::of).collect();
    let distinct = |f: fn(&Coordinates<'a>) -> &'a str| {
        let mut v: Vec<&str> = at.iter().map(f).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    Matrix {
        columns,
        rows,
        suites: distinct(|c| c.suite),
        protocols: distinct(|c| c.protocol),
        targets: distinct(|c| c.target),
    }
}

/// The matrix row of case `c`: its columns in order, then `counters`.
fn matrix_row<'a>(c: &'a Value, counters: &[&Total]) -> Entry<'a> {
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
    let at = Coordinates::of(c);
    let status = c["status"].as_str().unwrap_or_default();
    let mut cells = vec![
        Cell::text(at.id),
        Cell::text(at.suite),
        Cell::text(at.target),
        Cell::text(at.protocol),
        Cell::text(c["path"].as_str().unwrap_or("—")),
        Cell::text(load_text(c)),
        Cell::text(topology_text(c)),
        Cell::text(match (c["kind"].as_str(), c["keepalive"].as_bool()) {
            (Some("http"), Some(true)) => "ka",
            (Some("http"), Some(false)) => "new",
            _ => "—",
        }),
        Cell::text(status),
        Cell::num(clean["load"]["rps"].as_f64()),
        Cell::num(us(&lat["p50_ns"])),
        Cell::num(us(&lat["p99_ns"])),
        Cell::num(us(&lat["p999_ns"])),
        Cell::num(clean["server"]["cpu_us_per_request"].as_f64()),
        Cell::num(rss),
    ];
    for Total { field: k, .. } in counters {
        cells.push(Cell::num(c["counted"]["per_request"][*k].as_f64()));
    }
    Entry::Case {
        at,
        slug: slug_of(c),
        status,
        cells,
    }
}

/// A section of the page's case list: one case's, or a run of skipped
/// cases' (their ids are in the matrix's row of the run).
#[derive(Serialize)]
#[serde(untagged)]
pub enum View<'a> {
    Case(Value),
    Skipped {
        skipped: usize,
        anchor: String,
        reasons: String,
        first: &'a str,
        last: &'a str,
    },
}

/// Each part's section; the charts of its case go into `charts` under ids
/// it names.
pub fn views<'a>(
    parts: &[Part<'a>],
    flames: &Flames,
    charts: &mut Map<String, Value>,
) -> Vec<View<'a>> {
    parts
        .iter()
        .map(|p| match p {
            Part::One(c) => View::Case(view(c, flames, charts)),
            Part::Skipped(run) => View::Skipped {
                skipped: run.len(),
                anchor: run_anchor(run),
                reasons: reasons_text(&run[0]),
                first: run[0]["id"].as_str().unwrap_or_default(),
                last: run[run.len() - 1]["id"].as_str().unwrap_or_default(),
            },
        })
        .collect()
}

fn view(c: &Value, flames: &Flames, charts: &mut Map<String, Value>) -> Value {
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
        "generator_limited": clean["generator_limited"],
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
    let shown = crate::metrics::names::family_names().flat_map(|f| {
        if f == "alloc" {
            vec!["alloc", "frees"]
        } else {
            vec![f]
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
