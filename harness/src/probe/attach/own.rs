//! The copy and locks families' probes on a runtime's own routines (Go's
//! `runtime.memmove`, `sync.(*Mutex).lockSlow`), in every module the
//! process maps whose runtime has them (`Runtime::own_copies`,
//! `Runtime::own_locks`): placed at their entries, never moved (their
//! bodies jump back into their first instructions, or their entry is the
//! prologue's stack check the program reads), and for a lock's slow path
//! at each of its `ret` instructions too (never a uretprobe).

use super::*;
use crate::runtime::{Module, ModuleKind};

/// The modules of `maps` with their kind and ELF facts, each once.
fn modules(maps: &ProcMaps) -> Vec<(String, PathBuf, ModuleKind, Arc<crate::elf::ElfFacts>)> {
    maps.objects()
        .into_iter()
        .filter_map(|o| {
            let kind = ModuleKind::of_path(maps, &o.path)?;
            let open = maps.readable_path(&o.path);
            let facts = crate::elf::ElfFacts::shared(&open).unwrap_or_default();
            Some((o.path, open, kind, facts))
        })
        .collect()
}

/// The file offsets of the `ret` instructions of the function whose code
/// runs from `file_offset` for `size` bytes in `open`.
fn returns_of(open: &Path, file_offset: u64, size: u64) -> std::io::Result<Vec<u64>> {
    use iced_x86::{Decoder, DecoderOptions, Mnemonic};
    use std::os::unix::fs::FileExt;
    let mut code = vec![0u8; size as usize];
    std::fs::File::open(open)?.read_exact_at(&mut code, file_offset)?;
    let mut decoder = Decoder::with_ip(64, &code, file_offset, DecoderOptions::NONE);
    let mut at = Vec::new();
    while decoder.can_decode() {
        let ins = decoder.decode();
        if ins.mnemonic() == Mnemonic::Ret {
            at.push(ins.ip());
        }
    }
    Ok(at)
}

impl Attacher<'_> {
    /// Probe the copy routines of the runtimes' own code in every module
    /// the process maps (`Runtime::own_copies`), each at its entry; whether
    /// any module has such routines (probed or said to be unprobed).
    pub(super) fn attach_own_copies(
        &mut self,
        ebpf: &mut Ebpf,
        maps: &ProcMaps,
    ) -> Result<bool, ProbeError> {
        let family = Family::Copy;
        let mut any = false;
        for (path, open, kind, facts) in modules(maps) {
            let m = Module {
                kind,
                facts: &facts,
            };
            let routines = match crate::runtime::own_copies(&m) {
                Ok(r) => r,
                Err(why) => {
                    any = true;
                    let what = format!("copy routines of {}", basename(&path));
                    self.note(family, what, format!("not counted: {path} {why}"));
                    continue;
                }
            };
            for r in routines {
                any = true;
                crate::probe::preload::interrupted()?;
                let resolve = |source| ProbeError::Resolve {
                    pid: self.pid,
                    lib: path.clone(),
                    api: r.symbol.to_string(),
                    source,
                };
                let info = crate::runtime::entry_point(&open, kind, r.symbol).map_err(resolve)?;
                let Some(info) = info else {
                    self.note(
                        family,
                        r.symbol,
                        format!("absent: not in {}, never called", basename(&path)),
                    );
                    continue;
                };
                let i = match self
                    .copy_impls
                    .iter()
                    .position(|c| c.lib == path && c.file_offset == info.file_offset)
                {
                    Some(i) => i,
                    None => {
                        self.copy_impls.push(CopyImpl {
                            apis: vec![r.symbol.to_string()],
                            lib: path.clone(),
                            file_offset: info.file_offset,
                            impl_name: Some(info.name.clone()),
                            method: "its entry in the module's own function table".into(),
                        });
                        self.copy_impls.len() - 1
                    }
                };
                let at = Placement::entry(info.file_offset);
                self.place(ebpf, family, r.program, &open, at, Some(i as u64))?;
                self.note(
                    family,
                    r.symbol,
                    format!(
                        "uprobe at its entry ({}+{:#x}), length in {}",
                        basename(&path),
                        info.file_offset,
                        r.length
                    ),
                );
            }
        }
        Ok(any)
    }

    /// Probe the lock slow paths of the runtimes' own code in every module
    /// the process maps (`Runtime::own_locks`): the entry, and each `ret`;
    /// whether any module has them (probed or said to be unprobed).
    pub(super) fn attach_own_locks(
        &mut self,
        ebpf: &mut Ebpf,
        maps: &ProcMaps,
    ) -> Result<bool, ProbeError> {
        let family = Family::Locks;
        let mut any = false;
        for (path, open, kind, facts) in modules(maps) {
            let m = Module {
                kind,
                facts: &facts,
            };
            any |= self.attach_marker_locks(ebpf, maps, &m, &path, &open)?;
            let locks = match crate::runtime::own_locks(&m) {
                Ok(l) => l,
                Err(why) => {
                    any = true;
                    let what = format!("locks of {}", basename(&path));
                    self.note(family, what, format!("not counted: {path} {why}"));
                    continue;
                }
            };
            'locks: for l in locks {
                any = true;
                crate::probe::preload::interrupted()?;
                let pid = self.pid;
                let resolve = |symbol: &str| {
                    let r = crate::runtime::entry_point(&open, kind, symbol);
                    r.map_err(|source| ProbeError::Resolve {
                        pid,
                        lib: path.clone(),
                        api: symbol.to_string(),
                        source,
                    })
                };
                let mut found = None;
                for symbol in l.symbols {
                    match resolve(symbol) {
                        Ok(Some(info)) => {
                            found = Some(info);
                            break;
                        }
                        Ok(None) => {}
                        // Where rig cannot place its program (no stack
                        // check to read), the slow path is not counted,
                        // and the note says why.
                        Err(e) => {
                            self.note(family, *symbol, format!("not counted: {e}"));
                            continue 'locks;
                        }
                    }
                }
                let Some(info) = found else {
                    self.note(
                        family,
                        l.symbols.join(" or "),
                        format!("absent: not in {}, not probed", basename(&path)),
                    );
                    continue;
                };
                let io = |e: std::io::Error| ProbeError::Resolve {
                    pid: self.pid,
                    lib: path.clone(),
                    api: info.name.clone(),
                    source: e.into(),
                };
                let rets = returns_of(&open, info.file_offset, info.size).map_err(io)?;
                let cookie = Some(l.op as u64);
                let entry = Placement::entry(info.file_offset);
                self.place(ebpf, family, l.entry, &open, entry, cookie)?;
                for &r in &rets {
                    let at = Placement::entry(r);
                    self.place(ebpf, family, l.ret, &open, at, cookie)?;
                }
                self.note(
                    family,
                    info.name.clone(),
                    format!(
                        "uprobe at its stack check ({}+{:#x}) and at its {} ret instructions: {}",
                        basename(&path),
                        info.file_offset,
                        rets.len(),
                        l.counts
                    ),
                );
                let Some((unlock, program)) = l.unlock else {
                    continue;
                };
                match resolve(unlock) {
                    Ok(Some(u)) => {
                        let at = Placement::entry(u.file_offset);
                        self.place(ebpf, family, program, &open, at, cookie)?;
                    }
                    Ok(None) => {
                        let why = format!("absent from {}: holds not timed", basename(&path));
                        self.note(family, unlock, why);
                    }
                    Err(e) => self.note(family, unlock, format!("not probed: {e}")),
                }
            }
        }
        Ok(any)
    }

    /// Probe the contended acquisitions module `m` (mapped at `path`)
    /// marks with USDT markers in this process (`Runtime::marker_locks`: a
    /// JVM's monitors): a uprobe at each marker, the wait from the first
    /// to the second; whether it has any.
    fn attach_marker_locks(
        &mut self,
        ebpf: &mut Ebpf,
        maps: &ProcMaps,
        m: &Module<'_>,
        path: &str,
        open: &Path,
    ) -> Result<bool, ProbeError> {
        let at = crate::runtime::Mapped {
            pid: maps.pid,
            maps,
            path,
            open,
        };
        let locks: Vec<_> = crate::runtime::runtimes(m)
            .flat_map(|r| r.marker_locks(m, &at))
            .collect();
        if locks.is_empty() {
            return Ok(false);
        }
        let family = Family::Locks;
        let markers = crate::elf::usdt::markers(open).map_err(|source| ProbeError::Resolve {
            pid: self.pid,
            lib: path.to_string(),
            api: "its USDT markers".to_string(),
            source,
        })?;
        for l in locks {
            let find = |(provider, name): (&str, &str)| {
                markers
                    .0
                    .iter()
                    .find(|mk| mk.provider == provider && mk.name == name)
                    .map(|mk| mk.file_offset)
            };
            let what = format!("{}:{}", l.waits.0, l.waits.1);
            let (Some(waits), Some(acquired)) = (find(l.waits), find(l.acquired)) else {
                let why = format!("not counted: {} has no such marker pair", basename(path));
                self.note(family, what, why);
                continue;
            };
            let cookie = Some(u64::from(l.op));
            for (program, off) in [
                ("rig_marker_lock", waits),
                ("rig_marker_lock_ret", acquired),
            ] {
                self.place(ebpf, family, program, open, Placement::entry(off), cookie)?;
            }
            let how = format!(
                "uprobes at {what} and {}:{} in {}: {}",
                l.acquired.0,
                l.acquired.1,
                basename(path),
                l.counts
            );
            self.note(family, what, how);
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_go_lock_slow_paths_returns_are_found_at_its_ret_instructions() {
        let exe = rig_fixtures::goserver(false);
        let path = exe.display().to_string();
        let kind = ModuleKind::of_file(&path, &exe).unwrap();
        let info = crate::runtime::entry_point(&exe, kind, "sync.(*Mutex).lockSlow")
            .unwrap()
            .expect("goserver has sync.Mutex's slow path");
        let rets = returns_of(&exe, info.file_offset, info.size).unwrap();
        assert!(!rets.is_empty());
        let code = std::fs::read(&exe).unwrap();
        for r in rets {
            assert!((info.file_offset..info.file_offset + info.size).contains(&r));
            assert_eq!(code[r as usize], 0xc3, "ret at {r:#x}");
        }
    }
}
