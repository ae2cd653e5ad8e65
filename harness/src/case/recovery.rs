//! The recovery pass: one server process through cycles of connecting,
//! fixed-rate load and closing, each cycle checked on its own.
//!
//! A server that serves its first connections well can still fail its
//! hundredth: descriptors not closed, memory not given back, a listener
//! that stops accepting after an abrupt disconnect. So the same process
//! goes through `cycles` rounds of: open the topology's connections (their
//! TCP, TLS and h2 handshakes counted: exactly one of each per connection),
//! run open-loop load at the case's rate for `duration_ms` (its ledger must
//! add up and every response validate), close every connection (gracefully:
//! h2 GOAWAY first; or abruptly: the sockets closed, nothing said), wait
//! until the server has closed its side, and sample its file descriptors and
//! memory. Every cycle must end with the descriptors the server held at
//! READY. Cycles are reported one by one, never blended; the RSS after each
//! cycle is kept as a series, with its least-squares drift per cycle.

use std::time::Duration;

use serde::Serialize;

use crate::launch::spec::TargetSpec;
use crate::launch::start::{ExitInfo, Launched, ObjectFact};
use crate::load::{Client, Handshakes, Mode, Protocol};
use crate::sample::ProcSnapshot;
use crate::scenario::{Case, CloseKind, HttpCase, LoadShape, RecoveryCase};
use crate::stats::{least_squares, LineFit};

use super::*;

/// How long rig waits, after closing a cycle's connections, for the server
/// to close its side (it sees the close only when it next reads).
const CLOSE_WAIT: Duration = Duration::from_secs(2);

#[derive(Clone, Debug, Serialize)]
pub struct Cycle {
    /// 1-based.
    pub cycle: u32,
    pub handshakes: Handshakes,
    pub scheduled: u64,
    pub sent: u64,
    pub succeeded: u64,
    pub errors: u64,
    pub expired: u64,
    pub late: u64,
    pub p50_ns: u64,
    pub p99_ns: u64,
    /// h2 connections that sent GOAWAY and closed in time (graceful).
    pub went_away: u64,
    /// After the close: the server's descriptors, and their difference to
    /// READY's.
    pub fds_after: u64,
    pub fds_delta: i64,
    pub rss_after_bytes: u64,
    /// Why this cycle failed; empty when it did not.
    pub problems: Vec<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RecoveryPass {
    pub launch: LaunchInfo,
    pub ready_fds: u64,
    pub ready_rss_bytes: u64,
    pub cycles: Vec<Cycle>,
    /// RSS after each cycle against the cycle number: `slope` is bytes
    /// kept per cycle (0 for a server that gives back what a cycle took).
    pub rss_drift: Option<LineFit>,
    pub exit: ExitInfo,
}

/// Close `client` and wait until the server holds no more than `fds`
/// descriptors, or [`CLOSE_WAIT`] passes; the h2 connections that went
/// away gracefully.
fn close(client: Client, graceful: bool, l: &Launched, fds: u64) -> u64 {
    let went_away = client.close(graceful);
    wait_for_fds(l, fds, CLOSE_WAIT);
    went_away
}

fn cycle(
    rs: &RunSettings,
    case: &Case,
    r: &RecoveryCase,
    spec: &TargetSpec,
    l: &Launched,
    ready: &ProcSnapshot,
    n: u32,
) -> Result<Cycle, Fail> {
    let http = HttpCase {
        protocol: r.protocol,
        path: r.path.clone(),
        load: LoadShape::Open { rate: r.rate },
        topology: r.topology,
        keepalive: true,
    };
    let ls = load_spec(rs, &http, spec, l.port)?;
    let mut client = Client::connect(&ls)?;
    let handshakes = client.handshakes();
    let mut problems: Vec<String> = handshake_mismatch(&ls, handshakes).into_iter().collect();
    let report = client.run(&Mode::Open {
        rate: r.rate,
        duration: Duration::from_millis(case.duration_ms),
    });
    problems.extend(check_load("load", &report));
    let graceful = r.close == CloseKind::Graceful;
    let went_away = close(client, graceful, l, ready.fds);
    // h2 sends GOAWAY; h3 closes its QUIC connection with H3_NO_ERROR and
    // waits out QUIC's draining period (three probe timeouts), after which
    // the server has either had the close or the connection is gone.
    let multiplexed = match ls.protocol {
        Protocol::H2c | Protocol::H2Tls { .. } => {
            Some("h2 connections went away gracefully (GOAWAY, then closed)")
        }
        Protocol::H3 { .. } => Some(
            "h3 connections closed gracefully (CONNECTION_CLOSE with H3_NO_ERROR, then drained)",
        ),
        _ => None,
    };
    if let Some(what) = multiplexed.filter(|_| graceful) {
        if went_away != r.topology.connections as u64 {
            problems.push(format!("{went_away} of {} {what}", r.topology.connections));
        }
    }
    let after = ProcSnapshot::read_tree(l.pid)?;
    let fds_delta = after.fds as i64 - ready.fds as i64;
    if fds_delta != 0 {
        problems.push(format!(
            "after closing every connection the server holds {} file descriptors, {fds_delta:+} against READY's {}",
            after.fds, ready.fds
        ));
    }
    Ok(Cycle {
        cycle: n,
        handshakes,
        scheduled: report.scheduled,
        sent: report.sent,
        succeeded: report.succeeded,
        errors: report.errors_total(),
        expired: report.expired,
        late: report.late,
        p50_ns: report.latency.p50_ns,
        p99_ns: report.latency.p99_ns,
        went_away,
        fds_after: after.fds,
        fds_delta,
        rss_after_bytes: after.rss_kib * 1024,
        problems,
    })
}

pub(super) fn recovery_pass(
    rs: &RunSettings,
    case: &Case,
    r: &RecoveryCase,
    spec: &TargetSpec,
    objs: &mut Option<Vec<ObjectFact>>,
) -> Result<(RecoveryPass, Vec<String>), Fail> {
    let (l, arm_proof) = launch_pass(rs, case, spec, "recovery")?;
    record_objects(&l, objs);
    std::thread::sleep(Duration::from_millis(case.settle_ms));
    let measured = (|| -> Result<(ProcSnapshot, Vec<Cycle>), Fail> {
        let ready = ProcSnapshot::read_tree(l.pid)?;
        let mut cycles = Vec::new();
        for n in 1..=r.cycles {
            if crate::interrupt::requested() {
                return Err(Fail(crate::interrupt::interrupted_by()));
            }
            cycles.push(cycle(rs, case, r, spec, &l, &ready, n)?);
        }
        Ok((ready, cycles))
    })();
    let died = exited_reason("recovery", &l);
    let mut info = LaunchInfo::of(&l);
    info.arm_proof = arm_proof;
    let exit = stop(l);
    let (ready, cycles) =
        measured.map_err(|Fail(why)| failed("recovery", why, died.clone(), &exit))?;
    let mut reasons: Vec<String> = cycles
        .iter()
        .flat_map(|c| {
            c.problems
                .iter()
                .map(move |p| format!("recovery cycle {}: {p}", c.cycle))
        })
        .collect();
    reasons.extend(died);
    reasons.extend(oom_reason("recovery", &exit));
    let drift: Vec<(f64, f64)> = cycles
        .iter()
        .map(|c| (c.cycle as f64, c.rss_after_bytes as f64))
        .collect();
    Ok((
        RecoveryPass {
            launch: info,
            ready_fds: ready.fds,
            ready_rss_bytes: ready.rss_kib * 1024,
            rss_drift: least_squares(&drift),
            cycles,
            exit,
        },
        reasons,
    ))
}
