//! Go's own tables: the version in `.go.buildinfo` and the function table
//! in `.gopclntab`, which every Go binary keeps, stripped or not
//! (`-ldflags=-s -w` removes `.symtab` and DWARF, never these: the runtime
//! needs them for its own tracebacks and garbage collector).
//!
//! In: a module's bytes. Out: a [`GoTable`]: every function's name, entry
//! and end, and its pc-value tables: file and line per pc (`pcfile`,
//! `pcln`) and the stack pointer's distance from the function's entry per
//! pc (`pcsp`), which is what unwinding a Go frame needs: Go code has no
//! `.eh_frame`, and its pcsp is exact at every instruction.
//!
//! Layout (Go 1.18 and later; `src/runtime/symtab.go`, `runtime2.go`
//! `_func`): a header (`pcHeader`), then, at offsets the header gives, the
//! function names, the compilation-unit file indices, the file names, the
//! pc-value tables and the function table (`{entryoff, funcoff}` pairs of
//! u32, `entryoff` from the header's `textStart`). Older layouts (Go 1.2 to
//! 1.17) are refused with the version, never guessed.
//!
//! Inlined calls: each function's `pcdata[PCDATA_InlTreeIndex]` says, per
//! pc, which entry of its inline tree (`funcdata[FUNCDATA_InlTree]`, an
//! offset from `go:func.*`) the instruction belongs to; each entry names
//! the inlined function and the pc of its call site in the caller. Where
//! `go:func.*` lies is said only by `runtime.firstmoduledata`, found by the
//! pointer to `.gopclntab` it starts with (a stripped binary has no symbol
//! for it). Without it an inlined body is named by the function it was
//! inlined into.
//!
//! A PIE (`-buildmode=pie`): the table is `.data.rel.ro.gopclntab` up to Go
//! 1.25 (relocated data), `.gopclntab` from 1.26; the pointers in its
//! header and in `runtime.firstmoduledata` are relocated by the loader
//! (`R_X86_64_RELATIVE`: the word becomes load base + addend), so the file
//! holds their link-time values only as the relocations' addends: every
//! pointer is read through [`Pointers`].

use std::collections::HashMap;

use anyhow::{anyhow, bail, Context, Result};
use object::{Object, ObjectSection, ObjectSymbol};

/// `pcHeader.magic` of the layouts read here.
const MAGIC_118: u32 = 0xffff_fff0;
const MAGIC_120: u32 = 0xffff_fff1;

/// The Go version a binary was built with (`go1.19.8` is 1.19).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct GoVersion {
    pub major: u32,
    pub minor: u32,
}

impl std::fmt::Display for GoVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "go{}.{}", self.major, self.minor)
    }
}

impl GoVersion {
    /// `go1.19.8`, `go1.21rc2`, `devel go1.22-abc...`: the major and minor
    /// numbers.
    pub fn parse(s: &str) -> Option<GoVersion> {
        let at = s.find("go1.")?;
        let rest = &s[at + 2..];
        let mut parts = rest.splitn(2, '.');
        let major = parts.next()?.parse().ok()?;
        let minor: String = parts
            .next()?
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        Some(GoVersion {
            major,
            minor: minor.parse().ok()?,
        })
    }

    /// Whether amd64 Go code of this version passes arguments in registers
    /// (the register ABI, Go 1.17 on: the first integer argument in RAX).
    pub fn register_abi(self) -> bool {
        (self.major, self.minor) >= (1, 17)
    }
}

/// The version string of a Go binary's `.go.buildinfo` (Go 1.18 and later
/// write it inline: 16 bytes of header, flags bit 1, then varint-prefixed
/// strings; older ones hold pointers, which are read through the segment
/// they point into).
pub fn build_version(data: &[u8]) -> Option<String> {
    let obj = object::File::parse(data).ok()?;
    let sec = obj.section_by_name(".go.buildinfo")?;
    let d = sec.data().ok()?;
    if d.len() < 32 || &d[..14] != b"\xff Go buildinf:" {
        return None;
    }
    let ptr_size = d[14] as usize;
    let flags = d[15];
    if flags & 2 != 0 {
        let (len, n) = uvarint(&d[32..])?;
        let s = d.get(32 + n..32 + n + len as usize)?;
        return Some(String::from_utf8_lossy(s).into_owned());
    }
    // Pointer format: a pointer to a Go string header {ptr, len}.
    if ptr_size != 8 {
        return None;
    }
    let read = |vaddr: u64, n: usize| -> Option<&[u8]> {
        obj.sections().find_map(|s| {
            let (a, sz) = (s.address(), s.size());
            (a <= vaddr && vaddr + n as u64 <= a + sz)
                .then(|| s.data().ok())
                .flatten()
                .and_then(|b| b.get((vaddr - a) as usize..(vaddr - a) as usize + n))
        })
    };
    let hdr = u64::from_le_bytes(d[16..24].try_into().ok()?);
    let sh = read(hdr, 16)?;
    let p = u64::from_le_bytes(sh[..8].try_into().ok()?);
    let len = u64::from_le_bytes(sh[8..16].try_into().ok()?);
    let s = read(p, usize::try_from(len).ok().filter(|&l| l < 256)?)?;
    Some(String::from_utf8_lossy(s).into_owned())
}

/// One Go function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFunc {
    pub name: String,
    /// Link-time address of its first instruction.
    pub entry: u64,
    /// The next function's entry (the end of this one's code).
    pub end: u64,
    /// Offsets in the pc-value area of its tables (0: none).
    pcsp: u32,
    pcfile: u32,
    pcln: u32,
    cu_offset: u32,
    /// The runtime's `funcID` (0 for ordinary functions).
    pub func_id: u8,
    /// Its `pcdata[PCDATA_InlTreeIndex]` (0: none) and
    /// `funcdata[FUNCDATA_InlTree]` (offset from `go:func.*`; `u32::MAX`:
    /// none).
    pcinl: u32,
    inltree: u32,
}

/// One frame at an address: a function, and the source position in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GoFrame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// A Go binary's function table.
#[derive(Clone, Debug)]
pub struct GoTable {
    pub version: Option<GoVersion>,
    /// Sorted by entry.
    pub funcs: Vec<GoFunc>,
    /// The pc-value tables (`pctab`), the file names (`filetab`) and the
    /// compilation units' file indices (`cutab`), copied out of the file.
    pctab: Vec<u8>,
    filetab: Vec<u8>,
    cutab: Vec<u8>,
    /// Instruction size quantum (1 on x86).
    quantum: u64,
    /// The function names (`funcnametab`), which inline trees name into.
    funcnames: Vec<u8>,
    /// The bytes from `go:func.*` to the end of its section, where the
    /// inline trees are (empty when it was not found), and the size of one
    /// tree entry (`runtime.inlinedCall`: 20 bytes before Go 1.20, 16 on).
    gofunc: Vec<u8>,
    inlined_call: usize,
}

/// `PCDATA_InlTreeIndex`, `FUNCDATA_InlTree` (`cmd/internal/objabi`).
const PCDATA_INL_TREE_INDEX: u32 = 2;
const FUNCDATA_INL_TREE: u32 = 3;

/// The offset of `gofunc` in `runtime.moduledata`: after the pcHeader
/// pointer, six slices, findfunctab, minpc, maxpc and ten section bounds,
/// then (Go 1.20 on) covctrs/ecovctrs, then end, gcdata, gcbss, types,
/// (Go 1.27 on: typedesclen) etypes, (1.27 on: itaboffset, itabsize) and
/// rodata (`src/runtime/symtab.go`). A table of the 1.20 layout whose
/// version is unknown gets both offsets tried.
fn moduledata_gofunc_at(magic: u32, version: Option<GoVersion>) -> &'static [usize] {
    if magic != MAGIC_120 {
        return &[304];
    }
    match version {
        Some(v) if (v.major, v.minor) >= (1, 27) => &[344],
        Some(_) => &[320],
        None => &[320, 344],
    }
}

/// The bytes from `go:func.*` to the end of its section: `moduledata` is
/// the 8-aligned word in a data section equal to `.gopclntab`'s address
/// and followed by `funcnametab`'s (the header's offset past it), as the
/// runtime's own table reads; its `rodata` (the word before `gofunc`) must
/// start the section `gofunc` lies in. None when no such word is found.
fn gofunc_bytes(
    obj: &object::File<'_>,
    pointers: &Pointers,
    pclntab: u64,
    funcname: u64,
    magic: u32,
    version: Option<GoVersion>,
) -> Option<Vec<u8>> {
    moduledata_gofunc_at(magic, version)
        .iter()
        .find_map(|&at| gofunc_bytes_at(obj, pointers, pclntab, funcname, at))
}

fn gofunc_bytes_at(
    obj: &object::File<'_>,
    pointers: &Pointers,
    pclntab: u64,
    funcname: u64,
    at: usize,
) -> Option<Vec<u8>> {
    for sec in obj.sections() {
        if !matches!(
            sec.name(),
            Ok(".noptrdata" | ".data" | ".data.rel.ro" | ".go.module")
        ) {
            continue;
        }
        let Ok(d) = sec.data() else { continue };
        let word = |o: usize| {
            d.get(o..o + 8).map(|b| {
                pointers.at(
                    sec.address() + o as u64,
                    u64::from_le_bytes(b.try_into().unwrap()),
                )
            })
        };
        let mut o = 0;
        while o + at + 8 <= d.len() {
            if word(o) == Some(pclntab) && word(o + 8) == pclntab.checked_add(funcname) {
                let gofunc = word(o + at)?;
                let rodata = word(o + at - 8)?;
                let home = obj.sections().find(|s| {
                    s.address() <= gofunc
                        && s.address()
                            .checked_add(s.size())
                            .is_some_and(|end| gofunc < end)
                })?;
                // Up to Go 1.25 `go:func.*` is in the read-only data that
                // `rodata` starts; from 1.26 in the function table's
                // section (`.gopclntab`), or one of its own (`.go.func`).
                let own = matches!(home.name(), Ok(".gopclntab" | ".go.func"));
                if home.address() != rodata && !own {
                    return None;
                }
                let data = home.data().ok()?;
                return data
                    .get(usize::try_from(gofunc - home.address()).ok()?..)
                    .map(<[u8]>::to_vec);
            }
            o += 8;
        }
    }
    None
}

/// The link-time value of each word a PIE's loader relocates
/// (`R_X86_64_RELATIVE`, by its address): the file's bytes there are not
/// the pointer (Go's linker leaves 0). Empty for an executable that is not
/// position-independent.
pub(crate) struct Pointers(HashMap<u64, u64>);

impl Pointers {
    pub(crate) fn of(obj: &object::File<'_>) -> Pointers {
        let mut relative = HashMap::new();
        if let Some(relocs) = obj.dynamic_relocations() {
            for (at, r) in relocs {
                if r.flags()
                    == (object::RelocationFlags::Elf {
                        r_type: object::elf::R_X86_64_RELATIVE,
                    })
                {
                    relative.insert(at, r.addend() as u64);
                }
            }
        }
        Pointers(relative)
    }

    /// The pointer stored at link-time address `vaddr`, whose bytes in the
    /// file are `raw`.
    pub(crate) fn at(&self, vaddr: u64, raw: u64) -> u64 {
        self.0.get(&vaddr).copied().unwrap_or(raw)
    }
}

/// The function table's section: `.gopclntab`, or `.data.rel.ro.gopclntab`
/// in a PIE built by Go up to 1.25, or the bytes from `runtime.pclntab`
/// where a linker merged it into another section.
fn pclntab<'d>(obj: &object::File<'d>) -> Option<(u64, &'d [u8])> {
    for name in [".gopclntab", ".data.rel.ro.gopclntab"] {
        if let Some(sec) = obj.section_by_name(name) {
            return Some((sec.address(), sec.data().ok()?));
        }
    }
    let sym = obj.symbols().find(|s| s.name() == Ok("runtime.pclntab"))?;
    let sec = obj.section_by_index(sym.section_index()?).ok()?;
    let d = sec.data().ok()?;
    let from = usize::try_from(sym.address().checked_sub(sec.address())?).ok()?;
    Some((sym.address(), d.get(from..)?))
}

fn u32_at(d: &[u8], off: usize) -> Result<u32> {
    d.get(off..off + 4)
        .map(|b| u32::from_le_bytes(b.try_into().unwrap()))
        .ok_or_else(|| anyhow!("offset {off:#x} past the end of .gopclntab"))
}

fn u64_at(d: &[u8], off: usize) -> Result<u64> {
    d.get(off..off + 8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap()))
        .ok_or_else(|| anyhow!("offset {off:#x} past the end of .gopclntab"))
}

fn cstr(d: &[u8], off: usize) -> Option<&str> {
    let s = d.get(off..)?;
    let end = s.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&s[..end]).ok()
}

fn uvarint(d: &[u8]) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for (i, &b) in d.iter().enumerate().take(10) {
        v |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

impl GoTable {
    /// The table of a module's bytes: `Ok(None)` for a module that is no Go
    /// binary (no `.gopclntab`), an error for one whose table rig cannot
    /// read (its layout is older than Go 1.18, or it is corrupt).
    pub fn parse(data: &[u8]) -> Result<Option<GoTable>> {
        let obj = object::File::parse(data)?;
        let Some((pclntab_at, d)) = pclntab(&obj) else {
            return Ok(None);
        };
        let pointers = Pointers::of(&obj);
        let version = build_version(data).as_deref().and_then(GoVersion::parse);
        let magic = u32_at(d, 0)?;
        if magic != MAGIC_118 && magic != MAGIC_120 {
            bail!(
                "its .gopclntab has magic {magic:#x}, a layout older than Go 1.18 ({}): \
                 rig reads Go 1.18 and later",
                version.map_or("version unknown".to_string(), |v| v.to_string())
            );
        }
        let quantum = u64::from(*d.get(6).context("short .gopclntab header")?);
        if d.get(7) != Some(&8) {
            bail!("a .gopclntab for pointers of other than 8 bytes");
        }
        let word = |i: usize| u64_at(d, 8 + 8 * i);
        let nfunc = word(0)? as usize;
        // pcHeader's textStart (relocated in a PIE up to Go 1.25); Go 1.26
        // stores 0 there and reads moduledata.text instead, which Go's
        // linker places at the start of `.text` (`runtime.text`).
        let text_start = match pointers.at(pclntab_at + 24, word(2)?) {
            0 => obj
                .section_by_name(".text")
                .map(|t| t.address())
                .ok_or_else(|| anyhow!("a .gopclntab without textStart and no .text"))?,
            t => t,
        };
        let (funcname, cu, filetab, pctab, pcln) = (
            word(3)? as usize,
            word(4)? as usize,
            word(5)? as usize,
            word(6)? as usize,
            word(7)? as usize,
        );
        let section = |from: usize, to: usize| -> Result<Vec<u8>> {
            d.get(from..to.max(from))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| anyhow!(".gopclntab offsets {from:#x}..{to:#x} out of bounds"))
        };
        let ordered = [funcname, cu, filetab, pctab, pcln];
        if ordered.windows(2).any(|w| w[0] > w[1]) || pcln > d.len() {
            bail!(".gopclntab header offsets out of order");
        }
        let functab = d
            .get(pcln..)
            .ok_or_else(|| anyhow!("functab out of bounds"))?;
        // _func's fixed fields (40 bytes, 44 from Go 1.20 on; the last one
        // is nfuncdata), then npcdata u32 pcdata offsets, then nfuncdata u32
        // funcdata offsets.
        let fixed = if magic == MAGIC_120 { 44 } else { 40 };
        if nfunc > functab.len() / 8 {
            bail!(".gopclntab claims {nfunc} functions, more than it holds");
        }
        let mut funcs = Vec::with_capacity(nfunc);
        for i in 0..nfunc {
            let entry_off = u32_at(functab, 8 * i)?;
            let func_off = u32_at(functab, 8 * i + 4)? as usize;
            let next_entry = u32_at(functab, 8 * i + 8)?;
            // _func: entryOff u32, nameOff i32, args i32, deferreturn u32,
            // pcsp u32, pcfile u32, pcln u32, npcdata u32, cuOffset u32,
            // [startLine i32: Go 1.20 on], funcID u8, flag u8, _ u8,
            // nfuncdata u8.
            let f = func_off;
            let name_off = u32_at(functab, f + 4)? as usize;
            let id_at = if magic == MAGIC_120 { f + 40 } else { f + 36 };
            let name = cstr(d, funcname + name_off)
                .ok_or_else(|| anyhow!("function {i}'s name out of bounds"))?
                .to_string();
            let npcdata = u32_at(functab, f + 28)?;
            let nfuncdata = u32::from(*functab.get(id_at + 3).context("_func out of bounds")?);
            let pcinl = if npcdata > PCDATA_INL_TREE_INDEX {
                u32_at(functab, f + fixed + 4 * PCDATA_INL_TREE_INDEX as usize)?
            } else {
                0
            };
            let inltree = if nfuncdata > FUNCDATA_INL_TREE {
                u32_at(
                    functab,
                    f + fixed + 4 * (npcdata as usize + FUNCDATA_INL_TREE as usize),
                )?
            } else {
                u32::MAX
            };
            funcs.push(GoFunc {
                name,
                entry: text_start + u64::from(entry_off),
                end: text_start + u64::from(next_entry),
                pcsp: u32_at(functab, f + 16)?,
                pcfile: u32_at(functab, f + 20)?,
                pcln: u32_at(functab, f + 24)?,
                cu_offset: u32_at(functab, f + 32)?,
                func_id: *functab.get(id_at).context("_func out of bounds")?,
                pcinl,
                inltree,
            });
        }
        funcs.sort_by_key(|f| f.entry);
        let gofunc = gofunc_bytes(&obj, &pointers, pclntab_at, funcname as u64, magic, version)
            .unwrap_or_default();
        Ok(Some(GoTable {
            version,
            funcs,
            pctab: section(pctab, pcln)?,
            filetab: section(filetab, pctab)?,
            cutab: section(cu, filetab)?,
            quantum: quantum.max(1),
            funcnames: section(funcname, cu)?,
            gofunc,
            inlined_call: if magic == MAGIC_120 { 16 } else { 20 },
        }))
    }

    /// The frames at link-time address `vaddr` in `f`, innermost first: the
    /// functions inlined there (each with its source position: the
    /// instruction's in the innermost, its call site of the next inner one
    /// in the others), then `f` itself with its position (the call site of
    /// the outermost inlined call, or the instruction's).
    pub fn frames_at(&self, f: &GoFunc, vaddr: u64) -> Vec<GoFrame> {
        let frame = |function: &str, at: u64| {
            let (file, line) = match self.line_at(f, at) {
                Some((file, line)) => (Some(file), Some(line)),
                None => (None, None),
            };
            GoFrame {
                function: function.to_string(),
                file,
                line,
            }
        };
        let mut out = Vec::new();
        let mut at = vaddr;
        // An inline tree is as deep as the compiler's inlining budget
        // allows; the bound only stops a corrupt table's cycle.
        for _ in 0..64 {
            if f.pcinl == 0 || f.inltree == u32::MAX || self.gofunc.is_empty() {
                break;
            }
            let Some(ix) = self.value_at(f, f.pcinl, at) else {
                break;
            };
            let Ok(ix) = usize::try_from(ix) else {
                break; // -1: not inlined code
            };
            let Some(e) = ix
                .checked_mul(self.inlined_call)
                .and_then(|o| o.checked_add(f.inltree as usize))
                .and_then(|o| self.gofunc.get(o..o.checked_add(self.inlined_call)?))
            else {
                break;
            };
            // Go 1.20 on: funcID u8, pad [3], nameOff i32, parentPc i32,
            // startLine i32. Before: parent i16, funcID u8, pad u8, file
            // i32, line i32, func_ i32, parentPc i32.
            let (name_at, parent_at) = if self.inlined_call == 16 {
                (4, 8)
            } else {
                (12, 16)
            };
            let word = |o: usize| u32::from_le_bytes(e[o..o + 4].try_into().unwrap());
            let Some(name) = cstr(&self.funcnames, word(name_at) as usize) else {
                break;
            };
            let Some(parent) = f.entry.checked_add(u64::from(word(parent_at))) else {
                break;
            };
            if parent >= f.end {
                break;
            }
            out.push(frame(name, at));
            at = parent;
        }
        out.push(frame(&f.name, at));
        out
    }

    /// The function whose code holds link-time address `vaddr`.
    pub fn func_at(&self, vaddr: u64) -> Option<&GoFunc> {
        let i = self.funcs.partition_point(|f| f.entry <= vaddr);
        let f = self.funcs.get(i.checked_sub(1)?)?;
        (vaddr < f.end).then_some(f)
    }

    /// Every function, by entry.
    pub fn funcs(&self) -> impl Iterator<Item = &GoFunc> {
        self.funcs.iter()
    }

    /// The function named `name`.
    pub fn find(&self, name: &str) -> Option<&GoFunc> {
        self.funcs.iter().find(|f| f.name == name)
    }

    /// The (pc, value) steps of one pc-value table: each value holds from
    /// its pc up to the next step's pc; the last step ends at `f.end`.
    fn steps(&self, f: &GoFunc, table: u32) -> Vec<(u64, i64)> {
        let mut out = Vec::new();
        if table == 0 {
            return out;
        }
        let mut p = match self.pctab.get(table as usize..) {
            Some(p) => p,
            None => return out,
        };
        let (mut pc, mut val) = (f.entry, -1i64);
        let mut first = true;
        while !p.is_empty() && pc < f.end {
            let Some((uv, n)) = uvarint(p) else { break };
            if uv == 0 && !first {
                break;
            }
            first = false;
            p = &p[n..];
            // zig-zag: 0, -1, 1, -2, ...
            val += ((uv >> 1) as i64) ^ -((uv & 1) as i64);
            let Some((dpc, n)) = uvarint(p) else { break };
            p = &p[n..];
            out.push((pc, val));
            pc = pc.saturating_add(dpc * self.quantum);
        }
        out
    }

    fn value_at(&self, f: &GoFunc, table: u32, vaddr: u64) -> Option<i64> {
        self.steps(f, table)
            .into_iter()
            .take_while(|(pc, _)| *pc <= vaddr)
            .last()
            .map(|(_, v)| v)
    }

    /// Source file and line of the instruction at `vaddr` in `f`.
    pub fn line_at(&self, f: &GoFunc, vaddr: u64) -> Option<(String, u32)> {
        let line = self.value_at(f, f.pcln, vaddr)?;
        let file = self.value_at(f, f.pcfile, vaddr)?;
        let idx = usize::try_from(i64::from(f.cu_offset) + file).ok()?;
        let file_off = u32_at(&self.cutab, 4 * idx).ok()?;
        let name = cstr(&self.filetab, file_off as usize)?;
        Some((name.to_string(), u32::try_from(line).ok()?))
    }

    /// How far the stack pointer is below its value at `f`'s entry, per pc:
    /// (pc, bytes) steps, as [`GoTable::steps`].
    pub fn sp_deltas(&self, f: &GoFunc) -> Vec<(u64, i64)> {
        self.steps(f, f.pcsp)
    }
}

#[cfg(test)]
#[path = "gopclntab_tests.rs"]
mod tests;
