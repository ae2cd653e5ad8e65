//! The per-process uprobe families: the allocators a process uses, its
//! copy routines (resolved IFUNC implementations) and pthread mutexes;
//! a runtime's own copy and lock routines are `own`'s.

use super::*;
use crate::runtime::alloc::Entry;

/// The implementations of the joining copy APIs (`CopyApi::joins`) of
/// the C library at `libc_maps_path` that the process `pid` runs.
pub(super) fn copy_joiners(
    pid: u32,
    maps: &ProcMaps,
    libc_maps_path: &str,
    joins: &[&str],
) -> Vec<crate::probe::ifunc::ResolvedImpl> {
    joins
        .iter()
        .filter_map(|api| crate::probe::ifunc::resolve_ifunc(pid, maps, libc_maps_path, api).ok())
        .collect()
}

impl Attacher<'_> {
    /// Attach `program` to this process at `placement` of `lib`, and plan
    /// it for the processes with this one's layout.
    pub(super) fn place(
        &mut self,
        ebpf: &mut Ebpf,
        family: Family,
        program: &str,
        lib: &Path,
        placement: Placement,
        cookie: Option<u64>,
    ) -> Result<Placement, ProbeError> {
        let at = uprobe_placed(ebpf, family, program, lib, placement, cookie, self.pid)?;
        self.planned.push(Planned {
            family,
            program: program.to_string(),
            lib: lib.to_path_buf(),
            placement: at.clone(),
            cookie,
            semaphore: None,
        });
        Ok(at)
    }

    pub(super) fn note(
        &mut self,
        family: Family,
        what: impl Into<String>,
        note: impl Into<String>,
    ) {
        let n = AttachNote {
            family,
            what: what.into(),
            note: note.into(),
        };
        // Every process of a tree usually maps the same libraries: say it once.
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }

    /// Probe every allocator layer discovery found in this process (the one
    /// serving malloc, outer layers such as Rust's shims or CPython's APIs,
    /// a second allocator behind `#[global_allocator]`). A layer other than
    /// glibc that cannot be probed is recorded as unprobed (the report says
    /// so and the alloc family is incomplete) and the others still go in.
    pub(super) fn attach_alloc(
        &mut self,
        ebpf: &mut Ebpf,
        maps: &ProcMaps,
        root: bool,
    ) -> Result<(), ProbeError> {
        let family = Family::Alloc;
        let found = crate::probe::allocators::discover(self.pid, maps);
        if found.layers.is_empty() && found.unprobed.is_empty() {
            // No C allocator found at all: the C library is required, and
            // one linked into the executable without malloc (a program that
            // never allocates through it) is said, never a silent zero.
            let c = c_library(maps, self.pid, family)?;
            if c.statically {
                self.note(
                    family,
                    "malloc",
                    format!(
                        "absent: not linked into {}, never called; memory it takes otherwise (mmap, brk) is not counted",
                        basename(&c.maps_path)
                    ),
                );
            }
        }
        for u in found.unprobed {
            if !self.alloc_unprobed.contains(&u) {
                self.alloc_unprobed.push(u);
            }
        }
        let mut done: Vec<(PathBuf, u64, String)> = Vec::new();
        let declared = self.declared_layers(maps, root)?;
        for layer in found.layers.iter().chain(&declared) {
            let lib = maps.readable_path(&layer.module);
            self.note(
                family,
                format!("{} allocator", layer.family),
                format!("{}: {}", layer.module, layer.how),
            );
            let r = self.attach_table(ebpf, layer, &lib, &mut done);
            match r {
                Ok(()) => {}
                Err(e @ ProbeError::Interrupted) => return Err(e),
                Err(e) if layer.family.is_c_library() => return Err(e),
                Err(e) => self.unprobed(layer, e.to_string()),
            }
        }
        Ok(())
    }

    pub(super) fn unprobed(&mut self, layer: &Layer, why: String) {
        let u = Unprobed {
            pid: self.pid,
            allocator: layer.family.to_string(),
            module: layer.module.clone(),
            why,
        };
        if !self.alloc_unprobed.contains(&u) {
            self.alloc_unprobed.push(u);
        }
    }

    /// Attach each entry point of `layer` in `lib`, once per distinct code
    /// address: an alias (aligned_alloc = memalign in glibc 2.36, malloc =
    /// mi_malloc in libmimalloc) would otherwise fire two probes per call.
    /// A failing entry point other than glibc's stops nothing: it is
    /// recorded as unprobed and the rest are attached.
    pub(super) fn attach_table(
        &mut self,
        ebpf: &mut Ebpf,
        layer: &Layer,
        lib: &Path,
        done: &mut Vec<(PathBuf, u64, String)>,
    ) -> Result<(), ProbeError> {
        let family = Family::Alloc;
        let lib_name = lib.display().to_string();
        let fatal = layer.family.is_c_library();
        let mut found = 0;
        for entry in &layer.entries {
            crate::probe::preload::interrupted()?;
            let (symbol, required) = (entry.0.as_str(), entry.3);
            let info = crate::runtime::entry_point(lib, layer.kind, symbol).map_err(|source| {
                ProbeError::Resolve {
                    pid: self.pid,
                    lib: lib_name.clone(),
                    api: symbol.to_string(),
                    source,
                }
            })?;
            let Some(info) = info else {
                if !required && layer.statically {
                    self.note(
                        family,
                        symbol,
                        format!(
                            "absent: not linked into {}, not probed",
                            basename(&lib_name)
                        ),
                    );
                }
                if required {
                    let e = ProbeError::MissingSymbol {
                        lib: lib_name.clone(),
                        symbol: symbol.to_string(),
                        family,
                    };
                    if fatal {
                        return Err(e);
                    }
                    self.unprobed(layer, e.to_string());
                }
                continue;
            };
            found += 1;
            if let Some((_, _, first)) = done
                .iter()
                .find(|(p, off, _)| p == lib && *off == info.file_offset)
            {
                let first = first.clone();
                self.note(
                    family,
                    symbol,
                    format!("same code as {first}: counted there"),
                );
                continue;
            }
            match self.attach_entry(ebpf, layer, lib, entry, info.file_offset) {
                Ok(()) => done.push((lib.to_path_buf(), info.file_offset, symbol.to_string())),
                Err(e @ ProbeError::Interrupted) => return Err(e),
                Err(e) if fatal => return Err(e),
                Err(e) => self.unprobed(layer, format!("{symbol}: {e}")),
            }
        }
        if found == 0 && !fatal {
            self.unprobed(
                layer,
                format!(
                    "none of its entry points was found in {}",
                    basename(&lib_name)
                ),
            );
        }
        Ok(())
    }

    /// Attach one entry point of `layer`, found at `file_offset` in `lib`,
    /// and note where the probe went.
    fn attach_entry(
        &mut self,
        ebpf: &mut Ebpf,
        layer: &Layer,
        lib: &Path,
        entry: &Entry,
        file_offset: u64,
    ) -> Result<(), ProbeError> {
        let family = Family::Alloc;
        let (symbol, program, kind, required) = (entry.0.as_str(), entry.1, entry.2, entry.3);
        // An optional entry point that only jumps on (libstdc++'s
        // operator new[], sized and array deletes) gets the forwarder
        // program where its family says (`AllocFamily::forwards`): the
        // probe at the end of the jump chain counts the call once, under
        // this entry point's name.
        let forwards_to = (!required && layer.family.forwards())
            .then(|| tail_jump(lib, file_offset))
            .flatten();
        let program = if forwards_to.is_some() {
            "rig_alloc_fwd"
        } else {
            program
        };
        let index = self.entry_index(layer, symbol, kind, file_offset);
        // Every counted entry point gets a uretprobe too (rig_alloc_ret):
        // the return of a thread's outer allocator call is what ends it, so
        // a call is inner exactly when an outer one has not returned (and
        // with the live heap, it reads the address an allocation returned).
        // A forwarder returns through the end of its jump chain, which has
        // its own; a runtime whose code a hijacked return address breaks
        // gets none, and its entries are never a thread's outer call.
        let facts = crate::elf::ElfFacts::shared(lib).map_err(|source| ProbeError::Resolve {
            pid: self.pid,
            lib: lib.display().to_string(),
            api: symbol.to_string(),
            source,
        })?;
        let no_returns = crate::runtime::no_return_probes(&crate::runtime::Module {
            kind: layer.kind,
            facts: &facts,
        });
        let returns =
            program != "rig_alloc_fwd" && no_returns.is_none() && !layer.family.beside_the_heap();
        let cookie =
            kind | (index << ALLOC_ENTRY_SHIFT) | if returns { 0 } else { ALLOC_COOKIE_NO_RETURN };
        let at = placement(family, program, lib, file_offset, &[])?;
        // The uretprobe first, at the entry probe's placement: one trap
        // serves both, and a call the entry probe sees is always one whose
        // return the uretprobe sees too.
        if returns {
            self.place(
                ebpf,
                family,
                "rig_alloc_ret",
                lib,
                at.clone(),
                Some(cookie as u64),
            )?;
        }
        let at = self.place(ebpf, family, program, lib, at, Some(cookie as u64))?;
        let how = match forwards_to {
            Some(dest) => format!(", a forwarder (jumps to {dest}): counted once at the end of the jump under this name"),
            None => String::new(),
        };
        let how = match no_returns {
            None => how,
            Some(why) => format!("{how}; {why}"),
        };
        self.note(
            family,
            symbol,
            format!(
                "uprobe{} at {}+{:#x} ({}){how}{}",
                if returns { " and uretprobe" } else { "" },
                basename(&lib.display().to_string()),
                file_offset,
                layer.family,
                moved(&at, file_offset)
            ),
        );
        Ok(())
    }

    /// The index of an entry point in the session's table (the high half of
    /// its attach cookie), added on first use.
    pub(super) fn entry_index(
        &mut self,
        layer: &Layer,
        symbol: &str,
        kind: u32,
        file_offset: u64,
    ) -> u32 {
        let i = match self.alloc_entries.iter().position(|e| {
            e.module == layer.module && e.file_offset == file_offset && e.symbol == symbol
        }) {
            Some(i) => i,
            None => {
                self.alloc_entries.push(AllocEntry {
                    allocator: layer.family,
                    symbol: crate::runtime::alloc::display_name(symbol, kind),
                    module: layer.module.clone(),
                    file_offset,
                });
                self.alloc_entries.len() - 1
            }
        };
        (i as u32).min(ALLOC_ENTRY_MASK)
    }

    pub(super) fn attach_copy(
        &mut self,
        ebpf: &mut Ebpf,
        maps: &ProcMaps,
    ) -> Result<(), ProbeError> {
        let family = Family::Copy;
        // A runtime that copies with its own routines (Go) needs no C
        // library: a Go program built without cgo has none.
        let own = self.attach_own_copies(ebpf, maps)?;
        let c = match c_library(maps, self.pid, family) {
            Ok(c) => c,
            Err(ProbeError::NoLibc { .. }) if own => return Ok(()),
            Err(e) => return Err(e),
        };
        let api_of = c.copies.ok_or(ProbeError::NoLibc {
            pid: self.pid,
            family,
        })?;
        let (libc_maps_path, libc) = (c.maps_path, c.open);
        // The implementations of this process; one CopyImpl per distinct
        // (library, offset) across the tree, whose index is the cookie.
        let mut resolved = Vec::new();
        for &api in api_of.counted {
            if c.statically && c.facts.lookup_symbol(api).is_none() {
                // Never linked in, so never called: nothing to count.
                self.note(
                    family,
                    api,
                    format!(
                        "absent: not linked into {}, never called, not probed",
                        basename(&libc_maps_path)
                    ),
                );
                continue;
            }
            let r = crate::probe::ifunc::resolve_ifunc(self.pid, maps, &libc_maps_path, api)
                .map_err(|source| ProbeError::Resolve {
                    pid: self.pid,
                    lib: libc_maps_path.clone(),
                    api: api.to_string(),
                    source,
                })?;
            resolved.push((api, r));
        }
        for r in copy_joiners(self.pid, maps, &libc_maps_path, api_of.joins) {
            let api = *api_of
                .joins
                .iter()
                .find(|a| **a == r.api)
                .expect("resolved from the list");
            resolved.push((api, r));
        }
        // mempcpy's implementation jumps into memmove's past its entry, so
        // memmove's probe may move past that landing and count mempcpy's
        // calls too; an implementation whose calls reach another's probe
        // that way is counted there and gets no probe of its own.
        let joining: Vec<u64> = resolved
            .iter()
            .filter(|(api, _)| api_of.joins.contains(api))
            .map(|(_, r)| r.file_offset)
            .collect();
        let mut placements: Vec<(u64, Placement)> = Vec::new();
        let mut unplaced = Vec::new();
        for (api, r) in &resolved {
            if placements.iter().all(|(e, _)| *e != r.file_offset) {
                match placement(family, "rig_copy", &libc, r.file_offset, &joining) {
                    Ok(p) => placements.push((r.file_offset, p)),
                    // A joining API is counted when it can be; memcpy,
                    // memmove and memset must be.
                    Err(e) if api_of.joins.contains(api) => unplaced.push((*api, e)),
                    Err(e) => return Err(e),
                }
            }
        }
        let owner = |entry: u64| -> u64 {
            placements
                .iter()
                .find(|(e, p)| *e != entry && p.joined.contains(&entry))
                .map_or(entry, |(e, _)| *e)
        };
        let mut mine: Vec<(usize, Placement)> = Vec::new();
        for (api, r) in &resolved {
            let at = owner(r.file_offset);
            let Some(p) = placements
                .iter()
                .find(|(e, _)| *e == at)
                .map(|(_, p)| p.clone())
            else {
                // A joining API that reaches no other probe and has no safe
                // probe of its own: not counted, and the notes say so.
                if let Some((_, e)) = unplaced.iter().find(|(a, _)| a == api) {
                    self.note(family, api.to_string(), format!("not counted: {e}"));
                }
                continue;
            };
            let own = resolved
                .iter()
                .map(|(_, o)| o)
                .find(|o| o.file_offset == at)
                .expect("an owner is a resolved implementation");
            let i = match self
                .copy_impls
                .iter()
                .position(|c| c.lib == libc_maps_path && c.file_offset == at)
            {
                Some(i) => i,
                None => {
                    self.copy_impls.push(CopyImpl {
                        apis: Vec::new(),
                        lib: libc_maps_path.clone(),
                        file_offset: at,
                        impl_name: own.impl_name.clone(),
                        method: own.method.clone(),
                    });
                    self.copy_impls.len() - 1
                }
            };
            if !self.copy_impls[i].apis.iter().any(|a| a == api) {
                self.copy_impls[i].apis.push(api.to_string());
            }
            if mine.iter().all(|(j, _)| *j != i) {
                mine.push((i, p));
            }
        }
        for (i, p) in mine {
            let c = self.copy_impls[i].clone();
            crate::probe::preload::interrupted()?;
            let at = self.place(ebpf, family, "rig_copy", &libc, p, Some(i as u64))?;
            self.note(
                family,
                c.apis.join("/"),
                format!(
                    "uprobe at {} ({}+{:#x}), found by {}{}",
                    c.impl_name
                        .as_deref()
                        .unwrap_or("an unnamed implementation"),
                    basename(&c.lib),
                    c.file_offset,
                    c.method,
                    moved(&at, c.file_offset)
                ),
            );
        }
        Ok(())
    }

    pub(super) fn attach_locks(
        &mut self,
        ebpf: &mut Ebpf,
        maps: &ProcMaps,
    ) -> Result<(), ProbeError> {
        let family = Family::Locks;
        // A runtime that locks with its own code (Go) needs no C library.
        let own = self.attach_own_locks(ebpf, maps)?;
        let c = match c_library(maps, self.pid, family) {
            Ok(c) => c,
            Err(ProbeError::NoLibc { .. }) if own => return Ok(()),
            Err(e) => return Err(e),
        };
        let api = c.locks.ok_or(ProbeError::NoLibc {
            pid: self.pid,
            family,
        })?;
        let libc = c.open;
        let lib_name = libc.display().to_string();
        let find = |symbol: &str| -> Result<u64, ProbeError> {
            elf::lookup_symbol(&libc, symbol)
                .map_err(|source| ProbeError::Resolve {
                    pid: self.pid,
                    lib: lib_name.clone(),
                    api: symbol.to_string(),
                    source,
                })?
                .map(|s| s.file_offset)
                .ok_or_else(|| ProbeError::MissingSymbol {
                    lib: lib_name.clone(),
                    symbol: symbol.to_string(),
                    family,
                })
        };
        let lock = find(api.lock)?;
        let trylock = find(api.trylock)?;
        let unlock = find(api.unlock)?;
        // The uretprobes go through the same placement as the entry probes:
        // a moved probe has rsp unchanged since the entry, so the return
        // address the kernel hijacks at *rsp is still the caller's.
        for (program, entry, what, ret) in [
            ("rig_mutex_lock", lock, api.lock, ""),
            ("rig_mutex_lock_ret", lock, api.lock, " return"),
            ("rig_mutex_trylock", trylock, api.trylock, ""),
            ("rig_mutex_lock_ret", trylock, api.trylock, " return"),
            ("rig_mutex_unlock", unlock, api.unlock, ""),
        ] {
            crate::probe::preload::interrupted()?;
            let at = placement(family, program, &libc, entry, &[])?;
            let at = self.place(ebpf, family, program, &libc, at, None)?;
            if at.file_offset != entry {
                self.note(
                    family,
                    format!("{what}{ret}"),
                    moved(&at, entry).trim_start_matches("; "),
                );
            }
        }
        self.note(
            family,
            format!("{}/{}/{}", api.lock, api.trylock, api.unlock),
            format!(
                "uprobes (+uretprobes on lock/trylock) in {}",
                basename(&lib_name)
            ),
        );
        Ok(())
    }
}
