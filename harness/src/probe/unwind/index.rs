//! A module's rows sorted, merged and indexed by address bucket, as the
//! BPF walk looks them up.

use anyhow::{bail, Result};
use rig_ebpf::abi::{unwind_cfa, UnwindBucket, UnwindRow, UNWIND_BUCKET_SHIFT};

use super::eh_frame::MAX_CODE_SPAN;
use super::ModuleTable;

/// A module's table of raw rows (from any source, in any order).
pub(super) fn table_of(raw: Vec<UnwindRow>) -> Result<ModuleTable> {
    let rows = compact(raw);
    if let (Some(first), Some(last)) = (rows.first(), rows.last()) {
        // The bucket index has an entry per 256 bytes of the rows' span.
        if last.pc - first.pc > MAX_CODE_SPAN {
            bail!(
                "its unwind rows span {:#x}..{:#x}, more than {} GiB of code addresses: \
                 its program headers or .eh_frame are corrupt",
                first.pc,
                last.pc,
                MAX_CODE_SPAN >> 30
            );
        }
    }
    let (pc_base, index) = bucket_index(&rows);
    Ok(ModuleTable {
        rows,
        pc_base,
        index,
        unsupported: 0,
        exec_segments: Vec::new(),
    })
}

/// For each `1 << UNWIND_BUCKET_SHIFT`-byte bucket of module addresses from
/// the first row's (rounded down): the rows covering the bucket's start and
/// the next bucket's start. The row covering an address in the bucket lies
/// between them, inclusive. Addresses past the last bucket are covered by
/// the last row.
pub fn bucket_index(rows: &[UnwindRow]) -> (u64, Vec<UnwindBucket>) {
    let (Some(first), Some(last)) = (rows.first(), rows.last()) else {
        return (0, Vec::new());
    };
    let base = first.pc >> UNWIND_BUCKET_SHIFT << UNWIND_BUCKET_SHIFT;
    let buckets = ((last.pc - base) >> UNWIND_BUCKET_SHIFT) as usize + 1;
    // covering[b]: the row covering the start of bucket b (b <= buckets).
    let mut covering = Vec::with_capacity(buckets + 1);
    let mut r = 0usize;
    for b in 0..=buckets {
        let start = base + ((b as u64) << UNWIND_BUCKET_SHIFT);
        while r + 1 < rows.len() && rows[r + 1].pc <= start {
            r += 1;
        }
        covering.push(r as u32);
    }
    let index = covering
        .windows(2)
        .map(|w| UnwindBucket { lo: w[0], hi: w[1] })
        .collect();
    (base, index)
}

/// The row covering module address `v`, found as the BPF walk finds it
/// (bucket, then binary search): for tests of the layout.
pub fn lookup(table: &ModuleTable, v: u64) -> Option<&UnwindRow> {
    if table.rows.is_empty() || v < table.pc_base {
        return None;
    }
    let b = ((v - table.pc_base) >> UNWIND_BUCKET_SHIFT) as usize;
    let (mut lo, mut hi) = match table.index.get(b) {
        Some(k) => (k.lo as usize, k.hi as usize + 1),
        None => (table.rows.len() - 1, table.rows.len()),
    };
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if table.rows[mid].pc <= v {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let r = &table.rows[lo];
    (r.pc <= v).then_some(r)
}

/// Sort by pc; where an FDE's end marker and the next FDE's first row share
/// a pc, the real rule wins; consecutive rows with the same rule merge.
pub(super) fn compact(mut raw: Vec<UnwindRow>) -> Vec<UnwindRow> {
    // Stable: for equal pcs, a later real row replaces an earlier marker.
    raw.sort_by_key(|r| r.pc);
    let mut out: Vec<UnwindRow> = Vec::with_capacity(raw.len());
    for r in raw {
        if let Some(last) = out.last_mut() {
            if last.pc == r.pc {
                if r.cfa != unwind_cfa::NONE || last.cfa == unwind_cfa::NONE {
                    *last = r;
                }
                continue;
            }
            if same_rule(last, &r) {
                continue;
            }
        }
        out.push(r);
    }
    // A merge may have left two equal neighbours.
    out.dedup_by(|b, a| same_rule(a, b));
    // A signal trampoline ends with its rt_sigreturn `syscall` (glibc's
    // __restore_rt): the ip a syscall event sees there is the byte past
    // its end. Its rule reaches that byte where no other code starts.
    for i in 0..out.len().saturating_sub(1) {
        let free = out.get(i + 2).is_none_or(|n| n.pc > out[i + 1].pc + 1);
        if out[i].cfa == unwind_cfa::SIGNAL && out[i + 1].cfa == unwind_cfa::NONE && free {
            out[i + 1].pc += 1;
        }
    }
    out
}

fn same_rule(a: &UnwindRow, b: &UnwindRow) -> bool {
    a.cfa == b.cfa && a.cfa_off == b.cfa_off && a.rbp_off == b.rbp_off && a.ra_adjust == b.ra_adjust
}
