//! The clean pass: no probes; throughput, latency, CPU and memory.

use std::time::Duration;

use crate::launch::spec::TargetSpec;
use crate::launch::start::{ExitInfo, Launched, ObjectFact};
use crate::load::{Client, LoadReport};
use crate::sample::{ProcSnapshot, Sampler, Samples};
use crate::scenario::{Case, HttpCase};

use super::*;

pub(super) fn usage(
    before: &ProcSnapshot,
    after: &ProcSnapshot,
    samples: &Samples,
    ok: u64,
    exit: &ExitInfo,
) -> ServerUsage {
    let d = after.since(before);
    let per = |v: u64| crate::metrics::per_request(v, Some(ok));
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

pub(super) struct CleanMeasure {
    /// Handshakes made by `Client::connect`, and what the topology wants.
    handshake_check: Option<String>,
    warm: LoadReport,
    report: LoadReport,
    before: ProcSnapshot,
    after: ProcSnapshot,
    threads: usize,
}

pub(super) fn clean_measure(
    rs: &RunSettings,
    case: &Case,
    http: &HttpCase,
    spec: &TargetSpec,
    l: &Launched,
) -> Result<CleanMeasure, Fail> {
    let ls = load_spec(rs, http, spec, l.port)?;
    let mut client = Client::connect(&ls)?;
    let handshake_check = handshake_mismatch(&ls, client.handshakes());
    let threads = client.threads();
    let warm = client.run(&shape_mode(http, Duration::from_millis(case.warmup_ms)));
    let before = ProcSnapshot::read_tree(l.pid)?;
    let report = client.run(&shape_mode(http, Duration::from_millis(case.duration_ms)));
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

pub(super) fn clean_pass(
    rs: &RunSettings,
    case: &Case,
    http: &HttpCase,
    spec: &TargetSpec,
    objs: &mut Option<Vec<ObjectFact>>,
) -> Result<(CleanPass, Vec<String>), Fail> {
    let (l, arm_proof) = launch_pass(rs, case, spec, "clean")?;
    record_objects(&l, objs);
    let sampler = Sampler::start(l.pid, l.cgroup_handle(), Duration::from_millis(50));
    let measured = clean_measure(rs, case, http, spec, &l);
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
            generator_limited: limited(&m.report),
            generator_busy: generator_busy(&m.report, m.threads),
            load: m.report,
            server,
            exit,
            series: samples.points,
        },
        reasons,
    ))
}
