//! Go's unwind rows, from `.gopclntab`'s pcsp tables (Go code has no
//! `.eh_frame`): exact at every pc, and across cgo both ways.

use rig_ebpf::abi::{unwind_cfa, UnwindRow};

use super::gopclntab::GoTable;
use super::STACK_TOPS;
use crate::runtime::{marker, Code};

/// Rows of every Go function of `go` whose code lies in the module's
/// executable segments: CFA = rsp + 8 + the pcsp delta
/// at each pc, the caller's rbp saved at CFA - 16 once the prologue has
/// stored it (Go keeps frame pointers on amd64: `mov %rbp, N-8(%rsp)` after
/// `sub $N, %rsp`, or `push %rbp; mov %rsp, %rbp`). The functions Go's
/// own tracebacks start stacks at (`super::STACK_TOPS`) end the walk.
pub fn rows(go: &GoTable, module: &Code<'_>) -> Vec<UnwindRow> {
    let mut out = Vec::new();
    for f in &go.funcs {
        if f.entry >= f.end {
            continue;
        }
        let Some(code) = module.bytes(f.entry, f.end) else {
            continue;
        };
        // Go calling C: the body of runtime.asmcgocall runs the C function
        // on the system stack, and where it returns the rows lead back to
        // the goroutine's stack (`UNWIND_CFA_GO_CGO`); elsewhere in the
        // body the walk ends, as Go's tracebacks end it. Its ABIInternal
        // wrapper (same name; a direct call and no indirect one) is an
        // ordinary frame.
        if f.name == "runtime.asmcgocall" && code.windows(2).any(|w| w == [0xff, 0xd0]) {
            out.push(marker(f.entry, unwind_cfa::END));
            // Go 1.21's asmcgocall pushes rbp (a frame pointer) before it
            // takes its entry rsp: the CFA is 8 further, rbp saved below.
            let pushed = code.starts_with(&[0x55, 0x48, 0x89, 0xe5]);
            for at in go_cgo_calls(code) {
                let pc = f.entry + at as u64;
                out.push(UnwindRow {
                    pc,
                    cfa: unwind_cfa::GO_CGO,
                    cfa_off: if pushed { 8 } else { 0 },
                    rbp_off: if pushed { -16 } else { 0 },
                    ..Default::default()
                });
                out.push(marker(pc + 2, unwind_cfa::END));
            }
            out.push(marker(f.end, unwind_cfa::NONE));
            continue;
        }
        // The restorer Go installs for its signal handlers (Go-only
        // binaries; with cgo it is the C library's): at it the interrupted
        // frame is in the kernel's ucontext (`UNWIND_CFA_SIGNAL`).
        if matches!(
            f.name.as_str(),
            "runtime.sigreturn__sigaction" | "runtime.sigreturn"
        ) {
            out.push(marker(f.entry, unwind_cfa::SIGNAL));
            out.push(marker(f.end, unwind_cfa::NONE));
            continue;
        }
        if STACK_TOPS.contains(&f.name.as_str()) {
            out.push(marker(f.entry, unwind_cfa::END));
            out.push(marker(f.end, unwind_cfa::NONE));
            continue;
        }
        // A thread made by runtime.clone starts its life inside it, on
        // its new stack: past the parent's return the frames above are
        // whatever that stack's memory holds, and the thread's stack is
        // this one frame (its gettid, the Go runtime's first syscall of
        // every new thread, is counted here).
        let child = (f.name == "runtime.clone")
            .then(|| go_clone_child_at(code))
            .flatten()
            .map(|n| f.entry + n as u64);
        let steps = go.sp_deltas(f);
        let saved = bp_saved_at(code).map(|n| f.entry + n as u64);
        let mut points: Vec<u64> = steps.iter().map(|s| s.0).collect();
        points.extend(saved);
        points.sort_unstable();
        points.dedup();
        for pc in points {
            if child.is_some_and(|c| pc >= c) {
                continue;
            }
            let Some(&(_, delta)) = steps.iter().take_while(|s| s.0 <= pc).last() else {
                continue;
            };
            let row = match i32::try_from(delta + 8) {
                Ok(off) if delta >= 0 => UnwindRow {
                    pc,
                    cfa: unwind_cfa::RSP,
                    cfa_off: off,
                    rbp_off: if delta > 0 && saved.is_some_and(|s| pc >= s) {
                        -16
                    } else {
                        0
                    },
                    // runtime.asyncPreempt and runtime.sigpanic are
                    // "called" by Go's signal handler, which pushed the
                    // interrupted pc as their return address: an exact pc,
                    // not the end of a call (Go's tracebacks read it so).
                    ra_adjust: u8::from(matches!(
                        f.name.as_str(),
                        "runtime.asyncPreempt" | "runtime.sigpanic"
                    )),
                },
                _ => UnwindRow {
                    pc,
                    ..Default::default()
                },
            };
            out.push(row);
        }
        if let Some(c) = child {
            out.push(marker(c, unwind_cfa::END));
        }
        // C calling Go: runtime.cgocallback runs on the system stack, moves
        // to the goroutine's stack to call the Go function and back. While
        // it is on the goroutine's stack its frame (and the C caller's
        // return address) is still where rbp points on the system stack:
        // the frame pointer its prologue set, which the Go frames above
        // saved and the walk restored. So the walk goes on into the C code
        // that called Go, as it does from C into Go above.
        // Go calling C from assembly that realigns the stack for the C ABI
        // (`runtime.callCgoMmap`, `callCgoMunmap`, `callCgoSigaction`:
        // `MOVQ SP, BX; ANDQ $~15, SP; MOVQ BX, 0(SP); CALL AX; MOVQ
        // 0(SP), SP`): between the two, rsp is the realigned one, which
        // the pcsp table does not follow; the frame pointer its prologue
        // set does: CFA = rbp + 16.
        let switched = match f.name.as_str() {
            "runtime.cgocallback" => go_callback_switch(code),
            _ => realigned_sp(code),
        }
        .filter(|_| saved.is_some());
        if let Some((on, off)) = switched {
            let rule_at = |pc: u64| {
                out.iter()
                    .rev()
                    .find(|r: &&UnwindRow| r.pc <= pc && r.pc >= f.entry)
                    .copied()
            };
            let after = rule_at(f.entry + off as u64);
            out.retain(|r| !(r.pc >= f.entry + on as u64 && r.pc < f.entry + off as u64));
            out.push(UnwindRow {
                pc: f.entry + on as u64,
                cfa: unwind_cfa::RBP,
                cfa_off: 16,
                rbp_off: -16,
                ..Default::default()
            });
            if let Some(r) = after {
                out.push(UnwindRow {
                    pc: f.entry + off as u64,
                    ..r
                });
            }
        }
        out.push(marker(f.end, unwind_cfa::NONE));
    }
    out
}

/// The span of a Go assembly function where rsp is realigned for a C call
/// (`and $-16, %rsp` until `mov (%rsp), %rsp`): from past the first to
/// past the second.
fn realigned_sp(code: &[u8]) -> Option<(usize, usize)> {
    const AND: [u8; 4] = [0x48, 0x83, 0xe4, 0xf0];
    const RESTORE: [u8; 4] = [0x48, 0x8b, 0x24, 0x24];
    let on = code.windows(4).position(|w| w == AND)? + 4;
    let off = on + code[on..].windows(4).position(|w| w == RESTORE)? + 4;
    Some((on, off))
}

/// Offsets of runtime.asmcgocall's calls of the C function in its body
/// (asm_amd64.s since Go 1.5): `MOVQ BX, DI; MOVQ BX, CX; CALL AX`, after
/// the body has stored the goroutine's g (or 0) at 48(SP) and its depth
/// (or its entry rsp) at 40(SP), which `UNWIND_CFA_GO_CGO` reads. None
/// when the body does not store them so (another layout: the walk ends
/// there, as before).
pub(crate) fn go_cgo_calls(code: &[u8]) -> Vec<usize> {
    const CALL: [u8; 8] = [0x48, 0x89, 0xdf, 0x48, 0x89, 0xd9, 0xff, 0xd0];
    let has = |p: &[u8]| code.windows(p.len()).any(|w| w == p);
    // mov %rdi,0x30(%rsp) or movq $0,0x30(%rsp); mov %rdi|%rdx,0x28(%rsp)
    let g_slot =
        has(&[0x48, 0x89, 0x7c, 0x24, 0x30]) || has(&[0x48, 0xc7, 0x44, 0x24, 0x30, 0, 0, 0, 0]);
    let depth_slot = has(&[0x48, 0x89, 0x7c, 0x24, 0x28]) || has(&[0x48, 0x89, 0x54, 0x24, 0x28]);
    if !(g_slot && depth_slot) {
        return Vec::new();
    }
    code.windows(CALL.len())
        .enumerate()
        .filter(|(_, w)| *w == CALL)
        .map(|(i, _)| i + 6)
        .collect()
}

/// Where runtime.cgocallback (asm_amd64.s, Go 1.17 on) is on the
/// goroutine's stack: from just past its `MOVQ DI, SP` to just past the
/// `MOVQ (g_sched+gobuf_sp)(SI), SP` that returns it to the system stack,
/// with its `CALL AX` of cgocallbackg between them. Offsets in `code`.
pub(crate) fn go_callback_switch(code: &[u8]) -> Option<(usize, usize)> {
    let find = |p: &[u8], from: usize| {
        code.get(from..)?
            .windows(p.len())
            .position(|w| w == p)
            .map(|i| from + i)
    };
    let on = find(&[0x48, 0x89, 0xfc], 0)? + 3;
    let call = find(&[0xff, 0xd0], on)?;
    let off = find(&[0x48, 0x8b, 0x66, 0x38], call + 2)? + 4;
    Some((on, off))
}

/// Where the child's code starts in Go's `runtime.clone` (amd64): the
/// target of the branch the parent skips after the clone syscall (`SYSCALL;
/// CMPQ AX, $0; JEQ child; ...; RET`, `sys_linux_amd64.s` since Go 1.0).
/// `None` when the code is not of that shape.
fn go_clone_child_at(code: &[u8]) -> Option<usize> {
    let sys = code.windows(2).position(|w| w == [0x0f, 0x05])? + 2;
    let rest = code.get(sys..)?;
    let cmp = match rest {
        [0x48, 0x83, 0xf8, 0x00, ..] => 4,
        [0x48, 0x85, 0xc0, ..] => 3,
        _ => return None,
    };
    let at = sys + cmp;
    let target = match code.get(at..)? {
        [0x74, rel, ..] => at as i64 + 2 + i64::from(*rel as i8),
        [0x0f, 0x84, a, b, c, d, ..] => {
            at as i64 + 6 + i64::from(i32::from_le_bytes([*a, *b, *c, *d]))
        }
        _ => return None,
    };
    usize::try_from(target)
        .ok()
        .filter(|&t| t > at && t < code.len())
}

/// Where a Go prologue has saved the caller's rbp: the offset just past
/// `mov %rbp, d(%rsp)` (Go 1.17 to 1.20) or `push %rbp; mov %rsp, %rbp`
/// (Go 1.21 on) within the function's first 64 bytes.
fn bp_saved_at(code: &[u8]) -> Option<usize> {
    let head = &code[..code.len().min(64)];
    (0..head.len()).find_map(|i| match &head[i..] {
        [0x48, 0x89, 0x6c, 0x24, _, ..] => Some(i + 5),
        [0x48, 0x89, 0xac, 0x24, _, _, _, _, ..] => Some(i + 8),
        [0x55, 0x48, 0x89, 0xe5, ..] => Some(i + 1),
        _ => None,
    })
}
