//! Chart data for `page.js`: a chart is `{title, xlabel, ylabel, x, ylog,
//! series: [{name, points: [[x, y], …], band?: [[x, lo, hi], …]}]}`, where
//! `x` is `pct` (the x values are −log10(1 − quantile), drawn as 50%, 90%,
//! 99%, 99.9% …) or `lin`.

use serde_json::{json, Value};

use crate::load::hist;
use crate::results::case::{
    ConnPoint, LineFit, Live, MemSlope, PhaseSample, Sample, Soak, SoakInterval,
};

/// Quantile steps per decade of the percentile axis.
const STEPS_PER_DECADE: f64 = 20.0;

/// The percentile curve of one serialized HDR histogram, in µs: points at
/// −log10(1 − q) from q = 0 up to the last quantile the count resolves,
/// then the maximum. `None` when the histogram is missing or empty.
pub fn percentile_points(encoded: Option<&str>) -> Option<Vec<[f64; 2]>> {
    let h = hist::decode(encoded?).ok()?;
    if h.is_empty() {
        return None;
    }
    let n = h.len() as f64;
    // The largest resolvable step: one sample beyond it is the maximum.
    let top = n.log10().min(6.0);
    let mut pts = Vec::new();
    let mut k = 0.0;
    while k / STEPS_PER_DECADE < top {
        let x = k / STEPS_PER_DECADE;
        let q = 1.0 - 10f64.powf(-x);
        pts.push([x, h.value_at_quantile(q) as f64 / 1e3]);
        k += 1.0;
    }
    pts.push([top, h.max() as f64 / 1e3]);
    Some(pts)
}

/// A percentile chart of the named histograms that have data.
pub fn percentile_chart(title: &str, hists: &[(&str, Option<&str>)]) -> Option<Value> {
    let series: Vec<Value> = hists
        .iter()
        .filter_map(|(name, h)| percentile_points(*h).map(|p| json!({"name": name, "points": p})))
        .collect();
    (!series.is_empty()).then(|| {
        json!({
            "title": title, "xlabel": "percentile", "ylabel": "µs (log)",
            "x": "pct", "ylog": true, "series": series,
        })
    })
}

/// Memory (RSS, PSS, cgroup) and CPU (cores busy between two samples)
/// over time, from the clean pass's 50 ms samples.
pub fn series_charts(points: &[Sample]) -> (Value, Value) {
    let t = |p: &Sample| p.t_ms.unwrap_or(0.0) / 1e3;
    let mib = |k: fn(&Sample) -> Option<f64>, scale: f64| -> Vec<[f64; 2]> {
        points
            .iter()
            .filter_map(|p| k(p).map(|v| [t(p), v / scale]))
            .collect()
    };
    let mut mem = vec![
        json!({"name": "RSS", "points": mib(|p| p.rss_kib, 1024.0)}),
        json!({"name": "PSS", "points": mib(|p| p.pss_kib, 1024.0)}),
    ];
    let cg = mib(|p| p.cg_mem_bytes, 1024.0 * 1024.0);
    if !cg.is_empty() {
        mem.push(json!({"name": "cgroup memory", "points": cg}));
    }
    let cpu: Vec<[f64; 2]> = points
        .windows(2)
        .filter_map(|w| {
            let dt = t(&w[1]) - t(&w[0]);
            let dc = w[1].cpu_ns? - w[0].cpu_ns?;
            (dt > 0.0).then(|| [t(&w[1]), dc / 1e9 / dt])
        })
        .collect();
    (
        json!({"title": "memory (server tree)", "xlabel": "s since launch sampling began",
               "ylabel": "MiB", "x": "lin", "ylog": false, "series": mem}),
        json!({"title": "CPU (server tree)", "xlabel": "s since launch sampling began",
               "ylabel": "cores busy", "x": "lin", "ylog": false,
               "series": [{"name": "CPU", "points": cpu}]}),
    )
}

/// A fitted line's slope, intercept and R², when it has all three.
fn line(fit: Option<&LineFit>) -> Option<(f64, f64, f64)> {
    let f = fit?;
    Some((f.slope?, f.intercept?, f.r2?))
}

/// A memslope case's memory against open connections (MiB): RSS, PSS and
/// cgroup memory at each tier, RSS again while closing, and the RSS line
/// fitted by least squares; the title gives bytes per connection and R².
/// `None` without points.
pub fn memslope_chart(m: &MemSlope) -> Option<Value> {
    let mib = |v: f64| v / (1024.0 * 1024.0);
    let pts = |at: &[ConnPoint], y: fn(&ConnPoint) -> Option<f64>| -> Vec<[f64; 2]> {
        at.iter()
            .filter_map(|p| Some([p.connections?, mib(y(p)?)]))
            .collect()
    };
    let opened = &m.opened;
    let rss = pts(opened, |p| p.rss_bytes);
    if rss.is_empty() {
        return None;
    }
    let mut series = vec![
        json!({"name": "RSS", "points": rss}),
        json!({"name": "PSS", "points": pts(opened, |p| p.pss_bytes)}),
    ];
    let cg = pts(opened, |p| p.cgroup_bytes);
    if !cg.is_empty() {
        series.push(json!({"name": "cgroup memory", "points": cg}));
    }
    series.push(json!({"name": "RSS while closing", "points": pts(&m.closed, |p| p.rss_bytes)}));
    let mut title = "memory by open connections".to_string();
    if let Some((a, b, r2)) = line(m.rss.as_ref()) {
        let (lo, hi) = opened
            .iter()
            .filter_map(|p| p.connections)
            .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(x), h.max(x)));
        series.push(
            json!({"name": "RSS fit", "points": [[lo, mib(a * lo + b)], [hi, mib(a * hi + b)]]}),
        );
        title = format!("RSS {:.1} KiB per connection (R² {r2:.3})", a / 1024.0);
    }
    Some(
        json!({"title": title, "xlabel": "open connections", "ylabel": "MiB",
                "x": "lin", "ylog": false, "series": series}),
    )
}

/// A soak case's intervals: latency percentiles per interval (ms, log
/// scale) against the interval's end, and RSS against requests served with
/// its least-squares line (the title gives bytes per request and R²).
/// `None` without intervals.
pub fn soak_charts(s: &Soak) -> Option<(Value, Value)> {
    let intervals = Some(&s.intervals).filter(|i| !i.is_empty())?;
    type Field = fn(&SoakInterval) -> Option<f64>;
    let pts = |x: Field, xs: f64, y: Field, ys: f64| -> Vec<[f64; 2]> {
        intervals
            .iter()
            .filter_map(|i| Some([x(i)? / xs, y(i)? / ys]))
            .collect()
    };
    let end: Field = |i| i.end_ms;
    let latency = json!({
    "title": "latency per interval (from the scheduled time)",
    "xlabel": "minutes", "ylabel": "ms", "x": "lin", "ylog": true,
    "series": [
        {"name": "p50", "points": pts(end, 60_000.0, |i| i.p50_ns, 1e6)},
        {"name": "p99", "points": pts(end, 60_000.0, |i| i.p99_ns, 1e6)},
        {"name": "p99.9", "points": pts(end, 60_000.0, |i| i.p999_ns, 1e6)},
    ]});
    let mib = 1024.0 * 1024.0;
    let rss = pts(|i| i.served, 1.0, |i| i.rss_bytes, mib);
    let mut series = vec![json!({"name": "RSS", "points": rss})];
    let mut title = "RSS by requests served".to_string();
    if let Some((a, b, r2)) = line(s.rss_per_request.as_ref()) {
        let (lo, hi) = rss
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), p| (l.min(p[0]), h.max(p[0])));
        series.push(json!({"name": "RSS fit",
            "points": [[lo, (a * lo + b) / mib], [hi, (a * hi + b) / mib]]}));
        title = format!("RSS {a:+.1} B per request served (R² {r2:.3})");
    }
    let memory = json!({"title": title, "xlabel": "requests served", "ylabel": "MiB",
        "x": "lin", "ylog": false, "series": series});
    Some((latency, memory))
}

/// A live case's server, phase by phase over its cycles: the largest RSS,
/// PSS (MiB) and descriptor count of each phase's samples, at x = cycle +
/// phase / 4 (connecting, connected, closing, disconnected), and READY's
/// descriptors for reference. `None` without cycles.
pub fn live_chart(p: &Live) -> Option<Value> {
    let cycles = Some(&p.cycles).filter(|c| !c.is_empty())?;
    let pts = |y: fn(&PhaseSample) -> Option<f64>, scale: f64| -> Vec<[f64; 2]> {
        cycles
            .iter()
            .flat_map(|c| {
                let n = c.cycle.unwrap_or(0.0);
                c.phases
                    .iter()
                    .enumerate()
                    .filter_map(move |(i, ph)| Some([n + i as f64 / 4.0, y(ph)? / scale]))
            })
            .collect()
    };
    let mib = 1024.0 * 1024.0;
    let last = cycles.len() as f64 + 0.75;
    let ready = p.ready_fds.unwrap_or(0.0);
    Some(json!({
        "title": format!("server by phase ({})", p.endpoint.unwrap_or("live")),
        "xlabel": "cycle + phase/4 (connecting, connected, closing, disconnected)",
        "ylabel": "MiB; descriptors",
        "x": "lin", "ylog": false,
        "series": [
            {"name": "RSS MiB", "points": pts(|ph| ph.rss_max_bytes, mib)},
            {"name": "PSS MiB", "points": pts(|ph| ph.pss_max_bytes, mib)},
            {"name": "FDs", "points": pts(|ph| ph.fds_max, 1.0)},
            {"name": "READY's FDs", "points": [[1.0, ready], [last, ready]]},
        ],
    }))
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[test]
    fn the_percentile_curve_follows_the_histogram_to_its_maximum() {
        let mut h = hist::new_hist();
        // 1000 samples: 1..=1000 µs.
        for v in 1..=1000u64 {
            h.record(v * 1000).unwrap();
        }
        let p = percentile_points(Some(&hist::encode(&h))).unwrap();
        // q = 0 is the minimum, x = 1 (90%) is 900 µs, x = 2 (99%) 990 µs,
        // the last point (x = log10 1000 = 3) is the maximum.
        assert_eq!(p[0], [0.0, 1.0]);
        let at = |x: f64| p.iter().find(|q| (q[0] - x).abs() < 1e-9).unwrap()[1];
        assert!((at(1.0) - 900.0).abs() <= 1.0, "{}", at(1.0));
        assert!((at(2.0) - 990.0).abs() <= 1.0, "{}", at(2.0));
        assert_eq!(p.last().unwrap()[0], 3.0);
        assert!((p.last().unwrap()[1] - 1000.0).abs() <= 1.0);
        assert_eq!(p.len(), 61);
        assert!(percentile_points(Some(&hist::encode(&hist::new_hist()))).is_none());
    }

    #[test]
    fn cpu_over_time_is_cores_busy_between_samples() {
        let pts = [
            json!({"t_ms": 0, "cpu_ns": 0, "rss_kib": 1024, "pss_kib": 512}),
            json!({"t_ms": 50, "cpu_ns": 25_000_000, "rss_kib": 2048, "pss_kib": 1024}),
        ];
        let pts: Vec<Sample> = pts
            .iter()
            .map(|p| Sample::deserialize(p).unwrap())
            .collect();
        let (mem, cpu) = series_charts(&pts);
        assert_eq!(cpu["series"][0]["points"], json!([[0.05, 0.5]]));
        assert_eq!(mem["series"][0]["points"], json!([[0.0, 1.0], [0.05, 2.0]]));
    }
}
