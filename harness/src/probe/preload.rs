//! Loading the probe families' BPF objects in parallel: each family on its
//! own thread reads its object and creates its maps (one family at a time:
//! they share one loader, see `stacks::loader`), then loads each program it
//! will attach, where the kernel's verifier runs, concurrently for a
//! privileged loader. The verifier once dominated opening a window (the
//! stack unwinder cost 121,000 verified instructions per call site); now
//! every program verifies in under 6,000, and the maps dominate
//! (docs/guide.md, "How long opening a window takes").

use aya::programs::Program;
use aya::Ebpf;

use super::{Family, ProbeError};

/// Programs loaded only for a process tree (fork following).
const TREE_ONLY: &[&str] = &["rig_follow_fork"];
/// Programs loaded only with whole stacks (module table refresh on exec).
const STACKS_ONLY: &[&str] = &["rig_forget_exec"];
/// Programs loaded when first attached (`attach::programs::uprobe` loads
/// what is not loaded yet): `rig_alloc_arg4` serves only Rust's
/// `__rust_realloc`, absent from most targets (and arg5, arg6 and unsized
/// only application allocators) (its BPF_PROG_LOAD took
/// 1.05–1.18 s when the unwinder was inlined; a few milliseconds now).
/// `rig_alloc_ret` is attached only for the live heap; the Go programs
/// only in Go processes.
const ON_FIRST_USE: &[&str] = &[
    "rig_alloc_arg4",
    "rig_alloc_arg5",
    "rig_alloc_arg6",
    "rig_alloc_unsized",
    "rig_alloc_ret",
    "rig_alloc_go",
    "rig_alloc_go_dispatch",
    "rig_alloc_go_gc",
];

/// The sched_switch program this kernel does not take (the other one of
/// the pair, `probe::kernel::Kernel::sched_switch_program`).
fn not_for_this_kernel(name: &str) -> bool {
    name.starts_with("rig_sched_switch") && name != super::kernel::kernel().sched_switch_program()
}

/// `load` every family on its own thread and load its programs (all but
/// those `tree` / `stacks` say will not be attached and those loaded on
/// first use), in `families` order.
pub(crate) fn load_all(
    families: &[Family],
    tree: bool,
    stacks: bool,
    load: impl Fn(Family) -> Result<Ebpf, ProbeError> + Sync,
) -> Result<Vec<(Family, Ebpf)>, ProbeError> {
    let load = &load;
    std::thread::scope(|s| {
        let handles: Vec<_> = families
            .iter()
            .map(|&family| {
                s.spawn(move || -> Result<(Family, Ebpf), ProbeError> {
                    interrupted()?;
                    let mut ebpf = load(family)?;
                    for (name, p) in ebpf.programs_mut() {
                        // A program's verification takes up to a few
                        // hundred milliseconds: a signal is obeyed between
                        // them.
                        interrupted()?;
                        let unused = (!tree && TREE_ONLY.contains(&name))
                            || (!stacks && STACKS_ONLY.contains(&name))
                            || ON_FIRST_USE.contains(&name)
                            || not_for_this_kernel(name);
                        if !unused {
                            load_program(family, name, p)?;
                        }
                    }
                    Ok((family, ebpf))
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a loader thread panicked"))
            .collect()
    })
}

/// `Err(Interrupted)` once SIGINT/SIGTERM/SIGHUP arrived: attaching stops
/// at the next program, process or probe instead of running to its end.
pub(crate) fn interrupted() -> Result<(), ProbeError> {
    match crate::interrupt::requested() {
        true => Err(ProbeError::Interrupted),
        false => Ok(()),
    }
}

/// Load one program of the kinds rig attaches; others are left to their
/// attach code.
fn load_program(family: Family, name: &str, p: &mut Program) -> Result<(), ProbeError> {
    let err = |source| ProbeError::Program {
        family,
        what: format!("loading {name}"),
        source,
    };
    match p {
        Program::UProbe(u) => u.load().map_err(err),
        Program::RawTracePoint(r) => r.load().map_err(err),
        Program::PerfEvent(e) => e.load().map_err(err),
        _ => Ok(()),
    }
}
