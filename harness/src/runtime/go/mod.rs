//! Go: code with a `.gopclntab` (an executable, or a c-shared library).
//! Its allocator is `runtime.mallocgc` (size in RAX, the register ABI of Go
//! 1.17 on), its collections are counted at `runtime.gcMarkTermination`;
//! its unwind rows come from the pcsp tables (`unwind`), its names from
//! the function table (`gopclntab`), stripped or not. Never a return probe
//! in Go code.

pub mod gopclntab;
pub mod unwind;

use std::path::Path;
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use rig_ebpf::abi::alloc_kind as k;
use rig_ebpf::abi::UnwindRow;

use super::alloc::{owned, AllocFamily};
use super::{
    Allocator, Code, CodeNames, FuncEntry, Mapped, Module, ModuleKind, Named, OwnLock, OwnRoutine,
    Runtime, Uncovered,
};
use crate::elf::{ElfFacts, SymbolInfo};
use gopclntab::{GoTable, GoVersion};

pub struct Go;

impl Runtime for Go {
    fn name(&self) -> &'static str {
        "go"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        matches!(m.kind, ModuleKind::Go { .. })
    }

    /// Go's heap, probed when its version passes the size in a register
    /// rig reads (the register ABI, Go 1.17 on), listed as unprobed, with
    /// the version, otherwise. With size-specialized allocators (Go 1.27 on)
    /// they are entries of their own, and mallocgc's program leaves the
    /// sizes it hands them to them (`rig_alloc_go_dispatch`).
    fn allocators(&self, m: &Module<'_>) -> Vec<Allocator> {
        let ModuleKind::Go {
            version,
            specialized,
        } = m.kind
        else {
            return Vec::new();
        };
        let unprobed = |why: String| Allocator::Unprobed {
            allocator: "go".to_string(),
            why,
        };
        let Some(v) = version.filter(|v| v.register_abi()) else {
            return vec![unprobed(format!(
                "is Go {}: rig reads runtime.mallocgc's size from the register ABI \
                 of Go 1.17 and later, and does not guess an older one's",
                version.map_or("of no recorded version".to_string(), |v| v.to_string())
            ))];
        };
        let how = format!("Go runtime ({v}) in {{module}}: garbage-collected, no frees");
        vec![match specialized {
            None => Allocator::Probe {
                family: AllocFamily::Go,
                entries: owned(ALLOC_API, ""),
                how,
            },
            Some(n) if n <= SPECIALIZED_CLASSES => {
                let mut entries = owned(ALLOC_API, "");
                entries[0].1 = "rig_alloc_go_dispatch";
                entries.extend(
                    specialized_names()
                        .into_iter()
                        .map(|s| (s, "rig_alloc_go", k::GO_MALLOCGC, false)),
                );
                Allocator::Probe {
                    family: AllocFamily::Go,
                    entries,
                    how: format!(
                        "{how}; small objects through its size-specialized allocators \
                         (runtime.mallocgc*SC*, called directly by compiled code), counted \
                         at their own entries"
                    ),
                }
            }
            Some(n) => unprobed(format!(
                "is Go {v}, whose size-specialized allocators serve size classes up to {n}: \
                 rig's runtime.mallocgc program leaves the sizes of classes 1 to \
                 {SPECIALIZED_CLASSES} (below 81 bytes) to them, and does not guess where \
                 larger ones go"
            )),
        }]
    }

    /// From the function table (there when the binary is stripped too), on
    /// the prologue's stack check branch (`cmp 0x10(%r14),%rsp; jbe`): a
    /// conditional branch, which the kernel emulates where it would
    /// single-step the instruction after it (about 1 µs a hit against
    /// 10). A call that grows its goroutine's stack runs the prologue
    /// twice (`morestack` restarts the function): the BPF program counts
    /// only the pass whose branch is not taken (`go_stack_grows`,
    /// alloc.bpf.c). Go's allocator probes need that check; a function
    /// without one (hand-written assembly) is probed at its entry.
    fn entry_point(&self, open: &Path, symbol: &str) -> Option<Result<Option<SymbolInfo>>> {
        Some(entry_point(open, symbol))
    }

    /// Go's function table names every function, stripped or not.
    fn function_names(&self, open: &Path) -> Option<Vec<String>> {
        table(open)
            .ok()
            .map(|t| t.funcs().map(|f| f.name.clone()).collect())
    }

    /// A function's calls are counted on its stack check, as the
    /// allocator's are; one without (hand-written assembly, `nosplit`
    /// leaves) at its entry.
    fn func_entry(&self, open: &Path, symbol: &str) -> Option<Result<Option<FuncEntry>>> {
        Some(stack_check(open, symbol).map(|found| {
            found.map(|(info, checked)| match checked {
                true => FuncEntry::StackCheck(info),
                false => FuncEntry::Placed(info),
            })
        }))
    }

    /// Go's runtime, the standard library's system-call wrappers and its
    /// locks (`runtime.newobject`, `runtime.makeslice`,
    /// `internal/poll.(*FD).Read`, `syscall.read`, `sync.(*Mutex).lockSlow`):
    /// the first frame past them is the code that asked.
    fn wrapper_prefixes(&self) -> &'static [&'static str] {
        &[
            "runtime.",
            "runtime/internal/",
            "internal/",
            "syscall.",
            "sync.",
        ]
    }

    /// Every Go allocation reaches `runtime.mallocgc` through the runtime
    /// (`runtime.newobject`, `makeslice`, `growslice`, `makemap`...).
    fn allocates_through(&self) -> &'static [&'static str] {
        &["runtime."]
    }

    /// Go copies and clears with its own routines, not the C library's:
    /// `runtime.memmove` and `runtime.memclrNoHeapPointers` are counted
    /// (`own_copies`); what the compiler does without calling them is not.
    /// Its locks are not counted yet.
    fn unseen(&self, _m: &Module<'_>, _at: &Mapped<'_>, family: &str) -> Option<String> {
        let why = match family {
            "copy" => Some(
                "Go's moves and clears of a size the compiler knows are emitted inline (and, \
                 before Go 1.26, through runtime.duffcopy and runtime.duffzero, entered \
                 mid-body): they are not calls to runtime.memmove or \
                 runtime.memclrNoHeapPointers and are not counted",
            ),
            "locks" => Some(
                "Go's uncontended sync.Mutex and RWMutex acquisitions are inlined (not calls) \
                 and not counted: its contended Mutex acquisitions are counted at lockSlow, \
                 RWMutex's waits at their semaphores, and every acquisition of its \
                 runtime's own locks at lock2",
            ),
            _ => None,
        };
        why.map(str::to_string)
    }

    /// `runtime.memmove(to, from, n)` and `runtime.memclrNoHeapPointers(ptr,
    /// n)`, every copy and clear Go code makes by call (`copy`, `append`'s
    /// growth, `typedmemmove`, zeroing a new span...), assembly that takes
    /// its arguments in the register ABI (Go 1.17 on), probed at their
    /// entry: each re-enters its body's size dispatch (`tail`) for the
    /// remainder of a long copy, so no later instruction is passed exactly
    /// once per call.
    fn own_copies(&self) -> &'static [OwnRoutine] {
        COPIES
    }

    /// sync.Mutex's slow path (`internal/sync` from Go 1.24) and RWMutex's
    /// semaphore waits (before Go 1.20 through the function the slow path
    /// waits in too), each entered only when the inlined fast path found
    /// the lock taken; the runtime's own lock2 and unlock2.
    fn own_locks(&self) -> &'static [OwnLock] {
        LOCKS
    }

    /// A Go before 1.17 passes arguments on the stack.
    fn own_code_unprobed(&self, m: &Module<'_>) -> Option<String> {
        let ModuleKind::Go { version, .. } = m.kind else {
            return None;
        };
        match version {
            Some(v) if v.register_abi() => None,
            _ => Some(format!(
                "is {}: rig reads the arguments of Go's runtime routines from the register \
                 ABI of Go 1.17 and later, and does not guess an older one's",
                version.map_or("Go of no recorded version".to_string(), |v| v.to_string())
            )),
        }
    }

    /// Go moves goroutine stacks (copying a hijacked return address with
    /// them) and checks return addresses in its tracebacks: a uretprobe in
    /// Go code crashes the program.
    fn no_return_probes(&self) -> Option<&'static str> {
        Some("no uretprobe (Go moves goroutine stacks): the live heap is not available for Go")
    }

    /// Named from its own table, stripped or not: the names and lines Go's
    /// tracebacks print. (C code linked in with cgo is not in it, and is
    /// named from ELF symbols and DWARF.)
    fn names(&self, open: &Path) -> Option<Arc<dyn CodeNames>> {
        table(open).ok().map(|t| t as Arc<dyn CodeNames>)
    }

    /// Code the function table does not describe is the C that cgo's
    /// objects brought in (`_cgo_try_pthread_create`, `threadentry`,
    /// `x_cgo_mmap`...), which Go's internal linker links without its
    /// `.eh_frame`: C entered by calls that keeps rbp as the ABI says, read
    /// by the stack height analysis. Its threads start in the C library's
    /// `start_thread` and cross into Go at `runtime.mstart`, whose rows end
    /// the walk.
    fn uncovered(&self) -> Option<Uncovered> {
        Some(Uncovered::HeightAnalysis {
            tops: &[],
            no_frame: &[],
            returned_into: &[],
        })
    }

    fn unwind_rows(&self, code: &Code<'_>) -> Result<Vec<UnwindRow>> {
        Ok(match GoTable::parse(code.data)? {
            Some(go) => unwind::rows(&go, code),
            None => Vec::new(),
        })
    }
}

impl CodeNames for GoTable {
    /// The Go function holding `vaddr`, with its file and line, and the
    /// functions inlined there: the physical function's position is the
    /// call site of the outermost inlined call, each inlined frame's the
    /// call site of the next, the innermost's the instruction's.
    fn name_at(&self, vaddr: u64) -> Option<Named> {
        let f = self.func_at(vaddr)?;
        let mut frames = self.frames_at(f, vaddr);
        let physical = frames.pop()?;
        Some(Named {
            function: f.name.clone(),
            entry: f.entry,
            file: physical.file,
            line: physical.line,
            inlined: frames
                .into_iter()
                .rev()
                .map(|g| (g.function, g.file, g.line))
                .collect(),
        })
    }
}

/// Whether a module holds Go code.
pub fn holds_go(facts: &ElfFacts) -> bool {
    facts.has_section(".gopclntab") || facts.has_section(".go.buildinfo")
}

/// Go's allocator and its collector: `runtime.mallocgc(size, typ,
/// needzero)` (every heap object: `new`, `make`, escaping composite
/// literals, string and slice growth) and `runtime.gcMarkTermination`,
/// which runs exactly once per completed collection cycle.
pub const ALLOC_API: &[(&str, &str, u32, bool)] = &[
    ("runtime.mallocgc", "rig_alloc_go", k::GO_MALLOCGC, true),
    (
        "runtime.gcMarkTermination",
        "rig_alloc_go_gc",
        k::GO_GC,
        false,
    ),
];

/// Go's copy and clear routines (`runtime/memmove_amd64.s`,
/// `memclr_amd64.s`): the length is in rcx and rbx.
const COPIES: &[OwnRoutine] = &[
    OwnRoutine {
        symbol: "runtime.memmove",
        program: "rig_copy_go_memmove",
        length: "rcx (Go's register ABI)",
    },
    OwnRoutine {
        symbol: "runtime.memclrNoHeapPointers",
        program: "rig_copy_go_memclr",
        length: "rbx (Go's register ABI)",
    },
];

/// Go's lock slow paths (`sync/mutex.go`, `internal/sync/mutex.go`,
/// `sync/rwmutex.go`), each call a contended acquisition or wait, keyed by
/// goroutine; and the runtime's own locks (`runtime/lock_futex.go`,
/// `lock_spinbit.go` from Go 1.24), counted by thread as pthread mutexes
/// are.
const LOCKS: &[OwnLock] = &[
    OwnLock {
        symbols: &["sync.(*Mutex).lockSlow", "internal/sync.(*Mutex).lockSlow"],
        op: rig_ebpf::abi::lock_op::GO_MUTEX,
        entry: "rig_go_lock",
        ret: "rig_go_lock_ret",
        unlock: None,
        counts: "every call a contended sync.Mutex acquisition, its wait from entry to return",
    },
    OwnLock {
        symbols: &["sync.runtime_SemacquireRWMutexR"],
        op: rig_ebpf::abi::lock_op::GO_RLOCK,
        entry: "rig_go_lock",
        ret: "rig_go_lock_ret",
        unlock: None,
        counts: "every call an RWMutex.RLock waiting for a writer, its wait from entry to return",
    },
    OwnLock {
        symbols: &["sync.runtime_SemacquireRWMutex"],
        op: rig_ebpf::abi::lock_op::GO_WLOCK,
        entry: "rig_go_lock",
        ret: "rig_go_lock_ret",
        unlock: None,
        counts: "every call an RWMutex.Lock waiting for readers, its wait from entry to return",
    },
    OwnLock {
        symbols: &["sync.runtime_SemacquireMutex"],
        op: rig_ebpf::abi::lock_op::GO_RWSEMA,
        entry: "rig_go_lock",
        ret: "rig_go_lock_ret",
        unlock: None,
        counts: "every call outside sync.Mutex's slow path an RWMutex wait (before Go 1.20; \
                 from Go 1.20 only that slow path calls it), its wait from entry to return",
    },
    OwnLock {
        symbols: &["runtime.lock2"],
        op: rig_ebpf::abi::lock_op::GO_RUNTIME,
        entry: "rig_go_runtime_lock",
        ret: "rig_go_runtime_lock_ret",
        unlock: Some(("runtime.unlock2", "rig_go_runtime_unlock")),
        counts: "every acquisition of a runtime lock, contended when it waited in futex, held \
                 until runtime.unlock2",
    },
];

/// Whether the program at `symbol`'s probe reads the prologue's stack
/// check (Go's allocators and lock slow paths): it must be there.
fn needs_stack_check(symbol: &str) -> bool {
    ALLOC_API.iter().any(|a| a.0 == symbol)
        || LOCKS
            .iter()
            .any(|l| l.symbols.contains(&symbol) || l.unlock.is_some_and(|(u, _)| u == symbol))
        || specialized_names().iter().any(|s| s == symbol)
}

/// A Go module's function table, parsed once per file per rig process
/// (the one module cache, `elf::cached`).
pub fn table(open: &Path) -> Result<Arc<GoTable>> {
    crate::elf::cached(open, |open| {
        let data = std::fs::read(open).with_context(|| format!("reading {}", open.display()))?;
        GoTable::parse(&data)
            .with_context(|| format!("parsing .gopclntab of {}", open.display()))?
            .with_context(|| format!("{} has no .gopclntab", open.display()))
    })
}

/// Go 1.27's size-specialized allocators (the `sizespecializedmalloc`
/// experiment, on by default there; `runtime/malloc_generated.go`), one per
/// size class: compiled code calls them directly for a small object of a
/// size known at compile time, and `runtime.mallocgc` hands them every size
/// below 81 bytes (its dispatch tables have 81 entries). Neither path
/// passes through mallocgc's own allocation.
const SPECIALIZED: [&str; 3] = [
    "runtime.mallocgcSmallScanNoHeaderSC",
    "runtime.mallocgcSmallNoScanSC",
    "runtime.mallocgcTinySC",
];

/// The size classes Go 1.27 specializes: 1 to 7, 8 to 80 bytes (Go's
/// small size classes, `runtime/sizeclasses.go`, unchanged since Go 1.5).
/// `rig_alloc_go_dispatch` (alloc.bpf.c) leaves sizes below 81 bytes to
/// them.
pub const SPECIALIZED_CLASSES: u8 = 7;

/// Every specialized allocator name of the classes rig knows.
pub fn specialized_names() -> Vec<String> {
    SPECIALIZED
        .iter()
        .flat_map(|p| (1..=SPECIALIZED_CLASSES).map(move |n| format!("{p}{n}")))
        .collect()
}

/// The largest size class the Go module at `open` has a size-specialized
/// allocator for (their names in its function table; the linker keeps them
/// only when the experiment is on, as mallocgc's dispatch and compiled
/// code then refer to them), `None` without one.
pub fn specialized(open: &Path) -> Option<u8> {
    let t = table(open).ok()?;
    t.funcs
        .iter()
        .filter_map(|f| {
            SPECIALIZED
                .iter()
                .find_map(|p| f.name.strip_prefix(p)?.parse::<u8>().ok())
        })
        .max()
}

/// The Go version of the module at `open` (from its build info).
pub fn version(open: &Path) -> Option<GoVersion> {
    table(open).ok()?.version
}

fn entry_point(lib: &Path, symbol: &str) -> Result<Option<SymbolInfo>> {
    match stack_check(lib, symbol)? {
        Some((_, false)) if needs_stack_check(symbol) => bail!(
            "{symbol} in {} has no stack check in its prologue, whose branch rig's probe \
             sits on (the program counts only the pass that does not grow the stack)",
            lib.display()
        ),
        found => Ok(found.map(|(info, _)| info)),
    }
}

/// Function `symbol` of the Go module at `lib`, from its prologue's stack
/// check branch on when it has one (`true`), else from its entry.
fn stack_check(lib: &Path, symbol: &str) -> Result<Option<(SymbolInfo, bool)>> {
    let facts = ElfFacts::shared(lib)?;
    let go = table(lib)?;
    let Some(f) = go.find(symbol) else {
        return Ok(None);
    };
    let Some(file_offset) = facts.vaddr_to_file_offset(f.entry) else {
        return Ok(None);
    };
    let mut head = [0u8; 32];
    let n =
        std::os::unix::fs::FileExt::read_at(&std::fs::File::open(lib)?, &mut head, file_offset)?;
    let branch = stack_check_branch(&head[..n]);
    let skip = branch.unwrap_or(0) as u64;
    let info = SymbolInfo {
        name: f.name.clone(),
        vaddr: f.entry + skip,
        size: f.end - f.entry - skip,
        file_offset: file_offset + skip,
        is_ifunc: false,
    };
    Ok(Some((info, branch.is_some())))
}

/// The offset of a Go prologue's stack check branch at the start of
/// `code`: `[lea -N(%rsp),%r12;] cmp 0x10(%r14),%rsp|%r12; jbe rel` (amd64,
/// the register ABI: r14 holds the goroutine), `None` without one.
fn stack_check_branch(code: &[u8]) -> Option<usize> {
    let mut i = match code {
        [0x4c, 0x8d, 0x64, 0x24, _, ..] => 5,
        [0x4c, 0x8d, 0xa4, 0x24, _, _, _, _, ..] => 8,
        _ => 0,
    };
    match code.get(i..)? {
        [0x49 | 0x4d, 0x3b, 0x66, 0x10, ..] => i += 4,
        _ => return None,
    }
    match code.get(i..)? {
        [0x76, _, ..] | [0x0f, 0x86, _, _, _, _, ..] => Some(i),
        _ => None,
    }
}

/// Go functions that start a stack, as Go's own tracebacks treat them
/// (`runtime/traceback.go`, `topofstack`): a goroutine's first frame
/// (`goexit`), a thread's (`mstart`, `rt0_go`), and the switches to the
/// thread's system stack (`mcall`, `systemstack`, `morestack`), beyond
/// which the frames are on another stack; the switch to a goroutine
/// (`gogo`, which loads the goroutine's rsp before its pc: a signal that
/// interrupts it finds the new stack under the old function); and a
/// signal handler's entry (`sigtramp`), which the kernel's signal frame
/// lies beyond. (The return trampoline, `sigreturn__sigaction`, is
/// crossed: its rows read the interrupted frame out of the kernel's
/// ucontext, see `unwind`; so is `asmcgocall`, the switch to the system
/// stack to call C, back to the goroutine's stack.)
pub const STACK_TOPS: &[&str] = &[
    "runtime.goexit",
    "runtime.mstart",
    "runtime.rt0_go",
    "runtime.mcall",
    "runtime.systemstack",
    "runtime.morestack",
    // `gogo<>`, the body `runtime.gogo` jumps to, which its table names so.
    "gogo",
    "runtime.sigtramp",
    "runtime.cgoSigtramp",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_prologues_stack_check_branches_are_found() {
        // runtime.mallocgc, go1.19.8: cmp 0x10(%r14),%rsp; jbe; sub $0x70,%rsp
        let small = [
            0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0xbe, 0x08, 0, 0, 0x48, 0x83, 0xec, 0x70,
        ];
        assert_eq!(stack_check_branch(&small), Some(4));
        // runtime.gcMarkTermination: a big frame checks rsp - N in r12.
        let big = [
            0x4c, 0x8d, 0xa4, 0x24, 0xd0, 0xfe, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86,
            0x7a, 0x0c, 0, 0, 0x48,
        ];
        assert_eq!(stack_check_branch(&big), Some(12));
        // A short jbe, and a function without the check.
        assert_eq!(
            stack_check_branch(&[0x49, 0x3b, 0x66, 0x10, 0x76, 0x20]),
            Some(4)
        );
        assert_eq!(stack_check_branch(&[0x48, 0x83, 0xec, 0x18]), None);
    }
}
