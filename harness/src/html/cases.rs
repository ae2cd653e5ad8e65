//! The matrix table and each case's section, from `cases.jsonl` lines.

use std::borrow::Cow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::chart;
use super::flames::Flames;
use super::lite::{Parsed, Site, Stacks};
use crate::metrics::names::{Total, PER_REQUEST};
use crate::metrics::PerRequest;
use crate::results::case::{CaseLine, Clean, Counted, LiveHeap, LiveSite};

pub fn slug_of(c: &CaseLine) -> String {
    crate::scenario::slug(c.id.unwrap_or_default())
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

pub fn load_text(c: &CaseLine) -> String {
    let load = c.load.as_ref();
    match load.and_then(|l| l.kind) {
        Some("open") => format!("open {}/s", fmt(load.and_then(|l| l.rate).unwrap_or(0.0))),
        Some(k) => k.to_string(),
        None => "—".into(),
    }
}

pub fn topology_text(c: &CaseLine) -> String {
    match c.topology.as_ref().map(|t| (t.connections, t.streams)) {
        Some((Some(n), Some(s))) => format!("{n}x{s}"),
        _ => "—".into(),
    }
}

fn us(ns: Option<f64>) -> Option<f64> {
    ns.map(|x| x / 1e3)
}

/// A case as the page needs it. A counted pass's attribution holds every
/// stack of the window (tens of MB per case for a real server): its top
/// sites are taken here, one case at a time, and the rest of it dropped, so
/// the page of a long run is built in bounded memory.
pub fn slim(line: Parsed) -> Value {
    let mut c = line.json;
    let Some(counted) = c.get_mut("counted").filter(|k| k.is_object()) else {
        return c;
    };
    let requests = Counted::deserialize(&*counted)
        .ok()
        .and_then(|k| k.requests());
    let sites = match (requests, line.stacks) {
        (Some(n), Some(st)) => top_sites(n, &st, 10),
        _ => Vec::new(),
    };
    if let Some(k) = counted.as_object_mut() {
        k.insert("top_sites".into(), Value::Array(sites));
    }
    c
}

/// A stretch of the case list as the page shows it: one case, or a run of
/// consecutive cases skipped for the same reasons. An interrupted run skips
/// every case not yet started (thousands, for a large matrix): one row and
/// one section say so, the cases' ids listed in a collapsed `<details>`.
pub enum Part<'c, 'a> {
    One(&'c CaseLine<'a>),
    Skipped(&'c [CaseLine<'a>]),
}

/// Shorter runs keep a row each: a summary would save nothing there.
const SKIPPED_RUN: usize = 3;

fn is_skipped(c: &CaseLine) -> bool {
    c.status == Some("skipped")
}

/// The cases in order, runs of at least [`SKIPPED_RUN`] skipped cases with
/// the same reasons each as one part. One pass over the cases.
pub fn parts<'c, 'a>(cases: &'c [CaseLine<'a>]) -> Vec<Part<'c, 'a>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < cases.len() {
        let c = &cases[i];
        let mut end = i + 1;
        if is_skipped(c) {
            while end < cases.len() && is_skipped(&cases[end]) && cases[end].reasons == c.reasons {
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
fn reasons_text(c: &CaseLine) -> String {
    c.reasons.as_deref().unwrap_or_default().join("; ")
}

/// The anchor of a run of skipped cases: its first case's, which no other
/// part has.
fn run_anchor(run: &[CaseLine]) -> String {
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
    fn of(c: &CaseLine<'a>) -> Coordinates<'a> {
        Coordinates {
            id: c.id.unwrap_or_default(),
            suite: c.suite.unwrap_or_default(),
            target: c.target_name.unwrap_or_default(),
            protocol: c.protocol.unwrap_or("—"),
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
pub fn matrix<'a>(cases: &[CaseLine<'a>], parts: &[Part<'_, 'a>]) -> Matrix<'a> {
    // The counters any case has, in one pass over the cases: most cases
    // of an interrupted run have no counted pass at all.
    let mut has = [false; PER_REQUEST.len()];
    for counted in cases.iter().filter_map(|c| c.counted.as_ref()) {
        for (has, (_, v)) in has.iter_mut().zip(counted.per_request.values()) {
            *has |= v.is_some();
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
fn matrix_row<'a>(c: &CaseLine<'a>, counters: &[&Total]) -> Entry<'a> {
    let clean = c.clean.as_ref();
    let lat = clean.map(|cl| &cl.load.latency);
    let rss = clean
        .and_then(|cl| cl.server.rss_max_kib)
        .or_else(|| c.memory.as_ref()?.rss_kib())
        .or_else(|| Some(c.memslope.as_ref()?.opened.last()?.rss_bytes? / 1024.0));
    let at = Coordinates::of(c);
    let status = c.status.unwrap_or_default();
    let mut cells = vec![
        Cell::text(at.id),
        Cell::text(at.suite),
        Cell::text(at.target),
        Cell::text(at.protocol),
        Cell::text(c.path.unwrap_or("—")),
        Cell::text(load_text(c)),
        Cell::text(topology_text(c)),
        Cell::text(match (c.kind, c.keepalive) {
            (Some("http"), Some(true)) => "ka",
            (Some("http"), Some(false)) => "new",
            _ => "—",
        }),
        Cell::text(status),
        Cell::num(clean.and_then(|cl| cl.load.rps)),
        Cell::num(us(lat.and_then(|l| l.p50_ns))),
        Cell::num(us(lat.and_then(|l| l.p99_ns))),
        Cell::num(us(lat.and_then(|l| l.p999_ns))),
        Cell::num(clean.and_then(|cl| cl.server.cpu_us_per_request)),
        Cell::num(rss),
    ];
    let none = PerRequest::default();
    let per = c
        .counted
        .as_ref()
        .map_or(&none, |k| &k.per_request)
        .values();
    for t in counters {
        let v = per.iter().find(|(vt, _)| vt.field == t.field);
        cells.push(Cell::num(v.and_then(|(_, v)| *v)));
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
    parts: &[Part<'_, 'a>],
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
                first: run[0].id.unwrap_or_default(),
                last: run[run.len() - 1].id.unwrap_or_default(),
            },
        })
        .collect()
}

fn view(c: &CaseLine, flames: &Flames, charts: &mut Map<String, Value>) -> Value {
    let slug = slug_of(c);
    let mut plots = Vec::new();
    let histogram = c.clean.as_ref().and_then(|k| k.load.histogram.as_ref());
    if let Some(h) = histogram {
        let lat = chart::percentile_chart(
            "latency, clean pass (from the scheduled send in open loop)",
            &[
                ("latency", h.latency),
                ("request latency", h.request_latency),
            ],
        );
        if let Some(v) = lat {
            charts.insert(format!("latency-{slug}"), v);
            plots.push(json!({"kind": "latency", "chart": format!("latency-{slug}")}));
        }
        match chart::percentile_chart(
            "dispatch lag (actual − scheduled send)",
            &[("dispatch lag", h.dispatch_lag)],
        ) {
            Some(v) => {
                charts.insert(format!("lag-{slug}"), v);
                plots.push(json!({"kind": "lag", "chart": format!("lag-{slug}")}));
            }
            None => plots.push(json!({"kind": "lag", "none":
                "no dispatch lag recorded (closed loop: each request is sent when the last one returns)"})),
        }
    }
    let series = c.clean.as_ref().and_then(|k| k.series.as_deref());
    if let Some(series) = series.filter(|s| s.len() > 1) {
        let (mem, cpu) = chart::series_charts(series);
        charts.insert(format!("memory-{slug}"), mem);
        charts.insert(format!("cpu-{slug}"), cpu);
        plots.push(json!({"kind": "memory", "chart": format!("memory-{slug}")}));
        plots.push(json!({"kind": "cpu", "chart": format!("cpu-{slug}")}));
    }
    if let Some(v) = c.memslope.as_ref().and_then(chart::memslope_chart) {
        charts.insert(format!("memslope-{slug}"), v);
        plots.push(json!({"kind": "memslope", "chart": format!("memslope-{slug}")}));
    }
    if let Some((lat, mem)) = c.soak.as_ref().and_then(chart::soak_charts) {
        charts.insert(format!("soak-latency-{slug}"), lat);
        charts.insert(format!("soak-memory-{slug}"), mem);
        plots.push(json!({"kind": "soak-latency", "chart": format!("soak-latency-{slug}")}));
        plots.push(json!({"kind": "soak-memory", "chart": format!("soak-memory-{slug}")}));
    }
    if let Some(v) = c.live.as_ref().and_then(chart::live_chart) {
        charts.insert(format!("live-{slug}"), v);
        plots.push(json!({"kind": "live", "chart": format!("live-{slug}")}));
    }
    let counted = c.counted.as_ref();
    let attribution = counted.map(|k| &k.attribution);
    json!({
        "id": c.id.unwrap_or_default(),
        "slug": slug,
        "status": c.status,
        "reasons": c.reasons,
        "kind": c.kind,
        "plots": plots,
        "clean": c.clean.as_ref().map(clean_facts),
        "memory": c.memory.as_ref().map(|m| &m.proc),
        "counted": counted.is_some(),
        "requests": counted.and_then(Counted::requests),
        "complete": attribution.map(|a| &a.complete),
        "losses": attribution.map(|a| &a.losses),
        "sites": counted.map(|k| &k.top_sites),
        "user_probes": counted.map(user_probes),
        "processes": attribution.map(|a| &a.processes),
        "flames": flames.of(&slug, false),
        "live_heap": c.memslope.as_ref().and_then(|m| m.live_heap.as_ref()).map(live_heap_view),
    })
}

fn clean_facts(clean: &Clean) -> Value {
    let l = &clean.load;
    json!({
        "succeeded": l.succeeded, "errors": l.errors, "rps": l.rps.map(fmt),
        "scheduled": l.scheduled, "on_time": l.on_time, "late": l.late,
        "generator_late": l.generator_late, "expired": l.expired,
        "queue_p50_us": us(l.queue_delay.p50_ns).map(fmt),
        "queue_p99_us": us(l.queue_delay.p99_ns).map(fmt),
        "generator_limited": clean.generator_limited,
        "client_us": clean.client_us_per_request.map(fmt),
        "samples": clean.series.as_ref().map_or(0, Vec::len),
    })
}

/// The probes a user named (`--usdt`, `--func`), each with its calls per
/// request (and its argument summed) by call site: one table per probe,
/// as the terminal prints them.
/// A user probe's call site as the report's tables label a site.
fn user_site_label(s: &crate::results::case::UserSiteRow<'_>) -> String {
    site_label(&Site {
        addr: None,
        module: s.site.module.map(str::to_string),
        module_offset: s.site.module_offset,
        function: s.site.function.map(str::to_string),
        file: s.site.file.map(str::to_string),
        line: s.site.line,
    })
}

fn user_probes(k: &Counted<'_>) -> Vec<Value> {
    let Some(n) = k.requests().filter(|n| *n > 0) else {
        return Vec::new();
    };
    let per = |v: f64| fmt(v / n as f64);
    k.attribution
        .user
        .iter()
        .map(|p| {
            let mut sites: Vec<_> = p.sites.iter().collect();
            sites.sort_by_key(|s| std::cmp::Reverse(s.calls.unwrap_or(0)));
            let rows: Vec<Value> = sites
                .iter()
                .take(10)
                .map(|s| {
                    json!({
                        "site": user_site_label(s),
                        "calls": per(s.calls.unwrap_or(0) as f64),
                        "arg_sum": s.arg_sum.map(|v| per(v as f64)),
                    })
                })
                .collect();
            // `#S`: its calls by the string argument S, most first.
            let by_rows: Vec<Value> = p
                .by_value
                .iter()
                .take(10)
                .map(|v| {
                    // Where most of them were made.
                    let at = v.sites.first().map(user_site_label);
                    json!({
                        "value": v.value,
                        "calls": per(v.calls.unwrap_or(0) as f64),
                        "arg_sum": v.arg_sum.map(|s| per(s as f64)),
                        "at": at,
                    })
                })
                .collect();
            json!({
                "probe": p.probe.unwrap_or("?"),
                "calls": per(p.calls.unwrap_or(0) as f64),
                "arg": p.arg,
                "arg_sum": p.arg_sum.map(|v| per(v as f64)),
                "rows": rows,
                "by_arg": p.by.as_ref().map(|b| b.arg),
                "by_values": p.by_value.len(),
                "by_rows": by_rows,
            })
        })
        .collect()
}

/// A site as one line: the function (or module+offset) and file:line.
fn site_label(s: &Site) -> String {
    let name = match &s.function {
        Some(f) => f.to_string(),
        None => match &s.module {
            Some(m) => format!(
                "{}+{:#x} (unnamed)",
                m.rsplit('/').next().unwrap_or(m),
                s.module_offset.unwrap_or(0)
            ),
            None => format!("{:#x} (no module)", s.addr.unwrap_or(0)),
        },
    };
    match (&s.file, s.line) {
        (Some(f), Some(l)) => format!("{name} ({}:{l})", f.rsplit('/').next().unwrap_or(f)),
        _ => name,
    }
}

fn amount_unit(family: &str) -> Option<&'static str> {
    match family {
        "alloc" | "copy" | "application allocator" => Some("bytes"),
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
pub fn top_sites(n: u64, st: &Stacks, top: usize) -> Vec<Value> {
    // family → site → (events, amount)
    let mut by: BTreeMap<String, BTreeMap<String, (f64, f64)>> = BTreeMap::new();
    for r in st.rows.iter().filter(|r| !r.inner) {
        let fam = r.family.as_str();
        // Frees are events of the alloc family, but no allocations.
        let is_free = r.free
            || matches!(
                r.event.as_str(),
                "free" | "operator delete" | "operator delete[]"
            );
        // An application allocator (pools) is a layer beside the heap's:
        // its calls apart from the heap's, as in the terminal.
        let fam = match (fam, r.beside_the_heap, is_free) {
            ("alloc", true, true) => "application frees",
            ("alloc", true, false) => "application allocator",
            ("alloc", false, true) => "frees",
            (fam, ..) => fam,
        }
        .to_string();
        let label = match (&r.stack, &r.kernel_stack) {
            (Some(k), _) => st
                .stacks
                .get(k)
                .and_then(|s| s.frames.get(s.user_site))
                .map_or_else(|| "(empty stack)".to_string(), site_label),
            (None, Some(k)) => format!(
                "[kernel] {}",
                st.kernel
                    .get(k)
                    .and_then(|f| f.first())
                    .map_or("(unnamed)", String::as_str)
            ),
            (None, None) => "(no stack)".to_string(),
        };
        let (count, amount) = (r.count, r.amount);
        // A lock site's events are its acquisitions, as in the terminal
        // and the flamegraphs: an unlock or a contended wait is not one
        // more; the wait is its amount.
        let (count, amount) = if fam == "locks" {
            match r.event.as_str() {
                e if crate::metrics::is_lock_acquisition(e) => (count, 0.0),
                e if crate::metrics::is_lock_wait(e) => (0.0, amount),
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
    // The user family is shown per probe (`user_probes`), not mixed by site.
    let shown = crate::metrics::names::family_names()
        .filter(|f| *f != "user")
        .flat_map(|f| {
            if f == "alloc" {
                vec![
                    "alloc",
                    "frees",
                    "application allocator",
                    "application frees",
                ]
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
fn live_heap_view(h: &LiveHeap) -> Value {
    let fit = match h.fit.as_ref().map(|f| (f.slope, f.r2)) {
        Some((Some(s), Some(r2))) => format!("{s:.0} B per connection (R² {r2:.3})"),
        _ => "no line (fewer than two tiers)".to_string(),
    };
    let rows = |sites: &[LiveSite]| -> Vec<Value> {
        sites
            .iter()
            .filter(|s| {
                s.bytes_per_connection.unwrap_or(0.0).abs() >= 0.5
                    || s.bytes_after_close.unwrap_or(0) > 0
            })
            .map(|s| {
                json!({
                    "site": s.label,
                    "kind": s.kind,
                    "per_conn": format!("{:.0}", s.bytes_per_connection.unwrap_or(0.0)),
                    "blocks_per_conn": format!("{:.2}", s.blocks_per_connection.unwrap_or(0.0)),
                    "after_close": s.bytes_after_close,
                })
            })
            .collect()
    };
    let after_close = h.after_close.as_ref();
    json!({
        "fit": fit,
        "after_close_bytes": after_close.map(|p| &p.bytes),
        "after_close_blocks": after_close.map(|p| &p.blocks),
        "unmatched_frees": h.unmatched_frees,
        "complete": h.complete,
        "dropped": h.dropped,
        "rows": rows(&h.sites),
        "user_rows": rows(&h.user_sites),
    })
}
