//! One case: fresh server per pass, validated load, samples, probes.
//!
//! In: [`RunSettings`] and a [`Case`] of the expanded matrix. Out: a
//! [`CaseResult`] (a failed case is data: its reasons, and what the server's
//! exit said). The runner of `rig run`, `rig ab` and `rig gate`: the clean
//! pass (no probes: throughput, latency, CPU, memory), the counted pass (one
//! fixed-count window, [`crate::window`]) and the memory pass, each on its
//! own fresh server; memslope, recovery and live cases have a pass of
//! their own.

mod clean;
mod counted;
mod live;
pub mod liveheap;
mod memory;
mod memslope;
mod recovery;
mod request;
mod server;
mod soak;

use clean::*;
pub use counted::counted_metrics;
use counted::*;
use live::live_pass;
pub use live::{live_spec, LiveCycle, LivePass, LiveProbes, PhaseSample};
use memory::*;
use memslope::memslope_pass;
pub use memslope::{ConnPoint, MemSlopePass, MIN_R2};
use recovery::recovery_pass;
pub use recovery::{Cycle, RecoveryPass};
use request::*;
use server::*;
use soak::soak_pass;
pub use soak::{SoakInterval, SoakPass, SoakSite, SoakWindow};

use std::cell::Cell;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::launch::port::PortProof;
use crate::launch::spec::TargetSpec;
use crate::launch::start::{ExitInfo, Launched, ObjectFact};
use crate::load::LoadReport;
use crate::report::Attribution;
use crate::sample::{CgroupSnapshot, ProcSnapshot};
use crate::scenario::{Case, CaseKind, Proto};
use crate::symbolize::Symbolizer;

use crate::probe::Family;
use crate::scenario::Matrix;

pub use crate::metrics::PerRequest;

/// How the target was launched for one pass.
#[derive(Clone, Debug, Serialize)]
pub struct LaunchInfo {
    pub pid: u32,
    pub port: u16,
    pub ready_ms: f64,
    pub affinity: Vec<usize>,
    pub proof: PortProof,
    pub notes: Vec<String>,
    pub exe_sha256: String,
    /// `rig ab`: the arm's binary/libraries, proven mapped by hash.
    pub arm_proof: Option<crate::launch::identity::ArmProof>,
    /// The target's real uid and gid (after any `user` drop).
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

impl LaunchInfo {
    fn of(l: &Launched) -> LaunchInfo {
        LaunchInfo {
            pid: l.pid,
            port: l.port,
            ready_ms: l.ready_after.as_secs_f64() * 1e3,
            affinity: l.affinity.clone(),
            proof: l.proof.clone(),
            notes: l.notes.clone(),
            exe_sha256: l.exe.sha256.clone(),
            arm_proof: None,
            uid: l.runs_as.map(|r| r.uid),
            gid: l.runs_as.map(|r| r.gid),
        }
    }
}

/// The server's own accounting over the measured window.
#[derive(Clone, Debug, Serialize, Default)]
pub struct ServerUsage {
    /// schedstat CPU ns (all live threads) / successful requests.
    pub cpu_us_per_request: Option<f64>,
    pub cpu_ns: u64,
    pub minflt_per_request: Option<f64>,
    pub majflt: u64,
    pub voluntary_cs_per_request: Option<f64>,
    pub involuntary_cs_per_request: Option<f64>,
    pub rss_max_kib: u64,
    pub pss_max_kib: u64,
    pub vm_hwm_kib: u64,
    pub threads_max: u64,
    pub fds_max: u64,
    pub cgroup_peak_bytes: Option<u64>,
    pub oom_kills: u64,
    pub throttled_ns: Option<u64>,
    pub samples: usize,
}

#[derive(Clone, Debug, Serialize)]
pub struct CleanPass {
    pub launch: LaunchInfo,
    pub load: LoadReport,
    pub server: ServerUsage,
    /// Load generator CPU µs per successful request.
    pub client_us_per_request: f64,
    /// Why the generator, not the server, limited this pass: `Some`
    /// exactly when the case is `limited` by it (more than 1% of the
    /// scheduled requests sent late by the generator).
    pub generator_limited: Option<String>,
    /// Share of the generator threads' time spent working (spinning toward
    /// send times excluded), 0 to 1: a number beside the case, not a
    /// verdict.
    pub generator_busy: f64,
    pub exit: ExitInfo,
    /// The 50 ms samples of the pass (warm-up included, `t_ms` from the
    /// sampler's start): memory and CPU over time for report.html.
    pub series: Vec<crate::sample::Point>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CountedPass {
    pub launch: LaunchInfo,
    pub load: LoadReport,
    pub per_request: PerRequest,
    pub attribution: Attribution,
    pub exit: ExitInfo,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemoryPass {
    pub launch: LaunchInfo,
    pub settle_ms: u64,
    pub proc: ProcSnapshot,
    pub cgroup: Option<CgroupSnapshot>,
    pub exit: ExitInfo,
}

#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    Ok,
    /// Measured, but more than 1% of the scheduled requests were late
    /// because of the load generator (not the server): its latency is
    /// partly the generator's. The reason says how many.
    Limited,
    Failed,
    Skipped,
}

impl Status {
    /// The case produced measurements (possibly generator-limited).
    pub fn measured(self) -> bool {
        matches!(self, Status::Ok | Status::Limited)
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    #[serde(flatten)]
    pub case: Case,
    pub status: Status,
    pub reasons: Vec<String>,
    /// What is true of the case's measurements without failing it (a
    /// keep-alive case whose server closed its connections).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    pub memory: Option<MemoryPass>,
    /// A memslope case: memory against open connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memslope: Option<MemSlopePass>,
    /// A recovery case: its cycles.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recovery: Option<RecoveryPass>,
    /// A soak case: its intervals and drift.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub soak: Option<SoakPass>,
    /// A live case: its cycles of long-lived connections.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub live: Option<LivePass>,
    pub clean: Option<CleanPass>,
    pub counted: Option<CountedPass>,
    pub elapsed_ms: u64,
    /// The executable and mapped objects of this case's first launch (for
    /// the manifest; not repeated per case).
    #[serde(skip)]
    pub objects: Option<Vec<ObjectFact>>,
}

impl CaseResult {
    /// A result of `case` with no pass run yet.
    fn new(case: &Case, status: Status, reasons: Vec<String>) -> CaseResult {
        CaseResult {
            case: case.clone(),
            status,
            reasons,
            warnings: Vec::new(),
            memory: None,
            memslope: None,
            recovery: None,
            soak: None,
            live: None,
            clean: None,
            counted: None,
            elapsed_ms: 0,
            objects: None,
        }
    }

    pub fn skipped(case: &Case, why: String) -> CaseResult {
        CaseResult::new(case, Status::Skipped, vec![why])
    }
}

/// A case failed for this reason; the run moves on.
struct Fail(String);

impl<E: std::fmt::Display> From<E> for Fail {
    fn from(e: E) -> Fail {
        Fail(format!("{e:#}"))
    }
}

/// The spec to launch for `case`: the target, or its TLS variant.
pub fn spec_for<'a>(
    case: &Case,
    spec: &'a TargetSpec,
    tls: Option<&'a TargetSpec>,
) -> Result<&'a TargetSpec, String> {
    let protocol = case.what.listener_protocol();
    let offers = |s: &TargetSpec, p: Proto| match p {
        Proto::H1 => s.protocols.h1,
        Proto::H2c => s.protocols.h2c,
        Proto::H2Tls => s.protocols.h2_tls.is_some(),
        Proto::H3 => s.protocols.h3.is_some(),
    };
    let needs_tls = protocol.is_some_and(Proto::needs_tls);
    let s = if needs_tls && !offers(spec, protocol.expect("needs_tls")) {
        tls.ok_or_else(|| {
            format!(
                "target {} offers no TLS listener (no h2_tls, no tls_variant)",
                spec.name
            )
        })?
    } else {
        spec
    };
    let offered = protocol.is_none_or(|p| offers(s, p));
    if !offered {
        return Err(format!(
            "target {} does not offer {}",
            s.name,
            protocol.map_or("-", Proto::name)
        ));
    }
    if let Some(p) = case.http().map(|h| &h.path) {
        if !s.endpoints.iter().any(|e| &e.path == p) {
            return Err(format!("target {} has no endpoint {p}", s.name));
        }
    }
    Ok(s)
}

/// The request timeout and the deadline of the case this thread runs.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub request_timeout: Duration,
    pub deadline: Instant,
}

thread_local! {
    static LIMITS: Cell<Option<Limits>> = const { Cell::new(None) };
}

/// The limits of the case running on this thread (every load of its
/// passes is built with them, see `load_spec`).
pub(crate) fn limits() -> Option<Limits> {
    LIMITS.get()
}

/// After the deadline, how long a case may still take before rig stops
/// its target: the loads end at the deadline by themselves; this ends
/// what is not a load (a quiesce, a connection of a live case).
const STOP_AFTER_DEADLINE: Duration = Duration::from_secs(30);

/// Run every pass of one case, within its `case_timeout_ms`. Never panics
/// on target trouble: failures are reasons in the result.
pub fn run_case(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    tls: Option<&TargetSpec>,
    sym: &mut Symbolizer,
) -> CaseResult {
    let t0 = Instant::now();
    let timeout = Duration::from_millis(case.case_timeout_ms);
    let deadline = t0 + timeout;
    LIMITS.set(Some(Limits {
        request_timeout: Duration::from_millis(case.request_timeout_ms),
        deadline,
    }));
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let id = case.id.clone();
    let watchdog = std::thread::Builder::new()
        .name("rig-case-deadline".into())
        .spawn(move || {
            let stop = wait.recv_timeout(timeout + STOP_AFTER_DEADLINE);
            if stop == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                crate::errln!(
                    "rig: case {id}: still running {} s after its deadline: stopping its target",
                    STOP_AFTER_DEADLINE.as_secs()
                );
                crate::launch::start::cleanup_all();
            }
        })
        .ok();
    let mut res = run_passes(rs, case, spec, tls, sym);
    drop(done);
    if let Some(w) = watchdog {
        let _ = w.join();
    }
    LIMITS.set(None);
    if Instant::now() >= deadline && res.status != Status::Skipped {
        res.status = Status::Failed;
        res.reasons.push(format!(
            "timed out: the case did not finish within case_timeout_ms = {} ({}): its load \
             stopped there (requests cut short failed as `timeout`, those never sent as `{}`)",
            case.case_timeout_ms,
            humantime::format_duration(timeout),
            crate::load::DEADLINE
        ));
    }
    res.elapsed_ms = t0.elapsed().as_millis() as u64;
    res
}

fn run_passes(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    tls: Option<&TargetSpec>,
    sym: &mut Symbolizer,
) -> CaseResult {
    let t0 = Instant::now();
    let mut res = CaseResult::new(case, Status::Ok, Vec::new());
    let spec = match spec_for(case, spec, tls) {
        Ok(s) => s,
        Err(why) => return CaseResult::skipped(case, why),
    };
    match &case.what {
        CaseKind::Memory { .. } => match memory_pass(rs, case, spec, &mut res.objects) {
            Ok((m, reasons)) => {
                res.memory = Some(m);
                res.reasons.extend(reasons);
            }
            Err(Fail(why)) => res.reasons.push(format!("memory: {why}")),
        },
        CaseKind::MemSlope(m) => {
            // Live connections are served by the target or its live variant.
            let live = match &m.conn {
                crate::scenario::MemSlopeConn::Live(p) => match live_spec(spec, *p) {
                    Ok(s) => Some(s),
                    Err(why) => return CaseResult::skipped(case, why),
                },
                crate::scenario::MemSlopeConn::Http { .. } => None,
            };
            let spec = live.as_ref().unwrap_or(spec);
            match memslope_pass(rs, case, m, spec, sym, &mut res.objects) {
                Ok((p, reasons)) => {
                    res.memslope = Some(p);
                    res.reasons.extend(reasons);
                }
                Err(Fail(why)) => res.reasons.push(format!("memslope: {why}")),
            }
        }
        CaseKind::Recovery(r) => match recovery_pass(rs, case, r, spec, &mut res.objects) {
            Ok((p, reasons)) => {
                res.recovery = Some(p);
                res.reasons.extend(reasons);
            }
            Err(Fail(why)) => res.reasons.push(format!("recovery: {why}")),
        },
        CaseKind::Soak(k) => match soak_pass(rs, case, k, spec, sym, &mut res.objects) {
            Ok((p, reasons)) => {
                res.soak = Some(p);
                res.reasons.extend(reasons);
            }
            Err(Fail(why)) => res.reasons.push(format!("soak: {why}")),
        },
        CaseKind::Live(l) => match live_spec(spec, l.protocol) {
            Err(why) => return CaseResult::skipped(case, why),
            Ok(ls) => match live_pass(rs, case, l, &ls, sym, &mut res.objects) {
                Ok((p, reasons)) => {
                    res.live = Some(p);
                    res.reasons.extend(reasons);
                }
                Err(Fail(why)) => res.reasons.push(format!("live: {why}")),
            },
        },
        CaseKind::Http(http) => {
            if rs.passes.clean {
                match clean_pass(rs, case, http, spec, &mut res.objects) {
                    Ok((p, reasons)) => {
                        res.clean = Some(p);
                        res.reasons.extend(reasons);
                    }
                    Err(Fail(why)) => res.reasons.push(format!("clean pass: {why}")),
                }
            }
            // A case past its deadline launches no further pass.
            let late = limits().is_some_and(|l| Instant::now() >= l.deadline);
            if rs.passes.counted && !rs.families.is_empty() && !late {
                match counted_pass(rs, case, http, spec, sym, &mut res.objects) {
                    Ok((p, reasons)) => {
                        res.counted = Some(p);
                        res.reasons.extend(reasons);
                    }
                    Err(Fail(why)) => res.reasons.push(format!("counted pass: {why}")),
                }
            }
        }
    }
    res.warnings.extend(keepalive_warnings(case, &res));
    if !res.reasons.is_empty() {
        res.status = Status::Failed;
    } else if let Some(why) = res.clean.as_ref().and_then(|c| c.generator_limited.clone()) {
        res.status = Status::Limited;
        res.reasons.push(why);
    } else if let Some(why) = res.soak.as_ref().and_then(SoakPass::limited) {
        res.status = Status::Limited;
        res.reasons.push(why);
    }
    res.elapsed_ms = t0.elapsed().as_millis() as u64;
    res
}

/// A keep-alive HTTP/1.1 case whose server closed the connections
/// (HTTP/1.0 answers, `Connection: close`): the generator reconnected, so
/// the case labelled `ka` measured connection set-up too. Said per pass,
/// with the handshakes its measured load made.
fn keepalive_warnings(case: &Case, res: &CaseResult) -> Vec<String> {
    let Some(h) = case.http() else {
        return Vec::new();
    };
    if h.protocol != Proto::H1 || !h.keepalive {
        return Vec::new();
    }
    let clean = res.clean.as_ref().map(|c| ("clean", &c.load));
    let counted = res.counted.as_ref().map(|c| ("counted", &c.load));
    clean
        .into_iter()
        .chain(counted)
        .filter(|(_, l)| l.handshakes.tcp > 0)
        .map(|(pass, l)| {
            format!(
                "{pass} pass: a keep-alive case, but the server closed its connections \
                 (HTTP/1.0 or `Connection: close` answers): {} TCP handshakes for {} requests, \
                 so connection set-up is in this case's costs",
                l.handshakes.tcp, l.sent
            )
        })
        .collect()
}

#[derive(Clone, Copy, Debug, Serialize)]
pub struct Passes {
    pub clean: bool,
    pub counted: bool,
}

impl Passes {
    pub fn parse(s: &str) -> Result<Passes, String> {
        let mut p = Passes {
            clean: false,
            counted: false,
        };
        for part in s.split(',').map(str::trim) {
            match part {
                "clean" => p.clean = true,
                "counted" => p.counted = true,
                other => {
                    return Err(format!(
                        "--passes: unknown pass `{other}`; use clean, counted or clean,counted"
                    ))
                }
            }
        }
        Ok(p)
    }
}

#[derive(Clone, Debug)]
pub struct RunSettings {
    /// Each target with its TLS variant, if it has one.
    pub targets: Vec<(TargetSpec, Option<TargetSpec>)>,
    pub matrix_path: PathBuf,
    pub matrix: Matrix,
    pub suites: Vec<String>,
    pub out: PathBuf,
    pub families: Vec<Family>,
    pub passes: Passes,
    pub repeats: Option<u32>,
    pub server_cpus: Option<Vec<usize>>,
    pub client_cpus: Option<Vec<usize>>,
    pub memory_mib: Option<u64>,
    pub cpu_quota: Option<f64>,
    pub argv: Vec<String>,
    /// `rig ab`: prove every launch maps the arm's own binary and libraries.
    pub verify_arms: bool,
    /// Open loop: the generator's spin window; `None`: calibrated.
    pub spin: Option<std::time::Duration>,
}
