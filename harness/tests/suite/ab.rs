//! `rig ab` on the A/B calibration fixtures (fixtures/calib/COSTS.md, "A/B
//! fixtures"): arm B is arm A with `libcalibwork.so` variant b first on
//! LD_LIBRARY_PATH, which does exactly one fewer malloc(32) (and its free)
//! per request at site `ab_alloc_3`, and nothing else differently.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

use super::{probes_shared, rig_bin, spec};
use rig::exit;

const MATRIX: &str = r#"
[defaults]
warmup_ms = 100
duration_ms = 300
counted_requests = 500

[[suite]]
name = "work"
kind = "http"
protocols = ["h1"]
paths = ["/work"]
topologies = ["1"]

[[suite]]
name = "noop"
kind = "http"
protocols = ["h1"]
paths = ["/noop"]
topologies = ["1"]
"#;

struct Run {
    dir: PathBuf,
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ab(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.dir.join("out/ab.json")).unwrap()).unwrap()
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rig_ab(name: &str, arms: &[(&str, &str)], extra: &[&str]) -> Run {
    rig_ab_with(name, MATRIX, arms, extra)
}

fn rig_ab_with(name: &str, matrix: &str, arms: &[(&str, &str)], extra: &[&str]) -> Run {
    let dir = std::env::temp_dir().join(format!("rig-ab-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("m.toml"), matrix).unwrap();
    let mut cmd = Command::new(rig_bin());
    cmd.arg("ab");
    for (n, f) in arms {
        cmd.arg("--arm").arg(format!("{n}={}", spec(f)));
    }
    cmd.arg("--matrix")
        .arg(dir.join("m.toml"))
        .arg("--out")
        .arg(dir.join("out"))
        .args(["--probes", "syscalls,alloc,copy"])
        .args(extra);
    let out = cmd.output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        dir,
    }
}

fn metric<'a>(ab: &'a Value, case: &str, name: &str) -> &'a Value {
    ab["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["case"] == case && m["metric"] == name)
        .unwrap_or_else(|| panic!("no metric {name} for {case}"))
}

#[test]
fn ab_reports_exactly_one_fewer_allocation_at_the_changed_site_and_nothing_else() {
    root_or_skip!();
    let _g = probes_shared();
    let r = rig_ab(
        "minus1",
        &[("A", "calib-dyn-a.toml"), ("B", "calib-dyn-b.toml")],
        &["--suite", "work", "--control", "noop", "--rounds", "2"],
    );
    assert_eq!(r.code, exit::OK, "{}\n{}", r.stdout, r.stderr);
    let ab = r.ab();
    assert_eq!(
        ab["order"],
        serde_json::json!(["A1", "B1", "B2", "A2", "A3", "B3", "B4", "A4"])
    );
    let case = "work/h1/work/closed/1x1/ka";
    let allocs = &metric(&ab, case, "allocs/req")["vs_first"][0];
    assert_eq!(
        (allocs["a_median"].as_f64(), allocs["b_median"].as_f64()),
        (Some(3.0), Some(2.0))
    );
    assert_eq!(allocs["diff_median"], -1.0);
    assert_eq!(allocs["verdict"], "better");
    assert_eq!(
        metric(&ab, case, "alloc bytes/req")["vs_first"][0]["diff_median"],
        -32.0
    );
    assert_eq!(
        metric(&ab, case, "frees/req")["vs_first"][0]["diff_median"],
        -1.0
    );
    // No other exact counter moved.
    for m in ab["metrics"].as_array().unwrap() {
        let name = m["metric"].as_str().unwrap();
        if m["exact"] == true
            && m["case"] == case
            && !["allocs/req", "alloc bytes/req", "frees/req"].contains(&name)
        {
            assert_eq!(m["vs_first"][0]["diff_median"], 0.0, "{name} moved: {m:#}");
        }
    }
    // Exactly the changed call sites differ: the malloc and the free of
    // ab_alloc_3, named by function and file:line, and their whole stacks
    // (user site and the two frames that called it).
    let line = |m: &str| format!("calibwork.c:{}", rig_fixtures::calibwork_site_line(m));
    let callers = "calibwork_request < dyn_work";
    let sites = &ab["code_differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["case"] == case)
        .unwrap()["sites"];
    let sites: Vec<(String, Vec<f64>)> = serde_json::from_value(sites.clone()).unwrap();
    assert_eq!(
        sites,
        vec![
            (
                format!("free calls @ calibwork_alloc ({})", line("ab_free_3")),
                vec![1.0, 0.0]
            ),
            (
                format!(
                    "free stack calls @ calibwork_alloc ({}) < {callers}",
                    line("ab_free_3")
                ),
                vec![1.0, 0.0]
            ),
            (
                format!("malloc bytes @ calibwork_alloc ({})", line("ab_alloc_3")),
                vec![32.0, 0.0]
            ),
            (
                format!("malloc calls @ calibwork_alloc ({})", line("ab_alloc_3")),
                vec![1.0, 0.0]
            ),
            (
                format!(
                    "malloc stack bytes @ calibwork_alloc ({}) < {callers}",
                    line("ab_alloc_3")
                ),
                vec![32.0, 0.0]
            ),
            (
                format!(
                    "malloc stack calls @ calibwork_alloc ({}) < {callers}",
                    line("ab_alloc_3")
                ),
                vec![1.0, 0.0]
            ),
        ]
    );
    // Identical responses, and that equality counts as evidence.
    assert_eq!(ab["equality"]["differences"], serde_json::json!([[]]));
    assert!(ab["evidence"]
        .as_str()
        .unwrap()
        .contains("the equality is evidence"));
    // Both arms proven by hash in every launch.
    let runs = std::fs::read_to_string(r.dir.join("out/cases.jsonl")).unwrap();
    for l in runs.lines() {
        let c: Value = serde_json::from_str(l).unwrap();
        let want = if c["target_name"] == "A" {
            "/ab/a/libcalibwork.so"
        } else {
            "/ab/b/libcalibwork.so"
        };
        for pass in ["clean", "counted"] {
            let proof = &c[pass]["launch"]["arm_proof"]["verified"];
            assert!(
                proof
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|o| o["path"].as_str().unwrap().ends_with(want)),
                "{}: {proof:#}",
                c["id"]
            );
        }
    }
    assert!(
        r.stdout.contains("malloc calls @ calibwork_alloc"),
        "{}",
        r.stdout
    );
}

#[test]
fn ab_refuses_an_arm_whose_library_is_not_the_one_mapped() {
    root_or_skip!();
    let r = rig_ab(
        "rpath",
        &[("A", "calib-dyn-a.toml"), ("B", "calib-dyn-runpath-b.toml")],
        &["--suite", "work", "--rounds", "1", "--passes", "clean"],
    );
    assert_eq!(r.code, exit::ERROR, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stderr.contains("arm B is not the arm"), "{}", r.stderr);
    assert!(
        r.stderr.contains("ab/a/libcalibwork.so"),
        "says what was mapped instead: {}",
        r.stderr
    );
    assert!(r.stderr.contains("DT_RPATH"), "{}", r.stderr);
}

#[test]
fn ab_refuses_a_stale_server_on_the_port() {
    root_or_skip!();
    let dir = std::env::temp_dir().join(format!("rig-abfixed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stale = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = stale.local_addr().unwrap().port();
    let fixed = dir.join("fixed.toml");
    std::fs::write(
        &fixed,
        format!(
            "extends = \"{}\"\nname = \"fixed\"\nargv = [\"{{calib_dyn}}\", \"--port\", \"{port}\"]\nport = {{ fixed = {port} }}\n",
            spec("calib-dyn-b.toml")
        ),
    )
    .unwrap();
    let r = rig_ab(
        "stale",
        &[("A", "calib-dyn-a.toml"), ("B", fixed.to_str().unwrap())],
        &["--suite", "work", "--rounds", "1", "--passes", "clean"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(r.code, exit::ERROR, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "port {port} is held by pid {}",
            std::process::id()
        )),
        "{}",
        r.stderr
    );
    drop(stale);
}

#[test]
fn ab_of_two_identical_arms_finds_no_difference() {
    root_or_skip!();
    let _g = probes_shared();
    let r = rig_ab(
        "same",
        &[("A", "calib-dyn-a.toml"), ("A2", "calib-dyn-a.toml")],
        &["--suite", "work", "--rounds", "2"],
    );
    assert_eq!(r.code, exit::OK, "{}\n{}", r.stdout, r.stderr);
    let ab = r.ab();
    for m in ab["metrics"].as_array().unwrap() {
        let c = &m["vs_first"][0];
        if m["exact"] == true {
            assert_eq!(c["diff_median"], 0.0, "{m:#}");
            assert_eq!(c["verdict"], "no_difference", "{m:#}");
        } else {
            assert_eq!(
                c["verdict"], "no_difference",
                "timing {}: {c:#}",
                m["metric"]
            );
        }
    }
    assert!(ab["code_differences"]
        .as_array()
        .unwrap()
        .iter()
        .all(|d| d["sites"].as_array().unwrap().is_empty()));
    assert!(
        ab["evidence"]
            .as_str()
            .unwrap()
            .contains("indistinguishable by every counter"),
        "{}",
        ab["evidence"]
    );
    assert!(
        ab["verdict"]
            .as_str()
            .unwrap()
            .starts_with("timings: no difference"),
        "{}",
        ab["verdict"]
    );
}

/// Two identical arms of a server whose counters move with timing (rig-peer:
/// tokio's epoll_wait returns one event or several, its buffers grow or
/// not): whatever the round and request counts, no metric is better or
/// worse, no call site differs, and nothing says the arms executed
/// different code. A counter is decided by its values only once it is
/// proven deterministic (the same in every run of each arm, 3 runs at
/// least, and never varying in another case); every other one by its
/// spread and a rank test at 1% over the varying counters compared.
#[test]
fn ab_of_identical_arms_never_invents_a_difference_from_counters_that_move_with_timing() {
    root_or_skip!();
    let _g = probes_shared();
    for (rounds, requests) in [("1", 50), ("2", 50), ("3", 300)] {
        let matrix = format!(
            "[defaults]\nwarmup_ms = 100\nduration_ms = 300\ncounted_requests = {requests}\n\n\
             [[suite]]\nname = \"plain\"\nkind = \"http\"\nprotocols = [\"h1\"]\n\
             paths = [\"/plain\"]\ntopologies = [\"1\"]\n"
        );
        let r = rig_ab_with(
            &format!("same-peer-{rounds}-{requests}"),
            &matrix,
            &[("A", "peer.toml"), ("B", "peer.toml")],
            &[
                "--suite", "plain", "--rounds", rounds, "--passes", "counted",
            ],
        );
        let what = format!("--rounds {rounds}, {requests} counted requests");
        assert_eq!(r.code, exit::OK, "{what}\n{}\n{}", r.stdout, r.stderr);
        let ab = r.ab();
        let metrics = ab["metrics"].as_array().unwrap();
        assert!(!metrics.is_empty(), "{what}: {ab:#}");
        for m in metrics {
            let c = &m["vs_first"][0];
            assert!(
                c["verdict"] != "better" && c["verdict"] != "worse",
                "{what}: {} decided: {c:#}",
                m["metric"]
            );
        }
        for d in ab["code_differences"].as_array().unwrap() {
            assert_eq!(d["sites"], serde_json::json!([]), "{what}: {d:#}");
        }
        let evidence = ab["evidence"].as_str().unwrap();
        assert!(
            !evidence.contains("executed different code")
                && evidence.contains("indistinguishable by every counter"),
            "{what}: {evidence}"
        );
        assert!(
            !r.stdout.contains("better") && !r.stdout.contains("worse"),
            "{what}: {}",
            r.stdout
        );
    }
}

/// One round is two runs per arm: too few to prove a counter
/// deterministic, yet the changed call site still shows the arms ran
/// different code, because it runs on every request of arm A and on none
/// of arm B's.
#[test]
fn ab_with_one_round_still_finds_the_site_that_runs_in_one_arm_only() {
    root_or_skip!();
    let _g = probes_shared();
    let r = rig_ab(
        "minus1-r1",
        &[("A", "calib-dyn-a.toml"), ("B", "calib-dyn-b.toml")],
        &["--suite", "work", "--rounds", "1", "--passes", "counted"],
    );
    assert_eq!(r.code, exit::OK, "{}\n{}", r.stdout, r.stderr);
    let ab = r.ab();
    let case = "work/h1/work/closed/1x1/ka";
    let line = |m: &str| format!("calibwork.c:{}", rig_fixtures::calibwork_site_line(m));
    let sites: Vec<String> = ab["code_differences"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["case"] == case)
        .unwrap()["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s[0].as_str().unwrap().to_string())
        .collect();
    assert!(
        sites.contains(&format!(
            "malloc calls @ calibwork_alloc ({})",
            line("ab_alloc_3")
        )),
        "{sites:#?}"
    );
    assert!(
        sites
            .iter()
            .all(|s| s.contains(&line("ab_alloc_3")) || s.contains(&line("ab_free_3"))),
        "only the changed sites: {sites:#?}"
    );
    assert!(
        ab["evidence"]
            .as_str()
            .unwrap()
            .contains("the arms executed different code"),
        "{}",
        ab["evidence"]
    );
    // Two runs prove nothing: allocs/req is not decided as exact.
    assert_eq!(metric(&ab, case, "allocs/req")["exact"], false);
}

/// Arms whose TCP port speaks only TLS (rig-peer `--tls`, as nginx with
/// `listen ssl`): the output comparison speaks HTTP/1.1 over TLS to them,
/// with the spec's CA and server name, and finds the two arms alike.
#[test]
fn ab_compares_the_outputs_of_tls_only_arms_over_tls() {
    root_or_skip!();
    let _g = probes_shared();
    let r = rig_ab_with(
        "tls",
        r#"
[defaults]
warmup_ms = 100
duration_ms = 300
counted_requests = 200

[[suite]]
name = "tls"
kind = "http"
protocols = ["h2-tls"]
paths = ["/plain"]
topologies = ["1x1"]
"#,
        &[("A", "peer-tls.toml"), ("B", "peer-tls.toml")],
        &["--suite", "tls", "--rounds", "1", "--passes", "counted"],
    );
    assert_eq!(r.code, exit::OK, "{}\n{}", r.stdout, r.stderr);
    let ab = r.ab();
    let eq = &ab["equality"];
    for arm in eq["responses"].as_array().unwrap() {
        let plain = arm
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == "/plain")
            .unwrap_or_else(|| panic!("/plain answered: {eq:#}"));
        let text = plain["response"].as_str().unwrap();
        assert!(
            text.starts_with("HTTP/1.1 200") && text.ends_with("\r\n\r\nhello"),
            "{text:?}"
        );
    }
    assert!(
        eq["differences"]
            .as_array()
            .unwrap()
            .iter()
            .all(|d| d.as_array().unwrap().is_empty()),
        "{eq:#}"
    );
}
