//! `.eh_frame` into rows: each FDE's rules at each pc, as the BPF walk
//! can follow them (CFA from rsp or rbp, the PLT stub's expression), "no
//! rule" rows where it cannot.

use anyhow::Result;
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use rig_ebpf::abi::{unwind_cfa, UnwindRow};

/// The most code addresses one module's rows may span: far beyond any real
/// module, small enough that its bucket index is allocated, not an abort.
pub(super) const MAX_CODE_SPAN: u64 = 4 << 30;

/// Rows of every FDE of `section` that covers code in `code` (module
/// address ranges of the executable segments): a pc outside them is never
/// looked up, and a bogus FDE would only stretch the bucket index.
pub(super) fn rows_of(
    section: &EhFrame<gimli::EndianSlice<'_, LittleEndian>>,
    bases: &BaseAddresses,
    code: &[(u64, u64)],
) -> Result<(Vec<UnwindRow>, usize)> {
    let mut ctx = Box::new(UnwindContext::new());
    let mut raw: Vec<UnwindRow> = Vec::new();
    let mut unsupported = 0;
    let mut entries = section.entries(bases);
    while let Some(entry) = entries.next()? {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else {
            continue;
        };
        let (begin, end) = (fde.initial_address(), fde.end_address());
        if !code
            .iter()
            .any(|&(lo, hi)| lo <= begin && begin <= end && end <= hi)
        {
            continue;
        }
        // A signal trampoline ('S' in its CIE's augmentation: glibc's
        // __restore_rt, whose hand-written rules read the registers out of
        // the kernel's ucontext): one rule for the whole FDE.
        if fde.cie().is_signal_trampoline() {
            raw.push(UnwindRow {
                pc: begin,
                cfa: unwind_cfa::SIGNAL,
                ..Default::default()
            });
            raw.push(UnwindRow {
                pc: end,
                cfa: unwind_cfa::NONE,
                ..Default::default()
            });
            continue;
        }
        let Ok(mut table) = fde.rows(section, bases, &mut ctx) else {
            unsupported += 1;
            continue;
        };
        let mut bad = false;
        loop {
            let row = match table.next_row() {
                Ok(Some(r)) => r,
                Ok(None) => break,
                Err(_) => {
                    bad = true;
                    break;
                }
            };
            // A row the FDE's instructions moved outside its own range
            // (DW_CFA_set_loc can) describes no code of this FDE.
            if !(begin..end).contains(&row.start_address()) {
                bad = true;
                break;
            }
            let r = convert(section, row);
            bad |= r.cfa == unwind_cfa::NONE;
            raw.push(r);
        }
        // The end of the FDE: no rule until another FDE starts.
        raw.push(UnwindRow {
            pc: fde.end_address(),
            cfa: unwind_cfa::NONE,
            ..Default::default()
        });
        unsupported += bad as usize;
    }
    Ok((raw, unsupported))
}

pub(super) fn convert(
    section: &EhFrame<gimli::EndianSlice<'_, LittleEndian>>,
    row: &gimli::UnwindTableRow<usize>,
) -> UnwindRow {
    let mut out = UnwindRow {
        pc: row.start_address(),
        ..Default::default()
    };
    match row.register(X86_64::RA) {
        Some(RegisterRule::Offset(-8)) => {}
        Some(RegisterRule::Undefined) => {
            out.cfa = unwind_cfa::END;
            return out;
        }
        _ => return out, // NONE: a signal frame or hand-written rule
    }
    match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(off) = i32::try_from(*offset) else {
                return out;
            };
            out.cfa_off = off;
            out.cfa = if *register == X86_64::RSP {
                unwind_cfa::RSP
            } else if *register == X86_64::RBP {
                unwind_cfa::RBP
            } else {
                return UnwindRow {
                    pc: out.pc,
                    ..Default::default()
                };
            };
        }
        CfaRule::Expression(e) => {
            let Ok(expr) = e.get(section) else {
                return out;
            };
            match plt_threshold(expr.0.slice()) {
                Some(t) => {
                    out.cfa = unwind_cfa::PLT;
                    out.cfa_off = t;
                }
                None => return out,
            }
        }
    }
    match row.register(X86_64::RBP) {
        Some(RegisterRule::Offset(n)) => match i16::try_from(n) {
            Ok(n) if n != 0 => out.rbp_off = n,
            _ => out.cfa = unwind_cfa::NONE,
        },
        None | Some(RegisterRule::Undefined | RegisterRule::SameValue) => {}
        _ => out.cfa = unwind_cfa::NONE,
    }
    out
}

/// The CFA expression every x86_64 PLT's FDE carries:
/// `rsp + 8 + ((rip & 15) >= N) << 3`. Returns N.
pub fn plt_threshold(expr: &[u8]) -> Option<i32> {
    // DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_litN;
    // DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus
    match expr {
        [0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, lit, 0x2a, 0x33, 0x24, 0x22]
            if (0x30..0x50).contains(lit) =>
        {
            Some(i32::from(*lit - 0x30))
        }
        _ => None,
    }
}
