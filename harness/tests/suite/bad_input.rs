//! Bad input is refused before anything runs, with exit 2 and its
//! position: values that cannot work, budgets the host cannot give,
//! programs that are missing, configs that are not regular files or too
//! big, matrices of millions of cases (counted before they allocate, in
//! linear time), gate baselines with NaN or negative limits; a run that
//! measured nothing exits non-zero.

use super::audit::{all_json_valid, audit, Watcher, TAG_VAR};
use super::scratch::{assert_all_json, finish, launch_dirs_of, rig, signal, Scratch};
use super::trial_server::{matrix, tag};
use super::{probes_shared, repo, rig_bin, spec};
use rig::exit;
use rig::launch::spec::TargetSpec;
use rig::launch::start::LaunchOptions;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn hard_nofile() -> u64 {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: r is a valid out-pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) }, 0);
    r.rlim_max
}

/// Matrix values that `check-config` used to accept and that hung `rig
/// run`: refused by both, with file:line:col, before any target starts.
#[test]
fn matrix_values_that_cannot_work_are_refused_up_front_with_their_position() {
    let s = Scratch::new("badmatrix");
    let calib = repo().join("config/targets/calib.toml");
    let base = "[defaults]\nwarmup_ms = 100\nduration_ms = 300\n\n[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/calib\"]\ntopologies = [\"1\"]\n";
    let too_many = (hard_nofile() + 1).to_string();
    let cases: Vec<(String, &str, &str)> = vec![
        (
            base.replace(
                "topologies = [\"1\"]",
                "topologies = [\"1\"]\nrates = [1e12]",
            ),
            "11:1",
            "one generator thread can schedule",
        ),
        (
            base.replace("\"1\"]", &format!("\"{too_many}\"]")),
            "10:1",
            "RLIMIT_NOFILE",
        ),
        (
            base.replace("duration_ms = 300", "duration_ms = 0"),
            "3:1",
            "duration_ms = 0",
        ),
        (
            base.replace(
                "duration_ms = 300",
                "duration_ms = 300\ncounted_requests = 0",
            ),
            "4:1",
            "counted_requests = 0",
        ),
        (
            base.replace("warmup_ms = 100", "warmup_ms = 100\nrepeats = 0"),
            "3:1",
            "repeats = 0",
        ),
        (
            base.replace("topologies = [\"1\"]", "topologies = [\"1\"]\nrates = []"),
            "11:1",
            "rates = []",
        ),
        (
            base.replace("name = \"a\"", "name = \"\""),
            "6:1",
            "empty suite name",
        ),
        (
            format!("{base}\n[[suite]]\nname = \"a\"\nkind = \"memory\"\n"),
            "13:1",
            "two suites have this name",
        ),
        (
            "[defaults]\nduration_ms = 300\n".to_string(),
            "1:1",
            "at least one [[suite]]",
        ),
    ];
    for (text, pos, why) in &cases {
        let m = s.write("m.toml", text);
        let (code, out, err) = rig(&["check-config", m.to_str().unwrap()]);
        assert_ne!(code, exit::OK, "check-config accepts:\n{text}\n{out}");
        assert!(
            err.contains(&format!("m.toml:{pos}:")) && err.contains(why),
            "want {pos} {why}:\n{text}\n{err}"
        );
        let dir = s.0.join("out");
        let (code, out, err) = rig(&[
            "run",
            "--target",
            calib.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
            "--passes",
            "clean",
        ]);
        assert_eq!(code, exit::USAGE, "{text}\n{out}\n{err}");
        assert!(err.contains(why), "{err}");
        assert!(!dir.exists(), "nothing started, nothing written");
    }
}

/// Budgets this host cannot give fail up front (exit 2), not every case.
#[test]
fn budgets_the_host_cannot_give_are_refused_up_front() {
    let s = Scratch::new("budgets");
    let calib = repo().join("config/targets/calib.toml");
    let m = s.write("m.toml", "[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/calib\"]\ntopologies = [\"1\"]\n");
    for (flag, value, why) in [
        ("--memory-mib", "0", "--memory-mib 0"),
        ("--server-cpu", "99", "CPU 99 is not online"),
        ("--cpu-quota", "1e9", "more cores than this host has"),
        ("--repeats", "0", "--repeats 0"),
    ] {
        let dir = s.0.join("out");
        let (code, out, err) = rig(&[
            "run",
            "--target",
            calib.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
            "--out",
            dir.to_str().unwrap(),
            "--passes",
            "clean",
            flag,
            value,
        ]);
        assert_eq!(code, exit::USAGE, "{flag} {value}\n{out}\n{err}");
        assert!(err.contains(why), "{err}");
        assert!(!dir.exists());
    }
}

/// A target spec whose program does not exist or cannot run is refused by
/// check-config and by run, with its position.
#[test]
fn a_missing_or_non_executable_program_is_refused_with_its_position() {
    let s = Scratch::new("argv0");
    let not_exec = s.write("server.sh", "#!/bin/sh\n");
    for (prog, why) in [
        ("./no-such-server", "does not exist"),
        (not_exec.to_str().unwrap(), "is not an executable file"),
        ("no-such-server-in-path", "is not an executable in PATH"),
    ] {
        let spec = s.write(
            "t.toml",
            &format!("name = \"t\"\nargv = [\"{prog}\", \"{{port}}\"]\nport = \"argv\"\nready = {{ tcp = true }}\n[[endpoints]]\npath = \"/\"\nstatus = 200\n"),
        );
        let (code, _, err) = rig(&["check-config", spec.to_str().unwrap()]);
        assert_ne!(code, exit::OK);
        assert!(err.contains("t.toml:2:") && err.contains(why), "{err}");
        let m = s.write("m.toml", "[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/\"]\ntopologies = [\"1\"]\n");
        let (code, _, err) = rig(&[
            "run",
            "--target",
            spec.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
            "--out",
            s.0.join("out").to_str().unwrap(),
            "--passes",
            "clean",
        ]);
        assert_eq!(code, exit::USAGE, "{err}");
        assert!(err.contains(why), "{err}");
    }
}

/// Every case skipped (its path is not an endpoint of the target): the run
/// measured nothing and says so with a non-zero exit.
#[test]
fn a_run_that_measured_nothing_exits_non_zero() {
    root_or_skip!();
    let s = Scratch::new("nothing");
    let calib = repo().join("config/targets/calib.toml");
    let m = s.write("m.toml", "[defaults]\nwarmup_ms = 100\nduration_ms = 300\n[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/not-an-endpoint\"]\ntopologies = [\"1\"]\n");
    let dir = s.0.join("out");
    let (code, out, err) = rig(&[
        "run",
        "--target",
        calib.to_str().unwrap(),
        "--matrix",
        m.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--passes",
        "clean",
    ]);
    assert_eq!(code, exit::CASE_FAILED, "{out}\n{err}");
    assert!(err.contains("nothing was measured"), "{err}");
    assert_all_json(&dir);
}

/// Every run of both arms skipped (the path is an endpoint of neither):
/// `rig ab` measured nothing and says so, exit 6, `ab.json` has
/// `measured: false` (not interrupted, no failed run), and cases.jsonl
/// says why for each run.
#[test]
fn an_ab_that_measured_nothing_exits_non_zero_and_says_so() {
    root_or_skip!();
    let s = Scratch::new("ab-nothing");
    let m = s.write("m.toml", "[defaults]\nwarmup_ms = 100\nduration_ms = 300\n[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/not-an-endpoint\"]\ntopologies = [\"1\"]\n");
    let dir = s.0.join("out");
    let (code, out, err) = rig(&[
        "ab",
        "--arm",
        &format!("A={}", spec("calib-dyn-a.toml")),
        "--arm",
        &format!("B={}", spec("calib-dyn-b.toml")),
        "--matrix",
        m.to_str().unwrap(),
        "--suite",
        "a",
        "--out",
        dir.to_str().unwrap(),
        "--passes",
        "clean",
        "--rounds",
        "1",
    ]);
    assert_eq!(code, exit::CASE_FAILED, "{out}\n{err}");
    assert!(err.contains("rig ab: nothing was measured"), "{err}");
    assert_eq!(all_json_valid(&dir), Vec::<String>::new());
    let ab: Value = serde_json::from_slice(&std::fs::read(dir.join("ab.json")).unwrap()).unwrap();
    assert_eq!(ab["measured"], false, "{ab:#}");
    assert_eq!(ab["interrupted"], false, "{ab:#}");
    assert_eq!(ab["failed_runs"], serde_json::json!([]), "{ab:#}");
    let cases: Vec<Value> = std::fs::read_to_string(dir.join("cases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    // One A B B A round.
    assert_eq!(cases.len(), 4, "{cases:#?}");
    for c in &cases {
        assert_eq!(c["status"], "skipped", "{c:#}");
        assert!(
            c["reasons"]
                .to_string()
                .contains("has no endpoint /not-an-endpoint"),
            "{:#}",
            c["reasons"]
        );
    }
}

/// A launch whose program cannot be spawned leaves no run directory.
#[test]
fn a_failed_spawn_leaves_no_run_directory() {
    root_or_skip!();
    let s = Scratch::new("spawnfail");
    s.write("c.in", "x {port}\n");
    let spec = TargetSpec::from_text(
        &s.0.join("t.toml"),
        "name = 't'\nargv = ['/no/such/program', '{port}']\nport = 'argv'\nready = { tcp = true }\n\
         [[files]]\ntemplate = 'c.in'\npath = 'spawnfail-marker.conf'\n",
    )
    .unwrap();
    let e = rig::launch::launch(&spec, &LaunchOptions::default()).unwrap_err();
    assert!(e.to_string().contains("/no/such/program"), "{e}");
    let left: Vec<PathBuf> = launch_dirs_of(std::process::id())
        .into_iter()
        .filter(|d| d.join("spawnfail-marker.conf").exists())
        .collect();
    assert_eq!(left, Vec::<PathBuf>::new());
}

/// 1000 paths × 1000 rates × 100 topologies × 2 keep-alive settings: 200
/// million cases. `check-config` and `run` count them before expanding
/// anything and refuse (exit 2) naming the count, the axes and the axis to
/// cut; `run` creates nothing.
#[test]
fn a_matrix_of_200_million_cases_is_refused_before_it_allocates() {
    let s = Scratch::new("trial-huge");
    let list = |n: usize, f: &dyn Fn(usize) -> String| (0..n).map(f).collect::<Vec<_>>().join(", ");
    let m = s.write(
        "huge.toml",
        &format!(
            "[[suite]]\nname = \"big\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [{}]\n\
             rates = [{}]\ntopologies = [{}]\nkeepalive = [true, false]\n",
            list(1000, &|i| format!("\"/p{i}\"")),
            list(1000, &|i| format!("{}", i + 1)),
            list(100, &|i| format!("\"{}\"", i + 1)),
        ),
    );
    let want = [
        "200000000 cases",
        "1000 paths × 1000 rates × 100 topologies",
        "cut `paths` (1000 values) first",
    ];
    let (code, out, err) = rig(&["check-config", m.to_str().unwrap()]);
    assert_eq!(code, exit::USAGE, "{out}\n{err}");
    for w in want {
        assert!(err.contains(w), "{w}: {err}");
    }
    let dir = s.0.join("out");
    let (code, out, err) = rig(&[
        "run",
        "--target",
        repo().join("config/targets/calib.toml").to_str().unwrap(),
        "--matrix",
        m.to_str().unwrap(),
        "--out",
        dir.to_str().unwrap(),
        "--passes",
        "clean",
    ]);
    assert_eq!(code, exit::USAGE, "{out}\n{err}");
    assert!(err.contains("200000000 cases"), "{err}");
    assert!(!err.contains("memory allocation"), "{err}");
    assert!(!dir.exists(), "nothing created");
}

/// A FIFO (no writer ever comes), `/dev/zero` (endless), a directory and
/// a config larger than 16 MiB, given as `check-config FILE`, `run
/// --matrix`, `run --target`, `gate --baseline` and `extends = …` in a
/// spec: each refused at once without reading it, exit 2, naming what it
/// is.
#[test]
fn configs_that_are_fifos_devices_or_too_big_are_refused_without_reading() {
    let s = Scratch::new("trial-configs");
    let fifo = s.0.join("fifo.toml");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let big = s.0.join("big.toml");
    std::fs::File::create(&big)
        .unwrap()
        .set_len((16 << 20) + 1)
        .unwrap();
    let extends = |base: &Path| {
        s.write(
            "ext.toml",
            &format!("extends = \"{}\"\nenv = {{ X = \"1\" }}\n", base.display()),
        )
    };
    let calib = repo().join("config/targets/calib.toml");
    let calib = calib.to_str().unwrap();
    let good_m = matrix(&s, "m.toml", "", "");
    let good_m = good_m.to_str().unwrap();
    let out = s.0.join("out");
    let out = out.to_str().unwrap();
    for (file, what) in [
        (fifo.as_path(), "a FIFO"),
        (Path::new("/dev/zero"), "a character device"),
        (s.0.as_path(), "a directory"),
        (big.as_path(), "larger than the 16 MiB"),
    ] {
        let f = file.to_str().unwrap();
        let ext = extends(file);
        let runs: [Vec<&str>; 5] = [
            vec!["check-config", f],
            vec![
                "run", "--target", calib, "--matrix", f, "--out", out, "--passes", "clean",
            ],
            vec![
                "run", "--target", f, "--matrix", good_m, "--out", out, "--passes", "clean",
            ],
            vec!["gate", "--baseline", f],
            vec!["check-config", ext.to_str().unwrap()],
        ];
        for args in runs {
            let (code, stdout, err) = rig(&args);
            let cmd = args.join(" ");
            assert_eq!(code, exit::USAGE, "{cmd}: {stdout}\n{err}");
            assert!(err.contains(what), "{cmd}: {err}");
            assert!(!Path::new(out).exists(), "{cmd}: nothing started");
        }
    }
}

/// 16,667 suites are checked (validation reads the file's positions once,
/// not once per suite: it was quadratic and never finished), and a run of
/// 2000 suites interrupted after its first case marks the other 1999
/// skipped in one write: exit 130, every case in report.json and
/// cases.jsonl.
#[test]
fn thousands_of_suites_are_checked_and_interrupted_in_linear_time() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-suites");
    let suites = |n: usize| -> String {
        (0..n)
            .map(|i| {
                format!(
                    "[[suite]]\nname = \"s{i}\"\nkind = \"http\"\nprotocols = [\"h1\"]\n\
                     paths = [\"/calib\"]\ntopologies = [\"1\"]\n\n"
                )
            })
            .collect()
    };
    let head = "[defaults]\nwarmup_ms = 50\nduration_ms = 50\n";
    let many = s.write("many.toml", &format!("{head}{}", suites(16_667)));
    let t0 = Instant::now();
    let (code, out, err) = rig(&["check-config", many.to_str().unwrap()]);
    eprintln!("check-config of 16667 suites: {:?}", t0.elapsed());
    assert_eq!(code, exit::OK, "{out}\n{err}");
    assert!(out.contains("16667 suites"), "{out}");

    let m = s.write("m2000.toml", &format!("{head}{}", suites(2000)));
    let out_dir = s.0.join("out");
    let t = tag("suites");
    let spec = s.write(
        "calib.toml",
        &format!(
            "extends = \"{}\"\nenv = {{ {TAG_VAR} = \"{t}\" }}\n",
            repo().join("config/targets/calib.toml").display()
        ),
    );
    let child = Command::new(rig_bin())
        .args(["run", "--target", spec.to_str().unwrap()])
        .args(["--matrix", m.to_str().unwrap(), "--passes", "clean"])
        .arg("--out")
        .arg(&out_dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let w = Watcher::start(pid, &t);
    // After the first case's report: the run is under way.
    let t0 = Instant::now();
    while !out_dir.join("report.json").exists() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = Instant::now();
    signal(pid, libc::SIGINT);
    let (code, stdout, stderr) = finish(child);
    eprintln!(
        "rig run of 2000 suites: exit {code} {:?} after SIGINT",
        t0.elapsed()
    );
    let seen = w.finish();
    audit("suites", pid, &t, &seen, &out_dir);
    assert_eq!(code, exit::INTERRUPTED, "{stdout}\n{stderr}");
    let r: Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("report.json")).unwrap()).unwrap();
    assert_eq!(r["interrupted"], true);
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2000);
    let skipped = cases.iter().filter(|c| c["status"] == "skipped").count();
    assert!(skipped >= 1998, "{skipped} skipped");
    assert!(
        cases.last().unwrap()["reasons"][0]
            .as_str()
            .unwrap()
            .contains("interrupted by SIGINT"),
        "{:#}",
        cases.last().unwrap()
    );
    let lines = std::fs::read_to_string(out_dir.join("cases.jsonl")).unwrap();
    assert_eq!(lines.lines().count(), 2000);
}

/// Zero and absurd values exit 2 before anything starts (they exited 1,
/// panicked on an overflowing deadline, or ran "unlimited"), each message
/// naming the flag or key.
#[test]
fn zero_and_absurd_values_are_refused_with_exit_2() {
    let s = Scratch::new("trial-values");
    let calib = repo().join("config/targets/calib.toml");
    let calib = calib.to_str().unwrap();
    let m = matrix(&s, "m.toml", "", "");
    let m = m.to_str().unwrap();
    let out = s.0.join("out");
    let out = out.to_str().unwrap();
    let run = |flag: &'static str, v: &'static str| -> Vec<&str> {
        vec![
            "run", "--target", calib, "--matrix", m, "--out", out, "--passes", "clean", flag, v,
        ]
    };
    let url = "http://127.0.0.1:9/";
    let me = std::process::id().to_string();
    let me = me.as_str();
    let long = "99999999999999s";
    let mut cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["attach", "--pid", me, "--per", "0"], "--per 0"),
        (
            vec!["attach", "--pid", me, "--drive", url, "--requests", "0"],
            "--requests",
        ),
        (
            vec!["attach", "--pid", me, "--duration", "0s"],
            "--duration 0s",
        ),
        (
            vec!["attach", "--pid", me, "--duration", long],
            "more than a year",
        ),
        (
            vec![
                "attach",
                "--pid",
                me,
                "--drive",
                url,
                "--connections",
                "100000000",
            ],
            "RLIMIT_NOFILE",
        ),
        (
            vec![
                "attach",
                "--pid",
                me,
                "--drive",
                url,
                "--request-timeout",
                "0s",
            ],
            "--request-timeout 0s",
        ),
        (
            run("--memory-mib", "18446744073709551615"),
            "more than this host's memory",
        ),
        (run("--request-timeout", "0s"), "--request-timeout 0s"),
        (run("--case-timeout", long), "more than a year"),
        (run("--soak-duration", long), "more than a year"),
        (vec!["demo", "--requests", "0"], "--requests"),
        (vec!["probe-cost", "--iterations", "0"], "--iterations 0"),
        (
            vec![
                "instructions",
                "--target",
                calib,
                "--path",
                "/calib",
                "--requests",
                "0",
            ],
            "--requests 0",
        ),
    ];
    let huge = matrix(&s, "huge.toml", "duration_ms = 9223372036854775807", "");
    let zero = matrix(&s, "zero.toml", "request_timeout_ms = 0", "");
    let mut texts = Vec::new();
    for (file, why) in [
        (&huge, "more than a year"),
        (&zero, "request_timeout_ms = 0"),
    ] {
        texts.push((file.to_str().unwrap().to_string(), why));
    }
    for (f, why) in &texts {
        cases.push((vec!["check-config", f], why));
        cases.push((
            vec![
                "run", "--target", calib, "--matrix", f, "--out", out, "--passes", "clean",
            ],
            why,
        ));
    }
    for (args, why) in cases {
        let (code, stdout, err) = rig(&args);
        let cmd = args.join(" ");
        assert_eq!(code, exit::USAGE, "{cmd}: {stdout}\n{err}");
        assert!(err.contains(why), "{cmd}: want {why}: {err}");
        assert!(!err.contains("panicked"), "{cmd}: {err}");
        assert!(!Path::new(out).exists(), "{cmd}: nothing started");
    }
}

/// A gate baseline whose limits are NaN or negative (`value`, `soft_pct`,
/// `hard`): refused before anything runs, naming the counter. A NaN `hard`
/// was accepted, and a NaN ceiling is never breached.
#[test]
fn gate_baselines_with_nan_or_negative_limits_are_refused_before_anything_runs() {
    let s = Scratch::new("trial-baseline");
    let calib = repo().join("config/targets/calib.toml");
    let m = matrix(&s, "m.toml", "", "");
    for (limit, why) in [
        ("value = nan", "value must be a number >= 0"),
        ("value = -1.0", "value must be a number >= 0"),
        ("value = 2.0\nsoft_pct = nan", "soft_pct must be >= 0"),
        ("value = 2.0\nsoft_pct = -5.0", "soft_pct must be >= 0"),
        ("value = 2.0\nhard = nan", "hard = NaN"),
        ("value = 2.0\nhard = -1.0", "hard = -1"),
    ] {
        let b = s.write(
            "b.toml",
            &format!(
                "target = \"{}\"\nmatrix = \"{}\"\nsuite = \"t\"\nrepeats = 2\nrequests = 100\n\
                 probes = \"syscalls\"\n[counters.\"syscalls/req\"]\n{limit}\n",
                calib.display(),
                m.display()
            ),
        );
        let out = s.0.join("out");
        let (code, stdout, err) = rig(&[
            "gate",
            "--baseline",
            b.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
        ]);
        assert_eq!(code, exit::ERROR, "{limit}: {stdout}\n{err}");
        assert!(
            err.contains("counter `syscalls/req`") && err.contains(why),
            "{limit}: {err}"
        );
        assert!(!out.exists(), "{limit}: nothing ran");
    }
}
