//! glibc's C library as a shared object (`libc.so.6`): ptmalloc's entry
//! points, and every frame in it a wrapper a user site lies past.

use anyhow::Result;
use rig_ebpf::abi::{unwind_cfa, UnwindRow};

use super::alloc::{owned, AllocFamily, Entry, C_API};
use super::{
    marker, Code, CopyApi, Libc, LockApi, Module, ModuleKind, Runtime, C_COPIES, PTHREAD_MUTEX,
};
use crate::elf::ElfFacts;

/// Whether the module's C library is glibc: its libc.so exports
/// `gnu_get_libc_version`; a static glibc program links that only if it
/// calls it, but always its start code's `__libc_setup_tls` and
/// `_dl_aux_init`.
pub fn is_glibc(facts: &ElfFacts) -> bool {
    ["gnu_get_libc_version", "__libc_setup_tls", "_dl_aux_init"]
        .iter()
        .any(|s| facts.lookup_symbol(s).is_some())
}

/// glibc's malloc API where the module defines ptmalloc's own entry
/// (`__libc_malloc`), shared or linked in.
pub fn malloc_api(facts: &ElfFacts) -> Option<(AllocFamily, Vec<Entry>)> {
    facts
        .lookup_symbol("__libc_malloc")
        .map(|_| (AllocFamily::Glibc, owned(C_API, "")))
}

pub struct Glibc;

impl Runtime for Glibc {
    fn name(&self) -> &'static str {
        "glibc"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        m.kind == ModuleKind::CLibrary { libc: Libc::Glibc }
    }

    fn malloc_api(&self, m: &Module<'_>) -> Option<(AllocFamily, Vec<Entry>)> {
        malloc_api(m.facts)
    }

    fn copy_api(&self) -> Option<&'static CopyApi> {
        Some(&C_COPIES)
    }

    fn lock_api(&self) -> Option<&'static LockApi> {
        Some(&PTHREAD_MUTEX)
    }

    /// glibc's libraries (the C library, the dynamic linker, libpthread
    /// before 2.34), by file name wherever they are mapped.
    fn wrapper_modules(&self) -> &'static [&'static str] {
        &["libc.so", "libc-", "ld-linux", "libpthread"]
    }

    fn is_wrapper_code(&self, _m: &Module<'_>, _vaddr: u64, _function: Option<&str>) -> bool {
        true
    }

    fn unwind_rows(&self, code: &Code<'_>) -> Result<Vec<UnwindRow>> {
        Ok(clone_parent_rows(code))
    }
}

/// glibc's `clone` and `clone3` (clone.S, clone3.S) give their `syscall`
/// and the parent's return after it no CFI, because the child runs the
/// same instructions on its new, empty stack: `mov $56 or $435, %eax;
/// syscall; test %rax,%rax; jl error; je child; ret`. For the parent (the
/// thread a syscall event or a sample of that instruction sees, with
/// pthread_create below it) nothing has moved rsp: CFA = rsp + 8 from the
/// `syscall` through the `ret`. Found by those bytes (the functions are
/// hidden, `clone3` has no dynamic symbol).
fn clone_parent_rows(code: &Code<'_>) -> Vec<UnwindRow> {
    const CALLS: [[u8; 5]; 2] = [[0xb8, 0x38, 0, 0, 0], [0xb8, 0xb3, 0x01, 0, 0]];
    let mut out = Vec::new();
    for &(off, size, vaddr) in code.segments {
        let Some(text) = code
            .data
            .get(off as usize..(off as usize).saturating_add(size as usize))
        else {
            continue;
        };
        for (i, w) in text.windows(15).enumerate() {
            let parent = CALLS.iter().any(|c| w[..5] == *c)
                && w[5..10] == [0x0f, 0x05, 0x48, 0x85, 0xc0]
                && w[10] == 0x7c
                && w[12..] == [0x74, 0x01, 0xc3];
            if parent {
                let syscall = vaddr + i as u64 + 5;
                out.push(UnwindRow {
                    pc: syscall,
                    cfa: unwind_cfa::RSP,
                    cfa_off: 8,
                    ..Default::default()
                });
                out.push(marker(syscall + 10, unwind_cfa::NONE));
            }
        }
    }
    out
}
