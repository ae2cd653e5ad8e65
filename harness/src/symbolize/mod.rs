//! Symbolization: absolute addresses (from a maps snapshot) -> true names.
//!
//! Rules:
//! - an address outside every symbol's extent is NEVER given the nearest
//!   preceding name: it becomes `Naming::Unnamed` (`module+0xoffset`);
//! - PLT stubs are named `sym@plt` from the relocations they jump through;
//! - DWARF (incl. `/usr/lib/debug/.build-id/..` files), inlined frames,
//!   file:line and Rust/C++ demangling come from blazesym.

pub mod elf;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use blazesym::symbolize::source::{Elf as BzElf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer as BzSymbolizer};
use serde::{Deserialize, Serialize};

use crate::process::maps::{basename, ProcMaps};
use elf::ElfFacts;

/// What kind of address is being symbolized.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddrKind {
    /// A return address (stack frame): `addr - 1` is looked up so the call
    /// instruction's line is reported; `addr` is kept in the output.
    ReturnAddress,
    /// An instruction pointer (probe hit, sample IP): looked up as is.
    InstructionPointer,
}

/// How a site got its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Naming {
    /// Inside a symbol's extent (ELF symbol with size, or DWARF function).
    Symbol,
    /// A PLT stub: `sym@plt`.
    Plt,
    /// In a file-backed module but inside no symbol: `module+0xoff [unnamed]`.
    Unnamed,
    /// Not in a file-backed mapping (`[vdso]`, `[heap]`, anonymous, unmapped).
    NoModule,
}

/// A frame inlined at the site (outermost first, as blazesym reports them).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InlinedFrame {
    pub function: String,
    pub file: Option<String>,
    pub line: Option<u32>,
}

/// A symbolized address.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Site {
    /// The address as given (for return addresses: not decremented).
    pub addr: u64,
    /// Module path as in maps; for NoModule the pseudo name (`[vdso]`,
    /// `[heap]`, `[unmapped]`) or None for anonymous memory.
    pub module: Option<String>,
    /// File offset of `addr` in `module` (NoModule: offset from mapping start).
    pub module_offset: u64,
    pub build_id: Option<String>,
    /// Demangled function name.
    pub function: Option<String>,
    /// `addr - function start`.
    pub function_offset: u64,
    /// Source file (full path as recorded in DWARF) of the looked-up
    /// instruction in `function`; with inlining, the call site of the first
    /// inlined frame (blazesym convention).
    pub file: Option<String>,
    pub line: Option<u32>,
    pub inlined: Vec<InlinedFrame>,
    pub naming: Naming,
}

impl Site {
    /// Human label: `calib_copy_large+0x1f (calib_server.c:123)`,
    /// `memcpy@plt`, `libc.so.6+0x1a2b3c [unnamed]`, `[vdso]+0x9a0`,
    /// `0x7f12.. [anon]`.
    pub fn label(&self) -> String {
        match self.naming {
            Naming::Symbol => {
                let f = self.function.as_deref().unwrap_or("?");
                let mut s = if self.function_offset == 0 {
                    f.to_string()
                } else {
                    format!("{f}+{:#x}", self.function_offset)
                };
                if let Some(fl) = self.file_line() {
                    s.push_str(&format!(" ({fl})"));
                }
                s
            }
            Naming::Plt => format!("{}@plt", self.function.as_deref().unwrap_or("?")),
            Naming::Unnamed => format!(
                "{}+{:#x} [unnamed]",
                self.module.as_deref().map(basename).unwrap_or("?"),
                self.module_offset
            ),
            Naming::NoModule => match self.module.as_deref() {
                Some("[unmapped]") => format!("{:#x} [unmapped]", self.addr),
                Some(m) if m.starts_with('[') => format!("{m}+{:#x}", self.module_offset),
                Some(m) => format!("{:#x} [{m}]", self.addr),
                None => format!("{:#x} [anon]", self.addr),
            },
        }
    }

    /// `calib_server.c:123` (basename of file : line).
    pub fn file_line(&self) -> Option<String> {
        let f = self.file.as_deref()?;
        let l = self.line?;
        Some(format!("{}:{l}", basename(f)))
    }
}

/// Result for one (module, looked-up file offset).
#[derive(Debug, Clone)]
struct Resolved {
    naming: Naming,
    function: Option<String>,
    /// Offset of the looked-up address from the function start.
    function_offset: u64,
    /// Link-time start address of the symbol (for alias canonicalization).
    sym_vaddr: u64,
    file: Option<String>,
    line: Option<u32>,
    inlined: Vec<InlinedFrame>,
}

impl Resolved {
    fn unnamed() -> Self {
        Resolved {
            naming: Naming::Unnamed,
            function: None,
            function_offset: 0,
            sym_vaddr: 0,
            file: None,
            line: None,
            inlined: vec![],
        }
    }
}

struct Module {
    facts: Option<Rc<ElfFacts>>,
    /// Symbol tables of the separate debug file (`/usr/lib/debug/.build-id/..`).
    debug_facts: Option<Rc<ElfFacts>>,
}

/// `<dir>/.build-id/xx/yyyy.debug` for the default debug dirs.
pub fn debug_file_for_build_id(build_id: &str) -> Option<PathBuf> {
    if build_id.len() < 4 {
        return None;
    }
    ["/usr/lib/debug", "/lib/debug"]
        .iter()
        .map(|d| {
            PathBuf::from(format!(
                "{d}/.build-id/{}/{}.debug",
                &build_id[..2],
                &build_id[2..]
            ))
        })
        .find(|p| p.exists())
}

/// Pick the canonical alias (see `ElfFacts::aliases_at`) if `name` is one of
/// several ELF symbols starting at `vaddr`; otherwise keep `name` (e.g.
/// demangled Rust/C++ names, which never equal a raw symtab entry).
fn canonical_name(name: &str, vaddr: u64, tables: &[&ElfFacts]) -> Option<String> {
    let mut all: Vec<(String, bool)> = Vec::new();
    for t in tables {
        for (n, exp) in t.aliases_at(vaddr) {
            match all.iter_mut().find(|(m, _)| *m == n) {
                Some(e) => e.1 |= exp,
                None => all.push((n, exp)),
            }
        }
    }
    if all.len() < 2 || !all.iter().any(|(n, _)| n == name) {
        return None;
    }
    all.into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)))
        .map(|a| a.0)
}

/// One per session: caches blazesym resolvers (per file), ELF facts (per
/// module) and results (per module path and file offset).
pub struct Symbolizer {
    inner: BzSymbolizer,
    debug_syms: bool,
    modules: HashMap<String, Module>,
    cache: HashMap<(String, u64), Resolved>,
}

impl Default for Symbolizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Symbolizer {
    /// Debug info on (DWARF, inlined fns, file:line), demangling on.
    pub fn new() -> Self {
        Self::with_debug_syms(true)
    }

    /// `debug_syms = false`: ELF symbol tables only (`.symtab`/`.dynsym`).
    pub fn with_debug_syms(debug_syms: bool) -> Self {
        let inner = BzSymbolizer::builder()
            .enable_code_info(true)
            .enable_inlined_fns(true)
            .enable_demangling(true)
            // None = blazesym's defaults: /usr/lib/debug and /lib/debug,
            // searched by build-id (.build-id/xx/yyyy.debug) and debuglink.
            .set_debug_dirs(Option::<&[PathBuf]>::None)
            .build();
        Symbolizer {
            inner,
            debug_syms,
            modules: HashMap::new(),
            cache: HashMap::new(),
        }
    }

    pub fn debug_syms(&self) -> bool {
        self.debug_syms
    }

    /// Symbolize absolute addresses of the process described by `maps`.
    /// Returns one `Site` per address, same order.
    pub fn symbolize(&mut self, maps: &ProcMaps, addrs: &[u64], kind: AddrKind) -> Vec<Site> {
        // First pass: classify, collect file offsets per module.
        struct Pending {
            module: String,
            lookup_off: u64,
        }
        let mut sites: Vec<Site> = Vec::with_capacity(addrs.len());
        let mut pending: Vec<Option<Pending>> = Vec::with_capacity(addrs.len());
        let mut per_module: HashMap<String, Vec<u64>> = HashMap::new();
        for &addr in addrs {
            let delta = match kind {
                AddrKind::ReturnAddress if addr > 0 => 1,
                _ => 0,
            };
            let lookup = addr - delta;
            let mut site = Site {
                addr,
                module: None,
                module_offset: 0,
                build_id: None,
                function: None,
                function_offset: 0,
                file: None,
                line: None,
                inlined: vec![],
                naming: Naming::NoModule,
            };
            match maps.find(lookup) {
                None => {
                    site.module = Some("[unmapped]".into());
                    pending.push(None)
                }
                Some(m) if !m.is_file_backed() => {
                    // Pseudo mapping ([vdso], [heap], ...) or anonymous (None).
                    site.module = m.path.clone();
                    site.module_offset = addr - m.start;
                    pending.push(None)
                }
                Some(m) => {
                    let path = m.path.clone().unwrap();
                    let lookup_off = lookup - m.start + m.offset;
                    site.module = Some(path.clone());
                    site.module_offset = lookup_off + delta;
                    site.naming = Naming::Unnamed;
                    per_module.entry(path.clone()).or_default().push(lookup_off);
                    pending.push(Some(Pending {
                        module: path,
                        lookup_off,
                    }));
                }
            }
            sites.push(site);
        }

        // Second pass: resolve per module (batched, cached).
        let mut build_ids: HashMap<String, Option<String>> = HashMap::new();
        for (module, offs) in per_module {
            let open = maps.readable_path(&module);
            self.resolve_offsets(&open, &module, &offs);
            let bid = self
                .module(&open, &module)
                .facts
                .as_ref()
                .and_then(|f| f.build_id.clone());
            build_ids.insert(module, bid);
        }

        for (site, p) in sites.iter_mut().zip(pending) {
            let Some(p) = p else { continue };
            let delta = site.module_offset - p.lookup_off;
            site.build_id = build_ids.get(&p.module).cloned().flatten();
            if let Some(r) = self.cache.get(&(p.module.clone(), p.lookup_off)) {
                apply(site, r, delta);
            }
        }
        sites
    }

    /// Symbolize file offsets of the ELF file at `open_path`, reported as
    /// module `display_path`. `ReturnAddress` semantics are not applied.
    pub fn symbolize_file_offsets_at(
        &mut self,
        open_path: &Path,
        display_path: &str,
        file_offsets: &[u64],
    ) -> Vec<Site> {
        self.resolve_offsets(open_path, display_path, file_offsets);
        let bid = self
            .module(open_path, display_path)
            .facts
            .as_ref()
            .and_then(|f| f.build_id.clone());
        file_offsets
            .iter()
            .map(|&off| {
                let mut site = Site {
                    addr: off,
                    module: Some(display_path.to_string()),
                    module_offset: off,
                    build_id: bid.clone(),
                    function: None,
                    function_offset: 0,
                    file: None,
                    line: None,
                    inlined: vec![],
                    naming: Naming::Unnamed,
                };
                if let Some(r) = self.cache.get(&(self.cache_key(display_path), off)) {
                    apply(&mut site, r, 0);
                }
                site
            })
            .collect()
    }

    fn cache_key(&self, module: &str) -> String {
        module.to_string()
    }

    fn module(&mut self, open: &Path, display: &str) -> &Module {
        let debug_syms = self.debug_syms;
        self.modules.entry(display.to_string()).or_insert_with(|| {
            let facts = ElfFacts::load(open).ok().map(Rc::new);
            let debug_facts = if debug_syms {
                facts
                    .as_ref()
                    .and_then(|f| f.build_id.as_deref())
                    .and_then(debug_file_for_build_id)
                    .and_then(|p| ElfFacts::load(&p).ok())
                    .map(Rc::new)
            } else {
                None
            };
            Module { facts, debug_facts }
        })
    }

    /// Fill `self.cache` for `(display, off)` for every offset.
    fn resolve_offsets(&mut self, open: &Path, display: &str, offsets: &[u64]) {
        let key = self.cache_key(display);
        let module = self.module(open, display);
        let facts = module.facts.clone();
        let debug_facts = module.debug_facts.clone();
        let mut todo: Vec<u64> = Vec::new();
        for &off in offsets {
            if self.cache.contains_key(&(key.clone(), off)) || todo.contains(&off) {
                continue;
            }
            // PLT stubs first: ELF symbol tables have nothing there (or a
            // sizeless `_init` blazesym would stretch over them).
            if let Some(f) = &facts {
                if let Some(v) = f.file_offset_to_vaddr(off) {
                    if let Some(stub) = f.plt_stub_at(v) {
                        let r = Resolved {
                            naming: Naming::Plt,
                            function: Some(stub.name.clone()),
                            function_offset: v - stub.vaddr,
                            sym_vaddr: stub.vaddr,
                            file: None,
                            line: None,
                            inlined: vec![],
                        };
                        self.cache.insert((key.clone(), off), r);
                        continue;
                    }
                }
            }
            todo.push(off);
        }
        if todo.is_empty() {
            return;
        }
        let results = self.blazesym(open, &todo, self.debug_syms).or_else(|e| {
            if self.debug_syms {
                // e.g. a debug-link target whose CRC does not match: fall back
                // to ELF symbols rather than losing the whole module.
                self.blazesym(open, &todo, false)
            } else {
                Err(e)
            }
        });
        let results = results.unwrap_or_else(|_| vec![Resolved::unnamed(); todo.len()]);
        let tables: Vec<&ElfFacts> = facts
            .iter()
            .chain(debug_facts.iter())
            .map(|r| &**r)
            .collect();
        for (off, mut r) in todo.into_iter().zip(results) {
            if let (Naming::Symbol, Some(name)) = (r.naming, r.function.as_deref()) {
                if let Some(c) = canonical_name(name, r.sym_vaddr, &tables) {
                    r.function = Some(c);
                }
            }
            self.cache.insert((key.clone(), off), r);
        }
    }

    fn blazesym(
        &self,
        open: &Path,
        offs: &[u64],
        debug_syms: bool,
    ) -> Result<Vec<Resolved>, blazesym::Error> {
        let mut src = BzElf::new(open);
        src.debug_syms = debug_syms;
        let src = Source::Elf(src);
        let syms = self.inner.symbolize(&src, Input::FileOffset(offs))?;
        Ok(syms.into_iter().map(convert).collect())
    }
}

fn convert(s: Symbolized<'_>) -> Resolved {
    let sym = match s {
        Symbolized::Sym(sym) => sym,
        Symbolized::Unknown(_) => return Resolved::unnamed(),
    };
    // THE rule: no size => the symbol has no known extent; only an exact hit
    // on its start is trustworthy. Anything else would be "nearest
    // preceding name".
    match sym.size {
        None if sym.offset != 0 => return Resolved::unnamed(),
        Some(size) if sym.offset >= size && size != 0 => {
            // blazesym's ELF path never does this; DWARF functions with
            // non-contiguous ranges could. The name is still DWARF's answer.
        }
        _ => {}
    }
    let (file, line) = match &sym.code_info {
        Some(ci) => (Some(ci.to_path().to_string_lossy().into_owned()), ci.line),
        None => (None, None),
    };
    let inlined = sym
        .inlined
        .iter()
        .map(|f| InlinedFrame {
            function: f.name.to_string(),
            file: f
                .code_info
                .as_ref()
                .map(|ci| ci.to_path().to_string_lossy().into_owned()),
            line: f.code_info.as_ref().and_then(|ci| ci.line),
        })
        .collect();
    Resolved {
        naming: Naming::Symbol,
        function: Some(sym.name.to_string()),
        function_offset: sym.offset as u64,
        sym_vaddr: sym.addr,
        file,
        line,
        inlined,
    }
}

fn apply(site: &mut Site, r: &Resolved, delta: u64) {
    site.naming = r.naming;
    site.function = r.function.clone();
    site.function_offset = if r.function.is_some() {
        r.function_offset + delta
    } else {
        0
    };
    site.file = r.file.clone();
    site.line = r.line;
    site.inlined = r.inlined.clone();
}

/// One-shot: symbolize file offsets of the ELF at `path` (debug info on or
/// off). Handy for tests and for checking what `.dynsym` alone would say.
pub fn symbolize_elf_with(path: &Path, file_offsets: &[u64], debug_syms: bool) -> Vec<Site> {
    let mut s = Symbolizer::with_debug_syms(debug_syms);
    let display = path.to_string_lossy().into_owned();
    s.symbolize_file_offsets_at(path, &display, file_offsets)
}

#[cfg(test)]
mod tests {
    use super::elf::tests::{spawn_sleep, tempdir};
    use super::*;
    use crate::process::maps::ProcMaps;

    #[inline(never)]
    #[no_mangle]
    pub extern "C" fn rig_symbolize_c_abi_marker(x: u64) -> u64 {
        std::hint::black_box(x.wrapping_mul(31).rotate_left(7))
    }

    pub mod nested {
        pub struct Thing<T>(pub T);
        impl<T: Copy + Into<u64>> Thing<T> {
            #[inline(never)]
            pub fn marker_method(&self) -> u64 {
                std::hint::black_box(self.0.into().wrapping_mul(17))
            }
        }
    }

    #[test]
    fn malloc_with_debug_info_has_file_and_line() {
        let (child, maps) = spawn_sleep();
        let libc = maps.libc_path().unwrap();
        let sym = elf::lookup_symbol(&maps.readable_path(&libc), "malloc")
            .unwrap()
            .unwrap();
        let base = elf::load_base(
            &maps,
            &libc,
            &ElfFacts::load(&maps.readable_path(&libc)).unwrap(),
        )
        .unwrap();
        let addr = base + sym.vaddr + 0x10;
        let mut s = Symbolizer::new();
        let ip = s
            .symbolize(&maps, &[addr], AddrKind::InstructionPointer)
            .remove(0);
        eprintln!("{} {ip:?}", ip.label());
        assert_eq!(ip.naming, Naming::Symbol);
        // DWARF linkage name is __GI___libc_malloc; aliases at that address are
        // malloc/__libc_malloc (exported) and __malloc/__GI___libc_malloc
        // (local): the exported, strcmp-greatest one wins.
        assert_eq!(ip.function.as_deref(), Some("malloc"));
        assert_eq!(ip.function_offset, 0x10);
        assert_eq!(ip.module.as_deref(), Some(libc.as_str()));
        assert_eq!(ip.module_offset, sym.file_offset + 0x10);
        assert_eq!(
            ip.build_id,
            crate::process::maps::build_id(&maps.readable_path(&libc))
        );
        assert_eq!(ip.file.as_deref().map(basename), Some("malloc.c"));
        assert!(ip.line.unwrap() > 0);
        let fl = ip.file_line().unwrap();
        assert!(fl.starts_with("malloc.c:"), "{fl}");
        assert_eq!(ip.label(), format!("malloc+0x10 ({fl})"));

        // Independent line check: addr2line on the debug file at the same vaddr.
        let dbg =
            debug_file_for_build_id(ip.build_id.as_deref().unwrap()).expect("libc6-dbg installed");
        let out = std::process::Command::new("addr2line")
            .args([
                "-e",
                dbg.to_str().unwrap(),
                &format!("{:#x}", sym.vaddr + 0x10),
            ])
            .output()
            .unwrap();
        let a2l = String::from_utf8_lossy(&out.stdout);
        let a2l_line: u32 = a2l
            .trim()
            .rsplit(':')
            .next()
            .unwrap()
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(a2l.contains("malloc.c"), "{a2l}");
        assert_eq!(ip.line, Some(a2l_line), "addr2line: {a2l}");

        // Return-address semantics: look up addr-1, keep addr.
        let ra = s
            .symbolize(&maps, &[addr], AddrKind::ReturnAddress)
            .remove(0);
        assert_eq!(ra.addr, addr);
        assert_eq!(ra.function.as_deref(), Some("malloc"));
        assert_eq!(ra.function_offset, 0x10);
        assert_eq!(ra.module_offset, ip.module_offset);
        let prev = s
            .symbolize(&maps, &[addr - 1], AddrKind::InstructionPointer)
            .remove(0);
        assert_eq!(
            ra.line, prev.line,
            "return address reports the line of addr-1"
        );

        // Works from the snapshot after the process is gone (plain paths).
        drop(child);
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut fresh = Symbolizer::new();
        let after = fresh
            .symbolize(&maps, &[addr], AddrKind::InstructionPointer)
            .remove(0);
        assert_eq!(after, ip);
    }

    #[test]
    fn rust_symbols_are_demangled_and_c_abi_names_kept() {
        let maps = ProcMaps::read(std::process::id()).unwrap();
        let thing = nested::Thing(5u32);
        assert_eq!(thing.marker_method(), 85);
        let m = nested::Thing::<u32>::marker_method as *const () as usize as u64;
        let c = rig_symbolize_c_abi_marker as *const () as usize as u64;
        let mut s = Symbolizer::new();
        let sites = s.symbolize(&maps, &[m, m + 1, c], AddrKind::InstructionPointer);
        for site in &sites {
            eprintln!("{} {:?}", site.label(), site);
        }
        let f = sites[0].function.as_deref().unwrap();
        assert_eq!(sites[0].naming, Naming::Symbol);
        assert!(!f.starts_with("_ZN") && !f.starts_with("_R"), "{f}");
        assert!(f.contains("::"), "{f}");
        assert!(
            f.ends_with("nested::Thing<T>::marker_method")
                || f.ends_with("nested::Thing<u32>::marker_method"),
            "{f}"
        );
        assert!(
            !f.contains("::h") || !f.rsplit("::").next().unwrap().starts_with('h'),
            "no hash: {f}"
        );
        assert_eq!(sites[0].function_offset, 0);
        assert_eq!(sites[0].file.as_deref().map(basename), Some("mod.rs"));
        assert_eq!(sites[1].function, sites[0].function);
        assert_eq!(sites[1].function_offset, 1);
        assert_eq!(
            sites[2].function.as_deref(),
            Some("rig_symbolize_c_abi_marker")
        );
        // Same answer without DWARF (from .symtab, demangled by blazesym).
        let mut nodbg = Symbolizer::with_debug_syms(false);
        let nd = nodbg
            .symbolize(&maps, &[m], AddrKind::InstructionPointer)
            .remove(0);
        let g = nd.function.as_deref().unwrap();
        assert!(
            g.contains("marker_method")
                && g.contains("::")
                && !g.starts_with("_ZN")
                && !g.starts_with("_R"),
            "{g}"
        );
        assert_eq!(nd.file, None);
    }

    #[test]
    fn pseudo_and_anon_mappings_are_nomodule() {
        let maps = ProcMaps::read(std::process::id()).unwrap();
        let vdso = maps
            .mappings
            .iter()
            .find(|m| m.path.as_deref() == Some("[vdso]"))
            .unwrap();
        let stack = maps
            .mappings
            .iter()
            .find(|m| m.path.as_deref() == Some("[stack]"))
            .unwrap();
        let anon = maps
            .mappings
            .iter()
            .find(|m| m.path.is_none())
            .map(|m| m.start);
        let mut addrs = vec![vdso.start + 0x10, stack.start + 8, 8];
        addrs.extend(anon);
        let sites = Symbolizer::new().symbolize(&maps, &addrs, AddrKind::InstructionPointer);
        assert_eq!(sites.len(), addrs.len());
        assert!(sites.iter().all(|s| s.naming == Naming::NoModule));
        assert_eq!(sites[0].label(), "[vdso]+0x10");
        assert_eq!(sites[1].label(), "[stack]+0x8");
        assert_eq!(sites[2].label(), "0x8 [unmapped]");
        if let Some(a) = anon {
            assert_eq!(sites[3].label(), format!("{a:#x} [anon]"));
        }
    }

    #[test]
    fn sizeless_symbols_do_not_swallow_following_code() {
        // A C program's .symtab has `_init` without size; blazesym stretches
        // sizeless .symtab symbols up to the next one. We must not.
        let dir = tempdir("sizeless");
        let src = dir.join("s.c");
        std::fs::write(&src, "int main(void) { return 0; }\n").unwrap();
        let exe = dir.join("s");
        let out = std::process::Command::new("gcc")
            .args(["-O0", "-o", exe.to_str().unwrap(), src.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(out.status.success());
        let facts = ElfFacts::load(&exe).unwrap();
        let init = facts
            .syms
            .iter()
            .find(|s| s.name == "_init" && !s.dynamic)
            .unwrap();
        assert_eq!(init.size, 0, "precondition: _init is sizeless");
        let init_off = facts.vaddr_to_file_offset(init.vaddr).unwrap();
        let sites = symbolize_elf_with(&exe, &[init_off, init_off + 4], false);
        assert_eq!(
            sites[0].function.as_deref(),
            Some("_init"),
            "exact hit on a sizeless symbol is fine"
        );
        assert_eq!(sites[1].naming, Naming::Unnamed, "{:?}", sites[1]);
        assert_eq!(sites[1].label(), format!("s+{:#x} [unnamed]", init_off + 4));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn labels_and_serde() {
        let mut s = Site {
            addr: 0x7f00_0000_1234,
            module: Some("/srv/calib_server".into()),
            module_offset: 0x1234,
            build_id: None,
            function: Some("calib_copy_large".into()),
            function_offset: 0x1f,
            file: Some("/src/calib/calib_server.c".into()),
            line: Some(123),
            inlined: vec![],
            naming: Naming::Symbol,
        };
        assert_eq!(s.label(), "calib_copy_large+0x1f (calib_server.c:123)");
        assert_eq!(s.file_line().as_deref(), Some("calib_server.c:123"));
        s.naming = Naming::Plt;
        s.function = Some("memcpy".into());
        assert_eq!(s.label(), "memcpy@plt");
        s.naming = Naming::Unnamed;
        s.function = None;
        s.module = Some("/usr/lib/x86_64-linux-gnu/libc.so.6".into());
        s.module_offset = 0x1a2b3c;
        assert_eq!(s.label(), "libc.so.6+0x1a2b3c [unnamed]");
        let j = serde_json::to_value(&s).unwrap();
        assert_eq!(j["naming"], "unnamed");
        assert_eq!(serde_json::to_value(Naming::NoModule).unwrap(), "nomodule");
        assert_eq!(serde_json::to_value(Naming::Plt).unwrap(), "plt");
    }

    #[test]
    fn results_are_cached_per_module_offset() {
        let (_child, maps) = spawn_sleep();
        let libc = maps.libc_path().unwrap();
        let base = maps
            .objects()
            .into_iter()
            .find(|o| o.path == libc)
            .unwrap()
            .base;
        let sym = elf::lookup_symbol(&maps.readable_path(&libc), "free")
            .unwrap()
            .unwrap();
        let mut s = Symbolizer::new();
        let a = base + sym.vaddr;
        let t0 = std::time::Instant::now();
        let first = s.symbolize(&maps, &[a, a + 2, a], AddrKind::InstructionPointer);
        let cold = t0.elapsed();
        let t1 = std::time::Instant::now();
        let again = s.symbolize(&maps, &[a, a + 2, a], AddrKind::InstructionPointer);
        let warm = t1.elapsed();
        assert_eq!(first, again);
        assert_eq!(first[0], first[2]);
        assert_eq!(first[0].function.as_deref(), Some("free"));
        assert_eq!(s.cache.len(), 2);
        assert!(warm < cold, "warm {warm:?} vs cold {cold:?}");
    }
}
