//! The soak pass: one server process under fixed-rate load for a long
//! time, reported interval by interval, with a counted window after each.
//!
//! What a short case cannot show is drift: memory that grows with every
//! request, descriptors that are never closed, latency that creeps up as a
//! heap fragments. So the same process serves `rate` requests per second
//! on the case's connections for `duration_ms`, cut into intervals of
//! `interval_ms`. Each interval is reported on its own (its ledger,
//! latency percentiles from the scheduled time, requests per second, the
//! server's RSS, PSS, descriptors, threads and CPU per request), never
//! blended into one histogram. After each interval, when the run counts,
//! a fixed-count window with probes attached measures exact allocations
//! and frees per request: a per-request leak shows as allocations minus
//! frees above zero, with the sites that allocate. Then least-squares
//! lines through the interval ends give the drift: RSS per request served
//! and per minute, descriptors per minute. At the end every connection is
//! closed and the server must be back at READY's descriptors.

use std::time::{Duration, Instant};

use serde::Serialize;

use crate::launch::spec::TargetSpec;
use crate::launch::start::{ExitInfo, Launched, ObjectFact};
use crate::load::{Client, LoadReport, Mode};
use crate::report::Attribution;
use crate::sample::ProcSnapshot;
use crate::scenario::{Case, HttpCase, LoadShape, SoakCase};
use crate::stats::{least_squares, LineFit};
use crate::symbolize::Symbolizer;

use super::counted::counted_measure;
use super::*;

/// How long rig waits, after closing the soak's connections, for the
/// server to close its side.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// A counted window whose allocations exceed its frees by at least this
/// many per request, in every interval, is a leak worth a warning: one
/// block kept per hundred requests, far above what a cache settling in
/// leaves over a few windows.
const LEAK_PER_REQUEST: f64 = 0.01;

/// The sites listed per counted window.
const TOP_SITES: usize = 5;

/// One allocating site of a counted window, per request.
#[derive(Clone, Debug, Serialize)]
pub struct SoakSite {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// `malloc`, `calloc`, `operator new`, ...
    pub kind: String,
    pub calls_per_request: f64,
    pub bytes_per_request: f64,
}

/// One site of a window's live heap: blocks it allocated in the window and
/// that were still allocated at the window's end, per request.
#[derive(Clone, Debug, Serialize)]
pub struct SoakLiveSite {
    pub function: Option<String>,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// The entry point called; empty for a user site.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub kind: String,
    pub blocks_per_request: f64,
    pub bytes_per_request: f64,
}

/// The counted window after one interval: exact counts over
/// `requests` requests.
#[derive(Clone, Debug, Serialize)]
pub struct SoakWindow {
    pub requests: u64,
    pub allocations_per_request: Option<f64>,
    pub frees_per_request: Option<f64>,
    /// Allocations minus frees: above zero, memory the requests kept.
    pub net_allocations_per_request: Option<f64>,
    pub alloc_bytes_per_request: Option<f64>,
    pub syscalls_per_request: Option<f64>,
    /// The sites allocating the most per request (not counting calls made
    /// inside another allocator call).
    pub top_alloc_sites: Vec<SoakSite>,
    /// With the alloc probes: the window's allocations still allocated at
    /// its end (each free matched to its allocation), per request. A leak
    /// is here by construction, at its site; a cache that grows shows too.
    pub live_bytes_per_request: Option<f64>,
    pub live_blocks_per_request: Option<f64>,
    /// The sites of those blocks (the allocator's caller), most bytes
    /// first.
    pub live_sites: Vec<SoakLiveSite>,
    /// The same blocks by user site (the first frame of each block's whole
    /// stack outside the allocators and standard libraries), most bytes
    /// first: where a Rust or C++ server's own code asked for them.
    pub live_user_sites: Vec<SoakLiveSite>,
    /// Frees in the window of blocks allocated before it (what makes
    /// allocations minus frees smaller than the live blocks).
    pub unmatched_frees_per_request: Option<f64>,
    /// The probes lost no event (nor the live heap an allocation).
    pub complete: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct SoakInterval {
    /// 1-based.
    pub interval: u32,
    /// When the interval's load ended and the server was sampled, from the
    /// first interval's start (the counted windows before it included).
    pub end_ms: f64,
    /// Requests the server had answered since READY when it was sampled:
    /// warm-up, intervals and the counted windows before this one.
    pub served: u64,
    pub scheduled: u64,
    pub sent: u64,
    pub succeeded: u64,
    pub errors: u64,
    pub expired: u64,
    pub late: u64,
    pub generator_late: u64,
    pub rps: f64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    pub dispatch_lag_p99_ns: u64,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    pub fds: u64,
    pub threads: u64,
    /// Server CPU over the interval's load (not its counted window) per
    /// answered request.
    pub cpu_us_per_request: Option<f64>,
    pub counted: Option<SoakWindow>,
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct SoakPass {
    pub launch: LaunchInfo,
    pub ready_fds: u64,
    pub ready_rss_bytes: u64,
    pub intervals: Vec<SoakInterval>,
    /// RSS at each interval's end against requests served: `slope` is
    /// bytes kept per request.
    pub rss_per_request: Option<LineFit>,
    /// RSS against minutes: bytes per minute at this rate.
    pub rss_per_minute: Option<LineFit>,
    /// Descriptors against minutes.
    pub fds_per_minute: Option<LineFit>,
    /// After closing every connection: descriptors, and their difference
    /// to READY's.
    pub fds_after_close: u64,
    pub fds_delta: i64,
    /// Drift worth a look that does not fail the case.
    pub warnings: Vec<String>,
    pub exit: ExitInfo,
}

impl SoakPass {
    /// Why the generator, not the server, may have set an interval's
    /// latency: more than [`crate::load::LIMITED_SHARE`] of its scheduled
    /// requests sent more than [`crate::load::LATE_AFTER`] after they could
    /// go. `None` when no interval was.
    pub fn limited(&self) -> Option<String> {
        limited(&self.intervals)
    }
}

/// [`SoakPass::limited`] of these intervals.
fn limited(intervals: &[SoakInterval]) -> Option<String> {
    let late: Vec<String> = intervals
        .iter()
        .filter(|i| {
            i.scheduled > 0
                && i.generator_late as f64 > crate::load::LIMITED_SHARE * i.scheduled as f64
        })
        .map(|i| {
            format!(
                "interval {}: {} of {}",
                i.interval, i.generator_late, i.scheduled
            )
        })
        .collect();
    (!late.is_empty()).then(|| {
        format!(
            "limited: scheduled requests sent more than {} µs after they could go ({}): the generator, not the server, added that latency",
            crate::load::LATE_AFTER.as_micros(),
            late.join("; ")
        )
    })
}

impl SoakWindow {
    fn of(a: &Attribution) -> SoakWindow {
        let per = PerRequest::of(a);
        let n = a.window.requests.unwrap_or(0).max(1) as f64;
        let mut sites: Vec<SoakSite> = a
            .alloc
            .iter()
            .filter(|r| !r.inner && r.kind != "free" && r.calls > 0)
            .map(|r| SoakSite {
                function: r.site.function.clone(),
                file: r.site.file.clone(),
                line: r.site.line,
                kind: r.kind.clone(),
                calls_per_request: r.calls as f64 / n,
                bytes_per_request: r.bytes as f64 / n,
            })
            .collect();
        sites.sort_by(|x, y| y.calls_per_request.total_cmp(&x.calls_per_request));
        sites.truncate(TOP_SITES);
        let live = a.live_heap.as_ref();
        // A live site per request: `kind` is the entry point called, empty
        // for a user site.
        let per_request =
            |site: &crate::symbolize::Site, kind: &str, blocks: u64, bytes: u64| SoakLiveSite {
                function: site.function.clone(),
                file: site.file.clone(),
                line: site.line,
                kind: kind.to_string(),
                blocks_per_request: blocks as f64 / n,
                bytes_per_request: bytes as f64 / n,
            };
        let live_sites = live
            .map(|h| {
                let top = h.sites.iter().take(TOP_SITES);
                top.map(|s| per_request(&s.site, &s.kind, s.blocks, s.bytes))
                    .collect()
            })
            .unwrap_or_default();
        let live_user_sites = live
            .map(|h| {
                let top = h.user_sites.iter().take(TOP_SITES);
                top.map(|s| per_request(&s.site, "", s.blocks, s.bytes))
                    .collect()
            })
            .unwrap_or_default();
        SoakWindow {
            requests: a.window.requests.unwrap_or(0),
            allocations_per_request: per.allocations,
            frees_per_request: per.frees,
            net_allocations_per_request: per.allocations.zip(per.frees).map(|(a, f)| a - f),
            alloc_bytes_per_request: per.alloc_bytes,
            syscalls_per_request: per.syscalls,
            top_alloc_sites: sites,
            live_bytes_per_request: live.map(|h| h.bytes as f64 / n),
            live_blocks_per_request: live.map(|h| h.blocks as f64 / n),
            live_sites,
            live_user_sites,
            unmatched_frees_per_request: live.map(|h| h.unmatched_frees as f64 / n),
            complete: a.complete && live.is_none_or(|h| h.complete),
        }
    }
}

/// The case's connections and path, at its rate (the soak's load) or
/// closed (its counted windows).
fn http_of(k: &SoakCase, load: LoadShape) -> HttpCase {
    HttpCase {
        protocol: k.protocol,
        path: k.path.clone(),
        load,
        topology: k.topology,
        keepalive: true,
    }
}

struct Soaked {
    ready: ProcSnapshot,
    intervals: Vec<SoakInterval>,
    after_close: ProcSnapshot,
}

#[allow(clippy::too_many_arguments)]
fn interval(
    n: u32,
    report: &LoadReport,
    before: &ProcSnapshot,
    after: &ProcSnapshot,
    end: Duration,
    served: u64,
    counted: Option<SoakWindow>,
    problems: Vec<String>,
) -> SoakInterval {
    let cpu_ns = after.cpu_ns.saturating_sub(before.cpu_ns);
    SoakInterval {
        interval: n,
        end_ms: end.as_secs_f64() * 1e3,
        served,
        scheduled: report.scheduled,
        sent: report.sent,
        succeeded: report.succeeded,
        errors: report.errors_total(),
        expired: report.expired,
        late: report.late,
        generator_late: report.generator_late,
        rps: report.rps,
        p50_ns: report.latency.p50_ns,
        p99_ns: report.latency.p99_ns,
        p999_ns: report.latency.p999_ns,
        max_ns: report.latency.max_ns,
        dispatch_lag_p99_ns: report.dispatch_lag.p99_ns,
        rss_bytes: after.rss_kib * 1024,
        pss_bytes: after.pss_kib * 1024,
        fds: after.fds,
        threads: after.threads,
        cpu_us_per_request: (report.succeeded > 0)
            .then(|| cpu_ns as f64 / 1e3 / report.succeeded as f64),
        counted,
        problems,
    }
}

fn soak(
    rs: &RunSettings,
    case: &Case,
    k: &SoakCase,
    spec: &TargetSpec,
    l: &Launched,
    sym: &mut Symbolizer,
) -> Result<Soaked, Fail> {
    let interrupted =
        || crate::interrupt::requested().then(|| Fail(crate::interrupt::interrupted_by()));
    let ready = ProcSnapshot::read_tree(l.pid)?;
    let ls = load_spec(
        rs,
        &http_of(k, LoadShape::Open { rate: k.rate }),
        spec,
        l.port,
    )?;
    let mut client = Client::connect(&ls)?;
    let warm = client.run(&Mode::Open {
        rate: k.rate,
        duration: Duration::from_millis(case.warmup_ms),
    });
    let warm_problems = check_load("soak warm-up", &warm);
    if !warm_problems.is_empty() {
        return Err(Fail(warm_problems.join("; ")));
    }
    let mut served = warm.succeeded;
    let counts = rs.passes.counted && !rs.families.is_empty();
    let closed = http_of(k, LoadShape::Closed);
    let t0 = Instant::now();
    let mut intervals = Vec::new();
    for n in 1..=k.intervals(case.duration_ms) as u32 {
        if let Some(f) = interrupted() {
            return Err(f);
        }
        let before = ProcSnapshot::read_tree(l.pid)?;
        let report = client.run(&Mode::Open {
            rate: k.rate,
            duration: Duration::from_millis(k.interval_ms),
        });
        let after = ProcSnapshot::read_tree(l.pid)?;
        let end = t0.elapsed();
        served += report.succeeded;
        let served_at_sample = served;
        let mut problems = check_load("load", &report);
        let counted = if counts {
            if let Some(f) = interrupted() {
                return Err(f);
            }
            let m = counted_measure(rs, case, &closed, spec, l, sym, true)?;
            served += m.warmed + m.report.succeeded;
            problems.extend(m.reasons.iter().cloned());
            Some(SoakWindow::of(&m.attribution))
        } else {
            None
        };
        intervals.push(interval(
            n,
            &report,
            &before,
            &after,
            end,
            served_at_sample,
            counted,
            problems,
        ));
    }
    client.close(true);
    wait_for_fds(l, ready.fds, CLOSE_WAIT);
    let after_close = ProcSnapshot::read_tree(l.pid)?;
    Ok(Soaked {
        ready,
        intervals,
        after_close,
    })
}

/// `function (file:line)` of a site, `?` for what is unknown.
fn place(function: &Option<String>, file: &Option<String>, line: Option<u32>) -> String {
    format!(
        "{} ({}:{})",
        function.as_deref().unwrap_or("?"),
        file.as_deref().unwrap_or("?"),
        line.unwrap_or(0)
    )
}

/// Drift worth a look: allocations kept per request in every counted
/// window, and descriptors that grew while the connections stayed the
/// same.
fn warnings(intervals: &[SoakInterval], fds_per_minute: &Option<LineFit>) -> Vec<String> {
    let mut out = Vec::new();
    let windows: Vec<&SoakWindow> = intervals
        .iter()
        .filter_map(|i| i.counted.as_ref())
        .collect();
    let list = |v: &mut dyn Iterator<Item = f64>| {
        v.map(|n| format!("{n:+.3}")).collect::<Vec<_>>().join(", ")
    };
    let every = |f: &dyn Fn(&SoakWindow) -> Option<f64>| {
        !windows.is_empty()
            && windows.len() == intervals.len()
            && windows
                .iter()
                .all(|w| f(w).is_some_and(|n| n >= LEAK_PER_REQUEST))
    };
    let last = windows.last();
    if every(&|w| w.live_blocks_per_request) {
        // Frees matched to allocations: the blocks themselves, at their site.
        let site = last
            .and_then(|w| w.live_user_sites.first().or(w.live_sites.first()))
            .map(|s| {
                format!(
                    "; most at {}, {:.2} blocks and {:.0} B per request",
                    place(&s.function, &s.file, s.line),
                    s.blocks_per_request,
                    s.bytes_per_request
                )
            })
            .unwrap_or_default();
        out.push(format!(
            "every counted window ended with blocks it allocated still allocated ({} per request): the requests keep memory{site}",
            list(&mut windows.iter().filter_map(|w| w.live_blocks_per_request))
        ));
    } else if windows.iter().all(|w| w.live_blocks_per_request.is_none())
        && every(&|w| w.net_allocations_per_request)
    {
        // Without the live heap: allocations minus frees, and the site that
        // allocates most.
        let site = last
            .and_then(|w| w.top_alloc_sites.first())
            .map(|s| {
                format!(
                    "; the top allocating site is {}, {:.2} calls and {:.0} B per request",
                    place(&s.function, &s.file, s.line),
                    s.calls_per_request,
                    s.bytes_per_request
                )
            })
            .unwrap_or_default();
        out.push(format!(
            "allocations minus frees per request stayed above zero in every counted window ({}): the requests keep memory{site}",
            list(&mut windows.iter().filter_map(|w| w.net_allocations_per_request))
        ));
    }
    let (first, last) = (intervals.first(), intervals.last());
    if let (Some(f), Some(l), Some(fit)) = (first, last, fds_per_minute) {
        if l.fds > f.fds {
            out.push(format!(
                "the server's descriptors grew from {} to {} over the intervals ({:+.1} per minute) on the same connections",
                f.fds, l.fds, fit.slope
            ));
        }
    }
    out
}

pub(super) fn soak_pass(
    rs: &RunSettings,
    case: &Case,
    k: &SoakCase,
    spec: &TargetSpec,
    sym: &mut Symbolizer,
    objs: &mut Option<Vec<ObjectFact>>,
) -> Result<(SoakPass, Vec<String>), Fail> {
    let (l, arm_proof) = launch_pass(rs, case, spec, "soak")?;
    record_objects(&l, objs);
    std::thread::sleep(Duration::from_millis(case.settle_ms));
    let measured = soak(rs, case, k, spec, &l, sym);
    let died = exited_reason("soak", &l);
    let mut info = LaunchInfo::of(&l);
    info.arm_proof = arm_proof;
    let exit = stop(l);
    let s = measured.map_err(|Fail(why)| failed("soak", why, died.clone(), &exit))?;
    let mut reasons: Vec<String> = s
        .intervals
        .iter()
        .flat_map(|i| {
            i.problems
                .iter()
                .map(move |p| format!("soak interval {}: {p}", i.interval))
        })
        .collect();
    let fds_delta = s.after_close.fds as i64 - s.ready.fds as i64;
    if fds_delta != 0 {
        reasons.push(format!(
            "after closing every connection the server holds {} file descriptors, {fds_delta:+} against READY's {}",
            s.after_close.fds, s.ready.fds
        ));
    }
    reasons.extend(died);
    reasons.extend(oom_reason("soak", &exit));
    let fit = |f: &dyn Fn(&SoakInterval) -> (f64, f64)| {
        least_squares(&s.intervals.iter().map(f).collect::<Vec<_>>())
    };
    let minutes = |i: &SoakInterval| i.end_ms / 60_000.0;
    let rss_per_request = fit(&|i| (i.served as f64, i.rss_bytes as f64));
    let rss_per_minute = fit(&|i| (minutes(i), i.rss_bytes as f64));
    let fds_per_minute = fit(&|i| (minutes(i), i.fds as f64));
    let warnings = warnings(&s.intervals, &fds_per_minute);
    Ok((
        SoakPass {
            launch: info,
            ready_fds: s.ready.fds,
            ready_rss_bytes: s.ready.rss_kib * 1024,
            intervals: s.intervals,
            rss_per_request,
            rss_per_minute,
            fds_per_minute,
            fds_after_close: s.after_close.fds,
            fds_delta,
            warnings,
            exit,
        },
        reasons,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn interval(n: u32, scheduled: u64, generator_late: u64) -> SoakInterval {
        SoakInterval {
            interval: n,
            end_ms: 0.0,
            served: 0,
            scheduled,
            sent: scheduled,
            succeeded: scheduled,
            errors: 0,
            expired: 0,
            late: 0,
            generator_late,
            rps: 0.0,
            p50_ns: 0,
            p99_ns: 0,
            p999_ns: 0,
            max_ns: 0,
            dispatch_lag_p99_ns: 0,
            rss_bytes: 0,
            pss_bytes: 0,
            fds: 0,
            threads: 0,
            cpu_us_per_request: None,
            counted: None,
            problems: Vec::new(),
        }
    }

    #[test]
    fn an_interval_with_more_than_one_percent_sent_late_limits_the_case() {
        // 10 of 1000 is 1%: not more than it.
        assert_eq!(
            limited(&[interval(1, 1000, 10), interval(2, 1000, 0)]),
            None
        );
        let why = limited(&[interval(1, 1000, 10), interval(2, 1000, 11)]).unwrap();
        assert!(why.starts_with("limited: "), "{why}");
        assert!(why.contains("(interval 2: 11 of 1000)"), "{why}");
    }
}
