//! Signals: rig interrupted (SIGINT, SIGTERM, SIGHUP) or killed (SIGKILL)
//! at chosen phases of each command ends at once (exit 130, report marked
//! interrupted, no new target started) and leaves nothing (the audit of
//! [`super::audit`]). Matrices are long so that the signal lands
//! mid-phase; a case that would run its course is cut short by the
//! signal, which keeps the suite at a few seconds a case.
//!
//! Every signal case prints one line, `chaos: <case>: exit <code> <ms> ms
//! after <SIG>` (a SIGKILLed rig's code is 137, 128 + 9, as a shell says),
//! and a SIGKILL case also `chaos: <case>: nothing left <ms> ms after
//! SIGKILL` (the watchdogs' and the kernel's teardown). Times to exit are
//! printed, never asserted tightly: a bound far below the run's own length
//! only proves "not the whole run".

use super::audit::{
    audit, exit_line, is_server, launches_until_exit, now_tick, reach, wait_until, Case, Phase,
    Target, Watcher, TAG_VAR,
};
use super::scratch::{
    alive, assert_all_json, cgroups_of, children_of, finish, is_calib, launch_dirs_of, signal,
    start_run, wait_for_target, Scratch, LONG_MATRIX,
};
use super::{calib, probes_shared, program_ids_of, repo, rig_bin, still_loaded};
use rig::exit;
use serde_json::Value;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `rig run` interrupted or killed: exit, time taken, report, audit.
fn run_case(name: &str, t: Target, passes: &str, phase: Phase, sig: i32) -> (i32, Value) {
    let c = Case::new(name);
    let rig = c.run(t, passes);
    let rig_pid = rig.id();
    let w = Watcher::start(rig_pid, &c.tag);
    assert!(
        reach(phase, rig_pid, &c.tag, &w),
        "{name}: never reached {phase:?}"
    );
    let since = now_tick();
    let t0 = Instant::now();
    signal(rig_pid, sig);
    let after = launches_until_exit(rig_pid, &c.tag, since);
    let (code, stdout, stderr) = finish(rig);
    let took = t0.elapsed();
    let seen = w.finish();
    exit_line(name, code, took, sig);
    let waited = audit(name, rig_pid, &c.tag, &seen, &c.out());
    if sig == libc::SIGKILL {
        eprintln!(
            "chaos: {name}: nothing left {} ms after SIGKILL",
            (took + waited).as_millis()
        );
    }
    assert_eq!(
        after,
        Vec::<u32>::new(),
        "{name}: a target started after the signal"
    );
    if sig == libc::SIGKILL {
        return (code, Value::Null);
    }
    assert_eq!(code, exit::INTERRUPTED, "{name}: {stdout}\n{stderr}");
    // Far below the 30 s pass; the exact time is printed above.
    assert!(took < Duration::from_secs(10), "{name}: {took:?}");
    let r: Value = serde_json::from_slice(&std::fs::read(c.out().join("report.json")).unwrap())
        .unwrap_or_else(|e| panic!("{name}: report.json: {e}\n{stderr}"));
    assert_eq!(r["interrupted"], true, "{name}: {r:#}");
    (code, r)
}

/// SIGINT while rig waits for a slow target to become ready, SIGTERM while
/// probes are attached and the counted load runs, SIGINT while the target
/// ignores SIGTERM: exit 130 at once, report marked interrupted, no target
/// after the signal, nothing left.
#[test]
fn run_obeys_signals_in_launch_and_counted_phases_and_leaves_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    let (_, r) = run_case(
        "run-int-launch",
        Target::SlowStart,
        "clean,counted",
        Phase::Launch,
        libc::SIGINT,
    );
    assert_eq!(r["cases"][0]["status"], "skipped", "{r:#}");
    let (_, r) = run_case(
        "run-term-counted",
        Target::Plain,
        "counted",
        Phase::Counted,
        libc::SIGTERM,
    );
    assert!(r["cases"][0]["counted"].is_null(), "not data: {r:#}");
    run_case(
        "run-int-ignores-term",
        Target::IgnoresTerm,
        "counted",
        Phase::Counted,
        libc::SIGINT,
    );
}

/// SIGKILL of rig while it waits for readiness and while its probes are
/// attached; the target forks a detached grandchild: the watchdog and the
/// cgroup take all of it, the kernel drops the probes.
#[test]
fn sigkill_of_rig_in_launch_and_counted_phases_leaves_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    run_case(
        "kill-launch",
        Target::SlowStart,
        "clean",
        Phase::Launch,
        libc::SIGKILL,
    );
    run_case(
        "kill-counted-forks",
        Target::Forks,
        "counted",
        Phase::Counted,
        libc::SIGKILL,
    );
}

/// SIGHUP (a closed terminal or SSH session) during a clean pass and
/// during a counted pass is obeyed as SIGTERM is: exit 130, report.json
/// marked interrupted, the running case recorded as skipped "interrupted
/// by SIGHUP", no target after the signal, nothing left. It exited 129 at
/// once, with no report.
#[test]
fn run_treats_sighup_like_sigterm_and_leaves_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    for (name, passes, phase) in [
        ("run-hup-clean", "clean,counted", Phase::Clean),
        ("run-hup-counted", "counted", Phase::Counted),
    ] {
        let (_, r) = run_case(name, Target::Plain, passes, phase, libc::SIGHUP);
        let case = &r["cases"][0];
        assert_eq!(case["status"], "skipped", "{r:#}");
        assert!(
            case["reasons"]
                .to_string()
                .contains("interrupted by SIGHUP"),
            "{case:#}"
        );
    }
}

/// An arm spec: `base` (a spec of config/targets) with the tag in its env.
fn tagged_arm(c: &Case, file: &str, base: &str) -> PathBuf {
    c.s.write(
        file,
        &format!(
            "extends = \"{}\"\nenv = {{ {TAG_VAR} = \"{}\" }}\n",
            repo().join("config/targets").join(base).display(),
            c.tag
        ),
    )
}

/// Signal `rig` once it reaches `phase`: no target after the signal, the
/// audit; unless the signal is SIGKILL, also exit 130 and `report` (a file
/// in --out, not read after a SIGKILL; `None` for a command that writes
/// none when interrupted) marked interrupted, which is returned with
/// cases.jsonl's lines. A run, ab or gate report says so at its top, an
/// attach window (`rig attach`, `rig demo`) in how its window ended.
fn signal_in_phase(
    name: &str,
    c: &Case,
    rig: std::process::Child,
    phase: Phase,
    sig: i32,
    report: Option<&str>,
) -> (Value, Vec<Value>) {
    let rig_pid = rig.id();
    let w = Watcher::start(rig_pid, &c.tag);
    if !reach(phase, rig_pid, &c.tag, &w) {
        let (code, stdout, stderr) = finish(rig);
        w.finish();
        panic!("{name}: never reached {phase:?} (exit {code})\n{stdout}\n{stderr}");
    }
    let since = now_tick();
    let t0 = Instant::now();
    signal(rig_pid, sig);
    let after = launches_until_exit(rig_pid, &c.tag, since);
    let (code, stdout, stderr) = finish(rig);
    let took = t0.elapsed();
    let seen = w.finish();
    exit_line(name, code, took, sig);
    let waited = audit(name, rig_pid, &c.tag, &seen, &c.out());
    assert_eq!(
        after,
        Vec::<u32>::new(),
        "{name}: a target started after the signal"
    );
    if sig == libc::SIGKILL {
        eprintln!(
            "chaos: {name}: nothing left {} ms after SIGKILL",
            (took + waited).as_millis()
        );
        return (Value::Null, Vec::new());
    }
    assert_eq!(code, exit::INTERRUPTED, "{name}: {stdout}\n{stderr}");
    // Far below the 30 s pass; the exact time is printed above.
    assert!(took < Duration::from_secs(10), "{name}: {took:?}");
    let Some(report) = report else {
        return (Value::Null, Vec::new());
    };
    let r: Value = serde_json::from_slice(&std::fs::read(c.out().join(report)).unwrap())
        .unwrap_or_else(|e| panic!("{name}: {report}: {e}\n{stderr}"));
    assert!(
        r["interrupted"] == true || r["window"]["end"] == "interrupted",
        "{name}: {r:#}"
    );
    let cases = std::fs::read_to_string(c.out().join("cases.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (r, cases)
}

/// The last case rig wrote is the one the signal cut: skipped, saying so,
/// no data.
fn last_case_interrupted(name: &str, cases: &[Value]) {
    let last = cases
        .last()
        .unwrap_or_else(|| panic!("{name}: no case in cases.jsonl"));
    assert_eq!(last["status"], "skipped", "{name}: {last:#}");
    assert!(
        last["reasons"].to_string().contains("interrupted"),
        "{name}: {:#}",
        last["reasons"]
    );
    assert!(
        last["clean"].is_null() && last["counted"].is_null(),
        "{name}: not data: {last:#}"
    );
}

/// `rig ab` (SIGINT) and `rig gate` (SIGTERM) while probes are attached:
/// exit 130 at once, no new target (no arm B after the signal), what was
/// written is valid and says interrupted, nothing left.
#[test]
fn ab_and_gate_obey_signals_during_a_counted_pass_and_leave_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    // ab: arms A and B of the dynamic calibration server.
    let c = Case::new("ab-int");
    let a = tagged_arm(&c, "a.toml", "calib-dyn-a.toml");
    let b = tagged_arm(&c, "b.toml", "calib-dyn-b.toml");
    let ab = c.ab(&a, &b, "/work", "counted");
    let (_, cases) = signal_in_phase(
        "ab-int-counted",
        &c,
        ab,
        Phase::Counted,
        libc::SIGINT,
        Some("ab.json"),
    );
    last_case_interrupted("ab-int-counted", &cases);
    // gate: a baseline with no counters, its runs long.
    let c = Case::new("gate-term");
    let spec = c.spec(Target::Plain);
    let gate = c.gate(&spec, "/calib", 3, 2_000_000, "");
    let (_, cases) = signal_in_phase(
        "gate-term-counted",
        &c,
        gate,
        Phase::Counted,
        libc::SIGTERM,
        Some("gate.json"),
    );
    last_case_interrupted("gate-term-counted", &cases);
}

/// `rig ab` interrupted while it launches an arm (SIGINT; the first launch
/// is the output comparison's, before any case) and during a clean pass
/// (SIGTERM): exit 130 at once, `ab.json` says interrupted (with no run,
/// or with the cut case written as skipped), no target after the signal,
/// nothing left.
#[test]
fn ab_obeys_signals_in_its_launch_and_clean_phases_and_leaves_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    // Both arms one slow-starting spec: the signal lands before readiness,
    // so the arm's proof (which a shell arm would fail) is never reached.
    let c = Case::new("ab-int-launch");
    let slow = c.spec(Target::SlowStart);
    let ab = c.ab(&slow, &slow, "/calib", "clean");
    let (r, cases) = signal_in_phase(
        "ab-int-launch",
        &c,
        ab,
        Phase::Launch,
        libc::SIGINT,
        Some("ab.json"),
    );
    assert_eq!(r["order"], serde_json::json!([]), "no run began: {r:#}");
    assert_eq!(r["measured"], false, "{r:#}");
    assert!(cases.is_empty(), "{cases:#?}");

    let c = Case::new("ab-term-clean");
    let a = tagged_arm(&c, "a.toml", "calib-dyn-a.toml");
    let b = tagged_arm(&c, "b.toml", "calib-dyn-b.toml");
    let ab = c.ab(&a, &b, "/work", "clean");
    let (r, cases) = signal_in_phase(
        "ab-term-clean",
        &c,
        ab,
        Phase::Clean,
        libc::SIGTERM,
        Some("ab.json"),
    );
    assert_eq!(
        r["order"],
        serde_json::json!(["A1"]),
        "the signal cut A's first run: {r:#}"
    );
    last_case_interrupted("ab-term-clean", &cases);
}

/// `rig gate` interrupted while it launches its first target (SIGINT) and
/// during an instruction window under callgrind, after its counted runs
/// (SIGTERM; a gate has no clean pass, the window is its other measuring
/// phase): exit 130 at once, `gate.json` says interrupted, no target after
/// the signal, nothing left.
#[test]
fn gate_obeys_signals_in_its_launch_phase_and_instruction_window_and_leaves_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    let c = Case::new("gate-int-launch");
    let slow = c.spec(Target::SlowStart);
    let gate = c.gate(&slow, "/calib", 3, 2_000_000, "");
    let (r, cases) = signal_in_phase(
        "gate-int-launch",
        &c,
        gate,
        Phase::Launch,
        libc::SIGINT,
        Some("gate.json"),
    );
    assert!(r["passed"].is_null(), "no verdict: {r:#}");
    assert_eq!(cases.len(), 1, "only the cut case: {cases:#?}");
    last_case_interrupted("gate-int-launch", &cases);

    // Two counted runs of 50 000 requests (the determinism check needs two;
    // seconds each), then callgrind windows of as many (tens of seconds):
    // the signal lands in the first window.
    let c = Case::new("gate-term-window");
    let calib = tagged_arm(&c, "t.toml", "calib.toml");
    let gate = c.gate(
        &calib,
        "/calib",
        2,
        50_000,
        "instructions = \"callgrind\"\n",
    );
    let (r, cases) = signal_in_phase(
        "gate-term-window",
        &c,
        gate,
        Phase::Window,
        libc::SIGTERM,
        Some("gate.json"),
    );
    assert!(r["passed"].is_null(), "no verdict: {r:#}");
    assert_eq!(cases.len(), 2, "the counted runs: {cases:#?}");
    for case in &cases {
        assert_eq!(case["status"], "ok", "{:#}", case["reasons"]);
    }
}

/// SIGKILL of `rig ab` and `rig gate` while their probes are attached, of
/// `rig instructions` while its window runs under callgrind, and of `rig
/// probe-cost` while it measures a probed loop: the launched targets die
/// with rig (`PR_SET_PDEATHSIG`), the watchdogs remove their cgroups and
/// run directories (callgrind's profile among them), probe-cost's fixture
/// dies with rig too, and the kernel drops every BPF program and uprobe.
#[test]
fn sigkill_of_ab_gate_instructions_and_probe_cost_while_measuring_leaves_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    let c = Case::new("kill-ab-counted");
    let a = tagged_arm(&c, "a.toml", "calib-dyn-a.toml");
    let b = tagged_arm(&c, "b.toml", "calib-dyn-b.toml");
    let ab = c.ab(&a, &b, "/work", "counted");
    signal_in_phase(
        "kill-ab-counted",
        &c,
        ab,
        Phase::Counted,
        libc::SIGKILL,
        Some("ab.json"),
    );

    let c = Case::new("kill-gate-counted");
    let spec = c.spec(Target::Plain);
    let gate = c.gate(&spec, "/calib", 3, 2_000_000, "");
    signal_in_phase(
        "kill-gate-counted",
        &c,
        gate,
        Phase::Counted,
        libc::SIGKILL,
        Some("gate.json"),
    );

    // As signals::probe_cost_and_instructions_obey_sigterm_with_exit_130
    // runs it: a million requests under callgrind take minutes.
    let c = Case::new("kill-instructions-window");
    let calib = tagged_arm(&c, "t.toml", "calib.toml");
    let instructions = c.rig(&[
        "instructions",
        "--target",
        calib.to_str().unwrap(),
        "--path",
        "/calib",
        "--backend",
        "callgrind",
        "--requests",
        "1000000",
    ]);
    signal_in_phase(
        "kill-instructions-window",
        &c,
        instructions,
        Phase::Window,
        libc::SIGKILL,
        None,
    );

    // rig itself carries the tag, so its hitloop fixture does too.
    let c = Case::new("kill-probe-cost");
    let probe_cost = c.rig_tagged(&["probe-cost", "--iterations", "5000000", "--rounds", "20"]);
    signal_in_phase(
        "kill-probe-cost",
        &c,
        probe_cost,
        Phase::Counted,
        libc::SIGKILL,
        None,
    );
}

/// `rig demo` (its own calibration server) obeys SIGINT mid-window and
/// stops the server it started.
#[test]
fn demo_obeys_sigint_and_stops_its_server() {
    root_or_skip!();
    let _g = probes_shared();
    let rig = Command::new(rig_bin())
        .args(["demo", "--requests", "5000000", "--probes", "syscalls"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rig_pid = rig.id();
    assert!(wait_until(Duration::from_secs(60), || !program_ids_of(
        rig_pid
    )
    .is_empty()));
    std::thread::sleep(Duration::from_millis(1000));
    let server: Vec<u32> = children_of(rig_pid)
        .into_iter()
        .filter(|&p| is_server(p))
        .collect();
    let progs = program_ids_of(rig_pid);
    let t0 = Instant::now();
    signal(rig_pid, libc::SIGINT);
    let (code, stdout, stderr) = finish(rig);
    let took = t0.elapsed();
    eprintln!("demo: exit {code} after {took:?}");
    assert_eq!(code, exit::INTERRUPTED, "{stdout}\n{stderr}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    assert_eq!(server.len(), 1, "demo's server");
    assert!(wait_until(Duration::from_secs(5), || !alive(server[0])
        && still_loaded(&progs).is_empty()));
}

/// `rig demo` SIGTERMed and SIGKILLed while its probes count the driven
/// load: its calibration server (which inherits rig's tag) dies with it,
/// by rig's clean-up after SIGTERM and by the kernel (`PR_SET_PDEATHSIG`)
/// after SIGKILL; the window written under SIGTERM says it was
/// interrupted; nothing is left.
#[test]
fn sigterm_and_sigkill_of_demo_leave_nothing_of_its_server() {
    root_or_skip!();
    let _g = probes_shared();
    for (name, sig) in [("demo-term", libc::SIGTERM), ("demo-kill", libc::SIGKILL)] {
        let c = Case::new(name);
        std::fs::create_dir_all(c.out()).unwrap();
        let json = c.out().join("demo.json");
        let demo = c.rig_tagged(&[
            "demo",
            "--requests",
            "5000000",
            "--probes",
            "syscalls",
            "--json",
            json.to_str().unwrap(),
        ]);
        signal_in_phase(name, &c, demo, Phase::Counted, sig, Some("demo.json"));
    }
}

/// `rig attach` on a server the test started: SIGTERM in a duration window
/// and in a `--drive` window, SIGKILL during `--drive`: exit 130 and the
/// `--json` window marked interrupted (after SIGTERM), no BPF program or
/// uprobe left, and the server, which attach did not start, still runs.
#[test]
fn attach_obeys_sigterm_in_both_windows_and_sigkill_leaves_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    let target = super::calib(&[]);
    let pid = target.pid().to_string();
    let url = format!("http://127.0.0.1:{}/calib", target.port);
    let cases: [(&str, i32, &[&str]); 3] = [
        (
            "attach-term-duration",
            libc::SIGTERM,
            &["--duration", "60s"],
        ),
        (
            "attach-term-drive",
            libc::SIGTERM,
            &["--drive", &url, "--requests", "5000000"],
        ),
        (
            "attach-kill-drive",
            libc::SIGKILL,
            &["--drive", &url, "--requests", "5000000"],
        ),
    ];
    for (name, sig, window) in cases {
        let c = Case::new(name);
        std::fs::create_dir_all(c.out()).unwrap();
        let json = c.out().join("attach.json");
        let mut args = vec!["attach", "--pid", &pid, "--probes", "syscalls"];
        args.extend_from_slice(window);
        args.extend_from_slice(&["--json", json.to_str().unwrap()]);
        let attach = c.rig_tagged(&args);
        signal_in_phase(name, &c, attach, Phase::Counted, sig, Some("attach.json"));
        assert!(
            alive(target.pid()),
            "{name}: attach stopped a server it did not start"
        );
    }
}

/// `rig instructions` SIGINTed while its window runs under callgrind, `rig
/// probe-cost` while it measures a probed loop: exit 130, no target or
/// fixture after the signal, nothing left (neither writes a report when
/// interrupted).
#[test]
fn instructions_and_probe_cost_obey_sigint_and_leave_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    let c = Case::new("instructions-int-window");
    let calib = tagged_arm(&c, "t.toml", "calib.toml");
    let instructions = c.rig(&[
        "instructions",
        "--target",
        calib.to_str().unwrap(),
        "--path",
        "/calib",
        "--backend",
        "callgrind",
        "--requests",
        "1000000",
    ]);
    signal_in_phase(
        "instructions-int-window",
        &c,
        instructions,
        Phase::Window,
        libc::SIGINT,
        None,
    );

    let c = Case::new("probe-cost-int");
    let probe_cost = c.rig_tagged(&["probe-cost", "--iterations", "5000000", "--rounds", "20"]);
    signal_in_phase(
        "probe-cost-int",
        &c,
        probe_cost,
        Phase::Counted,
        libc::SIGINT,
        None,
    );
}

/// SIGKILL of `rig gate` while it waits for its first target to become
/// ready, and of `rig ab` during a clean pass (no probes: only the launch
/// protections stand): the targets die with rig, the watchdogs remove
/// their cgroups and run directories, what was written is valid JSON.
#[test]
fn sigkill_of_gate_in_its_launch_and_of_ab_in_its_clean_pass_leaves_nothing() {
    root_or_skip!();
    let _g = probes_shared();
    let c = Case::new("kill-gate-launch");
    let slow = c.spec(Target::SlowStart);
    let gate = c.gate(&slow, "/calib", 3, 2_000_000, "");
    signal_in_phase(
        "kill-gate-launch",
        &c,
        gate,
        Phase::Launch,
        libc::SIGKILL,
        None,
    );

    let c = Case::new("kill-ab-clean");
    let a = tagged_arm(&c, "a.toml", "calib-dyn-a.toml");
    let b = tagged_arm(&c, "b.toml", "calib-dyn-b.toml");
    let ab = c.ab(&a, &b, "/work", "clean");
    signal_in_phase("kill-ab-clean", &c, ab, Phase::Clean, libc::SIGKILL, None);
}

/// Not a check but a measurement, run by hand (the README's table of exit
/// times comes from it): each command SIGINTed in its measuring phase, 3
/// rounds, each printing `chaos: m-<command>: exit 130 <ms> ms after
/// SIGINT`. `RIG_MEASURE_BIN` names another rig binary (a release build);
/// `RIG_MEASURE_ONLY` a comma-separated subset of the commands.
#[test]
#[ignore]
fn measure_exit_times_after_sigint_in_each_commands_measuring_phase() {
    root_or_skip!();
    let _g = probes_shared();
    let only = std::env::var("RIG_MEASURE_ONLY").unwrap_or_default();
    let want = |n: &str| only.is_empty() || only.split(',').any(|o| o == n);
    let case = |name: &str| {
        let mut c = Case::new(name);
        if let Ok(b) = std::env::var("RIG_MEASURE_BIN") {
            c.bin = PathBuf::from(b);
        }
        c
    };
    let int = libc::SIGINT;
    for round in 0..3 {
        if want("attach") {
            let target = super::calib(&[]);
            let url = format!("http://127.0.0.1:{}/calib", target.port);
            let pid = target.pid().to_string();
            let c = case(&format!("m-attach-{round}"));
            let rig = c.rig_tagged(&[
                "attach",
                "--pid",
                &pid,
                "--probes",
                "syscalls",
                "--drive",
                &url,
                "--requests",
                "50000000",
            ]);
            signal_in_phase("m-attach", &c, rig, Phase::Counted, int, None);
        }
        if want("run-clean") {
            let c = case(&format!("m-run-clean-{round}"));
            let rig = c.run(Target::Plain, "clean,counted");
            signal_in_phase(
                "m-run-clean",
                &c,
                rig,
                Phase::Clean,
                int,
                Some("report.json"),
            );
        }
        if want("run-counted") {
            let c = case(&format!("m-run-counted-{round}"));
            let rig = c.run(Target::Plain, "counted");
            let (name, r) = ("m-run-counted", Some("report.json"));
            signal_in_phase(name, &c, rig, Phase::Counted, int, r);
        }
        if want("ab") {
            let c = case(&format!("m-ab-{round}"));
            let a = tagged_arm(&c, "a.toml", "calib-dyn-a.toml");
            let b = tagged_arm(&c, "b.toml", "calib-dyn-b.toml");
            let ab = c.ab(&a, &b, "/work", "counted");
            signal_in_phase("m-ab", &c, ab, Phase::Counted, int, Some("ab.json"));
        }
        if want("gate") {
            let c = case(&format!("m-gate-{round}"));
            let spec = c.spec(Target::Plain);
            let gate = c.gate(&spec, "/calib", 3, 2_000_000, "");
            signal_in_phase("m-gate", &c, gate, Phase::Counted, int, Some("gate.json"));
        }
        if want("instructions") {
            let c = case(&format!("m-instructions-{round}"));
            let calib = tagged_arm(&c, "t.toml", "calib.toml");
            let rig = c.rig(&[
                "instructions",
                "--target",
                calib.to_str().unwrap(),
                "--path",
                "/calib",
                "--backend",
                "callgrind",
                "--requests",
                "1000000",
            ]);
            signal_in_phase("m-instructions", &c, rig, Phase::Window, int, None);
        }
        if want("probe-cost") {
            let c = case(&format!("m-probe-cost-{round}"));
            let rig = c.rig_tagged(&["probe-cost", "--iterations", "5000000", "--rounds", "20"]);
            signal_in_phase("m-probe-cost", &c, rig, Phase::Counted, int, None);
        }
        if want("demo") {
            let c = case(&format!("m-demo-{round}"));
            let rig = c.rig_tagged(&["demo", "--requests", "50000000", "--probes", "syscalls"]);
            signal_in_phase("m-demo", &c, rig, Phase::Counted, int, None);
        }
    }
}

#[test]
fn sigkill_of_rig_run_leaves_no_target_running() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("sigkill");
    let rig = start_run(&s, LONG_MATRIX, "clean");
    let rig_pid = rig.id();
    let target = wait_for_target(rig_pid, Duration::from_secs(20));
    std::thread::sleep(Duration::from_millis(500));
    signal(rig_pid, libc::SIGKILL);
    let _ = finish(rig);
    let t0 = Instant::now();
    while alive(target) && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let left = alive(target);
    if left {
        // The target of the rig this test started: do not leave it running.
        signal(target, libc::SIGKILL);
    }
    eprintln!("target gone {:?} after SIGKILL of rig", t0.elapsed());
    assert!(
        !left,
        "target {target} still running after rig was SIGKILLed"
    );
    // Its cgroup and run directory go with it (a watchdog rig left).
    let t0 = Instant::now();
    while !(cgroups_of(rig_pid).is_empty() && launch_dirs_of(rig_pid).is_empty())
        && t0.elapsed() < Duration::from_secs(5)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(cgroups_of(rig_pid), Vec::<PathBuf>::new());
    assert_eq!(launch_dirs_of(rig_pid), Vec::<PathBuf>::new());
    assert_all_json(&s.0.join("out"));
}

/// SIGINT/SIGTERM to `rig run` while its clean pass runs: exit 130 long
/// before the 30 s pass would end, the case is marked interrupted (not "the
/// target exited"), no counted pass (no new target) follows.
#[test]
fn a_signal_during_runs_clean_pass_stops_at_once_and_starts_no_new_target() {
    root_or_skip!();
    let _g = probes_shared();
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let s = Scratch::new(&format!("sig{sig}"));
        let rig = start_run(&s, LONG_MATRIX, "clean,counted");
        let rig_pid = rig.id();
        let first = wait_for_target(rig_pid, Duration::from_secs(20));
        std::thread::sleep(Duration::from_millis(800));
        // Watch for any further target while rig stops.
        let watch = std::thread::spawn(move || {
            let mut seen = vec![first];
            while alive(rig_pid) {
                for c in children_of(rig_pid) {
                    if is_calib(c) && !seen.contains(&c) {
                        seen.push(c);
                    }
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            seen
        });
        let t0 = Instant::now();
        signal(rig_pid, sig);
        let (code, stdout, stderr) = finish(rig);
        let took = t0.elapsed();
        let seen = watch.join().unwrap();
        eprintln!("signal {sig}: rig run exited {code} after {took:?}");
        assert_eq!(code, exit::INTERRUPTED, "{stdout}\n{stderr}");
        assert!(
            took < Duration::from_secs(10),
            "not the whole 30 s pass: {took:?}"
        );
        assert_eq!(seen, vec![first], "no target started after the signal");
        let out = s.0.join("out");
        assert_all_json(&out);
        let r: Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        assert_eq!(r["interrupted"], true);
        let case = &r["cases"][0];
        assert_eq!(case["status"], "skipped", "{case:#}");
        let reasons = case["reasons"].to_string();
        assert!(reasons.contains("interrupted"), "{reasons}");
        assert!(
            !reasons.contains("exited during"),
            "rig killed it: {reasons}"
        );
        assert!(
            case["counted"].is_null(),
            "no counted pass after the signal: {case:#}"
        );
        assert!(!alive(first));
        assert_eq!(cgroups_of(rig_pid), Vec::<PathBuf>::new());
    }
}

/// `rig attach --drive` with a window of 500 000 requests obeys SIGINT.
#[test]
fn sigint_ends_a_driven_attach_window_at_once_with_exit_130() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("attach-sigint");
    let target = calib(&[]);
    let json = s.0.join("a.json");
    let rig = Command::new(rig_bin())
        .args([
            "attach",
            "--pid",
            &target.pid().to_string(),
            "--probes",
            "syscalls",
        ])
        .arg("--drive")
        .arg(format!("http://127.0.0.1:{}/calib", target.port))
        .args(["--requests", "500000", "--json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The window is open once rig holds its probes and the target counts
    // requests; give it time to get there.
    let t0 = Instant::now();
    while super::program_ids_of(rig.id()).is_empty() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    signal(rig.id(), libc::SIGINT);
    let (code, stdout, err) = finish(rig);
    let took = t0.elapsed();
    eprintln!("rig attach --drive exited {code} {took:?} after SIGINT");
    assert_eq!(code, exit::INTERRUPTED, "{stdout}\n{err}");
    assert!(took < Duration::from_secs(10), "{took:?}");
    let a: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(a["window"]["end"], "interrupted", "{:#}", a["window"]);
    assert!(
        alive(target.pid()),
        "attach never stops a process it did not start"
    );
}

/// `rig probe-cost` and `rig instructions` (no flag of their own before)
/// obey SIGTERM too.
#[test]
fn probe_cost_and_instructions_obey_sigterm_with_exit_130() {
    root_or_skip!();
    let _g = probes_shared();
    let runs: [(&str, Vec<String>); 2] = [
        (
            "probe-cost",
            vec![
                "probe-cost".into(),
                "--iterations".into(),
                "5000000".into(),
                "--rounds".into(),
                "20".into(),
            ],
        ),
        (
            "instructions",
            vec![
                "instructions".into(),
                "--target".into(),
                repo()
                    .join("config/targets/calib.toml")
                    .display()
                    .to_string(),
                "--path".into(),
                "/calib".into(),
                "--backend".into(),
                "callgrind".into(),
                "--requests".into(),
                "1000000".into(),
            ],
        ),
    ];
    for (name, args) in runs {
        let mut rig = Command::new(rig_bin())
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Both take minutes with these values; let them get going.
        std::thread::sleep(Duration::from_millis(3000));
        assert!(rig.try_wait().unwrap().is_none(), "{name} still runs");
        let t0 = Instant::now();
        signal(rig.id(), libc::SIGTERM);
        let (code, stdout, stderr) = finish(rig);
        let took = t0.elapsed();
        eprintln!("{name}: exited {code} {took:?} after SIGTERM");
        assert_eq!(code, exit::INTERRUPTED, "{name}: {stdout}\n{stderr}");
        assert!(took < Duration::from_secs(10), "{name}: {took:?}");
    }
}

/// Not a check but a measurement, run by hand (the README's SIGINT time of
/// a 2000-suite run comes from it): `rig run` of 2000 one-case suites
/// (clean passes of 50 ms), SIGINT once the first case's report is
/// written, 5 rounds, each printing `trial: 2000 suites: exit <code> <ms>
/// ms after SIGINT`, then the median. `RIG_MEASURE_BIN` names another rig
/// binary (a release build).
#[test]
#[ignore]
fn measure_exit_times_after_sigint_of_a_2000_suite_run() {
    root_or_skip!();
    let _g = probes_shared();
    let bin = std::env::var("RIG_MEASURE_BIN").unwrap_or_else(|_| rig_bin().to_string());
    let s = Scratch::new("trial-measure");
    let suites: String = (0..2000)
        .map(|i| {
            format!(
                "[[suite]]\nname = \"s{i}\"\nkind = \"http\"\nprotocols = [\"h1\"]\n\
                 paths = [\"/calib\"]\ntopologies = [\"1\"]\n\n"
            )
        })
        .collect();
    let m = s.write(
        "m.toml",
        &format!("[defaults]\nwarmup_ms = 50\nduration_ms = 50\n{suites}"),
    );
    let mut times = Vec::new();
    for round in 0..5 {
        let out = s.0.join(format!("out-{round}"));
        let child = Command::new(&bin)
            .args(["run", "--target"])
            .arg(repo().join("config/targets/calib.toml"))
            .args([
                "--matrix",
                m.to_str().unwrap(),
                "--passes",
                "clean",
                "--out",
            ])
            .arg(&out)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let t0 = Instant::now();
        while !out.join("report.json").exists() && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(300));
        let t0 = Instant::now();
        signal(child.id(), libc::SIGINT);
        let (code, _, _) = finish(child);
        let ms = t0.elapsed().as_millis();
        eprintln!("trial: 2000 suites: exit {code} {ms} ms after SIGINT");
        times.push(ms);
    }
    times.sort_unstable();
    eprintln!(
        "trial: 2000 suites: median {} ms (min {}, max {})",
        times[2], times[0], times[4]
    );
}
