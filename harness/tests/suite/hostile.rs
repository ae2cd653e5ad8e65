//! A hostile-but-fair user and an impatient one: planted directories and
//! symlinks never redirect a write rig makes as root, an output path is
//! checked before any work, SIGINT/SIGTERM end every command at once (exit
//! 130, report marked interrupted, no new target), and a SIGKILLed rig
//! leaves no target running. Times to exit are printed, never asserted
//! tightly: a bound far below the run's own length only proves "not the
//! whole run".

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rig::exit;
use rig::launch::spec::TargetSpec;
use rig::launch::start::LaunchOptions;
use serde_json::Value;

use super::chaos::{all_json_valid, tagged, TAG_VAR};
use super::{calib, probes_shared, repo, rig_bin, spec};

/// A scratch directory for one test, removed when dropped.
pub(super) struct Scratch(pub(super) PathBuf);

impl Scratch {
    pub(super) fn new(name: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("rig-hostile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
    pub(super) fn write(&self, name: &str, text: &str) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub(super) fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rsplit_once(')')
            .is_some_and(|(_, r)| !r.trim_start().starts_with('Z'))
    })
}

/// Live processes whose parent is `pid`.
pub(super) fn children_of(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{p}/stat")) else {
            continue;
        };
        let mut rest = stat.rsplit_once(')').map(|(_, r)| r.split_whitespace());
        let state = rest.as_mut().and_then(|r| r.next());
        let ppid = rest
            .as_mut()
            .and_then(|r| r.next())
            .and_then(|s| s.parse().ok());
        if ppid == Some(pid) && state != Some("Z") {
            out.push(p);
        }
    }
    out
}

pub(super) fn is_calib(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| c.contains("calib_server"))
}

/// Wait until `rig` has a calibration-server child; return its pid.
fn wait_for_target(rig: u32, within: Duration) -> u32 {
    let t0 = Instant::now();
    loop {
        if let Some(t) = children_of(rig).into_iter().find(|&c| is_calib(c)) {
            return t;
        }
        assert!(t0.elapsed() < within, "rig never launched its target");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Every cgroup directory whose name carries rig pid `rig_pid`.
pub(super) fn cgroups_of(rig_pid: u32) -> Vec<PathBuf> {
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

/// `rig-launch-<rig_pid>-*` directories in the temp dir.
pub(super) fn launch_dirs_of(rig_pid: u32) -> Vec<PathBuf> {
    let tag = format!("rig-launch-{rig_pid}-");
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&tag))
        .map(|e| e.path())
        .collect()
}

/// Every file rig wrote into `out` parses as JSON (JSON lines for .jsonl).
pub(super) fn assert_all_json(out: &Path) {
    for e in std::fs::read_dir(out).unwrap().flatten() {
        let p = e.path();
        let text = std::fs::read_to_string(&p).unwrap();
        match p.extension().and_then(|x| x.to_str()) {
            Some("json") => {
                serde_json::from_str::<Value>(&text)
                    .unwrap_or_else(|e| panic!("{} is not JSON: {e}", p.display()));
            }
            Some("jsonl") => {
                for l in text.lines() {
                    serde_json::from_str::<Value>(l)
                        .unwrap_or_else(|e| panic!("{}: a line is not JSON: {e}", p.display()));
                }
            }
            _ => {}
        }
    }
}

pub(super) fn signal(pid: u32, sig: i32) {
    // SAFETY: plain syscall; callers only signal the rig they started.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Wait for the rig this test started, for at most a minute: a rig that
/// ignores the signal is killed (with its targets) and reported as -1, so
/// the test fails instead of hanging. Its output is read by threads: a
/// process that outlived rig still holding its stdout or stderr (a leak
/// the caller's audit reports) must not hang the test either.
pub(super) fn finish(mut child: std::process::Child) -> (i32, String, String) {
    let stdout = read_to_end(child.stdout.take());
    let stderr = read_to_end(child.stderr.take());
    let t0 = Instant::now();
    let mut note = "";
    while child.try_wait().unwrap().is_none() {
        if t0.elapsed() > Duration::from_secs(60) {
            for c in children_of(child.id()) {
                signal(c, libc::SIGKILL);
            }
            let _ = child.kill();
            note = "(killed after 60 s) ";
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let status = child.wait().unwrap();
    let code = match note {
        "" => status.code().unwrap_or(-1),
        _ => -1,
    };
    let held = "(still held open after rig exited)";
    let wait = Duration::from_secs(5);
    (
        code,
        stdout.recv_timeout(wait).unwrap_or_else(|_| held.into()),
        format!(
            "{note}{}",
            stderr.recv_timeout(wait).unwrap_or_else(|_| held.into())
        ),
    )
}

/// All of `pipe`, sent when it closes.
fn read_to_end(
    pipe: Option<impl std::io::Read + Send + 'static>,
) -> std::sync::mpsc::Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    rx
}

// ---------------------------------------------------------------------------
// Defects 1 and 2: writes as root through a planted path.

#[test]
fn a_planted_launch_directory_with_a_symlink_cannot_redirect_a_rendered_file() {
    root_or_skip!();
    let s = Scratch::new("planted");
    let victim = s.write("victim", "precious\n");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    s.write("x.conf.in", "listen {port}\n");
    let spec = TargetSpec::from_text(
        &s.0.join("planted.toml"),
        "name = 'planted'\nargv = ['{calib_server}', '--port', '{port}']\nport = 'argv'\n\
         ready = { stdout = 'READY' }\n[[files]]\ntemplate = 'x.conf.in'\npath = 'x.conf'\n",
    )
    .unwrap();
    // Another user (nobody) makes every launch directory name this process
    // could use next, each with a link to the root-only file.
    let me = std::process::id();
    let mut planted = Vec::new();
    for n in 0..1500 {
        let d = std::env::temp_dir().join(format!("rig-launch-{me}-{n}"));
        if std::fs::create_dir(&d).is_ok() {
            std::os::unix::fs::symlink(&victim, d.join("x.conf")).unwrap();
            std::os::unix::fs::lchown(d.join("x.conf"), Some(65534), Some(65534)).unwrap();
            std::os::unix::fs::chown(&d, Some(65534), Some(65534)).unwrap();
            planted.push(d);
        }
    }
    let launched = rig::launch::launch(&spec, &LaunchOptions::default());
    let port = launched.as_ref().map(|l| l.port).map_err(|e| e.to_string());
    let fresh: Vec<PathBuf> = launch_dirs_of(me)
        .into_iter()
        .filter(|d| !planted.contains(d))
        .filter(|d| {
            std::fs::read_to_string(d.join("x.conf"))
                .is_ok_and(|t| port.as_ref().is_ok_and(|p| t == format!("listen {p}\n")))
        })
        .collect();
    let modes: Vec<(u32, u32)> = fresh
        .iter()
        .map(|d| {
            let m = std::fs::symlink_metadata(d).unwrap();
            (m.mode() & 0o7777, m.uid())
        })
        .collect();
    drop(launched);
    let victim_now = std::fs::read_to_string(&victim).unwrap();
    for d in &planted {
        let _ = std::fs::remove_dir_all(d);
    }
    assert_eq!(
        victim_now, "precious\n",
        "rig wrote through a symlink planted in a predictable launch directory"
    );
    port.expect("the target launches in a fresh directory");
    assert_eq!(fresh.len(), 1, "one fresh private run dir: {fresh:?}");
    assert_eq!(modes, vec![(0o700, 0)], "mode 0700, owned by root");
}

#[test]
fn attach_json_onto_an_existing_file_or_a_symlink_is_refused_before_the_window() {
    root_or_skip!();
    let s = Scratch::new("json");
    let victim = s.write("root-only", "precious\n");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    let link = s.0.join("link.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let dangling = s.0.join("dangling.json");
    std::os::unix::fs::symlink(s.0.join("made-through-link"), &dangling).unwrap();
    let target = calib(&[]);
    for (path, why) in [
        (&victim, "already exists"),
        (&link, "is a symlink"),
        (&dangling, "is a symlink"),
    ] {
        let t0 = Instant::now();
        let out = Command::new(rig_bin())
            .args(["attach", "--pid", &target.pid().to_string()])
            .args(["--probes", "syscalls", "--duration", "3s", "--json"])
            .arg(path)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!(
            "--json {}: refused after {:?}",
            path.display(),
            t0.elapsed()
        );
        assert_eq!(out.status.code(), Some(exit::USAGE), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(
            !err.contains("window open"),
            "refused before the window: {err}"
        );
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    assert!(!s.0.join("made-through-link").exists());
}

// ---------------------------------------------------------------------------
// Defect 4: SIGKILL of rig leaves no target.

const LONG_MATRIX: &str = r#"
[defaults]
warmup_ms = 100
duration_ms = 30000
counted_requests = 2000000
[[suite]]
name = "long"
kind = "http"
protocols = ["h1"]
paths = ["/calib", "/noop"]
topologies = ["1"]
"#;

fn start_run(s: &Scratch, matrix: &str, passes: &str) -> std::process::Child {
    let m = s.write("m.toml", matrix);
    Command::new(rig_bin())
        .args(["run", "--target"])
        .arg(repo().join("config/targets/calib.toml"))
        .arg("--matrix")
        .arg(&m)
        .arg("--out")
        .arg(s.0.join("out"))
        .args(["--passes", passes, "--probes", "syscalls"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
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

// ---------------------------------------------------------------------------
// Defect 3: signals obeyed at once.

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

/// The generator stops when its target is gone instead of sending the
/// rest of a 2 000 000-request counted pass at a closed port: the run goes
/// on to its next case. (How much the generator still schedules after the
/// target's last answer is pinned on its own ledger in
/// `load::an_open_loop_stops_scheduling_within_100_ms_of_schedule_when_its_target_is_gone`.)
#[test]
fn the_generator_stops_when_its_target_is_gone() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("gone");
    let rig = start_run(&s, LONG_MATRIX, "counted");
    let rig_pid = rig.id();
    let target = wait_for_target(rig_pid, Duration::from_secs(20));
    // Past launch and warm-up: the counted load is running.
    let t0 = Instant::now();
    while super::program_ids_of(rig_pid).is_empty() && t0.elapsed() < Duration::from_secs(30) {
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(1500));
    let t0 = Instant::now();
    signal(target, libc::SIGKILL);
    // The first case ends; the second launches a new target.
    let second = loop {
        if let Some(t) = children_of(rig_pid)
            .into_iter()
            .find(|&c| c != target && is_calib(c))
        {
            break Some(t);
        }
        if t0.elapsed() > Duration::from_secs(60) || !alive(rig_pid) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let took = t0.elapsed();
    eprintln!("next case started {took:?} after its target was killed");
    signal(rig_pid, libc::SIGINT);
    let (code, stdout, stderr) = finish(rig);
    assert!(second.is_some(), "{code}\n{stdout}\n{stderr}");
    assert!(
        took < Duration::from_secs(10),
        "not the rest of the pass: {took:?}"
    );
    let c: Value = serde_json::from_str(
        std::fs::read_to_string(s.0.join("out/cases.jsonl"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(c["status"], "failed", "{c:#}");
    assert!(
        c["reasons"].to_string().contains("exited"),
        "{:#}",
        c["reasons"]
    );
}

/// A process that makes exactly one syscall, `clock_nanosleep` to the next
/// millisecond of the monotonic clock's grid (absolute: a late wake-up
/// returns at once for a tick already past, so every millisecond is one
/// call however loaded the machine is).
const TICKER: &str = r#"
import ctypes
class T(ctypes.Structure):
    _fields_ = [('s', ctypes.c_long), ('ns', ctypes.c_long)]
libc = ctypes.CDLL(None)
t = T()
libc.clock_gettime(1, ctypes.byref(t))
n = t.s * 10**9 + t.ns
while True:
    n += 1000000
    t.s, t.ns = divmod(n, 10**9)
    libc.clock_nanosleep(1, 1, ctypes.byref(t), None)
"#;

/// `rig attach --duration 2s`: the window it reports is the interval its
/// counters saw. A ticker's calls in the window (one a millisecond) equal
/// the reported length in ms, within 25 ticks (the ticker's lateness at
/// each edge on a loaded machine), and it closes at the asked time. This
/// pins the timing (from the start snapshot's counter reads to the end
/// snapshot's, stack frames read after every counter); one family on an
/// idle ticker reads in milliseconds, so it does not reproduce a window
/// stretched by seconds of frame reads on a busy target.
#[test]
fn an_attach_duration_window_reports_the_length_its_counters_saw() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("window-length");
    // The interpreter itself, not a version manager's shim that forks it.
    let mut ticker = Command::new("/usr/bin/python3")
        .args(["-c", TICKER])
        .stdin(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    assert!(ticker.try_wait().unwrap().is_none(), "the ticker runs");
    let json = s.0.join("a.json");
    let rig = Command::new(rig_bin())
        .args(["attach", "--pid", &ticker.id().to_string()])
        .args(["--probes", "syscalls", "--duration", "2s", "--json"])
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, stdout, stderr) = finish(rig);
    let _ = ticker.kill();
    let _ = ticker.wait();
    assert_eq!(code, exit::OK, "{stdout}\n{stderr}");
    let a: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let ms = a["window"]["elapsed_ns"].as_u64().unwrap() as i64 / 1_000_000;
    let ticks = a["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "clock_nanosleep")
        .and_then(|r| r["count"].as_i64())
        .unwrap_or_else(|| panic!("no clock_nanosleep: {:#}\n{stderr}", a["syscalls"]));
    eprintln!("window {ms} ms, {ticks} ticks");
    // A few ticks at each edge go to the ticker's own lateness, which a
    // loaded machine stretches to ~10 ms; the defect this pins stretches a
    // window by the frame reads, hundreds of milliseconds and more.
    assert!((ticks - ms).abs() <= 25, "window {ms} ms, {ticks} ticks");
    // The window closes at the asked time, not at the end of the reads.
    assert!(
        (2000..2050).contains(&ms),
        "window {ms} ms for --duration 2s"
    );
}

// ---------------------------------------------------------------------------
// Defects 5, 6, 9: what cannot work is refused before anything starts.

fn rig_out(args: &[&str]) -> (i32, String, String) {
    let t0 = Instant::now();
    let out = Command::new(rig_bin()).args(args).output().unwrap();
    eprintln!("rig {}: {:?}", args.join(" "), t0.elapsed());
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

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
        let (code, out, err) = rig_out(&["check-config", m.to_str().unwrap()]);
        assert_ne!(code, exit::OK, "check-config accepts:\n{text}\n{out}");
        assert!(
            err.contains(&format!("m.toml:{pos}:")) && err.contains(why),
            "want {pos} {why}:\n{text}\n{err}"
        );
        let dir = s.0.join("out");
        let (code, out, err) = rig_out(&[
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
        let (code, out, err) = rig_out(&[
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
        let (code, _, err) = rig_out(&["check-config", spec.to_str().unwrap()]);
        assert_ne!(code, exit::OK);
        assert!(err.contains("t.toml:2:") && err.contains(why), "{err}");
        let m = s.write("m.toml", "[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/\"]\ntopologies = [\"1\"]\n");
        let (code, _, err) = rig_out(&[
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
    let (code, out, err) = rig_out(&[
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
    let (code, out, err) = rig_out(&[
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

// ---------------------------------------------------------------------------
// Defect 7: say what is true of a pid.

#[test]
fn attach_to_a_zombie_says_it_exited_rather_than_no_such_process() {
    root_or_skip!();
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    let t0 = Instant::now();
    while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .unwrap()
        .contains(") Z")
    {
        assert!(t0.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
    }
    let (code, _, err) = rig_out(&["attach", "--pid", &pid.to_string(), "--duration", "1s"]);
    child.wait().unwrap();
    assert_eq!(code, exit::NO_PROCESS, "{err}");
    assert!(err.contains("zombie"), "{err}");
    assert!(!err.contains("no process with pid"), "{err}");
}

// ---------------------------------------------------------------------------
// Defect 8: the target's user.

/// `user = "nobody"` in the spec: the target runs as that user (after rig
/// set up its cgroup as root), owns its run directory, and the launch
/// records its uid/gid; `--user` does the same for `rig run` and the
/// manifest records it; a target left as root gets a one-line warning.
#[test]
fn a_target_drops_to_the_user_its_spec_or_user_flag_names() {
    root_or_skip!();
    let s = Scratch::new("user");
    s.write("c.in", "listen {port}\n");
    let spec = TargetSpec::from_text(
        &s.0.join("t.toml"),
        "name = 'asuser'\nargv = ['{calib_server}', '--port', '{port}']\nport = 'argv'\n\
         ready = { stdout = 'READY' }\nuser = 'nobody'\ngroup = 'nogroup'\n\
         [[files]]\ntemplate = 'c.in'\npath = 'c.conf'\n",
    )
    .unwrap();
    let l = rig::launch::launch(&spec, &LaunchOptions::default()).unwrap();
    let status = std::fs::read_to_string(format!("/proc/{}/status", l.pid)).unwrap();
    let uid_line = status
        .lines()
        .find(|x| x.starts_with("Uid:"))
        .unwrap()
        .to_string();
    let runs_as = l.runs_as;
    drop(l);
    assert!(
        uid_line.split_whitespace().skip(1).all(|u| u == "65534"),
        "{uid_line}"
    );
    assert_eq!(runs_as.map(|r| (r.uid, r.gid)), Some((65534, 65534)));

    // A spec naming a user that does not exist is refused with its line.
    let e = TargetSpec::from_text(
        &s.0.join("t2.toml"),
        "name = 'x'\nargv = ['{calib_server}', '{port}']\nport = 'argv'\nready = { tcp = true }\n\
         user = 'no-such-user-rig'\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("t2.toml:5:"), "{e}");

    let calib = repo().join("config/targets/calib.toml");
    let m = s.write("m.toml", "[defaults]\nwarmup_ms = 50\nduration_ms = 200\n[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/calib\"]\ntopologies = [\"1\"]\n");
    for (user, uid) in [(Some("nobody"), 65534), (None, 0)] {
        let out = s.0.join(format!("out-{uid}"));
        let mut args = vec![
            "run",
            "--target",
            calib.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--passes",
            "clean",
        ];
        if let Some(u) = user {
            args.extend(["--user", u]);
        }
        let (code, stdout, err) = rig_out(&args);
        assert_eq!(code, exit::OK, "{stdout}\n{err}");
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(out.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(
            manifest["targets"][0]["uid"], uid,
            "{:#}",
            manifest["targets"][0]
        );
        assert_eq!(err.contains("runs as root"), uid == 0, "{err}");
    }
    let (code, _, err) = rig_out(&[
        "run",
        "--target",
        calib.to_str().unwrap(),
        "--matrix",
        m.to_str().unwrap(),
        "--out",
        s.0.join("o").to_str().unwrap(),
        "--user",
        "no-such-user-rig",
    ]);
    assert_eq!(code, exit::USAGE, "{err}");
}

/// The real uid and gid of `user` (its primary group), from the passwd
/// database.
fn ids_of(user: &str) -> (u32, u32) {
    let name = std::ffi::CString::new(user).unwrap();
    // SAFETY: a valid C string; the result is read before any other call.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(!pw.is_null(), "{user} is a user of this host");
    // SAFETY: non-null, from getpwnam just above.
    unsafe { ((*pw).pw_uid, (*pw).pw_gid) }
}

/// `rig gate --user nobody`: every launch of the gate runs as nobody
/// (cases.jsonl records the uid and gid it ran with; no run-as-root
/// warning), the gate passes. `--user` naming no user is refused by `rig
/// gate` and `rig instructions` before anything starts: exit 2, no output
/// directory, nothing measured.
#[test]
fn gate_and_instructions_drop_the_target_to_the_user_flag_and_refuse_an_unknown_one() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("gate-user");
    let calib = repo().join("config/targets/calib.toml");
    let m = s.write("m.toml", "[defaults]\nwarmup_ms = 50\nduration_ms = 200\ncounted_requests = 200\n[[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/calib\"]\ntopologies = [\"1\"]\n");
    let b = s.write(
        "b.toml",
        &format!(
            "target = \"{}\"\nmatrix = \"{}\"\nsuite = \"a\"\nrepeats = 2\nrequests = 200\n\
             probes = \"syscalls\"\n",
            calib.display(),
            m.display()
        ),
    );
    let (uid, gid) = ids_of("nobody");
    let out = s.0.join("out");
    let (code, stdout, err) = rig_out(&[
        "gate",
        "--baseline",
        b.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
        "--user",
        "nobody",
    ]);
    assert_eq!(code, exit::OK, "{stdout}\n{err}");
    assert!(!err.contains("runs as root"), "{err}");
    let cases: Vec<Value> = std::fs::read_to_string(out.join("cases.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(cases.len(), 2, "one counted run per repeat");
    for c in &cases {
        let launch = &c["counted"]["launch"];
        assert_eq!(
            (launch["uid"].as_u64(), launch["gid"].as_u64()),
            (Some(u64::from(uid)), Some(u64::from(gid))),
            "{launch:#}"
        );
    }

    let refused = s.0.join("refused");
    let (code, stdout, err) = rig_out(&[
        "gate",
        "--baseline",
        b.to_str().unwrap(),
        "--out",
        refused.to_str().unwrap(),
        "--user",
        "no-such-user-xyz",
    ]);
    assert_eq!(code, exit::USAGE, "{stdout}\n{err}");
    assert!(err.contains("--user"), "{err}");
    assert!(!refused.exists(), "refused before the output directory");
    let (code, stdout, err) = rig_out(&[
        "instructions",
        "--target",
        calib.to_str().unwrap(),
        "--path",
        "/calib",
        "--backend",
        "callgrind",
        "--user",
        "no-such-user-xyz",
    ]);
    assert_eq!(code, exit::USAGE, "{stdout}\n{err}");
    assert!(err.contains("--user"), "{err}");
    assert_eq!(stdout, "", "refused before the backend is chosen");
}

/// `rig instructions --backend callgrind --user nobody`: the target under
/// valgrind runs as nobody (seen in /proc while it runs) and the window
/// still counts: valgrind writes its profile into the target's own run
/// directory, which the target's user owns.
#[test]
fn instructions_under_callgrind_runs_the_target_as_the_user_flag_names() {
    root_or_skip!();
    let s = Scratch::new("instr-user");
    let tag = format!("instr-user-{}", std::process::id());
    let spec = s.write(
        "t.toml",
        &format!(
            "extends = \"{}\"\nenv = {{ {TAG_VAR} = \"{tag}\" }}\n",
            repo().join("config/targets/calib.toml").display()
        ),
    );
    let (uid, _) = ids_of("nobody");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watch = {
        let (stop, tag) = (std::sync::Arc::clone(&stop), tag.clone());
        std::thread::spawn(move || {
            let mut uids = std::collections::BTreeSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for p in tagged(&tag) {
                    let status =
                        std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
                    if let Some(l) = status.lines().find(|l| l.starts_with("Uid:")) {
                        uids.insert(l.split_whitespace().skip(1).collect::<Vec<_>>().join(" "));
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            uids
        })
    };
    let (code, stdout, err) = rig_out(&[
        "instructions",
        "--target",
        spec.to_str().unwrap(),
        "--path",
        "/calib",
        "--backend",
        "callgrind",
        "--requests",
        "200",
        "--user",
        "nobody",
    ]);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let uids = watch.join().unwrap();
    assert_eq!(code, exit::OK, "{stdout}\n{err}");
    let want = format!("{uid} {uid} {uid} {uid}");
    assert_eq!(
        uids.into_iter().collect::<Vec<_>>(),
        vec![want],
        "real, effective, saved and fs uid of the target"
    );
}
