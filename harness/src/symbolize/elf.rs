//! ELF facts for attaching probes and naming PLT stubs (x86_64).
//!
//! - symbol lookup by name (`.dynsym` + `.symtab`) with file offsets for uprobes,
//! - relocations and PLT stub decoding (`.plt`, `.plt.sec`, `.plt.got`),
//! - IFUNC resolution from the live target's GOT (`resolve_ifunc`).

use std::collections::HashMap;
use std::os::unix::fs::FileExt;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use object::elf;
use object::read::elf::{
    ElfFile64, FileHeader as _, ProgramHeader as _, SectionHeader as _, Sym as _,
};
use object::read::SymbolIndex;
use object::Endianness;
use serde::Serialize;

use crate::process::maps::ProcMaps;

/// A symbol found by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SymbolInfo {
    pub name: String,
    pub vaddr: u64,
    pub size: u64,
    /// Offset in the file (what uprobes want).
    pub file_offset: u64,
    /// `STT_GNU_IFUNC`: `vaddr` is the *resolver*, not the implementation.
    pub is_ifunc: bool,
}

/// An IFUNC resolved to the implementation the target really runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ResolvedImpl {
    pub api: String,
    /// Library path as in maps.
    pub lib: String,
    /// File offset of the implementation in `lib` (compare these across apis:
    /// memcpy and memmove usually share one implementation).
    pub file_offset: u64,
    /// Link-time virtual address of the implementation in `lib`.
    pub vaddr: u64,
    /// Implementation name from the symbolizer (debug info), e.g.
    /// `__memmove_avx_unaligned_erms`.
    pub impl_name: Option<String>,
    /// How it was resolved.
    pub method: String,
}

/// One symbol table entry (owned).
#[derive(Debug, Clone)]
pub(crate) struct ElfSym {
    pub name: String,
    pub vaddr: u64,
    pub size: u64,
    pub st_type: u8,
    pub bind: u8,
    pub shndx: u16,
    /// Version is hidden (`sym@VER`, not the default `sym@@VER`).
    pub hidden: bool,
    pub dynamic: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct SectionFact {
    pub name: String,
    pub sh_type: u32,
    pub addr: u64,
    pub offset: u64,
    pub size: u64,
    pub entsize: u64,
}

#[derive(Debug, Clone, Copy)]
#[allow(dead_code)]
pub(crate) struct LoadSeg {
    pub vaddr: u64,
    pub offset: u64,
    pub filesz: u64,
    pub memsz: u64,
}

/// A dynamic relocation.
#[derive(Debug, Clone)]
pub(crate) struct Reloc {
    /// Section the relocation came from (`.rela.dyn`, `.rela.plt`).
    pub section: String,
    pub offset: u64,
    pub r_type: u32,
    /// Name of the referenced dynamic symbol, if any.
    pub sym: Option<String>,
    pub addend: i64,
}

/// A decoded PLT stub.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PltStub {
    pub section: String,
    pub vaddr: u64,
    pub size: u64,
    /// Name of the target symbol (`puts`), `[plt0]` for the lazy-binding header.
    pub name: String,
}

/// Everything we need from one ELF file, parsed once.
#[derive(Debug, Clone)]
pub struct ElfFacts {
    pub(crate) sections: Vec<SectionFact>,
    pub(crate) loads: Vec<LoadSeg>,
    pub(crate) syms: Vec<ElfSym>,
    pub(crate) relocs: Vec<Reloc>,
    pub(crate) plt: Vec<PltStub>,
    pub build_id: Option<String>,
}

const R_X86_64_GLOB_DAT: u32 = elf::R_X86_64_GLOB_DAT;
const R_X86_64_JUMP_SLOT: u32 = elf::R_X86_64_JUMP_SLOT;
const R_X86_64_IRELATIVE: u32 = elf::R_X86_64_IRELATIVE;
const R_X86_64_64: u32 = elf::R_X86_64_64;

impl ElfFacts {
    /// `load`, parsed once per file per rig process: attaching probes to
    /// each process of a tree looks up the same libc many times, and a
    /// parse of libc is most of the time a forked worker waits for its
    /// uprobes. Keyed by the file's identity (device, inode, size and
    /// modification time), not its path: each process reaches the same libc
    /// through its own `/proc/<pid>/...` path. A replaced file is parsed anew.
    pub fn shared(path: &Path) -> Result<std::sync::Arc<ElfFacts>> {
        use std::collections::HashMap;
        use std::os::unix::fs::MetadataExt;
        use std::sync::{Arc, Mutex};
        type Key = (u64, u64, u64, i64, i64);
        static CACHE: Mutex<Option<HashMap<Key, Arc<ElfFacts>>>> = Mutex::new(None);
        let m = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        let key = (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec());
        if let Some(f) = CACHE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .get(&key)
        {
            return Ok(f.clone());
        }
        let facts = Arc::new(ElfFacts::load(path)?);
        CACHE
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(key, facts.clone());
        Ok(facts)
    }

    pub fn load(path: &Path) -> Result<ElfFacts> {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::parse(&data).with_context(|| format!("parsing ELF {}", path.display()))
    }

    pub fn parse(data: &[u8]) -> Result<ElfFacts> {
        let file = ElfFile64::<Endianness>::parse(data)?;
        let e = file.endian();
        let hdr = file.elf_header();
        if hdr.e_machine(e) != elf::EM_X86_64 {
            bail!(
                "only x86_64 ELF is supported (e_machine {})",
                hdr.e_machine(e)
            );
        }
        let st = file.elf_section_table();

        let mut sections = Vec::new();
        for (_, sh) in st.enumerate() {
            let name = String::from_utf8_lossy(st.section_name(e, sh).unwrap_or(b"")).into_owned();
            sections.push(SectionFact {
                name,
                sh_type: sh.sh_type(e),
                addr: sh.sh_addr(e),
                offset: sh.sh_offset(e),
                size: sh.sh_size(e),
                entsize: sh.sh_entsize(e),
            });
        }

        let loads = file
            .elf_program_headers()
            .iter()
            .filter(|ph| ph.p_type(e) == elf::PT_LOAD)
            .map(|ph| LoadSeg {
                vaddr: ph.p_vaddr(e),
                offset: ph.p_offset(e),
                filesz: ph.p_filesz(e),
                memsz: ph.p_memsz(e),
            })
            .collect::<Vec<_>>();

        let versions = st.versions(e, data).ok().flatten();
        let mut syms = Vec::new();
        for (table, dynamic) in [
            (file.elf_dynamic_symbol_table(), true),
            (file.elf_symbol_table(), false),
        ] {
            for (idx, s) in table.enumerate() {
                let name = match table.symbol_name(e, s) {
                    Ok(n) if !n.is_empty() => String::from_utf8_lossy(n).into_owned(),
                    _ => continue,
                };
                let hidden = dynamic
                    && versions
                        .as_ref()
                        .map(|v| v.version_index(e, idx).is_hidden())
                        .unwrap_or(false);
                syms.push(ElfSym {
                    name,
                    vaddr: s.st_value(e),
                    size: s.st_size(e),
                    st_type: s.st_type(),
                    bind: s.st_bind(),
                    shndx: s.st_shndx(e),
                    hidden,
                    dynamic,
                });
            }
        }

        // Dynamic relocations (.rela.dyn, .rela.plt): those linked to .dynsym,
        // plus unlinked ones (IRELATIVE-only tables).
        let dynsym = file.elf_dynamic_symbol_table();
        let dynsym_index = dynsym.section();
        let mut relocs = Vec::new();
        for (_, sh) in st.enumerate() {
            if sh.sh_type(e) != elf::SHT_RELA {
                continue;
            }
            let link = sh.sh_link(e) as usize;
            if link != 0 && link != dynsym_index.0 {
                continue; // static relocations of an object file
            }
            let sname = String::from_utf8_lossy(st.section_name(e, sh).unwrap_or(b"")).into_owned();
            let Ok(relas) = sh.data_as_array::<elf::Rela64<Endianness>, _>(e, data) else {
                continue;
            };
            for r in relas {
                let sym_idx = r.r_sym(e, false);
                let sym = if sym_idx == 0 {
                    None
                } else {
                    dynsym
                        .symbol(SymbolIndex(sym_idx as usize))
                        .ok()
                        .and_then(|s| dynsym.symbol_name(e, s).ok())
                        .map(|n| String::from_utf8_lossy(n).into_owned())
                };
                relocs.push(Reloc {
                    section: sname.clone(),
                    offset: r.r_offset.get(e),
                    r_type: r.r_type(e, false),
                    sym,
                    addend: r.r_addend.get(e),
                });
            }
        }

        let build_id = crate::process::maps::build_id_of_data(data);
        let mut facts = ElfFacts {
            sections,
            loads,
            syms,
            relocs,
            plt: Vec::new(),
            build_id,
        };
        facts.plt = facts.decode_plt(data);
        Ok(facts)
    }

    /// First PT_LOAD's vaddr (0 for shared objects and PIEs).
    pub fn first_load_vaddr(&self) -> Option<u64> {
        self.loads.iter().map(|l| l.vaddr).min()
    }

    /// Link-time vaddr -> file offset: via the containing section
    /// (`vaddr - sh_addr + sh_offset`), else the containing PT_LOAD.
    pub fn vaddr_to_file_offset(&self, vaddr: u64) -> Option<u64> {
        for s in &self.sections {
            if s.sh_type != elf::SHT_NOBITS
                && s.addr != 0
                && s.addr <= vaddr
                && vaddr < s.addr + s.size
            {
                return Some(vaddr - s.addr + s.offset);
            }
        }
        self.loads
            .iter()
            .find(|l| l.vaddr <= vaddr && vaddr < l.vaddr + l.filesz)
            .map(|l| vaddr - l.vaddr + l.offset)
    }

    /// File offset -> link-time vaddr via PT_LOAD.
    pub fn file_offset_to_vaddr(&self, off: u64) -> Option<u64> {
        self.loads
            .iter()
            .find(|l| l.offset <= off && off < l.offset + l.filesz)
            .map(|l| off - l.offset + l.vaddr)
    }

    /// Look up a defined symbol by (unversioned) name. Prefers `.dynsym`, the
    /// default version (`@@`) over hidden ones, and defined over undefined.
    pub fn lookup_symbol(&self, name: &str) -> Option<SymbolInfo> {
        let best = self
            .syms
            .iter()
            .filter(|s| s.name == name && s.shndx != elf::SHN_UNDEF && s.vaddr != 0)
            .min_by_key(|s| (s.hidden, !s.dynamic, s.st_type != elf::STT_GNU_IFUNC))?;
        Some(SymbolInfo {
            name: best.name.clone(),
            vaddr: best.vaddr,
            size: best.size,
            file_offset: self.vaddr_to_file_offset(best.vaddr)?,
            is_ifunc: best.st_type == elf::STT_GNU_IFUNC,
        })
    }

    /// The IFUNC symbol whose resolver lives at `vaddr` (prefers `.dynsym`,
    /// default version).
    fn ifunc_at(&self, vaddr: u64) -> Option<&ElfSym> {
        self.syms
            .iter()
            .filter(|s| s.vaddr == vaddr && s.st_type == elf::STT_GNU_IFUNC)
            .min_by_key(|s| (s.hidden, !s.dynamic, s.name.starts_with('_')))
    }

    fn reloc_name(&self, r: &Reloc) -> Option<String> {
        match r.r_type {
            R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT | R_X86_64_64 => r.sym.clone(),
            R_X86_64_IRELATIVE => Some(
                self.ifunc_at(r.addend as u64)
                    .map(|s| s.name.clone())
                    .unwrap_or_else(|| format!("*ABS*+0x{:x}", r.addend)),
            ),
            _ => None,
        }
    }

    fn section(&self, name: &str) -> Option<&SectionFact> {
        self.sections.iter().find(|s| s.name == name)
    }

    /// Decode `.plt`, `.plt.sec` and `.plt.got` stubs into names by following
    /// each stub's `jmp *disp(%rip)` to its GOT slot and that slot's dynamic
    /// relocation; lazy `.plt` stubs with IBT (which only `push idx; jmp PLT0`)
    /// are named by their `.rela.plt` index.
    fn decode_plt(&self, data: &[u8]) -> Vec<PltStub> {
        let by_got: HashMap<u64, &Reloc> = self
            .relocs
            .iter()
            .filter(|r| {
                matches!(
                    r.r_type,
                    R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT | R_X86_64_IRELATIVE | R_X86_64_64
                )
            })
            .map(|r| (r.offset, r))
            .collect();
        let rela_plt: Vec<&Reloc> = self
            .relocs
            .iter()
            .filter(|r| r.section == ".rela.plt")
            .collect();
        let mut out = Vec::new();
        for secname in [".plt", ".plt.sec", ".plt.got"] {
            let Some(sec) = self.section(secname) else {
                continue;
            };
            if sec.sh_type == elf::SHT_NOBITS || sec.size == 0 {
                continue;
            }
            let Some(bytes) = data.get(sec.offset as usize..(sec.offset + sec.size) as usize)
            else {
                continue;
            };
            let ent = match (secname, sec.entsize) {
                (_, 8) | (_, 16) => sec.entsize,
                (".plt.got", _) => 8,
                _ => 16,
            };
            let n = sec.size / ent;
            for i in 0..n {
                let vaddr = sec.addr + i * ent;
                let b = &bytes[(i * ent) as usize..((i + 1) * ent) as usize];
                let name = if secname == ".plt" && i == 0 && is_plt0(b) {
                    Some("[plt0]".to_string())
                } else if let Some(got) = rip_jmp_target(b, vaddr) {
                    by_got.get(&got).and_then(|r| self.reloc_name(r))
                } else {
                    push_index(b)
                        .and_then(|idx| rela_plt.get(idx as usize))
                        .and_then(|r| self.reloc_name(r))
                };
                if let Some(name) = name {
                    out.push(PltStub {
                        section: secname.to_string(),
                        vaddr,
                        size: ent,
                        name,
                    });
                }
            }
        }
        out
    }

    /// The PLT stub containing link-time `vaddr`.
    pub fn plt_stub_at(&self, vaddr: u64) -> Option<&PltStub> {
        self.plt
            .iter()
            .find(|p| p.vaddr <= vaddr && vaddr < p.vaddr + p.size)
    }

    /// All decoded PLT stubs.
    pub fn plt_stubs(&self) -> &[PltStub] {
        &self.plt
    }

    /// Nearest preceding `.dynsym` function/object symbol at or before
    /// `vaddr` — what a NAIVE resolver would report. Used by tests to prove
    /// the trap exists; never used for naming.
    pub fn naive_nearest_dynsym(&self, vaddr: u64) -> Option<(String, u64, u64)> {
        self.syms
            .iter()
            .filter(|s| s.dynamic && s.shndx != elf::SHN_UNDEF && s.vaddr != 0 && s.vaddr <= vaddr)
            .filter(|s| matches!(s.st_type, elf::STT_FUNC | elf::STT_GNU_IFUNC))
            .max_by_key(|s| s.vaddr)
            .map(|s| (s.name.clone(), s.vaddr, s.size))
    }

    /// Whether any `.dynsym` symbol's extent `[value, value+size)` covers `vaddr`.
    pub fn dynsym_covers(&self, vaddr: u64) -> bool {
        self.syms.iter().any(|s| {
            s.dynamic && s.shndx != elf::SHN_UNDEF && s.vaddr <= vaddr && vaddr < s.vaddr + s.size
        })
    }

    /// Canonical name among same-start aliases: candidates are FUNC/IFUNC
    /// symbols starting at `vaddr` with non-zero size. Prefers names exported
    /// from `.dynsym` with the default version (`malloc` over
    /// `__GI___libc_malloc`), then the strcmp-greatest name (gdb's choice
    /// among equal-address minimal symbols, e.g. `__memmove_avx_unaligned_erms`
    /// over its alias `__memcpy_avx_unaligned_erms`). Returns the alias set
    /// and the choice.
    pub fn aliases_at(&self, vaddr: u64) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = Vec::new();
        for s in &self.syms {
            if s.vaddr == vaddr
                && s.size > 0
                && s.shndx != elf::SHN_UNDEF
                && matches!(s.st_type, elf::STT_FUNC | elf::STT_GNU_IFUNC)
            {
                let exported = s.dynamic && !s.hidden && s.bind != elf::STB_LOCAL;
                match v.iter_mut().find(|(n, _)| *n == s.name) {
                    Some(e) => e.1 |= exported,
                    None => v.push((s.name.clone(), exported)),
                }
            }
        }
        v
    }

    /// Whether this file has a `.symtab`.
    pub fn has_symtab(&self) -> bool {
        self.syms.iter().any(|s| !s.dynamic)
    }
}

/// PLT0 (lazy binding header): `ff 35 <disp32>` (push GOT+8) then jmp.
fn is_plt0(b: &[u8]) -> bool {
    let b = b.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa][..]).unwrap_or(b); // endbr64
    b.starts_with(&[0xff, 0x35])
}

/// `[f2] ff 25 disp32` = (bnd) jmp *disp32(%rip), anywhere in the stub.
fn rip_jmp_target(b: &[u8], vaddr: u64) -> Option<u64> {
    (0..b.len().saturating_sub(5)).find_map(|i| {
        if b[i] == 0xff && b[i + 1] == 0x25 {
            let disp = i32::from_le_bytes(b[i + 2..i + 6].try_into().ok()?);
            Some((vaddr + i as u64 + 6).wrapping_add(disp as i64 as u64))
        } else {
            None
        }
    })
}

/// `[endbr64] 68 imm32` = push $idx (lazy stub with IBT).
fn push_index(b: &[u8]) -> Option<u32> {
    let b = b.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa][..]).unwrap_or(b);
    if b.len() >= 5 && b[0] == 0x68 {
        Some(u32::from_le_bytes(b[1..5].try_into().ok()?))
    } else {
        None
    }
}

/// Find `name` in `.dynsym` or `.symtab` of `path`.
pub fn lookup_symbol(path: &Path, name: &str) -> Result<Option<SymbolInfo>> {
    Ok(ElfFacts::shared(path)?.lookup_symbol(name))
}

/// Find several names; returns the ones found (in `names` order). Aliases
/// (e.g. `aligned_alloc`/`memalign` in glibc 2.36) share a `file_offset`:
/// dedupe on it before attaching probes.
pub fn lookup_symbols(path: &Path, names: &[&str]) -> Result<Vec<SymbolInfo>> {
    let facts = ElfFacts::shared(path)?;
    Ok(names
        .iter()
        .filter_map(|n| facts.lookup_symbol(n))
        .collect())
}

/// Load base of `path` (as in maps) in the target: `start - offset` of the
/// mapping with the lowest file offset, minus the page-aligned vaddr of the
/// first PT_LOAD (0 for shared objects/PIE).
pub fn load_base(maps: &ProcMaps, path: &str, facts: &ElfFacts) -> Option<u64> {
    let m = maps.mappings_of(path).min_by_key(|m| m.offset)?;
    // The PT_LOAD whose (page-aligned) file range contains m.offset gives the
    // link-time vaddr mapped at m.start.
    let seg = facts
        .loads
        .iter()
        .find(|l| (l.offset & !0xfff) <= m.offset && m.offset < l.offset + l.filesz.max(1))
        .or_else(|| facts.loads.iter().min_by_key(|l| l.vaddr))?;
    let vaddr_at_start = (seg.vaddr & !0xfff) + (m.offset - (seg.offset & !0xfff));
    Some(m.start.wrapping_sub(vaddr_at_start))
}

/// Read a native-endian u64 from the target's memory.
pub fn read_u64(pid: u32, addr: u64) -> Result<u64> {
    let path = format!("/proc/{pid}/mem");
    let f = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
    let mut buf = [0u8; 8];
    f.read_exact_at(&mut buf, addr)
        .with_context(|| format!("reading 8 bytes at {addr:#x} from {path}"))?;
    Ok(u64::from_ne_bytes(buf))
}

/// The main executable's path as it appears in maps.
fn exe_path_in_maps(pid: u32, maps: &ProcMaps) -> Option<String> {
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).ok()?;
    let exe = exe.to_string_lossy().into_owned();
    maps.objects()
        .into_iter()
        .map(|o| o.path)
        .find(|p| *p == exe)
}

/// The function at `off` in `lib_file`, by its debug info; remembered for
/// the life of rig (each process of a tree resolves the same copy routines,
/// and reading libc's DWARF is the slow part of attaching).
fn impl_name_at(lib_file: &Path, lib_path: &str, off: u64) -> Option<String> {
    use std::collections::HashMap;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Mutex;
    type Key = (u64, u64, u64, i64, u64);
    static NAMES: Mutex<Option<HashMap<Key, Option<String>>>> = Mutex::new(None);
    let m = std::fs::metadata(lib_file).ok()?;
    let key = (m.dev(), m.ino(), m.size(), m.mtime(), off);
    let mut cache = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if let Some(n) = cache.get(&key) {
        return n.clone();
    }
    let name = super::Symbolizer::new()
        .symbolize_file_offsets_at(lib_file, lib_path, &[off])
        .pop()
        .and_then(|s| {
            (s.naming == super::Naming::Symbol)
                .then_some(s.function)
                .flatten()
        });
    cache.insert(key, name.clone());
    name
}

/// Resolve IFUNC `api` exported by `lib_path` (as in maps) to the
/// implementation the live target `pid` actually runs.
///
/// Primary: `lib`'s own `R_X86_64_IRELATIVE` relocations whose addend is the
/// IFUNC resolver's vaddr (glibc calls its own memcpy through those GOT
/// slots); the slot at `load_base + r_offset` is read from `/proc/<pid>/mem`.
/// Cross-check / fallback: the main executable's `JUMP_SLOT`/`GLOB_DAT` slot
/// for `api`, when bound (points into `lib`, not back into the exe's PLT).
pub fn resolve_ifunc(pid: u32, maps: &ProcMaps, lib_path: &str, api: &str) -> Result<ResolvedImpl> {
    let lib_file = maps.readable_path(lib_path);
    let facts = ElfFacts::shared(&lib_file)?;
    let sym = facts
        .lookup_symbol(api)
        .ok_or_else(|| anyhow!("symbol {api} not found in {lib_path}"))?;
    let name_of = |off: u64| impl_name_at(&lib_file, lib_path, off);
    if !sym.is_ifunc {
        return Ok(ResolvedImpl {
            api: api.to_string(),
            lib: lib_path.to_string(),
            file_offset: sym.file_offset,
            vaddr: sym.vaddr,
            impl_name: name_of(sym.file_offset).or(Some(sym.name.clone())),
            method: format!("plain symbol {api} (not an IFUNC)"),
        });
    }
    let base = load_base(maps, lib_path, &facts)
        .ok_or_else(|| anyhow!("{lib_path} is not mapped in pid {pid}"))?;

    // Translate a runtime pointer to (file offset, vaddr) inside lib.
    let in_lib = |ptr: u64| -> Option<(u64, u64)> {
        let (m, off) = maps.file_offset(ptr)?;
        if m.path.as_deref() != Some(lib_path) {
            return None;
        }
        Some((off, facts.file_offset_to_vaddr(off)?))
    };

    // 1. lib's own IRELATIVE slots for this resolver.
    let mut irel: Vec<(u64, u64)> = Vec::new(); // (slot addr, value)
    let mut irel_err = None;
    for r in facts
        .relocs
        .iter()
        .filter(|r| r.r_type == R_X86_64_IRELATIVE && r.addend as u64 == sym.vaddr)
    {
        let slot = base.wrapping_add(r.offset);
        match read_u64(pid, slot) {
            Ok(v) => irel.push((slot, v)),
            Err(e) => irel_err = Some(e),
        }
    }
    let irel_hit = irel
        .iter()
        .find_map(|&(slot, v)| in_lib(v).map(|x| (slot, v, x)));
    let irel_consistent = irel.iter().all(|&(_, v)| Some(v) == irel_hit.map(|h| h.1));

    // 2. the executable's GOT entry for api.
    let mut exe_hit: Option<(String, u64, u64, (u64, u64))> = None; // (exe, slot, value, (off, vaddr))
    let mut exe_note = String::new();
    if let Some(exe) = exe_path_in_maps(pid, maps) {
        if exe != lib_path {
            if let Ok(exe_facts) = ElfFacts::shared(&maps.readable_path(&exe)) {
                if let Some(exe_base) = load_base(maps, &exe, &exe_facts) {
                    for r in exe_facts.relocs.iter().filter(|r| {
                        matches!(r.r_type, R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT)
                            && r.sym.as_deref() == Some(api)
                    }) {
                        let slot = exe_base.wrapping_add(r.offset);
                        match read_u64(pid, slot) {
                            Ok(v) => match in_lib(v) {
                                Some(x) => {
                                    exe_hit = Some((exe.clone(), slot, v, x));
                                    break;
                                }
                                None => {
                                    exe_note = format!(
                                        "exe GOT slot {slot:#x} for {api} not bound yet ({v:#x})"
                                    )
                                }
                            },
                            Err(e) => exe_note = format!("exe GOT read failed: {e:#}"),
                        }
                    }
                    if exe_hit.is_none() && exe_note.is_empty() {
                        exe_note = format!("{exe} has no GOT relocation for {api}");
                    }
                }
            }
        }
    }

    let (method, (off, vaddr)) = match (irel_hit, &exe_hit) {
        (Some((slot, v, x)), Some((exe, eslot, ev, ex))) => {
            let agree = if x == *ex { "agrees".to_string() } else { format!("MISMATCH (exe says {ev:#x})") };
            (
                format!(
                    "{} IRELATIVE GOT slot {slot:#x} -> {v:#x}{}; cross-check {} GOT slot {eslot:#x} {agree}",
                    crate::process::maps::basename(lib_path),
                    if irel_consistent { "" } else { " (IRELATIVE slots disagree)" },
                    crate::process::maps::basename(exe),
                ),
                x,
            )
        }
        (Some((slot, v, x)), None) => (
            format!(
                "{} IRELATIVE GOT slot {slot:#x} -> {v:#x}{}; no exe cross-check ({})",
                crate::process::maps::basename(lib_path),
                if irel_consistent { "" } else { " (IRELATIVE slots disagree)" },
                if exe_note.is_empty() { "no exe" } else { &exe_note },
            ),
            x,
        ),
        (None, Some((exe, eslot, ev, ex))) => (
            format!(
                "fallback: {} GOT slot {eslot:#x} -> {ev:#x} (no usable IRELATIVE slot in {}{})",
                crate::process::maps::basename(exe),
                crate::process::maps::basename(lib_path),
                irel_err.map(|e| format!(": {e:#}")).unwrap_or_default()
            ),
            *ex,
        ),
        (None, None) => bail!(
            "cannot resolve IFUNC {api} in {lib_path} for pid {pid}: no IRELATIVE slot with addend {:#x} readable{}; {}",
            sym.vaddr,
            irel_err.map(|e| format!(" ({e:#})")).unwrap_or_default(),
            exe_note
        ),
    };
    Ok(ResolvedImpl {
        api: api.to_string(),
        lib: lib_path.to_string(),
        file_offset: off,
        vaddr,
        impl_name: name_of(off),
        method,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::symbolize::{symbolize_elf_with, Naming};
    use std::process::{Child, Command, Stdio};

    /// A child we spawned; killed (by its own pid) on drop.
    pub(crate) struct Spawned(pub Child);
    impl Drop for Spawned {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }

    pub(crate) fn spawn_sleep() -> (Spawned, ProcMaps) {
        let child = Spawned(
            Command::new("sleep")
                .arg("30")
                .stdin(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let pid = child.0.id();
        // Wait until ld.so has mapped libc and sleep is parked in nanosleep.
        for _ in 0..200 {
            let maps = ProcMaps::read(pid).unwrap();
            let stat = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            if maps.libc_path().is_some() && stat.contains("nanosleep") {
                return (child, maps);
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let maps = ProcMaps::read(pid).unwrap();
        assert!(maps.libc_path().is_some());
        (child, maps)
    }

    fn run(cmd: &str, args: &[&str]) -> String {
        let out = Command::new(cmd)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{cmd} is required for this test: {e}"));
        assert!(
            out.status.success(),
            "{cmd} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `readelf -W --dyn-syms`: (name without version, value, size, type).
    fn readelf_dynsyms(path: &str) -> Vec<(String, u64, u64, String)> {
        run("readelf", &["-W", "--dyn-syms", path])
            .lines()
            .filter_map(|l| {
                let p: Vec<&str> = l.split_whitespace().collect();
                if p.len() < 8 || !p[0].ends_with(':') || p[6] == "UND" {
                    return None;
                }
                let v = u64::from_str_radix(p[1], 16).ok()?;
                let size = if let Some(h) = p[2].strip_prefix("0x") {
                    u64::from_str_radix(h, 16).ok()?
                } else {
                    p[2].parse().ok()?
                };
                let name = p[7].split('@').next().unwrap().to_string();
                Some((name, v, size, p[3].to_string()))
            })
            .collect()
    }

    #[test]
    fn aligned_alloc_and_memalign_share_file_offset() {
        let maps = ProcMaps::read(std::process::id()).unwrap();
        let libc = maps.libc_path().unwrap();
        let found = lookup_symbols(
            Path::new(&libc),
            &["aligned_alloc", "memalign", "malloc", "no_such_fn_xyz"],
        )
        .unwrap();
        assert_eq!(found.len(), 3);
        let (aa, ma) = (&found[0], &found[1]);
        assert_eq!(aa.name, "aligned_alloc");
        assert_eq!(
            aa.file_offset, ma.file_offset,
            "glibc 2.36: aligned_alloc is an alias of memalign"
        );
        // Independent: readelf agrees on the vaddr, and text vaddr == offset here.
        let dyn_ = readelf_dynsyms(&libc);
        let ra = dyn_.iter().find(|s| s.0 == "aligned_alloc").unwrap();
        assert_eq!(ra.1, aa.vaddr);
        assert_eq!(ra.2, aa.size);
        assert!(!aa.is_ifunc);
        // memcpy: two versions exist (memcpy@GLIBC_2.2.5 plain, memcpy@@GLIBC_2.14 IFUNC);
        // the default version must win.
        let mc = lookup_symbol(Path::new(&libc), "memcpy").unwrap().unwrap();
        assert!(mc.is_ifunc, "{mc:?}");
        assert!(dyn_
            .iter()
            .any(|s| s.0 == "memcpy" && s.1 == mc.vaddr && s.3 == "IFUNC"));
    }

    /// The implementation each IFUNC really resolves to, per gdb, read from
    /// libc's IRELATIVE slot found with `readelf -r` (independent of our ELF
    /// parsing): returns (gdb's symbol line, runtime pointer).
    fn gdb_info_symbol_of_slot(pid: u32, slot: u64) -> String {
        let out = run(
            "gdb",
            &[
                "-batch",
                "-nx",
                "-p",
                &pid.to_string(),
                "-ex",
                &format!("info symbol *(void**){slot:#x}"),
            ],
        );
        out.lines()
            .find(|l| l.contains(" in section "))
            .unwrap_or_else(|| panic!("gdb said: {out}"))
            .to_string()
    }

    #[test]
    fn resolve_ifunc_memcpy_memmove_memset_live() {
        let (child, maps) = spawn_sleep();
        let pid = child.0.id();
        let libc = maps.libc_path().unwrap();
        let base = maps
            .mappings_of(&libc)
            .find(|m| m.offset == 0)
            .unwrap()
            .start;
        let dyn_ = readelf_dynsyms(&libc);
        let irel: Vec<(u64, u64)> = run("readelf", &["-W", "-r", &libc])
            .lines()
            .filter(|l| l.contains("IRELATIV"))
            .map(|l| {
                let p: Vec<&str> = l.split_whitespace().collect();
                (
                    u64::from_str_radix(p[0], 16).unwrap(),
                    u64::from_str_radix(p.last().unwrap(), 16).unwrap(),
                )
            })
            .collect();
        let libc_facts = ElfFacts::load(&maps.readable_path(&libc)).unwrap();
        assert!(
            !libc_facts.has_symtab(),
            "test assumes the shipped libc is stripped (.dynsym only)"
        );

        let mut results = Vec::new();
        for api in ["memcpy", "memmove", "memset"] {
            let r = resolve_ifunc(pid, &maps, &libc, api).unwrap();
            eprintln!("{api}: {r:?}");
            assert!(r.method.contains("IRELATIVE"), "{}", r.method);
            assert!(!r.method.contains("MISMATCH"), "{}", r.method);

            // Independent expectation: gdb names the pointer in the IRELATIVE
            // slot (slot located with readelf, not our parser).
            let resolver = dyn_
                .iter()
                .find(|s| s.0 == api && s.3 == "IFUNC")
                .unwrap()
                .1;
            let slot = base + irel.iter().find(|(_, a)| *a == resolver).unwrap().0;
            let gdb = gdb_info_symbol_of_slot(pid, slot);
            let gdb_name = gdb.split_whitespace().next().unwrap();
            assert!(
                gdb.starts_with(&format!("{gdb_name} in section .text")),
                "gdb names a symbol start: {gdb}"
            );
            assert_eq!(
                r.impl_name.as_deref(),
                Some(gdb_name),
                "api {api}: gdb says {gdb}"
            );
            let ptr = read_u64(pid, slot).unwrap();
            assert_eq!(
                ptr - base,
                r.file_offset,
                "text vaddr == file offset in this libc"
            );
            results.push(r.clone());

            // THE TRAP: with .dynsym only, this address sits in a gap after a
            // small exported function; a naive nearest-preceding resolver
            // names it after that function (readelf-derived, independent).
            let naive = dyn_
                .iter()
                .filter(|s| (s.3 == "FUNC" || s.3 == "IFUNC") && s.1 <= r.vaddr)
                .max_by_key(|s| s.1)
                .unwrap();
            assert!(
                naive.1 + naive.2 <= r.vaddr,
                "naive symbol {naive:?} does not cover {:#x}",
                r.vaddr
            );
            assert!(
                !dyn_.iter().any(|s| s.1 <= r.vaddr && r.vaddr < s.1 + s.2),
                "inside no .dynsym extent"
            );
            assert_eq!(libc_facts.naive_nearest_dynsym(r.vaddr).unwrap().0, naive.0);
            eprintln!(
                "  naive resolver would say {}+{:#x}",
                naive.0,
                r.vaddr - naive.1
            );
            if api != "memset" {
                assert_eq!(
                    naive.0, "__nss_database_lookup",
                    "glibc 2.36 layout: memmove impls follow it"
                );
            }

            // ...and we do not fall in it.
            let nodebug = symbolize_elf_with(&maps.readable_path(&libc), &[r.file_offset], false);
            assert_eq!(nodebug[0].naming, Naming::Unnamed, "{:?}", nodebug[0]);
            assert_eq!(nodebug[0].function, None);
            let label = nodebug[0].label();
            assert_eq!(label, format!("libc.so.6+{:#x} [unnamed]", r.file_offset));
            assert!(!label.contains(&naive.0) && !label.contains("__nss_database_lookup"));
        }
        assert_eq!(
            results[0].file_offset, results[1].file_offset,
            "memcpy and memmove share an implementation"
        );
        assert_ne!(results[0].file_offset, results[2].file_offset);
    }

    /// dlsym() in a fresh process runs the IFUNC resolvers through ld.so; the
    /// offsets it reports must equal ours (same CPU, same libc).
    #[test]
    fn resolve_ifunc_agrees_with_dlsym() {
        let dir = tempdir("dlsym");
        let src = dir.join("d.c");
        std::fs::write(
            &src,
            r#"#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
int main(int c, char **v) {
  for (int i = 1; i < c; i++) {
    void *p = dlsym(RTLD_DEFAULT, v[i]); Dl_info di; dladdr(p, &di);
    printf("%s %lx %s\n", v[i], (unsigned long)((char*)p - (char*)di.dli_fbase), di.dli_fname);
  }
  return 0;
}"#,
        )
        .unwrap();
        let exe = dir.join("d");
        run(
            "gcc",
            &[
                "-O0",
                "-o",
                exe.to_str().unwrap(),
                src.to_str().unwrap(),
                "-ldl",
            ],
        );
        let out = run(
            exe.to_str().unwrap(),
            &["memcpy", "memmove", "memset", "strlen"],
        );
        let (child, maps) = spawn_sleep();
        let libc = maps.libc_path().unwrap();
        for line in out.lines() {
            let p: Vec<&str> = line.split_whitespace().collect();
            let r = resolve_ifunc(child.0.id(), &maps, &libc, p[0]).unwrap();
            assert_eq!(
                format!("{:x}", r.vaddr),
                p[1],
                "{} dlsym: {line}; ours: {r:?}",
                p[0]
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A BIND_NOW executable that called memcpy: its JUMP_SLOT is bound into
    /// libc and must agree with libc's own IRELATIVE slot.
    #[test]
    fn resolve_ifunc_cross_checks_bound_exe_got() {
        let dir = tempdir("bindnow");
        let src = dir.join("b.c");
        std::fs::write(
            &src,
            "#include <string.h>\n#include <unistd.h>\n\
             int main(int c, char **v) { char b[64]; memcpy(b, v[0], 8); memset(b, 0, 8); pause(); return b[0]; }\n",
        )
        .unwrap();
        let exe = dir.join("b");
        run(
            "gcc",
            &[
                "-O0",
                "-fno-builtin",
                "-Wl,-z,now",
                "-o",
                exe.to_str().unwrap(),
                src.to_str().unwrap(),
            ],
        );
        let child = Spawned(Command::new(&exe).stdin(Stdio::null()).spawn().unwrap());
        let pid = child.0.id();
        let mut maps = ProcMaps::read(pid).unwrap();
        for _ in 0..200 {
            let wchan = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
            maps = ProcMaps::read(pid).unwrap();
            if maps.libc_path().is_some() && wchan.contains("pause") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let libc = maps.libc_path().unwrap();
        for api in ["memcpy", "memset"] {
            let r = resolve_ifunc(pid, &maps, &libc, api).unwrap();
            eprintln!("{api}: {}", r.method);
            assert!(
                r.method.contains("IRELATIVE") && r.method.contains("agrees"),
                "{}",
                r.method
            );
        }
        drop(child);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn non_ifunc_returns_plain_symbol() {
        let (child, maps) = spawn_sleep();
        let libc = maps.libc_path().unwrap();
        let r = resolve_ifunc(child.0.id(), &maps, &libc, "malloc").unwrap();
        let s = lookup_symbol(Path::new(&libc), "malloc").unwrap().unwrap();
        assert_eq!(r.file_offset, s.file_offset);
        assert!(r.method.contains("not an IFUNC"));
        assert!(resolve_ifunc(child.0.id(), &maps, &libc, "no_such_symbol_xyz").is_err());
    }

    pub(crate) fn tempdir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!(
            "rig-sym-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// `objdump -d` labels `<puts@plt>` (independent of our decoder).
    fn objdump_plt_addr(exe: &str, sym: &str) -> Vec<(String, u64)> {
        let out = run(
            "objdump",
            &["-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got", exe],
        );
        let mut sec = String::new();
        let mut v = Vec::new();
        for l in out.lines() {
            if let Some(s) = l.strip_prefix("Disassembly of section ") {
                sec = s.trim_end_matches(':').to_string();
            }
            if l.ends_with(&format!("<{sym}@plt>:")) {
                v.push((
                    sec.clone(),
                    u64::from_str_radix(l.split_whitespace().next().unwrap(), 16).unwrap(),
                ));
            }
        }
        v
    }

    #[test]
    fn plt_stubs_are_named() {
        let dir = tempdir("plt");
        let src = dir.join("p.c");
        std::fs::write(
            &src,
            "#include <stdio.h>\n#include <string.h>\n\
             int (*volatile fp)(const char *) = puts;\n\
             int main(int c, char **v) { char b[64]; memcpy(b, v[0], 8); b[8] = 0; puts(b); fp(\"x\"); return (int)strlen(b); }\n",
        )
        .unwrap();
        let variants: &[(&str, &[&str])] = &[
            ("lazy", &["-O0", "-fno-builtin", "-Wl,-z,lazy"]),
            (
                "ibt-lazy",
                &[
                    "-O0",
                    "-fno-builtin",
                    "-fcf-protection=full",
                    "-Wl,-z,ibtplt",
                    "-Wl,-z,lazy",
                ],
            ),
            ("now", &["-O0", "-fno-builtin", "-Wl,-z,now"]),
        ];
        for (tag, flags) in variants {
            let exe = dir.join(format!("p-{tag}"));
            let mut args: Vec<&str> = flags.to_vec();
            args.extend(["-o", exe.to_str().unwrap(), src.to_str().unwrap()]);
            run("gcc", &args);
            let facts = ElfFacts::load(&exe).unwrap();
            let exe_s = exe.to_str().unwrap();
            let rela_plt: Vec<&Reloc> = facts
                .relocs
                .iter()
                .filter(|r| r.section == ".rela.plt")
                .collect();
            let has_sec = facts.section(".plt.sec").is_some();
            eprintln!("{tag}: .plt.sec={has_sec} stubs={:?}", facts.plt_stubs());
            for sym in ["puts", "memcpy", "strlen"] {
                let labels = objdump_plt_addr(exe_s, sym);
                assert!(!labels.is_empty(), "{tag}: objdump shows no {sym}@plt");
                for (sec, vaddr) in labels {
                    // Brief's index rule: .plt entry i+1 / .plt.sec entry i in .rela.plt order.
                    if sec == ".plt" || sec == ".plt.sec" {
                        let idx = rela_plt
                            .iter()
                            .position(|r| r.sym.as_deref() == Some(sym))
                            .unwrap() as u64;
                        let s = facts.section(&sec).unwrap();
                        let want = if sec == ".plt" {
                            s.addr + 16 * (idx + 1)
                        } else {
                            s.addr + 16 * idx
                        };
                        assert_eq!(vaddr, want, "{tag}: {sym} in {sec}");
                    }
                    let off = facts.vaddr_to_file_offset(vaddr).unwrap();
                    for o in [off, off + 4] {
                        let site = &symbolize_elf_with(&exe, &[o], true)[0];
                        assert_eq!(site.naming, Naming::Plt, "{tag} {sym} {sec}: {site:?}");
                        assert_eq!(site.label(), format!("{sym}@plt"), "{tag} {sec}");
                    }
                }
            }
            if *tag == "ibt-lazy" {
                assert!(has_sec, "-z ibtplt should produce .plt.sec");
                // The lazy .plt stubs behind .plt.sec are named via their push index.
                let plt = facts.section(".plt").unwrap();
                let idx = rela_plt
                    .iter()
                    .position(|r| r.sym.as_deref() == Some("puts"))
                    .unwrap() as u64;
                let lazy = plt.addr + 16 * (idx + 1);
                assert_eq!(facts.plt_stub_at(lazy).unwrap().name, "puts");
            }
            // .plt.got: puts' address is taken (GLOB_DAT), so its call goes through .plt.got.
            if let Some(pg) = facts.section(".plt.got") {
                let stub = facts.plt_stub_at(pg.addr).unwrap();
                eprintln!("{tag}: .plt.got stub {stub:?}");
                let glob = facts.relocs.iter().find(|r| {
                    r.r_type == R_X86_64_GLOB_DAT && r.sym.as_deref() == Some(&stub.name)
                });
                assert!(
                    glob.is_some(),
                    "{tag}: .plt.got stub {} references a GLOB_DAT slot",
                    stub.name
                );
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn load_base_of_libc_matches_dladdr_style_computation() {
        let (_child, maps) = spawn_sleep();
        let libc = maps.libc_path().unwrap();
        let facts = ElfFacts::load(&maps.readable_path(&libc)).unwrap();
        let m0 = maps.mappings_of(&libc).find(|m| m.offset == 0).unwrap();
        assert_eq!(load_base(&maps, &libc, &facts), Some(m0.start));
        // Non-PIE style: first PT_LOAD at 0x400000 mapped at 0x400000 => base 0.
        let fake = ProcMaps::parse(1, "00400000-00401000 r-xp 00000000 fe:00 1 /x\n").unwrap();
        let mut f2 = facts.clone();
        f2.loads = vec![LoadSeg {
            vaddr: 0x400000,
            offset: 0,
            filesz: 0x1000,
            memsz: 0x1000,
        }];
        assert_eq!(load_base(&fake, "/x", &f2), Some(0));
    }
}
