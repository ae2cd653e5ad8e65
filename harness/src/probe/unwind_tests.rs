use super::*;

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
    let libc = maps.libc_path().expect("the test binary maps libc");
    let t = build_module(Path::new(&libc)).unwrap();
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
    let libc = maps.libc_path().expect("the test binary maps libc");
    let t = build_module(Path::new(&libc)).unwrap();
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
