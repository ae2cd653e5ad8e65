use crate::elf::*;
use crate::process::maps::ProcMaps;
use crate::symbolize::{symbolize_elf_with, Naming};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A child we spawned; killed (by its own pid) on drop.
pub(crate) struct Spawned(pub Child);
impl Drop for Spawned {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn spawn_sleep() -> (Spawned, ProcMaps) {
    let child = Spawned(
        Command::new("sleep")
            .arg("30")
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    // Wait until ld.so has mapped libc and sleep is parked in nanosleep.
    for _ in 0..200 {
        let maps = ProcMaps::read(pid).unwrap();
        let stat = std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default();
        if crate::runtime::c_library(maps.pid, &maps)
            .map(|c| c.0)
            .is_some()
            && stat.contains("nanosleep")
        {
            return (child, maps);
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let maps = ProcMaps::read(pid).unwrap();
    assert!(crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .is_some());
    (child, maps)
}

pub(crate) fn run(cmd: &str, args: &[&str]) -> String {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{cmd} is required for this test: {e}"));
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `readelf -W --dyn-syms`: (name without version, value, size, type).
pub(crate) fn readelf_dynsyms(path: &str) -> Vec<(String, u64, u64, String)> {
    run("readelf", &["-W", "--dyn-syms", path])
        .lines()
        .filter_map(|l| {
            let p: Vec<&str> = l.split_whitespace().collect();
            if p.len() < 8 || !p[0].ends_with(':') || p[6] == "UND" {
                return None;
            }
            let v = u64::from_str_radix(p[1], 16).ok()?;
            let size = if let Some(h) = p[2].strip_prefix("0x") {
                u64::from_str_radix(h, 16).ok()?
            } else {
                p[2].parse().ok()?
            };
            let name = p[7].split('@').next().unwrap().to_string();
            Some((name, v, size, p[3].to_string()))
        })
        .collect()
}

#[test]
fn aligned_alloc_and_memalign_share_file_offset() {
    let maps = ProcMaps::read(std::process::id()).unwrap();
    let libc = crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .unwrap();
    let found = lookup_symbols(
        Path::new(&libc),
        &["aligned_alloc", "memalign", "malloc", "no_such_fn_xyz"],
    )
    .unwrap();
    assert_eq!(found.len(), 3);
    let (aa, ma) = (&found[0], &found[1]);
    assert_eq!(aa.name, "aligned_alloc");
    assert_eq!(
        aa.file_offset, ma.file_offset,
        "glibc 2.36: aligned_alloc is an alias of memalign"
    );
    // Independent: readelf agrees on the vaddr, and text vaddr == offset here.
    let dyn_ = readelf_dynsyms(&libc);
    let ra = dyn_.iter().find(|s| s.0 == "aligned_alloc").unwrap();
    assert_eq!(ra.1, aa.vaddr);
    assert_eq!(ra.2, aa.size);
    assert!(!aa.is_ifunc);
    // memcpy: two versions exist (memcpy@GLIBC_2.2.5 plain, memcpy@@GLIBC_2.14 IFUNC);
    // the default version must win.
    let mc = lookup_symbol(Path::new(&libc), "memcpy").unwrap().unwrap();
    assert!(mc.is_ifunc, "{mc:?}");
    assert!(dyn_
        .iter()
        .any(|s| s.0 == "memcpy" && s.1 == mc.vaddr && s.3 == "IFUNC"));
}

/// The implementation each IFUNC really resolves to, per gdb, read from
/// libc's IRELATIVE slot found with `readelf -r` (independent of our ELF
/// parsing): returns (gdb's symbol line, runtime pointer).
pub(crate) fn gdb_info_symbol_of_slot(pid: u32, slot: u64) -> String {
    let out = run(
        "gdb",
        &[
            "-batch",
            "-nx",
            "-p",
            &pid.to_string(),
            "-ex",
            &format!("info symbol *(void**){slot:#x}"),
        ],
    );
    out.lines()
        .find(|l| l.contains(" in section "))
        .unwrap_or_else(|| panic!("gdb said: {out}"))
        .to_string()
}

pub(crate) fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "rig-sym-{tag}-{}-{:?}",
        std::process::id(),
        std::thread::current().id()
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `objdump -d` labels `<puts@plt>` (independent of our decoder).
fn objdump_plt_addr(exe: &str, sym: &str) -> Vec<(String, u64)> {
    let out = run(
        "objdump",
        &["-d", "-j", ".plt", "-j", ".plt.sec", "-j", ".plt.got", exe],
    );
    let mut sec = String::new();
    let mut v = Vec::new();
    for l in out.lines() {
        if let Some(s) = l.strip_prefix("Disassembly of section ") {
            sec = s.trim_end_matches(':').to_string();
        }
        if l.ends_with(&format!("<{sym}@plt>:")) {
            v.push((
                sec.clone(),
                u64::from_str_radix(l.split_whitespace().next().unwrap(), 16).unwrap(),
            ));
        }
    }
    v
}

// Long by design: one compiled program per PLT layout (lazy, IBT, now),
// each stub checked against objdump and named the same from both ends.
#[test]
fn plt_stubs_are_named() {
    let dir = tempdir("plt");
    let src = dir.join("p.c");
    std::fs::write(
        &src,
        "#include <stdio.h>\n#include <string.h>\n\
         int (*volatile fp)(const char *) = puts;\n\
         int main(int c, char **v) { char b[64]; memcpy(b, v[0], 8); b[8] = 0; puts(b); fp(\"x\"); return (int)strlen(b); }\n",
    )
    .unwrap();
    let variants: &[(&str, &[&str])] = &[
        ("lazy", &["-O0", "-fno-builtin", "-Wl,-z,lazy"]),
        (
            "ibt-lazy",
            &[
                "-O0",
                "-fno-builtin",
                "-fcf-protection=full",
                "-Wl,-z,ibtplt",
                "-Wl,-z,lazy",
            ],
        ),
        ("now", &["-O0", "-fno-builtin", "-Wl,-z,now"]),
    ];
    for (tag, flags) in variants {
        let exe = dir.join(format!("p-{tag}"));
        let mut args: Vec<&str> = flags.to_vec();
        args.extend(["-o", exe.to_str().unwrap(), src.to_str().unwrap()]);
        run("gcc", &args);
        let facts = ElfFacts::load(&exe).unwrap();
        let exe_s = exe.to_str().unwrap();
        let rela_plt: Vec<&Reloc> = facts
            .relocs
            .iter()
            .filter(|r| r.section == ".rela.plt")
            .collect();
        let has_sec = facts.section(".plt.sec").is_some();
        eprintln!("{tag}: .plt.sec={has_sec} stubs={:?}", facts.plt_stubs());
        for sym in ["puts", "memcpy", "strlen"] {
            let labels = objdump_plt_addr(exe_s, sym);
            assert!(!labels.is_empty(), "{tag}: objdump shows no {sym}@plt");
            for (sec, vaddr) in labels {
                // .plt entry i+1 / .plt.sec entry i for the i-th .rela.plt
                // relocation: .plt opens with the lazy resolver's stub, .plt.sec does not.
                if sec == ".plt" || sec == ".plt.sec" {
                    let idx = rela_plt
                        .iter()
                        .position(|r| r.sym.as_deref() == Some(sym))
                        .unwrap() as u64;
                    let s = facts.section(&sec).unwrap();
                    let want = if sec == ".plt" {
                        s.addr + 16 * (idx + 1)
                    } else {
                        s.addr + 16 * idx
                    };
                    assert_eq!(vaddr, want, "{tag}: {sym} in {sec}");
                }
                let off = facts.vaddr_to_file_offset(vaddr).unwrap();
                for o in [off, off + 4] {
                    let site = &symbolize_elf_with(&exe, &[o], true)[0];
                    assert_eq!(site.naming, Naming::Plt, "{tag} {sym} {sec}: {site:?}");
                    assert_eq!(site.label(), format!("{sym}@plt"), "{tag} {sec}");
                }
            }
        }
        if *tag == "ibt-lazy" {
            assert!(has_sec, "-z ibtplt should produce .plt.sec");
            // The lazy .plt stubs behind .plt.sec are named via their push index.
            let plt = facts.section(".plt").unwrap();
            let idx = rela_plt
                .iter()
                .position(|r| r.sym.as_deref() == Some("puts"))
                .unwrap() as u64;
            let lazy = plt.addr + 16 * (idx + 1);
            assert_eq!(facts.plt_stub_at(lazy).unwrap().name, "puts");
        }
        // .plt.got: puts' address is taken (GLOB_DAT), so its call goes through .plt.got.
        if let Some(pg) = facts.section(".plt.got") {
            let stub = facts.plt_stub_at(pg.addr).unwrap();
            eprintln!("{tag}: .plt.got stub {stub:?}");
            let glob = facts
                .relocs
                .iter()
                .find(|r| r.r_type == R_X86_64_GLOB_DAT && r.sym.as_deref() == Some(&stub.name));
            assert!(
                glob.is_some(),
                "{tag}: .plt.got stub {} references a GLOB_DAT slot",
                stub.name
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn load_base_of_libc_matches_dladdr_style_computation() {
    let (_child, maps) = spawn_sleep();
    let libc = crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .unwrap();
    let facts = ElfFacts::load(&maps.readable_path(&libc)).unwrap();
    let m0 = maps.mappings_of(&libc).find(|m| m.offset == 0).unwrap();
    assert_eq!(load_base(&maps, &libc, &facts), Some(m0.start));
    // Non-PIE style: first PT_LOAD at 0x400000 mapped at 0x400000 => base 0.
    let fake = ProcMaps::parse(1, "00400000-00401000 r-xp 00000000 fe:00 1 /x\n").unwrap();
    let mut f2 = facts.clone();
    f2.loads = vec![LoadSeg {
        vaddr: 0x400000,
        offset: 0,
        filesz: 0x1000,
        memsz: 0x1000,
    }];
    assert_eq!(load_base(&fake, "/x", &f2), Some(0));
}
