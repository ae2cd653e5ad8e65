//! musl's C library, as a shared object (`ld-musl-x86_64.so.1`, Alpine's
//! every program) or linked into a static executable (Rust's
//! `x86_64-unknown-linux-musl`): its malloc (mallocng), and its code,
//! built without unwind tables, read by the stack height analysis of its
//! machine code.

use super::alloc::{owned, AllocFamily, Entry, C_API};
use super::{
    CopyApi, Libc, LockApi, Module, ModuleKind, Runtime, Uncovered, C_COPIES, PTHREAD_MUTEX,
};
use crate::elf::ElfFacts;

/// Whether the module's C library is musl, given it is not glibc (see
/// `glibc::is_glibc`, asked first): musl's libc.so (its dynamic linker
/// too) defines `__libc_start_main` and exports malloc; a static musl
/// program defines `__libc_start_main` and the `__init_libc` it calls, and
/// malloc only if the program allocates (the linker leaves out what is
/// never called).
pub fn is_musl(facts: &ElfFacts) -> bool {
    facts.lookup_symbol("__libc_start_main").is_some()
        && (facts.lookup_symbol("malloc").is_some() || facts.lookup_symbol("__init_libc").is_some())
}

/// Functions of musl that start a stack: a thread's (`start`,
/// `start_c11` in pthread_create.c, called by `__clone`) and the process's
/// (`libc_start_main_stage2` calls main; `_start_c`, `__libc_start_main`).
const STACK_TOPS: &[&str] = &[
    "start",
    "start_c11",
    "libc_start_main_stage2",
    "__libc_start_main",
    "_start_c",
];

/// Functions of musl where rsp holds no frame of a caller's: they get no
/// rows, and a stack taken in them ends there, marked. A signal handler
/// returns into `__restore_rt` (src/signal/x86_64/restore.s) with the
/// signal frame at rsp; past `__clone`'s clone syscall
/// (src/thread/x86_64/clone.s) the child runs the same instructions on
/// its new stack.
const NO_FRAME: &[&str] = &["__restore_rt", "__clone"];

/// Of those, the ones entered by a return (a handler's into
/// `__restore_rt`): the walk looks up the byte before such a return
/// address, which gets no row either.
const RETURNED_INTO: &[&str] = &["__restore_rt"];

pub struct Musl;

impl Runtime for Musl {
    fn name(&self) -> &'static str {
        "musl"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        matches!(
            m.kind,
            ModuleKind::CLibrary { libc: Libc::Musl } | ModuleKind::StaticC { libc: Libc::Musl }
        )
    }

    /// musl defines `__libc_malloc` too (1.2.3, Debian's), or only a local
    /// `__libc_malloc_impl` behind a weak malloc (1.2.5, the one Rust's
    /// musl target links in): malloc itself is the sign.
    fn malloc_api(&self, m: &Module<'_>) -> Option<(AllocFamily, Vec<Entry>)> {
        m.facts
            .lookup_symbol("malloc")
            .map(|_| (AllocFamily::Musl, owned(C_API, "")))
    }

    fn copy_api(&self) -> Option<&'static CopyApi> {
        Some(&C_COPIES)
    }

    fn lock_api(&self) -> Option<&'static LockApi> {
        Some(&PTHREAD_MUTEX)
    }

    /// musl's libc.so under the names distributions give it.
    fn wrapper_modules(&self) -> &'static [&'static str] {
        &["ld-musl", "libc.musl"]
    }

    /// Its code is C entered by calls that keeps rbp as the ABI says, which
    /// the stack height analysis follows: its thread and process entry
    /// functions end a stack (they are the outermost frames, as glibc's
    /// .eh_frame says of its own), its signal return trampoline and clone
    /// are no frames of a caller's, and every other function gets rows
    /// wherever its height is known.
    fn uncovered(&self) -> Option<Uncovered> {
        Some(Uncovered::HeightAnalysis {
            tops: STACK_TOPS,
            no_frame: NO_FRAME,
            returned_into: RETURNED_INTO,
        })
    }

    /// All of its libc.so; in a static musl executable, the code
    /// `.eh_frame` does not describe (musl's libc.a has no unwind tables,
    /// the program's own code has).
    fn is_wrapper_code(&self, m: &Module<'_>, vaddr: u64, _function: Option<&str>) -> bool {
        match m.kind {
            ModuleKind::CLibrary { .. } => true,
            _ => !m.facts.has_cfi(vaddr),
        }
    }

    /// A stack ends in musl's code only where the analysis cannot know the
    /// height (code reached through an indirect jump it cannot bound, rsp
    /// changed in a way it cannot follow, a signal frame).
    fn no_row_reason(&self) -> Option<&'static str> {
        Some("no row: musl's code has no unwind tables, and its stack height here is unknown")
    }
}
