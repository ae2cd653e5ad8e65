//! The live pass: one server process through cycles of long-lived
//! connections (TCP echo, WebSocket, server-sent events), each cycle checked
//! on its own.
//!
//! What one request costs says little about a server that holds thousands
//! of connections open: the cost is in holding them, and in giving them
//! back. So each cycle opens the tier's connections (connecting), holds
//! them for the case's `duration_ms` (connected: TCP and WebSocket
//! connections send a message every `message_ms` and each echo must carry
//! the cycle, connection and sequence it was sent with; an SSE connection
//! must have had its first event and then heartbeats), closes them
//! (closing) and waits for the server to close its side (disconnected).
//! Meanwhile the server is sampled (RSS, PSS, FDs, threads, CPU); a sample
//! whose reading began in one phase and ended in another belongs to none.
//!
//! With probes (a run whose passes include `counted`), they are attached
//! once READY and each cycle's hold is one window: the generator waits
//! while rig opens it, after every connection opened, and while rig
//! closes it, after every hold ended, so the window counts the server's
//! work for exactly the hold's messages (TCP, WebSocket: echoes; SSE:
//! heartbeats), reported per message and per connection.
//!
//! A cycle fails on a connection that did not open, a wrong or missing
//! echo, a connection held without a message or an SSE connection without
//! heartbeats, a close the server did not answer (a client not reclaimed),
//! a hold the sampler never saw, or file descriptors after the close that
//! differ from READY's (the difference is reported per cycle).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::launch::spec::TargetSpec;
use crate::launch::start::{ExitInfo, Launched, ObjectFact};
use crate::load::live::{ConnLedger, LiveKind, LiveOutcome, LiveRun, LiveSpec, Pause, PhaseTimes};
use crate::probe::{ProbeSet, Scope, Stacks, WindowEnd, WindowStart};
use crate::report::Attribution;
use crate::sample::ProcSnapshot;
use crate::scenario::{Case, LiveCase, LiveProto};
use crate::symbolize::Symbolizer;

use super::*;

/// How long rig waits, after the clients closed, for the server to close
/// its side (it may learn of a close only when it next writes: an SSE
/// server at its next heartbeat).
const CLOSE_WAIT: Duration = Duration::from_secs(3);
/// Between two samples of the server.
const SAMPLE_EVERY: Duration = Duration::from_millis(20);
/// Samples taken once the server is back at READY's descriptors (or
/// [`CLOSE_WAIT`] passed): the disconnected phase.
const DISCONNECTED_SAMPLES: usize = 3;

/// The four phases of a cycle, in order.
pub const PHASES: [&str; 4] = ["connecting", "connected", "closing", "disconnected"];

/// What the server looked like during one phase, from the samples taken
/// wholly inside it.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct PhaseSample {
    pub phase: &'static str,
    pub samples: usize,
    pub rss_max_bytes: Option<u64>,
    pub pss_max_bytes: Option<u64>,
    pub fds_min: Option<u64>,
    pub fds_max: Option<u64>,
    pub threads_max: Option<u64>,
    /// Server CPU between the phase's first and last sample (needs two).
    pub server_cpu_ns: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct LiveCycle {
    /// 1-based.
    pub cycle: u32,
    /// Connections opened (of the case's `connections`).
    pub connected: u64,
    /// TCP/WebSocket: messages sent, and echoes equal to them; totals over
    /// the connections, then the least and most of one connection.
    pub sent: u64,
    pub echoed: u64,
    pub sent_min: u64,
    pub sent_max: u64,
    /// SSE: heartbeats (events after the first), and the least any
    /// connection needed: half the intervals the hold spans, at least 1.
    pub heartbeats: u64,
    pub heartbeats_min: u64,
    pub heartbeats_max: u64,
    pub heartbeats_needed: u64,
    /// Connections whose close the server answered.
    pub reclaimed: u64,
    /// Connection errors by message.
    pub errors: BTreeMap<String, u64>,
    /// Phase lengths, ms.
    pub connecting_ms: f64,
    pub connected_ms: f64,
    pub closing_ms: f64,
    pub phases: Vec<PhaseSample>,
    /// After the close: the server's descriptors, and their difference to
    /// READY's.
    pub fds_after: u64,
    pub fds_delta: i64,
    pub rss_after_bytes: u64,
    /// The generator thread's CPU over the cycle.
    pub client_cpu_ns: u64,
    /// The probes' counters over the hold, when probes were attached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probes: Option<LiveProbes>,
    /// Why this cycle failed; empty when it did not.
    pub problems: Vec<String>,
}

/// The probes' counts over one hold (the connected phase).
#[derive(Clone, Debug, Serialize)]
pub struct LiveProbes {
    /// What the counts are divided by: TCP/WebSocket echoes, SSE heartbeats
    /// the clients read during the hold.
    pub messages: u64,
    pub connections: u64,
    pub per_message: PerRequest,
    pub per_connection: PerRequest,
    /// Each system call by name, per message.
    pub syscalls_per_message: BTreeMap<String, f64>,
    /// Per family, its main measure per message at the top user sites (the
    /// first frame of each event's whole stack outside the allocators and
    /// standard libraries): where the server spends on a message.
    pub sites_per_message: Vec<LiveFamilySites>,
    /// The probes lost no event.
    pub complete: bool,
}

/// A family's top user sites in a live hold, per message.
#[derive(Clone, Debug, Serialize)]
pub struct LiveFamilySites {
    pub family: Family,
    /// `allocations`, `bytes copied`, `calls`, ...
    pub what: String,
    /// `(function (file:line), value per message)`, largest first.
    pub sites: Vec<(String, f64)>,
}

/// Sites listed per family.
const TOP_SITES: usize = 5;

#[derive(Clone, Debug, Serialize)]
pub struct LivePass {
    pub launch: LaunchInfo,
    /// What the connections opened: `tcp`, `ws /ws`, `sse /sse?…`.
    pub endpoint: String,
    pub ready_fds: u64,
    pub ready_rss_bytes: u64,
    pub cycles: Vec<LiveCycle>,
    pub exit: ExitInfo,
}

/// The spec that serves `proto`: the target itself, or its
/// `live_variant`; why neither does, for a skipped case.
pub fn live_spec(spec: &TargetSpec, proto: LiveProto) -> Result<TargetSpec, String> {
    let offers = |s: &TargetSpec| match proto {
        LiveProto::Tcp => s.protocols.tcp_echo,
        LiveProto::Ws => s.protocols.ws.is_some(),
        LiveProto::Sse => s.protocols.sse.is_some(),
    };
    if offers(spec) {
        return Ok(spec.clone());
    }
    let Some(p) = &spec.live_variant else {
        return Err(format!(
            "target {} offers no {} (no [protocols] {}, no live_variant)",
            spec.name,
            proto.name(),
            key(proto)
        ));
    };
    let v = TargetSpec::load(p).map_err(|e| format!("live_variant of {}: {e}", spec.name))?;
    if !offers(&v) {
        return Err(format!(
            "target {}'s live_variant {} offers no {} ([protocols] {})",
            spec.name,
            p.display(),
            proto.name(),
            key(proto)
        ));
    }
    Ok(v)
}

fn key(proto: LiveProto) -> &'static str {
    match proto {
        LiveProto::Tcp => "tcp_echo",
        LiveProto::Ws => "ws",
        LiveProto::Sse => "sse",
    }
}

pub(super) fn kind_of(spec: &TargetSpec, proto: LiveProto) -> (LiveKind, String) {
    match proto {
        LiveProto::Tcp => (LiveKind::Tcp, "tcp".into()),
        LiveProto::Ws => {
            let path = spec.protocols.ws.clone().expect("checked by live_spec");
            (LiveKind::Ws { path: path.clone() }, format!("ws {path}"))
        }
        LiveProto::Sse => {
            let path = spec.protocols.sse.as_ref().expect("checked").path.clone();
            (LiveKind::Sse { path: path.clone() }, format!("sse {path}"))
        }
    }
}

/// A sample with when its reading began and ended.
struct Timed {
    t0: Instant,
    t1: Instant,
    snap: ProcSnapshot,
}

fn sample(pid: u32) -> Option<Timed> {
    let t0 = Instant::now();
    let snap = ProcSnapshot::read_tree(pid).ok()?;
    Some(Timed {
        t0,
        t1: Instant::now(),
        snap,
    })
}

/// The phase a sample belongs to: the one its reading began and ended in.
/// `settled` is when rig saw the server back at READY's descriptors (or
/// gave up waiting): the clients' last close completed at
/// `t.disconnected`, but the server reclaims its side after that, so a
/// sample between the two belongs to no phase, and the disconnected phase
/// is what the server holds once it has settled.
fn phase_of(t: &PhaseTimes, settled: Instant, t0: Instant, t1: Instant) -> Option<usize> {
    let at = |i: Instant| {
        if i < t.connected {
            Some(0)
        } else if i < t.closing {
            Some(1)
        } else if i < t.disconnected {
            Some(2)
        } else if i < settled {
            None
        } else {
            Some(3)
        }
    };
    let p = at(t0)?;
    (t0 >= t.connecting && Some(p) == at(t1)).then_some(p)
}

fn phases(t: &PhaseTimes, settled: Instant, samples: &[Timed]) -> Vec<PhaseSample> {
    PHASES
        .iter()
        .enumerate()
        .map(|(i, &phase)| {
            let s: Vec<&ProcSnapshot> = samples
                .iter()
                .filter(|s| phase_of(t, settled, s.t0, s.t1) == Some(i))
                .map(|s| &s.snap)
                .collect();
            let cpu = match (s.first(), s.last()) {
                (Some(a), Some(b)) if s.len() >= 2 => Some(b.cpu_ns.saturating_sub(a.cpu_ns)),
                _ => None,
            };
            PhaseSample {
                phase,
                samples: s.len(),
                rss_max_bytes: s.iter().map(|p| p.rss_kib * 1024).max(),
                pss_max_bytes: s.iter().map(|p| p.pss_kib * 1024).max(),
                fds_min: s.iter().map(|p| p.fds).min(),
                fds_max: s.iter().map(|p| p.fds).max(),
                threads_max: s.iter().map(|p| p.threads).max(),
                server_cpu_ns: cpu,
            }
        })
        .collect()
}

/// The least heartbeats a held SSE connection must have had: half the
/// intervals the hold spans, and at least one. Half, not all: the
/// server's timer and this machine's scheduler may each be late, and a
/// cycle fails on a stream that stopped, not on a slow tick.
pub fn heartbeats_needed(hold: Duration, interval_ms: u64) -> u64 {
    ((hold.as_millis() as u64 / interval_ms.max(1)) / 2).max(1)
}

/// The checks of one cycle's ledgers.
pub fn problems(
    l: &LiveCase,
    conns: &[ConnLedger],
    heartbeats_needed: u64,
    hold_samples: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    let n = l.connections;
    let not = |f: &dyn Fn(&ConnLedger) -> bool| conns.iter().filter(|c| !f(c)).count();
    let first_error = |f: &dyn Fn(&ConnLedger) -> bool| {
        conns
            .iter()
            .enumerate()
            .find(|(_, c)| !f(c))
            .map(|(i, c)| format!("connection {i}: {}", c.error.as_deref().unwrap_or("-")))
            .unwrap_or_default()
    };
    let opened = |c: &ConnLedger| c.connected;
    if not(&opened) > 0 {
        out.push(format!(
            "phase connected missing: {} of {n} connections did not open (first: {})",
            not(&opened),
            first_error(&opened)
        ));
    }
    match l.protocol {
        LiveProto::Tcp | LiveProto::Ws => {
            let wrong = |c: &ConnLedger| !c.connected || c.echoed == c.sent;
            if not(&wrong) > 0 {
                out.push(format!(
                    "{} connections had an echo wrong or missing (first: {})",
                    not(&wrong),
                    first_error(&wrong)
                ));
            }
            let spoke = |c: &ConnLedger| !c.connected || c.sent > 0;
            if not(&spoke) > 0 {
                out.push(format!(
                    "{} connections were held without sending a message (hold shorter than message_ms?)",
                    not(&spoke)
                ));
            }
        }
        LiveProto::Sse => {
            let beat = |c: &ConnLedger| !c.connected || c.heartbeats >= heartbeats_needed;
            if not(&beat) > 0 {
                out.push(format!(
                    "SSE hold without heartbeat: {} connections got fewer than {heartbeats_needed} (least: {}; first: {})",
                    not(&beat),
                    conns.iter().filter(|c| c.connected).map(|c| c.heartbeats).min().unwrap_or(0),
                    first_error(&beat)
                ));
            }
        }
    }
    let reclaimed = |c: &ConnLedger| !c.connected || c.reclaimed;
    if not(&reclaimed) > 0 {
        out.push(format!(
            "{} clients not reclaimed: their close was not answered (first: {})",
            not(&reclaimed),
            first_error(&reclaimed)
        ));
    }
    if hold_samples == 0 {
        out.push(
            "phase connected missing: no sample of the server was taken inside the hold".into(),
        );
    }
    out
}

/// The probes of a live pass and what they need to name sites.
struct Probing<'a> {
    probes: ProbeSet,
    sym: &'a mut Symbolizer,
    wrappers: crate::report::stacks::Wrappers,
}

fn cycle(
    case: &Case,
    l: &LiveCase,
    spec: &TargetSpec,
    launched: &Launched,
    ready: &ProcSnapshot,
    n: u32,
    mut probing: Option<&mut Probing>,
) -> Result<LiveCycle, Fail> {
    let hold = Duration::from_millis(case.duration_ms);
    let (kind, _) = kind_of(spec, l.protocol);
    let (at_tx, at_rx) = std::sync::mpsc::channel();
    let (go_tx, go_rx) = std::sync::mpsc::channel();
    let pause = probing.is_some().then_some(Pause {
        at: at_tx,
        go: go_rx,
    });
    let run = LiveRun::start(
        LiveSpec {
            addr: std::net::SocketAddr::from(([127, 0, 0, 1], launched.port)),
            kind,
            connections: l.connections,
            cycle: n,
            hold,
            message_every: Duration::from_millis(l.message_ms),
        },
        pause,
    )?;
    let mut samples = Vec::new();
    let mut start: Option<WindowStart> = None;
    let mut window = None;
    let mut trouble: Option<String> = None;
    while !run.is_finished() {
        if let (Some(p), Ok(at)) = (probing.as_deref_mut(), at_rx.try_recv()) {
            match at {
                "connected" => match p.probes.start_window() {
                    Ok(s) => start = Some(s),
                    Err(e) => trouble = Some(format!("opening the probe window: {e}")),
                },
                _ => {
                    if let Some(s) = start.take() {
                        match p.probes.end_window(s, WindowEnd::Completed) {
                            Ok(w) => window = Some(w),
                            Err(e) => trouble = Some(format!("closing the probe window: {e}")),
                        }
                    }
                }
            }
            let _ = go_tx.send(());
            continue;
        }
        samples.extend(sample(launched.pid));
        std::thread::sleep(SAMPLE_EVERY);
    }
    let out: LiveOutcome = run.join()?;
    wait_for_fds(launched, ready.fds, CLOSE_WAIT);
    let settled = Instant::now();
    for _ in 0..DISCONNECTED_SAMPLES {
        samples.extend(sample(launched.pid));
        std::thread::sleep(SAMPLE_EVERY);
    }
    let after = ProcSnapshot::read_tree(launched.pid)?;
    let t = &out.times;
    let phases = phases(t, settled, &samples);
    let needed = match (&spec.protocols.sse, l.protocol) {
        (Some(s), LiveProto::Sse) => heartbeats_needed(hold, s.interval_ms),
        _ => 0,
    };
    let mut problems = problems(l, &out.conns, needed, phases[1].samples);
    problems.extend(trouble);
    let messages = match l.protocol {
        LiveProto::Sse => out.conns.iter().map(|c| c.heartbeats).sum(),
        _ => out.conns.iter().map(|c| c.echoed).sum(),
    };
    let probes = match (probing, window) {
        (Some(p), Some(w)) => {
            let a = Attribution::build_with(&w, Some(messages), None, p.sym, &p.wrappers);
            if !a.complete {
                problems.push(format!("the probes lost events: {:?}", a.losses));
            }
            Some(live_probes(a, messages, l.connections as u64))
        }
        _ => None,
    };
    let fds_delta = after.fds as i64 - ready.fds as i64;
    if fds_delta != 0 {
        problems.push(format!(
            "after every connection closed the server holds {} file descriptors, {fds_delta:+} against READY's {}",
            after.fds, ready.fds
        ));
    }
    let c = &out.conns;
    let open = || c.iter().filter(|c| c.connected);
    let ms = |a: Instant, b: Instant| b.duration_since(a).as_secs_f64() * 1e3;
    Ok(LiveCycle {
        cycle: n,
        connected: open().count() as u64,
        sent: c.iter().map(|c| c.sent).sum(),
        echoed: c.iter().map(|c| c.echoed).sum(),
        sent_min: open().map(|c| c.sent).min().unwrap_or(0),
        sent_max: open().map(|c| c.sent).max().unwrap_or(0),
        heartbeats: c.iter().map(|c| c.heartbeats).sum(),
        heartbeats_min: open().map(|c| c.heartbeats).min().unwrap_or(0),
        heartbeats_max: open().map(|c| c.heartbeats).max().unwrap_or(0),
        heartbeats_needed: needed,
        reclaimed: c.iter().filter(|c| c.reclaimed).count() as u64,
        errors: out.errors(),
        connecting_ms: ms(t.connecting, t.connected),
        connected_ms: ms(t.connected, t.closing),
        closing_ms: ms(t.closing, t.disconnected),
        phases,
        fds_after: after.fds,
        fds_delta,
        rss_after_bytes: after.rss_kib * 1024,
        client_cpu_ns: out.client_cpu_ns,
        probes,
        problems,
    })
}

fn live_probes(mut a: Attribution, messages: u64, connections: u64) -> LiveProbes {
    let syscalls_per_message = a
        .syscalls
        .iter()
        .filter_map(|r| {
            Some((
                r.name.clone(),
                crate::stats::per_request(r.count, Some(messages))?,
            ))
        })
        .collect();
    let per_message = PerRequest::of(&a);
    let recorded = crate::report::flame::input::Recorded::of(&a);
    let sites_per_message = crate::report::flame::sites::top(&recorded, TOP_SITES)
        .into_iter()
        .filter(|f| !f.sites.is_empty())
        .map(|f| LiveFamilySites {
            family: f.family,
            what: f.measure.what.to_string(),
            sites: f.sites.into_iter().map(|s| (s.site, s.value)).collect(),
        })
        .collect();
    a.window.requests = Some(connections);
    LiveProbes {
        messages,
        connections,
        per_message,
        per_connection: PerRequest::of(&a),
        syscalls_per_message,
        sites_per_message,
        complete: a.complete,
    }
}

pub(super) fn live_pass(
    rs: &RunSettings,
    case: &Case,
    l: &LiveCase,
    spec: &TargetSpec,
    sym: &mut Symbolizer,
    objs: &mut Option<Vec<ObjectFact>>,
) -> Result<(LivePass, Vec<String>), Fail> {
    let (launched, arm_proof) = launch_pass(rs, case, spec, "live")?;
    record_objects(&launched, objs);
    std::thread::sleep(Duration::from_millis(case.settle_ms));
    let measured = (|| -> Result<(ProcSnapshot, Vec<LiveCycle>), Fail> {
        // READY's descriptors are read before the probes attach: attaching
        // opens none in the target, but its sample is the server's own.
        let ready = ProcSnapshot::read_tree(launched.pid)?;
        let mut probing = match rs.passes.counted && !rs.families.is_empty() {
            // Whole stacks: each family's top user sites per message.
            true => Some(Probing {
                probes: ProbeSet::attach_with(launched.pid, &rs.families, Scope::Tree, Stacks::On)?,
                sym: &mut *sym,
                wrappers: crate::report::stacks::Wrappers::with_extra(&spec.wrappers),
            }),
            false => None,
        };
        let mut cycles = Vec::new();
        for n in 1..=l.cycles {
            if crate::interrupt::requested() {
                return Err(Fail(crate::interrupt::interrupted_by()));
            }
            cycles.push(cycle(
                case,
                l,
                spec,
                &launched,
                &ready,
                n,
                probing.as_mut(),
            )?);
        }
        Ok((ready, cycles))
    })();
    let died = exited_reason("live", &launched);
    let mut info = LaunchInfo::of(&launched);
    info.arm_proof = arm_proof;
    let exit = stop(launched);
    let (ready, cycles) = measured.map_err(|Fail(why)| failed("live", why, died.clone(), &exit))?;
    let mut reasons: Vec<String> = cycles
        .iter()
        .flat_map(|c| {
            c.problems
                .iter()
                .map(move |p| format!("live cycle {}: {p}", c.cycle))
        })
        .collect();
    reasons.extend(died);
    reasons.extend(oom_reason("live", &exit));
    Ok((
        LivePass {
            launch: info,
            endpoint: kind_of(spec, l.protocol).1,
            ready_fds: ready.fds,
            ready_rss_bytes: ready.rss_kib * 1024,
            cycles,
            exit,
        },
        reasons,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times() -> (Instant, PhaseTimes) {
        let t = Instant::now();
        let ms = Duration::from_millis;
        (
            t,
            PhaseTimes {
                connecting: t,
                connected: t + ms(10),
                closing: t + ms(20),
                disconnected: t + ms(30),
            },
        )
    }

    #[test]
    fn a_sample_across_a_phase_change_belongs_to_no_phase() {
        let (t, p) = times();
        let ms = Duration::from_millis;
        let settled = t + ms(35);
        assert_eq!(phase_of(&p, settled, t + ms(1), t + ms(2)), Some(0));
        assert_eq!(phase_of(&p, settled, t + ms(9), t + ms(11)), None);
        assert_eq!(phase_of(&p, settled, t + ms(12), t + ms(19)), Some(1));
        assert_eq!(phase_of(&p, settled, t + ms(25), t + ms(29)), Some(2));
        assert_eq!(phase_of(&p, settled, t + ms(29), t + ms(31)), None);
        // Between the clients' last close and the server settling: none.
        assert_eq!(phase_of(&p, settled, t + ms(31), t + ms(33)), None);
        assert_eq!(phase_of(&p, settled, t + ms(34), t + ms(36)), None);
        assert_eq!(phase_of(&p, settled, t + ms(36), t + ms(40)), Some(3));
    }

    #[test]
    fn heartbeats_needed_is_half_the_intervals_and_at_least_one() {
        assert_eq!(heartbeats_needed(Duration::from_millis(1000), 200), 2);
        assert_eq!(heartbeats_needed(Duration::from_millis(100), 200), 1);
        assert_eq!(heartbeats_needed(Duration::from_millis(2000), 100), 10);
    }

    fn echo_case() -> LiveCase {
        LiveCase {
            protocol: LiveProto::Ws,
            connections: 3,
            cycles: 1,
            message_ms: 100,
        }
    }

    fn ok() -> ConnLedger {
        ConnLedger {
            connected: true,
            sent: 5,
            echoed: 5,
            heartbeats: 0,
            reclaimed: true,
            error: None,
        }
    }

    #[test]
    fn a_cycle_whose_ledgers_add_up_has_no_problem() {
        assert!(problems(&echo_case(), &[ok(), ok(), ok()], 0, 4).is_empty());
    }

    #[test]
    fn a_wrong_echo_and_an_unanswered_close_fail_the_cycle_with_their_reason() {
        let mut wrong = ok();
        wrong.echoed = 0;
        wrong.error = Some("wrong echo: sent `c1 n1 s1`, got `xc1 n1 s1`".into());
        let mut kept = ok();
        kept.reclaimed = false;
        let p = problems(&echo_case(), &[ok(), wrong, kept], 0, 4);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("1 connections had an echo wrong or missing (first: connection 1: wrong echo: sent `c1 n1 s1`, got `xc1 n1 s1`)"), "{p:?}");
        assert!(p[1].starts_with("1 clients not reclaimed"), "{p:?}");
    }

    #[test]
    fn an_sse_hold_without_heartbeat_and_a_hold_never_sampled_fail() {
        let mut l = echo_case();
        l.protocol = LiveProto::Sse;
        let mut beat = ok();
        beat.heartbeats = 3;
        let mut silent = ok();
        silent.heartbeats = 0;
        let p = problems(&l, &[beat.clone(), silent], 2, 0);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].starts_with(
                "SSE hold without heartbeat: 1 connections got fewer than 2 (least: 0"
            ),
            "{p:?}"
        );
        assert!(p[1].contains("no sample of the server"), "{p:?}");
        assert!(problems(&l, &[beat], 2, 1).is_empty());
    }
}
