//! CPython: its allocation APIs (`PyObject_*`, `PyMem_*`, `PyMem_Raw*`:
//! pymalloc over malloc), probed where the interpreter exports them.

use rig_ebpf::abi::alloc_kind as k;

use super::alloc::AllocFamily;
use super::{Allocator, Module, Runtime};

pub const DOMAINS: &[&str] = &["PyObject_", "PyMem_", "PyMem_Raw"];

pub const API: &[(&str, &str, u32)] = &[
    ("Malloc", "rig_alloc_arg1", k::MALLOC),
    ("Calloc", "rig_alloc_calloc", k::CALLOC),
    ("Realloc", "rig_alloc_arg2", k::REALLOC),
    ("Free", "rig_alloc_free", k::FREE),
];

/// The interpreter (`libpython3.X.so`, or a `python3` linked statically).
pub struct Cpython;

impl Runtime for Cpython {
    fn name(&self) -> &'static str {
        "cpython"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        m.facts.lookup_symbol("PyObject_Malloc").is_some()
    }

    /// pymalloc and the allocation APIs over it.
    fn wrapper_prefixes(&self) -> &'static [&'static str] {
        &[
            "pymalloc_",
            "_PyObject_Malloc",
            "_PyObject_Calloc",
            "_PyObject_Realloc",
            "_PyObject_Free",
            "PyObject_Malloc",
            "PyObject_Calloc",
            "PyObject_Realloc",
            "PyObject_Free",
            "PyMem_",
            "_PyMem_",
        ]
    }

    fn allocators(&self, _m: &Module<'_>) -> Vec<Allocator> {
        let entries = DOMAINS
            .iter()
            .flat_map(|d| {
                API.iter()
                    .map(move |&(api, program, kind)| (format!("{d}{api}"), program, kind, false))
            })
            .collect();
        vec![Allocator::Probe {
            family: AllocFamily::Cpython,
            entries,
            how: "cpython allocation API in {module}".to_string(),
        }]
    }
}
