//! An executable with glibc linked in (`-static`): glibc's malloc entry
//! points in the executable (those the program links in), and glibc's
//! functions told from the program's by name, since both have unwind
//! tables.

use std::collections::HashSet;
use std::path::Path;
use std::sync::OnceLock;

use super::alloc::{AllocFamily, Entry};
use super::{CopyApi, Libc, LockApi, Module, ModuleKind, Runtime, C_COPIES, PTHREAD_MUTEX};
use crate::elf::ElfFacts;
use crate::process::maps::basename;

pub struct StaticGlibc;

impl Runtime for StaticGlibc {
    fn name(&self) -> &'static str {
        "static glibc"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        m.kind == ModuleKind::StaticC { libc: Libc::Glibc }
    }

    fn malloc_api(&self, m: &Module<'_>) -> Option<(AllocFamily, Vec<Entry>)> {
        super::glibc::malloc_api(m.facts)
    }

    fn copy_api(&self) -> Option<&'static CopyApi> {
        Some(&C_COPIES)
    }

    fn lock_api(&self) -> Option<&'static LockApi> {
        Some(&PTHREAD_MUTEX)
    }

    /// A function named as glibc's libc.so exports one (`send`, `recv`,
    /// `syscall`, `mmap64`): a program linked statically cannot define a
    /// name its C library defines too. glibc's internal functions that
    /// libc.so does not export (`sysmalloc`, `_int_malloc`) are not told
    /// apart.
    fn is_wrapper_code(&self, _m: &Module<'_>, _vaddr: u64, function: Option<&str>) -> bool {
        function.is_some_and(|f| glibc_exports().contains(f))
    }
}

/// The functions glibc's libc.so exports, read once from the one rig itself
/// runs on (rig is a glibc program, so it is mapped); empty if it cannot be
/// read.
fn glibc_exports() -> &'static HashSet<String> {
    static NAMES: OnceLock<HashSet<String>> = OnceLock::new();
    NAMES.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let Some(path) = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| basename(p).starts_with("libc.so"))
        else {
            return Default::default();
        };
        let Ok(facts) = ElfFacts::shared(Path::new(path)) else {
            return Default::default();
        };
        facts
            .exported_function_names()
            .map(str::to_string)
            .collect()
    })
}
