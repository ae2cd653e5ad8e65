//! Loading the probe families' BPF objects in parallel. Opening a window
//! is mostly the kernel's verifier: each program that carries the stack
//! unwinder takes 0.2–2.5 s to verify on this 2-core VM (strace -T of
//! `rig attach --probes all`, see docs/guide.md, "How long opening a
//! window takes"). The verifier runs concurrently for privileged loaders,
//! so every family is loaded on its own thread (its maps), and then every
//! program it will attach on a thread of its own: a family with six heavy
//! programs (alloc) no longer verifies them one after the other while the
//! other families' threads have finished.

use aya::programs::Program;
use aya::Ebpf;

use super::{Family, ProbeError};

/// Programs loaded only for a process tree (fork following).
const TREE_ONLY: &[&str] = &["rig_follow_fork"];
/// Programs loaded only with whole stacks (module table refresh on exec).
const STACKS_ONLY: &[&str] = &["rig_forget_exec"];
/// Programs loaded when first attached (`attach::programs::uprobe` loads
/// what is not loaded yet): `rig_alloc_arg4` serves only Rust's
/// `__rust_realloc`, absent from most targets, and costs a second of
/// verifier time (strace -T, docs/guide.md "How long opening a window
/// takes").
const ON_FIRST_USE: &[&str] = &["rig_alloc_arg4"];

/// `load` every family on its own thread and load its programs, each on a
/// thread of its own (all but those `tree` / `stacks` say will not be
/// attached and those loaded on first use), in `families` order.
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
                    let wanted = ebpf.programs_mut().filter(|(name, _)| {
                        let unused = (!tree && TREE_ONLY.contains(name))
                            || (!stacks && STACKS_ONLY.contains(name))
                            || ON_FIRST_USE.contains(name);
                        !unused
                    });
                    std::thread::scope(|s| {
                        let loading: Vec<_> = wanted
                            .map(|(name, p)| s.spawn(move || load_program(family, name, p)))
                            .collect();
                        loading
                            .into_iter()
                            .try_for_each(|h| h.join().expect("a program loader thread panicked"))
                    })?;
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
