//! Native code's allocators: jemalloc, tcmalloc and mimalloc (as shared
//! libraries or linked in, prefixed or not), Rust's global-allocator
//! shims, and the allocators rig recognises but does not probe.

use rig_ebpf::abi::alloc_kind as k;

use super::alloc::{owned, AllocFamily, Entry};
use super::{Allocator, Module, ModuleKind, Runtime};
use crate::elf::ElfFacts;
use crate::process::maps::basename;

/// Any ELF code: what its symbols say it carries.
pub struct NativeAllocators;

impl Runtime for NativeAllocators {
    fn name(&self) -> &'static str {
        "native"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        !matches!(m.kind, ModuleKind::Go { .. } | ModuleKind::Jit)
    }

    /// Rust's allocator shims (also under the `__rustc::` namespace newer
    /// toolchains use) and std internals (trait impls, `<&std::net::TcpStream
    /// as std::io::Read>::read`, match on the type after `<`, `&`, `mut `);
    /// the C++ runtime's and library's internals; the allocator libraries'
    /// own names.
    fn wrapper_prefixes(&self) -> &'static [&'static str] {
        &[
            "__rust_",
            "__rdl_",
            "__rg_",
            "__rustc::",
            "alloc::",
            "core::",
            "std::",
            "hashbrown::",
            "operator new",
            "operator delete",
            "__gnu_cxx::",
            "je_",
            "_rjem_",
            "mimalloc::",
            "tikv_jemallocator::",
            "tc_",
            "tcmalloc::",
            "mi_",
            "_mi_",
        ]
    }

    /// The C++ runtime and the allocator libraries.
    fn wrapper_modules(&self) -> &'static [&'static str] {
        &[
            "libstdc++",
            "libgcc_s",
            "libjemalloc",
            "libtcmalloc",
            "libmimalloc",
        ]
    }

    fn malloc_api(&self, m: &Module<'_>) -> Option<(AllocFamily, Vec<Entry>)> {
        let has = |s: &str| m.facts.lookup_symbol(s).is_some();
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
        None
    }

    fn allocators(&self, m: &Module<'_>) -> Vec<Allocator> {
        let mut out = Vec::new();
        let rust: Vec<Entry> = RUST_API
            .iter()
            .filter_map(|&(api, program, kind)| {
                ["__rust_", "__rg_", "__rdl_"]
                    .iter()
                    .find_map(|p| rust_shim(m.facts, &format!("{p}{api}")))
                    .map(|s| (s, program, kind, false))
            })
            .collect();
        if !rust.is_empty() {
            out.push(Allocator::Probe {
                family: AllocFamily::Rust,
                entries: rust,
                how: "rust allocation API in {module}".to_string(),
            });
        }
        for &(symbol, name) in KNOWN_UNPROBED {
            if m.facts.lookup_symbol(symbol).is_some() {
                out.push(Allocator::Unprobed {
                    allocator: name.to_string(),
                    why: format!("defines {symbol} ({name}); rig has no probes for {name}"),
                });
            }
        }
        out
    }
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

/// jemalloc's API after its prefix (`""`, `je_`, tikv-jemallocator's `_rjem_`).
pub const JEMALLOC_API: &[(&str, &str, u32, bool)] = &[
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

pub const TCMALLOC_API: &[(&str, &str, u32, bool)] = &[
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

pub const MIMALLOC_API: &[(&str, &str, u32, bool)] = &[
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
pub const RUST_API: &[(&str, &str, u32)] = &[
    ("alloc", "rig_alloc_arg1", k::RUST_ALLOC),
    ("alloc_zeroed", "rig_alloc_arg1", k::RUST_ALLOC_ZEROED),
    ("realloc", "rig_alloc_arg4", k::RUST_REALLOC),
    ("dealloc", "rig_alloc_free", k::RUST_DEALLOC),
];

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

/// Whether `path` names a module that is an allocator library (its frames
/// are the allocator's own, never a user's).
pub fn is_allocator_module(path: &str) -> bool {
    let b = basename(path);
    ["libjemalloc", "libtcmalloc", "libmimalloc"]
        .iter()
        .any(|p| b.starts_with(p))
}
