//! ELF facts for attaching probes and naming PLT stubs (x86_64).
//!
//! - symbol lookup by name (`.dynsym` + `.symtab`) with file offsets for uprobes,
//! - relocations and PLT stub decoding (`.plt`, `.plt.sec`, `.plt.got`).
//!
//! IFUNC resolution from the live target's GOT is probe placement:
//! the probe stage's `ifunc` module.

use std::collections::HashMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use object::elf;
use object::read::elf::{
    ElfFile64, FileHeader as _, ProgramHeader as _, SectionHeader as _, Sym as _,
};
use object::read::SymbolIndex;
use object::Endianness;
use serde::Serialize;

use crate::process::maps::ProcMaps;

mod debugsyms;
pub mod usdt;

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
#[derive(Debug, Clone, Default)]
pub struct ElfFacts {
    pub(crate) sections: Vec<SectionFact>,
    pub(crate) loads: Vec<LoadSeg>,
    pub(crate) syms: Vec<ElfSym>,
    /// Indices into `syms`, sorted by name: a lookup by name is a binary
    /// search, not a scan (a Rust server's `.symtab` has 100,000 names, and
    /// attaching looks up hundreds).
    by_name: Vec<u32>,
    pub(crate) relocs: Vec<Reloc>,
    pub(crate) plt: Vec<PltStub>,
    /// The code `.eh_frame` describes: (start, end) vaddr of every FDE,
    /// sorted by start.
    pub(crate) cfi: Vec<(u64, u64)>,
    pub build_id: Option<String>,
    /// The file these facts were loaded from, and the functions it keeps
    /// elsewhere when stripped (debugsyms.rs), read on first use.
    origin: Option<std::path::PathBuf>,
    kept: std::sync::OnceLock<Vec<ElfSym>>,
}

pub(crate) const R_X86_64_GLOB_DAT: u32 = elf::R_X86_64_GLOB_DAT;
pub(crate) const R_X86_64_JUMP_SLOT: u32 = elf::R_X86_64_JUMP_SLOT;
pub(crate) const R_X86_64_IRELATIVE: u32 = elf::R_X86_64_IRELATIVE;
const R_X86_64_64: u32 = elf::R_X86_64_64;

impl ElfFacts {
    /// `load`, parsed once per file per rig process ([`cached`]): attaching
    /// probes to each process of a tree looks up the same libc many times,
    /// and a parse of libc is most of the time a forked worker waits for
    /// its uprobes.
    pub fn shared(path: &Path) -> Result<std::sync::Arc<ElfFacts>> {
        cached(path, ElfFacts::load)
    }

    pub fn load(path: &Path) -> Result<ElfFacts> {
        let data = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let mut facts =
            Self::parse(&data).with_context(|| format!("parsing ELF {}", path.display()))?;
        facts.origin = Some(path.to_path_buf());
        Ok(facts)
    }

    // Long by design: one pass over the ELF file collecting every fact
    // (symbols, sections, segments, relocations) from the same parsed headers.
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
            let allocated = sh.sh_flags(e) & u64::from(elf::SHF_ALLOC) != 0;
            if link != 0 && link != dynsym_index.0 && !allocated {
                continue; // static relocations of an object file
            }
            // A static executable's IRELATIVE table (.rela.plt, applied by
            // its own start code) links to .symtab: its entries name no symbol.
            let named = link == 0 || link == dynsym_index.0;
            let sname = String::from_utf8_lossy(st.section_name(e, sh).unwrap_or(b"")).into_owned();
            let Ok(relas) = sh.data_as_array::<elf::Rela64<Endianness>, _>(e, data) else {
                continue;
            };
            for r in relas {
                let sym_idx = r.r_sym(e, false);
                let sym = if sym_idx == 0 || !named {
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
        let mut by_name: Vec<u32> = (0..syms.len() as u32).collect();
        by_name.sort_by(|&a, &b| syms[a as usize].name.cmp(&syms[b as usize].name));
        let mut facts = ElfFacts {
            sections,
            loads,
            syms,
            by_name,
            relocs,
            plt: Vec::new(),
            cfi: cfi_ranges(&file),
            build_id,
            origin: None,
            kept: Default::default(),
        };
        facts.plt = facts.decode_plt(data);
        Ok(facts)
    }

    /// The symbols called `name`, in table order (`by_name`'s sort is
    /// stable: a caller's tie-break by `min_by_key` still sees `.dynsym`
    /// first).
    fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a ElfSym> + 'a {
        let first = self
            .by_name
            .partition_point(|&i| self.syms[i as usize].name.as_str() < name);
        self.by_name[first..]
            .iter()
            .map(|&i| &self.syms[i as usize])
            .take_while(move |s| s.name == name)
    }

    /// The link-time address of variable `name` (a `.bss` one has no file
    /// offset, so [`Self::lookup_symbol`] cannot give it).
    pub fn variable(&self, name: &str) -> Option<u64> {
        self.named(name).find(|s| s.vaddr != 0).map(|s| s.vaddr)
    }

    /// Whether `.eh_frame` describes the code at link-time `vaddr` (FDEs
    /// do not overlap: only the last one starting at or below it can).
    pub fn has_cfi(&self, vaddr: u64) -> bool {
        let i = self.cfi.partition_point(|&(start, _)| start <= vaddr);
        i > 0 && vaddr < self.cfi[i - 1].1
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

    /// The link-time extent (vaddr, size) of a defined, sized symbol named
    /// `name` that holds `vaddr` (a debug file's table too, whose code is
    /// not in the file).
    pub fn extent_holding(&self, name: &str, vaddr: u64) -> Option<(u64, u64)> {
        self.named(name)
            .find(|s| {
                s.shndx != elf::SHN_UNDEF
                    && s.vaddr <= vaddr
                    && vaddr < s.vaddr.saturating_add(s.size)
            })
            .map(|s| (s.vaddr, s.size))
    }

    /// Look up a defined symbol by (unversioned) name. Prefers `.dynsym`, the
    /// default version (`@@`) over hidden ones, and defined over undefined.
    pub fn lookup_symbol(&self, name: &str) -> Option<SymbolInfo> {
        let best = self
            .named(name)
            .filter(|s| s.shndx != elf::SHN_UNDEF && s.vaddr != 0)
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

    pub(crate) fn section(&self, name: &str) -> Option<&SectionFact> {
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

    /// The names of the functions `.dynsym` exports (defined, not local,
    /// default version).
    pub fn exported_function_names(&self) -> impl Iterator<Item = &str> {
        self.syms
            .iter()
            .filter(|s| {
                s.dynamic
                    && !s.hidden
                    && s.bind != elf::STB_LOCAL
                    && s.shndx != elf::SHN_UNDEF
                    && matches!(s.st_type, elf::STT_FUNC | elf::STT_GNU_IFUNC)
            })
            .map(|s| s.name.as_str())
    }

    /// The names of the functions this file defines (`.symtab` and
    /// `.dynsym`, or the tables a stripped file keeps elsewhere: defined,
    /// sized FUNC or IFUNC symbols), sorted, each once.
    pub fn function_names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .syms
            .iter()
            .chain(self.kept_functions())
            .filter(|s| {
                s.shndx != elf::SHN_UNDEF
                    && s.size > 0
                    && matches!(s.st_type, elf::STT_FUNC | elf::STT_GNU_IFUNC)
            })
            .map(|s| s.name.as_str())
            .collect();
        v.sort_unstable();
        v.dedup();
        v
    }

    /// Whether this file has a section of that name.
    pub fn has_section(&self, name: &str) -> bool {
        self.sections.iter().any(|s| s.name == name)
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
///
/// Not `blazesym::inspect`: it finds names and file offsets too, but reports
/// an `STT_GNU_IFUNC` symbol as a plain function (blazesym 0.2.7,
/// `src/elf/types.rs`), and uprobe placement must know that `vaddr` is a
/// resolver, not the code that runs ([`SymbolInfo::is_ifunc`]).
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

/// The identity of a file on disk: device, inode, size and modification
/// time to the nanosecond. Each process reaches the same library through
/// its own `/proc/<pid>/...` path, so what is parsed from a file is keyed
/// by this, never by a path; a file replaced in place (a deploy) is new.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: i64,
    pub mtime_nsec: i64,
}

impl FileKey {
    pub fn of(path: &Path) -> Result<FileKey> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).with_context(|| format!("reading {}", path.display()))?;
        Ok(FileKey {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: m.mtime(),
            mtime_nsec: m.mtime_nsec(),
        })
    }
}

/// The one module cache: what one layer parses or derives from a file
/// (`T`: ELF facts, a Go function table, branch targets, unwind rows),
/// built once per file per rig process by `build` and shared after, keyed
/// by the file's [`FileKey`] and the type. A build that fails is not kept.
pub fn cached<T: Send + Sync + 'static>(
    path: &Path,
    build: impl FnOnce(&Path) -> Result<T>,
) -> Result<std::sync::Arc<T>> {
    use std::any::{Any, TypeId};
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};
    type Entry = Arc<dyn Any + Send + Sync>;
    static CACHE: Mutex<Option<HashMap<(FileKey, TypeId), Entry>>> = Mutex::new(None);
    let key = (FileKey::of(path)?, TypeId::of::<T>());
    let found = CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(&key)
        .cloned();
    if let Some(v) = found.and_then(|v| v.downcast::<T>().ok()) {
        return Ok(v);
    }
    let v = Arc::new(build(path)?);
    CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, v.clone());
    Ok(v)
}

/// (start, end) of every FDE of the file's `.eh_frame`, sorted by start;
/// empty when it has none or it does not parse.
fn cfi_ranges(file: &ElfFile64<'_, Endianness>) -> Vec<(u64, u64)> {
    use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindSection};
    use object::{Object, ObjectSection};
    let Some(eh) = file.section_by_name(".eh_frame") else {
        return Vec::new();
    };
    let Ok(data) = eh.data() else {
        return Vec::new();
    };
    let mut bases = BaseAddresses::default().set_eh_frame(eh.address());
    if let Some(t) = file.section_by_name(".text") {
        bases = bases.set_text(t.address());
    }
    if let Some(g) = file.section_by_name(".got") {
        bases = bases.set_got(g.address());
    }
    let section = EhFrame::new(data, LittleEndian);
    let mut out = Vec::new();
    let mut entries = section.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        if let CieOrFde::Fde(partial) = entry {
            if let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) {
                out.push((fde.initial_address(), fde.end_address()));
            }
        }
    }
    out.sort_unstable();
    out
}
