//! After `rig attach` ends — normally, on Ctrl-C, or when the target dies —
//! no BPF program or perf event of rig's remains. These tests hold the probe
//! lock exclusively, so any `rig_*` program they see would be a leftover.

use super::audit::{audit, is_server, launched, reach, Case, Phase, Target, Watcher};
use super::scratch::signal;
use super::{calib, probes_exclusive, program_ids_of, rig_bin, rig_programs, still_loaded};
use rig::exit;
use serde_json::Value;
use std::io::{BufRead, BufReader, Read};
use std::process::{ChildStderr, Command, Stdio};
use std::time::{Duration, Instant};

/// A rig attach session in a child process, its stderr read line by line.
struct Rig {
    child: std::process::Child,
    stderr: BufReader<ChildStderr>,
    seen: String,
}

/// Wait until every probe is attached and the window is open.
/// Returns the ids of the BPF programs this rig holds.
fn wait_open(rig: &mut Rig) -> Vec<u32> {
    loop {
        let mut line = String::new();
        let n = rig.stderr.read_line(&mut line).unwrap();
        assert!(n > 0, "rig ended before opening its window: {}", rig.seen);
        rig.seen.push_str(&line);
        if line.contains("window open") {
            assert!(
                !rig_programs().is_empty(),
                "probes are loaded while the window is open"
            );
            let ids = program_ids_of(rig.child.id());
            assert!(ids.len() >= 6, "rig holds its programs: {ids:?}");
            return ids;
        }
    }
}

/// Program release after the last fd closes is asynchronous (RCU): allow
/// it a moment, then insist.
fn assert_none_left(ids: &[u32]) {
    let t0 = Instant::now();
    while !still_loaded(ids).is_empty() && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        still_loaded(ids),
        Vec::<u32>::new(),
        "rig programs left loaded"
    );
}

fn finish(mut rig: Rig) -> (i32, String, String) {
    let (mut out, mut err) = (String::new(), rig.seen);
    rig.child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    rig.stderr.read_to_string(&mut err).unwrap();
    let status = rig.child.wait().unwrap();
    (status.code().unwrap_or(-1), out, err)
}

fn start_rig(pid: u32, duration: &str) -> Rig {
    let mut child = Command::new(rig_bin())
        .args([
            "attach",
            "--pid",
            &pid.to_string(),
            "--probes",
            "all",
            "--duration",
            duration,
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = BufReader::new(child.stderr.take().unwrap());
    Rig {
        child,
        stderr,
        seen: String::new(),
    }
}

#[test]
fn leaves_no_probe_behind_after_a_normal_window() {
    root_or_skip!();
    let _g = probes_exclusive();
    let target = calib(&[]);
    let mut rig = start_rig(target.pid(), "1s");
    let ids = wait_open(&mut rig);
    let (code, out, err) = finish(rig);
    assert_eq!(code, exit::OK, "{out}\n{err}");
    assert!(out.contains("syscalls"), "{out}");
    assert_none_left(&ids);
}

#[test]
fn leaves_no_probe_behind_after_ctrl_c() {
    root_or_skip!();
    let _g = probes_exclusive();
    let target = calib(&[]);
    let mut rig = start_rig(target.pid(), "60s");
    let ids = wait_open(&mut rig);
    // SAFETY: signalling the rig process this test started.
    unsafe { libc::kill(rig.child.id() as i32, libc::SIGINT) };
    let (code, out, err) = finish(rig);
    // The partial window is printed, and the exit code says interrupted.
    assert_eq!(code, exit::INTERRUPTED, "{out}\n{err}");
    assert!(
        out.contains("INTERRUPTED"),
        "the partial window is reported: {out}"
    );
    assert_none_left(&ids);
}

#[test]
fn leaves_no_probe_behind_when_the_target_dies_mid_window() {
    root_or_skip!();
    let _g = probes_exclusive();
    let target = calib(&[]);
    let mut rig = start_rig(target.pid(), "60s");
    let ids = wait_open(&mut rig);
    drop(target); // kills and reaps the calibration server
    let (code, out, err) = finish(rig);
    // A window whose target died is a failed window.
    assert_eq!(code, exit::CASE_FAILED, "{out}\n{err}");
    assert!(out.contains("TARGET EXITED"), "{out}");
    assert_none_left(&ids);
}

#[test]
fn leaves_no_probe_behind_when_rig_is_killed() {
    root_or_skip!();
    let _g = probes_exclusive();
    let target = calib(&[]);
    let mut rig = start_rig(target.pid(), "60s");
    let ids = wait_open(&mut rig);
    rig.child.kill().unwrap(); // SIGKILL: no destructor runs; the kernel cleans up
    rig.child.wait().unwrap();
    assert_none_left(&ids);
}

/// A target that forks a detached grandchild: a normal run removes it
/// with the target (its cgroup), and the run still succeeds.
#[test]
fn a_forking_target_leaves_no_grandchild_after_a_normal_run() {
    root_or_skip!();
    let c = Case::new("forks-normal");
    let spec = c.spec(Target::Forks);
    let m = c.s.write(
        "m.toml",
        "[defaults]\nwarmup_ms = 50\nduration_ms = 200\ncounted_requests = 200\n\
         [[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/calib\"]\n\
         topologies = [\"1\"]\n",
    );
    let rig = c.rig(&[
        "run",
        "--target",
        spec.to_str().unwrap(),
        "--matrix",
        m.to_str().unwrap(),
        "--out",
        c.out().to_str().unwrap(),
        "--passes",
        "clean",
    ]);
    let rig_pid = rig.id();
    let w = Watcher::start(rig_pid, &c.tag);
    let (code, stdout, stderr) = super::scratch::finish(rig);
    let seen = w.finish();
    audit("forks-normal", rig_pid, &c.tag, &seen, &c.out());
    assert_eq!(code, exit::OK, "{stdout}\n{stderr}");
    // The watcher saw the grandchild (sh became the server; sleep forked).
    assert!(seen.tagged.len() >= 2, "{seen:?}");
}

/// The target killed while rig waits for it to become ready: that case
/// fails saying so (exit 6), rig goes on, nothing is left (the shell's
/// orphaned `sleep` included).
#[test]
fn a_target_killed_during_its_launch_fails_the_case_and_leaves_nothing() {
    root_or_skip!();
    let c = Case::new("target-killed-launch");
    let spec = c.spec(Target::NeverReady);
    let m = c.s.write(
        "m.toml",
        "[defaults]\nwarmup_ms = 50\nduration_ms = 200\n\
         [[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/calib\"]\n\
         topologies = [\"1\"]\n",
    );
    let rig = c.rig(&[
        "run",
        "--target",
        spec.to_str().unwrap(),
        "--matrix",
        m.to_str().unwrap(),
        "--out",
        c.out().to_str().unwrap(),
        "--passes",
        "clean",
    ]);
    let rig_pid = rig.id();
    let w = Watcher::start(rig_pid, &c.tag);
    assert!(reach(Phase::Launch, rig_pid, &c.tag, &w));
    let shells = launched(rig_pid, &c.tag, 0);
    assert!(
        !shells.is_empty() && !shells.iter().any(|&p| is_server(p)),
        "the launch phase was over before the kill: {shells:?}"
    );
    for p in shells {
        signal(p, libc::SIGKILL);
    }
    let (code, stdout, stderr) = super::scratch::finish(rig);
    let seen = w.finish();
    audit("target-killed-launch", rig_pid, &c.tag, &seen, &c.out());
    assert_eq!(code, exit::CASE_FAILED, "{stdout}\n{stderr}");
    let line = std::fs::read_to_string(c.out().join("cases.jsonl")).unwrap();
    let case: Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    assert_eq!(case["status"], "failed", "{case:#}");
    assert!(
        case["reasons"].to_string().contains("not ready")
            && case["reasons"].to_string().contains("killed by signal 9"),
        "{:#}",
        case["reasons"]
    );
}
