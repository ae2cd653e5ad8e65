//! True names: the report never gives an address the nearest preceding
//! export's name.

use rig::process::maps::ProcMaps;
use rig::symbolize::{Naming, Symbolizer};

use super::{calib, probes_shared, rig_bin};

#[test]
fn names_the_copy_implementation_truly_or_not_at_all() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&[]);
    let maps = ProcMaps::read(target.pid()).unwrap();
    let libc = rig::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .unwrap();
    let imp = rig::probe::ifunc::resolve_ifunc(target.pid(), &maps, &libc, "memcpy").unwrap();
    let open = maps.open_path(&libc);

    // With libc6-dbg: the real routine's name. Which routine glibc picks
    // depends on the CPU: the `_erms` variant only where the CPU has ERMS
    // (`erms` in /proc/cpuinfo's flags).
    let named = rig::symbolize::symbolize_elf_with(&open, &[imp.file_offset], true);
    let name = named[0].function.clone().unwrap();
    let erms = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap()
        .lines()
        .find(|l| l.starts_with("flags"))
        .is_some_and(|l| l.split_whitespace().any(|f| f == "erms"));
    let suffix = if erms {
        "_unaligned_erms"
    } else {
        "_unaligned"
    };
    assert!(
        name.starts_with("__memmove_") && name.ends_with(suffix),
        "{name} (cpu has erms: {erms})"
    );
    assert_eq!(named[0].naming, Naming::Symbol);

    // With only .dynsym the address lies in a gap: a naive resolver would
    // call it __nss_database_lookup. We must say "unnamed" instead.
    let facts = rig::elf::ElfFacts::load(&open).unwrap();
    let vaddr = facts.file_offset_to_vaddr(imp.file_offset).unwrap();
    let (naive, _, _) = facts.naive_nearest_dynsym(vaddr).unwrap();
    assert_eq!(
        naive, "__nss_database_lookup",
        "the trap this test guards against exists here"
    );
    let bare = rig::symbolize::symbolize_elf_with(&open, &[imp.file_offset], false);
    assert_eq!(bare[0].naming, Naming::Unnamed);
    assert_eq!(bare[0].function, None);
    let label = bare[0].label();
    assert!(
        label.starts_with("libc.so.6+0x") && label.ends_with("[unnamed]"),
        "{label}"
    );

    // The session symbolizer agrees with the per-file one.
    let mut sym = Symbolizer::new();
    let base = maps
        .mappings_of(&libc)
        .map(|m| m.start - m.offset)
        .min()
        .unwrap();
    let sites = sym.symbolize(
        &maps,
        &[base + imp.file_offset],
        rig::symbolize::AddrKind::InstructionPointer,
    );
    assert_eq!(sites[0].function.as_deref(), Some(name.as_str()));
}

#[test]
fn demo_prints_true_names_with_file_and_line() {
    root_or_skip!();
    let _g = probes_shared();
    let json = std::env::temp_dir().join(format!("rig-demo-{}.json", std::process::id()));
    let out = std::process::Command::new(rig_bin())
        .args(["demo", "--requests", "500", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("500 successful requests"), "{stdout}");
    assert!(stdout.contains("calib_alloc_small+0x"), "{stdout}");
    assert!(stdout.contains("(calib_server.c:"), "{stdout}");
    assert!(!stdout.contains("__nss_database_lookup"), "{stdout}");
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    std::fs::remove_file(&json).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["window"]["requests"], 500);
    assert_eq!(v["alloc_totals"]["allocations"], 8 * 500);
}
