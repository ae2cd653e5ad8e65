//! Unwind tables for whole user stacks without frame pointers.
//!
//! In: the executable mappings of a target process. Out: rows (one per
//! address range with one rule: how to find the caller's stack pointer, its
//! return address and saved rbp) that the BPF stack walk reads, and per
//! address space the list of mappings with the slice of rows each uses.
//!
//! Rows come from each module's `.eh_frame` (parsed with gimli), which every
//! x86_64 module carries for C++ exceptions and Rust panics even when it was
//! built without frame pointers. Rules the walk cannot follow (a CFA from a
//! register other than rsp/rbp, or an expression other than the PLT stub's)
//! become "no rule" rows: a stack that reaches one ends there and is marked,
//! never silently cut.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, Context, Result};
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use object::{Object, ObjectSection, ObjectSegment};
use rig_ebpf::abi::{unwind_cfa, UnwindMap, UnwindProc, UnwindRow, UNWIND_MAX_MAPS};

use crate::target::maps::{Mapping, ProcMaps};

/// One module's rows, sorted by `pc` (module virtual addresses).
#[derive(Debug, Default)]
pub struct ModuleTable {
    pub rows: Vec<UnwindRow>,
    /// FDEs whose rules could not all be followed (rows marked "no rule").
    pub unsupported: usize,
}

/// Identity of a file on disk: a table is built once per file per session.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: i64,
}

/// Builds tables once per file and lays them out for the BPF maps.
#[derive(Default)]
pub struct Tables {
    modules: HashMap<FileId, Arc<ModuleTable>>,
    /// Where each file's rows start in `rows`.
    placed: HashMap<FileId, u32>,
    /// Every placed row, in the order they go into the BPF array.
    pub rows: Vec<UnwindRow>,
    /// Modules that have no usable table (path, why).
    pub missing: Vec<(String, String)>,
}

impl Tables {
    /// The table of the file at `path` (as seen through `open`, e.g.
    /// /proc/<pid>/map_files/...), built on first use.
    fn module(&mut self, open: &Path) -> Result<(FileId, Arc<ModuleTable>)> {
        let meta = std::fs::metadata(open).with_context(|| format!("stat {}", open.display()))?;
        let id = FileId {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mtime: meta.mtime(),
        };
        if let Some(t) = self.modules.get(&id) {
            return Ok((id, t.clone()));
        }
        let t = Arc::new(build_module(open)?);
        self.modules.insert(id.clone(), t.clone());
        Ok((id, t))
    }

    /// The mapping list of one address space, placing the rows of modules
    /// not placed yet. `limit` is how many rows the BPF array holds: a
    /// module that does not fit is left out and listed in `missing`.
    pub fn proc_entry(&mut self, maps: &ProcMaps, limit: usize) -> UnwindProc {
        let mut out = UnwindProc::default();
        let mut entries: Vec<UnwindMap> = Vec::new();
        for m in maps
            .mappings
            .iter()
            .filter(|m| m.is_exec() && m.is_file_backed())
        {
            let Some(path) = m.path.as_deref() else {
                continue;
            };
            let open = maps.open_path(path);
            let (id, table) = match self.module(&open) {
                Ok(x) => x,
                Err(e) => {
                    self.note_missing(path, format!("{e:#}"));
                    continue;
                }
            };
            if table.rows.is_empty() {
                self.note_missing(path, "no .eh_frame rows".into());
                continue;
            }
            let first = match self.placed.get(&id) {
                Some(f) => *f,
                None => {
                    if self.rows.len() + table.rows.len() > limit {
                        self.note_missing(path, "the unwind row array is full".into());
                        continue;
                    }
                    let f = self.rows.len() as u32;
                    self.rows.extend_from_slice(&table.rows);
                    self.placed.insert(id, f);
                    f
                }
            };
            let Some(bias) = bias(&open, m) else {
                self.note_missing(path, "mapping offset in no PT_LOAD segment".into());
                continue;
            };
            entries.push(UnwindMap {
                start: m.start,
                end: m.end,
                bias,
                row_first: first,
                row_count: table.rows.len() as u32,
            });
        }
        entries.sort_by_key(|e| e.start);
        if entries.len() > UNWIND_MAX_MAPS {
            for e in &entries[UNWIND_MAX_MAPS..] {
                self.note_missing(
                    &format!("{:#x}", e.start),
                    format!("more than {UNWIND_MAX_MAPS} executable mappings"),
                );
            }
            entries.truncate(UNWIND_MAX_MAPS);
        }
        out.nmaps = entries.len() as u32;
        out.maps[..entries.len()].copy_from_slice(&entries);
        out
    }

    /// Rows a set of processes needs (each module once), to size the array.
    pub fn rows_needed(&mut self, maps: &[&ProcMaps]) -> usize {
        let mut seen = std::collections::HashSet::new();
        let mut n = 0;
        for pm in maps {
            for m in pm
                .mappings
                .iter()
                .filter(|m| m.is_exec() && m.is_file_backed())
            {
                let Some(path) = m.path.as_deref() else {
                    continue;
                };
                if let Ok((id, t)) = self.module(&pm.open_path(path)) {
                    if seen.insert(id) {
                        n += t.rows.len();
                    }
                }
            }
        }
        n
    }

    fn note_missing(&mut self, path: &str, why: String) {
        if !self.missing.iter().any(|(p, _)| p == path) {
            self.missing.push((path.to_string(), why));
        }
    }
}

/// `ip - bias` is the module virtual address of `ip` in mapping `m` (an
/// executable mapping).
///
/// The kernel maps each PT_LOAD from its page-aligned file offset, so the
/// mapping's offset can lie inside the tail of the segment before it: lld
/// (rustc's default linker) packs segments without page-aligning their file
/// offsets, e.g. R at file 0..0x13408 and R+X at file 0x13410 / vaddr
/// 0x14410, mapped from offset 0x13000. Only an executable segment can
/// back an executable mapping, and the offset may precede the segment's own
/// by less than a page.
fn bias(open: &Path, m: &Mapping) -> Option<u64> {
    let data = std::fs::read(open).ok()?;
    let file = object::File::parse(&*data).ok()?;
    for seg in file.segments() {
        let object::SegmentFlags::Elf { p_flags } = seg.flags() else {
            continue;
        };
        if p_flags & object::elf::PF_X == 0 {
            continue;
        }
        let (off, size) = seg.file_range();
        if m.offset >= off & !0xfff && m.offset < off + size.max(1) {
            // vaddr of the mapping's first byte; m.offset may be below off.
            let vaddr = seg.address().wrapping_sub(off).wrapping_add(m.offset);
            return Some(m.start.wrapping_sub(vaddr));
        }
    }
    None
}

/// Parse one module's `.eh_frame` into rows.
pub fn build_module(path: &Path) -> Result<ModuleTable> {
    let f = File::open(path).with_context(|| format!("open {}", path.display()))?;
    // SAFETY-free alternative to mmap: modules are a few MB at most.
    let data = {
        use std::io::Read;
        let mut v = Vec::new();
        (&f).read_to_end(&mut v)?;
        v
    };
    let obj = object::File::parse(&*data).with_context(|| format!("parse {}", path.display()))?;
    let Some(eh) = obj.section_by_name(".eh_frame") else {
        return Ok(ModuleTable::default());
    };
    let eh_data = eh.data().map_err(|e| anyhow!("{e}"))?;
    let mut bases = BaseAddresses::default().set_eh_frame(eh.address());
    if let Some(t) = obj.section_by_name(".text") {
        bases = bases.set_text(t.address());
    }
    if let Some(g) = obj.section_by_name(".got") {
        bases = bases.set_got(g.address());
    }
    let section = EhFrame::new(eh_data, LittleEndian);
    rows_of(&section, &bases)
}

fn rows_of(
    section: &EhFrame<gimli::EndianSlice<'_, LittleEndian>>,
    bases: &BaseAddresses,
) -> Result<ModuleTable> {
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
    Ok(ModuleTable {
        rows: compact(raw),
        unsupported,
    })
}

fn convert(
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

/// Sort by pc; where an FDE's end marker and the next FDE's first row share
/// a pc, the real rule wins; consecutive rows with the same rule merge.
fn compact(mut raw: Vec<UnwindRow>) -> Vec<UnwindRow> {
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
    out
}

fn same_rule(a: &UnwindRow, b: &UnwindRow) -> bool {
    a.cfa == b.cfa && a.cfa_off == b.cfa_off && a.rbp_off == b.rbp_off
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_plt_expression() {
        let e = [
            0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22,
        ];
        assert_eq!(plt_threshold(&e), Some(11));
        assert_eq!(plt_threshold(&e[..10]), None);
    }

    #[test]
    fn libc_has_rows_for_its_functions() {
        let maps = ProcMaps::read(std::process::id()).unwrap();
        let libc = maps.libc_path().expect("the test binary maps libc");
        let t = build_module(Path::new(&libc)).unwrap();
        assert!(t.rows.len() > 1000, "libc rows: {}", t.rows.len());
        assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc));
    }

    /// rig-fixtures' stackcalib_rs is linked by lld: its R+X segment starts
    /// mid-page in the file (0x...410) right after the R segment, and the
    /// kernel maps it from the page-aligned offset, which lies in the R
    /// segment's tail.
    #[test]
    fn bias_of_an_lld_text_mapping_comes_from_the_executable_segment() {
        let path = rig_fixtures::stackcalib_rs();
        let data = std::fs::read(path).unwrap();
        let file = object::File::parse(&*data).unwrap();
        let text = file
            .segments()
            .find(|s| {
                matches!(s.flags(), object::SegmentFlags::Elf { p_flags }
                    if p_flags & object::elf::PF_X != 0)
            })
            .unwrap();
        let (off, _) = text.file_range();
        let base = 0x5555_0000_0000u64;
        let m = Mapping {
            start: base + (text.address() & !0xfff),
            end: base + text.address() + 0x1000,
            perms: "r-xp".into(),
            offset: off & !0xfff,
            dev: "00:00".into(),
            inode: 1,
            path: Some(path.display().to_string()),
        };
        assert_eq!(bias(path, &m), Some(base));
    }

    #[test]
    fn compaction_prefers_real_rules_and_merges_equal_neighbours() {
        let row = |pc, cfa, off| UnwindRow {
            pc,
            cfa,
            cfa_off: off,
            ..Default::default()
        };
        let out = compact(vec![
            row(0, unwind_cfa::RSP, 8),
            row(1, unwind_cfa::RSP, 16),
            row(10, unwind_cfa::NONE, 0),
            row(10, unwind_cfa::RSP, 8),
            row(12, unwind_cfa::RSP, 8),
            row(20, unwind_cfa::NONE, 0),
        ]);
        let pcs: Vec<u64> = out.iter().map(|r| r.pc).collect();
        assert_eq!(pcs, vec![0, 1, 10, 20]);
        assert_eq!(out[2].cfa, unwind_cfa::RSP);
    }
}
