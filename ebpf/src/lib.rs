//! rig's BPF programs, compiled from C by build.rs and embedded here, and the
//! Rust mirrors of the structs they share with the harness (`abi`).

pub mod abi;

use aya::include_bytes_aligned;

/// raw_syscalls enter/exit: count and time per syscall.
pub static SYSCALLS: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/syscalls.bpf.o"));
/// Allocator entry uprobes.
pub static ALLOC: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/alloc.bpf.o"));
/// memcpy/memmove/memset implementation uprobes.
pub static COPY: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/copy.bpf.o"));
/// pthread mutex uprobes/uretprobes plus futex tracepoints.
pub static LOCKS: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/locks.bpf.o"));
/// Page faults from per-CPU software perf events.
pub static FAULTS: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/faults.bpf.o"));
/// sched_switch: context switches and off-CPU time.
pub static SCHED: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sched.bpf.o"));
/// Sampled on-CPU time (software cpu-clock perf events).
pub static CPU: &[u8] = include_bytes_aligned!(concat!(env!("OUT_DIR"), "/cpu.bpf.o"));
