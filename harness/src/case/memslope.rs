//! The memslope pass: the server's memory against the number of open, idle
//! connections, fitted to a line whose slope is what one connection costs.
//!
//! One fresh server. After a warm-up ([`WARMUP_CONNECTIONS`] connections
//! opened, used and closed), memory is sampled with no connection open
//! (the baseline, "READY"), then at each tier, ascending: rig opens the tier's new
//! connections (with the TCP, TLS and h2 handshakes the protocol has, each
//! counted), sends exactly one request on each (so every connection is
//! proven serviceable, not merely accepted by the kernel), leaves them open
//! and idle, waits `settle_ms` and samples RSS, PSS, the cgroup's
//! memory.current, FDs and threads. RSS, PSS and cgroup memory are fitted
//! against the connection count by least squares (slope in bytes per
//! connection, intercept, R², every residual). Then the connections are
//! closed tier by tier, top down, and memory is sampled again: memory after
//! close is another line (does the server give memory back, not what a
//! connection costs), and once every connection is closed the server must
//! hold exactly the file descriptors it held at READY.
//!
//! With root, the same pass reads the live heap by call site at every
//! point (`liveheap.rs`): what one connection keeps allocated, and where.

use std::time::Duration;

use serde::Serialize;

use crate::launch::spec::TargetSpec;
use crate::launch::start::{ExitInfo, Launched, ObjectFact};
use crate::load::live::{LiveRun, LiveSpec, Pause, LIVE_TIMEOUT};
use crate::load::{Client, Handshakes, Mode};
use crate::sample::{CgroupSnapshot, ProcSnapshot};
use crate::scenario::{Case, HttpCase, LiveProto, LoadShape, MemSlopeCase, MemSlopeConn, Topology};
use crate::stats::{least_squares, LineFit};
use crate::symbolize::Symbolizer;

use super::liveheap::{LiveHeapFit, LiveWatch};

use super::*;

/// Below this R² the points are not a line: the slope is reported, with a
/// warning that it is not one connection's cost.
pub const MIN_R2: f64 = 0.99;

/// Connections opened (one request each) and closed before the READY
/// baseline: the first connections a server ever takes pay one-time costs
/// (lazily built runtime state, a worker thread's first allocation arena,
/// TLS configuration caches) that are no connection's cost. Measured on
/// rig-peer without it, the step from 0 to the first tier put R² at 0.91.
/// Few, because the memory they free stays with the allocator and the
/// first tier reuses it.
pub const WARMUP_CONNECTIONS: usize = 4;

/// How long rig waits, after closing connections, for the server to close
/// its side (it sees the close only when it next reads the socket).
const CLOSE_WAIT: Duration = Duration::from_secs(2);

/// The server at one count of open connections.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ConnPoint {
    pub connections: usize,
    pub rss_bytes: u64,
    pub pss_bytes: u64,
    /// The cgroup's memory.current (user and kernel memory charged to the
    /// target, socket buffers included), when the target has a cgroup.
    pub cgroup_bytes: Option<u64>,
    pub fds: u64,
    pub threads: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemSlopePass {
    pub launch: LaunchInfo,
    pub settle_ms: u64,
    /// READY (0 connections) first, then each tier as it was opened.
    pub opened: Vec<ConnPoint>,
    /// Each tier again as connections were closed, top down, ending at 0.
    pub closed: Vec<ConnPoint>,
    /// Bytes against open connections over the tiers (READY included when
    /// 0 is a tier): `slope` is bytes per connection.
    pub rss: Option<LineFit>,
    pub pss: Option<LineFit>,
    pub cgroup: Option<LineFit>,
    /// RSS against the connections still open while closing.
    pub rss_after_close: Option<LineFit>,
    /// FDs with every connection closed minus FDs at READY: 0 for a server
    /// that closes what it opened.
    pub fds_left_after_close: i64,
    /// Handshakes made (TCP, TLS, h2) over all tiers: exactly one of each
    /// the protocol has per connection.
    pub handshakes: Handshakes,
    /// Heap blocks allocated since READY and still allocated, by call
    /// site, at each point (needs root: the alloc probes with uretprobes).
    pub live_heap: Option<LiveHeapFit>,
    /// Fits that are not lines (R² below [`MIN_R2`]); a live heap not
    /// measured or incomplete.
    pub warnings: Vec<String>,
    pub exit: ExitInfo,
}

/// The median of three samples of the idle server, 20 ms apart: one
/// sample can land on a moment of transient allocation.
fn sample(l: &Launched, connections: usize) -> Result<ConnPoint, Fail> {
    let mut points = Vec::with_capacity(3);
    for i in 0..3 {
        if i > 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
        let p = ProcSnapshot::read_tree(l.pid)?;
        let cg = l
            .cgroup_handle()
            .and_then(|h| CgroupSnapshot::read(&h).ok())
            .and_then(|c| c.mem_current_bytes);
        points.push(ConnPoint {
            connections,
            rss_bytes: p.rss_kib * 1024,
            pss_bytes: p.pss_kib * 1024,
            cgroup_bytes: cg,
            fds: p.fds,
            threads: p.threads,
        });
    }
    let mid = |f: &dyn Fn(&ConnPoint) -> u64| {
        let mut v: Vec<u64> = points.iter().map(f).collect();
        v.sort_unstable();
        v[1]
    };
    Ok(ConnPoint {
        connections,
        rss_bytes: mid(&|p| p.rss_bytes),
        pss_bytes: mid(&|p| p.pss_bytes),
        cgroup_bytes: points
            .iter()
            .all(|p| p.cgroup_bytes.is_some())
            .then(|| mid(&|p| p.cgroup_bytes.unwrap_or(0))),
        fds: mid(&|p| p.fds),
        threads: mid(&|p| p.threads),
    })
}

fn fit(points: &[ConnPoint], y: impl Fn(&ConnPoint) -> Option<u64>) -> Option<LineFit> {
    let xy: Option<Vec<(f64, f64)>> = points
        .iter()
        .map(|p| y(p).map(|v| (p.connections as f64, v as f64)))
        .collect();
    least_squares(&xy?)
}

/// A tier's new connections, held open (idle) by their client.
enum Held {
    Http(Client),
    /// A live generator paused with every connection open: it closes them
    /// when told to go on.
    Live {
        run: LiveRun,
        at: std::sync::mpsc::Receiver<&'static str>,
        go: std::sync::mpsc::Sender<()>,
        n: usize,
    },
}

/// Open `n` more connections of `m`'s kind, each proven served: the tier's
/// new connections.
fn open_tier(
    rs: &RunSettings,
    m: &MemSlopeCase,
    spec: &TargetSpec,
    port: u16,
    n: usize,
    tier: u32,
) -> Result<Held, Fail> {
    match &m.conn {
        MemSlopeConn::Http { protocol, path } => {
            open_http(rs, *protocol, path, spec, port, n).map(Held::Http)
        }
        MemSlopeConn::Live(p) => open_live(*p, spec, port, n, tier),
    }
}

/// `n` TCP echo, WebSocket or SSE connections on a generator of their own
/// (one thread, paused once every connection opened, proven served: the
/// first echo, the upgrade, the first event). `tier` goes into the TCP
/// connections' first message.
fn open_live(
    p: LiveProto,
    spec: &TargetSpec,
    port: u16,
    n: usize,
    tier: u32,
) -> Result<Held, Fail> {
    let (kind, _) = super::live::kind_of(spec, p);
    let (at_tx, at) = std::sync::mpsc::channel();
    let (go, go_rx) = std::sync::mpsc::channel();
    let run = LiveRun::start(
        LiveSpec {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], port)),
            kind,
            connections: n,
            cycle: tier,
            // No hold: the connections stay idle while paused.
            hold: Duration::ZERO,
            message_every: Duration::from_secs(1),
        },
        Some(Pause {
            at: at_tx,
            go: go_rx,
        }),
    )?;
    // Every connection opens within LIVE_TIMEOUT (or is given up).
    match at.recv_timeout(LIVE_TIMEOUT + Duration::from_secs(5)) {
        Ok("connected") => Ok(Held::Live { run, at, go, n }),
        other => {
            drop(go);
            let _ = run.join();
            Err(Fail(format!(
                "{n} new {} connections did not open ({other:?})",
                p.name()
            )))
        }
    }
}

/// Close a live tier: let the generator go on (no hold), then close every
/// connection; each must have opened and been reclaimed.
fn close_live(
    run: LiveRun,
    at: std::sync::mpsc::Receiver<&'static str>,
    go: std::sync::mpsc::Sender<()>,
    n: usize,
) -> Result<(), Fail> {
    let _ = go.send(());
    let _ = at.recv_timeout(LIVE_TIMEOUT + Duration::from_secs(5));
    let _ = go.send(());
    let out = run.join()?;
    let opened = out.conns.iter().filter(|c| c.connected).count();
    let reclaimed = out.conns.iter().filter(|c| c.reclaimed).count();
    if opened != n || reclaimed != n {
        return Err(Fail(format!(
            "{opened} of {n} connections opened and {reclaimed} were reclaimed at close (errors: {:?})",
            out.errors()
        )));
    }
    Ok(())
}

/// `n` HTTP connections, each answering one request on `path`.
fn open_http(
    rs: &RunSettings,
    protocol: crate::scenario::Proto,
    path: &str,
    spec: &TargetSpec,
    port: u16,
    n: usize,
) -> Result<Client, Fail> {
    let http = HttpCase {
        protocol,
        path: path.to_string(),
        load: LoadShape::Closed,
        topology: Topology {
            connections: n,
            streams: 1,
        },
        keepalive: true,
    };
    let mut ls = load_spec(rs, &http, spec, port)?;
    // Idle connections need no parallel generator: one thread holds them.
    ls.threads = Some(1);
    let mut client = Client::connect(&ls)?;
    if let Some(why) = handshake_mismatch(&ls, client.handshakes()) {
        return Err(Fail(why));
    }
    let r = client.run(&Mode::FixedCount { requests: n as u64 });
    if r.succeeded != n as u64 || r.errors_total() > 0 {
        return Err(Fail(format!(
            "{n} new connections: {} of {n} answered their one request (errors: {:?})",
            r.succeeded, r.errors
        )));
    }
    Ok(client)
}

/// Close a tier's connections, then wait until the server holds no more
/// FDs than `fds_target` (it closes its side when it next reads the
/// socket) or [`CLOSE_WAIT`] passes.
fn close(held: Held, l: &Launched, fds_target: u64) -> Result<(), Fail> {
    match held {
        Held::Http(client) => drop(client),
        Held::Live { run, at, go, n } => close_live(run, at, go, n)?,
    }
    wait_for_fds(l, fds_target, CLOSE_WAIT);
    Ok(())
}

impl Held {
    /// TCP, TLS and h2 handshakes made (live: one TCP connection each).
    fn handshakes(&self) -> Handshakes {
        match self {
            Held::Http(c) => c.handshakes(),
            Held::Live { n, .. } => Handshakes {
                tcp: *n as u64,
                ..Handshakes::default()
            },
        }
    }
}

struct Measured {
    opened: Vec<ConnPoint>,
    closed: Vec<ConnPoint>,
    handshakes: Handshakes,
}

fn measure(
    rs: &RunSettings,
    case: &Case,
    m: &MemSlopeCase,
    spec: &TargetSpec,
    l: &Launched,
    mut live: Option<&mut LiveWatch>,
) -> Result<Measured, Fail> {
    let live_err = |e: anyhow::Error| Fail(format!("live heap: {e:#}"));
    let settle = Duration::from_millis(case.settle_ms);
    let before = ProcSnapshot::read_tree(l.pid)?.fds;
    close(
        open_tier(rs, m, spec, l.port, WARMUP_CONNECTIONS, 0)?,
        l,
        before,
    )?;
    std::thread::sleep(settle);
    if let Some(w) = live.as_deref_mut() {
        w.open().map_err(live_err)?;
    }
    let ready = sample(l, 0)?;
    if let Some(w) = live.as_deref_mut() {
        w.opened(0).map_err(live_err)?;
    }
    let mut opened = vec![ready.clone()];
    let mut clients: Vec<(usize, Held)> = Vec::new();
    let mut handshakes = Handshakes::default();
    let mut open = 0;
    for &tier in m.tiers.iter().filter(|&&t| t > 0) {
        if crate::interrupt::requested() {
            return Err(Fail(crate::interrupt::interrupted_by()));
        }
        let c = open_tier(rs, m, spec, l.port, tier - open, clients.len() as u32 + 1)?;
        handshakes.add(c.handshakes());
        open = tier;
        clients.push((open, c));
        std::thread::sleep(settle);
        opened.push(sample(l, open)?);
        if let Some(w) = live.as_deref_mut() {
            w.opened(open).map_err(live_err)?;
        }
    }
    let mut closed = Vec::new();
    while let Some((_, c)) = clients.pop() {
        let below = clients.last().map_or(0, |(n, _)| *n);
        // The server's FDs once these are closed: those at the tier below
        // (READY's at 0).
        let target = opened
            .iter()
            .find(|p| p.connections == below)
            .map_or(ready.fds, |p| p.fds);
        close(c, l, target)?;
        std::thread::sleep(settle);
        closed.push(sample(l, below)?);
    }
    if let Some(w) = live {
        w.closed().map_err(live_err)?;
    }
    Ok(Measured {
        opened,
        closed,
        handshakes,
    })
}

pub(super) fn memslope_pass(
    rs: &RunSettings,
    case: &Case,
    m: &MemSlopeCase,
    spec: &TargetSpec,
    sym: &mut Symbolizer,
    objs: &mut Option<Vec<ObjectFact>>,
) -> Result<(MemSlopePass, Vec<String>), Fail> {
    let (l, arm_proof) = launch_pass(rs, case, spec, "memslope")?;
    record_objects(&l, objs);
    let mut warnings = Vec::new();
    let mut live = match LiveWatch::attach(&l) {
        Ok(w) => Some(w),
        Err(e) => {
            warnings.push(format!("live heap not measured: {e:#}"));
            None
        }
    };
    let measured = measure(rs, case, m, spec, &l, live.as_mut());
    // Detach before the server stops; its names were read while it ran.
    let live_heap = match (live, &measured) {
        (Some(w), Ok(_)) => match w.finish(&m.tiers, sym) {
            Ok(f) => Some(f),
            Err(e) => {
                warnings.push(format!("live heap not measured: {e:#}"));
                None
            }
        },
        _ => None,
    };
    let died = exited_reason("memslope", &l);
    let mut info = LaunchInfo::of(&l);
    info.arm_proof = arm_proof;
    let exit = stop(l);
    let mm = measured.map_err(|Fail(why)| failed("memslope", why, died.clone(), &exit))?;
    // The fit's points: the tiers asked for (READY only when 0 is one).
    let points: Vec<ConnPoint> = mm
        .opened
        .iter()
        .filter(|p| m.tiers.contains(&p.connections))
        .cloned()
        .collect();
    let rss = fit(&points, |p| Some(p.rss_bytes));
    let pss = fit(&points, |p| Some(p.pss_bytes));
    let cgroup = fit(&points, |p| p.cgroup_bytes);
    let rss_after_close = fit(&mm.closed, |p| Some(p.rss_bytes));
    if let Some(h) = live_heap.as_ref().filter(|h| !h.complete) {
        warnings.push(format!(
            "live heap incomplete: {} allocations ({} B) not recorded, the live-heap map was full",
            h.dropped, h.dropped_bytes
        ));
    }
    for (what, f) in [("RSS", &rss), ("PSS", &pss), ("cgroup memory", &cgroup)] {
        if let Some(f) = f.as_ref().filter(|f| f.r2 < MIN_R2) {
            warnings.push(format!(
                "{what} against connections is not a line (R² {:.3} < {MIN_R2}): the slope \
                 {:.0} B/connection is not what one connection costs; see the residuals",
                f.r2, f.slope
            ));
        }
    }
    let ready_fds = mm.opened[0].fds;
    let after = mm.closed.last().map_or(ready_fds, |p| p.fds);
    let fds_left_after_close = after as i64 - ready_fds as i64;
    let mut reasons: Vec<String> = Vec::new();
    if fds_left_after_close != 0 {
        reasons.push(format!(
            "memslope: with every connection closed the server holds {after} file descriptors, \
             {fds_left_after_close:+} against READY's {ready_fds}"
        ));
    }
    reasons.extend(died);
    reasons.extend(oom_reason("memslope", &exit));
    Ok((
        MemSlopePass {
            launch: info,
            settle_ms: case.settle_ms,
            opened: mm.opened,
            closed: mm.closed,
            rss,
            pss,
            cgroup,
            rss_after_close,
            fds_left_after_close,
            handshakes: mm.handshakes,
            live_heap,
            warnings,
            exit,
        },
        reasons,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(n: usize, rss: u64, cg: Option<u64>) -> ConnPoint {
        ConnPoint {
            connections: n,
            rss_bytes: rss,
            pss_bytes: rss,
            cgroup_bytes: cg,
            fds: 3 + n as u64,
            threads: 1,
        }
    }

    #[test]
    fn a_fit_needs_every_point_to_have_the_value() {
        let pts = [
            point(0, 1_000_000, Some(5)),
            point(64, 1_000_000 + 64 * 65552, None),
            point(128, 1_000_000 + 128 * 65552, Some(9)),
        ];
        let f = fit(&pts, |p| Some(p.rss_bytes)).unwrap();
        assert!((f.slope - 65552.0).abs() < 1e-6, "{f:?}");
        assert!((f.intercept - 1_000_000.0).abs() < 1e-3, "{f:?}");
        assert_eq!(fit(&pts, |p| p.cgroup_bytes), None);
    }
}
