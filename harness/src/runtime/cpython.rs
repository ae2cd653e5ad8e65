//! CPython: its allocation APIs (`PyObject_*`, `PyMem_*`, `PyMem_Raw*`:
//! pymalloc over malloc), probed where the interpreter exports them, and
//! pymalloc's copies inlined into callers by a link-time optimized build
//! (Debian's), found in the machine code and named as not counted.

use std::path::Path;

use rig_ebpf::abi::alloc_kind as k;

use super::alloc::AllocFamily;
use super::{Allocator, Interp, InterpCalls, InterpName, Mapped, MarkerCounts, Module, Runtime};

mod calls;
mod frames;
use frames::{code_name, frame_layout};

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
    /// pymalloc inlined into this module's callers, in process `at.pid`:
    /// what the alloc family cannot see (see [`Runtime::unseen`]).
    fn inlined_unseen(m: &Module<'_>, at: &Mapped<'_>) -> Option<String> {
        let inlined = crate::elf::cached(at.open, |p| inlined_pymalloc(p, m.facts)).ok()?;
        if inlined.allocs + inlined.frees == 0 || routes_through_malloc(at.pid) {
            return None;
        }
        Some(format!(
            "CPython's object allocator (pymalloc) is inlined into its callers in this \
             link-time optimized build: {} allocation and {} free paths test the allocator \
             hook and run pymalloc in place, without calling PyObject_Malloc or \
             PyObject_Free, so the objects they allocate and free are not counted; \
             PYTHONMALLOC=malloc sends every one of them through malloc, which is counted",
            inlined.allocs, inlined.frees
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

/// How many copies of pymalloc's allocation and free paths a module has
/// inlined into callers that never call its exported API.
#[derive(Debug, Default, PartialEq)]
pub struct InlinedPymalloc {
    pub allocs: usize,
    pub frees: usize,
}

/// pymalloc's inlined copies in the module at `path`. An LTO build makes
/// `PyObject_Malloc` test the hook (`_PyObject.malloc`) against pymalloc's
/// own `_PyObject_Malloc` and run it in place when they match, and copies
/// that test into every caller: the exported function's own test names
/// the implementation's address, and every other instruction that tests
/// against that address is an inlined copy. A build that calls through the
/// hook (no test in the exported function) has none.
fn inlined_pymalloc(path: &Path, facts: &crate::elf::ElfFacts) -> anyhow::Result<InlinedPymalloc> {
    use object::{Object, ObjectSection, SectionKind};
    let data = std::fs::read(path)?;
    let obj = object::File::parse(&*data)?;
    let text: Vec<(u64, &[u8])> = obj
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .collect();
    let body = |name: &str| -> Option<(u64, u64, &[u8])> {
        let sym = facts.lookup_symbol(name)?;
        let &(addr, bytes) = text
            .iter()
            .find(|(a, b)| *a <= sym.vaddr && sym.vaddr + sym.size <= a + b.len() as u64)?;
        let from = (sym.vaddr - addr) as usize;
        Some((
            sym.vaddr,
            sym.vaddr + sym.size,
            &bytes[from..from + sym.size as usize],
        ))
    };
    let in_text = |a: u64| text.iter().any(|(s, b)| *s <= a && a < s + b.len() as u64);
    let mut out = InlinedPymalloc::default();
    for (exported, count) in [
        (
            &["PyObject_Malloc", "PyObject_Calloc", "PyObject_Realloc"][..],
            &mut out.allocs,
        ),
        (&["PyObject_Free"][..], &mut out.frees),
    ] {
        let Some((start, end, code)) = body(exported[0]) else {
            continue;
        };
        let Some(target) =
            hook_test_target(code, start, |a| in_text(a) && !(start..end).contains(&a))
        else {
            continue;
        };
        // The exported entry points' own tests are calls rig counts.
        let own: Vec<(u64, u64)> = exported
            .iter()
            .filter_map(|n| body(n).map(|(s, e, _)| (s, e)))
            .collect();
        *count = text
            .iter()
            .flat_map(|&(addr, bytes)| hook_tests(bytes, addr, target))
            .filter(|ip| !own.iter().any(|(s, e)| (*s..*e).contains(ip)))
            .count();
    }
    Ok(out)
}

/// The code address the first hook test in `code` (at `ip`) compares
/// against: `cmp $ADDR, %reg` (a build linked at a fixed address), or
/// `lea ADDR(%rip), %reg` followed by a `cmp` (position-independent),
/// where `is_code(ADDR)`.
fn hook_test_target(code: &[u8], ip: u64, is_code: impl Fn(u64) -> bool) -> Option<u64> {
    hook_test_sites(code, ip)
        .into_iter()
        .find_map(|(_, target)| is_code(target).then_some(target))
}

/// Where in `code` (at `ip`) an instruction tests against `target`.
fn hook_tests(code: &[u8], ip: u64, target: u64) -> Vec<u64> {
    hook_test_sites(code, ip)
        .into_iter()
        .filter(|&(_, t)| t == target)
        .map(|(at, _)| at)
        .collect()
}

/// Every hook test's first instruction in `code` (at `ip`), with the
/// address it tests a register against: a `cmp` with an immediate, or a
/// rip-relative `lea` whose register a `cmp` within the next two
/// instructions reads. Decoded as a stream (an interpreter's text is
/// megabytes): only the tests are kept.
fn hook_test_sites(code: &[u8], ip: u64) -> Vec<(u64, u64)> {
    use iced_x86::{Decoder, DecoderOptions, Instruction, Mnemonic, OpKind};
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    // A `lea` waiting for its `cmp`: (its address, register, target,
    // instructions left).
    let mut pending: Option<(u64, iced_x86::Register, u64, u8)> = None;
    let mut out = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut ins);
        let is_cmp = ins.mnemonic() == Mnemonic::Cmp;
        if let Some((at, reg, target, left)) = pending.take() {
            let reads = |k: u32| {
                ins.op_kind(k) == OpKind::Register && ins.op_register(k).full_register() == reg
            };
            if is_cmp && (0..ins.op_count()).any(reads) {
                out.push((at, target));
            } else if left > 1 {
                pending = Some((at, reg, target, left - 1));
            }
        }
        if is_cmp && ins.op_count() == 2 && ins.op1_kind() == OpKind::Immediate32to64 {
            out.push((ins.ip(), ins.immediate32to64() as u64));
        } else if ins.mnemonic() == Mnemonic::Lea && ins.is_ip_rel_memory_operand() {
            let reg = ins.op0_register().full_register();
            pending = Some((ins.ip(), reg, ins.ip_rel_memory_address(), 2));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `mov 0x10(%rip),%rax; cmp $0x4fb450,%rax; jne +0` at 0x1000.
    const FIXED: &[u8] = &[
        0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00, // mov
        0x48, 0x3d, 0x50, 0xb4, 0x4f, 0x00, // cmp rax, imm32
        0x75, 0x00, // jne
    ];

    /// `lea 0x200(%rip),%rdx; mov 0x10(%rip),%rax; cmp %rdx,%rax; jne +0`
    /// at 0x1000 (the hook loaded between the two, as gcc schedules it),
    /// then a `lea` of the same address whose `cmp` is the third
    /// instruction after it: no hook test.
    const PIE: &[u8] = &[
        0x48, 0x8d, 0x15, 0x00, 0x02, 0x00, 0x00, // lea rdx, [rip+0x200] -> 0x1207
        0x48, 0x8b, 0x05, 0x10, 0x00, 0x00, 0x00, // mov rax, [rip+0x10]
        0x48, 0x39, 0xd0, // cmp rax, rdx
        0x75, 0x00, // jne
        0x48, 0x8d, 0x0d, 0xed, 0x01, 0x00, 0x00, // lea rcx, [rip+0x1ed] -> 0x1207
        0x90, 0x90, // nops
        0x48, 0x39, 0xc8, // cmp rax, rcx: the third instruction after it
    ];

    #[test]
    fn a_hook_test_is_found_in_both_address_forms_and_only_there() {
        let code = |_| true;
        assert_eq!(hook_test_target(FIXED, 0x1000, code), Some(0x4f_b450));
        assert_eq!(hook_tests(FIXED, 0x1000, 0x4f_b450), vec![0x1007]);
        assert_eq!(hook_test_target(PIE, 0x1000, code), Some(0x1207));
        assert_eq!(
            hook_tests(PIE, 0x1000, 0x1207),
            vec![0x1000],
            "the far cmp is not one"
        );
        assert_eq!(hook_test_target(FIXED, 0x1000, |a| a != 0x4f_b450), None);
    }
}
