//! Property tests of every parser that reads untrusted input: target specs,
//! matrices, gate baselines, ELF files of targets and their DWARF, `/proc`
//! and cgroup files. Arbitrary and mutated inputs must give a value or an error, never
//! a panic. Each property runs a fixed number of cases (`CASES`, seeded
//! deterministically by proptest's defaults) so the suite stays fast.

use std::path::Path;

use proptest::prelude::*;
use proptest::test_runner::Config;

/// Cases per property (the suite runs 11 properties: 11 × CASES inputs).
const CASES: u32 = 256;

fn config() -> Config {
    Config {
        cases: CASES,
        failure_persistence: None,
        ..Config::default()
    }
}

/// Bytes of a real target ELF (the calibration server), for mutation.
fn calib_elf() -> &'static [u8] {
    static ELF: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    ELF.get_or_init(|| std::fs::read(rig_fixtures::calib_server()).unwrap())
}

/// File ranges of DWARF sections, and a file offset in each function.
type DwarfFacts = (Vec<(usize, usize)>, Vec<u64>);

/// The calibration server's bytes, the file ranges of its DWARF sections,
/// and a file offset in each of its functions (for symbolizing).
fn calib_dwarf() -> (&'static [u8], &'static [(usize, usize)], &'static [u64]) {
    use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
    static DWARF: std::sync::OnceLock<DwarfFacts> = std::sync::OnceLock::new();
    let elf = calib_elf();
    let (ranges, offsets) = DWARF.get_or_init(|| {
        let f = object::File::parse(elf).unwrap();
        let ranges: Vec<(usize, usize)> = f
            .sections()
            .filter(|s| s.name().is_ok_and(|n| n.starts_with(".debug_")))
            .filter_map(|s| s.file_range())
            .filter(|&(_, n)| n > 0)
            .map(|(o, n)| (o as usize, (o + n) as usize))
            .collect();
        let text = f.section_by_name(".text").unwrap();
        let (toff, _) = text.file_range().unwrap();
        let offsets: Vec<u64> = f
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .filter(|s| s.address() >= text.address() && s.address() < text.address() + text.size())
            .map(|s| s.address() - text.address() + toff + 1)
            .collect();
        assert!(ranges.len() >= 3, "calib_server has DWARF: {ranges:?}");
        assert!(offsets.len() >= 10, "calib_server has functions");
        (ranges, offsets)
    });
    (elf, ranges, offsets)
}

const SPEC: &str = r#"name = "calib"
argv = ["{calib_server}", "--port", "{port}", "--threads", "2"]
port = "argv"
ready = { stdout = "READY" }
ready_timeout_ms = 10000
[env]
A = "b"
[protocols]
h1 = true
[[endpoints]]
path = "/calib"
status = 200
content_type = "text/plain"
body = { literal = "calib\n" }
"#;

const MATRIX: &str = r#"[defaults]
warmup_ms = 100
duration_ms = 300
counted_requests = 1000
[[suite]]
name = "a"
kind = "http"
protocols = ["h1", "h2c"]
paths = ["/calib"]
rates = [100.0]
topologies = ["1", "2x4"]
"#;

/// `text` with a few of its bytes replaced, removed or duplicated.
fn mutated(text: &'static str) -> impl Strategy<Value = String> {
    prop::collection::vec((any::<usize>(), any::<u8>(), 0u8..3), 1..8).prop_map(move |edits| {
        let mut b = text.as_bytes().to_vec();
        for (at, byte, op) in edits {
            let i = at % b.len().max(1);
            match op {
                0 => b[i] = byte,
                1 => {
                    b.remove(i);
                }
                _ => b.insert(i, byte),
            }
            if b.is_empty() {
                b.push(b'x');
            }
        }
        String::from_utf8_lossy(&b).into_owned()
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn target_specs_never_panic(text in mutated(SPEC)) {
        let _ = rig::launch::spec::TargetSpec::from_text(Path::new("/tmp/fuzz.toml"), &text);
    }

    #[test]
    fn arbitrary_text_as_a_spec_never_panics(text in "\\PC{0,200}") {
        let _ = rig::launch::spec::TargetSpec::from_text(Path::new("/tmp/fuzz.toml"), &text);
    }

    #[test]
    fn matrices_never_panic(text in mutated(MATRIX)) {
        if let Ok(m) = rig::scenario::Matrix::parse("fuzz.toml", &text) {
            let _ = m.expand(&[], &["t".to_string()], Some(1));
        }
    }

    #[test]
    fn gate_baselines_never_panic(text in mutated(GATE)) {
        let _ = rig::gate::Baseline::parse(Path::new("/tmp/fuzz-gate.toml"), &text);
    }

    #[test]
    fn mutated_elf_files_never_panic(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..32), cut in any::<usize>()) {
        let mut b = calib_elf().to_vec();
        // Mostly the headers and tables at the start and the section
        // headers at the end: where a parser trusts offsets and sizes.
        for (at, byte) in edits {
            let i = if at % 2 == 0 { at % 4096.min(b.len()) } else { b.len() - 1 - at % 4096.min(b.len()) };
            b[i] = byte;
        }
        if cut % 4 == 0 {
            b.truncate(cut % b.len());
        }
        if let Ok(f) = rig::elf::ElfFacts::parse(&b) {
            let _ = f.lookup_symbol("malloc");
            let _ = f.first_load_vaddr();
            let _ = f.plt_stubs().len();
            let _ = f.aliases_at(0x1000);
        }
    }

    #[test]
    fn arbitrary_bytes_as_elf_never_panic(b in prop::collection::vec(any::<u8>(), 0..512)) {
        let mut data = b"\x7fELF\x02\x01\x01\0".to_vec();
        data.extend(b);
        let _ = rig::elf::ElfFacts::parse(&data);
    }

    #[test]
    fn proc_maps_never_panic(text in "([0-9a-f]{1,12}-[0-9a-f]{1,12} [rwxps-]{4} [0-9a-f]{1,8} [0-9a-f:]{3,5} [0-9]{1,6} {0,20}[ -~]{0,40}\n){0,6}") {
        let _ = rig::launch::maps::ProcMaps::parse(1, &text);
    }

    #[test]
    fn proc_stat_status_and_cgroup_files_never_panic(text in "\\PC{0,300}") {
        let _ = rig::sample::parse_stat(&text);
        let _ = rig::sample::parse_status(&text);
        let _ = rig::sample::parse_smaps_rollup_pss(&text);
        let _ = rig::sample::parse_schedstat(&text);
        let _ = rig::sample::parse_kv(&text, "memory.peak");
        let _ = rig::launch::port::parse_stat_ppid(&text);
        let _ = rig::launch::port::parse_stat_pgrp(&text);
        let _ = rig::launch::port::parse_net_tcp(&text, false);
        let _ = rig::launch::port::parse_net_tcp(&text, true);
        let _ = rig::launch::cgroup::parse_mountinfo(&text, "cgroup2");
        let _ = rig::launch::cgroup::parse_proc_cgroup(&text, "memory");
        let _ = rig::launch::start::parse_cpu_list(&text);
    }

    #[test]
    fn proc_stat_shaped_lines_never_panic(comm in "[ -~]{0,20}", rest in "([A-Za-z0-9-]{1,12} ){0,60}") {
        let text = format!("123 ({comm}) {rest}\n");
        let _ = rig::sample::parse_stat(&text);
        let _ = rig::launch::port::parse_stat_ppid(&text);
        let _ = rig::launch::port::parse_stat_pgrp(&text);
    }

    #[test]
    fn mutated_dwarf_never_panics_the_symbolizer(edits in prop::collection::vec((any::<usize>(), any::<u8>()), 1..48)) {
        // File and line come from the target's own DWARF (.debug_info,
        // .debug_line, .debug_abbrev, .debug_str ...), which blazesym
        // parses: a target's file is untrusted input too. Bytes inside
        // those sections are changed, and every function of the text is
        // symbolized with debug info on.
        let (elf, dwarf, text) = calib_dwarf();
        let mut b = elf.to_vec();
        for (at, byte) in edits {
            let (lo, hi) = dwarf[at % dwarf.len()];
            b[lo + (at / dwarf.len()) % (hi - lo)] = byte;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("calib_server");
        std::fs::write(&path, &b).unwrap();
        let _ = rig::symbolize::symbolize_elf_with(&path, text, true);
    }

    #[test]
    fn callgrind_profiles_never_panic(text in "((fn|fl|cfn|calls|events|summary|totals)=[ -~]{0,20}\n|[0-9 +-]{0,20}\n){0,20}") {
        let _ = rig::probe::callgrind::parse(&text);
    }
}

/// The input the property above once found (blazesym 0.2.7 unwraps a
/// `.debug_line` file index the mutated DWARF no longer has): the module is
/// an error of its own, never a panic out of rig.
#[test]
fn a_dwarf_line_table_naming_a_missing_file_never_panics_the_symbolizer() {
    let (elf, dwarf, text) = calib_dwarf();
    let mut b = elf.to_vec();
    let (at, byte) = (5826088337754496867usize, 4u8);
    let (lo, hi) = dwarf[at % dwarf.len()];
    b[lo + (at / dwarf.len()) % (hi - lo)] = byte;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("calib_server");
    std::fs::write(&path, &b).unwrap();
    let sites = rig::symbolize::symbolize_elf_with(&path, text, true);
    assert_eq!(sites.len(), text.len());
}

const GATE: &str = include_str!("../../../config/gates/calib.toml");
