//! `rig gate` on the A/B calibration fixtures (fixtures/calib/COSTS.md, "A/B
//! fixtures"): A does 3 allocations per request, B one fewer (`ab_alloc_3`),
//! C one more (`ab_alloc_extra`). Counted passes only: no timing anywhere.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::{probes_shared, rig_bin, root_or_skip};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A scratch dir with a baseline header (no counters yet) for arm A.
fn scratch(name: &str, repeats: u32, extra: &str) -> (Dir, PathBuf) {
    let dir = std::env::temp_dir().join(format!("rig-gate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let r = repo();
    let text = format!(
        "target = \"{}\"\nmatrix = \"{}\"\nsuite = \"work\"\nrepeats = {repeats}\nrequests = 500\nprobes = \"syscalls,alloc,copy\"\n{extra}",
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

fn spec(name: &str) -> String {
    repo()
        .join("config/targets")
        .join(name)
        .display()
        .to_string()
}

#[test]
fn gate_calibration_is_deterministic_and_passes_its_own_blessed_baseline() {
    if !root_or_skip("gate_calibration_is_deterministic_and_passes_its_own_blessed_baseline") {
        return;
    }
    let _g = probes_shared();
    let (d, b) = scratch("calib", 5, "");
    let (code, text) = gate(&b, &["--bless"]);
    assert_eq!(code, 0, "{text}");
    let blessed = std::fs::read_to_string(&b).unwrap();
    for c in [
        "allocs/req",
        "alloc bytes/req",
        "frees/req",
        "copy bytes/req",
        "syscalls/req",
    ] {
        assert!(
            blessed.contains(&format!("[counters.\"{c}\"]")),
            "{c} not blessed (non-deterministic?):\n{blessed}\n{text}"
        );
    }
    let out = d.0.join("out");
    let (code, text) = gate(&b, &["--out", out.to_str().unwrap()]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("gate: PASS"), "{text}");
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("gate.json")).unwrap()).unwrap();
    let obs = report["observed"].as_array().unwrap();
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
    if !root_or_skip("gate_arm_b_with_one_fewer_allocation_passes_a_10pct_soft_limit") {
        return;
    }
    let _g = probes_shared();
    let (_d, b) = scratch(
        "b",
        3,
        "[counters.\"allocs/req\"]\nvalue = 3.0\nsoft_pct = 10.0\n",
    );
    assert_eq!(gate(&b, &["--bless"]).0, 0);
    let (code, text) = gate(&b, &["--target", &spec("calib-dyn-b.toml")]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("gate: PASS"), "{text}");
    let line = rig_fixtures::calibwork_site_line("ab_alloc_3");
    assert!(
        text.contains(&format!("calibwork.c:{line}")) && text.contains("site gone"),
        "the removed site should be shown as gone:\n{text}"
    );
}

#[test]
fn gate_arm_c_with_one_more_allocation_fails_with_exit_7_naming_the_site() {
    if !root_or_skip("gate_arm_c_with_one_more_allocation_fails_with_exit_7_naming_the_site") {
        return;
    }
    let _g = probes_shared();
    let (_d, b) = scratch(
        "c",
        3,
        "max_new_sites = 0\n[counters.\"allocs/req\"]\nvalue = 3.0\nsoft_pct = 10.0\n",
    );
    assert_eq!(gate(&b, &["--bless"]).0, 0);
    let (code, text) = gate(&b, &["--target", &spec("calib-dyn-c.toml")]);
    assert_eq!(code, 7, "{text}");
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
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("unknown field `request`"), "{text}");
    assert!(
        text.contains("baseline.toml:7"),
        "line of the bad key: {text}"
    );

    let (_d2, b2) = scratch("typo-counter", 3, "[counters.\"alocs/req\"]\nvalue = 3.0\n");
    let (code, text) = gate(&b2, &[]);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("unknown counter `alocs/req` (did you mean `allocs/req`?)"),
        "{text}"
    );
}

/// Dogfooding: rig's own CI gates the calibration server against the
/// baseline committed in config/gates/. A change that adds an allocation per
/// request there fails here, naming the counter and the call site.
#[test]
fn the_projects_own_gates_pass() {
    if !root_or_skip("the_projects_own_gates_pass") {
        return;
    }
    let _g = probes_shared();
    let baseline = "config/gates/calib.toml";
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(baseline);
    let out = Command::new(rig_bin())
        .args(["gate", "--baseline"])
        .arg(&path)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{baseline}:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("gate: PASS"), "{stdout}");
}
