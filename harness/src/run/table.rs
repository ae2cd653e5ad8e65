//! The terminal table of a run: one row per case, per-request counters from
//! the counted pass next to throughput, latency, CPU and memory from the
//! clean pass.

use comfy_table::{presets::UTF8_FULL_CONDENSED, CellAlignment, Table};

use crate::case::{CaseResult, Status};
use crate::metrics;

fn f(v: Option<f64>, decimals: usize) -> String {
    match v {
        Some(x) if x.is_finite() => format!("{x:.decimals$}"),
        _ => "-".into(),
    }
}

// Long by design: one table row per case, its columns in order.
pub fn render(results: &[CaseResult]) -> String {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED).set_header(vec![
        "case",
        "status",
        "rps",
        "p50 µs",
        "p99 µs",
        "srv CPU µs/req",
        "RSS MiB",
        "allocs/req",
        "alloc B/req",
        "syscalls/req",
        "copy B/req",
        "faults/req",
    ]);
    for i in 2..12 {
        if let Some(c) = t.column_mut(i) {
            c.set_cell_alignment(CellAlignment::Right);
        }
    }
    for r in results {
        let status = match r.status {
            Status::Ok => "ok".to_string(),
            Status::Limited => "limited".to_string(),
            Status::Failed => "FAILED".to_string(),
            Status::Skipped => "skipped".to_string(),
        };
        let clean = r.clean.as_ref();
        let counted = r.counted.as_ref().map(|c| &c.per_request);
        let rss = clean
            .map(|c| c.server.rss_max_kib)
            .or(r.memory.as_ref().map(|m| m.proc.rss_kib))
            .or(r
                .memslope
                .as_ref()
                .and_then(|m| m.opened.last())
                .map(|p| p.rss_bytes / 1024))
            .map(|k| k as f64 / 1024.0);
        t.add_row(vec![
            r.case.id.clone(),
            status,
            f(clean.map(|c| c.load.rps), 0),
            f(clean.map(|c| c.load.latency.p50_ns as f64 / 1e3), 1),
            f(clean.map(|c| c.load.latency.p99_ns as f64 / 1e3), 1),
            f(clean.and_then(|c| c.server.cpu_us_per_request), 2),
            f(rss, 1),
            f(counted.and_then(|p| p.allocations), 2),
            f(counted.and_then(|p| p.alloc_bytes), 0),
            f(counted.and_then(|p| p.syscalls), 2),
            f(counted.and_then(|p| p.copy_bytes), 0),
            f(counted.and_then(|p| p.page_faults), 2),
        ]);
    }
    let mut out = t.to_string();
    // Process trees: each process's share of the counted pass.
    for r in results {
        let Some(c) = r.counted.as_ref() else {
            continue;
        };
        let a = &c.attribution;
        if a.processes.len() < 2 {
            continue;
        }
        let per = |v: u64| metrics::per_request(v, a.window.requests).map(|v| format!("{v:.2}"));
        // Without a request count there are no shares to show.
        let Some(lines) = a
            .processes
            .iter()
            .map(|p| {
                Some(format!(
                    "\n  pid {:>7} ppid {:>7} {:<16} syscalls/req {:>6}  allocs/req {:>6}  frees/req {:>6}  copy B/req {:>8}",
                    p.pid,
                    p.ppid,
                    p.role,
                    per(p.syscalls)?,
                    per(p.alloc.allocations)?,
                    per(p.alloc.frees)?,
                    per(p.copy_bytes)?,
                ))
            })
            .collect::<Option<String>>()
        else {
            continue;
        };
        out.push_str(&format!("\n{}: {} processes", r.case.id, a.processes.len()));
        out.push_str(&lines);
    }
    for r in results.iter().filter(|r| r.status != Status::Ok) {
        out.push_str(&format!("\n{}: {}", r.case.id, r.reasons.join("; ")));
    }
    for r in results {
        for w in &r.warnings {
            out.push_str(&format!("\n{}: warning: {w}", r.case.id));
        }
    }
    out.push_str(&open_loop_lines(results));
    out.push_str(&memslope_lines(results));
    out.push_str(&recovery_lines(results));
    out.push_str(&soak_lines(results));
    out.push_str(&live_lines(results));
    out
}

/// One line per memslope case: bytes per connection by RSS, PSS and cgroup
/// memory (with R²), the intercept, the line after closing, and the FDs
/// left once every connection closed.
fn memslope_lines(results: &[CaseResult]) -> String {
    let kib = |b: f64| format!("{:.1} KiB", b / 1024.0);
    let mut out = String::new();
    for r in results {
        let Some(m) = r.memslope.as_ref() else {
            continue;
        };
        let per = |what: &str, f: &Option<crate::stats::LineFit>| {
            f.as_ref()
                .map(|f| format!("{what} {}/conn (R² {:.3})", kib(f.slope), f.r2))
        };
        let mut parts: Vec<String> = [
            per("RSS", &m.rss),
            per("PSS", &m.pss),
            per("cgroup", &m.cgroup),
        ]
        .into_iter()
        .flatten()
        .collect();
        if let Some(f) = &m.rss {
            parts.push(format!("RSS at 0 connections {}", kib(f.intercept)));
        }
        if let Some(f) = &m.rss_after_close {
            parts.push(format!("closing: RSS {}/conn", kib(f.slope)));
        }
        parts.push(format!("FDs after close {:+}", m.fds_left_after_close));
        out.push_str(&format!(
            "\n{}: memory per connection: {}",
            r.case.id,
            parts.join(", ")
        ));
        if let Some(h) = &m.live_heap {
            out.push_str(&live_heap_lines(&r.case.id, h));
        }
        for w in &m.warnings {
            out.push_str(&format!("\n{}: {w}", r.case.id));
        }
    }
    out
}

/// The live heap of a memslope case: bytes per connection in all, then
/// the top sites (those that hold bytes per connection or after close).
fn live_heap_lines(id: &str, h: &crate::case::liveheap::LiveHeapFit) -> String {
    let mut out = format!("\n{id}: live heap per connection: ");
    match &h.fit {
        Some(f) => out.push_str(&format!("{:.0} B/conn (R² {:.3})", f.slope, f.r2)),
        None => out.push_str("no line (fewer than two tiers)"),
    }
    out.push_str(&format!(
        ", {} B in {} blocks left after close, {} unmatched frees",
        h.after_close.bytes, h.after_close.blocks, h.unmatched_frees
    ));
    if !h.complete {
        out.push_str(&format!(
            ", INCOMPLETE: {} allocations not recorded",
            h.dropped
        ));
    }
    let holds = |s: &&crate::case::liveheap::LiveSiteFit| {
        s.bytes_per_connection.abs() >= 0.5 || s.bytes_after_close > 0
    };
    for s in h.sites.iter().filter(holds).take(5) {
        out.push_str(&format!(
            "\n{id}:   {:>10.0} B/conn {:>6.2} blocks/conn {:>10} B after close  {} {}",
            s.bytes_per_connection, s.blocks_per_connection, s.bytes_after_close, s.kind, s.label
        ));
    }
    for s in h.user_sites.iter().filter(holds).take(5) {
        out.push_str(&format!(
            "\n{id}:   {:>10.0} B/conn {:>6.2} blocks/conn {:>10} B after close  user site {}",
            s.bytes_per_connection, s.blocks_per_connection, s.bytes_after_close, s.label
        ));
    }
    out
}

/// One line per recovery case: per cycle, handshakes, requests answered
/// of those scheduled, FDs against READY's and RSS after the close; then
/// the RSS drift per cycle.
fn recovery_lines(results: &[CaseResult]) -> String {
    let mut out = String::new();
    for r in results {
        let Some(p) = r.recovery.as_ref() else {
            continue;
        };
        let cycles: Vec<String> = p
            .cycles
            .iter()
            .map(|c| {
                format!(
                    "#{} {}/{} ok, {}, FDs {:+}, RSS {:.1} MiB",
                    c.cycle,
                    c.succeeded,
                    c.scheduled,
                    match c.handshakes.udp > 0 {
                        true => format!(
                            "{} udp/{} quic/{} h3",
                            c.handshakes.udp, c.handshakes.quic, c.handshakes.h3
                        ),
                        false => format!(
                            "{} tcp/{} tls/{} h2",
                            c.handshakes.tcp, c.handshakes.tls, c.handshakes.h2
                        ),
                    },
                    c.fds_delta,
                    c.rss_after_bytes as f64 / (1024.0 * 1024.0)
                )
            })
            .collect();
        out.push_str(&format!("\n{}: cycles: {}", r.case.id, cycles.join("; ")));
        if let Some(f) = &p.rss_drift {
            out.push_str(&format!("; RSS drift {:+.1} KiB/cycle", f.slope / 1024.0));
        }
    }
    out
}

/// Per soak case: one line per interval (requests answered of those
/// scheduled, latency p50/p99/p99.9, RSS, descriptors, and the counted
/// window's allocations minus frees per request), then the drift lines and
/// warnings.
fn soak_lines(results: &[CaseResult]) -> String {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    let mut out = String::new();
    for r in results {
        let Some(p) = r.soak.as_ref() else {
            continue;
        };
        for i in &p.intervals {
            let w = i.counted.as_ref();
            let mut net = w
                .and_then(|w| w.net_allocations_per_request)
                .map(|n| format!(", allocs−frees {n:+.3}/req"))
                .unwrap_or_default();
            if let Some((blocks, bytes)) =
                w.and_then(|w| w.live_blocks_per_request.zip(w.live_bytes_per_request))
            {
                net.push_str(&format!(
                    ", still allocated {blocks:.3} blocks {bytes:.0} B/req"
                ));
            }
            out.push_str(&format!(
                "\n{}: interval {} {}/{} ok, p50/p99/p99.9 {:.2}/{:.2}/{:.2} ms, RSS {:.1} MiB, FDs {}{net}",
                r.case.id,
                i.interval,
                i.succeeded,
                i.scheduled,
                ms(i.p50_ns),
                ms(i.p99_ns),
                ms(i.p999_ns),
                mib(i.rss_bytes),
                i.fds,
            ));
        }
        let mut drift = Vec::new();
        if let Some(f) = &p.rss_per_request {
            drift.push(format!("RSS {:+.1} B/request (R² {:.3})", f.slope, f.r2));
        }
        if let Some(f) = &p.rss_per_minute {
            drift.push(format!("{:+.1} KiB/min", f.slope / 1024.0));
        }
        if let Some(f) = &p.fds_per_minute {
            drift.push(format!("FDs {:+.1}/min", f.slope));
        }
        drift.push(format!("FDs after close {:+}", p.fds_delta));
        out.push_str(&format!("\n{}: drift: {}", r.case.id, drift.join(", ")));
        for w in &p.warnings {
            out.push_str(&format!("\n{}: {w}", r.case.id));
        }
    }
    out
}

/// One line per live case: per cycle, connections opened, echoes of
/// messages (or heartbeats), clients reclaimed, FDs against READY's, RSS
/// while held and the generator's CPU.
fn live_lines(results: &[CaseResult]) -> String {
    let mut out = String::new();
    for r in results {
        let Some(p) = r.live.as_ref() else {
            continue;
        };
        let cycles: Vec<String> = p
            .cycles
            .iter()
            .map(|c| {
                let traffic = if c.heartbeats > 0 || c.sent == 0 {
                    format!("{} heartbeats (≥{}/conn)", c.heartbeats, c.heartbeats_needed)
                } else {
                    format!("{}/{} echoed", c.echoed, c.sent)
                };
                let held = c.phases[1]
                    .rss_max_bytes
                    .map_or("-".into(), |b| format!("{:.1} MiB", b as f64 / (1024.0 * 1024.0)));
                format!(
                    "#{} {} open, {traffic}, {} reclaimed, RSS held {held}, FDs {:+}, client CPU {:.0} ms",
                    c.cycle,
                    c.connected,
                    c.reclaimed,
                    c.fds_delta,
                    c.client_cpu_ns as f64 / 1e6
                )
            })
            .collect();
        out.push_str(&format!(
            "\n{}: {}: {}",
            r.case.id,
            p.endpoint,
            cycles.join("; ")
        ));
    }
    out
}

/// One line per open-loop case: the schedule's ledger and the generator's
/// own lag, so that every case says how much of its latency is the
/// generator's.
fn open_loop_lines(results: &[CaseResult]) -> String {
    let us = |ns: u64| ns as f64 / 1e3;
    let mut out = String::new();
    for r in results {
        let Some(c) = r.clean.as_ref() else {
            continue;
        };
        let l = &c.load;
        if !matches!(l.mode, crate::load::Mode::Open { .. }) {
            continue;
        }
        // Late sends below the share that makes a case `limited` are a
        // number here, never a verdict.
        out.push_str(&format!(
            "\n{}: scheduled {}, on time {}, late {} (queued p50/p99 {:.1}/{:.1} µs), expired {}, errors {}; dispatch lag p50/p99 {:.1}/{:.1} µs (spin window {:.0} µs); sent late by the generator {} ({:.1}%; `limited` past {:.0}%), generator threads {:.0}% busy",
            r.case.id,
            l.scheduled,
            l.on_time,
            l.late,
            us(l.queue_delay.p50_ns),
            us(l.queue_delay.p99_ns),
            l.expired,
            l.errors_total(),
            us(l.dispatch_lag.p50_ns),
            us(l.dispatch_lag.p99_ns),
            us(l.dispatch.spin_window_ns),
            l.generator_late,
            100.0 * l.generator_late as f64 / l.scheduled.max(1) as f64,
            100.0 * crate::load::LIMITED_SHARE,
            100.0 * c.generator_busy,
        ));
    }
    out
}
