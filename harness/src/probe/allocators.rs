//! Which allocators serve a process, found the way the dynamic linker binds
//! them, and the entry points rig probes for each.
//!
//! In: a pid and its memory map. Out: a [`Discovery`]: the allocator that
//! serves `malloc`/`free`/`calloc`/`realloc` (read from the C library's and
//! the executable's GOT slots in the live process: what the dynamic linker
//! bound, interposition included; a static definition in the executable
//! otherwise), every other allocator layer the executable or a mapped
//! library contains (Rust's allocator shims, a statically linked mimalloc or
//! jemalloc, CPython's PyObject/PyMem APIs), each with the entry points to
//! probe, and every allocator rig recognises but has no probes for.
//!
//! Allocators of names rig does not know (a private arena behind a custom
//! API) are out of reach: nothing here can tell them from ordinary code.
//! One that serves `malloc` itself is caught, though, because rig reads
//! who serves `malloc`.

use serde::Serialize;

use crate::elf::{load_base, ElfFacts, R_X86_64_GLOB_DAT, R_X86_64_JUMP_SLOT};
use crate::process::maps::{basename, ProcMaps};
use crate::runtime::alloc::{owned, AllocFamily, Entry, CXX_API, C_API, C_NAMES};
use crate::runtime::{self, Allocator, Module, ModuleKind};

/// An allocator layer found in one module of a process.
#[derive(Clone, Debug, PartialEq)]
pub struct Layer {
    pub family: AllocFamily,
    /// The module as in maps (the executable for static allocators).
    pub module: String,
    /// Why rig thinks this allocator is there and in use.
    pub how: String,
    pub entries: Vec<Entry>,
    /// The module's kind (where its runtime says its entry points are).
    pub kind: ModuleKind,
    /// Whether the allocator is linked into the executable, which keeps
    /// only the entry points the program calls: one it lacks is absent,
    /// not an error.
    pub statically: bool,
}

/// An allocator the process maps or contains that rig does not probe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Unprobed {
    pub pid: u32,
    /// The allocator's name (a family rig knows, or what its symbols say).
    pub allocator: String,
    pub module: String,
    pub why: String,
}

/// What discovery found in one process.
#[derive(Clone, Debug, Default)]
pub struct Discovery {
    /// Layers to probe, the one serving malloc first.
    pub layers: Vec<Layer>,
    pub unprobed: Vec<Unprobed>,
}

/// Read a GOT slot of `module` for `symbol` in the live process: the
/// address the dynamic linker bound it to. A lazy slot not yet bound points
/// back into `module`'s own PLT and says nothing; a slot bound to `module`'s
/// own definition (libc's malloc when nothing interposes) does.
fn bound_slot(pid: u32, maps: &ProcMaps, module: &str, symbol: &str) -> Option<u64> {
    let facts = ElfFacts::shared(&maps.readable_path(module)).ok()?;
    let base = load_base(maps, module, &facts)?;
    let own = facts
        .lookup_symbol(symbol)
        .map(|s| base.wrapping_add(s.vaddr));
    facts
        .relocs
        .iter()
        .filter(|r| {
            matches!(r.r_type, R_X86_64_JUMP_SLOT | R_X86_64_GLOB_DAT)
                && r.sym.as_deref() == Some(symbol)
        })
        .find_map(|r| {
            let v = super::ifunc::read_u64(pid, base.wrapping_add(r.offset)).ok()?;
            let (m, _) = maps.file_offset(v)?;
            (m.path.as_deref() != Some(module) || Some(v) == own).then_some(v)
        })
}

/// The module that serves `symbol` for the whole process, and how that was
/// established: the C library's GOT slot (libc calls malloc through it, so
/// the dynamic linker binds it to the first definition in lookup order),
/// else the executable's, else the executable's own definition, else the
/// C library's.
pub fn server_of(
    pid: u32,
    maps: &ProcMaps,
    exe: Option<&str>,
    symbol: &str,
) -> Option<(String, String)> {
    let libc = runtime::c_library(pid, maps).map(|(p, _)| p);
    for module in [libc.as_deref(), exe].into_iter().flatten() {
        if let Some(v) = bound_slot(pid, maps, module, symbol) {
            let (m, _) = maps.file_offset(v)?;
            let path = m.path.clone()?;
            let mut how = format!(
                "{}'s GOT slot for {symbol} -> {v:#x} in {}",
                basename(module),
                basename(&path)
            );
            // A stub whose own slot is not bound yet says nothing.
            if let Some((path, _)) = follow_canonical_plt(pid, maps, symbol, path, v, &mut how) {
                return Some((path, how));
            }
        }
    }
    for module in [exe, libc.as_deref()].into_iter().flatten() {
        let facts = ElfFacts::shared(&maps.readable_path(module)).ok()?;
        if facts.lookup_symbol(symbol).is_some() {
            return Some((
                module.to_string(),
                format!("defined in {} (no bound GOT slot read)", basename(module)),
            ));
        }
    }
    None
}

/// Where a call to `v`, an address in `path`, really goes. A non-PIE
/// executable that takes `symbol`'s address defines it as its own
/// `symbol@plt` stub (the canonical PLT entry, so that the address is the
/// same everywhere), and the dynamic linker binds every other module's slot
/// to that stub, which jumps on through the executable's own GOT slot: follow
/// such stubs (through the live process's slots) to the code they reach,
/// noting each step in `how`. `None` when a stub's slot is not bound yet.
fn follow_canonical_plt(
    pid: u32,
    maps: &ProcMaps,
    symbol: &str,
    mut path: String,
    mut v: u64,
    how: &mut String,
) -> Option<(String, u64)> {
    // A chain of stubs longer than this is not one the dynamic linker makes.
    for _ in 0..4 {
        let facts = ElfFacts::shared(&maps.readable_path(&path)).ok()?;
        let base = load_base(maps, &path, &facts)?;
        let stub = facts.plt_stub_at(v.wrapping_sub(base));
        if stub.is_none_or(|s| s.name.split('@').next() != Some(symbol)) {
            return Some((path, v));
        }
        let next = bound_slot(pid, maps, &path, symbol)?;
        let (m, _) = maps.file_offset(next)?;
        let next_path = m.path.clone()?;
        how.push_str(&format!(
            ", the canonical {symbol}@plt of {}, whose GOT slot -> {next:#x} in {}",
            basename(&path),
            basename(&next_path)
        ));
        (path, v) = (next_path, next);
    }
    None
}

/// Find the allocators of `pid`.
pub fn discover(pid: u32, maps: &ProcMaps) -> Discovery {
    let exe = maps.exe(pid);
    let mut d = Discovery::default();
    let server = server_of(pid, maps, exe.as_deref(), "malloc");
    if let Some((module, how)) = &server {
        d.add_server(pid, maps, module, how);
    }
    for o in maps.objects() {
        let path = o.path;
        if path.starts_with('[') || !o.executable {
            continue;
        }
        let open = maps.readable_path(&path);
        let (Ok(facts), Ok(kind)) = (ElfFacts::shared(&open), ModuleKind::of_file(&path, &open))
        else {
            continue;
        };
        let m = Module {
            kind,
            facts: &facts,
        };
        let serves_malloc = server.as_ref().is_some_and(|(s, _)| *s == path);
        d.add_object(pid, &path, &m, serves_malloc);
    }
    if let Some(cxx) = libstdcxx_layer(maps, &d.layers) {
        d.layers.push(cxx);
    }
    d
}

impl Discovery {
    /// The allocator serving malloc (`module`, found `how`): the first
    /// layer, or unprobed when it is none rig knows.
    fn add_server(&mut self, pid: u32, maps: &ProcMaps, module: &str, how: &str) {
        let open = maps.readable_path(module);
        let found = match (ElfFacts::shared(&open), ModuleKind::of_file(module, &open)) {
            (Ok(facts), Ok(kind)) => runtime::malloc_api(&Module {
                kind,
                facts: &facts,
            })
            .map(|api| (api, kind)),
            _ => None,
        };
        let Some(((family, mut entries), kind)) = found else {
            self.unprobed.push(Unprobed {
                pid,
                allocator: format!("unknown allocator in {}", basename(module)),
                module: module.to_string(),
                why: format!(
                    "malloc is served by {} ({how}), which is none of the allocators rig probes \
                     ({})",
                    basename(module),
                    runtime::alloc::MALLOC_SERVERS.map(|f| f.name()).join(", ")
                ),
            });
            return;
        };
        // A C library linked into the executable keeps only what the
        // program calls: an entry point it lacks (calloc never linked in)
        // is absent, not an error.
        let statically = matches!(kind, ModuleKind::StaticC { .. });
        if statically {
            for e in &mut entries {
                e.3 = false;
            }
        }
        // jemalloc, tcmalloc and mimalloc libraries export the C names as
        // well; probe those first so a call through them is named as the
        // caller wrote it.
        if !family.is_c_library() {
            let mut c = owned(C_API, "");
            c.extend(
                entries
                    .into_iter()
                    .filter(|e| !C_NAMES.contains(&e.0.as_str())),
            );
            c.extend(owned(CXX_API, ""));
            entries = c;
        }
        self.layers.push(Layer {
            family,
            module: module.to_string(),
            how: if statically {
                format!("serves malloc ({how}), {family}'s, linked into the executable")
            } else {
                format!("serves malloc ({how})")
            },
            entries,
            kind,
            statically,
        });
    }

    /// What one executable mapping adds: a second allocator's own API
    /// (unless `path` serves malloc), the layers its runtimes carry
    /// (Rust's shims, CPython's APIs, Go's heap) and the allocators rig
    /// knows but does not probe.
    fn add_object(&mut self, pid: u32, path: &str, m: &Module<'_>, serves_malloc: bool) {
        if !serves_malloc {
            // A second allocator that does not serve malloc: probe its own
            // API (a static mimalloc or prefixed jemalloc behind a Rust
            // #[global_allocator]). The C library's malloc, interposed by
            // another, is simply not called.
            if let Some((family, entries)) =
                runtime::malloc_api(m).filter(|(f, _)| !f.is_c_library())
            {
                // A static copy keeps only the entry points its program
                // calls (tikv-jemallocator never calls _rjem_free): none
                // is required, but at least one must go in.
                let own: Vec<Entry> = entries
                    .into_iter()
                    .filter(|e| !C_NAMES.contains(&e.0.as_str()))
                    .map(|e| (e.0, e.1, e.2, false))
                    .collect();
                self.layers.push(Layer {
                    family,
                    module: path.to_string(),
                    how: format!("{family}'s own API in {}", basename(path)),
                    entries: own,
                    kind: m.kind,
                    statically: false,
                });
            }
        }
        for found in runtime::runtimes(m).flat_map(|r| r.allocators(m)) {
            match found {
                Allocator::Probe {
                    family,
                    entries,
                    how,
                } => self.layers.push(Layer {
                    family,
                    module: path.to_string(),
                    how: how.replace("{module}", basename(path)),
                    entries,
                    kind: m.kind,
                    statically: false,
                }),
                Allocator::Unprobed { allocator, why } => self.unprobed.push(Unprobed {
                    pid,
                    allocator,
                    module: path.to_string(),
                    why: format!("{} {why}", basename(path)),
                }),
            }
        }
    }
}

/// libstdc++'s operator new, unless the serving allocator (the first of
/// `layers`) defines its own: jemalloc, tcmalloc and mimalloc do, and the
/// dynamic linker binds theirs.
fn libstdcxx_layer(maps: &ProcMaps, layers: &[Layer]) -> Option<Layer> {
    let serves_new = layers.first().is_some_and(|l| {
        l.family != AllocFamily::Glibc
            && ElfFacts::shared(&maps.readable_path(&l.module))
                .is_ok_and(|f| f.lookup_symbol("_Znwm").is_some())
    });
    if serves_new {
        return None;
    }
    let cxx = maps.find_object(|p| basename(p).starts_with("libstdc++.so"))?;
    Some(Layer {
        family: AllocFamily::Cxx,
        kind: ModuleKind::of_path(maps, &cxx).unwrap_or(ModuleKind::Native),
        module: cxx,
        how: "operator new/delete in libstdc++".to_string(),
        entries: owned(CXX_API, ""),
        statically: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn the_c_library_is_glibc_by_its_internal_names() {
        let libc = "/lib/x86_64-linux-gnu/libc.so.6";
        let facts = ElfFacts::shared(Path::new(libc)).unwrap();
        let m = Module {
            kind: ModuleKind::of(libc, &facts),
            facts: &facts,
        };
        let (family, entries) = runtime::malloc_api(&m).unwrap();
        assert_eq!(family, AllocFamily::Glibc);
        assert_eq!(entries[0].0, "malloc");
    }
}
