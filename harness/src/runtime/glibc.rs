//! glibc's C library as a shared object (`libc.so.6`): ptmalloc's entry
//! points, and every frame in it a wrapper a user site lies past.

use super::alloc::{owned, AllocFamily, Entry, C_API};
use super::{CopyApi, Libc, LockApi, Module, ModuleKind, Runtime, C_COPIES, PTHREAD_MUTEX};
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
}
