//! V8's embedded builtins (`Builtins_*` in node): machine code V8
//! generated at build time, with no `.eh_frame`, walked by frame pointer;
//! and V8's own heap, named as not counted.

use anyhow::Result;
use object::{Object, ObjectSymbol};
use rig_ebpf::abi::{unwind_cfa, UnwindRow};

use super::{marker, Code, JitFrames, Mapped, Module, ModuleKind, Runtime};

pub struct V8;

impl Runtime for V8 {
    fn name(&self) -> &'static str {
        "v8"
    }

    fn holds(&self, m: &Module<'_>) -> bool {
        m.kind == ModuleKind::Native
    }

    fn unwind_rows(&self, code: &Code<'_>) -> Result<Vec<UnwindRow>> {
        Ok(builtin_rows(code))
    }

    /// V8 keeps rbp as a frame pointer in every frame of the code it
    /// generates (its own stack walker reads frames by it), so a walk
    /// passes through JavaScript frames to the builtins that entered them.
    fn jit_frames(&self, m: &Module<'_>, _at: &Mapped<'_>) -> Option<JitFrames> {
        m.facts
            .lookup_symbol(V8_API)
            .is_some()
            .then_some(JitFrames::FramePointers)
    }

    /// V8's heap, in a module that embeds V8 (node, or its `libnode`):
    /// JavaScript objects never reach malloc.
    fn unseen(&self, m: &Module<'_>, _at: &Mapped<'_>, family: &str) -> Option<String> {
        (family == "alloc" && m.facts.lookup_symbol(V8_API).is_some()).then(|| {
            "the JavaScript heap: V8 places JavaScript objects, strings, arrays and \
             closures in its own garbage-collected heap, not by malloc, and they are not \
             counted (only malloc's calls are); node's --trace-gc prints each collection, \
             and v8.getHeapStatistics() or process.memoryUsage() give the heap's size"
                .to_string()
        })
    }
}

/// `v8::Isolate::GetCurrent()`, which every embedder of V8 exports (node
/// exports V8's API for its native addons).
const V8_API: &str = "_ZN2v87Isolate10GetCurrentEv";

/// Rows for V8's embedded builtins (`Builtins_*` in node's `.text`:
/// machine code V8 generated at build time, with no `.eh_frame`). V8 walks
/// its own stacks by frame pointer alone, so every builtin that calls out
/// has set up a standard frame first: from just past its `push %rbp; mov
/// %rsp,%rbp` (within the first 256 bytes) to its end, CFA = rbp + 16, the
/// caller's rbp saved at CFA - 16. A walk through them reaches the
/// JavaScript frames that called them. Before that point the entry rows
/// apply; a builtin without that prologue keeps no rule.
fn builtin_rows(code: &Code<'_>) -> Vec<UnwindRow> {
    use object::SymbolKind;
    const PROLOGUE: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
    let mut out = Vec::new();
    for sym in code.obj.symbols() {
        if sym.kind() != SymbolKind::Text
            || !sym.is_definition()
            || sym.size() == 0
            || !sym.name().is_ok_and(|n| n.starts_with("Builtins_"))
        {
            continue;
        }
        let (start, end) = (sym.address(), sym.address() + sym.size());
        let Some(body) = code.bytes(start, end) else {
            continue;
        };
        let head = &body[..body.len().min(256)];
        let Some(at) = head.windows(PROLOGUE.len()).position(|w| w == PROLOGUE) else {
            continue;
        };
        out.push(UnwindRow {
            pc: start + (at + PROLOGUE.len()) as u64,
            cfa: unwind_cfa::RBP,
            cfa_off: 16,
            rbp_off: -16,
            ..Default::default()
        });
        out.push(marker(end, unwind_cfa::NONE));
    }
    out
}
