//! Which code an IFUNC'd API really runs in a live target, for placing
//! its uprobe: the implementation glibc's resolver picked is read from the
//! target's GOT (`/proc/PID/mem`), not guessed from the CPU.
//!
//! In: a pid, its maps, the C library's path and an API name. Out: a
//! [`ResolvedImpl`] with the implementation's file offset and name.

use std::os::unix::fs::FileExt;
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use serde::Serialize;

use crate::elf::{load_base, ElfFacts, R_X86_64_GLOB_DAT, R_X86_64_IRELATIVE, R_X86_64_JUMP_SLOT};
use crate::process::maps::ProcMaps;

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

/// Read a native-endian u64 from the target's memory.
pub fn read_u64(pid: u32, addr: u64) -> Result<u64> {
    let path = format!("/proc/{pid}/mem");
    let f = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
    let mut buf = [0u8; 8];
    f.read_exact_at(&mut buf, addr)
        .with_context(|| format!("reading 8 bytes at {addr:#x} from {path}"))?;
    Ok(u64::from_ne_bytes(buf))
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
    let name = crate::symbolize::Symbolizer::new()
        .symbolize_file_offsets_at(lib_file, lib_path, &[off])
        .pop()
        .and_then(|s| {
            (s.naming == crate::symbolize::Naming::Symbol)
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
// Long by design: the chain of places the chosen implementation can be
// read from (JUMP_SLOT, GLOB_DAT, the executable's GOT, IRELATIVE), each
// with its reason inline; the chain reads top to bottom.
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
    if let Some(exe) = maps.exe(pid) {
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

/// [`resolve_ifunc`] for `api` of the C library the live process `pid`
/// maps.
pub fn resolve_in_libc(pid: u32, api: &str) -> Result<ResolvedImpl> {
    let maps = ProcMaps::read(pid).with_context(|| format!("reading the maps of pid {pid}"))?;
    let (libc, _) = crate::runtime::c_library(pid, &maps)
        .ok_or_else(|| anyhow!("pid {pid} maps no C library"))?;
    resolve_ifunc(pid, &maps, &libc, api)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elf::lookup_symbol;
    use crate::symbolize::elf_tests::{
        gdb_info_symbol_of_slot, readelf_dynsyms, run, spawn_sleep, tempdir, Spawned,
    };
    use crate::symbolize::symbolize_elf_with;
    use crate::symbolize::Naming;
    use std::process::{Command, Stdio};

    #[test]
    fn resolve_ifunc_memcpy_memmove_memset_live() {
        let (child, maps) = spawn_sleep();
        let pid = child.0.id();
        let libc = crate::runtime::c_library(maps.pid, &maps)
            .map(|c| c.0)
            .unwrap();
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
            crate::errln!("{api}: {r:?}");
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
            crate::errln!(
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
        let libc = crate::runtime::c_library(maps.pid, &maps)
            .map(|c| c.0)
            .unwrap();
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
            if crate::runtime::c_library(maps.pid, &maps)
                .map(|c| c.0)
                .is_some()
                && wchan.contains("pause")
            {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let libc = crate::runtime::c_library(maps.pid, &maps)
            .map(|c| c.0)
            .unwrap();
        for api in ["memcpy", "memset"] {
            let r = resolve_ifunc(pid, &maps, &libc, api).unwrap();
            crate::errln!("{api}: {}", r.method);
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
        let libc = crate::runtime::c_library(maps.pid, &maps)
            .map(|c| c.0)
            .unwrap();
        let r = resolve_ifunc(child.0.id(), &maps, &libc, "malloc").unwrap();
        let s = lookup_symbol(Path::new(&libc), "malloc").unwrap().unwrap();
        assert_eq!(r.file_offset, s.file_offset);
        assert!(r.method.contains("not an IFUNC"));
        assert!(resolve_ifunc(child.0.id(), &maps, &libc, "no_such_symbol_xyz").is_err());
    }
}
