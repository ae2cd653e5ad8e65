//! The allocation vocabulary every runtime's entry points are written in:
//! the families rig probes, an entry point, the standard C API.

use rig_ebpf::abi::alloc_kind as k;
use serde::Serialize;

use super::{cpython, go, native};

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
    /// The C library's malloc other than glibc's (musl's mallocng), in
    /// its libc.so or linked into a static executable.
    Musl,
    /// An application's own allocator (pools.rs): a layer beside the
    /// heap's, never in its totals.
    Application,
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
            AllocFamily::Application => "application",
        }
    }
}

/// Each family's policy: the one table the attach code reads.
impl AllocFamily {
    /// Whether this is a C library's own malloc (glibc's or musl's): the
    /// allocator every process has. An entry point of it that is missing or
    /// cannot be probed fails the family; any other layer's is recorded as
    /// unprobed and the rest go in.
    pub fn is_c_library(self) -> bool {
        matches!(self, AllocFamily::Glibc | AllocFamily::Musl)
    }

    /// Whether an optional entry point of it that only jumps on (glibc's
    /// or libstdc++'s sized and array forms) gets the forwarder program,
    /// counted once at the end of the jump chain under its own name. Not
    /// musl's: with the forwarder on a static musl's `memalign` (a jump
    /// into `aligned_alloc`, which calls malloc's code itself) the static
    /// calibration server's per-site counts came out wrong, and they are
    /// exact without it. Outer layers (Rust shims, CPython) keep their own
    /// program: the call they jump into is another layer's, counted there
    /// as inner.
    pub fn forwards(self) -> bool {
        matches!(self, AllocFamily::Glibc | AllocFamily::Cxx)
    }

    /// Whether its calls are a layer beside the heap's (an application's
    /// pools, pools.rs): never in the heap's totals, never around its
    /// calls, so its entry points need no return probe.
    pub fn beside_the_heap(self) -> bool {
        self == AllocFamily::Application
    }
}

impl std::fmt::Display for AllocFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The families whose API can serve malloc for a whole process.
pub const MALLOC_SERVERS: [AllocFamily; 5] = [
    AllocFamily::Glibc,
    AllocFamily::Musl,
    AllocFamily::Jemalloc,
    AllocFamily::Tcmalloc,
    AllocFamily::Mimalloc,
];

/// One entry point to probe: (symbol, BPF program, kind, required).
pub type Entry = (String, &'static str, u32, bool);

/// The standard C entry points: (symbol, program, kind, required).
pub const C_API: &[(&str, &str, u32, bool)] = &[
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
pub const C_NAMES: &[&str] = &[
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

pub fn owned(table: &[(&str, &'static str, u32, bool)], prefix: &str) -> Vec<Entry> {
    table
        .iter()
        .map(|&(s, p, kind, req)| (format!("{prefix}{s}"), p, kind, req))
        .collect()
}

/// Every allocator entry name the alloc family can report (as
/// [`display_name`] writes it), so counter names built from them (a gate
/// baseline's `__rust_alloc calls @ SITE`) can be checked.
pub fn entry_names() -> Vec<String> {
    let mut names: Vec<String> = C_NAMES.iter().map(|s| s.to_string()).collect();
    for prefix in ["", "je_", "_rjem_"] {
        names.extend(
            native::JEMALLOC_API
                .iter()
                .map(|e| format!("{prefix}{}", e.0)),
        );
    }
    names.extend(native::TCMALLOC_API.iter().map(|e| e.0.to_string()));
    names.extend(native::MIMALLOC_API.iter().map(|e| e.0.to_string()));
    for prefix in ["__rust_", "__rg_", "__rdl_"] {
        names.extend(native::RUST_API.iter().map(|e| format!("{prefix}{}", e.0)));
    }
    for domain in cpython::DOMAINS {
        names.extend(cpython::API.iter().map(|e| format!("{domain}{}", e.0)));
    }
    names.extend(go::ALLOC_API.iter().map(|e| e.0.to_string()));
    names.extend(go::specialized_names());
    names.extend(super::pools::entry_names().map(str::to_string));
    names.sort();
    names.dedup();
    names
}

/// The name an entry point is shown by: its symbol, except a mangled Rust
/// shim (`_RNvCs..___rustc12___rust_alloc`), shown by its API name.
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

/// The name an allocation kind (`alloc_kind`) is reported by.
pub fn kind_name(kind: u32) -> &'static str {
    match kind {
        k::MALLOC => "malloc",
        k::CALLOC => "calloc",
        k::REALLOC => "realloc",
        k::FREE => "free",
        k::POSIX_MEMALIGN => "posix_memalign",
        k::MEMALIGN => "memalign",
        k::ALIGNED_ALLOC => "aligned_alloc",
        k::VALLOC => "valloc",
        k::PVALLOC => "pvalloc",
        k::CXX_NEW => "operator new",
        k::CXX_NEW_ARRAY => "operator new[]",
        k::CXX_DELETE => "operator delete",
        k::CXX_DELETE_ARRAY => "operator delete[]",
        k::MALLOCX => "mallocx",
        k::RALLOCX => "rallocx",
        k::SDALLOCX => "sdallocx",
        k::DALLOCX => "dallocx",
        k::RUST_ALLOC => "__rust_alloc",
        k::RUST_ALLOC_ZEROED => "__rust_alloc_zeroed",
        k::RUST_REALLOC => "__rust_realloc",
        k::RUST_DEALLOC => "__rust_dealloc",
        k::GO_MALLOCGC => "runtime.mallocgc",
        k::GO_GC => "GC cycle",
        k::POOL_ALLOC => "pool alloc",
        k::POOL_FREE => "pool free",
        _ => "?",
    }
}
