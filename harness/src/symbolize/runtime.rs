//! What kind of code a mapped module holds, decided once per module: the
//! one seam where runtimes differ.
//!
//! In: a mapping of a process (its path as in maps, the file as mapped).
//! Out: a [`ModuleKind`], which the three consumers read and nothing else
//! re-derives:
//!
//! | kind | entry points (`probe::allocators`, `probe::attach`) | unwinding (`probe::unwind`) | naming (`symbolize`) |
//! |---|---|---|---|
//! | `CLibrary` (glibc's or musl's libc.so) | malloc & co, memcpy/memmove/memset, pthread mutexes, in the library | `.eh_frame`; musl's code (none): the stack height analysis of its machine code | `.symtab`, DWARF, debuglink, `.gnu_debugdata` |
//! | `StaticC` (an executable with its C library linked in) | the same names, in the executable | as above | as above |
//! | `Go` | `runtime.mallocgc` (size in RAX, the register ABI), GC cycles; never a return probe | rows from `.gopclntab`'s pcsp tables | `.gopclntab` (stripped or not) |
//! | `Native` (any other ELF code) | by the allocator's own names (jemalloc, Rust shims...) | `.eh_frame` | `.symtab`, DWARF, debuglink, `.gnu_debugdata` |
//! | `Jit` (anonymous executable memory) | none | none: a stack reaching it ends, marked `JIT code` | `/tmp/perf-PID.map` |

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use serde::Serialize;

use super::elf::ElfFacts;
use super::gopclntab::{GoTable, GoVersion};
use crate::process::maps::{basename, Mapping};

/// Which C library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Libc {
    Glibc,
    Musl,
}

impl std::fmt::Display for Libc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Libc::Glibc => "glibc",
            Libc::Musl => "musl",
        })
    }
}

/// The kind of code one mapped module holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum ModuleKind {
    /// The C library as a shared object.
    CLibrary { libc: Libc },
    /// An executable that carries its own C library (linked statically).
    StaticC { libc: Libc },
    /// Go code (an executable, or a c-shared library), with the version
    /// its build info names (`None`: none recorded).
    Go { version: Option<GoVersion> },
    /// Other native code (C, C++, Rust over a dynamic C library).
    Native,
    /// Anonymous executable memory: code a JIT compiler wrote.
    Jit,
}

impl ModuleKind {
    /// The kind of a module from its ELF facts and path as in maps.
    pub fn of(path: &str, facts: &ElfFacts) -> ModuleKind {
        if facts.has_section(".gopclntab") || facts.has_section(".go.buildinfo") {
            return ModuleKind::Go { version: None };
        }
        let defines = |s: &str| facts.lookup_symbol(s).is_some();
        // glibc's libc.so exports gnu_get_libc_version; a static glibc
        // program links it only if called, but always its start code's
        // __libc_setup_tls and _dl_aux_init.
        let libc = if defines("gnu_get_libc_version")
            || defines("__libc_setup_tls")
            || defines("_dl_aux_init")
        {
            Some(Libc::Glibc)
        } else if defines("__libc_start_main") && defines("malloc") {
            // musl's libc.so is its dynamic linker too; a static musl
            // program defines __libc_start_main and no glibc marker.
            Some(Libc::Musl)
        } else {
            None
        };
        let b = basename(path);
        let shared_libc =
            b.starts_with("libc.so") || b.starts_with("libc.musl") || b.starts_with("ld-musl");
        match libc {
            Some(libc) if shared_libc => ModuleKind::CLibrary { libc },
            Some(libc) if defines("malloc") && defines("__libc_start_main") => {
                ModuleKind::StaticC { libc }
            }
            _ => ModuleKind::Native,
        }
    }

    /// The kind of the module mapped as `path`, read from the file at
    /// `open` (parsed once per file): a Go module with its version.
    pub fn of_file(path: &str, open: &Path) -> Result<ModuleKind> {
        let facts = ElfFacts::shared(open)?;
        Ok(match ModuleKind::of(path, &facts) {
            ModuleKind::Go { .. } => ModuleKind::Go {
                version: go_version(open),
            },
            k => k,
        })
    }

    /// The kind of one mapping (`open`: its file as mapped); `None` for
    /// data and pseudo mappings (`[heap]`, `[vdso]`...) and unreadable files.
    pub fn of_mapping(m: &Mapping, open: &Path) -> Option<ModuleKind> {
        if let Some(k) = ModuleKind::of_jit(m) {
            return Some(k);
        }
        let path = m.path.as_deref().filter(|_| m.is_file_backed())?;
        ModuleKind::of_file(path, open).ok()
    }

    /// `Jit` for anonymous executable memory (no file to read), else
    /// `None`.
    pub fn of_jit(m: &Mapping) -> Option<ModuleKind> {
        (m.is_exec() && m.path.is_none()).then_some(ModuleKind::Jit)
    }

    pub fn is_go(self) -> bool {
        matches!(self, ModuleKind::Go { .. })
    }

    /// Whether the code at link-time `vaddr` of a module of this kind
    /// (`facts`: its ELF facts), in `function`, is the C library's, so that
    /// a stack's user site lies past it: all of a `CLibrary`; in a static
    /// musl executable, the code `.eh_frame` does not describe (musl's
    /// libc.a is built without unwind tables, the program's own code is
    /// not); in a static glibc executable, whose C library has unwind tables
    /// like the rest, a function named as glibc's libc.so exports one
    /// (`send`, `recv`, `syscall`, `mmap64`): a program linked statically
    /// cannot define a name its C library defines too.
    pub fn is_c_library_code(self, facts: &ElfFacts, vaddr: u64, function: Option<&str>) -> bool {
        match self {
            ModuleKind::CLibrary { .. } => true,
            ModuleKind::StaticC { libc: Libc::Musl } => !facts.has_cfi(vaddr),
            ModuleKind::StaticC { libc: Libc::Glibc } => {
                function.is_some_and(|f| glibc_exports().contains(f))
            }
            _ => false,
        }
    }
}

/// The functions glibc's libc.so exports, read once from the one rig itself
/// runs on (rig is a glibc program, so it is mapped); empty if it cannot be
/// read.
fn glibc_exports() -> &'static std::collections::HashSet<String> {
    static NAMES: std::sync::OnceLock<std::collections::HashSet<String>> =
        std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
        let Some(path) = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| basename(p).starts_with("libc.so"))
        else {
            return Default::default();
        };
        let Ok(facts) = ElfFacts::shared(Path::new(path)) else {
            return Default::default();
        };
        facts
            .exported_function_names()
            .map(str::to_string)
            .collect()
    })
}

/// The names a JIT runtime gives its code in `/tmp/perf-PID.map` (written
/// by `node --perf-basic-prof`, the JVM's perf-map agents, LuaJIT,
/// .NET with `DOTNET_PerfMapEnabled=1`...): one `START SIZE NAME` line per
/// function, addresses in hex (with or without `0x`).
#[derive(Debug, Default)]
pub struct PerfMap {
    /// (start, size, name), sorted by start.
    entries: Vec<(u64, u64, String)>,
}

impl PerfMap {
    pub fn parse(text: &str) -> PerfMap {
        let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
        let mut entries: Vec<(u64, u64, String)> = text
            .lines()
            .filter_map(|l| {
                let mut it = l.splitn(3, ' ');
                let start = hex(it.next()?)?;
                let size = hex(it.next()?)?;
                let name = it.next()?.trim();
                (size > 0 && !name.is_empty()).then(|| (start, size, name.to_string()))
            })
            .collect();
        // A later line for the same start is newer code there (a JIT that
        // reuses memory writes it again): the last one wins.
        entries.reverse();
        entries.sort_by_key(|e| e.0);
        entries.dedup_by_key(|e| e.0);
        PerfMap { entries }
    }

    /// The map of process `pid`, read in its own mount namespace (a
    /// container's /tmp) under the pid it knows itself by; `None` when it
    /// writes none.
    pub fn of_process(pid: u32) -> Option<PerfMap> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        let ns_pid = status
            .lines()
            .find_map(|l| l.strip_prefix("NSpid:"))
            .and_then(|l| l.split_whitespace().last())
            .and_then(|p| p.parse::<u32>().ok())
            .unwrap_or(pid);
        let text =
            std::fs::read_to_string(format!("/proc/{pid}/root/tmp/perf-{ns_pid}.map")).ok()?;
        Some(PerfMap::parse(&text))
    }

    /// The function holding `addr`, and `addr`'s offset in it: only inside
    /// a function's stated size, never the nearest one before.
    pub fn lookup(&self, addr: u64) -> Option<(&str, u64)> {
        let i = self.entries.partition_point(|e| e.0 <= addr);
        let (start, size, name) = self.entries.get(i.checked_sub(1)?)?;
        (addr < start + size).then(|| (name.as_str(), addr - start))
    }
}

/// A Go module's function table, parsed once per file per rig process
/// (keyed by the file's identity, as `ElfFacts::shared`).
pub fn go_table(open: &Path) -> Result<Arc<GoTable>> {
    type Key = (u64, u64, u64, i64, i64);
    static CACHE: Mutex<Option<HashMap<Key, Arc<GoTable>>>> = Mutex::new(None);
    let m = std::fs::metadata(open).with_context(|| format!("reading {}", open.display()))?;
    let key = (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec());
    if let Some(t) = CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .get(&key)
    {
        return Ok(t.clone());
    }
    let data = std::fs::read(open).with_context(|| format!("reading {}", open.display()))?;
    let t = GoTable::parse(&data)
        .with_context(|| format!("parsing .gopclntab of {}", open.display()))?
        .with_context(|| format!("{} has no .gopclntab", open.display()))?;
    let t = Arc::new(t);
    CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashMap::new)
        .insert(key, t.clone());
    Ok(t)
}

/// The Go version of the module at `open` (from its build info).
pub fn go_version(open: &Path) -> Option<GoVersion> {
    go_table(open).ok()?.version
}

/// Go functions that start a stack, as Go's own tracebacks treat them
/// (`runtime/traceback.go`, `topofstack`): a goroutine's first frame
/// (`goexit`), a thread's (`mstart`, `rt0_go`), and the switches to the
/// thread's system stack (`mcall`, `systemstack`, `morestack`), beyond
/// which the frames are on another stack; and a signal's handler entry and
/// return trampoline (`sigtramp`, `sigreturn`), beyond which lies the
/// kernel's signal frame, whose interrupted frames rig does not read.
/// (`asmcgocall`, the switch to the system stack to call C, is not one:
/// the walk crosses it back to the goroutine's stack, see
/// `probe::unwind`.)
pub const GO_STACK_TOPS: &[&str] = &[
    "runtime.goexit",
    "runtime.mstart",
    "runtime.rt0_go",
    "runtime.mcall",
    "runtime.systemstack",
    "runtime.morestack",
    "runtime.sigtramp",
    "runtime.cgoSigtramp",
    "runtime.sigreturn",
    "runtime.sigreturn__sigaction",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_perf_map_names_only_inside_each_functions_size_and_the_newest_wins() {
        let m = PerfMap::parse(
            "7f0000001000 20 LazyCompile:*handler /srv/app.js:3\n\
             0x7f0000002000 0x10 old\n\
             7f0000002000 8 new\n\
             garbage line\n",
        );
        assert_eq!(
            m.lookup(0x7f00_0000_1000),
            Some(("LazyCompile:*handler /srv/app.js:3", 0))
        );
        assert_eq!(
            m.lookup(0x7f00_0000_101f),
            Some(("LazyCompile:*handler /srv/app.js:3", 0x1f))
        );
        assert_eq!(m.lookup(0x7f00_0000_1020), None, "past its size");
        assert_eq!(m.lookup(0x7f00_0000_0fff), None);
        assert_eq!(m.lookup(0x7f00_0000_2004), Some(("new", 4)));
        assert_eq!(m.lookup(0x7f00_0000_2009), None, "the newest size holds");
    }

    #[test]
    fn the_c_library_and_a_plain_program_are_told_apart() {
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let facts = ElfFacts::load(Path::new(libc)).unwrap();
        assert_eq!(
            ModuleKind::of(libc, &facts),
            ModuleKind::CLibrary { libc: Libc::Glibc }
        );
        let exe = std::env::current_exe().unwrap();
        let facts = ElfFacts::load(&exe).unwrap();
        assert_eq!(
            ModuleKind::of(&exe.display().to_string(), &facts),
            ModuleKind::Native
        );
    }
}
