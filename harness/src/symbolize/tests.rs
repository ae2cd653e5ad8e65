use super::*;
use crate::elf;
use crate::process::maps::ProcMaps;
use crate::symbolize::elf_tests::{spawn_sleep, tempdir};

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

// Long by design: one live libc address followed through every way of
// naming it (symbol, DWARF line against addr2line, return address, after
// the process is gone), each step using the previous one's answer.
#[test]
fn malloc_with_debug_info_has_file_and_line() {
    let (child, maps) = spawn_sleep();
    let libc = crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .unwrap();
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
    assert_eq!(sites[0].file.as_deref().map(basename), Some("tests.rs"));
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
    let libc = crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .unwrap();
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

#[test]
fn a_garbage_debuglink_does_not_cost_the_binarys_own_file_and_line() {
    // The binary carries its own DWARF, and a .gnu_debuglink naming a file
    // beside it whose contents (and so CRC) are garbage: the link is no
    // reason to lose what the binary itself says.
    let dir = tempdir("debuglink");
    let src = dir.join("d.c");
    std::fs::write(
        &src,
        "int rig_debuglink_marker(int x) {\n  return x * 3 + 1;\n}\nint main(int c, char **v) { return rig_debuglink_marker(c); }\n",
    )
    .unwrap();
    let exe = dir.join("d");
    let gcc = std::process::Command::new("gcc")
        .args([
            "-g",
            "-O0",
            "-o",
            exe.to_str().unwrap(),
            src.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert!(gcc.status.success(), "{gcc:?}");
    let link = dir.join("d.debug");
    std::fs::write(&link, b"not an ELF file at all").unwrap();
    let objcopy = std::process::Command::new("objcopy")
        .arg(format!("--add-gnu-debuglink={}", link.display()))
        .arg(&exe)
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(objcopy.status.success(), "{objcopy:?}");
    // The garbage changes after the CRC was taken, as a stale link would.
    std::fs::write(&link, b"garbage that no longer matches the CRC!!").unwrap();
    let facts = ElfFacts::load(&exe).unwrap();
    let marker = facts
        .syms
        .iter()
        .find(|s| s.name == "rig_debuglink_marker")
        .unwrap();
    let off = facts.vaddr_to_file_offset(marker.vaddr).unwrap();
    let sites = symbolize_elf_with(&exe, &[off], true);
    assert_eq!(sites[0].function.as_deref(), Some("rig_debuglink_marker"));
    assert_eq!(
        sites[0].file.as_deref().map(basename),
        Some("d.c"),
        "{:?}",
        sites[0]
    );
    assert_eq!(sites[0].line, Some(1), "{:?}", sites[0]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A function whose DWARF gives its code as several ranges (glibc's
/// pthread_create, with a `.cold` part) is named with its true entry and
/// offset, not left unnamed: blazesym reports it with address 0 and no size.
#[test]
fn a_function_of_several_dwarf_ranges_is_named_at_its_offset() {
    let (_child, maps) = spawn_sleep();
    let libc = crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .unwrap();
    let open = maps.readable_path(&libc);
    let sym = elf::lookup_symbol(&open, "pthread_create")
        .unwrap()
        .unwrap();
    assert!(sym.size > 0x200, "{sym:?}");
    let inside = sym.file_offset + sym.size / 2;
    let site = symbolize_elf_with(&open, &[inside], true).remove(0);
    assert_eq!(site.naming, Naming::Symbol, "{site:?}");
    assert_eq!(site.function.as_deref(), Some("pthread_create"), "{site:?}");
    assert_eq!(site.function_offset, sym.size / 2, "{site:?}");
    assert!(site.line.is_some_and(|l| l > 0), "{site:?}");
}
