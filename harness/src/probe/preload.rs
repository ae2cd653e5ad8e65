//! Loading the probe families' BPF objects in parallel. Opening a window
//! is mostly the kernel's verifier: each program that carries the stack
//! unwinder takes 0.2–2.5 s to verify on this 2-core VM (strace -T of
//! `rig attach --probes all`, see docs/guide.md, "How long opening a
//! window takes"), one after the other. The verifier runs concurrently
//! for privileged loaders, so every family is loaded on its own thread:
//! its maps, then each program it will attach. (A thread per program was
//! tried: on the shared 2-core machine it did not measurably open windows
//! sooner, the verifier's CPU time being the same.)

use aya::programs::Program;
use aya::Ebpf;

use super::{Family, ProbeError};

/// Programs loaded only for a process tree (fork following).
const TREE_ONLY: &[&str] = &["rig_follow_fork"];
/// Programs loaded only with whole stacks (module table refresh on exec).
const STACKS_ONLY: &[&str] = &["rig_forget_exec"];
/// Programs loaded when first attached (`attach::programs::uprobe` loads
/// what is not loaded yet): `rig_alloc_arg4` serves only Rust's
/// `__rust_realloc`, absent from most targets, and its BPF_PROG_LOAD took
/// 1.05–1.18 s (strace -T, docs/guide.md "How long opening a window
/// takes"). A Rust target pays that at attach, on one thread.
/// `rig_alloc_ret` is attached only for the live heap.
const ON_FIRST_USE: &[&str] = &["rig_alloc_arg4", "rig_alloc_ret"];

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
                    let mut ebpf = load(family)?;
                    for (name, p) in ebpf.programs_mut() {
                        let unused = (!tree && TREE_ONLY.contains(&name))
                            || (!stacks && STACKS_ONLY.contains(&name))
                            || ON_FIRST_USE.contains(&name);
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
