//! A scratch directory per test, and what the tests ask of processes: are
//! they alive, whose children, in which cgroups and launch directories; a
//! signal, and a rig run to its end with its output.

use super::{repo, rig_bin};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
pub(super) fn wait_for_target(rig: u32, within: Duration) -> u32 {
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

/// Wait for the rig this test started, for at most two minutes (with its
/// pools counted, `time rig attach --tree --pid POSTMASTER --probes
/// alloc,syscalls --per 2000 -- pgbench -c 1 -t 2000 -S -n` took 40.6 s
/// alone, most of it after a 2.2 s window, and a loaded 2-core machine
/// runs tests side by side): a rig that
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
        if t0.elapsed() > Duration::from_secs(120) {
            for c in children_of(child.id()) {
                signal(c, libc::SIGKILL);
            }
            let _ = child.kill();
            note = "(killed after 120 s) ";
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
pub(super) fn read_to_end(
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

pub(super) const LONG_MATRIX: &str = r#"
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

pub(super) fn start_run(s: &Scratch, matrix: &str, passes: &str) -> std::process::Child {
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

/// `rig ARGS…` to its end (a minute at most), not audited: for commands
/// that start nothing.
pub(super) fn rig(args: &[&str]) -> (i32, String, String) {
    let child = Command::new(rig_bin())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(child)
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
