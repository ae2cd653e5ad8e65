//! Symbolization: absolute addresses (from a maps snapshot) -> true names.
//!
//! Rules:
//! - an address outside every symbol's extent is NEVER given the nearest
//!   preceding name: it becomes `Naming::Unnamed` (`module+0xoffset`);
//! - PLT stubs are named `sym@plt` from the relocations they jump through;
//! - DWARF (incl. `/usr/lib/debug/.build-id/..` files), inlined frames,
//!   file:line and Rust/C++ demangling come from blazesym.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use blazesym::symbolize::source::{Elf as BzElf, Source};
use blazesym::symbolize::{Input, Symbolized, Symbolizer as BzSymbolizer};
use serde::{Deserialize, Serialize};

use crate::elf::ElfFacts;
use crate::process::maps::{basename, ProcMaps};
use crate::runtime;

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
    /// Code a JIT compiler wrote (anonymous executable memory), named from
    /// the runtime's perf map (`runtime::jit`): `name+0xoff [jit]`.
    Jit,
    /// An interpreter's frame (a Python function), named from its code
    /// object: `module` is the language, `addr` the code object.
    Interpreted,
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
            Naming::Jit => format!(
                "{}+{:#x} [jit]",
                self.function.as_deref().unwrap_or("?"),
                self.function_offset
            ),
            Naming::Interpreted => {
                let f = self.function.as_deref().unwrap_or("?");
                let m = self.module.as_deref().unwrap_or("?");
                match self.file_line() {
                    Some(fl) => format!("{f} ({fl}) [{m}]"),
                    None => format!("{f} [{m}]"),
                }
            }
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
    /// Each process's perf map, read once per symbolizer.
    jit: HashMap<u32, Option<Rc<runtime::PerfMap>>>,
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
            jit: HashMap::new(),
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
                Some(m) if runtime::jit::is_jit_code(m) => {
                    // Code a JIT wrote: named from its perf map, when the
                    // runtime writes one.
                    site.module_offset = addr - m.start;
                    let map = self
                        .jit
                        .entry(maps.pid)
                        .or_insert_with(|| runtime::PerfMap::of_process(maps.pid).map(Rc::new));
                    if let Some((name, off)) = map.as_ref().and_then(|p| p.lookup(lookup)) {
                        let shown = runtime::jit_function(maps, name);
                        site.function = Some(shown.unwrap_or_else(|| name.to_string()));
                        site.function_offset = off + delta;
                        site.naming = Naming::Jit;
                    }
                    pending.push(None)
                }
                Some(m) if !m.is_file_backed() => {
                    // Pseudo mapping ([vdso], [heap], ...) or anonymous (None).
                    site.module = m.path.clone();
                    site.module_offset = addr - m.start;
                    // The vDSO's functions by its own symbols (linked at 0:
                    // the offset in the mapping is the address).
                    if m.path.as_deref() == Some(crate::process::vdso::PATH) {
                        if let Some((name, off)) = crate::process::vdso::symbol_at(lookup - m.start)
                        {
                            site.function = Some(name.to_string());
                            site.function_offset = off + delta;
                            site.naming = Naming::Symbol;
                        }
                    }
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
        // A runtime that names its code itself (Go, from its function
        // table, stripped or not) names it here; code its table does not
        // cover (C linked in with cgo) is named below, from the ELF
        // symbols and DWARF as in any other module.
        if let Some(f) = &facts {
            let module = runtime::Module {
                kind: runtime::ModuleKind::of(display, f),
                facts: f,
            };
            if let Some(names) = runtime::names(&module, open) {
                let mut rest = Vec::new();
                for off in todo {
                    match f
                        .file_offset_to_vaddr(off)
                        .and_then(|v| Some(resolved_of(names.name_at(v)?, v)))
                    {
                        Some(r) => {
                            self.cache.insert((key.clone(), off), r);
                        }
                        None => rest.push(off),
                    }
                }
                if rest.is_empty() {
                    return;
                }
                todo = rest;
            }
        }
        let results = self
            .blazesym(&self.inner, open, &todo, self.debug_syms)
            .or_else(|e| {
                if self.debug_syms {
                    // e.g. a debug-link target whose CRC does not match: the
                    // binary's own DWARF (no debug directories searched), then
                    // ELF symbols, rather than losing the whole module.
                    own_dwarf(open, &todo)
                        .or_else(|_| self.blazesym(&self.inner, open, &todo, false))
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
            if r.naming == Naming::Symbol && r.sym_vaddr == 0 {
                entry_of_ranged(&mut r, off, &tables);
            }
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
        symbolizer: &BzSymbolizer,
        open: &Path,
        offs: &[u64],
        debug_syms: bool,
    ) -> Result<Vec<Resolved>, blazesym::Error> {
        let mut src = BzElf::new(open);
        src.debug_syms = debug_syms;
        let src = Source::Elf(src);
        let syms = unpanicked(|| symbolizer.symbolize(&src, Input::FileOffset(offs)))?;
        Ok(syms.into_iter().map(convert).collect())
    }
}

/// blazesym's DWARF readers trust the file's indices (0.2.7 unwraps a file
/// index of `.debug_line`): a target's corrupt debug info must not take rig
/// down. A panic there is that module's error, as an unreadable file is.
fn unpanicked<T>(f: impl FnOnce() -> Result<T, blazesym::Error>) -> Result<T, blazesym::Error> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|_| {
        Err(std::io::Error::other("blazesym panicked reading this module's debug info").into())
    })
}

/// What the binary's own DWARF says, when blazesym refused the module
/// because of its `.gnu_debuglink` (a stale or garbage file of that name
/// beside the binary: its CRC does not match, or it is no ELF). blazesym
/// looks for the link's target in the binary's own (canonical) directory
/// whatever the debug directories are, so it is given a copy of the binary
/// in a memfd, which has no directory to find that name in. Rare (a broken
/// link), so the copy and a fresh symbolizer (blazesym caches by path, and
/// fd numbers are reused) are cheap enough.
fn own_dwarf(open: &Path, offs: &[u64]) -> Result<Vec<Resolved>, blazesym::Error> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: a plain syscall with a NUL-terminated name; the fd is owned
    // by the File made from it.
    let fd = unsafe { libc::memfd_create(c"rig-own-dwarf".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: fd is a new, valid descriptor nobody else owns.
    let mut copy = unsafe { std::fs::File::from_raw_fd(fd) };
    std::io::copy(&mut std::fs::File::open(open)?, &mut copy)?;
    let by_fd = PathBuf::from(format!("/proc/self/fd/{}", copy.as_raw_fd()));
    let symbolizer = BzSymbolizer::builder()
        .enable_code_info(true)
        .enable_inlined_fns(true)
        .enable_demangling(true)
        .set_debug_dirs(Some(Vec::<PathBuf>::new()))
        .build();
    let src = Source::Elf(BzElf::new(&by_fd));
    let syms = unpanicked(|| symbolizer.symbolize(&src, Input::FileOffset(offs)))?;
    Ok(syms.into_iter().map(convert).collect())
}

/// The entry of a function DWARF named without one (`convert`): its sized
/// symbol of that name holding the address, in the module's or its debug
/// file's table; without one the name stands with no offset.
fn entry_of_ranged(r: &mut Resolved, off: u64, tables: &[&ElfFacts]) {
    let Some(name) = r.function.as_deref() else {
        return;
    };
    let Some(v) = tables.iter().find_map(|t| t.file_offset_to_vaddr(off)) else {
        r.function_offset = 0;
        return;
    };
    if let Some((entry, _)) = tables.iter().find_map(|t| t.extent_holding(name, v)) {
        r.sym_vaddr = entry;
        r.function_offset = v - entry;
        return;
    }
    r.function_offset = 0;
}

/// A name a runtime's own table gave link-time address `v`.
fn resolved_of(n: runtime::Named, v: u64) -> Resolved {
    Resolved {
        naming: Naming::Symbol,
        function: Some(n.function),
        function_offset: v - n.entry,
        sym_vaddr: n.entry,
        file: n.file,
        line: n.line,
        inlined: n
            .inlined
            .into_iter()
            .map(|(function, file, line)| InlinedFrame {
                function,
                file,
                line,
            })
            .collect(),
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
    // blazesym gives a DWARF function whose code lies in several ranges
    // (glibc's pthread_create and its `.cold` part) address 0 and no size:
    // its name is DWARF's range lookup, exact; its entry is found in the
    // symbol tables afterwards (`entry_of_ranged`).
    let ranged = sym.addr == 0 && sym.size.is_none() && sym.code_info.is_some();
    match sym.size {
        None if sym.offset != 0 && !ranged => return Resolved::unnamed(),
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
pub(crate) mod elf_tests;
#[cfg(test)]
mod tests;
