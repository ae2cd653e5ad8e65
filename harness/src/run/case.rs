//! One case: fresh server per pass, validated load, samples, probes.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::load::{
    Client, Endpoint as LoadEndpoint, Expect, ExpectBody, LoadReport, LoadSpec, Mode, Protocol,
};
use crate::probe::{Family, ProbeSet, Scope, WindowEnd};
use crate::report::Attribution;
use crate::sample::{CgroupSnapshot, ProcSnapshot, Sampler, Samples};
use crate::scenario::{Case, LoadShape, Proto, SuiteKind};
use crate::symbolize::Symbolizer;
use crate::target::launch::{launch, ExitInfo, LaunchOptions, Launched, ObjectFact};
use crate::target::port::PortProof;
use crate::target::spec::{Body, TargetSpec};

use super::RunSettings;

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
    pub arm_proof: Option<crate::ab::identity::ArmProof>,
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
    /// Why the generator, not the server, may have limited this pass.
    pub generator_saturated: Option<String>,
    pub exit: ExitInfo,
}

/// Per-request counters of the counted pass (exact window differences).
#[derive(Clone, Debug, Serialize, Default)]
pub struct PerRequest {
    pub syscalls: Option<f64>,
    pub allocations: Option<f64>,
    pub alloc_bytes: Option<f64>,
    pub frees: Option<f64>,
    pub copy_bytes: Option<f64>,
    pub copy_calls: Option<f64>,
    pub lock_acquisitions: Option<f64>,
    pub contended: Option<f64>,
    pub page_faults: Option<f64>,
    pub voluntary_cs: Option<f64>,
    pub involuntary_cs: Option<f64>,
}

impl PerRequest {
    pub fn of(a: &Attribution) -> PerRequest {
        let n = match a.window.requests {
            Some(n) if n > 0 => n as f64,
            _ => return PerRequest::default(),
        };
        let has = |f: Family| a.families.contains(&f);
        let per = |v: u64| v as f64 / n;
        PerRequest {
            syscalls: has(Family::Syscalls).then(|| per(a.syscalls.iter().map(|r| r.count).sum())),
            allocations: has(Family::Alloc).then(|| per(a.alloc_totals.allocations)),
            alloc_bytes: has(Family::Alloc).then(|| per(a.alloc_totals.bytes)),
            frees: has(Family::Alloc).then(|| per(a.alloc_totals.frees)),
            copy_bytes: has(Family::Copy).then(|| per(a.copy.iter().map(|r| r.bytes).sum())),
            copy_calls: has(Family::Copy).then(|| per(a.copy.iter().map(|r| r.calls).sum())),
            lock_acquisitions: has(Family::Locks).then(|| {
                per(a
                    .locks
                    .iter()
                    .filter(|r| r.op != "unlock")
                    .map(|r| r.acquired)
                    .sum())
            }),
            contended: has(Family::Locks).then(|| per(a.locks.iter().map(|r| r.contended).sum())),
            page_faults: has(Family::Faults).then(|| per(a.faults.iter().map(|r| r.count).sum())),
            voluntary_cs: has(Family::Sched).then(|| per(a.sched.voluntary)),
            involuntary_cs: has(Family::Sched).then(|| per(a.sched.involuntary)),
        }
    }
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
    Failed,
    Skipped,
}

#[derive(Clone, Debug, Serialize)]
pub struct CaseResult {
    #[serde(flatten)]
    pub case: Case,
    pub status: Status,
    pub reasons: Vec<String>,
    pub memory: Option<MemoryPass>,
    pub clean: Option<CleanPass>,
    pub counted: Option<CountedPass>,
    pub elapsed_ms: u64,
    /// The executable and mapped objects of this case's first launch (for
    /// the manifest; not repeated per case).
    #[serde(skip)]
    pub objects: Option<Vec<ObjectFact>>,
}

impl CaseResult {
    pub fn skipped(case: &Case, why: String) -> CaseResult {
        CaseResult {
            case: case.clone(),
            status: Status::Skipped,
            reasons: vec![why],
            memory: None,
            clean: None,
            counted: None,
            elapsed_ms: 0,
            objects: None,
        }
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
    let needs_tls = case.protocol == Some(Proto::H2Tls);
    let s = if needs_tls && spec.protocols.h2_tls.is_none() {
        tls.ok_or_else(|| {
            format!(
                "target {} offers no TLS listener (no h2_tls, no tls_variant)",
                spec.name
            )
        })?
    } else {
        spec
    };
    let offered = match case.protocol {
        None => true,
        Some(Proto::H1) => s.protocols.h1,
        Some(Proto::H2c) => s.protocols.h2c,
        Some(Proto::H2Tls) => s.protocols.h2_tls.is_some(),
    };
    if !offered {
        return Err(format!(
            "target {} does not offer {}",
            s.name,
            case.protocol.map_or("-", Proto::name)
        ));
    }
    if let Some(p) = &case.path {
        if !s.endpoints.iter().any(|e| &e.path == p) {
            return Err(format!("target {} has no endpoint {p}", s.name));
        }
    }
    Ok(s)
}

fn record_objects(l: &Launched, objs: &mut Option<Vec<ObjectFact>>) {
    if objs.is_none() {
        let mut all = vec![l.exe.clone()];
        all.extend(l.objects.iter().cloned());
        *objs = Some(all);
    }
}

/// Launch a fresh target for one pass; for `rig ab`, refuse it unless the
/// arm's binary and libraries are what it mapped.
fn launch_pass(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    pass: &str,
) -> Result<(Launched, Option<crate::ab::identity::ArmProof>), Fail> {
    let l = launch(spec, &launch_opts(rs, case, pass))?;
    if !rs.verify_arms {
        return Ok((l, None));
    }
    let proof = crate::ab::identity::expected_objects(spec)
        .and_then(|e| crate::ab::identity::verify(&case.target_name, &e, &l));
    match proof {
        Ok(p) => Ok((l, Some(p))),
        Err(why) => {
            stop(l);
            Err(Fail(why))
        }
    }
}

fn launch_opts(rs: &RunSettings, case: &Case, pass: &str) -> LaunchOptions {
    LaunchOptions {
        server_cpus: rs.server_cpus.clone(),
        memory_limit_mib: rs.memory_mib,
        cpu_quota: rs.cpu_quota,
        ready_timeout: None,
        label: format!("{}-{pass}", case.target_name),
    }
}

fn load_spec(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    port: u16,
) -> Result<LoadSpec, Fail> {
    let path = case
        .path
        .clone()
        .ok_or_else(|| Fail("http case without a path".into()))?;
    let ep = spec
        .endpoints
        .iter()
        .find(|e| e.path == path)
        .ok_or_else(|| Fail(format!("no endpoint {path}")))?;
    let body = match &ep.body {
        None => ExpectBody::Any,
        Some(Body::Literal(s)) => ExpectBody::Exact(s.clone().into_bytes().into()),
        Some(Body::File(f)) => ExpectBody::Exact(
            std::fs::read(f)
                .map_err(|e| Fail(format!("endpoint {path}: body file {}: {e}", f.display())))?
                .into(),
        ),
        Some(Body::Sha256(hex)) => {
            let mut h = [0u8; 32];
            for (i, b) in h.iter_mut().enumerate() {
                *b = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16)
                    .map_err(|_| Fail(format!("endpoint {path}: bad sha256")))?;
            }
            ExpectBody::Sha256(h)
        }
    };
    let protocol = match case.protocol {
        Some(Proto::H1) => Protocol::H1 {
            keepalive: case.keepalive,
        },
        Some(Proto::H2c) => Protocol::H2c,
        Some(Proto::H2Tls) => {
            let t = spec.protocols.h2_tls.as_ref().expect("checked by spec_for");
            Protocol::H2Tls {
                ca_pem: t.ca.clone(),
                server_name: t.server_name.clone(),
            }
        }
        None => return Err(Fail("http case without a protocol".into())),
    };
    let topo = case
        .topology
        .ok_or_else(|| Fail("http case without a topology".into()))?;
    Ok(LoadSpec {
        addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port),
        protocol,
        endpoint: LoadEndpoint {
            path,
            expect: Expect {
                status: ep.status,
                content_type: ep.content_type.clone(),
                body,
            },
        },
        connections: topo.connections,
        streams: topo.streams,
        client_cpus: rs.client_cpus.clone(),
        threads: None,
    })
}

/// A keep-alive topology of C connections must have made exactly C TCP
/// handshakes (and C TLS / h2 handshakes where the protocol has them) before
/// any load: otherwise the topology measured is not the one asked for.
fn handshake_mismatch(ls: &LoadSpec, hs: crate::load::Handshakes) -> Option<String> {
    let c = ls.connections as u64;
    let want = match &ls.protocol {
        Protocol::H1 { keepalive: false } => return None,
        Protocol::H1 { keepalive: true } => (c, 0, 0),
        Protocol::H2c => (c, 0, c),
        Protocol::H2Tls { .. } => (c, c, c),
        Protocol::H1Tls { .. } => (c, c, 0),
    };
    let got = (hs.tcp, hs.tls, hs.h2);
    (got != want).then(|| {
        format!(
            "topology {}x{}: expected {want:?} (tcp, tls, h2) handshakes, made {got:?}",
            ls.connections, ls.streams
        )
    })
}

/// Failed responses and broken accounting make a pass fail, with the reason.
fn check_load(pass: &str, r: &LoadReport) -> Vec<String> {
    let mut reasons = Vec::new();
    if r.errors_total() > 0 {
        let kinds = r
            .errors
            .iter()
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", ");
        reasons.push(format!(
            "{pass} pass: {} of {} responses failed validation or transport ({kinds})",
            r.errors_total(),
            r.sent
        ));
    }
    if let Err(e) = r.check_invariants() {
        reasons.push(format!("{pass} pass: load accounting does not add up: {e}"));
    }
    if r.succeeded == 0 {
        reasons.push(format!("{pass} pass: no successful request"));
    }
    reasons
}

fn exited_reason(pass: &str, l: &Launched) -> Option<String> {
    l.has_exited().then(|| {
        format!(
            "{pass} pass: the target exited during the case; stderr tail: {}",
            tail(&l.stderr_tail())
        )
    })
}

fn tail(s: &str) -> String {
    let t: String = s
        .chars()
        .rev()
        .take(400)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    t.trim().to_string()
}

fn stop(l: Launched) -> ExitInfo {
    l.stop(Duration::from_secs(2))
}

fn oom_reason(pass: &str, exit: &ExitInfo) -> Option<String> {
    let kills = exit.cgroup.as_ref().and_then(|c| c.oom_kills).unwrap_or(0);
    (kills > 0).then(|| {
        format!(
            "{pass} pass: OOM: the kernel killed {kills} process(es) of the target at its memory limit ({}); peak {} bytes",
            exit.describe(),
            exit.cgroup.as_ref().and_then(|c| c.mem_peak_bytes).unwrap_or(0)
        )
    })
}

/// Run every pass of one case. Never panics on target trouble: failures are
/// reasons in the result.
pub fn run_case(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    tls: Option<&TargetSpec>,
    sym: &mut Symbolizer,
) -> CaseResult {
    let t0 = Instant::now();
    let mut res = CaseResult {
        case: case.clone(),
        status: Status::Ok,
        reasons: Vec::new(),
        memory: None,
        clean: None,
        counted: None,
        elapsed_ms: 0,
        objects: None,
    };
    let spec = match spec_for(case, spec, tls) {
        Ok(s) => s,
        Err(why) => return CaseResult::skipped(case, why),
    };
    match case.kind {
        SuiteKind::Memory => match memory_pass(rs, case, spec, &mut res.objects) {
            Ok((m, reasons)) => {
                res.memory = Some(m);
                res.reasons.extend(reasons);
            }
            Err(Fail(why)) => res.reasons.push(format!("memory: {why}")),
        },
        SuiteKind::Http => {
            if rs.passes.clean {
                match clean_pass(rs, case, spec, &mut res.objects) {
                    Ok((p, reasons)) => {
                        res.clean = Some(p);
                        res.reasons.extend(reasons);
                    }
                    Err(Fail(why)) => res.reasons.push(format!("clean pass: {why}")),
                }
            }
            if rs.passes.counted && !rs.families.is_empty() {
                match counted_pass(rs, case, spec, sym, &mut res.objects) {
                    Ok((p, reasons)) => {
                        res.counted = Some(p);
                        res.reasons.extend(reasons);
                    }
                    Err(Fail(why)) => res.reasons.push(format!("counted pass: {why}")),
                }
            }
        }
    }
    if !res.reasons.is_empty() {
        res.status = Status::Failed;
    }
    res.elapsed_ms = t0.elapsed().as_millis() as u64;
    res
}

fn memory_pass(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    objs: &mut Option<Vec<ObjectFact>>,
) -> Result<(MemoryPass, Vec<String>), Fail> {
    let (l, arm_proof) = launch_pass(rs, case, spec, "memory")?;
    record_objects(&l, objs);
    std::thread::sleep(Duration::from_millis(case.settle_ms));
    let proc = ProcSnapshot::read_tree(l.pid);
    let cgroup = l
        .cgroup_handle()
        .and_then(|h| CgroupSnapshot::read(&h).ok());
    let died = exited_reason("memory", &l);
    let mut info = LaunchInfo::of(&l);
    info.arm_proof = arm_proof;
    let exit = stop(l);
    let proc = proc.map_err(|e| {
        failed(
            "memory",
            format!("reading /proc of the idle target: {e}"),
            died.clone(),
            &exit,
        )
    })?;
    let mut reasons: Vec<String> = died.into_iter().collect();
    reasons.extend(oom_reason("memory", &exit));
    Ok((
        MemoryPass {
            launch: info,
            settle_ms: case.settle_ms,
            proc,
            cgroup,
            exit,
        },
        reasons,
    ))
}

fn shape_mode(case: &Case, d: Duration) -> Mode {
    match case.load {
        Some(LoadShape::Open { rate }) => Mode::Open { rate, duration: d },
        _ => Mode::Closed { duration: d },
    }
}

fn usage(
    before: &ProcSnapshot,
    after: &ProcSnapshot,
    samples: &Samples,
    ok: u64,
    exit: &ExitInfo,
) -> ServerUsage {
    let d = after.since(before);
    let per = |v: u64| (ok > 0).then(|| v as f64 / ok as f64);
    ServerUsage {
        cpu_us_per_request: per(d.cpu_ns).map(|v| v / 1e3),
        cpu_ns: d.cpu_ns,
        minflt_per_request: per(d.minflt),
        majflt: d.majflt,
        voluntary_cs_per_request: per(d.voluntary_ctxt),
        involuntary_cs_per_request: per(d.nonvoluntary_ctxt),
        rss_max_kib: samples.max_rss_kib.max(after.rss_kib),
        pss_max_kib: samples.max_pss_kib.max(after.pss_kib),
        vm_hwm_kib: after.vm_hwm_kib,
        threads_max: samples.max_threads.max(after.threads),
        fds_max: samples.max_fds.max(after.fds),
        cgroup_peak_bytes: exit
            .cgroup
            .as_ref()
            .and_then(|c| c.mem_peak_bytes)
            .or(samples.cg_peak_bytes),
        oom_kills: exit.cgroup.as_ref().and_then(|c| c.oom_kills).unwrap_or(0),
        throttled_ns: exit.cgroup.as_ref().and_then(|c| c.cpu_throttled_ns),
        samples: samples.points.len(),
    }
}

/// Signs that the load generator, not the server, set the pace.
fn saturation(r: &LoadReport, threads: usize) -> Option<String> {
    let mut why = Vec::new();
    if r.dropped_capacity > 0 {
        why.push(format!(
            "{} send slots dropped for lack of a free connection/stream",
            r.dropped_capacity
        ));
    }
    if r.expired > 0 {
        why.push(format!("{} requests expired before dispatch", r.expired));
    }
    let busy = r.client_cpu_ns as f64 / (r.elapsed_ns.max(1) as f64 * threads.max(1) as f64);
    if busy > 0.9 {
        why.push(format!("generator threads {:.0}% busy", busy * 100.0));
    }
    if matches!(r.mode, Mode::Open { .. }) && r.dispatch_lag.p99_ns > 1_000_000 {
        why.push(format!(
            "dispatch lag p99 {:.0} µs",
            r.dispatch_lag.p99_ns as f64 / 1e3
        ));
    }
    (!why.is_empty()).then(|| why.join("; "))
}

/// Why a pass failed, with what the stopped target says about it (exit
/// status, stderr, OOM kills): a target that died explains the failure.
fn failed(pass: &str, why: String, died: Option<String>, exit: &ExitInfo) -> Fail {
    let mut r = vec![why];
    r.extend(died);
    r.extend(oom_reason(pass, exit));
    Fail(r.join("; "))
}

struct CleanMeasure {
    /// Handshakes made by `Client::connect`, and what the topology wants.
    handshake_check: Option<String>,
    warm: LoadReport,
    report: LoadReport,
    before: ProcSnapshot,
    after: ProcSnapshot,
    threads: usize,
}

fn clean_measure(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    l: &Launched,
) -> Result<CleanMeasure, Fail> {
    let ls = load_spec(rs, case, spec, l.port)?;
    let mut client = Client::connect(&ls)?;
    let handshake_check = handshake_mismatch(&ls, client.handshakes());
    let threads = client.threads();
    let warm = client.run(&shape_mode(case, Duration::from_millis(case.warmup_ms)));
    let before = ProcSnapshot::read_tree(l.pid)?;
    let report = client.run(&shape_mode(case, Duration::from_millis(case.duration_ms)));
    let after = ProcSnapshot::read_tree(l.pid)?;
    Ok(CleanMeasure {
        handshake_check,
        warm,
        report,
        before,
        after,
        threads,
    })
}

fn clean_pass(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    objs: &mut Option<Vec<ObjectFact>>,
) -> Result<(CleanPass, Vec<String>), Fail> {
    let (l, arm_proof) = launch_pass(rs, case, spec, "clean")?;
    record_objects(&l, objs);
    let sampler = Sampler::start(l.pid, l.cgroup_handle(), Duration::from_millis(50));
    let measured = clean_measure(rs, case, spec, &l);
    let samples = sampler.stop();
    let mut info = LaunchInfo::of(&l);
    info.arm_proof = arm_proof;
    let died = exited_reason("clean", &l);
    let exit = stop(l);
    let m = measured.map_err(|Fail(why)| failed("clean", why, died.clone(), &exit))?;
    let mut reasons = check_load("warm-up", &m.warm);
    reasons.retain(|r| !r.contains("no successful"));
    reasons.extend(m.handshake_check);
    reasons.extend(check_load("clean", &m.report));
    reasons.extend(died);
    reasons.extend(oom_reason("clean", &exit));
    let server = usage(&m.before, &m.after, &samples, m.report.succeeded, &exit);
    Ok((
        CleanPass {
            launch: info,
            client_us_per_request: m.report.client_us_per_request(),
            generator_saturated: saturation(&m.report, m.threads),
            load: m.report,
            server,
            exit,
        },
        reasons,
    ))
}

struct CountedMeasure {
    report: LoadReport,
    attribution: Attribution,
    reasons: Vec<String>,
}

fn counted_measure(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    l: &Launched,
    sym: &mut Symbolizer,
) -> Result<CountedMeasure, Fail> {
    let mut ls = load_spec(rs, case, spec, l.port)?;
    // Exact per-request counts want a closed, fixed-count window: the
    // open-loop schedule belongs to the clean pass.
    ls.threads = Some(1);
    let mut client = Client::connect(&ls)?;
    let slots = (ls.connections * ls.streams) as u64;
    let warm = client.run(&Mode::FixedCount {
        requests: 200.max(4 * slots),
    });
    let mut reasons = check_load("counted warm-up", &warm);
    if !reasons.is_empty() {
        return Err(Fail(reasons.join("; ")));
    }
    // The launched process and everything it forks (prefork servers).
    let probes = ProbeSet::attach_scoped(l.pid, &rs.families, Scope::Tree)?;
    // First hits under probes fault in BPF state: keep them out too.
    client.run(&Mode::FixedCount {
        requests: 100.max(slots),
    });
    let settle = Duration::from_millis(20);
    let patience = Duration::from_millis(500);
    let quiet_start = probes.quiesce(settle, patience)?;
    let start = probes.start_window()?;
    let report = client.run(&Mode::FixedCount {
        requests: case.counted_requests,
    });
    let quiet_end = probes.quiesce(settle, patience)?;
    let end = if l.has_exited() {
        WindowEnd::TargetExited
    } else {
        WindowEnd::Completed
    };
    let window = probes.end_window(start, end)?;
    drop(probes);
    drop(client);
    reasons.extend(check_load("counted", &report));
    let mut attribution = Attribution::build(&window, Some(report.succeeded), None, sym);
    attribution.window.quiesced = Some(quiet_start && quiet_end);
    if !attribution.complete {
        reasons.push(format!(
            "counted pass: the probes lost events: {:?}",
            attribution.losses
        ));
    }
    Ok(CountedMeasure {
        report,
        attribution,
        reasons,
    })
}

fn counted_pass(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    sym: &mut Symbolizer,
    objs: &mut Option<Vec<ObjectFact>>,
) -> Result<(CountedPass, Vec<String>), Fail> {
    let (l, arm_proof) = launch_pass(rs, case, spec, "counted")?;
    record_objects(&l, objs);
    let measured = counted_measure(rs, case, spec, &l, sym);
    let mut info = LaunchInfo::of(&l);
    info.arm_proof = arm_proof;
    let died = exited_reason("counted", &l);
    let exit = stop(l);
    let m = measured.map_err(|Fail(why)| failed("counted", why, died.clone(), &exit))?;
    let mut reasons = m.reasons;
    reasons.extend(died);
    reasons.extend(oom_reason("counted", &exit));
    Ok((
        CountedPass {
            launch: info,
            per_request: PerRequest::of(&m.attribution),
            load: m.report,
            attribution: m.attribution,
            exit,
        },
        reasons,
    ))
}
