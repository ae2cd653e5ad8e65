use super::build::module_of;
use super::eh_frame::convert;
use super::index::compact;
use super::rows::{covered_by, entry_point_rows};
use super::*;
use crate::runtime::go::gopclntab::GoTable;
use crate::runtime::go::unwind::{go_callback_switch, go_cgo_calls};
use gimli::{BaseAddresses, CieOrFde, EhFrame, LittleEndian, UnwindContext, UnwindSection};
use object::{Object, ObjectSection};
use rig_ebpf::abi::unwind_cfa;

#[test]
fn recognises_the_plt_expression() {
    let e = [
        0x77, 0x08, 0x80, 0x00, 0x3f, 0x1a, 0x3b, 0x2a, 0x33, 0x24, 0x22,
    ];
    assert_eq!(plt_threshold(&e), Some(11));
    assert_eq!(plt_threshold(&e[..10]), None);
}

#[test]
fn libc_has_rows_for_its_functions() {
    let maps = ProcMaps::read(std::process::id()).unwrap();
    let libc = crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .expect("the test binary maps libc");
    let t = build_module(&libc, Path::new(&libc)).unwrap();
    assert!(t.rows.len() > 1000, "libc rows: {}", t.rows.len());
    assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc));
}

/// rig-fixtures' stackcalib_rs is linked by lld: its R+X segment starts
/// mid-page in the file (0x...410) right after the R segment, and the
/// kernel maps it from the page-aligned offset, which lies in the R
/// segment's tail.
#[test]
fn bias_of_an_lld_text_mapping_comes_from_the_executable_segment() {
    let path = rig_fixtures::stackcalib_rs();
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let text = file
        .segments()
        .find(|s| {
            matches!(s.flags(), object::SegmentFlags::Elf { p_flags }
                if p_flags & object::elf::PF_X != 0)
        })
        .unwrap();
    let (off, _) = text.file_range();
    assert_ne!(
        off & 0xfff,
        0,
        "the R+X segment starts mid-page in the file"
    );
    let base = 0x5555_0000_0000u64;
    let start = base + (text.address() & !0xfff);
    assert_eq!(
        segment_bias(&exec_segments(&file), start, off & !0xfff),
        Some(base)
    );
}

#[test]
fn the_bucket_index_brackets_the_covering_row() {
    let row = |pc| UnwindRow {
        pc,
        cfa: unwind_cfa::RSP,
        ..Default::default()
    };
    let rows: Vec<UnwindRow> = [0x1010u64, 0x1020, 0x1200, 0x1450, 0x2000]
        .into_iter()
        .map(row)
        .collect();
    let (pc_base, index) = bucket_index(&rows);
    assert_eq!(pc_base, 0x1000);
    let table = ModuleTable {
        rows: rows.clone(),
        pc_base,
        index,
        unsupported: 0,
        exec_segments: Vec::new(),
    };
    assert!(lookup(&table, 0x100f).is_none());
    for v in 0x1010..0x2100u64 {
        let covering = rows.iter().rposition(|r| r.pc <= v).unwrap();
        assert_eq!(lookup(&table, v), Some(&rows[covering]), "v={v:#x}");
    }
}

#[test]
fn every_libc_address_finds_the_row_a_linear_scan_finds() {
    let maps = ProcMaps::read(std::process::id()).unwrap();
    let libc = crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .expect("the test binary maps libc");
    let t = build_module(&libc, Path::new(&libc)).unwrap();
    let (first, last) = (t.rows[0].pc, t.rows.last().unwrap().pc);
    for v in (first..last + 64).step_by(61) {
        let n = t.rows.partition_point(|r| r.pc <= v);
        let want = n.checked_sub(1).map(|i| &t.rows[i]);
        assert_eq!(lookup(&t, v), want, "v={v:#x}");
    }
}

#[no_mangle]
#[inline(never)]
extern "C" fn rig_unwind_bias_marker() {}

#[test]
fn bias_uses_the_executable_segment_even_below_its_file_offset() {
    // rig's own test binary: its text segment's vaddr - offset may
    // differ from the first segment's (lld and gold lay out like that).
    let exe = std::fs::read("/proc/self/exe").unwrap();
    let file = object::File::parse(&*exe).unwrap();
    let maps = ProcMaps::read(std::process::id()).unwrap();
    let me = std::fs::read_link("/proc/self/exe").unwrap();
    let m = maps
        .mappings
        .iter()
        .find(|m| m.is_exec() && m.path.as_deref() == me.to_str())
        .expect("the test binary's text mapping");
    let bias = segment_bias(&exec_segments(&file), m.start, m.offset).unwrap();
    // The address of a function in this binary, minus the bias, is its
    // symbol value.
    let f = rig_unwind_bias_marker as *const () as u64;
    use object::ObjectSymbol;
    let sym = file
        .symbols()
        .find(|s| s.name() == Ok("rig_unwind_bias_marker"))
        .expect("the marker's symbol");
    assert_eq!(f - bias, sym.address());
}

#[test]
fn compaction_prefers_real_rules_and_merges_equal_neighbours() {
    let row = |pc, cfa, off| UnwindRow {
        pc,
        cfa,
        cfa_off: off,
        ..Default::default()
    };
    let out = compact(vec![
        row(0, unwind_cfa::RSP, 8),
        row(1, unwind_cfa::RSP, 16),
        row(10, unwind_cfa::NONE, 0),
        row(10, unwind_cfa::RSP, 8),
        row(12, unwind_cfa::RSP, 8),
        row(20, unwind_cfa::NONE, 0),
    ]);
    let pcs: Vec<u64> = out.iter().map(|r| r.pc).collect();
    assert_eq!(pcs, vec![0, 1, 10, 20]);
    assert_eq!(out[2].cfa, unwind_cfa::RSP);
}

// ---------------------------------------------------------------------------
// Properties: a target's module is untrusted input. Arbitrary and mutated
// bytes give a table or an error, never a panic, and a table keeps the
// order the BPF walk's binary search needs.

use crate::testkit::fuzz;

/// A table as the walk needs it: rows strictly by pc, every bucket's rows
/// inside the table, and a lookup anywhere answers without panicking.
fn check_table(t: &ModuleTable) {
    assert!(t.rows.windows(2).all(|w| w[0].pc < w[1].pc));
    assert!(t
        .index
        .iter()
        .all(|b| b.lo <= b.hi && (b.hi as usize) < t.rows.len()));
    for r in t.rows.iter().take(64) {
        let _ = lookup(t, r.pc);
        let _ = lookup(t, r.pc.wrapping_add(1));
    }
    let _ = lookup(t, u64::MAX);
}

/// A module's bytes and the file range of its `.eh_frame`.
type WithEhFrame = (Vec<u8>, std::ops::Range<usize>);

fn with_eh_frame(path: &Path) -> WithEhFrame {
    let data = std::fs::read(path).unwrap();
    let file = object::File::parse(&*data).unwrap();
    let (off, size) = file
        .section_by_name(".eh_frame")
        .and_then(|s| s.file_range())
        .unwrap_or_else(|| panic!("{} has an .eh_frame", path.display()));
    let range = off as usize..(off + size) as usize;
    (data, range)
}

/// The calibration server (small, gcc) and the libc this test maps (large,
/// hand-written assembly among its FDEs).
fn modules_with_eh_frame() -> &'static [WithEhFrame; 2] {
    static MODULES: std::sync::OnceLock<[WithEhFrame; 2]> = std::sync::OnceLock::new();
    MODULES.get_or_init(|| {
        let maps = ProcMaps::read(std::process::id()).unwrap();
        let libc = crate::runtime::c_library(maps.pid, &maps)
            .map(|c| c.0)
            .expect("the test binary maps libc");
        [
            with_eh_frame(rig_fixtures::calib_server()),
            with_eh_frame(Path::new(&libc)),
        ]
    })
}

#[test]
fn unwind_tables_of_mutated_eh_frames_never_panic() {
    use proptest::prelude::*;
    let modules = modules_with_eh_frame();
    for (elf, eh) in modules {
        assert!(!eh.is_empty());
        // Each unmutated file builds a table: the mutations start from real ones.
        check_table(&module_of("", elf).unwrap());
    }
    let edits = prop::collection::vec((any::<usize>(), any::<u8>(), any::<bool>()), 1..48);
    fuzz(
        "unwind_tables_of_mutated_eh_frames",
        (any::<bool>(), edits, any::<usize>(), 0u8..4),
        |(libc, edits, cut, how)| {
            let (elf, eh) = &modules[usize::from(libc)];
            let mut b = elf.clone();
            for (at, byte, word) in edits {
                // Mostly single bytes; sometimes a whole 4-byte field (an
                // entry length, a CIE pointer, a pc) set to a wild value.
                let i = eh.start + at % eh.len();
                if word && i + 4 <= eh.end {
                    b[i..i + 4]
                        .copy_from_slice(&u32::from(byte).rotate_left(at as u32).to_le_bytes());
                } else {
                    b[i] = byte;
                }
            }
            match how {
                // The section's tail zeroed: a terminator mid-section.
                0 => b[eh.start + cut % eh.len()..eh.end].fill(0),
                // The file cut inside the section.
                1 => b.truncate(eh.start + cut % eh.len()),
                _ => {}
            }
            if let Ok(t) = module_of("", &b) {
                check_table(&t);
            }
        },
    );
}

#[test]
fn unwind_tables_of_arbitrary_and_mutated_elf_bytes_never_panic() {
    use proptest::prelude::*;
    fuzz(
        "unwind_tables_of_arbitrary_elf_bytes",
        prop::collection::vec(any::<u8>(), 0..2048),
        |tail| {
            let mut data = b"\x7fELF\x02\x01\x01\0".to_vec();
            data.extend(tail);
            if let Ok(t) = module_of("", &data) {
                check_table(&t);
            }
        },
    );
    let (elf, _) = &modules_with_eh_frame()[0];
    fuzz(
        "unwind_tables_of_mutated_elf_headers",
        prop::collection::vec((any::<usize>(), any::<u8>()), 1..32),
        |edits| {
            let mut b = elf.clone();
            // The ELF header, program headers and section headers: where a
            // parser trusts offsets and sizes.
            for (at, byte) in edits {
                let span = 4096.min(b.len());
                let i = if at % 2 == 0 {
                    at % span
                } else {
                    b.len() - 1 - at % span
                };
                b[i] = byte;
            }
            if let Ok(t) = module_of("", &b) {
                check_table(&t);
            }
        },
    );
}

/// In the static calibration server: musl's functions have rows from their
/// entry, but not its signal return trampoline, the byte before it, nor
/// its clone.
#[test]
fn musls_signal_return_and_clone_get_no_rows_and_its_other_functions_do() {
    use object::ObjectSymbol;
    let elf = std::fs::read(rig_fixtures::calib_server_static("musl")).unwrap();
    let t = module_of("", &elf).unwrap();
    let file = object::File::parse(&*elf).unwrap();
    // (start, size), a hand-written one (`__clone`) up to the next symbol.
    let at = |name: &str| {
        let s = file.symbols().find(|s| s.name() == Ok(name)).unwrap();
        let next = file
            .symbols()
            .map(|n| n.address())
            .filter(|&a| a > s.address())
            .min()
            .unwrap();
        let size = if s.size() > 0 {
            s.size()
        } else {
            next - s.address()
        };
        (s.address(), size)
    };
    let rule = |pc: u64| lookup(&t, pc).map_or(NONE, |r| r.cfa);
    for name in ["__restore_rt", "__clone"] {
        let (start, size) = at(name);
        for pc in start..start + size {
            assert_eq!(rule(pc), NONE, "{name}+{:#x}", pc - start);
        }
    }
    assert_eq!(rule(at("__restore_rt").0 - 1), NONE);
    for name in [
        "sccp",
        "recvfrom",
        "__libc_malloc_impl",
        "alloc_slot",
        "printf_core",
    ] {
        let (start, _) = at(name);
        let r = lookup(&t, start).unwrap();
        assert_eq!((r.cfa, r.cfa_off, r.rbp_off), (RSP, 8, 0), "{name}");
    }
}

#[test]
fn stack_height_analysis_of_arbitrary_code_and_mutated_musl_programs_never_panics() {
    use proptest::prelude::*;
    fuzz(
        "stack_height_analysis_of_arbitrary_code",
        (
            prop::collection::vec(any::<u8>(), 0..512),
            prop::collection::vec(any::<u8>(), 0..64),
        ),
        |(code, table)| {
            let read = |addr: u64, len: usize| {
                let at = usize::try_from(addr % 64).ok()?;
                table.get(at..at.checked_add(len)?).map(<[u8]>::to_vec)
            };
            let rows = height::height_rows(&code, 0x1000, &[0x1010], &read);
            assert!(rows
                .iter()
                .all(|r| (0x1000..=0x1000 + 512 + 15).contains(&r.pc)));
        },
    );
    // musl's code in a static program, and the symbols that say where its
    // functions are, mutated.
    let elf = std::fs::read(rig_fixtures::calib_server_static("musl")).unwrap();
    let file = object::File::parse(&*elf).unwrap();
    let range = |name: &str| {
        let (off, size) = file.section_by_name(name).unwrap().file_range().unwrap();
        off as usize..(off + size) as usize
    };
    let (text, symtab) = (range(".text"), range(".symtab"));
    check_table(&module_of("", &elf).unwrap());
    fuzz(
        "stack_height_analysis_of_mutated_musl_programs",
        prop::collection::vec((any::<bool>(), any::<usize>(), any::<u8>()), 1..48),
        |edits| {
            let mut b = elf.clone();
            for (in_text, at, byte) in edits {
                let r = if in_text { &text } else { &symtab };
                b[r.start + at % r.len()] = byte;
            }
            if let Ok(t) = module_of("", &b) {
                check_table(&t);
            }
        },
    );
}

/// The rows the stack height analysis gives `code` at 0x1000, compacted as
/// a table holds them: (pc, CFA rule, CFA offset, rbp offset).
fn analysed(code: &[u8]) -> Vec<(u64, u8, i32, i16)> {
    compact(height::height_rows(code, 0x1000, &[], &|_, _| None))
        .iter()
        .map(|r| (r.pc, r.cfa, r.cfa_off, r.rbp_off))
        .collect()
}

const RSP: u8 = unwind_cfa::RSP;
const RBP: u8 = unwind_cfa::RBP;
const NONE: u8 = unwind_cfa::NONE;

#[test]
fn stack_height_follows_pushes_a_frame_and_a_branch_around_a_call() {
    let code = [
        0x55, // 1000 push rbp
        0x53, // 1001 push rbx
        0x48, 0x83, 0xec, 0x18, // 1002 sub rsp, 0x18
        0x85, 0xff, // 1006 test edi, edi
        0x74, 0x05, // 1008 je 100f
        0xe8, 0xf1, 0x0f, 0x00, 0x00, // 100a call 2000
        0x48, 0x83, 0xc4, 0x18, // 100f add rsp, 0x18
        0x5b, // 1013 pop rbx
        0x5d, // 1014 pop rbp
        0xc3, // 1015 ret
    ];
    assert_eq!(
        analysed(&code),
        [
            (0x1000, RSP, 8, 0),
            (0x1001, RSP, 16, -16),
            (0x1002, RSP, 24, -16),
            (0x1006, RSP, 48, -16),
            (0x1013, RSP, 24, -16),
            (0x1014, RSP, 16, -16),
            (0x1015, RSP, 8, 0),
            (0x1016, NONE, 0, 0),
        ]
    );
}

#[test]
fn two_paths_reaching_one_instruction_at_different_heights_give_it_no_row() {
    let code = [
        0x85, 0xff, // 1000 test edi, edi
        0x74, 0x01, // 1002 je 1005
        0x50, // 1004 push rax
        0x31, 0xc0, // 1005 xor eax, eax: height 0 or 8
        0xc3, // 1007 ret
    ];
    assert_eq!(analysed(&code), [(0x1000, RSP, 8, 0), (0x1005, NONE, 0, 0)]);
}

#[test]
fn an_rsp_aligned_without_a_frame_pointer_ends_the_rows() {
    let code = [
        0x53, // 1000 push rbx
        0x48, 0x83, 0xe4, 0xf0, // 1001 and rsp, -16
        0xe8, 0xf6, 0x0f, 0x00, 0x00, // 1005 call 2000
        0x5b, // 100a pop rbx
        0xc3, // 100b ret
    ];
    assert_eq!(
        analysed(&code),
        [
            (0x1000, RSP, 8, 0),
            (0x1001, RSP, 16, 0),
            (0x1005, NONE, 0, 0)
        ]
    );
}

#[test]
fn an_rsp_aligned_under_a_frame_pointer_is_followed_from_rbp_up_to_leave() {
    let code = [
        0x55, // 1000 push rbp
        0x48, 0x89, 0xe5, // 1001 mov rbp, rsp
        0x48, 0x83, 0xe4, 0xf0, // 1004 and rsp, -16
        0x48, 0x83, 0xec, 0x20, // 1008 sub rsp, 0x20
        0xe8, 0xef, 0x0f, 0x00, 0x00, // 100c call 2000
        0xc9, // 1011 leave
        0xc3, // 1012 ret
    ];
    assert_eq!(
        analysed(&code),
        [
            (0x1000, RSP, 8, 0),
            (0x1001, RSP, 16, -16),
            (0x1008, RBP, 16, -16),
            (0x1012, RSP, 8, 0),
            (0x1013, NONE, 0, 0),
        ]
    );
}

#[test]
fn paths_joining_at_different_heights_under_a_frame_pointer_keep_a_row_from_rbp() {
    let code = [
        0x55, // 1000 push rbp
        0x48, 0x89, 0xe5, // 1001 mov rbp, rsp
        0x85, 0xff, // 1004 test edi, edi
        0x74, 0x03, // 1006 je 100b
        0x48, 0x29, 0xc4, // 1008 sub rsp, rax (a variable-length array)
        0xe8, 0xf0, 0x0f, 0x00, 0x00, // 100b call 2000: height 8 or unknown
        0xc9, // 1010 leave
        0xc3, // 1011 ret
    ];
    assert_eq!(
        analysed(&code),
        [
            (0x1000, RSP, 8, 0),
            (0x1001, RSP, 16, -16),
            (0x100b, RBP, 16, -16),
            (0x1011, RSP, 8, 0),
            (0x1012, NONE, 0, 0),
        ]
    );
}

#[test]
fn a_pop_into_a_saved_rbp_keeps_the_callers_rbp_in_its_slot() {
    let code = [
        0x55, // 1000 push rbp
        0x6a, 0x01, // 1001 push 1 (an argument)
        0xe8, 0xf8, 0x0f, 0x00, 0x00, // 1003 call 2000
        0x5d, // 1008 pop rbp: drops the argument
        0x5d, // 1009 pop rbp: the caller's, back
        0xc3, // 100a ret
    ];
    assert_eq!(
        analysed(&code),
        [
            (0x1000, RSP, 8, 0),
            (0x1001, RSP, 16, -16),
            (0x1003, RSP, 24, -16),
            (0x1009, RSP, 16, -16),
            (0x100a, RSP, 8, 0),
            (0x100b, NONE, 0, 0),
        ]
    );
    // Without a saved rbp, a pop into it loses the caller's.
    assert_eq!(
        analysed(&[0x6a, 0x01, 0x5d, 0xc3]),
        [
            (0x1000, RSP, 8, 0),
            (0x1002, RSP, 16, 0),
            (0x1003, NONE, 0, 0)
        ]
    );
}

#[test]
fn rsp_from_a_register_rbp_written_unsaved_and_jump_tables_end_a_path() {
    // mov rsp, rax: nothing after it has a row.
    let code = [0x48, 0x89, 0xc4, 0xc3];
    assert_eq!(analysed(&code), [(0x1000, RSP, 8, 0), (0x1003, NONE, 0, 0)]);
    // xor ebp, ebp before any push rbp: the caller's rbp is gone.
    let code = [0x31, 0xed, 0xc3];
    assert_eq!(analysed(&code), [(0x1000, RSP, 8, 0), (0x1002, NONE, 0, 0)]);
    // sub rsp, rdi.
    let code = [0x48, 0x29, 0xfc, 0xc3];
    assert_eq!(analysed(&code), [(0x1000, RSP, 8, 0), (0x1003, NONE, 0, 0)]);
    // push rbp; mov rbp, rsp; xchg rsp, rbp: neither gives the CFA.
    let code = [0x55, 0x48, 0x89, 0xe5, 0x48, 0x87, 0xe5, 0xc3];
    assert_eq!(
        analysed(&code),
        [
            (0x1000, RSP, 8, 0),
            (0x1001, RSP, 16, -16),
            (0x1007, NONE, 0, 0)
        ]
    );
    // push rbx; jmp rax; then code only the jump table reaches.
    let code = [0x53, 0xff, 0xe0, 0x5b, 0xc3];
    assert_eq!(
        analysed(&code),
        [
            (0x1000, RSP, 8, 0),
            (0x1001, RSP, 16, 0),
            (0x1003, NONE, 0, 0)
        ]
    );
}

#[test]
fn a_loop_keeps_its_height_and_a_tail_jump_ends_the_path() {
    let code = [
        0x48, 0x83, 0xec, 0x08, // 1000 sub rsp, 8
        0xff, 0xc9, // 1004 dec ecx
        0x75, 0xfc, // 1006 jne 1004
        0x48, 0x83, 0xc4, 0x08, // 1008 add rsp, 8
        0xe9, 0xef, 0x0f, 0x00, 0x00, // 100c jmp 2000
        0xcc, // 1011 int3: padding no path reaches
    ];
    assert_eq!(
        analysed(&code),
        [
            (0x1000, RSP, 8, 0),
            (0x1004, RSP, 16, 0),
            (0x100c, RSP, 8, 0),
            (0x1011, NONE, 0, 0),
        ]
    );
}

/// `switch (edi) { case 0: case 1: ... default: ... }` as GCC lays it out
/// (`cmp`, `ja`, `lea` of the table, `movslq`, `add`, `jmp *%rax`), with
/// `cmp_reg` the modrm byte of its compare, and its table at 0x3000.
fn switch(cmp_reg: u8, case1: i32) -> (Vec<u8>, Vec<u8>) {
    let mut code = vec![
        0x53, // 1000 push rbx
        0x83, cmp_reg, 0x01, // 1001 cmp edi, 1
        0x77, 0x14, // 1004 ja 101a
        0x48, 0x8d, 0x15, 0xf3, 0x1f, 0x00, 0x00, // 1006 lea rdx, [rip + 0x3000]
        0x48, 0x63, 0x04, 0xba, // 100d movslq (%rdx,%rdi,4), %rax
        0x48, 0x01, 0xd0, // 1011 add rax, rdx
        0xff, 0xe0, // 1014 jmp rax
    ];
    code.extend([0x5b, 0xc3, 0x5b, 0xc3, 0x5b, 0xc3]); // 1016, 1018, 101a: pop rbx; ret
    let table = [0x1016 - 0x3000i32, case1 - 0x3000]
        .iter()
        .flat_map(|e| e.to_le_bytes())
        .collect();
    (code, table)
}

fn analysed_with(code: &[u8], table: &[u8]) -> Vec<(u64, u8, i32)> {
    let read = |addr: u64, len: usize| {
        let at = usize::try_from(addr.checked_sub(0x3000)?).ok()?;
        table.get(at..at + len).map(<[u8]>::to_vec)
    };
    compact(height::height_rows(code, 0x1000, &[], &read))
        .iter()
        .map(|r| (r.pc, r.cfa, r.cfa_off))
        .collect()
}

#[test]
fn a_jump_table_guarded_by_its_compare_carries_the_height_to_every_case() {
    let (code, table) = switch(0xff, 0x1018);
    assert_eq!(
        analysed_with(&code, &table),
        [
            (0x1000, RSP, 8),
            (0x1001, RSP, 16),
            (0x1017, RSP, 8),
            (0x1018, RSP, 16),
            (0x1019, RSP, 8),
            (0x101a, RSP, 16),
            (0x101b, RSP, 8),
            (0x101c, NONE, 0),
        ]
    );
    // Cases only the table reaches get no row when the compare bounds
    // another register (esi), a case lies outside the function, or the
    // table cannot be read.
    let unread = [
        (0x1000, RSP, 8),
        (0x1001, RSP, 16),
        (0x1016, NONE, 0),
        (0x101a, RSP, 16),
        (0x101b, RSP, 8),
        (0x101c, NONE, 0),
    ];
    let (code, table) = switch(0xfe, 0x1018);
    assert_eq!(analysed_with(&code, &table), unread);
    let (code, table) = switch(0xff, 0x2000);
    assert_eq!(analysed_with(&code, &table), unread);
    assert_eq!(analysed_with(&code, &[]), unread);
}

#[test]
fn no_row_covers_a_poisoned_byte() {
    // push rbx; pop rbx; ret, with the ret's byte poisoned.
    let rows = compact(height::height_rows(
        &[0x53, 0x5b, 0xc3],
        0x1000,
        &[0x1002],
        &|_, _| None,
    ));
    let rows: Vec<_> = rows.iter().map(|r| (r.pc, r.cfa, r.cfa_off)).collect();
    assert_eq!(
        rows,
        [(0x1000, RSP, 8), (0x1001, RSP, 16), (0x1002, NONE, 0)]
    );
}

/// Where both give a CFA from the same register, the analysis of every function of libc
/// (entered at CFA = rsp + 8) says what its `.eh_frame` says.
#[test]
fn stack_height_analysis_agrees_with_the_eh_frame_of_libc() {
    let maps = ProcMaps::read(std::process::id()).unwrap();
    let libc = crate::runtime::c_library(maps.pid, &maps)
        .map(|c| c.0)
        .expect("the test binary maps libc");
    let data = std::fs::read(&libc).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let eh = obj.section_by_name(".eh_frame").unwrap();
    let bases = BaseAddresses::default().set_eh_frame(eh.address());
    let section = EhFrame::new(eh.data().unwrap(), LittleEndian);
    let segments = exec_segments(&obj);
    let mut ctx = Box::new(UnwindContext::new());
    let mut entries = section.entries(&bases);
    let (mut compared, mut wrong) = (0usize, Vec::new());
    while let Some(entry) = entries.next().unwrap() {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let Ok(fde) = partial.parse(|s, b, o| s.cie_from_offset(b, o)) else {
            continue;
        };
        let (begin, end) = (fde.initial_address(), fde.end_address());
        let Some(&(off, _, vaddr)) = segments
            .iter()
            .find(|&&(_, size, vaddr)| vaddr <= begin && end <= vaddr + size)
        else {
            continue;
        };
        let code = &data[(off + begin - vaddr) as usize..(off + end - vaddr) as usize];
        let Ok(mut table) = fde.rows(&section, &bases, &mut ctx) else {
            continue;
        };
        let mut cfi = Vec::new();
        while let Ok(Some(row)) = table.next_row() {
            cfi.push((row.end_address(), convert(&section, row)));
        }
        // Code entered by a jump at another height (GCC's `.cold` parts),
        // and FDEs of assembly that describe only its entry (glibc's
        // `__mpn_mul_1` pushes rbp and rbx without saying so).
        if cfi.len() < 2 || (cfi[0].1.cfa, cfi[0].1.cfa_off) != (unwind_cfa::RSP, 8) {
            continue;
        }
        let read = |addr: u64, len: usize| -> Option<Vec<u8>> {
            obj.segments()
                .find_map(|seg| seg.data_range(addr, len as u64).ok().flatten())
                .filter(|b| b.len() == len)
                .map(<[u8]>::to_vec)
        };
        let ours = height::height_rows(code, begin, &[], &read);
        for w in ours.windows(2) {
            let r = w[0];
            let Some((_, c)) = cfi.iter().find(|(e, c)| c.pc <= r.pc && r.pc < *e) else {
                continue;
            };
            if c.cfa != r.cfa || r.cfa == unwind_cfa::NONE {
                continue;
            }
            compared += 1;
            // GCC's epilogues keep the rule of an rbp their `pop rbp` has
            // restored (its slot is below rsp): ours says restored.
            let popped = r.rbp_off == 0 && i32::from(c.rbp_off) < -c.cfa_off;
            if c.cfa_off != r.cfa_off || (c.rbp_off != r.rbp_off && !popped) {
                wrong.push(format!(
                    "{begin:#x}: at {:#x} eh_frame {}+{} rbp {} , ours {}+{} rbp {}",
                    r.pc, c.cfa, c.cfa_off, c.rbp_off, r.cfa, r.cfa_off, r.rbp_off
                ));
            }
        }
    }
    eprintln!("compared {compared} rows");
    assert!(compared > 10_000, "{compared}");
    assert!(
        wrong.is_empty(),
        "{} wrong: {:#?}",
        wrong.len(),
        &wrong[..wrong.len().min(20)]
    );
}

/// A thread made by Go's runtime.clone makes its first syscall (gettid)
/// inside it, on its new stack: the walk ends there, whole, while the
/// parent's clone syscall in the same function unwinds to its caller. The
/// two syscalls are found in the fixture's machine code by their numbers.
#[test]
fn go_clone_ends_the_childs_stack_and_unwinds_the_parents() {
    let data = std::fs::read(rig_fixtures::goserver(false)).unwrap();
    let go = GoTable::parse(&data).unwrap().expect("a Go binary");
    let f = go
        .funcs
        .iter()
        .find(|f| f.name == "runtime.clone")
        .expect("runtime.clone");
    let file = object::File::parse(&*data).unwrap();
    let text = file.section_by_name(".text").unwrap();
    let bytes = text.data().unwrap();
    let code = &bytes[(f.entry - text.address()) as usize..(f.end - text.address()) as usize];
    let after = |nr: u8| {
        let pat = [0xb8, nr, 0, 0, 0, 0x0f, 0x05];
        let i = code.windows(7).position(|w| w == pat).expect("the syscall");
        f.entry + i as u64 + 7
    };
    let (clone_ret, gettid_ret) = (after(56), after(186));
    let t = module_of("", &data).unwrap();
    let covering = |pc: u64| t.rows[t.rows.partition_point(|r| r.pc <= pc) - 1];
    let parent = covering(clone_ret);
    assert_eq!(
        (parent.cfa, parent.cfa_off),
        (unwind_cfa::RSP, 8),
        "{parent:?}"
    );
    assert_eq!(
        covering(gettid_ret).cfa,
        unwind_cfa::END,
        "the child's frame"
    );
    let child = covering(gettid_ret).pc;
    assert!(
        clone_ret < child && child < gettid_ret,
        "{clone_ret:#x} {child:#x}"
    );
}

/// The row covering module address `v`.
fn row_at(t: &ModuleTable, v: u64) -> UnwindRow {
    *t.rows.iter().rev().find(|r| r.pc <= v).unwrap()
}

/// In the cgo fixture (fixtures/go/cgoserver), as its Go assembles it:
/// where runtime.asmcgocall's body calls C, the walk goes back to the
/// goroutine's stack (`GO_CGO`), elsewhere in the body it ends; its
/// ABIInternal wrapper is an ordinary frame; while runtime.cgocallback is
/// on the goroutine's stack its CFA is rbp + 16 (its frame on the system
/// stack), and back on the system stack it is rsp-based again.
#[test]
fn cgo_switches_get_rows_that_lead_back_to_the_other_stack() {
    use object::{Object, ObjectSection, ObjectSymbol};
    let path = rig_fixtures::cgoserver();
    let data = std::fs::read(&path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let text = obj.section_by_name(".text").unwrap();
    let code = |name: &str| -> (u64, &[u8]) {
        let sym = obj
            .symbols()
            .find(|s| s.name() == Ok(name))
            .unwrap_or_else(|| panic!("{name} in {}", path.display()));
        let off = (sym.address() - text.address()) as usize;
        let bytes = text.data().unwrap();
        (sym.address(), &bytes[off..off + sym.size() as usize])
    };
    let t = build_module(&path.display().to_string(), &path).unwrap();

    let (body, body_code) = code("runtime.asmcgocall.abi0");
    let calls = go_cgo_calls(body_code);
    assert_eq!(
        calls.len(),
        2,
        "the switching path's call and the one on g0"
    );
    for c in calls {
        assert_eq!(&body_code[c..c + 2], &[0xff, 0xd0], "call *%rax");
        // A return address is looked up at ra - 1: the call's last byte.
        assert_eq!(row_at(&t, body + c as u64 + 1).cfa, unwind_cfa::GO_CGO);
        assert_eq!(row_at(&t, body + c as u64 + 2).cfa, unwind_cfa::END);
    }
    assert_eq!(row_at(&t, body).cfa, unwind_cfa::END);
    let (wrapper, _) = code("runtime.asmcgocall");
    assert_eq!(row_at(&t, wrapper + 8).cfa, unwind_cfa::RSP);

    let (cb, cb_code) = code("runtime.cgocallback.abi0");
    let (on, off) = go_callback_switch(cb_code).unwrap();
    let call = on
        + cb_code[on..]
            .windows(2)
            .position(|w| w == [0xff, 0xd0])
            .unwrap();
    let r = row_at(&t, cb + call as u64 + 1);
    assert_eq!((r.cfa, r.cfa_off, r.rbp_off), (unwind_cfa::RBP, 16, -16));
    assert_eq!(row_at(&t, cb + on as u64).cfa, unwind_cfa::RBP);
    let back = row_at(&t, cb + off as u64);
    assert_eq!((back.cfa, back.rbp_off), (unwind_cfa::RSP, -16), "{back:?}");
    assert_eq!(row_at(&t, cb + on as u64 - 3).cfa, unwind_cfa::RSP);
}

/// PostgreSQL's shape: `_start`'s FDE comes first in `.eh_frame` and
/// `main`'s FDE, read later, ends exactly where `_start` begins. The end
/// marker of `main` shares `_start`'s pc; the rows that fill code without
/// tables must still see `_start` as covered (its END rule), or they put
/// an entry row over it and every stack through `_start` ends "no row".
#[test]
fn an_fde_ending_where_start_begins_leaves_start_covered() {
    let row = |pc, cfa| UnwindRow {
        pc,
        cfa,
        cfa_off: if cfa == unwind_cfa::RSP { 8 } else { 0 },
        ..Default::default()
    };
    let raw = vec![
        row(0x30c0, unwind_cfa::END),  // _start's FDE, first
        row(0x30e2, unwind_cfa::NONE), // its end
        row(0x28f0, unwind_cfa::RSP),  // main's FDE, later
        row(0x30c0, unwind_cfa::NONE), // main's end: _start's pc
    ];
    let covered = covered_by(&raw);
    assert!(covered(0x30c0) && covered(0x30e0));
    assert!(!covered(0x30e2));
    assert!(covered(0x28f0) && covered(0x30bf));
}

/// The executable's entry point ends a stack whatever its own tables say:
/// a walk that reaches `_start` (the return address of its call of
/// `__libc_start_main`) is whole.
#[test]
fn the_entry_point_of_an_executable_ends_the_walk() {
    for path in [rig_fixtures::calib_server(), rig_fixtures::stackcalib_c()] {
        let data = std::fs::read(path).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let segments = exec_segments(&obj);
        let (lo, hi) = entry_point_rows(&obj, &data, &segments)
            .unwrap_or_else(|| panic!("{}: no entry rows", path.display()));
        assert_eq!(lo, obj.entry());
        let t = module_of("", &data).unwrap();
        // The walk looks up a return address's call instruction: hi - 1.
        for v in [lo, hi - 1] {
            assert_eq!(
                row_at(&t, v).cfa,
                unwind_cfa::END,
                "{}: {v:#x}",
                path.display()
            );
        }
    }
    // A shared library's entry point is not a process's first frame.
    let maps = ProcMaps::read(std::process::id()).unwrap();
    let libc = std::fs::read(
        crate::runtime::c_library(maps.pid, &maps)
            .map(|c| c.0)
            .unwrap(),
    )
    .unwrap();
    let obj = object::File::parse(&*libc).unwrap();
    assert_eq!(entry_point_rows(&obj, &libc, &exec_segments(&obj)), None);
}

#[test]
fn jit_code_reaches_through_the_inaccessible_reservation_right_after_it() {
    // A JVM's code cache: committed executable parts, each followed by
    // the rest of its reservation.
    let maps = ProcMaps::parse(
        7,
        "7f0000000000-7f0000100000 rwxp 00000000 00:00 0 \n\
         7f0000100000-7f0000400000 ---p 00000000 00:00 0 \n\
         7f0000400000-7f0000500000 rwxp 00000000 00:00 0 \n\
         7f0000500000-7f0000600000 ---p 00000000 00:00 0 \n\
         7f0000600000-7f0000601000 rw-p 00000000 00:00 0 \n\
         7f0000700000-7f0000800000 rwxp 00000000 00:00 0 \n\
         7f0000800000-7f0000900000 ---p 00000000 00:00 0 /memfd:x\n",
    )
    .unwrap();
    let ends: Vec<u64> = maps
        .mappings
        .iter()
        .filter(|m| m.is_exec())
        .map(|m| reserved_end(&maps, m))
        .collect();
    // The reservation after it, up to the next mapping that is not one; a
    // named mapping is not a reservation.
    assert_eq!(ends, [0x7f00_0040_0000, 0x7f00_0060_0000, 0x7f00_0080_0000]);
    let row = frame_pointer_row();
    assert_eq!(
        (row.cfa, row.cfa_off, row.rbp_off),
        (unwind_cfa::RBP, 16, -16)
    );
}
