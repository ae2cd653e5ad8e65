//! Tests of the Go table reader (`gopclntab.rs`), against the goserver
//! fixture's builds.

use super::*;

#[test]
fn versions_read_as_the_go_tool_writes_them() {
    let v = GoVersion::parse("go1.19.8").unwrap();
    assert_eq!((v.major, v.minor), (1, 19));
    assert!(v.register_abi());
    assert_eq!(GoVersion::parse("go1.21rc2").unwrap().minor, 21);
    assert_eq!(GoVersion::parse("devel go1.22-1234abcd").unwrap().minor, 22);
    assert!(!GoVersion::parse("go1.16.15").unwrap().register_abi());
    assert_eq!(GoVersion::parse("gcc"), None);
}

/// The goserver fixture's newRecord, inlined into goAllocs: the pcs of
/// its body are two frames, found through the inline tree the same way
/// in the stripped build (whose `runtime.firstmoduledata` has no
/// symbol) and in the PIE (whose table is `.data.rel.ro.gopclntab` and
/// whose header and moduledata pointers are relocations' addends); every
/// other pc of goAllocs is one. The entry the table gives is the
/// function's symbol's.
#[test]
fn an_inlined_go_function_is_a_frame_of_its_own_stripped_pie_or_not() {
    use object::ObjectSymbol;
    let line = |m| Some(rig_fixtures::go_site_line(m));
    let pie = std::fs::read(rig_fixtures::goserver_pie()).unwrap();
    for (what, data) in [
        (
            "plain",
            std::fs::read(rig_fixtures::goserver(false)).unwrap(),
        ),
        (
            "stripped",
            std::fs::read(rig_fixtures::goserver(true)).unwrap(),
        ),
        ("pie", pie.clone()),
        ("pie, relocated words 0", relocated_words_zeroed(&pie)),
    ] {
        let obj = object::File::parse(&*data).unwrap();
        let t = GoTable::parse(&data).unwrap().unwrap();
        assert!(t.version.is_some_and(|v| v.register_abi()), "{what}");
        assert!(!t.gofunc.is_empty(), "go:func.* found ({what})");
        let f = t.find("main.goAllocs").unwrap();
        if let Some(sym) = obj.symbols().find(|s| s.name() == Ok("main.goAllocs")) {
            assert_eq!(f.entry, sym.address(), "{what}");
        }
        let mut inlined = 0;
        for pc in f.entry..f.end {
            let frames = t.frames_at(f, pc);
            let names: Vec<&str> = frames.iter().map(|g| g.function.as_str()).collect();
            match names[..] {
                ["main.goAllocs"] => {}
                ["main.newRecord", "main.goAllocs"] => {
                    inlined += 1;
                    assert_eq!(frames[0].line, line("go_record"), "{frames:?}");
                    assert_eq!(frames[1].line, line("go_record_call"), "{frames:?}");
                }
                _ => panic!("{pc:#x}: {frames:?}"),
            }
        }
        assert!(inlined > 0, "newRecord's body is in goAllocs");
    }
}

/// A PIE as linkers that leave a relocated word's bytes 0 write it
/// (lld's default; Go's linker and GNU ld write the link-time value
/// there too): the pointers are then only the relocations' addends.
fn relocated_words_zeroed(data: &[u8]) -> Vec<u8> {
    use object::ObjectSegment;
    let obj = object::File::parse(data).unwrap();
    let mut out = data.to_vec();
    let mut zeroed = 0;
    for (vaddr, _) in obj.dynamic_relocations().unwrap() {
        let off = obj.segments().find_map(|s| {
            let (a, size) = (s.address(), s.file_range().1);
            (a <= vaddr && vaddr + 8 <= a + size).then(|| s.file_range().0 + (vaddr - a))
        });
        if let Some(off) = off {
            out[off as usize..off as usize + 8].fill(0);
            zeroed += 1;
        }
    }
    assert!(zeroed > 100, "{zeroed} relocated words");
    out
}

/// `.gopclntab` and `runtime.firstmoduledata` are untrusted input:
/// the goserver fixture with bytes of either changed at random parses
/// or is refused, and every function's frames are read, without a
/// panic.
#[test]
fn go_tables_and_inline_trees_of_mutated_binaries_never_panic() {
    use object::{Object, ObjectSection, ObjectSymbol};
    use proptest::prelude::*;
    let data = std::fs::read(rig_fixtures::goserver(false)).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let (pcln, pcln_size) = obj
        .section_by_name(".gopclntab")
        .and_then(|s| s.file_range())
        .unwrap();
    let md = obj
        .symbols()
        .find(|s| s.name() == Ok("runtime.firstmoduledata"))
        .unwrap();
    let md_sec = obj.section_by_index(md.section_index().unwrap()).unwrap();
    let md_off = md_sec.file_range().unwrap().0 + (md.address() - md_sec.address());
    // The header's pclnOffset: where the function table starts.
    let functab = u64::from_le_bytes(
        data[pcln as usize + 64..pcln as usize + 72]
            .try_into()
            .unwrap(),
    );
    let parsed = std::sync::atomic::AtomicU32::new(0);
    let config = proptest::test_runner::Config {
        cases: 256,
        failure_persistence: None,
        ..Default::default()
    };
    proptest::test_runner::TestRunner::new(config)
        .run(
            &prop::collection::vec((any::<u64>(), any::<u8>()), 1..8),
            |edits| {
                let mut b = data.clone();
                for (at, byte) in edits {
                    // The header, the function table and the first
                    // records it points at, or moduledata's words.
                    let i = match at % 8 {
                        0 => pcln + at / 8 % 72,
                        1..=3 => pcln + functab + at / 8 % (pcln_size - functab).min(1 << 16),
                        _ => md_off + at / 8 % 400,
                    };
                    b[i as usize] = byte;
                }
                if let Ok(Some(t)) = GoTable::parse(&b) {
                    parsed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    for f in t.funcs.iter().take(500) {
                        let mid = f.entry + (f.end.saturating_sub(f.entry)) / 2;
                        let _ = t.frames_at(f, mid);
                    }
                }
                Ok(())
            },
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let parsed = parsed.into_inner();
    eprintln!("fuzz: go_tables_of_mutated_binaries: 256 inputs, 0 panics ({parsed} parsed)");
    assert!(parsed > 0, "some mutated tables still parse, and are read");
}

#[test]
fn pc_value_tables_decode_zigzag_deltas() {
    // value +0x20 (uv 0x40) for 4 pcs, then -0x20 (uv 0x3f) for 1, end.
    let t = GoTable {
        version: None,
        funcs: Vec::new(),
        pctab: vec![0, 0x42, 4, 0x3f, 1, 0],
        filetab: Vec::new(),
        cutab: Vec::new(),
        quantum: 1,
        funcnames: Vec::new(),
        gofunc: Vec::new(),
        inlined_call: 20,
    };
    let f = GoFunc {
        name: "f".into(),
        entry: 0x1000,
        end: 0x1005,
        pcsp: 1,
        pcfile: 0,
        pcln: 0,
        cu_offset: 0,
        func_id: 0,
        pcinl: 0,
        inltree: u32::MAX,
    };
    // -1 + 0x21 = 0x20 at 0x1000..0x1004, then 0x20 - 0x20 = 0.
    assert_eq!(t.sp_deltas(&f), vec![(0x1000, 0x20), (0x1004, 0)]);
}
