//! Flamegraphs and pprof profiles against the truth by construction: the
//! stack fixtures (fixtures/stacks/COSTS.md, `rig_fixtures::stacks`) and
//! the calibration server (fixtures/calib/COSTS.md, `rig_fixtures::calib`),
//! whose call chains and per-request costs are known exactly.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rig::probe::Family;
use rig::report::flame::input::Recorded;
use rig::report::flame::write::{self, Format};
use rig::report::Attribution;
use rig_fixtures::calib::{Kind, SITES};
use rig_fixtures::stacks::{Between, Chain, Lang};

use super::stacks::{base_name, measure, Fixture};
use super::{attribute, calib, probes_shared, repo, rig_bin, spec};

const N: u64 = 500;

/// A scratch directory removed at the end of the test.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("rig-flame-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The folded lines of a file or text: (frames, value); `#` lines skipped.
fn folded(text: &str) -> Vec<(Vec<String>, u64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let (stack, v) = l.rsplit_once(' ').unwrap();
            (
                stack.split(';').map(str::to_string).collect(),
                v.parse().unwrap(),
            )
        })
        .collect()
}

fn render(r: &Recorded, graph: &str, format: Format) -> Vec<u8> {
    write::render(r, "fixture", graph, format).unwrap_or_else(|e| panic!("{graph}: {e}"))
}

/// Functions of the C++ standard library inlined into a fixture frame
/// (`std::string`'s constructor into `string_level5`, `std::mutex::lock`
/// and libstdc++'s `__gthread_mutex_lock` into `lock_level5`): frames of
/// their own in a flamegraph, not in the physical-frame truth.
fn inlined_std(f: &str) -> bool {
    f.starts_with("std::") || f.starts_with("void std::") || f.starts_with("__gthread_")
}

/// Whether a folded stack (outermost first) is `chain`'s stack, once the
/// inlined library frames are left out.
fn is_chain(lang: Lang, chain: &Chain, frames: &[String]) -> bool {
    // A syscall's graph draws what was counted as a frame of its own,
    // `[getppid]`, above the user frames (kernel frames, `_[k]`, above it).
    let user = frames
        .iter()
        .position(|f| f.starts_with('[') && f.ends_with(']'))
        .map_or(frames, |at| {
            if frames[at] != format!("[{}]", chain.event) {
                return &[][..];
            }
            &frames[..at]
        });
    let frames: Vec<&String> = user.iter().filter(|f| !inlined_std(f)).collect();
    let mut want: Vec<(&str, bool)> = Vec::new(); // (name, by prefix)
    want.extend(lang.runtime().iter().rev().map(|f| (*f, true)));
    want.extend(chain.frames.iter().rev().map(|(f, _)| (*f, false)));
    if let Between::Exactly(names) = chain.between {
        want.extend(names.iter().rev().map(|n| (*n, true)));
    }
    want.push((chain.leaf, true));
    frames.len() == want.len()
        && frames.iter().zip(&want).all(|(got, (w, prefix))| {
            if *prefix {
                got.starts_with(w)
            } else {
                base_name(got) == *w
            }
        })
}

/// A graph, the chains it draws, and a chain's value per request in it.
type Graph = (&'static str, fn(&Chain) -> bool, fn(&Chain) -> u64);

fn graphs() -> Vec<Graph> {
    let alloc = |c: &Chain| ["malloc", "operator new"].contains(&c.event) && !c.inner;
    vec![
        ("alloc", alloc, |c| c.per_request),
        ("alloc_bytes", alloc, |c| c.per_request * c.bytes),
        ("copy", |c| c.event == "memcpy", |c| c.per_request * c.bytes),
        ("copy_calls", |c| c.event == "memcpy", |c| c.per_request),
        ("locks", |c| c.event == "lock", |c| c.per_request),
        (
            "syscalls",
            |c| matches!(c.event, "getppid" | "read" | "write"),
            |c| c.per_request,
        ),
    ]
}

/// Every folded line of every graph is one chain of the truth with its
/// exact per-request value, and every chain has its line.
fn folded_equals_truth(lang: Lang) {
    let _g = probes_shared();
    let mut fx = Fixture::start(lang.binary());
    let a = measure(
        &mut fx,
        &[Family::Alloc, Family::Copy, Family::Locks, Family::Syscalls],
        N,
    );
    let r = Recorded::of(&a);
    for (graph, draws, value) in graphs() {
        let text = String::from_utf8(render(&r, graph, Format::Folded)).unwrap();
        assert!(
            text.lines()
                .next()
                .unwrap()
                .contains(&format!("{N} requests, ")),
            "{lang:?} {graph}: the header says per request:\n{text}"
        );
        let mut got = folded(&text);
        for c in lang.chains().iter().filter(|c| draws(c)) {
            let at = got
                .iter()
                .position(|(f, _)| is_chain(lang, c, f))
                .unwrap_or_else(|| {
                    panic!(
                        "{lang:?} {graph}: no line for {} at {}:\n{text}",
                        c.event, c.frames[0].0
                    )
                });
            let (_, v) = got.remove(at);
            assert_eq!(
                v,
                value(c),
                "{lang:?} {graph}: {} at {}",
                c.event,
                c.frames[0].0
            );
        }
        assert!(
            got.is_empty(),
            "{lang:?} {graph}: lines of no chain: {got:?}"
        );
        if lang == Lang::Cxx && graph == "alloc" {
            // std::string's constructor, inlined into string_level5, is a
            // frame of its own right above it.
            let line = text.lines().find(|l| l.contains("string_level5")).unwrap();
            let after = line
                .split(';')
                .skip_while(|f| !f.starts_with("string_level5"))
                .nth(1);
            assert!(
                after.is_some_and(|f| f.starts_with("std::__cxx11::basic_string<")),
                "{line}"
            );
        }
    }
}

#[test]
fn c_fixture_folded_stacks_and_their_per_request_values_equal_the_truth() {
    root_or_skip!();
    folded_equals_truth(Lang::C);
}

#[test]
fn cxx_fixture_folded_stacks_count_operator_new_once_per_request() {
    root_or_skip!();
    folded_equals_truth(Lang::Cxx);
}

/// Allocations per request of each calib function, and of each libc entry
/// point, by construction (`rig_fixtures::calib::SITES`).
fn calib_allocations() -> (BTreeMap<&'static str, u64>, BTreeMap<&'static str, u64>) {
    let mut by_fn = BTreeMap::new();
    let mut by_entry = BTreeMap::new();
    for s in SITES {
        if matches!(
            s.kind,
            Kind::Malloc | Kind::Calloc | Kind::Realloc | Kind::PosixMemalign | Kind::Memalign
        ) {
            *by_fn.entry(s.function).or_default() += s.count as u64;
            *by_entry.entry(s.kind.libc_symbol().unwrap()).or_default() += s.count as u64;
        }
    }
    (by_fn, by_entry)
}

fn calib_alloc_window() -> Attribution {
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    attribute(&target, &[Family::Alloc], N, 2)
}

/// `go` from PATH or Debian's golang-go; `None` (the test skips) only
/// outside CI.
fn go() -> Option<PathBuf> {
    super::required(
        "go tool pprof",
        "go",
        super::on_path("go", &["/usr/lib/go/bin"]),
        "scripts/deps.sh installs golang-go",
    )
}

/// `go tool pprof -top` rows: function → (flat, cum).
fn pprof_top(go: &Path, file: &Path, sample_index: &str) -> BTreeMap<String, (String, String)> {
    pprof_top_of(go, file, None, sample_index)
}

/// `go tool pprof -top`, of `file` less `diff_base` when given.
fn pprof_top_of(
    go: &Path,
    file: &Path,
    diff_base: Option<&Path>,
    sample_index: &str,
) -> BTreeMap<String, (String, String)> {
    let home = std::env::temp_dir().join("rig-flame-gohome");
    std::fs::create_dir_all(&home).unwrap();
    let out = Command::new(go)
        .args([
            "tool",
            "pprof",
            "-top",
            &format!("-sample_index={sample_index}"),
        ])
        .args(diff_base.map(|b| format!("-diff_base={}", b.display())))
        .arg(file)
        .env("HOME", &home)
        .env("GOCACHE", home.join("cache"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    println!("{text}");
    let mut rows = BTreeMap::new();
    let mut table = false;
    for l in text.lines() {
        if l.trim_start().starts_with("flat") {
            table = true;
            continue;
        }
        let f: Vec<&str> = l.split_whitespace().collect();
        if table && f.len() >= 6 {
            rows.insert(f[5..].join(" "), (f[0].to_string(), f[3].to_string()));
        }
    }
    rows
}

#[test]
fn go_tool_pprof_reads_the_calibration_functions_with_exact_allocations_per_request() {
    root_or_skip!();
    let Some(go) = go() else { return };
    let a = calib_alloc_window();
    let s = Scratch::new("pprof");
    let file = s.0.join("alloc.pb.gz");
    std::fs::write(&file, render(&Recorded::of(&a), "alloc", Format::Pprof)).unwrap();
    let rows = pprof_top(&go, &file, "alloc_objects");
    let (by_fn, by_entry) = calib_allocations();
    for (f, n) in &by_fn {
        assert_eq!(
            rows.get(*f).map(|r| r.1.as_str()),
            Some(n.to_string().as_str()),
            "cum of {f}: {rows:#?}"
        );
    }
    for (f, n) in &by_entry {
        assert_eq!(
            rows.get(*f).map(|r| r.0.as_str()),
            Some(n.to_string().as_str()),
            "flat of {f}: {rows:#?}"
        );
    }
    let total: u64 = by_fn.values().sum();
    assert_eq!(rows["calib_request"].1, total.to_string());
    // Bytes per request, as the second sample type (pprof prints 5072 B
    // as 4.95kB; the unit is in the file).
    let bytes = pprof_top(&go, &file, "alloc_space");
    assert_eq!(bytes["calib_alloc_calloc"].1, "64B", "{bytes:#?}");
    assert_eq!(bytes["calib_alloc_aligned"].1, "768B", "{bytes:#?}");
}

/// Every frame of an inferno SVG: title → (width in %, `fg:w`).
fn svg_frames(svg: &str) -> BTreeMap<String, (f64, u64)> {
    let mut out = BTreeMap::new();
    for g in svg.split("<g>").skip(1) {
        let title = g
            .split_once("<title>")
            .and_then(|(_, t)| t.split_once("</title>"));
        let attr = |name: &str| {
            g.split_once(&format!(" {name}=\""))
                .and_then(|(_, v)| v.split_once('"'))
                .map(|(v, _)| v.to_string())
        };
        if let (Some((t, _)), Some(w), Some(fw)) = (title, attr("width"), attr("fg:w")) {
            out.insert(
                t.to_string(),
                (
                    w.trim_end_matches('%').parse().unwrap(),
                    fw.parse().unwrap(),
                ),
            );
        }
    }
    out
}

#[test]
fn svg_flamegraph_of_the_calibration_server_draws_each_function_with_its_width_per_request() {
    root_or_skip!();
    let a = calib_alloc_window();
    let svg = String::from_utf8(render(&Recorded::of(&a), "alloc", Format::Svg)).unwrap();
    assert!(svg.contains(&format!("fixture: {N} requests, allocations per request")));
    let frames = svg_frames(&svg);
    let (by_fn, _) = calib_allocations();
    let total: u64 = by_fn.values().sum();
    for (f, n) in by_fn
        .iter()
        .map(|(f, n)| (*f, *n))
        .chain([("calib_request", total)])
    {
        let pct = 100.0 * n as f64 / total as f64;
        let title = format!("{f} ({n} allocations per request, {pct:.2}%)");
        let (width, w) = frames
            .get(&title)
            .unwrap_or_else(|| panic!("no frame {title:?} in {:#?}", frames.keys()));
        assert_eq!(*w, n, "{title}");
        assert!((width - pct).abs() < 1e-3, "{title}: width {width}%");
    }
}

#[test]
fn rig_flame_renders_from_the_attach_json_what_attach_flame_wrote() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("cli");
    let json = s.0.join("a.json");
    let dir = s.0.join("flame");
    let out = Command::new(rig_bin())
        .args(["demo", "--requests", "300", "--probes", "alloc"])
        .arg("--json")
        .arg(&json)
        .arg("--flame")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for f in [
        "alloc.folded",
        "alloc.svg",
        "alloc_bytes.folded",
        "alloc_bytes.svg",
        "alloc.pb.gz",
    ] {
        assert!(dir.join(f).is_file(), "{f}");
    }
    let again = Command::new(rig_bin())
        .arg("flame")
        .arg(&json)
        .args(["--family", "alloc", "--format", "folded"])
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let written = std::fs::read_to_string(dir.join("alloc.folded")).unwrap();
    assert_eq!(String::from_utf8(again.stdout).unwrap(), written);
    // Per request, by function: the calibration costs.
    let mut by_fn: BTreeMap<String, u64> = BTreeMap::new();
    for (frames, v) in folded(&written) {
        let f = frames
            .iter()
            .rev()
            .find(|f| f.starts_with("calib_alloc"))
            .unwrap();
        *by_fn.entry(f.clone()).or_default() += v;
    }
    let want: BTreeMap<String, u64> = calib_allocations()
        .0
        .into_iter()
        .map(|(f, n)| (f.to_string(), n))
        .collect();
    assert_eq!(by_fn, want);
    // An unknown graph is a usage error naming the graphs.
    let bad = Command::new(rig_bin())
        .arg("flame")
        .arg(&json)
        .args(["--family", "allocs"])
        .output()
        .unwrap();
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("alloc_bytes"));
}

const CALIB_MATRIX: &str = r#"
[defaults]
warmup_ms = 200
duration_ms = 400
counted_requests = 1000

[[suite]]
name = "calib"
kind = "http"
protocols = ["h1"]
paths = ["/calib"]
topologies = ["1"]
"#;

#[test]
fn rig_run_prints_the_top_sites_per_request_and_writes_flamegraphs_per_case() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("run");
    std::fs::write(s.0.join("m.toml"), CALIB_MATRIX).unwrap();
    let out_dir = s.0.join("out");
    let out = Command::new(rig_bin())
        .arg("run")
        .arg("--target")
        .arg(repo().join("config/targets/calib.toml"))
        .arg("--matrix")
        .arg(s.0.join("m.toml"))
        .arg("--out")
        .arg(&out_dir)
        .args(["--probes", "alloc,copy", "--passes", "counted"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The three largest copies per request (fixtures/calib/COSTS.md).
    let at = super::at;
    let copy = format!(
        "  copy      bytes copied per request: 20000 calib_copy_huge ({}) · 4000 calib_copy_large ({}) · 3000 calib_set ({})",
        at("memcpy_huge"),
        at("memcpy_large"),
        at("memset_a")
    );
    assert!(stdout.contains(&copy), "{copy}\nnot in:\n{stdout}");
    assert!(
        stdout.contains(&format!("flamegraphs: {}/flame/", out_dir.display())),
        "{stdout}"
    );
    let case = out_dir.join("flame/calib_calib_h1_calib_closed_1x1_ka_1");
    let folded_alloc = std::fs::read_to_string(case.join("alloc.folded")).unwrap();
    let total: u64 = folded(&folded_alloc).iter().map(|(_, v)| v).sum();
    assert_eq!(total, calib_allocations().0.values().sum::<u64>());
    for f in [
        "alloc.svg",
        "alloc_bytes.svg",
        "copy.svg",
        "copy_calls.svg",
        "alloc.pb.gz",
        "copy.pb.gz",
    ] {
        assert!(case.join(f).is_file(), "{f} in {}", case.display());
    }
    // `rig flame` on the run's cases.jsonl, the case named by its slug,
    // draws what the run wrote for it: the calibration costs per function.
    let again = Command::new(rig_bin())
        .arg("flame")
        .arg(out_dir.join("cases.jsonl"))
        .args([
            "--case",
            "calib_calib_h1_calib_closed_1x1_ka_1",
            "--family",
            "alloc",
            "--format",
            "folded",
        ])
        .output()
        .unwrap();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    assert_eq!(String::from_utf8(again.stdout).unwrap(), folded_alloc);
    let mut by_fn: BTreeMap<String, u64> = BTreeMap::new();
    for (frames, v) in folded(&folded_alloc) {
        let f = frames
            .iter()
            .rev()
            .find(|f| f.starts_with("calib_alloc"))
            .unwrap_or_else(|| panic!("no calib_alloc frame in {frames:?}"));
        *by_fn.entry(f.clone()).or_default() += v;
    }
    let want: BTreeMap<String, u64> = calib_allocations()
        .0
        .into_iter()
        .map(|(f, n)| (f.to_string(), n))
        .collect();
    assert_eq!(by_fn, want);
}

#[test]
fn rig_ab_writes_a_differential_flamegraph_of_allocations_per_request() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("ab");
    std::fs::write(
        s.0.join("m.toml"),
        CALIB_MATRIX
            .replace("/calib", "/work")
            .replace("1000", "300"),
    )
    .unwrap();
    let out_dir = s.0.join("out");
    let out = Command::new(rig_bin())
        .arg("ab")
        .arg("--arm")
        .arg(format!("A={}", spec("calib-dyn-a.toml")))
        .arg("--arm")
        .arg(format!("B={}", spec("calib-dyn-b.toml")))
        .arg("--matrix")
        .arg(s.0.join("m.toml"))
        .args([
            "--suite", "calib", "--rounds", "1", "--probes", "alloc", "--passes", "counted",
        ])
        .arg("--out")
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = out_dir.join("flame/calib_h1_work_closed_1x1_ka");
    let diff = std::fs::read_to_string(dir.join("alloc.diff.folded")).unwrap_or_else(|e| {
        panic!(
            "{e}: {:?}",
            std::fs::read_dir(out_dir.join("flame"))
                .map(|d| d.flatten().map(|e| e.file_name()).collect::<Vec<_>>())
        )
    });
    // Variant b drops one malloc(32) per request in calibwork_alloc.
    let a = rig_fixtures::ab::A.mallocs as u64;
    let b = rig_fixtures::ab::B.mallocs as u64;
    let lines: Vec<&str> = diff.lines().filter(|l| !l.starts_with('#')).collect();
    assert_eq!(lines.len(), 1, "{diff}");
    assert!(
        lines[0].ends_with(&format!(";calibwork_alloc;malloc {a} {b}")),
        "{diff}"
    );
    let svg = std::fs::read_to_string(dir.join("alloc.diff.svg")).unwrap();
    assert!(svg.contains("A → B"));
    for arm in ["A", "B"] {
        assert!(dir.join(format!("alloc.{arm}.pb.gz")).is_file());
    }
    // pprof subtracts arm A from arm B: one malloc(32) less per request,
    // in calibwork_alloc (COSTS.md, "A/B fixtures": 3 → 2, 96 → 64 bytes).
    let Some(go) = go() else { return };
    let (pa, pb) = (dir.join("alloc.A.pb.gz"), dir.join("alloc.B.pb.gz"));
    // Each arm alone: its own per-request count (two runs each, summed
    // before the per-request value is taken).
    assert_eq!(
        pprof_top_of(&go, &pa, None, "alloc_objects")["malloc"].0,
        a.to_string()
    );
    assert_eq!(
        pprof_top_of(&go, &pb, None, "alloc_objects")["malloc"].0,
        b.to_string()
    );
    let rows = pprof_top_of(&go, &pb, Some(&pa), "alloc_objects");
    let delta = (b as i64 - a as i64).to_string();
    assert_eq!(delta, "-1");
    assert_eq!(
        rows.get("calibwork_alloc"),
        Some(&("0".to_string(), delta.clone())),
        "calibwork_alloc: flat 0, cum B − A: {rows:#?}"
    );
    assert_eq!(
        rows.get("malloc"),
        Some(&(delta.clone(), delta.clone())),
        "malloc: {rows:#?}"
    );
    // Nothing else changed by itself.
    for (f, (flat, _)) in &rows {
        if f != "malloc" {
            assert_eq!(flat, "0", "{f}: {rows:#?}");
        }
    }
    let bytes = pprof_top_of(&go, &pb, Some(&pa), "alloc_space");
    let db = rig_fixtures::ab::B.malloc_bytes as i64 - rig_fixtures::ab::A.malloc_bytes as i64;
    assert_eq!(db, -32);
    assert_eq!(bytes["calibwork_alloc"].1, format!("{db}B"), "{bytes:#?}");
    assert_eq!(bytes["malloc"].0, format!("{db}B"), "{bytes:#?}");
}
