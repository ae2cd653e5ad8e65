use super::*;

fn arg(size: u8, signed: bool, loc: Loc) -> Arg {
    Arg { size, signed, loc }
}

#[test]
fn every_operand_form_the_shipped_markers_use_parses() {
    let mem = |base, disp, symbol: Option<&str>| Loc::Mem {
        base,
        disp,
        symbol: symbol.map(str::to_string),
    };
    for (spec, want) in [
        ("-4@%eax", arg(4, true, Loc::Reg(Reg::Rax))),
        ("8@%rbp", arg(8, false, Loc::Reg(Reg::Rbp))),
        ("-4@%r14d", arg(4, true, Loc::Reg(Reg::R14))),
        ("2@%ax", arg(2, false, Loc::Reg(Reg::Rax))),
        ("1@%sil", arg(1, false, Loc::Reg(Reg::Rsi))),
        ("-1@%r9b", arg(1, true, Loc::Reg(Reg::R9))),
        ("8@-16(%rbp)", arg(8, false, mem(Reg::Rbp, -16, None))),
        ("4@24(%r13)", arg(4, false, mem(Reg::R13, 24, None))),
        ("8@(%r12)", arg(8, false, mem(Reg::R12, 0, None))),
        ("-4@$5", arg(4, true, Loc::Const(5))),
        ("8@$-1", arg(8, false, Loc::Const(-1))),
        ("4@$8192", arg(4, false, Loc::Const(8192))),
        (
            "-4@NBuffers(%rip)",
            arg(4, true, mem(Reg::Rip, 0, Some("NBuffers"))),
        ),
        (
            "-4@52+CheckpointStats(%rip)",
            arg(4, true, mem(Reg::Rip, 52, Some("CheckpointStats"))),
        ),
        (
            "8@CheckpointStats-8(%rip)",
            arg(8, false, mem(Reg::Rip, -8, Some("CheckpointStats"))),
        ),
        ("8@0x10(%rdi)", arg(8, false, mem(Reg::Rdi, 16, None))),
    ] {
        assert_eq!(parse_arg(spec), Ok(want), "{spec}");
    }
}

#[test]
fn an_operand_rig_cannot_read_is_refused_with_the_reason() {
    for (spec, why) in [
        ("%eax", "no `SIZE@`"),
        ("3@%eax", "not 1, 2, 4 or 8"),
        ("8@%xmm0", "unknown register"),
        ("8@(%rax,%rbx,8)", "indexed address"),
        ("8@16(%rbx", "no closing"),
        ("8@sym(%rbx)", "other than %rip"),
        ("8@$x", "not a number"),
        ("8@a+b(%rip)", "displacement"),
    ] {
        let e = parse_arg(spec).unwrap_err();
        assert!(e.contains(spec) && e.contains(why), "{spec}: {e}");
    }
    assert!(parse_args("8@%rax 8@%xmm1").is_err());
    assert_eq!(parse_args("").unwrap(), Vec::new());
}

#[test]
fn register_names_of_every_width_name_one_register() {
    for (name, r) in [
        ("r8", Reg::R8),
        ("r8d", Reg::R8),
        ("r15w", Reg::R15),
        ("r10b", Reg::R10),
        ("dil", Reg::Rdi),
        ("ebp", Reg::Rbp),
        ("rip", Reg::Rip),
    ] {
        assert_eq!(Reg::parse(name), Some(r), "{name}");
    }
    for name in ["r7", "r16", "r8dd", "r", "xmm0", "eip"] {
        assert_eq!(Reg::parse(name), None, "{name}");
    }
    // struct pt_regs (arch/x86/include/asm/ptrace.h): r15 first, rsp after
    // rip, cs and flags.
    assert_eq!(Reg::R15.pt_regs_offset(), 0);
    assert_eq!(Reg::Rdi.pt_regs_offset(), 112);
    assert_eq!(Reg::Rsp.pt_regs_offset(), 152);
}

/// (provider, name, location, base, semaphore, arguments) as readelf
/// prints a stapsdt note.
type ReadelfNote = (String, String, u64, u64, u64, String);

/// `readelf -n` of `path`: every stapsdt note, and the address of
/// `.stapsdt.base`.
fn readelf_notes(path: &str) -> (Vec<ReadelfNote>, Option<u64>) {
    let out = std::process::Command::new("readelf")
        .args(["-n", "-W", path])
        .output()
        .expect("readelf (binutils) runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let hex = |s: &str| u64::from_str_radix(s.trim().trim_start_matches("0x"), 16).unwrap();
    let mut notes = Vec::new();
    let mut cur: (String, String, u64, u64, u64) = Default::default();
    for line in text.lines().map(str::trim) {
        // `-W` prints the provider on the note's own line, after a tab.
        if let Some((_, p)) = line.split_once("Provider: ") {
            cur.0 = p.to_string();
        } else if let Some(n) = line.strip_prefix("Name: ") {
            cur.1 = n.to_string();
        } else if let Some(l) = line.strip_prefix("Location: ") {
            let f: Vec<&str> = l.split(',').collect();
            cur.2 = hex(f[0]);
            cur.3 = hex(f[1].trim().trim_start_matches("Base: "));
            cur.4 = hex(f[2].trim().trim_start_matches("Semaphore: "));
        } else if let Some(a) = line.strip_prefix("Arguments:") {
            let c = std::mem::take(&mut cur);
            notes.push((c.0, c.1, c.2, c.3, c.4, a.trim().to_string()));
        }
    }
    let sections = std::process::Command::new("readelf")
        .args(["-S", "-W", path])
        .output()
        .unwrap();
    let base = String::from_utf8_lossy(&sections.stdout)
        .lines()
        .find(|l| l.contains(" .stapsdt.base "))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let i = f.iter().position(|w| *w == ".stapsdt.base").unwrap();
            hex(f[i + 2])
        });
    (notes, base)
}

/// Every marker Debian's PostgreSQL and CPython carry, against binutils'
/// own reading of the notes: same providers, names, addresses (moved by
/// `.stapsdt.base` as binutils leaves to the reader), semaphores and
/// argument strings; every argument parses; every semaphore has a file
/// offset.
#[test]
fn the_markers_of_shipped_binaries_equal_readelfs_notes() {
    let files = [
        "/usr/lib/postgresql/15/bin/postgres",
        "/usr/bin/python3.11",
        "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0",
    ];
    let present: Vec<&str> = files
        .into_iter()
        .filter(|f| Path::new(f).exists())
        .collect();
    // python3.11 is Debian 12's python3; the machine has it.
    assert!(!present.is_empty(), "none of {files:?} is installed");
    for path in present {
        let (want, base) = readelf_notes(path);
        assert!(!want.is_empty(), "{path}: readelf lists no stapsdt note");
        let got = parse(&std::fs::read(path).unwrap()).unwrap();
        assert_eq!(got.len(), want.len(), "{path}");
        for (m, w) in got.iter().zip(&want) {
            let (provider, name, loc, base_then, sema, args) = w;
            let vaddr = match base {
                Some(now) => loc + now - base_then,
                None => *loc,
            };
            assert_eq!(
                (&m.provider, &m.name, m.vaddr, &m.args_text),
                (provider, name, vaddr, args),
                "{path}"
            );
            assert_eq!(m.semaphore.map(|s| s.vaddr).unwrap_or(0), *sema, "{path}");
            if let Some(s) = m.semaphore {
                assert!(s.file_offset.is_some(), "{path}: {m:?}");
            }
            let parsed = m.args.as_ref().unwrap_or_else(|e| panic!("{path}: {e}"));
            assert_eq!(parsed.len(), args.split_whitespace().count());
        }
    }
}

/// The marker's file offset is its `nop`: x86's `nop` (0x90) at that byte
/// of the file, as `<sys/sdt.h>` places it.
#[test]
fn a_markers_file_offset_holds_its_nop() {
    let path = "/usr/bin/python3.11";
    if !Path::new(path).exists() {
        return;
    }
    let data = std::fs::read(path).unwrap();
    let markers = parse(&data).unwrap();
    assert!(!markers.is_empty());
    for m in &markers {
        assert_eq!(data[m.file_offset as usize], 0x90, "{m:?}");
    }
}
