//! Which allocators serve a process, found the way the dynamic linker binds
//! them, and the entry points rig probes for each.
//!
//! In: a pid and its memory map. Out: a [`Discovery`]: the allocator that
//! serves `malloc`/`free`/`calloc`/`realloc` (read from the C library's and
//! the executable's GOT slots in the live process: what the dynamic linker
//! bound, interposition included; a static definition in the executable
//! otherwise), every other allocator layer the executable or a mapped
//! library contains (Rust's allocator shims, a statically linked mimalloc or
//! jemalloc, CPython's PyObject/PyMem APIs), each with the entry points to
//! probe, and every allocator rig recognises but has no probes for.
//!
//! Allocators of names rig does not know (a private arena behind a custom
//! API) are out of reach: nothing here can tell them from ordinary code.
//! One that serves `malloc` itself is caught, though, because rig reads
//! who serves `malloc`.

use rig_ebpf::abi::alloc_kind as k;
use serde::Serialize;

use crate::process::maps::{basename, ProcMaps};
use crate::symbolize::elf::{
    load_base, ElfFacts, SymbolInfo, R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT,
};
use crate::symbolize::gopclntab::GoVersion;
use crate::symbolize::runtime::{self, Libc, ModuleKind};

/// An allocator family rig can probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AllocFamily {
    /// The C library's own malloc (glibc's ptmalloc).
    Glibc,
    Jemalloc,
    Tcmalloc,
    Mimalloc,
    /// Rust's global-allocator shims (`__rust_alloc`...): an outer layer over
    /// whatever `#[global_allocator]` is.
    Rust,
    /// CPython's PyObject_*/PyMem_*/PyMem_Raw* APIs (pymalloc over malloc).
    Cpython,
    /// libstdc++'s operator new/delete (over malloc).
    Cxx,
    /// Go's garbage-collected heap (`runtime.mallocgc`): no frees.
    Go,
    /// musl's malloc (mallocng), in its libc.so or linked into a static
    /// executable.
    Musl,
}

impl AllocFamily {
    pub fn name(self) -> &'static str {
        match self {
            AllocFamily::Glibc => "glibc",
            AllocFamily::Jemalloc => "jemalloc",
            AllocFamily::Tcmalloc => "tcmalloc",
            AllocFamily::Mimalloc => "mimalloc",
            AllocFamily::Rust => "rust",
            AllocFamily::Cpython => "cpython",
            AllocFamily::Cxx => "libstdc++",
            AllocFamily::Go => "go",
            AllocFamily::Musl => "musl",
        }
    }
}

impl AllocFamily {
    /// Whether its entry points may get a uretprobe: every family rig knows
    /// runs on ordinary C stacks, where the kernel's replaced return address
    /// is restored when the call returns, except Go's: Go moves goroutine
    /// stacks (copying the hijacked return address with them) and checks
    /// return addresses in its tracebacks, so a uretprobe in Go code
    /// crashes the program.
    pub fn takes_uretprobes(self) -> bool {
        self != AllocFamily::Go
    }
}

impl std::fmt::Display for AllocFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// One entry point to probe: (symbol, BPF program, kind, required).
pub type Entry = (String, &'static str, u32, bool);

/// An allocator layer found in one module of a process.
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    pub family: AllocFamily,
    /// The module as in maps (the executable for static allocators).
    pub module: String,
    /// Why rig thinks this allocator is there and in use.
    pub how: String,
    pub entries: Vec<Entry>,
}

/// An allocator the process maps or contains that rig does not probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unprobed {
    pub pid: u32,
    /// The allocator's name (a family rig knows, or what its symbols say).
    pub allocator: String,
    pub module: String,
    pub why: String,
}

/// What discovery found in one process.
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    /// Layers to probe, the one serving malloc first.
    pub layers: Vec<Layer>,
    pub unprobed: Vec<Unprobed>,
}

/// Allocators rig recognises by a symbol but has no probes for:
/// (symbol, allocator).
const KNOWN_UNPROBED: &[(&str, &str)] = &[
    ("scalable_malloc", "TBB scalablemalloc"),
    ("rpmalloc", "rpmalloc"),
    ("xxmalloc", "Hoard"),
    ("dlmalloc", "dlmalloc"),
    ("sn_rust_alloc", "snmalloc"),
    ("snmalloc_malloc", "snmalloc"),
];

/// The standard C entry points: (symbol, program, kind, required).
const C_API: &[(&str, &str, u32, bool)] = &[
    ("malloc", "rig_alloc_arg1", k::MALLOC, true),
    ("calloc", "rig_alloc_calloc", k::CALLOC, true),
    ("realloc", "rig_alloc_arg2", k::REALLOC, true),
    ("free", "rig_alloc_free", k::FREE, true),
    ("posix_memalign", "rig_alloc_arg3", k::POSIX_MEMALIGN, false),
    ("memalign", "rig_alloc_arg2", k::MEMALIGN, false),
    ("aligned_alloc", "rig_alloc_arg2", k::ALIGNED_ALLOC, false),
    ("valloc", "rig_alloc_arg1", k::VALLOC, false),
    ("pvalloc", "rig_alloc_arg1", k::PVALLOC, false),
];

/// The standard C names (an allocator library that serves malloc defines
/// them all; one that does not is probed through its own names only).
const C_NAMES: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "free",
    "posix_memalign",
    "memalign",
    "aligned_alloc",
    "valloc",
    "pvalloc",
];

/// jemalloc's API after its prefix (`""`, `je_`, tikv-jemallocator's `_rjem_`).
const JEMALLOC_API: &[(&str, &str, u32, bool)] = &[
    ("malloc", "rig_alloc_arg1", k::MALLOC, true),
    ("calloc", "rig_alloc_calloc", k::CALLOC, false),
    ("realloc", "rig_alloc_arg2", k::REALLOC, false),
    ("free", "rig_alloc_free", k::FREE, true),
    ("posix_memalign", "rig_alloc_arg3", k::POSIX_MEMALIGN, false),
    ("aligned_alloc", "rig_alloc_arg2", k::ALIGNED_ALLOC, false),
    ("memalign", "rig_alloc_arg2", k::MEMALIGN, false),
    ("valloc", "rig_alloc_arg1", k::VALLOC, false),
    ("mallocx", "rig_alloc_arg1", k::MALLOCX, false),
    ("rallocx", "rig_alloc_arg2", k::RALLOCX, false),
    ("sdallocx", "rig_alloc_free", k::SDALLOCX, false),
    ("dallocx", "rig_alloc_free", k::DALLOCX, false),
];

const TCMALLOC_API: &[(&str, &str, u32, bool)] = &[
    ("tc_malloc", "rig_alloc_arg1", k::MALLOC, true),
    ("tc_calloc", "rig_alloc_calloc", k::CALLOC, false),
    ("tc_realloc", "rig_alloc_arg2", k::REALLOC, false),
    ("tc_free", "rig_alloc_free", k::FREE, true),
    ("tc_free_sized", "rig_alloc_free", k::FREE, false),
    ("tc_memalign", "rig_alloc_arg2", k::MEMALIGN, false),
    (
        "tc_posix_memalign",
        "rig_alloc_arg3",
        k::POSIX_MEMALIGN,
        false,
    ),
    ("tc_new", "rig_alloc_arg1", k::CXX_NEW, false),
    ("tc_newarray", "rig_alloc_arg1", k::CXX_NEW_ARRAY, false),
    ("tc_delete", "rig_alloc_free", k::CXX_DELETE, false),
    (
        "tc_deletearray",
        "rig_alloc_free",
        k::CXX_DELETE_ARRAY,
        false,
    ),
];

const MIMALLOC_API: &[(&str, &str, u32, bool)] = &[
    ("mi_malloc", "rig_alloc_arg1", k::MALLOC, false),
    ("mi_calloc", "rig_alloc_calloc", k::CALLOC, false),
    ("mi_realloc", "rig_alloc_arg2", k::REALLOC, false),
    ("mi_free", "rig_alloc_free", k::FREE, true),
    ("mi_zalloc", "rig_alloc_arg1", k::CALLOC, false),
    ("mi_malloc_aligned", "rig_alloc_arg1", k::MALLOC, false),
    ("mi_zalloc_aligned", "rig_alloc_arg1", k::CALLOC, false),
    ("mi_realloc_aligned", "rig_alloc_arg2", k::REALLOC, false),
    ("mi_free_size", "rig_alloc_free", k::FREE, false),
    ("mi_free_aligned", "rig_alloc_free", k::FREE, false),
    ("mi_free_size_aligned", "rig_alloc_free", k::FREE, false),
    ("mi_new", "rig_alloc_arg1", k::CXX_NEW, false),
];

/// Rust's shims, in the order they are tried: `__rust_*` is what compiled
/// code calls; `__rg_*` (a `#[global_allocator]`) and `__rdl_*` (the
/// default, System) only when the `__rust_*` symbol is absent.
const RUST_API: &[(&str, &str, u32)] = &[
    ("alloc", "rig_alloc_arg1", k::RUST_ALLOC),
    ("alloc_zeroed", "rig_alloc_arg1", k::RUST_ALLOC_ZEROED),
    ("realloc", "rig_alloc_arg4", k::RUST_REALLOC),
    ("dealloc", "rig_alloc_free", k::RUST_DEALLOC),
];

/// Go's allocator and its collector: `runtime.mallocgc(size, typ,
/// needzero)` (every heap object: `new`, `make`, escaping composite
/// literals, string and slice growth) and `runtime.gcMarkTermination`,
/// which runs exactly once per completed collection cycle.
const GO_API: &[(&str, &str, u32, bool)] = &[
    ("runtime.mallocgc", "rig_alloc_go", k::GO_MALLOCGC, true),
    (
        "runtime.gcMarkTermination",
        "rig_alloc_go_gc",
        k::GO_GC,
        false,
    ),
];

const CPYTHON_DOMAINS: &[&str] = &["PyObject_", "PyMem_", "PyMem_Raw"];

const CPYTHON_API: &[(&str, &str, u32)] = &[
    ("Malloc", "rig_alloc_arg1", k::MALLOC),
    ("Calloc", "rig_alloc_calloc", k::CALLOC),
    ("Realloc", "rig_alloc_arg2", k::REALLOC),
    ("Free", "rig_alloc_free", k::FREE),
];

/// libstdc++'s operator new/delete (and the same names where an allocator
/// library defines them).
pub const CXX_API: &[(&str, &str, u32, bool)] = &[
    ("_Znwm", "rig_alloc_arg1", k::CXX_NEW, false),
    ("_ZnwmRKSt9nothrow_t", "rig_alloc_arg1", k::CXX_NEW, false),
    ("_ZnwmSt11align_val_t", "rig_alloc_arg1", k::CXX_NEW, false),
    (
        "_ZnwmSt11align_val_tRKSt9nothrow_t",
        "rig_alloc_arg1",
        k::CXX_NEW,
        false,
    ),
    ("_Znam", "rig_alloc_arg1", k::CXX_NEW_ARRAY, false),
    (
        "_ZnamRKSt9nothrow_t",
        "rig_alloc_arg1",
        k::CXX_NEW_ARRAY,
        false,
    ),
    (
        "_ZnamSt11align_val_t",
        "rig_alloc_arg1",
        k::CXX_NEW_ARRAY,
        false,
    ),
    ("_ZdlPv", "rig_alloc_free", k::CXX_DELETE, false),
    ("_ZdlPvm", "rig_alloc_free", k::CXX_DELETE, false),
    (
        "_ZdlPvSt11align_val_t",
        "rig_alloc_free",
        k::CXX_DELETE,
        false,
    ),
    (
        "_ZdlPvmSt11align_val_t",
        "rig_alloc_free",
        k::CXX_DELETE,
        false,
    ),
    ("_ZdaPv", "rig_alloc_free", k::CXX_DELETE_ARRAY, false),
    ("_ZdaPvm", "rig_alloc_free", k::CXX_DELETE_ARRAY, false),
    (
        "_ZdaPvSt11align_val_t",
        "rig_alloc_free",
        k::CXX_DELETE_ARRAY,
        false,
    ),
];

fn owned(table: &[(&str, &'static str, u32, bool)], prefix: &str) -> Vec<Entry> {
    table
        .iter()
        .map(|&(s, p, kind, req)| (format!("{prefix}{s}"), p, kind, req))
        .collect()
}

/// Which family a module's symbols say it is, and the entry points to probe
/// in it (`prefix` for jemalloc's prefixed builds).
fn family_of(facts: &ElfFacts) -> Option<(AllocFamily, Vec<Entry>)> {
    let has = |s: &str| facts.lookup_symbol(s).is_some();
    if has("tc_malloc") {
        return Some((AllocFamily::Tcmalloc, owned(TCMALLOC_API, "")));
    }
    // A static mimalloc keeps only what its caller uses (mi_malloc_aligned
    // and mi_free behind the Rust crate), so any of its names will do.
    if ["mi_malloc", "mi_malloc_aligned", "mi_free"]
        .iter()
        .any(|s| has(s))
    {
        return Some((AllocFamily::Mimalloc, owned(MIMALLOC_API, "")));
    }
    for prefix in ["", "je_", "_rjem_"] {
        if has(&format!("{prefix}mallocx")) || has(&format!("{prefix}sdallocx")) {
            return Some((AllocFamily::Jemalloc, owned(JEMALLOC_API, prefix)));
        }
    }
    // Which C library is the module kind's word: musl defines
    // __libc_malloc too (1.2.3, Debian's), or only a local
    // __libc_malloc_impl behind a weak malloc (1.2.5, the one Rust's
    // x86_64-unknown-linux-musl target links in).
    let musl = matches!(
        ModuleKind::of("", facts),
        ModuleKind::StaticC { libc: Libc::Musl } | ModuleKind::CLibrary { libc: Libc::Musl }
    );
    if musl && has("malloc") {
        return Some((AllocFamily::Musl, owned(C_API, "")));
    }
    if has("__libc_malloc") {
        return Some((AllocFamily::Glibc, owned(C_API, "")));
    }
    None
}

/// The raw name of Rust allocator shim `name` (`__rust_alloc`) in `facts`:
/// plain, or inside the `__rustc` namespace newer toolchains use, mangled
/// v0 (`_RNvCs..._7___rustc12___rust_alloc`) or legacy
/// (`_ZN7__rustc12__rust_alloc17h...E`).
fn rust_shim(facts: &ElfFacts, name: &str) -> Option<String> {
    if facts.lookup_symbol(name).is_some() {
        return Some(name.to_string());
    }
    let v0 = format!("7___rustc{}_{name}", name.len());
    let legacy = format!("_ZN7__rustc{}{name}17h", name.len());
    facts
        .syms
        .iter()
        .filter(|s| s.shndx != 0 && s.vaddr != 0)
        .map(|s| &s.name)
        .find(|n| (n.starts_with("_R") && n.ends_with(&v0)) || n.starts_with(&legacy))
        .cloned()
}

/// The outer layers a module contains: Rust shims, CPython's APIs.
fn outer_layers(facts: &ElfFacts) -> Vec<(AllocFamily, Vec<Entry>)> {
    let mut out = Vec::new();
    let rust: Vec<Entry> = RUST_API
        .iter()
        .filter_map(|&(api, program, kind)| {
            ["__rust_", "__rg_", "__rdl_"]
                .iter()
                .find_map(|p| rust_shim(facts, &format!("{p}{api}")))
                .map(|s| (s, program, kind, false))
        })
        .collect();
    if !rust.is_empty() {
        out.push((AllocFamily::Rust, rust));
    }
    if facts.lookup_symbol("PyObject_Malloc").is_some() {
        let py = CPYTHON_DOMAINS
            .iter()
            .flat_map(|d| {
                CPYTHON_API
                    .iter()
                    .map(move |&(api, program, kind)| (format!("{d}{api}"), program, kind, false))
            })
            .collect();
        out.push((AllocFamily::Cpython, py));
    }
    out
}

/// Read a GOT slot of `module` for `symbol` in the live process: the
/// address the dynamic linker bound it to. A lazy slot not yet bound points
/// back into `module`'s own PLT and says nothing; a slot bound to `module`'s
/// own definition (libc's malloc when nothing interposes) does.
fn bound_slot(pid: u32, maps: &ProcMaps, module: &str, symbol: &str) -> Option<u64> {
    let facts = ElfFacts::shared(&maps.readable_path(module)).ok()?;
    let base = load_base(maps, module, &facts)?;
    let own = facts
        .lookup_symbol(symbol)
        .map(|s| base.wrapping_add(s.vaddr));
    facts
        .relocs
        .iter()
        .filter(|r| {
            matches!(r.r_type, R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT)
                && r.sym.as_deref() == Some(symbol)
        })
        .find_map(|r| {
            let v = super::ifunc::read_u64(pid, base.wrapping_add(r.offset)).ok()?;
            let (m, _) = maps.file_offset(v)?;
            (m.path.as_deref() != Some(module) || Some(v) == own).then_some(v)
        })
}

/// The module that serves `symbol` for the whole process, and how that was
/// established: the C library's GOT slot (libc calls malloc through it, so
/// the dynamic linker binds it to the first definition in lookup order),
/// else the executable's, else the executable's own definition, else the
/// C library's.
pub fn server_of(
    pid: u32,
    maps: &ProcMaps,
    exe: Option<&str>,
    symbol: &str,
) -> Option<(String, String)> {
    let libc = maps.libc_path();
    for module in [libc.as_deref(), exe].into_iter().flatten() {
        if let Some(v) = bound_slot(pid, maps, module, symbol) {
            let (m, _) = maps.file_offset(v)?;
            let path = m.path.clone()?;
            let mut how = format!(
                "{}'s GOT slot for {symbol} -> {v:#x} in {}",
                basename(module),
                basename(&path)
            );
            // A stub whose own slot is not bound yet says nothing.
            if let Some((path, _)) = follow_canonical_plt(pid, maps, symbol, path, v, &mut how) {
                return Some((path, how));
            }
        }
    }
    for module in [exe, libc.as_deref()].into_iter().flatten() {
        let facts = ElfFacts::shared(&maps.readable_path(module)).ok()?;
        if facts.lookup_symbol(symbol).is_some() {
            return Some((
                module.to_string(),
                format!("defined in {} (no bound GOT slot read)", basename(module)),
            ));
        }
    }
    None
}

/// Where a call to `v`, an address in `path`, really goes. A non-PIE
/// executable that takes `symbol`'s address defines it as its own
/// `symbol@plt` stub (the canonical PLT entry, so that the address is the
/// same everywhere), and the dynamic linker binds every other module's slot
/// to that stub, which jumps on through the executable's own GOT slot: follow
/// such stubs (through the live process's slots) to the code they reach,
/// noting each step in `how`. `None` when a stub's slot is not bound yet.
fn follow_canonical_plt(
    pid: u32,
    maps: &ProcMaps,
    symbol: &str,
    mut path: String,
    mut v: u64,
    how: &mut String,
) -> Option<(String, u64)> {
    // A chain of stubs longer than this is not one the dynamic linker makes.
    for _ in 0..4 {
        let facts = ElfFacts::shared(&maps.readable_path(&path)).ok()?;
        let base = load_base(maps, &path, &facts)?;
        let stub = facts.plt_stub_at(v.wrapping_sub(base));
        if stub.is_none_or(|s| s.name.split('@').next() != Some(symbol)) {
            return Some((path, v));
        }
        let next = bound_slot(pid, maps, &path, symbol)?;
        let (m, _) = maps.file_offset(next)?;
        let next_path = m.path.clone()?;
        how.push_str(&format!(
            ", the canonical {symbol}@plt of {}, whose GOT slot -> {next:#x} in {}",
            basename(&path),
            basename(&next_path)
        ));
        (path, v) = (next_path, next);
    }
    None
}

/// The module that holds the process's C library, as in maps: the shared
/// libc.so when one is mapped, else the executable when it carries its C
/// library linked in (`ModuleKind::StaticC`: static glibc or musl), with
/// which C library it is.
pub fn c_library(pid: u32, maps: &ProcMaps) -> Option<(String, ModuleKind)> {
    if let Some(libc) = maps.libc_path() {
        let kind = ModuleKind::of_file(&libc, &maps.readable_path(&libc)).ok()?;
        return Some((libc, kind));
    }
    let exe = exe_in_maps(pid, maps)?;
    match ModuleKind::of_file(&exe, &maps.readable_path(&exe)).ok()? {
        k @ ModuleKind::StaticC { .. } => Some((exe, k)),
        _ => None,
    }
}

/// The executable's path as it appears in maps.
fn exe_in_maps(pid: u32, maps: &ProcMaps) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let exe = exe.to_string_lossy().into_owned();
    maps.objects()
        .into_iter()
        .map(|o| o.path)
        .find(|p| *p == exe)
}

/// Find the allocators of `pid`.
pub fn discover(pid: u32, maps: &ProcMaps) -> Discovery {
    let exe = exe_in_maps(pid, maps);
    let mut d = Discovery::default();
    let server = server_of(pid, maps, exe.as_deref(), "malloc");
    if let Some((module, how)) = &server {
        d.add_server(pid, maps, module, how);
    }
    for o in maps.objects() {
        let path = o.path;
        if path.starts_with('[') || !o.executable {
            continue;
        }
        let Ok(facts) = ElfFacts::shared(&maps.readable_path(&path)) else {
            continue;
        };
        let open = maps.readable_path(&path);
        if let Ok(ModuleKind::Go { version }) = ModuleKind::of_file(&path, &open) {
            d.add_go(pid, &path, version);
            continue;
        }
        let serves_malloc = server.as_ref().is_some_and(|(m, _)| *m == path);
        d.add_object(pid, &path, &facts, serves_malloc);
    }
    if let Some(cxx) = libstdcxx_layer(maps, &d.layers) {
        d.layers.push(cxx);
    }
    d
}

impl Discovery {
    /// A Go module: its allocator is probed when its version passes the
    /// size in a register rig reads (the register ABI, Go 1.17 on), and
    /// listed as unprobed, with the version, otherwise.
    fn add_go(&mut self, pid: u32, path: &str, version: Option<GoVersion>) {
        match version {
            Some(v) if v.register_abi() => self.layers.push(Layer {
                family: AllocFamily::Go,
                module: path.to_string(),
                how: format!(
                    "Go runtime ({v}) in {}: garbage-collected, no frees",
                    basename(path)
                ),
                entries: owned(GO_API, ""),
            }),
            _ => self.unprobed.push(Unprobed {
                pid,
                allocator: "go".to_string(),
                module: path.to_string(),
                why: format!(
                    "{} is Go {}: rig reads runtime.mallocgc's size from the register ABI \
                     of Go 1.17 and later, and does not guess an older one's",
                    basename(path),
                    version.map_or("of no recorded version".to_string(), |v| v.to_string())
                ),
            }),
        }
    }

    /// The allocator serving malloc (`module`, found `how`): the first
    /// layer, or unprobed when it is none rig knows.
    fn add_server(&mut self, pid: u32, maps: &ProcMaps, module: &str, how: &str) {
        match ElfFacts::shared(&maps.readable_path(module))
            .ok()
            .and_then(|f| family_of(&f))
        {
            Some((family, mut entries)) => {
                // A C library linked into the executable keeps only what
                // the program calls: an entry point it lacks (calloc never
                // linked in) is absent, not an error.
                let open = maps.readable_path(module);
                let statically = matches!(
                    ModuleKind::of_file(module, &open),
                    Ok(ModuleKind::StaticC { .. })
                );
                if statically {
                    for e in &mut entries {
                        e.3 = false;
                    }
                }
                // jemalloc, tcmalloc and mimalloc libraries export the C
                // names as well; probe those first so a call through them
                // is named as the caller wrote it.
                if !matches!(family, AllocFamily::Glibc | AllocFamily::Musl) {
                    let mut c = owned(C_API, "");
                    c.extend(
                        entries
                            .into_iter()
                            .filter(|e| !C_NAMES.contains(&e.0.as_str())),
                    );
                    c.extend(owned(CXX_API, ""));
                    entries = c;
                }
                self.layers.push(Layer {
                    family,
                    module: module.to_string(),
                    how: if statically {
                        format!("serves malloc ({how}), {family}'s, linked into the executable")
                    } else {
                        format!("serves malloc ({how})")
                    },
                    entries,
                });
            }
            None => self.unprobed.push(Unprobed {
                pid,
                allocator: format!("unknown allocator in {}", basename(module)),
                module: module.to_string(),
                why: format!(
                    "malloc is served by {} ({how}), which is none of the allocators rig probes \
                     (glibc, jemalloc, tcmalloc, mimalloc)",
                    basename(module)
                ),
            }),
        }
    }

    /// What one executable mapping adds: a second allocator's own API
    /// (unless `path` serves malloc), the outer layers (Rust, C++, ...)
    /// and the allocators rig knows but does not probe.
    fn add_object(&mut self, pid: u32, path: &str, facts: &ElfFacts, serves_malloc: bool) {
        if !serves_malloc {
            if let Some((family, entries)) = family_of(facts) {
                // A second allocator that does not serve malloc: probe its
                // own API (a static mimalloc or prefixed jemalloc behind a
                // Rust #[global_allocator]). glibc's malloc, interposed by
                // another, is simply not called.
                if family != AllocFamily::Glibc {
                    // A static copy keeps only the entry points its program
                    // calls (tikv-jemallocator never calls _rjem_free): none
                    // is required, but at least one must go in.
                    let own: Vec<Entry> = entries
                        .into_iter()
                        .filter(|e| !C_NAMES.contains(&e.0.as_str()))
                        .map(|e| (e.0, e.1, e.2, false))
                        .collect();
                    self.layers.push(Layer {
                        family,
                        module: path.to_string(),
                        how: format!("{family}'s own API in {}", basename(path)),
                        entries: own,
                    });
                }
            }
        }
        for (family, entries) in outer_layers(facts) {
            self.layers.push(Layer {
                family,
                module: path.to_string(),
                how: format!("{family} allocation API in {}", basename(path)),
                entries,
            });
        }
        for &(symbol, name) in KNOWN_UNPROBED {
            if facts.lookup_symbol(symbol).is_some() {
                self.unprobed.push(Unprobed {
                    pid,
                    allocator: name.to_string(),
                    module: path.to_string(),
                    why: format!(
                        "{} defines {symbol} ({name}); rig has no probes for {name}",
                        basename(path)
                    ),
                });
            }
        }
    }
}

/// libstdc++'s operator new, unless the serving allocator (the first of
/// `layers`) defines its own: jemalloc, tcmalloc and mimalloc do, and the
/// dynamic linker binds theirs.
fn libstdcxx_layer(maps: &ProcMaps, layers: &[Layer]) -> Option<Layer> {
    let serves_new = layers.first().is_some_and(|l| {
        l.family != AllocFamily::Glibc
            && ElfFacts::shared(&maps.readable_path(&l.module))
                .is_ok_and(|f| f.lookup_symbol("_Znwm").is_some())
    });
    if serves_new {
        return None;
    }
    let cxx = maps.find_object(|p| basename(p).starts_with("libstdc++.so"))?;
    Some(Layer {
        family: AllocFamily::Cxx,
        module: cxx,
        how: "operator new/delete in libstdc++".to_string(),
        entries: owned(CXX_API, ""),
    })
}

/// Where to probe entry point `symbol` of a `family` layer in the module
/// at `lib`: its symbol (`.symtab`/`.dynsym`); for Go, the function table
/// (`.gopclntab`, there when the binary is stripped too), and the probe
/// goes past the prologue's stack check (`cmp 0x10(%r14),%rsp; jbe`): a
/// call that grows its goroutine's stack runs the prologue twice
/// (`morestack` restarts the function), the rest of the function once.
pub fn find_entry(
    lib: &std::path::Path,
    family: AllocFamily,
    symbol: &str,
) -> anyhow::Result<Option<SymbolInfo>> {
    let facts = ElfFacts::shared(lib)?;
    if family != AllocFamily::Go {
        return Ok(facts.lookup_symbol(symbol));
    }
    let go = runtime::go_table(lib)?;
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
    let skip = past_go_stack_check(head).unwrap_or(0) as u64;
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
fn past_go_stack_check(code: &[u8]) -> Option<usize> {
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

/// The name an entry point is shown by: its symbol, except a mangled Rust
/// shim (`_RNvCs..___rustc12___rust_alloc`), shown by its API name.
/// Every allocator entry name the alloc family can report (as
/// [`display_name`] writes it), so counter names built from them (a gate
/// baseline's `__rust_alloc calls @ SITE`) can be checked.
pub fn entry_names() -> Vec<String> {
    let mut names: Vec<String> = C_NAMES.iter().map(|s| s.to_string()).collect();
    for prefix in ["", "je_", "_rjem_"] {
        names.extend(JEMALLOC_API.iter().map(|e| format!("{prefix}{}", e.0)));
    }
    names.extend(TCMALLOC_API.iter().map(|e| e.0.to_string()));
    names.extend(MIMALLOC_API.iter().map(|e| e.0.to_string()));
    for prefix in ["__rust_", "__rg_", "__rdl_"] {
        names.extend(RUST_API.iter().map(|e| format!("{prefix}{}", e.0)));
    }
    for domain in CPYTHON_DOMAINS {
        names.extend(CPYTHON_API.iter().map(|e| format!("{domain}{}", e.0)));
    }
    names.extend(GO_API.iter().map(|e| e.0.to_string()));
    names.sort();
    names.dedup();
    names
}

pub fn display_name(symbol: &str, kind: u32) -> String {
    if !(symbol.starts_with("_R") || symbol.starts_with("_ZN")) {
        return symbol.to_string();
    }
    match kind {
        k::RUST_ALLOC => "__rust_alloc",
        k::RUST_ALLOC_ZEROED => "__rust_alloc_zeroed",
        k::RUST_REALLOC => "__rust_realloc",
        k::RUST_DEALLOC => "__rust_dealloc",
        _ => symbol,
    }
    .to_string()
}

/// Whether `path` names a module that is an allocator library (its frames
/// are the allocator's own, never a user's).
pub fn is_allocator_module(path: &str) -> bool {
    let b = basename(path);
    ["libjemalloc", "libtcmalloc", "libmimalloc"]
        .iter()
        .any(|p| b.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn jemalloc_prefixes_give_prefixed_entry_points() {
        let e = owned(JEMALLOC_API, "_rjem_");
        assert!(e
            .iter()
            .any(|x| x.0 == "_rjem_sdallocx" && x.2 == k::SDALLOCX));
        assert!(e
            .iter()
            .any(|x| x.0 == "_rjem_mallocx" && x.1 == "rig_alloc_arg1"));
    }

    #[test]
    fn go_prologues_stack_checks_are_measured() {
        // runtime.mallocgc, go1.19.8: cmp 0x10(%r14),%rsp; jbe; sub $0x70,%rsp
        let small = [
            0x49, 0x3b, 0x66, 0x10, 0x0f, 0x86, 0xbe, 0x08, 0, 0, 0x48, 0x83, 0xec, 0x70,
        ];
        assert_eq!(past_go_stack_check(&small), Some(10));
        // runtime.gcMarkTermination: a big frame checks rsp - N in r12.
        let big = [
            0x4c, 0x8d, 0xa4, 0x24, 0xd0, 0xfe, 0xff, 0xff, 0x4d, 0x3b, 0x66, 0x10, 0x0f, 0x86,
            0x7a, 0x0c, 0, 0, 0x48,
        ];
        assert_eq!(past_go_stack_check(&big), Some(18));
        // A short jbe, and a function without the check.
        assert_eq!(
            past_go_stack_check(&[0x49, 0x3b, 0x66, 0x10, 0x76, 0x20]),
            Some(6)
        );
        assert_eq!(past_go_stack_check(&[0x48, 0x83, 0xec, 0x18]), None);
    }

    #[test]
    fn allocator_libraries_are_recognised_by_file_name() {
        assert!(is_allocator_module(
            "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
        ));
        assert!(is_allocator_module("/usr/lib/libtcmalloc_minimal.so.4"));
        assert!(!is_allocator_module("/usr/lib/x86_64-linux-gnu/libc.so.6"));
    }

    #[test]
    fn the_c_library_is_glibc_by_its_internal_names() {
        let facts = ElfFacts::shared(Path::new("/lib/x86_64-linux-gnu/libc.so.6")).unwrap();
        let (family, entries) = family_of(&facts).unwrap();
        assert_eq!(family, AllocFamily::Glibc);
        assert_eq!(entries[0].0, "malloc");
    }
}
