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

use anyhow::{Context, Result};
use rig_ebpf::abi::alloc_kind as k;
use rig_ebpf::abi::UnwindRow;

use super::alloc::{owned, AllocFamily};
use super::{Allocator, Code, CodeNames, Module, ModuleKind, Named, Runtime, Uncovered};
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
    /// the version, otherwise.
    fn allocators(&self, m: &Module<'_>) -> Vec<Allocator> {
        let ModuleKind::Go { version } = m.kind else {
            return Vec::new();
        };
        vec![match version {
            Some(v) if v.register_abi() => Allocator::Probe {
                family: AllocFamily::Go,
                entries: owned(ALLOC_API, ""),
                how: format!("Go runtime ({v}) in {{module}}: garbage-collected, no frees"),
            },
            _ => Allocator::Unprobed {
                allocator: "go".to_string(),
                why: format!(
                    "is Go {}: rig reads runtime.mallocgc's size from the register ABI \
                     of Go 1.17 and later, and does not guess an older one's",
                    version.map_or("of no recorded version".to_string(), |v| v.to_string())
                ),
            },
        }]
    }

    /// From the function table (there when the binary is stripped too),
    /// past the prologue's stack check (`cmp 0x10(%r14),%rsp; jbe`): a call
    /// that grows its goroutine's stack runs the prologue twice
    /// (`morestack` restarts the function), the rest of the function once.
    fn entry_point(&self, open: &Path, symbol: &str) -> Option<Result<Option<SymbolInfo>>> {
        Some(entry_point(open, symbol))
    }

    /// Go's runtime and the standard library's system-call wrappers
    /// (`runtime.newobject`, `runtime.makeslice`, `internal/poll.(*FD).Read`,
    /// `syscall.read`): the first frame past them is the code that asked.
    fn wrapper_prefixes(&self) -> &'static [&'static str] {
        &["runtime.", "runtime/internal/", "internal/", "syscall."]
    }

    /// Every Go allocation reaches `runtime.mallocgc` through the runtime
    /// (`runtime.newobject`, `makeslice`, `growslice`, `makemap`...).
    fn allocates_through(&self) -> &'static [&'static str] {
        &["runtime."]
    }

    /// Go copies and locks with its own code, not the C library's: until
    /// rig probes `runtime.memmove` and Go's mutexes, those are named as
    /// not counted.
    fn unseen(&self, family: &str) -> Option<&'static str> {
        match family {
            "copy" => Some(
                "Go code copies with runtime.memmove and clears with \
                 runtime.memclrNoHeapPointers, not the C library's routines: its copies are \
                 not counted",
            ),
            "locks" => Some(
                "Go code locks with sync.Mutex, sync.RWMutex and the runtime's lock2, not \
                 pthread mutexes: its lock acquisitions are not counted",
            ),
            _ => None,
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

/// The Go version of the module at `open` (from its build info).
pub fn version(open: &Path) -> Option<GoVersion> {
    table(open).ok()?.version
}

fn entry_point(lib: &Path, symbol: &str) -> Result<Option<SymbolInfo>> {
    let facts = ElfFacts::shared(lib)?;
    let go = table(lib)?;
    let Some(f) = go.find(symbol) else {
        return Ok(None);
    };
    let Some(file_offset) = facts.vaddr_to_file_offset(f.entry) else {
        return Ok(None);
    };
    let code = std::fs::read(lib)?;
    let head = code
        .get(file_offset as usize..(file_offset as usize + 32).min(code.len()))
        .unwrap_or_default();
    let skip = past_stack_check(head).unwrap_or(0) as u64;
    Ok(Some(SymbolInfo {
        name: f.name.clone(),
        vaddr: f.entry + skip,
        size: f.end - f.entry - skip,
        file_offset: file_offset + skip,
        is_ifunc: false,
    }))
}

/// The length of a Go prologue's stack check at the start of `code`:
/// `[lea -N(%rsp),%r12;] cmp 0x10(%r14),%rsp|%r12; jbe rel` (amd64, the
/// register ABI: r14 holds the goroutine), `None` without one.
fn past_stack_check(code: &[u8]) -> Option<usize> {
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
        [0x76, _, ..] => Some(i + 2),
        [0x0f, 0x86, _, _, _, _, ..] => Some(i + 6),
        _ => None,
    }
}

/// Go functions that start a stack, as Go's own tracebacks treat them
/// (`runtime/traceback.go`, `topofstack`): a goroutine's first frame
/// (`goexit`), a thread's (`mstart`, `rt0_go`), and the switches to the
/// thread's system stack (`mcall`, `systemstack`, `morestack`), beyond
/// which the frames are on another stack; and a signal's handler entry and
/// return trampoline (`sigtramp`, `sigreturn`), beyond which lies the
/// kernel's signal frame, whose interrupted frames rig does not read.
/// (`asmcgocall`, the switch to the system stack to call C, is not one:
/// the walk crosses it back to the goroutine's stack, see
/// `unwind`.)
pub const STACK_TOPS: &[&str] = &[
    "runtime.goexit",
    "runtime.mstart",
    "runtime.rt0_go",
    "runtime.mcall",
    "runtime.systemstack",
    "runtime.morestack",
    "runtime.sigtramp",
    "runtime.cgoSigtramp",
    "runtime.sigreturn",
    "runtime.sigreturn__sigaction",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_prologues_stack_checks_are_measured() {
        // runtime.mallocgc, go1.19.8: cmp 0x10(%r14),%rsp; jbe; sub $0x70,%rsp
        let small = [
            0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0xbe, 0x08, 0, 0, 0x48, 0x83, 0xec, 0x70,
        ];
        assert_eq!(past_stack_check(&small), Some(10));
        // runtime.gcMarkTermination: a big frame checks rsp - N in r12.
        let big = [
            0x4c, 0x8d, 0xa4, 0x24, 0xd0, 0xfe, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86,
            0x7a, 0x0c, 0, 0, 0x48,
        ];
        assert_eq!(past_stack_check(&big), Some(18));
        // A short jbe, and a function without the check.
        assert_eq!(
            past_stack_check(&[0x49, 0x3b, 0x66, 0x10, 0x76, 0x20]),
            Some(6)
        );
        assert_eq!(past_stack_check(&[0x48, 0x83, 0xec, 0x18]), None);
    }
}
