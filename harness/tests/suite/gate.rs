//! `rig gate` on the A/B calibration fixtures (fixtures/calib/COSTS.md, "A/B
//! fixtures"): A does 3 allocations per request, B one fewer (`ab_alloc_3`),
//! C one more (`ab_alloc_extra`), E A's work plus a known loop
//! (`calibwork_spin`, "Variant E"). Counted passes and instruction windows
//! only: no timing anywhere.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{probes_shared, repo, rig_bin, spec};
use rig::exit;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A scratch dir with a baseline header (no counters yet) for arm A.
fn scratch(name: &str, repeats: u32, extra: &str) -> (Dir, PathBuf) {
    scratch_suite(name, "work", repeats, extra)
}

fn scratch_suite(name: &str, suite: &str, repeats: u32, extra: &str) -> (Dir, PathBuf) {
    let dir = std::env::temp_dir().join(format!("rig-gate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let r = repo();
    let text = format!(
        "target = \"{}\"\nmatrix = \"{}\"\nsuite = \"{suite}\"\nrepeats = {repeats}\nrequests = 500\nprobes = \"syscalls,alloc,copy\"\n{extra}",
        r.join("config/targets/calib-dyn-a.toml").display(),
        r.join("config/gate-matrix.toml").display(),
    );
    let b = dir.join("baseline.toml");
    std::fs::write(&b, text).unwrap();
    (Dir(dir), b)
}

fn gate(baseline: &Path, extra: &[&str]) -> (i32, String) {
    let out = Command::new(rig_bin())
        .arg("gate")
        .arg("--baseline")
        .arg(baseline)
        .args(extra)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{text}");
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn gate_calibration_is_deterministic_and_passes_its_own_blessed_baseline() {
    root_or_skip!();
    let _g = probes_shared();
    let (d, b) = scratch("calib", 5, "instructions = \"auto\"\n");
    let (code, text) = gate(&b, &["--bless"]);
    assert_eq!(code, exit::OK, "{text}");
    let blessed = std::fs::read_to_string(&b).unwrap();
    // auto: perf with a PMU, callgrind without; the baseline records which.
    let backend = if rig::host::detect_pmu().instructions {
        "perf"
    } else {
        "callgrind"
    };
    assert!(
        blessed.contains(&format!("instructions_backend = \"{backend}\""))
            && blessed.contains("instructions_tolerance_pct = 0.1"),
        "{blessed}"
    );
    for c in [
        "allocs/req",
        "alloc bytes/req",
        "frees/req",
        "copy bytes/req",
        "syscalls/req",
        "instructions/req",
    ] {
        assert!(
            blessed.contains(&format!("[counters.\"{c}\"]")),
            "{c} not blessed (non-deterministic?):\n{blessed}\n{text}"
        );
    }
    let out = d.0.join("out");
    let (code, text) = gate(&b, &["--out", out.to_str().unwrap()]);
    assert_eq!(code, exit::OK, "{text}");
    assert!(text.contains("gate: PASS"), "{text}");
    assert!(
        text.contains(&format!("5 windows per case counted by {backend} (auto"))
            && text.contains("compared within 0.1%"),
        "{text}"
    );
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("gate.json")).unwrap()).unwrap();
    let obs = report["observed"].as_array().unwrap();
    // Five instruction windows: deterministic within the stated 0.1%.
    let ins = obs
        .iter()
        .find(|o| o["name"] == "instructions/req")
        .expect("instructions/req observed");
    let v: Vec<f64> = ins["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    assert_eq!(v.len(), 5, "{ins}");
    let (lo, hi) = v
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), x| (l.min(*x), h.max(*x)));
    assert!((hi - lo) <= 0.001 * hi, "{ins}");
    assert_eq!(ins["deterministic"], true, "{ins}");
    assert_eq!(ins["tol"]["rel"].as_f64(), Some(0.001), "{ins}");
    for (c, want) in [
        ("allocs/req", 3.0),
        ("alloc bytes/req", 96.0),
        ("frees/req", 3.0),
        ("copy bytes/req", 256.0),
        ("syscalls/req", 2.0),
    ] {
        let o = obs
            .iter()
            .find(|o| o["name"] == c)
            .unwrap_or_else(|| panic!("{c} not observed"));
        assert_eq!(o["values"].as_array().unwrap().len(), 5);
        assert_eq!(o["spread"].as_f64(), Some(0.0), "{c}: {o}");
        assert_eq!(o["deterministic"], true);
        assert_eq!(o["values"][0].as_f64(), Some(want), "{c}: {o}");
    }
}

#[test]
fn gate_arm_b_with_one_fewer_allocation_passes_a_10pct_soft_limit() {
    root_or_skip!();
    let _g = probes_shared();
    let (_d, b) = scratch(
        "b",
        3,
        "[counters.\"allocs/req\"]\nvalue = 3.0\nsoft_pct = 10.0\n",
    );
    assert_eq!(gate(&b, &["--bless"]).0, 0);
    let (code, text) = gate(&b, &["--target", &spec("calib-dyn-b.toml")]);
    assert_eq!(code, exit::OK, "{text}");
    assert!(text.contains("gate: PASS"), "{text}");
    let line = rig_fixtures::calibwork_site_line("ab_alloc_3");
    assert!(
        text.contains(&format!("calibwork.c:{line}")) && text.contains("site gone"),
        "the removed site should be shown as gone:\n{text}"
    );
}

#[test]
fn gate_arm_c_with_one_more_allocation_fails_with_exit_7_naming_the_site() {
    root_or_skip!();
    let _g = probes_shared();
    let (_d, b) = scratch(
        "c",
        3,
        "max_new_sites = 0\n[counters.\"allocs/req\"]\nvalue = 3.0\nsoft_pct = 10.0\n",
    );
    assert_eq!(gate(&b, &["--bless"]).0, 0);
    let (code, text) = gate(&b, &["--target", &spec("calib-dyn-c.toml")]);
    assert_eq!(code, exit::GATE_BREACH, "{text}");
    let line = rig_fixtures::calibwork_site_line("ab_alloc_extra");
    assert!(
        text.contains("BREACH soft breach: allocs/req: 4.000/req > 3.300"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "malloc calls @ calibwork_alloc (calibwork.c:{line}): new site, 1.0/req"
        )),
        "{text}"
    );
    assert!(text.contains("gate: FAIL"), "{text}");
}

#[test]
fn gate_baseline_with_an_unknown_key_or_counter_typo_is_a_clear_error() {
    // No probes are attached: the baseline is rejected before anything runs.
    let (_d, b) = scratch("typo-key", 3, "request = 10\n");
    let (code, text) = gate(&b, &[]);
    assert_eq!(code, exit::ERROR, "{text}");
    assert!(text.contains("unknown field `request`"), "{text}");
    assert!(
        text.contains("baseline.toml:7"),
        "line of the bad key: {text}"
    );

    let (_d2, b2) = scratch("typo-counter", 3, "[counters.\"alocs/req\"]\nvalue = 3.0\n");
    let (code, text) = gate(&b2, &[]);
    assert_eq!(code, exit::ERROR, "{text}");
    assert!(
        text.contains("unknown counter `alocs/req` (did you mean `allocs/req`?)"),
        "{text}"
    );
}

/// calibwork_spin (variant E) from `objdump -d` of ab/e/libcalibwork.so
/// (gcc -O2, COSTS.md "Variant E"): 5 instructions before the loop, 6 per
/// iteration, 1 ret.
fn spin_ir() -> f64 {
    5.0 + 6.0 * rig_fixtures::ab::LOOP_ITERS as f64 + 1.0
}

#[test]
fn gate_variant_e_with_a_known_loop_breaches_naming_the_function_and_its_instructions() {
    root_or_skip!();
    let _g = probes_shared();
    // callgrind explicitly: only it splits instructions by function.
    let (d, b) = scratch("e", 2, "max_new_sites = 0\ninstructions = \"callgrind\"\n");
    let (code, text) = gate(&b, &["--bless"]);
    assert_eq!(code, exit::OK, "{text}");
    let blessed = std::fs::read_to_string(&b).unwrap();
    assert!(
        blessed.contains("[counters.\"Ir @ calibwork_alloc\"]")
            && !blessed.contains("calibwork_spin"),
        "{blessed}"
    );
    let out = d.0.join("out-e");
    let (code, text) = gate(
        &b,
        &[
            "--target",
            &spec("calib-dyn-e.toml"),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, exit::GATE_BREACH, "{text}");
    let f = rig_fixtures::ab::LOOP_FUNCTION;
    assert!(
        text.contains(&format!(
            "BREACH new site (max_new_sites = 0): Ir @ {f}: new site, {:.1}/req",
            spin_ir()
        )),
        "{text}"
    );
    assert!(
        text.contains("BREACH soft breach: instructions/req:"),
        "{text}"
    );
    assert!(text.contains("counted by callgrind (asked for"), "{text}");
    // The extra instructions per request are the loop's, plus the call to it
    // in calibwork_request (its `call` and PLT jump: a few instructions).
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("gate.json")).unwrap()).unwrap();
    let row = report["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["counter"] == "instructions/req")
        .unwrap()
        .clone();
    let extra = row["now"].as_f64().unwrap() - row["baseline"].as_f64().unwrap();
    eprintln!("variant E - A: {extra} instructions/req");
    assert!(
        extra >= spin_ir() && extra <= spin_ir() + 4.0,
        "extra {extra}, loop {}",
        spin_ir()
    );
    // Allocations, copies and syscalls are A's: those rows pass.
    for c in ["allocs/req", "copy bytes/req", "syscalls/req"] {
        let r = report["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["counter"] == c)
            .unwrap();
        assert_eq!(r["verdict"], "ok", "{c}: {r}");
    }
}

#[test]
fn gate_refuses_instruction_values_blessed_with_the_other_backend() {
    root_or_skip!();
    // The backend auto does NOT pick on this host.
    let other = if rig::host::detect_pmu().instructions {
        "callgrind"
    } else {
        "perf"
    };
    let (_d, b) = scratch(
        "other-backend",
        2,
        &format!("instructions = \"auto\"\ninstructions_backend = \"{other}\"\n"),
    );
    let (code, text) = gate(&b, &[]);
    assert_eq!(code, exit::ERROR, "{text}");
    assert!(
        text.contains(&format!(
            "its instruction values were measured with {other}"
        )) && text.contains("never compared"),
        "{text}"
    );
}

#[test]
fn gate_of_two_cases_keys_counters_by_case() {
    root_or_skip!();
    let _g = probes_shared();
    let (_d, b) = scratch_suite(
        "two",
        "work-noop",
        2,
        "max_new_sites = 0\ninstructions = \"callgrind\"\n",
    );
    let (code, text) = gate(&b, &["--bless"]);
    assert_eq!(code, exit::OK, "{text}");
    let blessed = std::fs::read_to_string(&b).unwrap();
    for (c, v) in [
        ("h1 /work c1: allocs/req", "3.0"),
        ("h1 /noop c1: allocs/req", "0.0"),
        ("h1 /work c1: syscalls/req", "2.0"),
        ("h1 /noop c1: syscalls/req", "2.0"),
    ] {
        assert!(
            blessed.contains(&format!("[counters.\"{c}\"]\nvalue = {v}\n")),
            "{c} = {v}:\n{blessed}"
        );
    }
    // Instructions are keyed by case too; /noop never calls the library.
    assert!(
        blessed.contains("[counters.\"h1 /work c1: instructions/req\"]")
            && blessed.contains("[counters.\"h1 /noop c1: instructions/req\"]")
            && blessed.contains("[counters.\"h1 /work c1: Ir @ calibwork_alloc\"]")
            && !blessed.contains("h1 /noop c1: Ir @ calibwork"),
        "{blessed}"
    );
    assert!(!blessed.contains("[counters.\"allocs/req\"]"), "{blessed}");
    let (code, text) = gate(&b, &[]);
    assert_eq!(code, exit::OK, "{text}");
    assert!(
        text.contains("2 cases (h1 /work c1; h1 /noop c1)"),
        "{text}"
    );
    let (code, text) = gate(&b, &["--target", &spec("calib-dyn-c.toml")]);
    assert_eq!(code, exit::GATE_BREACH, "{text}");
    assert!(
        text.contains("BREACH soft breach: h1 /work c1: allocs/req: 4.000/req > 3.000"),
        "{text}"
    );
    assert!(!text.contains("BREACH soft breach: h1 /noop c1"), "{text}");
}

#[test]
fn perf_window_without_a_pmu_is_an_error_never_zero() {
    root_or_skip!();
    let pmu = rig::host::detect_pmu();
    let calib =
        rig::launch::spec::TargetSpec::load(repo().join("config/targets/calib.toml")).unwrap();
    let noop = rig::window::instructions::measure_perf(&calib, "/noop", 200, 50);
    if pmu.instructions {
        // A PMU: /spin - /noop is calib_spin's 6006 instructions plus the
        // routing (47 under callgrind, COSTS.md "GET /spin"); a hardware
        // counter may add a few from interrupts.
        let spin = rig::window::instructions::measure_perf(&calib, "/spin", 200, 50).unwrap();
        let d = spin.ir_per_request - noop.unwrap().ir_per_request;
        assert_eq!(spin.backend, "perf");
        assert!((6006.0..6006.0 * 1.02).contains(&d), "/spin - /noop = {d}");
    } else {
        let e = format!("{:#}", noop.unwrap_err());
        assert!(e.contains("no hardware PMU"), "{e}");
        // The command says so too, with a non-zero exit.
        let out = Command::new(rig_bin())
            .args([
                "instructions",
                "--backend",
                "perf",
                "--path",
                "/noop",
                "--target",
            ])
            .arg(repo().join("config/targets/calib.toml"))
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(exit::ERROR), "{text}");
        assert!(text.contains("has no PMU"), "{text}");
        assert!(!String::from_utf8_lossy(&out.stdout).contains("per request"));
    }
}

/// The rig-peer the project's gate measures, built the one way that does not
/// depend on what else is in the cargo invocation: `cargo build -p rig-peer`
/// (dev profile) into its own target directory. The rig-peer next to rig is
/// whatever the last cargo command built; `cargo test --workspace` builds it
/// with hyper's `client` feature (rig-peer's dev-dependencies), which makes
/// hyper copy 72 B per request in `parse_headers` instead of 64 and drops
/// `encode_head`'s memcpy (docs/guide.md, "Counter-only CI gates").
fn gate_peer() -> PathBuf {
    let target = Path::new(rig_bin())
        .parent()
        .and_then(Path::parent)
        .expect("rig is in <target>/<profile>/");
    let dir = target.join("gate-peer");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--frozen", "-p", "rig-peer", "--bin", "rig-peer"])
        .arg("--target-dir")
        .arg(&dir)
        .current_dir(repo())
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo build -p rig-peer: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("debug").join("rig-peer")
}

/// Dogfooding: rig's own CI gates the calibration server and rig-peer
/// against the baselines committed in config/gates/. A change that adds an
/// allocation (or a copy, a syscall, a fault) per request on either hot
/// path fails here, naming the counter and the call site; for the
/// calibration server, so does one that adds instructions.
#[test]
fn the_projects_own_gates_pass() {
    root_or_skip!();
    let _g = probes_shared();
    let peer = gate_peer();
    for baseline in ["config/gates/calib.toml", "config/gates/peer.toml"] {
        let out = Command::new(rig_bin())
            .args(["gate", "--baseline"])
            .arg(repo().join(baseline))
            .env(rig::launch::spec::RIG_PEER_ENV, &peer)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            out.status.code(),
            Some(exit::OK),
            "{baseline}:\n{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("gate: PASS"), "{stdout}");
        if baseline.ends_with("peer.toml") {
            assert!(
                stdout.contains(&format!("binary: {} (sha256", peer.display())),
                "the gate names the rig-peer it measured:\n{stdout}"
            );
        }
    }
}

/// A baseline blessed with a debug rig-peer refuses a rig-peer from another
/// profile directory, before anything runs.
#[test]
fn gate_refuses_a_rig_peer_of_another_profile() {
    root_or_skip!();
    let dir = std::env::temp_dir().join(format!("rig-gate-profile-{}", std::process::id()));
    let release = dir.join("release");
    std::fs::create_dir_all(&release).unwrap();
    let _d = Dir(dir);
    let fake = release.join("rig-peer");
    std::fs::write(&fake, b"not run").unwrap();
    let out = Command::new(rig_bin())
        .args(["gate", "--baseline"])
        .arg(repo().join("config/gates/peer.toml"))
        .env(rig::launch::spec::RIG_PEER_ENV, &fake)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(exit::ERROR), "{text}");
    assert!(
        text.contains("blessed with a debug build of rig-peer")
            && text.contains(&format!("{} (release)", fake.display())),
        "{text}"
    );
}

#[test]
fn gate_output_directory_holds_junit_bencher_markdown_and_flamegraphs_of_the_breach() {
    root_or_skip!();
    let _g = probes_shared();
    let (d, b) = scratch(
        "exports",
        2,
        "max_new_sites = 0\n[counters.\"allocs/req\"]\nvalue = 3.0\nsoft_pct = 10.0\n",
    );
    assert_eq!(gate(&b, &["--bless"]).0, 0);
    let out = d.0.join("out");
    let (code, text) = gate(
        &b,
        &[
            "--target",
            &spec("calib-dyn-c.toml"),
            "--out",
            out.to_str().unwrap(),
        ],
    );
    assert_eq!(code, exit::GATE_BREACH, "{text}");
    let line = rig_fixtures::calibwork_site_line("ab_alloc_extra");
    let junit = std::fs::read_to_string(out.join("gate.junit.xml")).unwrap();
    // A failure per breach (the blessed counters have 0% limits, so every
    // counter variant c moves breaches), among them allocs/req (4 > 3.3)
    // and the new site beyond max_new_sites = 0.
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("gate.json")).unwrap()).unwrap();
    let breaches = report["breaches"].as_array().unwrap().len();
    assert!(breaches >= 2, "{report:#}");
    assert!(
        junit.contains(&format!("failures=\"{breaches}\"")),
        "{junit}"
    );
    assert!(
        junit.contains(
            "name=\"allocs/req\">\n      <failure message=\"allocs/req: 4.000/req &gt; 3.300"
        ),
        "{junit}"
    );
    assert!(
        junit.contains(&format!(
            "name=\"malloc calls @ calibwork_alloc (calibwork.c:{line})\">\n      <failure"
        )),
        "{junit}"
    );
    let bmf: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("gate.bmf.json")).unwrap()).unwrap();
    let case = bmf.as_object().unwrap().values().next().unwrap();
    assert_eq!(case["allocs/req"]["value"], 4.0, "{bmf:#}");
    let md = std::fs::read_to_string(out.join("gate.md")).unwrap();
    assert!(
        md.starts_with(&format!("## rig gate: ❌ FAIL ({breaches} breaches)")),
        "{md}"
    );
    // Per-case flamegraphs of the counted runs: 4 mallocs per request in
    // calibwork_alloc.
    let flames: Vec<_> = std::fs::read_dir(out.join("flame"))
        .unwrap()
        .flatten()
        .collect();
    assert_eq!(flames.len(), 2, "one directory per run");
    let folded = std::fs::read_to_string(flames[0].path().join("alloc.folded")).unwrap();
    assert!(folded.contains(";calibwork_alloc;malloc 4\n"), "{folded}");
}
