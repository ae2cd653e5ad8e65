//! The function symbols a stripped file keeps elsewhere, so a function a
//! user names (`--func`) is found by name in the binaries distributions
//! ship: no `.symtab`, but
//!
//! - MiniDebugInfo (Fedora's and RHEL's recipe): a `.gnu_debugdata`
//!   section holding an xz-compressed ELF whose `.symtab` has the functions
//!   `.dynsym` lacks;
//! - a separate debug file (Debian's `-dbgsym` packages): by build-id
//!   under `/usr/lib/debug/.build-id/`, or by `.gnu_debuglink` beside the
//!   file, in its `.debug/` directory or under `/usr/lib/debug`.
//!
//! A debug file counts only when it is this build's: its build-id equals
//! the file's, or (for a debuglink without build-ids) its CRC32 equals the
//! link's. A stale one (left from an earlier build) would put probes on
//! addresses that are no longer those functions, so it is not read.

use std::io::Read;
use std::path::{Path, PathBuf};

use object::read::elf::{ElfFile64, Sym as _};
use object::{Endianness, Object as _, ObjectSection as _};

use super::{ElfFacts, ElfSym, SymbolInfo};

/// What the decompressed MiniDebugInfo may grow to: a real one is a few
/// hundred KiB (the symbols only); more is a corrupt or hostile section.
const MINIDEBUG_MAX: u64 = 256 << 20;

/// Where distributions install separate debug files.
const DEBUG_DIRS: &[&str] = &["/usr/lib/debug", "/lib/debug"];

impl ElfFacts {
    /// The functions this file keeps elsewhere (see above), read on first
    /// use, once: none when it has its own `.symtab`, or when it was parsed
    /// from bytes alone.
    pub(crate) fn kept_functions(&self) -> &[ElfSym] {
        self.kept.get_or_init(|| {
            let Some(path) = self.origin.as_deref().filter(|_| !self.has_symtab()) else {
                return Vec::new();
            };
            let Ok(data) = std::fs::read(path) else {
                return Vec::new();
            };
            let mini = minidebuginfo(&data);
            if !mini.is_empty() {
                return mini;
            }
            debug_file(path, &data, self.build_id.as_deref())
        })
    }

    /// A function a user names: a symbol of the file's own tables
    /// ([`ElfFacts::lookup_symbol`]), else one it keeps elsewhere.
    pub fn lookup_function(&self, name: &str) -> Option<SymbolInfo> {
        if let Some(found) = self.lookup_symbol(name) {
            return Some(found);
        }
        let s = self
            .kept_functions()
            .iter()
            .find(|s| s.name == name && s.vaddr != 0)?;
        Some(SymbolInfo {
            name: s.name.clone(),
            vaddr: s.vaddr,
            size: s.size,
            file_offset: self.vaddr_to_file_offset(s.vaddr)?,
            is_ifunc: s.st_type == object::elf::STT_GNU_IFUNC,
        })
    }
}

/// The `.symtab` function symbols of the MiniDebugInfo in `data` (the
/// file's bytes), if it has a `.gnu_debugdata` section that decompresses
/// to an ELF file.
fn minidebuginfo(data: &[u8]) -> Vec<ElfSym> {
    let Ok(file) = object::File::parse(data) else {
        return Vec::new();
    };
    let Some(section) = file.section_by_name(".gnu_debugdata") else {
        return Vec::new();
    };
    let Ok(xz) = section.data() else {
        return Vec::new();
    };
    let mut inner = Vec::new();
    let decoder = xz2::read::XzDecoder::new(xz);
    if decoder.take(MINIDEBUG_MAX).read_to_end(&mut inner).is_err() {
        return Vec::new();
    }
    symtab(&inner)
}

/// The `.symtab` function symbols of this build's separate debug file for
/// the file at `path` (whose bytes are `data`, build-id `build_id`).
fn debug_file(path: &Path, data: &[u8], build_id: Option<&str>) -> Vec<ElfSym> {
    if let Some(id) = build_id.filter(|id| id.len() > 2) {
        for dir in DEBUG_DIRS {
            let candidate = Path::new(dir)
                .join(".build-id")
                .join(&id[..2])
                .join(format!("{}.debug", &id[2..]));
            if let Ok(bytes) = std::fs::read(&candidate) {
                if crate::process::maps::build_id_of_data(&bytes).as_deref() == Some(id) {
                    return symtab(&bytes);
                }
            }
        }
    }
    let Some((name, crc)) = debuglink(data) else {
        return Vec::new();
    };
    for candidate in debuglink_candidates(path, &name) {
        let Ok(bytes) = std::fs::read(&candidate) else {
            continue;
        };
        let same_build = match (build_id, crate::process::maps::build_id_of_data(&bytes)) {
            (Some(a), Some(b)) => a == b,
            _ => crc32fast::hash(&bytes) == crc,
        };
        if same_build {
            return symtab(&bytes);
        }
    }
    Vec::new()
}

/// `.gnu_debuglink`: the debug file's name, then (4-aligned) its CRC32.
fn debuglink(data: &[u8]) -> Option<(String, u32)> {
    let file = object::File::parse(data).ok()?;
    let d = file.section_by_name(".gnu_debuglink")?.data().ok()?;
    let end = d.iter().position(|&b| b == 0)?;
    let at = (end + 4) & !3;
    let crc = u32::from_le_bytes(d.get(at..at + 4)?.try_into().ok()?);
    let name = std::str::from_utf8(&d[..end]).ok()?;
    // A name, never a path: the link names a file in known directories.
    (!name.is_empty() && !name.contains('/')).then(|| (name.to_string(), crc))
}

/// Where gdb looks for a debuglink's file: beside the binary, in its
/// `.debug/` directory, and under each debug directory by the binary's
/// own directory.
fn debuglink_candidates(path: &Path, name: &str) -> Vec<PathBuf> {
    let dir = std::fs::canonicalize(path)
        .ok()
        .and_then(|p| p.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| path.parent().unwrap_or(Path::new("/")).to_path_buf());
    let mut v = vec![dir.join(name), dir.join(".debug").join(name)];
    for root in DEBUG_DIRS {
        v.push(
            Path::new(root)
                .join(dir.strip_prefix("/").unwrap_or(&dir))
                .join(name),
        );
    }
    v
}

/// The defined function symbols of an ELF file's `.symtab` (its sections
/// may be `NOBITS` copies: only the table is read).
fn symtab(data: &[u8]) -> Vec<ElfSym> {
    let Ok(file) = ElfFile64::<Endianness>::parse(data) else {
        return Vec::new();
    };
    let e = file.endian();
    let table = file.elf_symbol_table();
    let mut out = Vec::new();
    for (_, s) in table.enumerate() {
        let Ok(name) = table.symbol_name(e, s) else {
            continue;
        };
        let defined = s.st_shndx(e) != object::elf::SHN_UNDEF;
        let func = matches!(
            s.st_type(),
            object::elf::STT_FUNC | object::elf::STT_GNU_IFUNC
        );
        if name.is_empty() || !defined || !func {
            continue;
        }
        out.push(ElfSym {
            name: String::from_utf8_lossy(name).into_owned(),
            vaddr: s.st_value(e),
            size: s.st_size(e),
            st_type: s.st_type(),
            bind: s.st_bind(),
            shndx: s.st_shndx(e),
            hidden: false,
            dynamic: false,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn handle_of(path: &Path) -> Option<SymbolInfo> {
        ElfFacts::load(path).unwrap().lookup_function("handle")
    }

    #[test]
    fn a_minidebuginfo_binary_names_its_functions_where_the_full_build_has_them() {
        let full = ElfFacts::load(&rig_fixtures::twomalloc(""))
            .unwrap()
            .lookup_symbol("handle")
            .unwrap();
        let mini = ElfFacts::load(&rig_fixtures::twomalloc("minidebug")).unwrap();
        assert!(!mini.has_symtab() && mini.lookup_symbol("handle").is_none());
        assert_eq!(mini.lookup_function("handle"), Some(full));
        assert!(mini.function_names().contains(&"handle"));
    }

    #[test]
    fn a_debug_file_is_read_only_when_it_is_this_builds() {
        // The fixture's stale debuglink names a debug file of another build
        // (its code moved): not read, so no function is placed on it.
        assert_eq!(handle_of(&rig_fixtures::twomalloc("debuglink")), None);
        assert_eq!(handle_of(&rig_fixtures::twomalloc("stripped")), None);
        // The same stripped binary beside its own debug file: found, at
        // the full build's address.
        let dir = tempfile::tempdir().unwrap();
        let (bin, debug) = (dir.path().join("two"), dir.path().join("two.debug"));
        let full = rig_fixtures::twomalloc("");
        let objcopy = |args: &[&std::ffi::OsStr]| {
            let ok = std::process::Command::new("objcopy")
                .args(args)
                .status()
                .unwrap()
                .success();
            assert!(ok, "objcopy {args:?}");
        };
        objcopy(&[
            "--only-keep-debug".as_ref(),
            full.as_os_str(),
            debug.as_os_str(),
        ]);
        objcopy(&["--strip-all".as_ref(), full.as_os_str(), bin.as_os_str()]);
        let link = format!("--add-gnu-debuglink={}", debug.display());
        objcopy(&[link.as_ref(), bin.as_os_str()]);
        let want = ElfFacts::load(&full).unwrap().lookup_symbol("handle");
        assert!(want.is_some());
        assert_eq!(handle_of(&bin), want);
        // Rebuilt: the debug file left from the other build is refused.
        std::fs::copy(
            rig_fixtures::twomalloc("debuglink").with_extension("debug"),
            &debug,
        )
        .unwrap();
        assert_eq!(handle_of(&bin), None);
    }
}
