//! Unwind tables for whole user stacks without frame pointers.
//!
//! In: the executable mappings of a target process. Out: rows (one per
//! address range with one rule: how to find the caller's stack pointer, its
//! return address and saved rbp) that the BPF stack walk reads, and per
//! address space the list of mappings with the slice of rows each uses.
//!
//! Rows come from each module's `.eh_frame` (parsed with gimli: `eh_frame`),
//! which every x86_64 module carries for C++ exceptions and Rust panics
//! even when it was built without frame pointers, and from the runtimes
//! whose code has none (`crate::runtime`: Go's pcsp tables, V8's builtins);
//! code no row covers gets rows from the stack height analysis of its
//! machine code where its runtime says it keeps the C ABI (`height`), and
//! rows for its entries otherwise (`rows`). `build` makes one module's
//! table, `index` sorts and indexes it for the BPF walk. Rules the walk cannot
//! follow (a CFA from a register other than rsp/rbp, or an expression other
//! than the PLT stub's) become "no rule" rows: a stack that reaches one
//! ends there and is marked, never silently cut.

mod build;
mod eh_frame;
mod height;
mod index;
mod rows;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, Result};
use object::{Object, ObjectSegment};
use rig_ebpf::abi::{unwind_cfa, UnwindBucket, UnwindMap, UnwindProc, UnwindRow, UNWIND_MAX_MAPS};

use crate::elf::FileKey;
use crate::process::maps::{Mapping, ProcMaps};
use crate::process::vdso;
use crate::runtime::{self, jit::is_jit_code, JitFrames};

pub use build::{build_module, module_of};
pub use eh_frame::plt_threshold;
pub use index::{bucket_index, lookup};

/// One module's rows, sorted by `pc` (module virtual addresses).
#[derive(Debug, Default)]
pub struct ModuleTable {
    pub rows: Vec<UnwindRow>,
    /// Module address of bucket 0 (see `bucket_index`).
    pub pc_base: u64,
    /// Per address bucket, the rows covering its start and the next
    /// bucket's start.
    pub index: Vec<UnwindBucket>,
    /// FDEs whose rules could not all be followed (rows marked "no rule").
    pub unsupported: usize,
    /// Executable segments: (file offset, file size, virtual address).
    pub exec_segments: Vec<(u64, u64, u64)>,
}

/// Lengths of the row and bucket-index arrays.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizes {
    pub rows: usize,
    pub index: usize,
}

/// Builds tables once per file and lays them out for the BPF maps.
#[derive(Default)]
pub struct Tables {
    /// Where each file's rows and bucket index start in `rows` / `index`.
    placed: HashMap<FileKey, (u32, u32)>,
    /// Every placed row, in the order they go into the BPF array.
    pub rows: Vec<UnwindRow>,
    /// Every placed bucket index, likewise.
    pub index: Vec<UnwindBucket>,
    /// Modules that have no usable table (path, why).
    pub missing: Vec<(String, String)>,
    /// Address spaces past a limit of the BPF tables: their stacks end
    /// early wherever a frame is in what did not fit (one line each).
    pub limits: Vec<String>,
    /// Where the one frame-pointer row JIT code shares was placed.
    frame_pointer_row: Option<u32>,
}

impl Tables {
    /// The table of the module mapped as `path` (as seen through `open`,
    /// e.g. /proc/<pid>/map_files/...), built once per file per rig
    /// process (the one module cache, `elf::cached`).
    fn module(&mut self, path: &str, open: &Path) -> Result<(FileKey, Arc<ModuleTable>)> {
        if open == Path::new(vdso::PATH) {
            return vdso_table();
        }
        let key = FileKey::of(open)?;
        let t = crate::elf::cached(open, |open| build_module(path, open))?;
        Ok((key, t))
    }

    /// The mapping list of one address space, placing the rows of modules
    /// not placed yet. `limit` is how many rows the BPF array holds: a
    /// module that does not fit is left out and listed in `missing`.
    pub fn proc_entry(&mut self, maps: &ProcMaps, limit: Sizes) -> UnwindProc {
        let mut entries: Vec<UnwindMap> = Vec::new();
        for m in maps.mappings.iter().filter(|m| has_code_table(m)) {
            let Some(path) = m.path.as_deref() else {
                continue;
            };
            // The mapped object itself: a binary deleted or replaced on
            // disk since it started (every deploy) still unwinds.
            let open = open_of(maps, m);
            let (id, table) = match self.module(path, &open) {
                Ok(x) => x,
                Err(e) => {
                    self.note_missing(path, format!("{e:#}"));
                    continue;
                }
            };
            if table.rows.is_empty() {
                self.note_missing(
                    path,
                    "no unwind rows (no .eh_frame, and none from its runtime)".into(),
                );
                continue;
            }
            let (first, index_first) = match self.placed.get(&id) {
                Some(f) => *f,
                None => {
                    if self.rows.len() + table.rows.len() > limit.rows
                        || self.index.len() + table.index.len() > limit.index
                    {
                        self.note_missing(path, "the unwind table arrays are full".into());
                        continue;
                    }
                    let f = (self.rows.len() as u32, self.index.len() as u32);
                    self.rows.extend_from_slice(&table.rows);
                    self.index.extend_from_slice(&table.index);
                    self.placed.insert(id, f);
                    f
                }
            };
            let Some(bias) = segment_bias(&table.exec_segments, m.start, m.offset) else {
                self.note_missing(path, "mapping offset in no PT_LOAD segment".into());
                continue;
            };
            entries.push(UnwindMap {
                start: m.start,
                end: m.end,
                bias,
                pc_base: table.pc_base,
                row_first: first,
                row_count: table.rows.len() as u32,
                index_first,
                buckets: table.index.len() as u32,
            });
        }
        entries.extend(self.jit_entries(maps, limit));
        entries.sort_by_key(|e| e.start);
        if entries.len() > UNWIND_MAX_MAPS {
            let over = entries.len() - UNWIND_MAX_MAPS;
            self.note_limit(format!(
                "pid {}: {} executable mappings with unwind tables, rig's tables hold \
                 {UNWIND_MAX_MAPS}: stacks end at a frame in the {over} highest ({:#x} and up)",
                maps.pid,
                entries.len(),
                entries[UNWIND_MAX_MAPS].start
            ));
            entries.truncate(UNWIND_MAX_MAPS);
        }
        UnwindProc::new(&entries)
    }

    /// The JIT code of one address space, where its runtime says every
    /// frame there keeps rbp as a frame pointer (a JVM started with
    /// -XX:+PreserveFramePointer): one frame-pointer row over each of its
    /// mappings, so a walk passes through compiled code, the interpreter
    /// and stubs to the native code that called them. Elsewhere JIT code
    /// gets no entry and a stack ends there, with its runtime's reason.
    fn jit_entries(&mut self, maps: &ProcMaps, limit: Sizes) -> Vec<UnwindMap> {
        let jit: Vec<&Mapping> = maps.mappings.iter().filter(|m| is_jit_code(m)).collect();
        if jit.is_empty() || runtime::jit_frames(maps) != Some(JitFrames::FramePointers) {
            return Vec::new();
        }
        if self.frame_pointer_row.is_none() {
            if self.rows.len() >= limit.rows {
                self.note_missing("[JIT code]", "the unwind table arrays are full".into());
                return Vec::new();
            }
            self.frame_pointer_row = Some(self.rows.len() as u32);
            self.rows.push(frame_pointer_row());
        }
        let first = self.frame_pointer_row.unwrap_or_default();
        jit.iter()
            .map(|m| UnwindMap {
                start: m.start,
                end: reserved_end(maps, m),
                // Module addresses are offsets in the mapping: the one row
                // at 0 covers all of it (no buckets: the walk takes the
                // last row).
                bias: m.start,
                pc_base: 0,
                row_first: first,
                row_count: 1,
                index_first: 0,
                buckets: 0,
            })
            .collect()
    }

    /// Record an address space past a table limit (once per text).
    pub fn note_limit(&mut self, what: String) {
        if !self.limits.contains(&what) {
            self.limits.push(what);
        }
    }

    /// Rows and index entries a set of processes needs (each module once),
    /// to size the arrays.
    pub fn needed(&mut self, maps: &[&ProcMaps]) -> Sizes {
        let mut seen = std::collections::HashSet::new();
        // The frame-pointer row JIT code may share.
        let mut n = Sizes { rows: 1, index: 0 };
        for pm in maps {
            for m in pm.mappings.iter().filter(|m| has_code_table(m)) {
                let Some(path) = m.path.as_deref() else {
                    continue;
                };
                if let Ok((id, t)) = self.module(path, &open_of(pm, m)) {
                    if seen.insert(id) {
                        n.rows += t.rows.len();
                        n.index += t.index.len();
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

/// Where JIT code mapping `m` can grow to: through the inaccessible
/// anonymous memory right after it, the rest of its reservation (a JVM
/// reserves its code cache at start and makes it executable as it
/// compiles, so code compiled during a window lies past the end of the
/// mapping the tables were made from).
fn reserved_end(maps: &ProcMaps, m: &Mapping) -> u64 {
    let mut end = m.end;
    for next in maps.mappings.iter().filter(|n| n.start >= m.end) {
        if next.start != end || next.path.is_some() || next.perms != "---p" {
            break;
        }
        end = next.end;
    }
    end
}

/// The rule of a frame that keeps rbp as its frame pointer, at any
/// instruction past its prologue: the caller's rbp saved at rbp, the return
/// address above it.
fn frame_pointer_row() -> UnwindRow {
    UnwindRow {
        pc: 0,
        cfa_off: 16,
        rbp_off: -16,
        cfa: unwind_cfa::RBP,
        ra_adjust: 0,
    }
}

/// Executable mappings whose code has a table: those of files, and the
/// vDSO (its `.eh_frame` takes a stack out of a system call the vDSO made).
fn has_code_table(m: &Mapping) -> bool {
    m.is_exec() && (m.is_file_backed() || m.path.as_deref() == Some(vdso::PATH))
}

/// What to open for a mapping's table: the mapped file, or the vDSO.
fn open_of(maps: &ProcMaps, m: &Mapping) -> PathBuf {
    match m.path.as_deref() {
        Some(vdso::PATH) => PathBuf::from(vdso::PATH),
        _ => maps.mapped_file(m),
    }
}

// `ip - bias` is the module virtual address of `ip` in a mapping.
//
// The mapping's file offset is page-aligned, so it can lie below the start
// of the segment it maps (rig-peer's text segment starts at file offset
// 0x126e80, mapped from 0x126000, where the read-only segment before it
// ends): the segment is the executable one whose page-aligned range holds
// the offset, not the first one that holds it.
pub(super) fn segment_bias(
    exec_segments: &[(u64, u64, u64)],
    start: u64,
    offset: u64,
) -> Option<u64> {
    const PAGE: u64 = 4096;
    for &(off, size, vaddr) in exec_segments {
        let page = off & !(PAGE - 1);
        if offset >= page && offset < off + size.max(1) {
            // vaddr(start) = segment vaddr - (segment offset - mapping offset)
            let at = vaddr.wrapping_sub(off).wrapping_add(offset);
            return Some(start.wrapping_sub(at));
        }
    }
    None
}

pub(super) fn exec_segments(file: &object::File<'_>) -> Vec<(u64, u64, u64)> {
    const PF_X: u32 = 1;
    file.segments()
        .filter(|seg| {
            matches!(seg.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & PF_X != 0)
        })
        .map(|seg| {
            let (off, size) = seg.file_range();
            (off, size, seg.address())
        })
        .collect()
}

/// The vDSO's table: the same image in every process (`process::vdso`),
/// so one table, under a key no file on disk has.
fn vdso_table() -> Result<(FileKey, Arc<ModuleTable>)> {
    static TABLE: std::sync::OnceLock<Option<Arc<ModuleTable>>> = std::sync::OnceLock::new();
    let image = vdso::image().context("the vDSO could not be read")?;
    let key = FileKey {
        dev: u64::MAX,
        ino: u64::MAX,
        size: image.len() as u64,
        mtime: 0,
        mtime_nsec: 0,
    };
    let t = TABLE
        .get_or_init(|| module_of(vdso::PATH, image).ok().map(Arc::new))
        .clone()
        .context("parse the vDSO")?;
    Ok((key, t))
}

#[cfg(test)]
#[path = "unwind_tests.rs"]
mod tests;
