//! `rig run` end to end: fresh servers per case, validated load, exact
//! counted passes, failures recorded as data, nothing left behind.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::audit::{run_audited, TAG_VAR};
use super::{probes_shared, repo, rig_bin};
use rig::exit;

/// A scratch directory for one test's specs, matrix and output.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("rig-run-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
    fn out(&self) -> PathBuf {
        self.0.join("out")
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn rig_run(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(rig_bin())
        .arg("run")
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn cases(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("cases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn report(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap()
}

/// Every cgroup directory whose name says rig process `rig_pid` made it.
fn cgroups_of(rig_pid: u32) -> Vec<PathBuf> {
    fn walk(d: &Path, tag: &str, out: &mut Vec<PathBuf>, depth: usize) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            if e.file_name().to_string_lossy().contains(tag) {
                out.push(p.clone());
            }
            if depth < 6 {
                walk(&p, tag, out, depth + 1);
            }
        }
    }
    let mut out = Vec::new();
    walk(
        Path::new("/sys/fs/cgroup"),
        &format!("-{rig_pid}-"),
        &mut out,
        0,
    );
    out
}

/// Processes whose parent is `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().nth(1))
            .and_then(|s| s.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(p);
        }
    }
    out
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
fn counted_pass_reports_the_calibration_costs_exactly() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("calib");
    let matrix = s.write("m.toml", CALIB_MATRIX);
    let target = repo().join("config/targets/calib.toml");
    let out = s.out();
    let (code, stdout, stderr) = rig_run(&[
        "--target",
        target.to_str().unwrap(),
        "--matrix",
        matrix.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--probes",
        "syscalls,alloc,copy,faults",
    ]);
    assert_eq!(code, exit::OK, "{stdout}\n{stderr}");
    let c = cases(&out);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0]["status"], "ok", "{:#}", c[0]["reasons"]);
    let per = &c[0]["counted"]["per_request"];
    // fixtures/calib/COSTS.md: 8 allocations (6004 B), 28332 B copied,
    // 4 minor faults, 9 syscalls per /calib on one connection.
    assert_eq!(per["allocations"], 8.0, "{per:#}");
    assert_eq!(per["alloc_bytes"], 6004.0);
    assert_eq!(per["frees"], 7.0);
    assert_eq!(per["copy_bytes"], 28332.0);
    assert_eq!(per["page_faults"], 4.0);
    assert_eq!(per["syscalls"], 9.0);
    assert_eq!(c[0]["counted"]["load"]["succeeded"], 1000);
    assert_eq!(c[0]["counted"]["attribution"]["window"]["quiesced"], true);
    // Every field report.html and `rig compare` read of a case line (the
    // typed view, `rig::results::case::CaseLine`) is read from this line: a
    // field the writer renamed would read as absent here.
    let view = rig::results::case::CaseLine::of(&c[0]).unwrap();
    let mut absent = Vec::new();
    nulls(&serde_json::to_value(&view).unwrap(), "", &mut absent);
    // What this case has no value for: the families not probed here
    // (locks, sched), what only other runs write (an ab's arm proof, a
    // memory/memslope/soak/live/rate case's parts, a limited generator, a
    // process's error, reasons of a case that failed), and the top sites
    // report.html derives before it reads the line.
    let allowed = [
        ".clean.generator_limited",
        ".clean.launch.arm_proof",
        ".counted.attribution.processes[0].error",
        // Only a run that names probes of its own (`--usdt`, `--func`).
        ".counted.attribution.user[]",
        ".counted.launch.arm_proof",
        ".counted.per_request.contended",
        ".counted.per_request.involuntary_cs",
        ".counted.per_request.lock_acquisitions",
        ".counted.per_request.voluntary_cs",
        ".counted.top_sites",
        ".live",
        ".load.rate",
        ".memory",
        ".memslope",
        ".reasons[]",
        ".soak",
    ];
    let unread: Vec<&String> = absent
        .iter()
        .filter(|p| !allowed.contains(&p.as_str()))
        .collect();
    assert!(
        unread.is_empty(),
        "view fields this line does not have: {unread:?}"
    );
    // The clean pass measured the same server kind without probes.
    let clean = &c[0]["clean"];
    assert!(clean["load"]["succeeded"].as_u64().unwrap() > 0);
    assert!(clean["server"]["cpu_us_per_request"].as_f64().unwrap() > 0.0);
    assert_ne!(
        clean["launch"]["pid"], c[0]["counted"]["launch"]["pid"],
        "fresh process per pass"
    );
    // Manifest first, with host facts and the target's hashed objects.
    let m: Value =
        serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(m["schema_version"], 1);
    assert!(m["host"]["pmu"]["detail"].as_str().unwrap().len() > 10);
    let objs = m["targets"][0]["objects"].as_array().unwrap();
    assert!(objs
        .iter()
        .any(|o| o["path"].as_str().unwrap().contains("libc.so")));
    assert!(objs
        .iter()
        .all(|o| o["sha256"].as_str().unwrap().len() == 64));
    assert_eq!(report(&out)["complete"], true);
    assert!(
        stdout.contains("calib/calib/h1/calib/closed/1x1/ka/#1"),
        "{stdout}"
    );
}

#[test]
fn a_wrong_body_content_type_or_status_fails_its_case_and_the_run_continues() {
    root_or_skip!();
    let s = Scratch::new("wrong");
    let wrong = s.write(
        "wrong.toml",
        r#"
name = "wrong"
argv = ["{calib_server}", "--port", "{port}"]
ready = { stdout = "READY" }
[protocols]
h1 = true
[[endpoints]]
path = "/noop"
status = 200
content_type = "text/plain"
body = { literal = "hello" }
[[endpoints]]
path = "/calib"
status = 200
content_type = "application/json"
body = { literal = "calib\n" }
[[endpoints]]
path = "/nothing"
status = 200
"#,
    );
    let matrix = s.write(
        "m.toml",
        r#"
[defaults]
warmup_ms = 100
duration_ms = 300
[[suite]]
name = "v"
kind = "http"
protocols = ["h1"]
paths = ["/noop", "/calib", "/nothing"]
topologies = ["1"]
"#,
    );
    let right = repo().join("config/targets/calib.toml");
    let out = s.out();
    let (code, stdout, stderr) = rig_run(&[
        "--target",
        wrong.to_str().unwrap(),
        "--target",
        right.to_str().unwrap(),
        "--matrix",
        matrix.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--passes",
        "clean",
    ]);
    assert_eq!(
        code,
        exit::CASE_FAILED,
        "a failed case makes the exit code say so\n{stdout}\n{stderr}"
    );
    let c = cases(&out);
    let by = |id: &str| {
        c.iter()
            .find(|x| x["id"] == id)
            .unwrap_or_else(|| panic!("{id}: {c:#?}"))
    };
    let reasons = |id: &str| by(id)["reasons"].to_string();
    assert_eq!(by("v/wrong/h1/noop/closed/1x1/ka/#1")["status"], "failed");
    assert!(
        reasons("v/wrong/h1/noop/closed/1x1/ka/#1").contains("body"),
        "{}",
        reasons("v/wrong/h1/noop/closed/1x1/ka/#1")
    );
    assert!(reasons("v/wrong/h1/calib/closed/1x1/ka/#1").contains("content-type"));
    assert!(reasons("v/wrong/h1/nothing/closed/1x1/ka/#1").contains("status 404"));
    // The run went on: the right target passed its cases after the failures.
    assert_eq!(by("v/calib/h1/calib/closed/1x1/ka/#1")["status"], "ok");
    assert_eq!(by("v/calib/h1/noop/closed/1x1/ka/#1")["status"], "ok");
    assert_eq!(
        by("v/calib/h1/nothing/closed/1x1/ka/#1")["status"],
        "skipped"
    );
    let r = report(&out);
    assert_eq!(
        (
            r["ok"].as_u64(),
            r["failed"].as_u64(),
            r["skipped"].as_u64()
        ),
        (Some(2), Some(3), Some(1))
    );
}

fn one_case_matrix(s: &Scratch) -> PathBuf {
    s.write(
        "m.toml",
        r#"
[defaults]
warmup_ms = 100
duration_ms = 500
[[suite]]
name = "one"
kind = "http"
protocols = ["h1"]
paths = ["/x"]
topologies = ["1"]
"#,
    )
}

#[test]
fn refuses_a_port_already_held_by_another_process() {
    root_or_skip!();
    let s = Scratch::new("held");
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = holder.local_addr().unwrap().port();
    let spec = s.write(
        "t.toml",
        &format!(
            r#"
name = "fixed"
argv = ["{{calib_server}}", "--port", "{port}"]
port = {{ fixed = {port} }}
ready = {{ tcp = true }}
[protocols]
h1 = true
[[endpoints]]
path = "/x"
status = 404
"#
        ),
    );
    let out = s.out();
    let (code, stdout, stderr) = rig_run(&[
        "--target",
        spec.to_str().unwrap(),
        "--matrix",
        one_case_matrix(&s).to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--passes",
        "clean",
    ]);
    assert_eq!(code, exit::CASE_FAILED, "{stdout}\n{stderr}");
    let c = cases(&out);
    let why = c[0]["reasons"].to_string();
    assert!(
        why.contains(&format!(
            "port {port} is held by pid {}",
            std::process::id()
        )),
        "{why}"
    );
    drop(holder);
}

#[test]
fn a_target_that_never_becomes_ready_fails_its_case_with_its_stderr_tail() {
    root_or_skip!();
    let s = Scratch::new("notready");
    let spec = s.write(
        "t.toml",
        r#"
name = "mute"
argv = ["sh", "-c", "echo listening-never-happens >&2; sleep 30", "{port}"]
ready = { tcp = true }
ready_timeout_ms = 700
[protocols]
h1 = true
[[endpoints]]
path = "/x"
status = 200
"#,
    );
    let out = s.out();
    let (code, stdout, stderr) = rig_run(&[
        "--target",
        spec.to_str().unwrap(),
        "--matrix",
        one_case_matrix(&s).to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--passes",
        "clean",
    ]);
    assert_eq!(code, exit::CASE_FAILED, "{stdout}\n{stderr}");
    let why = cases(&out)[0]["reasons"].to_string();
    assert!(
        why.contains("listening-never-happens"),
        "stderr tail in the reason: {why}"
    );
    assert!(report(&out)["cases"].as_array().unwrap().len() == 1);
}

/// A server that keeps 16 MiB per request it answers (and touches it).
const HOG: &str = r#"
import socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(16)
print("READY", flush=True)
hog = []
while True:
    c, _ = s.accept()
    while True:
        d = c.recv(65536)
        if not d:
            break
        b = bytearray(16 << 20)
        for i in range(0, len(b), 4096):
            b[i] = 1
        hog.append(b)
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok")
"#;

#[test]
fn a_memory_limit_below_the_targets_need_reports_the_oom() {
    root_or_skip!();
    let s = Scratch::new("oom");
    s.write("hog.py", HOG);
    // Tagged, for the leftover audit (suite/audit.rs).
    let tag = format!("oom-{}", std::process::id());
    let spec = s.write(
        "t.toml",
        &(r#"
name = "hog"
argv = ["python3", "hog.py", "{port}"]
"#
        .to_string()
            + &format!("env = {{ {TAG_VAR} = \"{tag}\" }}\n")
            + r#"ready = { stdout = "READY" }
[protocols]
h1 = true
[[endpoints]]
path = "/x"
status = 200
content_type = "text/plain"
body = { literal = "ok" }
"#),
    );
    let out = s.out();
    // The run, then the audit: no process, cgroup or run directory left.
    let (code, stdout, stderr) = run_audited(
        "oom",
        &tag,
        &out,
        Command::new(rig_bin()).arg("run").args([
            "--target",
            spec.to_str().unwrap(),
            "--matrix",
            one_case_matrix(&s).to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--passes",
            "clean",
            "--memory-mib",
            "64",
        ]),
    );
    assert_eq!(code, exit::CASE_FAILED, "{stdout}\n{stderr}");
    let c = cases(&out);
    let why = c[0]["reasons"].to_string();
    assert!(why.contains("OOM: the kernel killed"), "{why}");
    assert!(why.contains("at its memory limit"), "{why}");
}

#[test]
fn leaves_no_process_or_cgroup_behind_after_a_normal_run() {
    root_or_skip!();
    let s = Scratch::new("normal");
    let matrix = s.write("m.toml", CALIB_MATRIX);
    let out = s.out();
    let rig = Command::new(rig_bin())
        .args(["run", "--target"])
        .arg(repo().join("config/targets/calib.toml"))
        .arg("--matrix")
        .arg(&matrix)
        .arg("--out")
        .arg(&out)
        .args(["--passes", "clean", "--memory-mib", "256"])
        .output()
        .unwrap();
    assert!(
        rig.status.success(),
        "{}",
        String::from_utf8_lossy(&rig.stderr)
    );
    assert!(out.join("report.json").is_file());
    // rig exited: its children are gone (they would be reparented, but the
    // launched group was killed and reaped before rig exited) — check by
    // cgroup name, which carries rig's pid.
    let leftovers: Vec<_> = cgroups_of_any_dead_rig();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// rig cgroups whose owning rig process no longer exists.
fn cgroups_of_any_dead_rig() -> Vec<PathBuf> {
    let mut out = Vec::new();
    fn walk(d: &Path, out: &mut Vec<PathBuf>, depth: usize) {
        let Ok(rd) = std::fs::read_dir(d) else { return };
        for e in rd.flatten() {
            let p = e.path();
            if !p.is_dir() {
                continue;
            }
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(rest) = name.strip_prefix("rig-") {
                let parts: Vec<&str> = rest.rsplitn(3, '-').collect();
                if let Some(pid) = parts.get(1).and_then(|p| p.parse::<u32>().ok()) {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        out.push(p.clone());
                    }
                }
            }
            if depth < 6 {
                walk(&p, out, depth + 1);
            }
        }
    }
    walk(Path::new("/sys/fs/cgroup"), &mut out, 0);
    out
}

/// Start `rig run` with a long case; return it once its target is up.
fn start_long_run(s: &Scratch) -> (std::process::Child, u32) {
    let matrix = s.write(
        "long.toml",
        r#"
[defaults]
warmup_ms = 100
duration_ms = 20000
[[suite]]
name = "long"
kind = "http"
protocols = ["h1"]
paths = ["/calib", "/noop"]
topologies = ["1"]
"#,
    );
    let rig = Command::new(rig_bin())
        .args(["run", "--target"])
        .arg(repo().join("config/targets/calib.toml"))
        .arg("--matrix")
        .arg(&matrix)
        .arg("--out")
        .arg(s.out())
        .args(["--passes", "clean", "--memory-mib", "256"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let target = loop {
        // rig's other child is the target's clean-up watchdog.
        if let Some(t) = children_of(rig.id()).into_iter().find(|t| {
            std::fs::read_to_string(format!("/proc/{t}/cmdline"))
                .is_ok_and(|c| c.contains("calib_server"))
        }) {
            break t;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "rig never launched its target"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    std::thread::sleep(Duration::from_millis(800));
    (rig, target)
}

#[test]
fn a_target_killed_mid_case_fails_that_case_and_nothing_is_left_behind() {
    root_or_skip!();
    let s = Scratch::new("killed");
    let (rig, target) = start_long_run(&s);
    let rig_pid = rig.id();
    // SAFETY: the target is a child of the rig this test started.
    unsafe { libc::kill(target as i32, libc::SIGKILL) };
    let out = rig.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(exit::CASE_FAILED),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let c = cases(&s.out());
    assert_eq!(c[0]["status"], "failed");
    assert!(
        c[0]["reasons"].to_string().contains("exited"),
        "{:#}",
        c[0]["reasons"]
    );
    assert!(
        report(&s.out())["cases"].as_array().unwrap().len() == 2,
        "the run went on"
    );
    assert!(!Path::new(&format!("/proc/{target}")).exists());
    assert_eq!(cgroups_of(rig_pid), Vec::<PathBuf>::new());
}

#[test]
fn sigint_to_rig_stops_the_run_writes_the_report_and_cleans_up() {
    root_or_skip!();
    let s = Scratch::new("sigint");
    let (rig, target) = start_long_run(&s);
    let rig_pid = rig.id();
    // SAFETY: signalling the rig process this test started.
    unsafe { libc::kill(rig_pid as i32, libc::SIGINT) };
    let out = rig.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(exit::INTERRUPTED),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = report(&s.out());
    assert_eq!(r["interrupted"], true);
    assert_eq!(r["complete"], false);
    assert!(
        !Path::new(&format!("/proc/{target}")).exists(),
        "target {target} was stopped"
    );
    assert_eq!(cgroups_of(rig_pid), Vec::<PathBuf>::new());
    let _ = BufReader::new(&out.stdout[..]).lines().count();
}

#[test]
fn open_loop_accounting_adds_up_in_every_case_of_the_default_matrix() {
    root_or_skip!();
    let s = Scratch::new("matrix");
    // The default matrix, shortened: same suites, cases and rates.
    let text = std::fs::read_to_string(repo().join("config/matrix.toml"))
        .unwrap()
        .replace("duration_ms = 2000", "duration_ms = 400")
        .replace("warmup_ms = 500", "warmup_ms = 100")
        .replace("settle_ms = 500", "settle_ms = 100");
    let matrix = s.write("matrix.toml", &text);
    let out = s.out();
    let (code, stdout, stderr) = rig_run(&[
        "--target",
        repo().join("config/targets/peer.toml").to_str().unwrap(),
        "--matrix",
        matrix.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--passes",
        "clean",
    ]);
    assert_eq!(code, exit::OK, "{stdout}\n{stderr}");
    let c = cases(&out);
    assert!(c.len() >= 15, "{}", c.len());
    for case in &c {
        // `limited` is a measured case whose generator was late (a shared
        // machine can do that); the ledger must add up either way.
        assert!(
            case["status"] == "ok" || case["status"] == "limited",
            "{}: {:#}",
            case["id"],
            case["reasons"]
        );
        if case["kind"] != "http" {
            continue;
        }
        let l = &case["clean"]["load"];
        let n = |k: &str| l[k].as_u64().unwrap();
        let errors: u64 = l["errors"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_u64().unwrap())
            .sum();
        assert_eq!(
            n("scheduled"),
            n("on_time") + n("late") + n("expired"),
            "{}",
            case["id"]
        );
        assert_eq!(n("sent"), n("on_time") + n("late"), "{}", case["id"]);
        assert_eq!(n("sent"), n("succeeded") + errors, "{}", case["id"]);
    }
}

/// The paths of `v` whose value is `null` (an `Option` the view did not
/// find) or an empty array.
fn nulls(v: &Value, path: &str, out: &mut Vec<String>) {
    match v {
        Value::Null => out.push(path.to_string()),
        Value::Object(m) => {
            for (k, x) in m {
                nulls(x, &format!("{path}.{k}"), out);
            }
        }
        Value::Array(a) if a.is_empty() => out.push(format!("{path}[]")),
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate().take(1) {
                nulls(x, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}
