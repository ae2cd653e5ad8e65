//! rig's BPF programs, compiled from C by build.rs and embedded here, and the
//! Rust mirrors of the structs they share with the harness (`abi`).
//!
//! Every family comes as two objects ([`Object`]): the one for kernels with
//! `bpf_loop` and `bpf_get_attach_cookie` (Linux 5.17 on) and the one
//! built with `RIG_COMPAT` for older kernels (the frame walk a bounded
//! loop, uprobe cookies looked up by address in `attach_cookies`).

pub mod abi;

use aya::include_bytes_aligned;

/// One family's BPF object, in both builds.
pub struct Object {
    /// For kernels with `bpf_loop` and `bpf_get_attach_cookie`.
    pub full: &'static [u8],
    /// Built with `RIG_COMPAT`: no `bpf_loop`, no `bpf_get_attach_cookie`.
    pub compat: &'static [u8],
}

/// raw_syscalls enter/exit: count and time per syscall.
pub static SYSCALLS: Object = Object {
    full: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/syscalls.bpf.o")),
    compat: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/syscalls.compat.bpf.o")),
};
/// Allocator entry uprobes.
pub static ALLOC: Object = Object {
    full: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/alloc.bpf.o")),
    compat: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/alloc.compat.bpf.o")),
};
/// memcpy/memmove/memset implementation uprobes.
pub static COPY: Object = Object {
    full: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/copy.bpf.o")),
    compat: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/copy.compat.bpf.o")),
};
/// pthread mutex uprobes/uretprobes plus futex tracepoints.
pub static LOCKS: Object = Object {
    full: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/locks.bpf.o")),
    compat: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/locks.compat.bpf.o")),
};
/// Page faults from per-CPU software perf events.
pub static FAULTS: Object = Object {
    full: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/faults.bpf.o")),
    compat: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/faults.compat.bpf.o")),
};
/// sched_switch: context switches and off-CPU time.
pub static SCHED: Object = Object {
    full: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sched.bpf.o")),
    compat: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sched.compat.bpf.o")),
};
/// Probes a user names: USDT markers and functions.
pub static USER: Object = Object {
    full: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/user.bpf.o")),
    compat: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/user.compat.bpf.o")),
};
/// Sampled on-CPU time (software cpu-clock perf events).
pub static CPU: Object = Object {
    full: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/cpu.bpf.o")),
    compat: include_bytes_aligned!(concat!(env!("OUT_DIR"), "/cpu.compat.bpf.o")),
};
