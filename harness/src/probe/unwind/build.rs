//! One module's table: its `.eh_frame` rows, its runtimes' rows, rows for
//! the code no row covers, and the entry point's END.

use std::fs::File;
use std::path::Path;

use anyhow::{anyhow, Context, Result};
use gimli::{BaseAddresses, EhFrame, LittleEndian};
use object::{Object, ObjectSection};
use rig_ebpf::abi::unwind_cfa;

use super::eh_frame::rows_of;
use super::index::table_of;
use super::rows::{analysed_rows, entry_point_rows, entry_rows, named_tops};
use super::{exec_segments, ModuleTable};
use crate::elf::ElfFacts;
use crate::runtime::{self, marker, Code, Module, ModuleKind, Uncovered};

/// One module's table, from the file at `open`, mapped as `path`.
pub fn build_module(path: &str, open: &Path) -> Result<ModuleTable> {
    let f = File::open(open).with_context(|| format!("open {}", open.display()))?;
    // SAFETY-free alternative to mmap: modules are a few MB at most.
    let data = {
        use std::io::Read;
        let mut v = Vec::new();
        (&f).read_to_end(&mut v)?;
        v
    };
    module_of(path, &data).with_context(|| format!("parse {}", open.display()))
}

/// [`build_module`] of a module's bytes (any bytes: a target's file is
/// untrusted input), mapped as `path` (its kind reads its file name).
pub fn module_of(path: &str, data: &[u8]) -> Result<ModuleTable> {
    let obj = object::File::parse(data)?;
    // Segments as the file holds them: a header claiming bytes past the
    // end of the file describes nothing the kernel could map.
    let segments: Vec<(u64, u64, u64)> = exec_segments(&obj)
        .into_iter()
        .filter(|&(off, size, vaddr)| {
            off.checked_add(size)
                .is_some_and(|e| e <= data.len() as u64)
                && vaddr.checked_add(size).is_some()
        })
        .collect();
    let code: Vec<(u64, u64)> = segments
        .iter()
        .map(|&(_, size, vaddr)| (vaddr, vaddr + size))
        .collect();
    let (mut raw, mut unsupported) = (Vec::new(), 0);
    if let Some(eh) = obj.section_by_name(".eh_frame") {
        let eh_data = eh.data().map_err(|e| anyhow!("{e}"))?;
        let mut bases = BaseAddresses::default().set_eh_frame(eh.address());
        if let Some(t) = obj.section_by_name(".text") {
            bases = bases.set_text(t.address());
        }
        if let Some(g) = obj.section_by_name(".got") {
            bases = bases.set_got(g.address());
        }
        let section = EhFrame::new(eh_data, LittleEndian);
        (raw, unsupported) = rows_of(&section, &bases, &code)?;
    }
    // Rows the module's runtimes make for code without .eh_frame (Go's
    // from its pcsp tables; C code linked in with cgo keeps its .eh_frame
    // rows above; V8's builtins), then rows for the code no row covers, as
    // its runtime says it can be read (`runtime::Uncovered`).
    let facts = ElfFacts::parse(data).unwrap_or_default();
    let module = Module {
        kind: ModuleKind::of(path, &facts),
        facts: &facts,
    };
    let code = Code {
        obj: &obj,
        data,
        segments: &segments,
    };
    for r in runtime::runtimes(&module) {
        raw.extend(r.unwind_rows(&code)?);
    }
    match runtime::uncovered(&module) {
        Uncovered::HeightAnalysis {
            tops,
            no_frame,
            returned_into,
        } => {
            raw.extend(named_tops(&obj, tops));
            raw.extend(analysed_rows(
                &obj,
                data,
                &segments,
                &raw,
                no_frame,
                returned_into,
            ));
        }
        Uncovered::Entries => raw.extend(entry_rows(&obj, data, &segments, &raw)),
    }
    if let Some((lo, hi)) = entry_point_rows(&obj, data, &segments) {
        raw.retain(|r| r.pc <= lo || r.pc >= hi);
        raw.push(marker(lo, unwind_cfa::END));
        raw.push(marker(hi, unwind_cfa::NONE));
    }
    let mut t = table_of(raw)?;
    t.unsupported = unsupported;
    t.exec_segments = segments;
    Ok(t)
}
