//! CPython: its allocation APIs (`PyObject_*`, `PyMem_*`, `PyMem_Raw*`:
//! pymalloc over malloc), probed where the interpreter exports them, and
//! pymalloc's copies inlined into callers by a link-time optimized build
//! (Debian's), found in the machine code and named as not counted.

use std::path::Path;

use rig_ebpf::abi::alloc_kind as k;

use super::alloc::AllocFamily;
use super::{
    Allocator, Interp, InterpCalls, InterpName, Mapped, MarkerCounts, Module, Runtime, UnseenSites,
};

mod calls;
mod frames;
mod pymalloc;
use frames::{code_name, frame_layout};
use pymalloc::{inlined_pymalloc, InlinedPymalloc};

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

    /// An LTO build's inlined pymalloc: its allocations and frees are not
    /// calls to the API rig probes.
    fn unseen(&self, m: &Module<'_>, at: &Mapped<'_>, family: &str) -> Option<String> {
        (family == "alloc").then(|| Self::inlined_unseen(m, at))?
    }

    /// The inlined paths' branches: one hit, one allocation or free.
    fn unseen_sites(&self, m: &Module<'_>, at: &Mapped<'_>, family: &str) -> Vec<UnseenSites> {
        let Some(inlined) = (family == "alloc").then(|| Self::inlined(m, at)).flatten() else {
            return Vec::new();
        };
        let sites = |label, paths: &[pymalloc::InlinedPath]| UnseenSites {
            label,
            file_offsets: paths
                .iter()
                .filter_map(|p| m.facts.vaddr_to_file_offset(p.branch?))
                .collect(),
            paths: paths.len(),
        };
        vec![
            sites("allocations", &inlined.allocs),
            sites("frees", &inlined.frees),
        ]
    }

    /// CPython 3.11's function markers sit on its tracing path (the report
    /// says so for a window where one never fired).
    fn marker_caveat(&self, m: &Module<'_>, open: &Path, marker: (&str, &str)) -> Option<String> {
        let ("python", "function__entry" | "function__return") = marker else {
            return None;
        };
        let (major, minor) = py_version(m, open)?;
        ((3, 11) <= (major, minor) && (major, minor) < (3, 15)).then(|| {
            format!(
                "CPython {major}.{minor} fires python:{} only while a trace or profile \
                 function is set (sys.settrace, sys.setprofile): the marker sits on its \
                 tracing path, so a server running normally never fires it and its zero \
                 is no count (CPython issue gh-98894; 3.12 to 3.14 have no such marker, \
                 3.15 restores it)",
                marker.1
            )
        })
    }

    /// Its collections, where the build has the marker (rig raises its
    /// semaphore).
    fn implied_markers(&self, _m: &Module<'_>, at: &Mapped<'_>, family: &str) -> Vec<&'static str> {
        let has = |name: &str| {
            crate::elf::usdt::markers(at.open).is_ok_and(|ms| {
                ms.0.iter()
                    .any(|m| m.provider == "python" && m.name == name)
            })
        };
        match family {
            "alloc" if has("gc__start") => vec!["python:gc__start"],
            _ => Vec::new(),
        }
    }

    /// Its collections are the `cpython` layer's.
    fn marker_layer(&self, marker: (&str, &str)) -> Option<(&'static str, MarkerCounts)> {
        (marker == ("python", "gc__start")).then_some(("cpython", MarkerCounts::Collections))
    }

    /// Its threads' Python frames, where rig knows the version's layout.
    fn interp_frames(&self, m: &Module<'_>, at: &Mapped<'_>) -> Option<Result<Interp, String>> {
        let runtime = m.facts.variable("_PyRuntime")?;
        Some(frame_layout(m, at.open).and_then(|(offsets, _)| {
            let mut layout = offsets;
            layout.runtime = at
                .address(m.facts, runtime)
                .ok_or("its _PyRuntime is not where the map says the module is")?;
            Ok(Interp {
                layout,
                evaluator: "_PyEval_EvalFrameDefault",
                language: "python",
            })
        }))
    }

    /// Each frame's code object, read from the process now: its
    /// qualified name, file and the line the frame ran.
    fn interp_names(
        &self,
        m: &Module<'_>,
        at: &Mapped<'_>,
        words: &[u64],
    ) -> Option<Vec<InterpName>> {
        let (_, code) = frame_layout(m, at.open).ok()?;
        let code_type = at.address(m.facts, m.facts.variable("PyCode_Type")?)?;
        Some(
            words
                .iter()
                .map(|&w| code_name(at, &code, code_type, w))
                .collect(),
        )
    }

    /// Its Python function calls, where the version is one whose frames
    /// rig walks (the kernel side finds the frame as a stack's walk does):
    /// the handlers of the instruction every call starts with.
    fn interp_calls(&self, m: &Module<'_>, open: &Path) -> Option<Result<InterpCalls, String>> {
        m.facts.variable("_PyRuntime")?;
        let resume = calls::RESUME_3_11;
        Some(
            frame_layout(m, open)
                .map_err(|why| {
                    why.replace(
                        "Python frames are not in its stacks",
                        "its Python calls are not counted",
                    )
                })
                .and_then(|_| {
                    let ops = [resume.0, resume.1];
                    let probes = crate::elf::cached(open, |p| calls::call_probes(p, m.facts, &ops))
                        .map_err(|e| format!("its Python calls are not counted: {e:#}"))?;
                    let file_offsets = probes
                        .0
                        .iter()
                        .map(|&at| m.facts.vaddr_to_file_offset(at))
                        .collect::<Option<Vec<u64>>>()
                        .ok_or(
                            "its Python calls are not counted: a RESUME handler is not in the file",
                        )?;
                    Ok(InterpCalls {
                        language: "python",
                        file_offsets,
                        check: u64::from(resume.0) | u64::from(resume.1) << 8,
                    })
                }),
        )
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

impl Cpython {
    /// pymalloc inlined into this module's callers, in process `at.pid`
    /// (where its hook is pymalloc's own): what the alloc family cannot see
    /// (see [`Runtime::unseen`]).
    fn inlined(m: &Module<'_>, at: &Mapped<'_>) -> Option<std::sync::Arc<InlinedPymalloc>> {
        let inlined = crate::elf::cached(at.open, |p| inlined_pymalloc(p, m.facts)).ok()?;
        let none = inlined.allocs.is_empty() && inlined.frees.is_empty();
        (!none && !routes_through_malloc(at.pid)).then_some(inlined)
    }

    fn inlined_unseen(m: &Module<'_>, at: &Mapped<'_>) -> Option<String> {
        let inlined = Self::inlined(m, at)?;
        Some(format!(
            "CPython's object allocator (pymalloc) is inlined into its callers in this \
             link-time optimized build: {} allocation and {} free paths test the allocator \
             hook and run pymalloc in place, without calling PyObject_Malloc or \
             PyObject_Free, so the objects they allocate and free are not counted; \
             PYTHONMALLOC=malloc sends every one of them through malloc, which is counted \
             (an object too large for pymalloc goes on to malloc, counted, so a run of \
             such a path can be in both counts)",
            inlined.allocs.len(),
            inlined.frees.len()
        ))
    }
}

/// The interpreter's version (major, minor), from `Py_Version` (3.11 on:
/// `0xMMmmPPRS`, a constant in the file).
fn py_version(m: &Module<'_>, open: &Path) -> Option<(u8, u8)> {
    use std::os::unix::fs::FileExt;
    let sym = m.facts.lookup_symbol("Py_Version")?;
    let mut word = [0u8; 4];
    std::fs::File::open(open)
        .ok()?
        .read_exact_at(&mut word, sym.file_offset)
        .ok()?;
    let v = u32::from_le_bytes(word);
    Some(((v >> 24) as u8, (v >> 16) as u8))
}

/// Whether process `pid` was started with `PYTHONMALLOC` naming malloc:
/// every allocator hook then goes to the C library's malloc, which rig
/// counts, and no inlined pymalloc path is taken.
fn routes_through_malloc(pid: u32) -> bool {
    let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
        return false;
    };
    env.split(|&b| b == 0)
        .any(|v| v == b"PYTHONMALLOC=malloc" || v == b"PYTHONMALLOC=malloc_debug")
}
