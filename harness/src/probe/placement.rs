//! Where a uprobe may safely sit.
//!
//! A uprobe executes the instruction it replaced out of line, single-stepped.
//! On this kernel that loses the result of an AVX-512 instruction: with a
//! probe on glibc's `__memset_avx512_unaligned_erms`, whose first instruction
//! is `vpbroadcastb %esi,%zmm16`, memset wrote stale bytes — 43957 of 112164
//! verified memsets were wrong (fixtures test
//! `probing_copy_routines_never_changes_what_they_compute`). So rig never
//! puts a probe on a vector instruction: it moves the probe past a leading
//! run of vector instructions that write no general register, no memory and
//! do not branch. The arguments (rdi, rsi, rdx...) and the return address at
//! `*rsp` are then exactly what they were at entry, and every call through
//! the entry still passes the probe.

use std::os::unix::fs::FileExt;
use std::path::Path;

use iced_x86::{
    Decoder, DecoderOptions, EncodingKind, FlowControl, Formatter, GasFormatter, Instruction,
    InstructionInfoFactory, OpAccess, Register,
};

/// A probe position: the offset to attach at and what was skipped to get
/// there (as assembly), empty when the entry itself is safe.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub file_offset: u64,
    pub skipped: Vec<String>,
}

/// At most this many leading vector instructions are skipped.
const MAX_SKIP: usize = 4;

fn is_vector(ins: &Instruction) -> bool {
    if ins.encoding() != EncodingKind::Legacy {
        return true; // VEX, EVEX, XOP, 3DNow!, MVEX
    }
    (0..ins.op_count()).any(|i| {
        let r = ins.op_register(i);
        r.is_xmm() || r.is_ymm() || r.is_zmm() || r.is_k() || r.is_mm()
    })
}

/// True when skipping `ins` cannot change what a probe after it sees: it
/// writes no general-purpose register or flag-relevant state the probe reads,
/// no memory, and falls through.
fn skippable(ins: &Instruction, info: &mut InstructionInfoFactory) -> bool {
    if ins.flow_control() != FlowControl::Next {
        return false;
    }
    let i = info.info(ins);
    let writes_mem = i.used_memory().iter().any(|m| {
        matches!(
            m.access(),
            OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite
        )
    });
    let writes_gpr = i.used_registers().iter().any(|u| {
        let r: Register = u.register();
        r.is_gpr()
            && matches!(
                u.access(),
                OpAccess::Write
                    | OpAccess::ReadWrite
                    | OpAccess::CondWrite
                    | OpAccess::ReadCondWrite
            )
    });
    !writes_mem && !writes_gpr
}

/// Decide where to attach for a function whose entry is at `file_offset` of
/// `lib` (x86_64 code: file offsets and code bytes as mapped).
pub fn safe_probe_offset(lib: &Path, file_offset: u64) -> Result<Placement, String> {
    let f = std::fs::File::open(lib).map_err(|e| format!("{}: {e}", lib.display()))?;
    let mut code = [0u8; 15 * (MAX_SKIP + 1)];
    let n = f
        .read_at(&mut code, file_offset)
        .map_err(|e| format!("{}+{file_offset:#x}: {e}", lib.display()))?;
    place(&code[..n], file_offset)
}

/// The decision on raw code bytes starting at `file_offset`.
pub fn place(code: &[u8], file_offset: u64) -> Result<Placement, String> {
    let mut decoder = Decoder::with_ip(64, code, file_offset, DecoderOptions::NONE);
    let mut info = InstructionInfoFactory::new();
    let mut fmt = GasFormatter::new();
    let mut skipped = Vec::new();
    for _ in 0..=MAX_SKIP {
        if !decoder.can_decode() {
            break;
        }
        let ins = decoder.decode();
        if ins.is_invalid() {
            return Err(format!("undecodable instruction at +{:#x}", ins.ip()));
        }
        if !is_vector(&ins) {
            return Ok(Placement {
                file_offset: ins.ip(),
                skipped,
            });
        }
        let mut text = String::new();
        fmt.format(&ins, &mut text);
        if !skippable(&ins, &mut info) {
            return Err(format!(
                "the function starts with the vector instruction `{text}`, which cannot be probed \
                 safely (single-stepping it corrupts the target) nor skipped (it writes state the \
                 probe reads)"
            ));
        }
        skipped.push(text);
    }
    Err(format!(
        "more than {MAX_SKIP} leading vector instructions: no safe probe point"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_a_plain_entry() {
        // mov %rdi,%rax ; cmp $0x40,%rdx
        let p = place(&[0x48, 0x89, 0xf8, 0x48, 0x83, 0xfa, 0x40], 0x1000).unwrap();
        assert_eq!(
            p,
            Placement {
                file_offset: 0x1000,
                skipped: vec![]
            }
        );
    }

    #[test]
    fn moves_past_a_leading_avx512_broadcast() {
        // glibc 2.36 __memset_avx512_unaligned_erms:
        // vpbroadcastb %esi,%zmm16 ; mov %rdi,%rax
        let code = [0x62, 0xe2, 0x7d, 0x48, 0x7a, 0xc6, 0x48, 0x89, 0xf8];
        let p = place(&code, 0x16e040).unwrap();
        assert_eq!(p.file_offset, 0x16e046);
        assert_eq!(p.skipped, vec!["vpbroadcastb %esi,%zmm16".to_string()]);
    }

    #[test]
    fn refuses_a_vector_instruction_that_writes_memory_or_a_gpr() {
        // vmovdqu64 %zmm16,(%rdi): writes memory.
        let e = place(&[0x62, 0xe1, 0xfe, 0x48, 0x7f, 0x07], 0).unwrap_err();
        assert!(e.contains("cannot be probed safely"), "{e}");
        // vmovd %xmm0,%eax: writes a general register.
        let e = place(&[0xc5, 0xf9, 0x7e, 0xc0], 0).unwrap_err();
        assert!(e.contains("vmovd"), "{e}");
    }
}
