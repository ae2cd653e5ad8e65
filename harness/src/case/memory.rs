//! The memory pass: a budgeted server under load.

use std::time::Duration;

use crate::launch::spec::TargetSpec;
use crate::launch::start::ObjectFact;
use crate::sample::{CgroupSnapshot, ProcSnapshot};
use crate::scenario::Case;

use super::*;

pub(super) fn memory_pass(
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
