//! CPython 3.11's frames as rig reads them from a live interpreter: where
//! each thread's frame chain is (for the kernel side's walk, `take_iframes`
//! in stack.bpf.h), and each frame's name, file and line, read from its
//! code object at a window's end.

use std::path::Path;

use rig_ebpf::abi::{iframe, InterpProc};

use super::py_version;
use crate::runtime::{InterpName, Mapped, Module};

/// Where a code object keeps what names it (bytes from its start).
pub(super) struct CodeLayout {
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
pub(super) fn frame_layout(
    m: &Module<'_>,
    open: &Path,
) -> Result<(InterpProc, CodeLayout), String> {
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
pub(super) fn code_name(
    at: &Mapped<'_>,
    code: &CodeLayout,
    code_type: u64,
    frame: u64,
) -> InterpName {
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
fn line_of(table: &[u8], first: i32, index: u32) -> Option<i32> {
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
}
