//! The one place that knows each runtime a server's code is written for:
//! one file per runtime, behind one interface ([`Runtime`]), as a profiler
//! keeps one unwinder per language.
//!
//! In: a mapped module (its path as in maps, its ELF facts, its bytes).
//! Out: its [`ModuleKind`], decided once, and the runtimes whose code it
//! holds ([`runtimes`]), each answering for that code: its allocator entry
//! points, whether return probes may go in it, its unwind rows beyond
//! `.eh_frame`, which frames are wrappers, why a stack ends in it, what
//! it does that rig does not count. `probe`, `symbolize` and `report` ask
//! here; none of them branches on a runtime itself.
//!
//! | file | code | entry points | unwinding | naming |
//! |---|---|---|---|---|
//! | `glibc` | glibc's libc.so | malloc & co | `.eh_frame` | `.symtab`, DWARF, debuglink |
//! | `static_glibc` | an executable with glibc linked in | the same names, in the executable | `.eh_frame` | as glibc |
//! | `musl` | musl's libc.so, or a static musl executable | malloc & co | the stack height analysis of its machine code | as glibc |
//! | `go` | Go code | `runtime.mallocgc`, GC cycles; never a return probe | `.gopclntab`'s pcsp tables | `.gopclntab` |
//! | `native` | other ELF code: jemalloc, tcmalloc, mimalloc, Rust's shims, libstdc++ | each allocator's own names | `.eh_frame` | as glibc |
//! | `cpython` | CPython's allocation APIs; pymalloc inlined (named unseen, its runs measured) | PyObject_/PyMem_; its collection marker | `.eh_frame`; its threads' Python frames (3.11, `cpython/frames.rs`) | as glibc; Python frames by code object |
//! | `jvm` | HotSpot's `libjvm.so`; arrays' bytes (named unseen) | its markers: objects, collections, contended monitors (`implied_markers`) | `.eh_frame`; its JIT code by frame pointer with `-XX:+PreserveFramePointer` | as glibc; its JIT code from the perf map `jcmd` writes |
//! | `pools` | an application's own allocator (haproxy, APR, nginx, PostgreSQL, glib; `--alloc-func`) | its pool entry points, a layer beside the heap's | `.eh_frame` | as glibc |
//! | `v8` | V8's embedded builtins; the JavaScript heap (named unseen) | none | frame-pointer rows after their prologue; its JIT code by frame pointer | as glibc |
//! | `jit` | anonymous executable memory | none | a frame-pointer row where its runtime keeps them (`jit_frames`), else none: a stack ends there, marked | `/tmp/perf-PID.map` |
//!
//! Adding a runtime is one new file here and one line in [`ALL`].

pub mod alloc;
pub mod cpython;
pub mod funcs;
pub mod glibc;
pub mod go;
pub mod jit;
pub mod jvm;
mod module;
pub mod musl;
pub mod native;
pub mod pools;
mod process;
pub mod static_glibc;
pub mod v8;

use std::path::Path;

use anyhow::Result;
use rig_ebpf::abi::UnwindRow;
use serde::Serialize;

use crate::elf::{ElfFacts, SymbolInfo};
use crate::process::maps::{basename, Mapping, ProcMaps};
use alloc::{AllocFamily, Entry};
use go::gopclntab::GoVersion;

pub use funcs::{entry_point, func_entry, function_names, FuncEntry};
pub use jit::PerfMap;
pub use module::{
    Code, Interp, InterpCalls, InterpName, JitFrames, Mapped, MarkerCounts, MarkerLock, Module,
    ObjectSizes, UnseenSites, CALL_LANGUAGES,
};
pub use process::{
    c_library, each_module, implied_markers, interp_frames, interp_names, is_wrapper_frame,
    jit_frames, jit_function, jit_own_code, marker_layer, object_sizes, stack_end_reason,
    unseen_sites, write_jit_names,
};

/// Which C library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Libc {
    Glibc,
    Musl,
}

impl std::fmt::Display for Libc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Libc::Glibc => "glibc",
            Libc::Musl => "musl",
        })
    }
}

/// A C library's copy routines as the copy family counts them.
#[derive(Debug)]
pub struct CopyApi {
    /// Counted, each through its resolved implementation (IFUNCs are
    /// resolved as the process resolved them): the family fails without
    /// any one of them.
    pub counted: &'static [&'static str],
    /// Counted where the library has them, possibly by another's probe
    /// when their implementation jumps into it: mempcpy copies as memmove
    /// does, with the same arguments, and returns dest + n. A C library
    /// without one copies nothing through it.
    pub joins: &'static [&'static str],
}

/// What both C libraries rig knows (glibc, musl) export for copies.
pub const C_COPIES: CopyApi = CopyApi {
    counted: &["memcpy", "memmove", "memset"],
    joins: &["mempcpy"],
};

/// A C library's mutex entry points, as the locks family counts them (a
/// uprobe on each, a return probe on lock and trylock for the wait).
#[derive(Debug)]
pub struct LockApi {
    pub lock: &'static str,
    pub trylock: &'static str,
    pub unlock: &'static str,
}

/// POSIX mutexes, as glibc and musl export them.
pub const PTHREAD_MUTEX: LockApi = LockApi {
    lock: "pthread_mutex_lock",
    trylock: "pthread_mutex_trylock",
    unlock: "pthread_mutex_unlock",
};

/// A routine of a runtime's own code that a family counts as it counts
/// the C library's (Go's `runtime.memmove` for copies), with the BPF
/// program that reads its arguments where that runtime passes them.
#[derive(Debug)]
pub struct OwnRoutine {
    pub symbol: &'static str,
    pub program: &'static str,
    /// Where the program reads the length, as the notes say it.
    pub length: &'static str,
}

/// A lock routine of a runtime's own code, counted by the locks family:
/// the first of `symbols` its module has (a routine that moved between
/// versions), with the programs at its entry and at each of its `ret`
/// instructions (never a return probe), and its unlock's where the hold
/// is timed.
#[derive(Debug)]
pub struct OwnLock {
    pub symbols: &'static [&'static str],
    /// Its `lock_op` (the rows' and stacks' operation).
    pub op: u32,
    pub entry: &'static str,
    pub ret: &'static str,
    /// The unlock routine and its program.
    pub unlock: Option<(&'static str, &'static str)>,
    /// What its calls count, as the notes say it.
    pub counts: &'static str,
}

/// The kind of code one mapped module holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ModuleKind {
    /// The C library as a shared object.
    CLibrary { libc: Libc },
    /// An executable that carries its own C library (linked statically).
    StaticC { libc: Libc },
    /// Go code (an executable, or a c-shared library), with the version
    /// its build info names (`None`: none recorded) and the largest size
    /// class its size-specialized allocators serve (`None`: it has none;
    /// see `go::specialized`).
    Go {
        version: Option<GoVersion>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        specialized: Option<u8>,
    },
    /// Other native code (C, C++, Rust over a dynamic C library).
    Native,
    /// Anonymous executable memory: code a JIT compiler wrote.
    Jit,
}

impl ModuleKind {
    /// The kind of a module from its ELF facts and path as in maps (a Go
    /// module without its version: [`ModuleKind::of_file`] reads it).
    pub fn of(path: &str, facts: &ElfFacts) -> ModuleKind {
        if go::holds_go(facts) {
            return ModuleKind::Go {
                version: None,
                specialized: None,
            };
        }
        let libc = glibc::is_glibc(facts)
            .then_some(Libc::Glibc)
            .or_else(|| musl::is_musl(facts).then_some(Libc::Musl));
        let defines = |s: &str| facts.lookup_symbol(s).is_some();
        match libc {
            Some(libc) if is_shared_c_library_name(path) => ModuleKind::CLibrary { libc },
            // The C library's start code is in the executable; malloc is
            // there only if the program allocates.
            Some(libc) if defines("__libc_start_main") => ModuleKind::StaticC { libc },
            _ => ModuleKind::Native,
        }
    }

    /// The kind of the module mapped as `path`, read from the file at
    /// `open` (parsed once per file): a Go module with its version.
    pub fn of_file(path: &str, open: &Path) -> Result<ModuleKind> {
        let facts = ElfFacts::shared(open)?;
        Ok(match ModuleKind::of(path, &facts) {
            ModuleKind::Go { .. } => ModuleKind::Go {
                version: go::version(open),
                specialized: go::specialized(open),
            },
            k => k,
        })
    }

    /// The kind of one mapping of `maps`; `None` for data and pseudo
    /// mappings (`[heap]`, `[vdso]`...) and unreadable files.
    pub fn of_mapping(maps: &ProcMaps, m: &Mapping) -> Option<ModuleKind> {
        if jit::is_jit_code(m) {
            return Some(ModuleKind::Jit);
        }
        let path = m.path.as_deref().filter(|_| m.is_file_backed())?;
        ModuleKind::of_file(path, &maps.mapped_file(m)).ok()
    }

    /// The kind of the module mapped as `path` in `maps` (its file as
    /// mapped, parsed once).
    pub fn of_path(maps: &ProcMaps, path: &str) -> Option<ModuleKind> {
        ModuleKind::of_file(path, &maps.readable_path(path)).ok()
    }
}

/// A shared C library by its file name, as distributions install it:
/// glibc's `libc.so.6`, musl's `libc.musl-x86_64.so.1` (Alpine) or
/// `ld-musl-x86_64.so.1` (musl's libc.so is its dynamic linker too, and
/// Alpine maps it under that name alone).
fn is_shared_c_library_name(path: &str) -> bool {
    let b = basename(path);
    b.starts_with("libc.so") || b.starts_with("libc.musl") || b.starts_with("ld-musl")
}

/// How the code of a module that no row covers gets rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Uncovered {
    /// Code of no known convention (hand-written assembly, code generated
    /// at build time): rows for each function's entry only.
    Entries,
    /// C code entered by calls that keeps rbp as the ABI says: rows from
    /// the stack height analysis of its machine code.
    HeightAnalysis {
        /// Functions that start a stack (a thread's or the process's).
        tops: &'static [&'static str],
        /// Functions where rsp holds no frame of a caller's: no rows.
        no_frame: &'static [&'static str],
        /// Of those, the ones entered by a return (a signal handler's):
        /// the byte before such a return address gets no row either.
        returned_into: &'static [&'static str],
    },
}

/// An allocator a runtime's code in a module provides.
pub enum Allocator {
    /// Its API, to probe: the family, its entry points, and how rig knows
    /// it is there (`{module}` stands for the module's file name).
    Probe {
        family: AllocFamily,
        entries: Vec<Entry>,
        how: String,
    },
    /// An allocator rig recognises there and does not probe.
    Unprobed { allocator: String, why: String },
}

/// What one runtime knows of its code in a module. Every answer has a
/// default for code that is not special in that respect.
pub trait Runtime: Sync {
    /// Its name, as the report and the notes print it.
    fn name(&self) -> &'static str;

    /// Whether the module (`kind`, `facts`) holds this runtime's code.
    fn holds(&self, m: &Module<'_>) -> bool;

    /// The allocator API in the module that can serve `malloc` for the
    /// whole process (a C library's, jemalloc's...), with its entry points.
    fn malloc_api(&self, _m: &Module<'_>) -> Option<(AllocFamily, Vec<Entry>)> {
        None
    }

    /// The copy routines of the C library in the module, as the copy
    /// family counts them.
    fn copy_api(&self) -> Option<&'static CopyApi> {
        None
    }

    /// The mutex entry points of the C library in the module, as the
    /// locks family counts them.
    fn lock_api(&self) -> Option<&'static LockApi> {
        None
    }

    /// The copy routines of its own code (a runtime that copies without
    /// the C library), each probed at its entry in a module it holds.
    fn own_copies(&self) -> &'static [OwnRoutine] {
        &[]
    }

    /// The lock slow paths of its own code (a runtime that locks without
    /// the C library's mutexes), in a module it holds.
    fn own_locks(&self) -> &'static [OwnLock] {
        &[]
    }

    /// Why rig does not probe its own routines in the module (it does not
    /// know where that build passes their arguments); `None`: it does.
    fn own_code_unprobed(&self, _m: &Module<'_>) -> Option<String> {
        None
    }

    /// Allocators over or beside `malloc` that the module carries (Rust's
    /// shims, CPython's APIs, Go's heap), and those rig recognises there
    /// but does not probe.
    fn allocators(&self, _m: &Module<'_>) -> Vec<Allocator> {
        Vec::new()
    }

    /// The functions of its code in the module at `open`, by their raw
    /// names, where its runtime names them itself (Go's table, stripped or
    /// not); `None`: the ELF symbol tables do (`funcs::function_names`).
    fn function_names(&self, _open: &Path) -> Option<Vec<String>> {
        None
    }

    /// Where a probe counting the calls of function `symbol` goes in the
    /// module at `open`; `None`: at its ELF symbol (`funcs::func_entry`).
    fn func_entry(&self, _open: &Path, _symbol: &str) -> Option<Result<Option<FuncEntry>>> {
        None
    }

    /// Where to probe entry point `symbol` of this runtime's code in the
    /// module at `open`; `None`: the module's ELF symbol is the place.
    fn entry_point(&self, _open: &Path, _symbol: &str) -> Option<Result<Option<SymbolInfo>>> {
        None
    }

    /// Why no return probe may go in its code, and what is lost for it;
    /// `None`: they may (code on ordinary C stacks, where the kernel's
    /// replaced return address is restored when the call returns).
    fn no_return_probes(&self) -> Option<&'static str> {
        None
    }

    /// Unwind rows its code needs beyond what `.eh_frame` gives.
    fn unwind_rows(&self, _code: &Code<'_>) -> Result<Vec<UnwindRow>> {
        Ok(Vec::new())
    }

    /// How its code that no row covers gets rows; `None`: not its say.
    fn uncovered(&self) -> Option<Uncovered> {
        None
    }

    /// Whether the code at link-time `vaddr` of the module, in
    /// `function`, is this runtime's wrapper code: a stack's user site
    /// lies past it.
    fn is_wrapper_code(&self, _m: &Module<'_>, _vaddr: u64, _function: Option<&str>) -> bool {
        false
    }

    /// Its own table of names for the module at `open`, where it names
    /// its code itself (Go's function table); `None`: ELF symbols and
    /// DWARF name it.
    fn names(&self, _open: &Path) -> Option<std::sync::Arc<dyn CodeNames>> {
        None
    }

    /// Prefixes of the names of its functions that stand between the code
    /// a user can change and a counted event (an allocator's entry points,
    /// a standard library's internals): a stack's user site lies past
    /// them. A prefix ending in `*` is the same prefix; one starting with
    /// `*` matches anywhere in the name.
    fn wrapper_prefixes(&self) -> &'static [&'static str] {
        &[]
    }

    /// Prefixes of its own functions through which every allocation of
    /// its heap passes (Go's `runtime.newobject`, `makeslice`, `growslice`):
    /// an allocation counted with one of them as its caller names the
    /// runtime, not the code that asked, and is attributed by user site.
    fn allocates_through(&self) -> &'static [&'static str] {
        &[]
    }

    /// File-name prefixes of its modules whose every frame is such a
    /// wrapper.
    fn wrapper_modules(&self) -> &'static [&'static str] {
        &[]
    }

    /// What its code does of probe family `family` (`"alloc"`, `"copy"`,
    /// `"locks"`...) that rig does not count, in process `at.pid` (a heap
    /// of its own, work emitted inline): the report names it, with what
    /// would make it countable, and the family is incomplete, never a
    /// silent zero. `None`: nothing, or not its say.
    fn unseen(&self, _m: &Module<'_>, _at: &Mapped<'_>, _family: &str) -> Option<String> {
        None
    }

    /// Where the code [`Runtime::unseen`] names can have its runs counted
    /// (one uprobe_multi link on all of them), so the report measures the
    /// share of the family it missed. Empty: nowhere.
    fn unseen_sites(&self, _m: &Module<'_>, _at: &Mapped<'_>, _family: &str) -> Vec<UnseenSites> {
        Vec::new()
    }

    /// Why USDT marker `provider:name` in its code (the file at `open`)
    /// does not fire as its name says (a runtime's known defect): a count
    /// of it would be a silent zero, so the report says why and the user
    /// family is incomplete.
    fn marker_caveat(&self, _m: &Module<'_>, _o: &Path, _mk: (&str, &str)) -> Option<String> {
        None
    }

    /// Why a stack that reaches its code where no row is ends there.
    fn no_row_reason(&self) -> Option<&'static str> {
        None
    }

    /// For a process that maps its module `m` (at `at`): whether the code
    /// its JIT writes into anonymous memory keeps rbp as a frame pointer
    /// in every frame, so a stack walks through it, or why not. `None`:
    /// it writes none, or not its say.
    fn jit_frames(&self, _m: &Module<'_>, _at: &Mapped<'_>) -> Option<JitFrames> {
        None
    }

    /// Have the process that maps its module `m` (at `at`) write the names
    /// of its JIT code now (the perf map the `jit` runtime reads): what it
    /// did, to say, or why it could not. `None`: not its say.
    fn write_jit_names(&self, _m: &Module<'_>, _at: &Mapped<'_>) -> Option<Result<String, String>> {
        None
    }

    /// At a window's end, the size in bytes of each type of object whose
    /// allocations a marker of its counts (`marker_layer`'s `Objects`),
    /// by the marker's name for the type, read from the process now.
    fn object_sizes(&self, _m: &Module<'_>, _at: &Mapped<'_>) -> Option<ObjectSizes> {
        None
    }

    /// A clearer name for the JIT function its runtime's perf map calls
    /// `name` (the JVM's template interpreter, one blob for every
    /// interpreted method).
    fn jit_function(&self, _name: &str) -> Option<String> {
        None
    }

    /// The USDT markers of its module `m` that family `family` (`"alloc"`,
    /// `"locks"`) counts without the user naming them, in the process at
    /// `at`, each as `--usdt` writes it without the module
    /// (`PROVIDER:NAME[#S[/L]]`): a runtime's heap, collections or
    /// monitors, where it fires a marker for them (the JVM's object marker
    /// when it runs with -XX:+DTraceAllocProbes).
    fn implied_markers(
        &self,
        _m: &Module<'_>,
        _at: &Mapped<'_>,
        _family: &str,
    ) -> Vec<&'static str> {
        Vec::new()
    }

    /// The alloc layer the calls of USDT marker `(provider, name)` are, and
    /// what each call is (an object of a managed heap, a collection), when
    /// it is one of its runtime's.
    fn marker_layer(&self, _marker: (&str, &str)) -> Option<(&'static str, MarkerCounts)> {
        None
    }

    /// Whether the JIT function its perf map names `name` is the
    /// runtime's own code (a stub, an adapter), not the program's: the
    /// place a call was made lies past it.
    fn jit_own_code(&self, _name: &str) -> bool {
        false
    }

    /// The contended acquisitions of its locks that its markers mark, in
    /// the process that maps its module `m` (at `at`) (a JVM's monitors,
    /// with -XX:+DTraceMonitorProbes).
    fn marker_locks(&self, _m: &Module<'_>, _at: &Mapped<'_>) -> Vec<MarkerLock> {
        Vec::new()
    }

    /// For a process that maps its module `m` (at `at`), where the module
    /// interprets code whose frames it keeps in its own memory (CPython):
    /// where each thread's frames are, for the kernel side to walk at
    /// every event, or why rig cannot walk them. `None`: not an
    /// interpreter.
    fn interp_frames(&self, _m: &Module<'_>, _at: &Mapped<'_>) -> Option<Result<Interp, String>> {
        None
    }

    /// The names of the interpreted frames `words` (as the kernel side
    /// took them) in that process, read from it now, in order.
    fn interp_names(
        &self,
        _m: &Module<'_>,
        _at: &Mapped<'_>,
        _words: &[u64],
    ) -> Option<Vec<InterpName>> {
        None
    }

    /// Where module `m` (at `open`), an interpreter, starts each call of an
    /// interpreted function, for `--interp-calls`; why rig cannot count
    /// them there. `None`: not an interpreter.
    fn interp_calls(&self, _m: &Module<'_>, _open: &Path) -> Option<Result<InterpCalls, String>> {
        None
    }
}

/// A function as a runtime's own table names the code at one address:
/// the physical function, its entry, the instruction's (or outermost
/// inlined call's) file and line, and the calls inlined there, innermost
/// first (as blazesym gives C's).
pub struct Named {
    pub function: String,
    pub entry: u64,
    pub file: Option<String>,
    pub line: Option<u32>,
    /// (function, file, line) of each inlined call, innermost first.
    pub inlined: Vec<(String, Option<String>, Option<u32>)>,
}

/// A runtime's table of names for one module's code.
pub trait CodeNames: Send + Sync {
    /// The function holding link-time address `vaddr`.
    fn name_at(&self, vaddr: u64) -> Option<Named>;
}

/// Every runtime rig knows, in the order their answers are taken (the
/// first allocator API that can serve malloc wins: an allocator library's
/// own names before the C library's).
pub const ALL: &[&dyn Runtime] = &[
    &go::Go,
    &native::NativeAllocators,
    &pools::Pools,
    &musl::Musl,
    &glibc::Glibc,
    &static_glibc::StaticGlibc,
    &cpython::Cpython,
    &jvm::Jvm,
    &v8::V8,
    &jit::Jit,
];

/// Every runtime's wrapper prefixes (see [`Runtime::wrapper_prefixes`]):
/// frames are matched by name wherever their code is mapped.
pub fn wrapper_prefixes() -> impl Iterator<Item = &'static str> {
    ALL.iter()
        .flat_map(|r| r.wrapper_prefixes().iter().copied())
}

/// Whether `function` is a runtime's own code that every allocation of its
/// heap passes through (see [`Runtime::allocates_through`]).
pub fn allocates_through(function: &str) -> bool {
    ALL.iter()
        .flat_map(|r| r.allocates_through())
        .any(|p| function.starts_with(p))
}

/// Every runtime's wrapper modules (see [`Runtime::wrapper_modules`]).
pub fn wrapper_modules() -> impl Iterator<Item = &'static str> {
    ALL.iter().flat_map(|r| r.wrapper_modules().iter().copied())
}

/// The runtimes whose code module `m` holds.
pub fn runtimes<'m>(m: &'m Module<'m>) -> impl Iterator<Item = &'static dyn Runtime> + 'm {
    ALL.iter().copied().filter(move |r| r.holds(m))
}

/// The allocator API in module `m` that can serve malloc, if any.
pub fn malloc_api(m: &Module<'_>) -> Option<(AllocFamily, Vec<Entry>)> {
    runtimes(m).find_map(|r| r.malloc_api(m))
}

/// The copy routines of the C library in module `m`.
pub fn copy_api(m: &Module<'_>) -> Option<&'static CopyApi> {
    runtimes(m).find_map(|r| r.copy_api())
}

/// The mutex entry points of the C library in module `m`.
pub fn lock_api(m: &Module<'_>) -> Option<&'static LockApi> {
    runtimes(m).find_map(|r| r.lock_api())
}

/// The copy routines of runtimes' own code in module `m` (see
/// [`Runtime::own_copies`]).
pub fn own_copies(m: &Module<'_>) -> Result<Vec<&'static OwnRoutine>, String> {
    own(m, |r| r.own_copies())
}

/// The lock slow paths of runtimes' own code in module `m` (see
/// [`Runtime::own_locks`]).
pub fn own_locks(m: &Module<'_>) -> Result<Vec<&'static OwnLock>, String> {
    own(m, |r| r.own_locks())
}

/// What `list` gives of each runtime of module `m`; `Err`: why a runtime
/// with some does not have them probed there.
fn own<T: 'static>(
    m: &Module<'_>,
    list: impl Fn(&dyn Runtime) -> &'static [T],
) -> Result<Vec<&'static T>, String> {
    let mut v = Vec::new();
    for r in runtimes(m).filter(|r| !list(*r).is_empty()) {
        if let Some(why) = r.own_code_unprobed(m) {
            return Err(why);
        }
        v.extend(list(r));
    }
    Ok(v)
}

/// Every copy routine any runtime counts (the C libraries' counted and
/// joining, the runtimes' own), each once: the names a copy site is
/// reported under.
pub fn copy_names() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = Vec::new();
    for api in ALL.iter().filter_map(|r| r.copy_api()) {
        for n in api.counted.iter().chain(api.joins) {
            if !v.contains(n) {
                v.push(n);
            }
        }
    }
    v.extend(
        ALL.iter()
            .flat_map(|r| r.own_copies().iter().map(|o| o.symbol)),
    );
    v
}

/// How module `m`'s code that no row covers gets rows.
pub fn uncovered(m: &Module<'_>) -> Uncovered {
    runtimes(m)
        .find_map(|r| r.uncovered())
        .unwrap_or(Uncovered::Entries)
}

/// Whether the code at `vaddr` of module `m`, in `function`, is a
/// runtime's wrapper code (the C library's), so a stack's user site lies
/// past it.
pub fn is_wrapper_code(m: &Module<'_>, vaddr: u64, function: Option<&str>) -> bool {
    runtimes(m).any(|r| r.is_wrapper_code(m, vaddr, function))
}

/// Why no return probe may go in module `m`'s code, when a runtime of it
/// says so.
pub fn no_return_probes(m: &Module<'_>) -> Option<&'static str> {
    runtimes(m).find_map(|r| r.no_return_probes())
}

/// What module `m`'s code does of probe family `family` that rig does not
/// count (see [`Runtime::unseen`]), one line per runtime that says so.
pub fn unseen(m: &Module<'_>, at: &Mapped<'_>, family: &str) -> Vec<String> {
    runtimes(m)
        .filter_map(|r| r.unseen(m, at, family))
        .collect()
}

/// Why marker `(provider, name)` of module `m` does not fire as its name
/// says, when a runtime of it knows (see [`Runtime::marker_caveat`]).
pub fn marker_caveat(m: &Module<'_>, open: &Path, marker: (&str, &str)) -> Option<String> {
    runtimes(m).find_map(|r| r.marker_caveat(m, open, marker))
}

/// Why a stack ending with no row in module `m` ends there, when its
/// runtime says.
pub fn no_row_reason(m: &Module<'_>) -> Option<&'static str> {
    runtimes(m).find_map(|r| r.no_row_reason())
}

/// The runtime's own names for module `m` at `open`, where its runtime
/// names its code itself.
pub fn names(m: &Module<'_>, open: &Path) -> Option<std::sync::Arc<dyn CodeNames>> {
    runtimes(m).find_map(|r| r.names(open))
}

/// Where interpreter module `m` (at `open`) starts each call of an
/// interpreted function (see [`Runtime::interp_calls`]).
pub fn interp_calls(m: &Module<'_>, open: &Path) -> Option<Result<InterpCalls, String>> {
    runtimes(m).find_map(|r| r.interp_calls(m, open))
}

/// A row with a rule that needs no offsets (`END`, `NONE`, `GO_CGO`, `SIGNAL`).
pub fn marker(pc: u64, cfa: u8) -> UnwindRow {
    UnwindRow {
        pc,
        cfa,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests;
