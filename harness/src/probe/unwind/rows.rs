//! Rows for code no table describes: from the stack height analysis
//! (`height`) where the code keeps the C ABI, for each function's entry
//! otherwise, END over the functions that start a stack and over the
//! process's entry point.

use object::{Object, ObjectSegment};
use rig_ebpf::abi::{unwind_cfa, UnwindRow};

use super::height;
use super::index::compact;
use crate::runtime::marker;

/// Rows for every function symbol no row covers, from the stack height
/// analysis of its machine code (`height::height_rows`), up to its size or,
/// when it has none (hand-written assembly: a C library's memcpy), the next
/// symbol or row. `no_frame`: functions that get no rows;
/// `returned_into`: those the byte before which gets none either.
pub(super) fn analysed_rows(
    obj: &object::File<'_>,
    data: &[u8],
    segments: &[(u64, u64, u64)],
    rows: &[UnwindRow],
    no_frame: &[&str],
    returned_into: &[&str],
) -> Vec<UnwindRow> {
    use object::{ObjectSymbol, SymbolKind};
    // Longer than any function of a C library's, short enough that a sizeless
    // symbol at the end of the text is not read as megabytes of code.
    const MAX_SIZELESS: u64 = 1 << 16;
    let mut starts: Vec<u64> = rows.iter().map(|r| r.pc).collect();
    let mut funcs: Vec<(u64, u64)> = Vec::new();
    let mut skip: Vec<u64> = Vec::new();
    for s in obj.symbols().chain(obj.dynamic_symbols()) {
        if s.kind() != SymbolKind::Text || !s.is_definition() || s.address() == 0 {
            continue;
        }
        let name = s.name().unwrap_or("");
        // Go's linker names each C object's text section `pkg(.text)`
        // (`runtime/cgo(.text)`, sized over all of the object's
        // functions): a section, not a function.
        if name.ends_with(')') && name.contains("(.text") {
            continue;
        }
        starts.push(s.address());
        // `f.cold` (code GCC moved out of `f`) is entered by a jump from
        // `f`, at `f`'s height, not by a call.
        if name.contains(".cold") || no_frame.contains(&name) {
            skip.push(s.address());
            continue;
        }
        funcs.push((s.address(), s.size()));
    }
    starts.sort_unstable();
    starts.dedup();
    let poison: Vec<u64> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        .filter(|s| {
            s.kind() == SymbolKind::Text && s.name().is_ok_and(|n| returned_into.contains(&n))
        })
        .map(|s| s.address().wrapping_sub(1))
        .collect();
    // Aliases share an address: the one with a size speaks for them.
    funcs.sort_unstable_by_key(|&(a, size)| (a, std::cmp::Reverse(size)));
    funcs.dedup_by_key(|f| f.0);
    let covered = covered_by(rows);
    let sized: Vec<(u64, u64)> = funcs.iter().filter(|f| f.1 > 0).copied().collect();
    let inside_another = |a: u64| {
        let i = sized.partition_point(|f| f.0 < a);
        i > 0 && a < sized[i - 1].0 + sized[i - 1].1
    };
    // Jump tables, read from the file as its segments map it.
    let read = |addr: u64, len: usize| -> Option<Vec<u8>> {
        obj.segments()
            .find_map(|seg| seg.data_range(addr, len as u64).ok().flatten())
            .filter(|b| b.len() == len)
            .map(<[u8]>::to_vec)
    };
    let mut out = Vec::new();
    for &(start, size) in &funcs {
        if covered(start) || skip.contains(&start) || inside_another(start) {
            continue;
        }
        // Up to the next symbol or row: code someone else describes.
        let next = starts[starts.partition_point(|&a| a <= start)..]
            .first()
            .copied()
            .unwrap_or(u64::MAX);
        let end = if size > 0 {
            start.saturating_add(size).min(next)
        } else {
            next.min(start.saturating_add(MAX_SIZELESS))
        };
        let Some(&(off, seg_size, vaddr)) = segments
            .iter()
            .find(|&&(_, size, vaddr)| vaddr <= start && start < vaddr + size)
        else {
            continue;
        };
        let end = end.min(vaddr + seg_size);
        let from = off + (start - vaddr);
        let Some(code) = data.get(from as usize..(from + (end - start)) as usize) else {
            continue;
        };
        out.extend(height::height_rows(code, start, &poison, &read));
    }
    out
}

/// Whether a rule covers an address, as the finished table will say:
/// rows compacted first, so an FDE's end marker that shares its pc with the
/// next FDE's first row (`main` ending where `_start` begins, `_start`'s FDE
/// first in `.eh_frame`) does not hide that row.
pub(super) fn covered_by(rows: &[UnwindRow]) -> impl Fn(u64) -> bool {
    let table = compact(rows.to_vec());
    move |pc: u64| {
        let i = table.partition_point(|r| r.pc <= pc);
        i > 0 && table[i - 1].cfa != unwind_cfa::NONE
    }
}

/// The process's entry point (an executable's `_start`, `e_entry`) is the
/// outermost frame of its first thread, whatever its unwind tables say or
/// leave out: END from it to the end of its first call (the call of
/// `__libc_start_main` or `_start_c`, which never returns; the walk
/// looks up a return address's call instruction), replacing any row in
/// between. Entry code that jumps (Go's `_rt0_amd64_linux`) or makes no
/// call in its first 64 bytes gets none. Shared libraries (a DT_SONAME) are
/// left alone: libc.so.6's entry point is a program of its own that prints
/// its version, never in a server's stack.
pub(super) fn entry_point_rows(
    obj: &object::File<'_>,
    data: &[u8],
    segments: &[(u64, u64, u64)],
) -> Option<(u64, u64)> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl};
    let entry = obj.entry();
    if entry == 0 || has_soname(obj) {
        return None;
    }
    let &(off, size, vaddr) = segments
        .iter()
        .find(|&&(_, size, vaddr)| vaddr <= entry && entry - vaddr < size)?;
    let from = usize::try_from(off.checked_add(entry - vaddr)?).ok()?;
    let to = usize::try_from((off + size).min(data.len() as u64)).ok()?;
    let code = data.get(from..to.min(from.saturating_add(64)))?;
    let mut decoder = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    while decoder.can_decode() {
        let ins = decoder.decode();
        match ins.flow_control() {
            _ if ins.is_invalid() => return None,
            FlowControl::Call | FlowControl::IndirectCall => return Some((entry, ins.next_ip())),
            FlowControl::Next => {}
            _ => return None,
        }
    }
    None
}

/// Whether the ELF file has a DT_SONAME: a shared library, not a program.
pub(super) fn has_soname(obj: &object::File<'_>) -> bool {
    use object::read::elf::{Dyn, FileHeader};
    let object::File::Elf64(elf) = obj else {
        return false;
    };
    let endian = elf.endian();
    let Ok(sections) = elf.elf_header().sections(endian, elf.data()) else {
        return false;
    };
    let Ok(Some((entries, _))) = sections.dynamic(endian, elf.data()) else {
        return false;
    };
    entries
        .iter()
        .any(|d| d.tag32(endian) == Some(object::elf::DT_SONAME))
}

/// END rows over the whole code of each function named in `names`.
pub(super) fn named_tops(obj: &object::File<'_>, names: &[&str]) -> Vec<UnwindRow> {
    use object::{ObjectSymbol, SymbolKind};
    let mut out = Vec::new();
    for s in obj.symbols() {
        if s.kind() == SymbolKind::Text
            && s.is_definition()
            && s.size() > 0
            && s.name().is_ok_and(|n| names.contains(&n))
        {
            out.push(marker(s.address(), unwind_cfa::END));
            out.push(marker(s.address() + s.size(), unwind_cfa::NONE));
        }
    }
    out
}

/// Rows for the entry of every function symbol that no other row covers
/// in code of no known convention (hand-written assembly, code generated
/// at build time; code its runtime says keeps the C ABI gets
/// `analysed_rows` instead): from the first
/// instruction up
/// to the first that moves the stack pointer or leaves the straight line,
/// the return address is at rsp (CFA = rsp + 8, rbp unchanged), so a stack
/// taken by an entry probe there is whole. Past that, no rule.
pub(super) fn entry_rows(
    obj: &object::File<'_>,
    data: &[u8],
    segments: &[(u64, u64, u64)],
    rows: &[UnwindRow],
) -> Vec<UnwindRow> {
    use iced_x86::{Decoder, DecoderOptions, FlowControl};
    use object::{ObjectSymbol, SymbolKind};
    let covered = covered_by(rows);
    let mut starts: Vec<u64> = obj
        .symbols()
        .chain(obj.dynamic_symbols())
        // Sizeless ones too: hand-written assembly (a memcpy) has no size.
        .filter(|s| s.kind() == SymbolKind::Text && s.is_definition() && s.address() != 0)
        .map(|s| s.address())
        .filter(|&a| !covered(a))
        .collect();
    starts.sort_unstable();
    starts.dedup();
    let mut out = Vec::new();
    for start in starts {
        let Some(&(off, size, vaddr)) = segments
            .iter()
            .find(|&&(_, size, vaddr)| vaddr <= start && start < vaddr + size)
        else {
            continue;
        };
        let from = (off + (start - vaddr)) as usize;
        let to = (off + size).min(data.len() as u64) as usize;
        let Some(code) = data.get(from..to.min(from + 64)) else {
            continue;
        };
        let mut decoder = Decoder::with_ip(64, code, start, DecoderOptions::NONE);
        let mut end = start;
        while decoder.can_decode() {
            let ins = decoder.decode();
            if ins.is_invalid() {
                break;
            }
            // Up to and including the start of this instruction.
            end = ins.ip() + 1;
            if ins.stack_pointer_increment() != 0
                || ins.flow_control() != FlowControl::Next
                || ins.op0_register() == iced_x86::Register::RSP
            {
                break;
            }
            end = ins.next_ip();
        }
        out.push(UnwindRow {
            pc: start,
            cfa: unwind_cfa::RSP,
            cfa_off: 8,
            ..Default::default()
        });
        out.push(marker(end, unwind_cfa::NONE));
    }
    out
}
