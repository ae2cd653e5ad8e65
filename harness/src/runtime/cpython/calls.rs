//! CPython 3.11's Python function calls, counted where its evaluator starts
//! each one. 3.11 fires its `python:function__entry` marker only while a
//! trace or profile function is set, and inlines a Python-to-Python call
//! into the evaluator (no native call to probe). What every call does run
//! is its code's `RESUME` instruction, reached through the evaluator's
//! dispatch table (computed gotos: opcode -> the address of its handler):
//! a uprobe in the handler of `RESUME` and of its quickened form
//! `RESUME_QUICK` (see [`call_probes`] for where) sees every entry of a
//! Python frame, and the kernel side
//! keeps the calls (`RESUME` with argument 0) and drops the generator
//! resumptions (argument 1 to 3), reading the instruction from the frame
//! (`interp_call_code` in stack.bpf.h).

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use anyhow::{anyhow, bail, Result};

use crate::elf::ElfFacts;

/// CPython 3.11's `RESUME` and `RESUME_QUICK` (Include/opcode.h; a unit
/// test reads them from the headers where they are installed).
pub(super) const RESUME_3_11: (u8, u8) = (151, 150);

/// Where to probe the handlers of opcodes `ops` in the module at `path`
/// (link-time addresses). A handler's first instruction is usually one the
/// kernel must single-step out of line (a `mov`: about 11 us per hit
/// here, `rig probe-cost`); the first branch of the handler's straight
/// start is one it emulates (a `jcc`). That branch is where the probe goes
/// when only the handler's own entry leads to it: no instruction falls
/// into the handler, and no direct branch anywhere in the file lands
/// between its entry and that branch. Else the probe stays on the entry.
/// The kernel side reads the frame from memory, not registers, so either
/// place counts the same calls.
pub(super) fn call_probes(path: &Path, facts: &ElfFacts, ops: &[u8]) -> Result<CallProbes> {
    let data = std::fs::read(path)?;
    let obj = object::File::parse(&*data)?;
    let (table, eval) = dispatch_table(&data, &obj, facts)?;
    let text = text_of(&obj);
    let targets: Vec<u64> = ops.iter().map(|&op| table[op as usize]).collect();
    let landings = branch_landings(&text, eval);
    Ok(CallProbes(
        targets
            .iter()
            .map(|&t| straight_branch(&text, eval, t, &landings).unwrap_or(t))
            .collect(),
    ))
}

/// The link-time addresses [`call_probes`] chose, one per opcode asked (its
/// own type: the module cache keys each file's results by type).
pub(super) struct CallProbes(pub(super) Vec<u64>);

/// The executable sections of `obj`: (address, bytes).
pub(super) fn text_of<'d>(obj: &object::File<'d>) -> Vec<(u64, &'d [u8])> {
    use object::{Object, ObjectSection, SectionKind};
    obj.sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .filter_map(|s| Some((s.address(), s.data().ok()?)))
        .collect()
}

/// Where the direct branches of `text` land inside `within` (start, end).
pub(super) fn branch_landings(text: &[(u64, &[u8])], within: (u64, u64)) -> BTreeSet<u64> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction};
    let mut out = BTreeSet::new();
    let mut ins = Instruction::default();
    for &(addr, bytes) in text {
        let mut decoder = Decoder::with_ip(64, bytes, addr, DecoderOptions::NONE);
        while decoder.can_decode() {
            decoder.decode_out(&mut ins);
            if matches!(
                ins.flow_control(),
                FlowControl::ConditionalBranch
                    | FlowControl::UnconditionalBranch
                    | FlowControl::Call
            ) {
                let to = ins.near_branch_target();
                if within.0 <= to && to < within.1 {
                    out.insert(to);
                }
            }
        }
    }
    out
}

/// The first branch after the handler entry `target` in `eval` (start,
/// end), when the code from `target` to it runs straight, nothing falls
/// into `target`, and nothing in `landings` lies after `target` up to it;
/// a direct conditional or unconditional jump (the kernel emulates both).
fn straight_branch(
    text: &[(u64, &[u8])],
    eval: (u64, u64),
    target: u64,
    landings: &BTreeSet<u64>,
) -> Option<u64> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction};
    let &(addr, bytes) = text
        .iter()
        .find(|(a, b)| *a <= eval.0 && eval.1 <= a + b.len() as u64)?;
    let code = &bytes[(eval.0 - addr) as usize..(eval.1 - addr) as usize];
    let mut decoder = Decoder::with_ip(64, code, eval.0, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    // The instruction before the entry must not run on into it.
    let mut before = FlowControl::UnconditionalBranch;
    while decoder.can_decode() {
        decoder.decode_out(&mut ins);
        if ins.next_ip() == target {
            before = ins.flow_control();
        }
        if ins.ip() >= target {
            break;
        }
    }
    if ins.ip() != target
        || !matches!(
            before,
            FlowControl::UnconditionalBranch | FlowControl::IndirectBranch | FlowControl::Return
        )
    {
        return None;
    }
    loop {
        if ins.ip() != target && landings.range(target + 1..=ins.ip()).next().is_some() {
            return None;
        }
        match ins.flow_control() {
            FlowControl::Next => {}
            FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch
                if ins.op0_kind() == iced_x86::OpKind::NearBranch64 =>
            {
                return (ins.ip() != target).then_some(ins.ip());
            }
            _ => return None,
        }
        if !decoder.can_decode() {
            return None;
        }
        decoder.decode_out(&mut ins);
    }
}

/// The evaluator's dispatch table of the module at `path`: for each opcode,
/// the link-time address of its handler; and the evaluator's extent.
///
/// The table is found by what it is, not by a symbol (Debian's build keeps
/// none for it): among the addresses the evaluator's instructions read
/// (`lea table(%rip)` in position-independent code, `mov table(,%rax,8)`
/// at a fixed address), the one where 256 code addresses start, most of
/// them inside the evaluator (the rest its cold part). In a shared object
/// each slot is a relative relocation, whose addend is the address.
fn dispatch_table(
    data: &[u8],
    obj: &object::File<'_>,
    facts: &ElfFacts,
) -> Result<(Vec<u64>, (u64, u64))> {
    use object::{Object, RelocationFlags};
    let eval = facts
        .lookup_symbol("_PyEval_EvalFrameDefault")
        .filter(|s| s.size > 0)
        .ok_or_else(|| anyhow!("no sized _PyEval_EvalFrameDefault"))?;
    let text = text_of(obj);
    let in_text = |a: u64| text.iter().any(|&(s, b)| s <= a && a < s + b.len() as u64);
    let relative: HashMap<u64, u64> = obj
        .dynamic_relocations()
        .into_iter()
        .flatten()
        .filter(|(_, r)| {
            r.flags()
                == RelocationFlags::Elf {
                    r_type: object::elf::R_X86_64_RELATIVE,
                }
        })
        .map(|(at, r)| (at, r.addend() as u64))
        .collect();
    let from = facts
        .vaddr_to_file_offset(eval.vaddr)
        .ok_or_else(|| anyhow!("_PyEval_EvalFrameDefault is not in the file"))?
        as usize;
    let code = data
        .get(from..from + eval.size as usize)
        .ok_or_else(|| anyhow!("_PyEval_EvalFrameDefault runs past the file"))?;
    let slot = |at: u64| -> Option<u64> {
        if let Some(&a) = relative.get(&at) {
            return Some(a);
        }
        let off = facts.vaddr_to_file_offset(at)? as usize;
        Some(u64::from_le_bytes(data.get(off..off + 8)?.try_into().ok()?))
    };
    let inside = |a: u64| eval.vaddr <= a && a < eval.vaddr + eval.size;
    let mut found: Vec<Vec<u64>> = Vec::new();
    for base in table_candidates(code, eval.vaddr) {
        let Some(table) = (0..256)
            .map(|i| slot(base + 8 * i).filter(|&a| in_text(a)))
            .collect::<Option<Vec<u64>>>()
        else {
            continue;
        };
        if table.iter().filter(|&&a| inside(a)).count() >= 128 && !found.contains(&table) {
            found.push(table);
        }
    }
    match found.len() {
        1 => Ok((found.remove(0), (eval.vaddr, eval.vaddr + eval.size))),
        0 => bail!(
            "no dispatch table in its _PyEval_EvalFrameDefault (a build without computed gotos?)"
        ),
        n => bail!("{n} tables in its _PyEval_EvalFrameDefault look like its dispatch table"),
    }
}

/// Every address the instructions of `code` (at `ip`) read memory at with
/// no base register: rip-relative operands, and absolute ones indexed by a
/// register times 8 (a table of words).
fn table_candidates(code: &[u8], ip: u64) -> BTreeSet<u64> {
    use iced_x86::{Decoder, DecoderOptions, Instruction, OpKind, Register};
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut ins = Instruction::default();
    let mut out = BTreeSet::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut ins);
        if !(0..ins.op_count()).any(|k| ins.op_kind(k) == OpKind::Memory) {
            continue;
        }
        if ins.is_ip_rel_memory_operand() {
            out.insert(ins.ip_rel_memory_address());
        } else if ins.memory_base() == Register::None && ins.memory_index_scale() == 8 {
            out.insert(ins.memory_displacement64());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The opcodes rig probes are the installed headers' (python3.11-dev).
    #[test]
    fn resume_is_the_3_11_headers_opcode() {
        let Ok(h) = std::fs::read_to_string("/usr/include/python3.11/opcode.h") else {
            assert!(
                std::env::var_os("CI").is_none(),
                "python3.11-dev is not installed"
            );
            eprintln!("skipped: no /usr/include/python3.11/opcode.h (python3.11-dev)");
            return;
        };
        let op = |name: &str| -> u8 {
            h.lines()
                .find_map(|l| {
                    let mut w = l.split_whitespace();
                    (w.next() == Some("#define") && w.next() == Some(name))
                        .then(|| w.next()?.parse().ok())?
                })
                .unwrap_or_else(|| panic!("{name} not in opcode.h"))
        };
        assert_eq!(RESUME_3_11, (op("RESUME"), op("RESUME_QUICK")));
    }

    /// The file at `path` and its facts; `None`, said, where it is not
    /// installed (never on CI, which installs Debian's python3.11).
    fn installed(path: &str) -> Option<(std::sync::Arc<ElfFacts>, Vec<u8>)> {
        let path = Path::new(path);
        if !path.exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{path:?} is not installed"
            );
            eprintln!("skipped: no {path:?}");
            return None;
        }
        Some((
            ElfFacts::shared(path).unwrap(),
            std::fs::read(path).unwrap(),
        ))
    }

    /// Debian's interpreter at a fixed address (`/usr/bin/python3.11`) and
    /// its shared library (position-independent, the table relocated): one
    /// table each, whose `RESUME` and `RESUME_QUICK` handlers are two
    /// places inside the evaluator.
    #[test]
    fn the_dispatch_table_is_found_in_both_of_debians_builds() {
        for path in [
            "/usr/bin/python3.11",
            "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
        ] {
            let Some((facts, data)) = installed(path) else {
                continue;
            };
            let eval = facts.lookup_symbol("_PyEval_EvalFrameDefault").unwrap();
            let obj = object::File::parse(&*data).unwrap();
            let (table, _) = dispatch_table(&data, &obj, &facts).unwrap();
            assert_eq!(table.len(), 256);
            let (resume, quick) = (table[RESUME_3_11.0 as usize], table[RESUME_3_11.1 as usize]);
            assert_ne!(resume, quick, "{path:?}");
            for a in [resume, quick] {
                assert!(
                    eval.vaddr < a && a < eval.vaddr + eval.size,
                    "{path:?}: {a:#x}"
                );
            }
        }
    }

    /// In Debian's interpreter each probe moves from the handler's first
    /// instruction (one the kernel single-steps) to the conditional
    /// branch that ends the handler's straight start, which it emulates.
    #[test]
    fn each_call_probe_sits_on_a_branch_of_its_handlers_straight_start() {
        let path = "/usr/bin/python3.11";
        let Some((facts, data)) = installed(path) else {
            return;
        };
        let obj = object::File::parse(&*data).unwrap();
        let (table, _) = dispatch_table(&data, &obj, &facts).unwrap();
        let ops = [RESUME_3_11.0, RESUME_3_11.1];
        let probes = call_probes(Path::new(path), &facts, &ops).unwrap();
        for (op, at) in ops.iter().zip(&probes.0) {
            let entry = table[*op as usize];
            assert!(
                entry < *at && *at < entry + 64,
                "{op}: {entry:#x} -> {at:#x}"
            );
            let off = facts.vaddr_to_file_offset(*at).unwrap() as usize;
            let mut d = iced_x86::Decoder::with_ip(64, &data[off..], *at, 0);
            assert_eq!(
                d.decode().flow_control(),
                iced_x86::FlowControl::ConditionalBranch,
                "{op} at {at:#x}"
            );
        }
    }
}
