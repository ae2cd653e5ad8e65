//! CPython: its allocation APIs (`PyObject_*`, `PyMem_*`, `PyMem_Raw*`:
//! pymalloc over malloc), probed where the interpreter exports them, and
//! pymalloc's copies inlined into callers by a link-time optimized build
//! (Debian's), found in the machine code and named as not counted.

use std::path::Path;

use rig_ebpf::abi::alloc_kind as k;
use rig_ebpf::abi::{iframe, InterpProc};

use super::alloc::AllocFamily;
use super::{Allocator, Interp, InterpName, Mapped, MarkerCounts, Module, Runtime};

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

/// Where a code object keeps what names it (bytes from its start).
struct CodeLayout {
    filename: u64,
    qualname: u64,
    firstlineno: u64,
    linetable: u64,
}

/// The frame layout of the interpreter `m`, by its version: CPython 3.11's
/// (Include/internal/pycore_{runtime,interp,frame}.h, Include/cpython/
/// {pystate,code}.h; a unit test checks each offset against the headers
/// where they are installed). Every version moves these structures
/// (3.12 adds frames the C stack owns, 3.13 drops `cframe` and renames
/// `f_code`), so another version is said, not guessed.
fn frame_layout(m: &Module<'_>, open: &Path) -> Result<(InterpProc, CodeLayout), String> {
    match py_version(m, open) {
        Some((3, 11)) => Ok(layout_3_11()),
        Some((major, minor)) => Err(format!(
            "Python frames are not in its stacks: rig knows the frame layout of CPython 3.11, \
             and this interpreter is {major}.{minor}"
        )),
        None => Err(
            "Python frames are not in its stacks: rig knows the frame layout of \
                     CPython 3.11, and this interpreter exports no Py_Version (CPython \
                     before 3.11)"
                .to_string(),
        ),
    }
}

fn layout_3_11() -> (InterpProc, CodeLayout) {
    (
        InterpProc {
            current: 576,       // _PyRuntime.gilstate.tstate_current
            interp_head: 40,    // _PyRuntime.interpreters.head
            threads_head: 16,   // PyInterpreterState.threads.head
            ts_next: 8,         // PyThreadState.next
            ts_thread: 152,     // PyThreadState.thread_id (pthread_self())
            ts_cframe: 56,      // PyThreadState.cframe
            cframe_frame: 8,    // _PyCFrame.current_frame
            frame_code: 32,     // _PyInterpreterFrame.f_code
            frame_previous: 48, // _PyInterpreterFrame.previous
            frame_entry: 68,    // _PyInterpreterFrame.is_entry
            frame_instr: 56,    // _PyInterpreterFrame.prev_instr
            code_instr: 184,    // PyCodeObject.co_code_adaptive
            frame_span: 72,     // through is_entry, 8-byte aligned
            ..Default::default()
        },
        CodeLayout {
            filename: 112,
            qualname: 128,
            firstlineno: 72,
            linetable: 136,
        },
    )
}

/// The name of the frame `frame` (a word of `ustack.iframe`) in the
/// process at `at`: its code object's qualified name and file, and the
/// line of the instruction it ran (its first line when it ran none, or
/// the line table has none for it). A code object that is no longer one
/// (freed since the event: code made by `exec`, a function deleted) is
/// said to be gone.
fn code_name(at: &Mapped<'_>, code: &CodeLayout, code_type: u64, frame: u64) -> InterpName {
    let addr = iframe::code(frame);
    let word = |a: u64| {
        let mut b = [0u8; 8];
        at.read(a, &mut b).map(|_| u64::from_le_bytes(b))
    };
    if word(addr + 8) != Some(code_type) {
        return InterpName::Gone(format!(
            "[Python code at {addr:#x}, freed before the window's end]"
        ));
    }
    let text = |field: u64| word(addr + field).and_then(|p| py_str(at, p));
    let (Some(function), Some(file), Some(first)) = (
        text(code.qualname),
        text(code.filename),
        word(addr + code.firstlineno).map(|l| l as u32 as i32),
    ) else {
        return InterpName::Gone(format!("[Python code at {addr:#x}, unreadable]"));
    };
    let line = iframe::instruction(frame)
        .and_then(|i| {
            let table = py_bytes(at, word(addr + code.linetable)?)?;
            line_of(&table, first, i)
        })
        .unwrap_or(first);
    InterpName::Function {
        function,
        file,
        line: line.max(0) as u32,
    }
}

/// A `bytes` object's contents: its size at +16, its bytes from +32.
fn py_bytes(at: &Mapped<'_>, addr: u64) -> Option<Vec<u8>> {
    let mut size = [0u8; 8];
    at.read(addr + 16, &mut size)?;
    let size = u64::from_le_bytes(size);
    if size > 1 << 20 {
        return None;
    }
    let mut data = vec![0u8; size as usize];
    at.read(addr + 32, &mut data)?;
    Some(data)
}

/// The line of instruction `index` (in 2-byte code units) by CPython
/// 3.11's location table (Objects/locations.md): entries of one first
/// byte `1cccclll` (code c, covering l + 1 units) and their varints; the
/// line starts at the function's first and moves by each entry's delta
/// (codes 10-12: c - 10; 13 and 14: a signed varint; 15: no line for its
/// units). `None`: the table ends before the instruction, or has no line
/// for it.
pub(crate) fn line_of(table: &[u8], first: i32, index: u32) -> Option<i32> {
    let (mut at, mut line, mut unit) = (0usize, first, 0u32);
    let varint = |at: &mut usize| -> Option<u32> {
        let mut b = *table.get(*at)?;
        *at += 1;
        let (mut v, mut shift) = (u32::from(b & 63), 0);
        while b & 64 != 0 {
            b = *table.get(*at)?;
            *at += 1;
            shift += 6;
            v |= u32::from(b & 63).checked_shl(shift)?;
        }
        Some(v)
    };
    while at < table.len() {
        let head = table[at];
        if head & 128 == 0 {
            return None;
        }
        at += 1;
        let (code, units) = ((head >> 3) & 15, u32::from(head & 7) + 1);
        let delta = match code {
            10..=12 => i32::from(code) - 10,
            13 | 14 => {
                let v = varint(&mut at)?;
                if v & 1 != 0 {
                    -((v >> 1) as i32)
                } else {
                    (v >> 1) as i32
                }
            }
            _ => 0,
        };
        line += delta;
        if (unit..unit + units).contains(&index) {
            return (code != 15).then_some(line);
        }
        unit += units;
        // The entry's other bytes (columns) have their top bit clear.
        while at < table.len() && table[at] & 128 == 0 {
            at += 1;
        }
    }
    None
}

/// A `str` object's text (a compact one, as code objects' names are): its
/// length at +16, its state bits at +32 (kind in bits 2-4, compact bit 5,
/// ascii bit 6), its characters after the header (48 bytes for ASCII, 72
/// otherwise).
fn py_str(at: &Mapped<'_>, addr: u64) -> Option<String> {
    let mut head = [0u8; 40];
    at.read(addr, &mut head)?;
    let len = u64::from_le_bytes(head[16..24].try_into().ok()?);
    let state = u32::from_le_bytes(head[32..36].try_into().ok()?);
    let (kind, compact, ascii) = (
        (state >> 2) & 7,
        state & (1 << 5) != 0,
        state & (1 << 6) != 0,
    );
    if !compact || len > 4096 || !matches!(kind, 1 | 2 | 4) {
        return None;
    }
    let mut data = vec![0u8; len as usize * kind as usize];
    at.read(addr + if ascii { 48 } else { 72 }, &mut data)?;
    Some(
        data.chunks(kind as usize)
            .map(|c| {
                let mut v = [0u8; 4];
                v[..c.len()].copy_from_slice(c);
                char::from_u32(u32::from_le_bytes(v)).unwrap_or('\u{fffd}')
            })
            .collect(),
    )
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

    /// Every offset the frame walk and the names read for CPython 3.11,
    /// against the 3.11 headers (python3.11-dev, which scripts/deps.sh
    /// installs): a C program prints each `offsetof`, and the `str` state
    /// bits a compact ASCII name has.
    #[test]
    fn the_3_11_frame_layout_is_the_headers() {
        let include = Path::new("/usr/include/python3.11");
        if !include.join("internal/pycore_frame.h").exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI has no python3.11-dev headers (scripts/deps.sh installs them)"
            );
            eprintln!("skipped: no /usr/include/python3.11 (python3.11-dev)");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("offsets.c");
        std::fs::write(
            &src,
            r#"#define Py_BUILD_CORE 1
#include <Python.h>
#include <internal/pycore_frame.h>
#include <internal/pycore_runtime.h>
#include <internal/pycore_interp.h>
#include <stdio.h>
#define P(x) printf("%zu\n", (size_t)(x))
int main(void) {
    P(offsetof(_PyRuntimeState, gilstate.tstate_current));
    P(offsetof(_PyRuntimeState, interpreters.head));
    P(offsetof(PyInterpreterState, threads.head));
    P(offsetof(PyThreadState, next));
    P(offsetof(PyThreadState, thread_id));
    P(offsetof(PyThreadState, cframe));
    P(offsetof(_PyCFrame, current_frame));
    P(offsetof(_PyInterpreterFrame, f_code));
    P(offsetof(_PyInterpreterFrame, previous));
    P(offsetof(_PyInterpreterFrame, is_entry));
    P(offsetof(_PyInterpreterFrame, prev_instr));
    P(offsetof(PyCodeObject, co_code_adaptive));
    P(offsetof(PyCodeObject, co_filename));
    P(offsetof(PyCodeObject, co_qualname));
    P(offsetof(PyCodeObject, co_firstlineno));
    P(offsetof(PyCodeObject, co_linetable));
    P(offsetof(PyBytesObject, ob_base.ob_size));
    P(offsetof(PyBytesObject, ob_sval));
    P(offsetof(PyASCIIObject, length));
    P(offsetof(PyASCIIObject, state));
    P(sizeof(PyASCIIObject));
    P(sizeof(PyCompactUnicodeObject));
    PyASCIIObject a = {0};
    a.state.kind = PyUnicode_1BYTE_KIND;
    a.state.compact = 1;
    a.state.ascii = 1;
    unsigned int state;
    memcpy(&state, &a.state, sizeof(state));
    P(state);
    return 0;
}
"#,
        )
        .unwrap();
        let exe = dir.path().join("offsets");
        let cc = std::process::Command::new("cc")
            .arg(format!("-I{}", include.display()))
            .arg(&src)
            .arg("-o")
            .arg(&exe)
            .output()
            .unwrap();
        assert!(
            cc.status.success(),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        let out = std::process::Command::new(&exe).output().unwrap();
        let got: Vec<u64> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect();
        let (p, c) = layout_3_11();
        let want = [
            p.current,
            p.interp_head,
            p.threads_head,
            p.ts_next,
            p.ts_thread,
            p.ts_cframe,
            p.cframe_frame,
            p.frame_code,
            p.frame_previous,
            p.frame_entry,
            p.frame_instr,
            p.code_instr,
        ]
        .map(u64::from)
        .into_iter()
        .chain([c.filename, c.qualname, c.firstlineno, c.linetable])
        // py_bytes: size at 16, bytes from 32.
        .chain([16, 32])
        // py_str: length at 16, state at 32, headers of 48 and 72 bytes,
        // kind 1 in bits 2-4, compact bit 5, ascii bit 6.
        .chain([16, 32, 48, 72, (1 << 2) | (1 << 5) | (1 << 6)])
        .collect::<Vec<u64>>();
        assert_eq!(got, want);
    }

    /// The line of every instruction of every function of a few standard
    /// modules, by [`line_of`], against CPython 3.11's own answer
    /// (`code.co_lines()`), from Debian's python3.11.
    #[test]
    fn lines_are_cpython_3_11s_own() {
        if !Path::new("/usr/bin/python3.11").exists() {
            assert!(std::env::var_os("CI").is_none(), "CI has no python3.11");
            eprintln!("skipped: no /usr/bin/python3.11");
            return;
        }
        let script = r#"
import http.server, json, email.feedparser, types
def codes(c):
    yield c
    for k in c.co_consts:
        if isinstance(k, types.CodeType):
            yield from codes(k)
for m in (http.server, json.decoder, email.feedparser):
    src = open(m.__file__).read()
    for c in codes(compile(src, m.__file__, "exec")):
        print(c.co_firstlineno, c.co_linetable.hex(),
              ",".join("%d:%d:%d" % (a, b, -1 if l is None else l) for a, b, l in c.co_lines()))
"#;
        let out = std::process::Command::new("/usr/bin/python3.11")
            .args(["-c", script])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (mut checked, mut codes) = (0, 0);
        for l in String::from_utf8(out.stdout).unwrap().lines() {
            let mut f = l.split(' ');
            let first: i32 = f.next().unwrap().parse().unwrap();
            let hex = f.next().unwrap();
            let table: Vec<u8> = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            codes += 1;
            for range in f.next().unwrap_or("").split(',').filter(|r| !r.is_empty()) {
                let v: Vec<i64> = range.split(':').map(|x| x.parse().unwrap()).collect();
                let want = (v[2] >= 0).then_some(v[2] as i32);
                for byte in (v[0]..v[1]).step_by(2) {
                    assert_eq!(
                        line_of(&table, first, byte as u32 / 2),
                        want,
                        "{l} at {byte}"
                    );
                    checked += 1;
                }
            }
        }
        assert!(
            codes > 50 && checked > 10_000,
            "{codes} codes, {checked} instructions"
        );
    }

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
