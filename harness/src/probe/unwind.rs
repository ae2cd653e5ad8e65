//! Unwind tables for whole user stacks without frame pointers.
//!
//! In: the executable mappings of a target process. Out: rows (one per
//! address range with one rule: how to find the caller's stack pointer, its
//! return address and saved rbp) that the BPF stack walk reads, and per
//! address space the list of mappings with the slice of rows each uses.
//!
//! Rows come from each module's `.eh_frame` (parsed with gimli), which every
//! x86_64 module carries for C++ exceptions and Rust panics even when it was
//! built without frame pointers; Go code has none, and its rows are made
//! from `.gopclntab`'s pcsp tables (exact at every pc, see `go_rows`);
//! musl's C library has none either, and its rows come from the stack
//! height analysis of its machine code (`height`). Rules the walk cannot
//! follow (a CFA from a register other than rsp/rbp, or an expression other
//! than the PLT stub's) become "no rule" rows: a stack that reaches one
//! ends there and is marked, never silently cut.

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::Arc;

use anyhow::{anyhow, bail, Context, Result};
use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, LittleEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use object::{Object, ObjectSection, ObjectSegment};
use rig_ebpf::abi::{
    unwind_cfa, UnwindBucket, UnwindMap, UnwindProc, UnwindRow, UNWIND_BUCKET_SHIFT,
    UNWIND_MAX_MAPS,
};

use crate::process::maps::ProcMaps;
use crate::process::vdso;
use crate::symbolize::elf::ElfFacts;
use crate::symbolize::gopclntab::GoTable;
use crate::symbolize::runtime::{Libc, ModuleKind, GO_STACK_TOPS};

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
    /// Where each file's rows and bucket index start in `rows` / `index`.
    placed: HashMap<FileId, (u32, u32)>,
    /// Every placed row, in the order they go into the BPF array.
    pub rows: Vec<UnwindRow>,
    /// Every placed bucket index, likewise.
    pub index: Vec<UnwindBucket>,
    /// Modules that have no usable table (path, why).
    pub missing: Vec<(String, String)>,
    /// Address spaces past a limit of the BPF tables: their stacks end
    /// early wherever a frame is in what did not fit (one line each).
    pub limits: Vec<String>,
}

impl Tables {
    /// The table of the file at `path` (as seen through `open`, e.g.
    /// /proc/<pid>/map_files/...), built on first use.
    fn module(&mut self, open: &Path) -> Result<(FileId, Arc<ModuleTable>)> {
        if open == Path::new(vdso::PATH) {
            return self.vdso();
        }
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

    /// The vDSO's table: the same image in every process (`process::vdso`),
    /// so one table, under an identity no file on disk has.
    fn vdso(&mut self) -> Result<(FileId, Arc<ModuleTable>)> {
        let image = vdso::image().context("the vDSO could not be read")?;
        let id = FileId {
            dev: u64::MAX,
            ino: u64::MAX,
            size: image.len() as u64,
            mtime: 0,
        };
        if let Some(t) = self.modules.get(&id) {
            return Ok((id, t.clone()));
        }
        let t = Arc::new(module_of(image).context("parse the vDSO")?);
        self.modules.insert(id.clone(), t.clone());
        Ok((id, t))
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
            let (id, table) = match self.module(&open) {
                Ok(x) => x,
                Err(e) => {
                    self.note_missing(path, format!("{e:#}"));
                    continue;
                }
            };
            if table.rows.is_empty() {
                self.note_missing(path, "no .eh_frame or .gopclntab rows".into());
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
        let mut n = Sizes::default();
        for pm in maps {
            for m in pm.mappings.iter().filter(|m| has_code_table(m)) {
                if let Ok((id, t)) = self.module(&open_of(pm, m)) {
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

/// Executable mappings whose code has a table: those of files, and the
/// vDSO (its `.eh_frame` takes a stack out of a system call the vDSO made).
fn has_code_table(m: &crate::process::maps::Mapping) -> bool {
    m.is_exec() && (m.is_file_backed() || m.path.as_deref() == Some(vdso::PATH))
}

/// What to open for a mapping's table: the mapped file, or the vDSO.
fn open_of(maps: &ProcMaps, m: &crate::process::maps::Mapping) -> std::path::PathBuf {
    match m.path.as_deref() {
        Some(vdso::PATH) => std::path::PathBuf::from(vdso::PATH),
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
fn segment_bias(exec_segments: &[(u64, u64, u64)], start: u64, offset: u64) -> Option<u64> {
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

fn exec_segments(file: &object::File<'_>) -> Vec<(u64, u64, u64)> {
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
    module_of(&data).with_context(|| format!("parse {}", path.display()))
}

/// [`build_module`] of a module's bytes (any bytes: a target's file is
/// untrusted input).
pub fn module_of(data: &[u8]) -> Result<ModuleTable> {
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
    // Go code (`ModuleKind::Go`: a .gopclntab) has no .eh_frame; its rows
    // come from the pcsp tables (C code linked in with cgo keeps its
    // .eh_frame rows above).
    if let Some(go) = GoTable::parse(data)? {
        raw.extend(go_rows(&go, data, &segments));
    }
    // Code no row covers. In musl's C library (its libc.a is built
    // without unwind tables, and a static musl program carries its malloc,
    // memcpy and syscall wrappers so) it is C code entered by calls that
    // keeps rbp as the ABI says, which the stack height analysis of its
    // machine code follows: its thread and process entry functions end a
    // stack (they are the outermost frames, as glibc's .eh_frame says of
    // its own), its signal return trampoline and clone are no frames of a
    // caller's, and every other function gets rows wherever its height is
    // known. Code without unwind tables anywhere else is of no known
    // convention (V8's builtins, hand-written assembly): only its entries
    // get rows.
    let kind = ElfFacts::parse(data).map(|facts| ModuleKind::of("", &facts));
    if let Ok(
        ModuleKind::StaticC { libc: Libc::Musl } | ModuleKind::CLibrary { libc: Libc::Musl },
    ) = kind
    {
        raw.extend(named_tops(&obj, MUSL_STACK_TOPS));
        raw.extend(analysed_rows(
            &obj,
            data,
            &segments,
            &raw,
            MUSL_NO_FRAME,
            MUSL_RETURNED_INTO,
        ));
    } else {
        raw.extend(entry_rows(&obj, data, &segments, &raw));
    }
    raw.extend(v8_builtin_rows(&obj, data, &segments));
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

/// Rows of every Go function of `go` whose code lies in `segments`
/// (file offset, size, virtual address): CFA = rsp + 8 + the pcsp delta
/// at each pc, the caller's rbp saved at CFA - 16 once the prologue has
/// stored it (Go keeps frame pointers on amd64: `mov %rbp, N-8(%rsp)` after
/// `sub $N, %rsp`, or `push %rbp; mov %rsp, %rbp`). The functions Go's
/// own tracebacks start stacks at (`runtime::GO_STACK_TOPS`) end the walk.
fn go_rows(go: &GoTable, data: &[u8], segments: &[(u64, u64, u64)]) -> Vec<UnwindRow> {
    let mut out = Vec::new();
    let code_of = |entry: u64, end: u64| -> Option<&[u8]> {
        let &(off, size, vaddr) = segments
            .iter()
            .find(|&&(_, size, vaddr)| vaddr <= entry && end <= vaddr + size)?;
        let _ = size;
        let from = usize::try_from(off + (entry - vaddr)).ok()?;
        let to = usize::try_from(off + (end - vaddr)).ok()?;
        data.get(from..to)
    };
    for f in &go.funcs {
        if f.entry >= f.end {
            continue;
        }
        let Some(code) = code_of(f.entry, f.end) else {
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
            for at in go_cgo_calls(code) {
                let pc = f.entry + at as u64;
                out.push(marker(pc, unwind_cfa::GO_CGO));
                out.push(marker(pc + 2, unwind_cfa::END));
            }
            out.push(marker(f.end, unwind_cfa::NONE));
            continue;
        }
        if GO_STACK_TOPS.contains(&f.name.as_str()) {
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
                    ..Default::default()
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
        let switched = (f.name == "runtime.cgocallback")
            .then(|| go_callback_switch(code))
            .flatten()
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

/// A row with a rule that needs no offsets (`END`, `NONE`, `GO_CGO`).
fn marker(pc: u64, cfa: u8) -> UnwindRow {
    UnwindRow {
        pc,
        cfa,
        ..Default::default()
    }
}

/// Offsets of runtime.asmcgocall's calls of the C function in its body
/// (asm_amd64.s since Go 1.5): `MOVQ BX, DI; MOVQ BX, CX; CALL AX`, after
/// the body has stored the goroutine's g (or 0) at 48(SP) and its depth
/// (or its entry rsp) at 40(SP), which `UNWIND_CFA_GO_CGO` reads. None
/// when the body does not store them so (another layout: the walk ends
/// there, as before).
fn go_cgo_calls(code: &[u8]) -> Vec<usize> {
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
fn go_callback_switch(code: &[u8]) -> Option<(usize, usize)> {
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

/// Functions of musl that start a stack: a thread's (`start`,
/// `start_c11` in pthread_create.c, called by `__clone`) and the process's
/// (`libc_start_main_stage2` calls main; `_start_c`, `__libc_start_main`).
const MUSL_STACK_TOPS: &[&str] = &[
    "start",
    "start_c11",
    "libc_start_main_stage2",
    "__libc_start_main",
    "_start_c",
];

/// Functions of musl where rsp holds no frame of a caller's: they get no
/// rows, and a stack taken in them ends there, marked. A signal handler
/// returns into `__restore_rt` (src/signal/x86_64/restore.s) with the
/// signal frame at rsp; past `__clone`'s clone syscall
/// (src/thread/x86_64/clone.s) the child runs the same instructions on
/// its new stack.
const MUSL_NO_FRAME: &[&str] = &["__restore_rt", "__clone"];

/// Of those, the ones entered by a return (a handler's into
/// `__restore_rt`): the walk looks up the byte before such a return
/// address, which gets no row either.
const MUSL_RETURNED_INTO: &[&str] = &["__restore_rt"];

/// Rows for every function symbol no row covers, from the stack height
/// analysis of its machine code (`height::height_rows`), up to its size or,
/// when it has none (hand-written assembly: musl's memcpy), the next
/// symbol or row. `no_frame`: functions that get no rows;
/// `returned_into`: those the byte before which gets none either.
fn analysed_rows(
    obj: &object::File<'_>,
    data: &[u8],
    segments: &[(u64, u64, u64)],
    rows: &[UnwindRow],
    no_frame: &[&str],
    returned_into: &[&str],
) -> Vec<UnwindRow> {
    use object::{ObjectSymbol, SymbolKind};
    // Longer than any function of musl's, short enough that a sizeless
    // symbol at the end of the text is not read as megabytes of code.
    const MAX_SIZELESS: u64 = 1 << 16;
    let mut starts: Vec<u64> = rows.iter().map(|r| r.pc).collect();
    let mut funcs: Vec<(u64, u64)> = Vec::new();
    let mut skip: Vec<u64> = Vec::new();
    for s in obj.symbols().chain(obj.dynamic_symbols()) {
        if s.kind() != SymbolKind::Text || !s.is_definition() || s.address() == 0 {
            continue;
        }
        starts.push(s.address());
        let name = s.name().unwrap_or("");
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
fn covered_by(rows: &[UnwindRow]) -> impl Fn(u64) -> bool {
    let table = compact(rows.to_vec());
    move |pc: u64| {
        let i = table.partition_point(|r| r.pc <= pc);
        i > 0 && table[i - 1].cfa != unwind_cfa::NONE
    }
}

/// The process's entry point (an executable's `_start`, `e_entry`) is the
/// outermost frame of its first thread, whatever its unwind tables say or
/// leave out: END from it to the end of its first call (the call of
/// `__libc_start_main` or musl's `_start_c`, which never returns; the walk
/// looks up a return address's call instruction), replacing any row in
/// between. Entry code that jumps (Go's `_rt0_amd64_linux`) or makes no
/// call in its first 64 bytes gets none. Shared libraries (a DT_SONAME) are
/// left alone: libc.so.6's entry point is a program of its own that prints
/// its version, never in a server's stack.
fn entry_point_rows(
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
fn has_soname(obj: &object::File<'_>) -> bool {
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
fn named_tops(obj: &object::File<'_>, names: &[&str]) -> Vec<UnwindRow> {
    use object::{ObjectSymbol, SymbolKind};
    let mut out = Vec::new();
    for s in obj.symbols() {
        if s.kind() == SymbolKind::Text
            && s.is_definition()
            && s.size() > 0
            && s.name().is_ok_and(|n| names.contains(&n))
        {
            out.push(UnwindRow {
                pc: s.address(),
                cfa: unwind_cfa::END,
                ..Default::default()
            });
            out.push(UnwindRow {
                pc: s.address() + s.size(),
                cfa: unwind_cfa::NONE,
                ..Default::default()
            });
        }
    }
    out
}

/// Rows for the entry of every function symbol that no other row covers
/// in code of no known convention (hand-written assembly, code generated
/// at build time; musl's gets `analysed_rows` instead): from the first
/// instruction up
/// to the first that moves the stack pointer or leaves the straight line,
/// the return address is at rsp (CFA = rsp + 8, rbp unchanged), so a stack
/// taken by an entry probe there is whole. Past that, no rule.
fn entry_rows(
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
        // Sizeless ones too: hand-written assembly (musl's memcpy) has no size.
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
        out.push(UnwindRow {
            pc: end,
            cfa: unwind_cfa::NONE,
            ..Default::default()
        });
    }
    out
}

/// Rows for V8's embedded builtins (`Builtins_*` in node's `.text`:
/// machine code V8 generated at build time, with no `.eh_frame`). V8 walks
/// its own stacks by frame pointer alone, so every builtin that calls out
/// has set up a standard frame first: from just past its `push %rbp; mov
/// %rsp,%rbp` (within the first 256 bytes) to its end, CFA = rbp + 16, the
/// caller's rbp saved at CFA - 16. A walk through them reaches the
/// JavaScript frames that called them. Before that point the entry rows
/// apply; a builtin without that prologue keeps no rule.
fn v8_builtin_rows(
    obj: &object::File<'_>,
    data: &[u8],
    segments: &[(u64, u64, u64)],
) -> Vec<UnwindRow> {
    use object::{ObjectSymbol, SymbolKind};
    const PROLOGUE: [u8; 4] = [0x55, 0x48, 0x89, 0xe5];
    let mut out = Vec::new();
    for sym in obj.symbols() {
        if sym.kind() != SymbolKind::Text
            || !sym.is_definition()
            || sym.size() == 0
            || !sym.name().is_ok_and(|n| n.starts_with("Builtins_"))
        {
            continue;
        }
        let (start, end) = (sym.address(), sym.address() + sym.size());
        let Some(&(off, _, vaddr)) = segments
            .iter()
            .find(|&&(_, size, vaddr)| vaddr <= start && end <= vaddr + size)
        else {
            continue;
        };
        let from = (off + (start - vaddr)) as usize;
        let Some(code) = data.get(from..from + (sym.size().min(256) as usize)) else {
            continue;
        };
        let Some(at) = code.windows(PROLOGUE.len()).position(|w| w == PROLOGUE) else {
            continue;
        };
        out.push(UnwindRow {
            pc: start + (at + PROLOGUE.len()) as u64,
            cfa: unwind_cfa::RBP,
            cfa_off: 16,
            rbp_off: -16,
            ..Default::default()
        });
        out.push(UnwindRow {
            pc: end,
            cfa: unwind_cfa::NONE,
            ..Default::default()
        });
    }
    out
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

/// The most code addresses one module's rows may span: far beyond any real
/// module, small enough that its bucket index is allocated, not an abort.
const MAX_CODE_SPAN: u64 = 4 << 30;

/// Rows of every FDE of `section` that covers code in `code` (module
/// address ranges of the executable segments): a pc outside them is never
/// looked up, and a bogus FDE would only stretch the bucket index.
fn rows_of(
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

/// A module's table of raw rows (from any source, in any order).
fn table_of(raw: Vec<UnwindRow>) -> Result<ModuleTable> {
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

#[path = "unwind_height.rs"]
mod height;

#[cfg(test)]
#[path = "unwind_tests.rs"]
mod tests;
