//! One pass's server: launch (and, for `rig ab`, proof of the arm), stop,
//! and what its exit says about the pass.

use std::time::Duration;

use crate::launch::spec::TargetSpec;
use crate::launch::start::{launch, ExitInfo, LaunchOptions, Launched, ObjectFact};
use crate::scenario::Case;

use super::*;

pub(super) fn record_objects(l: &Launched, objs: &mut Option<Vec<ObjectFact>>) {
    if objs.is_none() {
        let mut all = vec![l.exe.clone()];
        all.extend(l.objects.iter().cloned());
        *objs = Some(all);
    }
}

/// Launch a fresh target for one pass; for `rig ab`, refuse it unless the
/// arm's binary and libraries are what it mapped.
pub(super) fn launch_pass(
    rs: &RunSettings,
    case: &Case,
    spec: &TargetSpec,
    pass: &str,
) -> Result<(Launched, Option<crate::launch::identity::ArmProof>), Fail> {
    let l = launch(spec, &launch_opts(rs, case, pass))?;
    if !rs.verify_arms {
        return Ok((l, None));
    }
    let proof = crate::launch::identity::expected_objects(spec)
        .and_then(|e| crate::launch::identity::verify(&case.target_name, &e, &l));
    match proof {
        Ok(p) => Ok((l, Some(p))),
        Err(why) => {
            stop(l);
            Err(Fail(why))
        }
    }
}

pub(super) fn launch_opts(rs: &RunSettings, case: &Case, pass: &str) -> LaunchOptions {
    LaunchOptions {
        server_cpus: rs.server_cpus.clone(),
        memory_limit_mib: rs.memory_mib,
        cpu_quota: rs.cpu_quota,
        ready_timeout: None,
        label: format!("{}-{pass}", case.target_name),
    }
}

pub(super) fn exited_reason(pass: &str, l: &Launched) -> Option<String> {
    l.has_exited().then(|| {
        let how = l
            .exit_status()
            .unwrap_or_else(|| "exit status unknown".into());
        format!(
            "{pass} pass: the target exited during the case ({how}); stderr tail: {}",
            tail(&l.stderr_tail())
        )
    })
}

pub(super) fn tail(s: &str) -> String {
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

pub(super) fn stop(l: Launched) -> ExitInfo {
    l.stop(Duration::from_secs(2))
}

pub(super) fn oom_reason(pass: &str, exit: &ExitInfo) -> Option<String> {
    let kills = exit.cgroup.as_ref().and_then(|c| c.oom_kills).unwrap_or(0);
    (kills > 0).then(|| {
        format!(
            "{pass} pass: OOM: the kernel killed {kills} process(es) of the target at its memory limit ({}); peak {} bytes",
            exit.describe(),
            exit.cgroup.as_ref().and_then(|c| c.mem_peak_bytes).unwrap_or(0)
        )
    })
}

/// Why a pass failed, with what the stopped target says about it (exit
/// status, stderr, OOM kills): a target that died explains the failure.
pub(super) fn failed(pass: &str, why: String, died: Option<String>, exit: &ExitInfo) -> Fail {
    let mut r = vec![why];
    r.extend(died);
    r.extend(oom_reason(pass, exit));
    Fail(r.join("; "))
}

/// Wait until the target tree holds no more than `fds` file descriptors,
/// or `within` passes: a server closes its side of a connection only when
/// it next reads the socket.
pub(super) fn wait_for_fds(l: &Launched, fds: u64, within: Duration) {
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        if crate::sample::ProcSnapshot::read_tree(l.pid).is_ok_and(|p| p.fds <= fds) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}
