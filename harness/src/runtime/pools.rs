//! Application allocators: the pools servers take a request's memory from
//! (haproxy's pools, APR's, nginx's, PostgreSQL's memory contexts, glib's
//! slices), known here by name, and the functions a user declares as one
//! (`--alloc-func NAME[@N]`, `--free-func NAME`).
//!
//! A server that allocates from its own pools calls `malloc` only when a
//! pool grows: counting `malloc` alone, it looks as if a request allocated
//! nothing. These are counted as a layer of their own, `application`,
//! **beside** the heap's: its calls and bytes per request by call site, in
//! the alloc rows and the layers table, never added to `allocs/req` (which
//! stays what the process's malloc did), and never making the mallocs a
//! pool makes when it grows "inner" (they are the heap's own calls). An
//! entry point with no size argument (haproxy's `__pool_alloc(pool,
//! flags)`: the pool knows its size) is counted and marked unsized, its
//! bytes unknown rather than zero.

use rig_ebpf::abi::alloc_kind as k;

use super::alloc::{AllocFamily, Entry};
use super::{Allocator, Module, ModuleKind, Runtime};

/// An application allocator known by name: whose it is, and its entry
/// points (symbol, BPF program by where the size is, kind).
pub struct Pool {
    pub owner: &'static str,
    pub entries: &'static [(&'static str, &'static str, u32)],
}

/// The pools rig knows, each present when its first entry point is
/// defined in a module (as it ships: haproxy, postgres and nginx export
/// theirs; APR and glib are shared libraries).
pub const KNOWN: &[Pool] = &[
    Pool {
        owner: "haproxy's pools",
        entries: &[
            ("__pool_alloc", "rig_alloc_unsized", k::POOL_ALLOC),
            ("__pool_free", "rig_alloc_free", k::POOL_FREE),
        ],
    },
    Pool {
        owner: "APR's pools",
        entries: &[
            ("apr_palloc", "rig_alloc_arg2", k::POOL_ALLOC),
            ("apr_pcalloc", "rig_alloc_arg2", k::POOL_ALLOC),
        ],
    },
    Pool {
        owner: "nginx's pools",
        entries: &[
            ("ngx_palloc", "rig_alloc_arg2", k::POOL_ALLOC),
            ("ngx_pnalloc", "rig_alloc_arg2", k::POOL_ALLOC),
            ("ngx_pcalloc", "rig_alloc_arg2", k::POOL_ALLOC),
            ("ngx_pmemalign", "rig_alloc_arg2", k::POOL_ALLOC),
            ("ngx_pfree", "rig_alloc_free", k::POOL_FREE),
        ],
    },
    Pool {
        owner: "PostgreSQL's memory contexts",
        entries: &[
            ("palloc", "rig_alloc_arg1", k::POOL_ALLOC),
            ("palloc0", "rig_alloc_arg1", k::POOL_ALLOC),
            ("palloc_extended", "rig_alloc_arg1", k::POOL_ALLOC),
            ("MemoryContextAlloc", "rig_alloc_arg2", k::POOL_ALLOC),
            ("MemoryContextAllocZero", "rig_alloc_arg2", k::POOL_ALLOC),
            (
                "MemoryContextAllocZeroAligned",
                "rig_alloc_arg2",
                k::POOL_ALLOC,
            ),
            (
                "MemoryContextAllocExtended",
                "rig_alloc_arg2",
                k::POOL_ALLOC,
            ),
            ("repalloc", "rig_alloc_arg2", k::POOL_ALLOC),
            ("pfree", "rig_alloc_free", k::POOL_FREE),
        ],
    },
    Pool {
        owner: "glib's slices",
        entries: &[
            ("g_slice_alloc", "rig_alloc_arg1", k::POOL_ALLOC),
            ("g_slice_alloc0", "rig_alloc_arg1", k::POOL_ALLOC),
            ("g_slice_free1", "rig_alloc_free", k::POOL_FREE),
        ],
    },
];

/// The program that reads an allocation's size from argument `n` (from
/// 0), or counts it unsized; `None` past the sixth (the stack holds it).
pub fn size_program(n: Option<u8>) -> Option<&'static str> {
    Some(match n {
        None => "rig_alloc_unsized",
        Some(0) => "rig_alloc_arg1",
        Some(1) => "rig_alloc_arg2",
        Some(2) => "rig_alloc_arg3",
        Some(3) => "rig_alloc_arg4",
        Some(4) => "rig_alloc_arg5",
        Some(5) => "rig_alloc_arg6",
        Some(_) => return None,
    })
}

/// Every entry name of the known pools (a gate baseline's `__pool_alloc
/// calls @ SITE`).
pub fn entry_names() -> impl Iterator<Item = &'static str> {
    KNOWN.iter().flat_map(|p| p.entries.iter().map(|e| e.0))
}

/// Every known pool's entry points, as wrapper prefixes.
const WRAPPERS: &[&str] = &[
    "__pool_alloc",
    "__pool_free",
    "apr_palloc",
    "apr_pcalloc",
    "ngx_palloc",
    "ngx_pnalloc",
    "ngx_pcalloc",
    "ngx_pmemalign",
    "ngx_pfree",
    "palloc",
    "palloc0",
    "palloc_extended",
    "MemoryContextAlloc",
    "repalloc",
    "pfree",
    "g_slice_alloc",
    "g_slice_free1",
];

/// Any native code: what its exported names say it carries.
pub struct Pools;

impl Runtime for Pools {
    fn name(&self) -> &'static str {
        "pools"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        !matches!(m.kind, ModuleKind::Go { .. } | ModuleKind::Jit)
            && KNOWN
                .iter()
                .any(|p| m.facts.lookup_symbol(p.entries[0].0).is_some())
    }

    /// The pools' entry points: the user site of an allocation is the
    /// code that called the pool, past it.
    fn wrapper_prefixes(&self) -> &'static [&'static str] {
        WRAPPERS
    }

    fn allocators(&self, m: &Module<'_>) -> Vec<Allocator> {
        KNOWN
            .iter()
            .filter(|p| m.facts.lookup_symbol(p.entries[0].0).is_some())
            .map(|p| {
                let entries: Vec<Entry> = p
                    .entries
                    .iter()
                    .filter(|e| m.facts.lookup_symbol(e.0).is_some())
                    .map(|&(s, program, kind)| (s.to_string(), program, kind, false))
                    .collect();
                Allocator::Probe {
                    family: AllocFamily::Application,
                    how: format!(
                        "{} in {{module}} ({}): an application allocator, counted as its own \
                         layer beside the heap's totals",
                        p.owner,
                        entries
                            .iter()
                            .map(|e| e.0.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    entries,
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_known_entry_point_is_a_wrapper_and_a_counter_name() {
        for name in entry_names() {
            assert!(WRAPPERS.iter().any(|w| name.starts_with(w)), "{name}");
            assert!(super::super::alloc::entry_names().iter().any(|n| n == name));
        }
        assert_eq!(size_program(Some(5)), Some("rig_alloc_arg6"));
        assert_eq!(size_program(Some(6)), None);
    }
}
