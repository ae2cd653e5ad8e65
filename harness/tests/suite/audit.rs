//! The leftovers audit and the runner of interrupted cases, shared by the
//! signal, clean-up and output tests. After every case one audit
//! ([`audit`]) checks that nothing of that run is left:
//! - no process: every process of the target's tree carries a tag in its
//!   environment (set by the spec, inherited by anything it forks), and
//!   rig's clean-up watchdogs name the run directory on their command line;
//! - no cgroup and no run directory named after that rig's pid;
//! - no BPF program that rig held (ids read from its fdinfo while it ran)
//!   still loaded, and no legacy tracefs uprobe/kprobe of that rig
//!   (`aya_<pid>_...`; aya attaches through the uprobe PMU with
//!   perf_event_open, so its uprobes and perf events are fds that die with
//!   rig, unless a target inherited one: the audit also checks that no
//!   process of the target ever held a perf-event or BPF fd);
//! - every JSON and JSON-lines file rig wrote still parses.
//!
//! Phases ([`Phase`]) are chosen where rig holds the most: during a launch
//! (the target sleeps before it execs the server, so rig is waiting for
//! readiness), during a clean pass (load running, no probes), during a
//! counted pass (probes attached, load running) and during an instruction
//! window (the target under callgrind, its requests running).

use super::scratch::{alive, cgroups_of, children_of, finish, launch_dirs_of, signal, Scratch};
use super::{program_ids_of, rig_bin, still_loaded};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The environment variable whose value tags every process of one test's
/// target tree.
pub(super) const TAG_VAR: &str = "RIG_CHAOS_TAG";

/// How the target's shell starts the calibration server.
#[derive(Clone, Copy, Debug)]
pub(super) enum Target {
    /// `exec` at once.
    Plain,
    /// Sleeps 3 s first: rig waits in the launch (readiness) phase.
    SlowStart,
    /// Sleeps 60 s first, past the spec's 10 s readiness timeout: a test
    /// that kills it during the launch has those 10 s to do so, however
    /// loaded the machine (with `SlowStart`'s 3 s, a starved test thread
    /// once found the case already over and killed nothing).
    NeverReady,
    /// Ignores SIGTERM (inherited across exec): only SIGKILL stops it.
    IgnoresTerm,
    /// Forks a grandchild in its own session (outside the process group)
    /// that would outlive the server.
    Forks,
}

/// One interrupted case's scratch directory and tag.
pub(super) struct Case {
    pub(super) s: Scratch,
    pub(super) tag: String,
    /// The rig binary: this build's, unless a measurement names another.
    pub(super) bin: PathBuf,
}

/// Pids whose environment carries `TAG_VAR=tag`.
pub(super) fn tagged(tag: &str) -> Vec<u32> {
    let want = format!("{TAG_VAR}={tag}");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(env) = std::fs::read(format!("/proc/{p}/environ")) else {
            continue;
        };
        if env.split(|b| *b == 0).any(|v| v == want.as_bytes()) && alive(p) {
            out.push(p);
        }
    }
    out
}

/// rig's clean-up watchdogs of rig `rig_pid` (their argv names the run
/// directory `rig-launch-<pid>-...`).
pub(super) fn watchdogs_of(rig_pid: u32) -> Vec<u32> {
    let want = format!("rig-launch-{rig_pid}-");
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(p) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read(format!("/proc/{p}/cmdline"))
            .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&want))
            && alive(p)
        {
            out.push(p);
        }
    }
    out
}

/// perf-event and BPF fds of process `pid`.
pub(super) fn kernel_object_fds(pid: u32) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .map(|l| l.display().to_string())
        .filter(|l| l.contains("perf_event") || l.contains("bpf"))
        .collect()
}

/// What a watcher saw while one rig ran.
#[derive(Default, Debug)]
pub(super) struct Seen {
    /// BPF programs the rig process held.
    pub(super) programs: Vec<u32>,
    /// Every tagged process (the target tree), in order of first sight.
    pub(super) tagged: Vec<u32>,
    /// perf-event or BPF fds found in a tagged process.
    pub(super) leaked_fds: Vec<String>,
}

/// Polls rig and its target tree every 10 ms until stopped.
pub(super) struct Watcher {
    pub(super) seen: Arc<Mutex<Seen>>,
    pub(super) stop: Arc<AtomicBool>,
    pub(super) thread: Option<std::thread::JoinHandle<()>>,
}

/// Wait (at most `within`) for `cond`; false if it never held.
pub(super) fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while !cond() {
        if t0.elapsed() > within {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Lines of the legacy tracefs probe lists that name rig `rig_pid`.
pub(super) fn legacy_probes_of(rig_pid: u32) -> Vec<String> {
    let want = format!("aya_{rig_pid}_");
    let mut out = Vec::new();
    for dir in ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"] {
        for f in ["uprobe_events", "kprobe_events"] {
            if let Ok(t) = std::fs::read_to_string(Path::new(dir).join(f)) {
                out.extend(t.lines().filter(|l| l.contains(&want)).map(String::from));
            }
        }
    }
    out
}

/// rig `rig_pid`'s own entries in the temp dir (`rig-<what>-<pid>-...`:
/// its launches' run directories, any other private directory it made).
pub(super) fn temp_dirs_of(rig_pid: u32) -> Vec<PathBuf> {
    let pid = rig_pid.to_string();
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("rig-") && name.split('-').nth(2) == Some(pid.as_str())
        })
        .map(|e| e.path())
        .collect()
}

/// Every `.json`/`.jsonl` file under `dir` parses (rig's own temp files,
/// dot-names, are not results); returns those that do not.
pub(super) fn all_json_valid(dir: &Path) -> Vec<String> {
    let mut bad = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return bad;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            bad.extend(all_json_valid(&p));
            continue;
        }
        let Ok(text) = std::fs::read_to_string(&p) else {
            continue;
        };
        let ok = match p.extension().and_then(|x| x.to_str()) {
            Some("json") => serde_json::from_str::<Value>(&text).is_ok(),
            Some("jsonl") => text
                .lines()
                .all(|l| serde_json::from_str::<Value>(l).is_ok()),
            _ => true,
        };
        if !ok {
            bad.push(p.display().to_string());
        }
    }
    bad
}

/// After rig `rig_pid` has exited: nothing of its run is left. Kills what
/// it finds (only processes of this test's tag) so a failure does not
/// leak into later tests, then panics with the list. Returns how long the
/// teardown took to finish after the call.
pub(super) fn audit(case: &str, rig_pid: u32, tag: &str, seen: &Seen, out: &Path) -> Duration {
    // Teardown after a SIGKILL is a watchdog's work: allow it a moment.
    let t0 = Instant::now();
    wait_until(Duration::from_secs(10), || {
        tagged(tag).is_empty()
            && watchdogs_of(rig_pid).is_empty()
            && cgroups_of(rig_pid).is_empty()
            && launch_dirs_of(rig_pid).is_empty()
            && temp_dirs_of(rig_pid).is_empty()
            && still_loaded(&seen.programs).is_empty()
    });
    let waited = t0.elapsed();
    let mut left = Vec::new();
    for p in tagged(tag) {
        left.push(format!("process {p} of the target tree"));
        signal(p, libc::SIGKILL);
    }
    for p in watchdogs_of(rig_pid) {
        left.push(format!("watchdog {p}"));
    }
    for c in cgroups_of(rig_pid) {
        left.push(format!("cgroup {}", c.display()));
    }
    for d in launch_dirs_of(rig_pid) {
        left.push(format!("run directory {}", d.display()));
    }
    for d in temp_dirs_of(rig_pid) {
        if !launch_dirs_of(rig_pid).contains(&d) {
            left.push(format!("private directory {}", d.display()));
        }
    }
    for id in still_loaded(&seen.programs) {
        left.push(format!("BPF program {id}"));
    }
    for l in legacy_probes_of(rig_pid) {
        left.push(format!("tracefs probe {l}"));
    }
    for f in &seen.leaked_fds {
        left.push(format!("a target held rig's kernel object: {f}"));
    }
    for f in all_json_valid(out) {
        left.push(format!("{f} is not valid JSON"));
    }
    eprintln!(
        "{case}: audit of rig {rig_pid}: {} BPF programs held, {} target processes seen, {} left",
        seen.programs.len(),
        seen.tagged.len(),
        left.len()
    );
    assert!(left.is_empty(), "{case}: left behind: {left:#?}");
    waited
}

/// Run the rig command `cmd` to its end (at most a minute, see [`finish`])
/// under a [`Watcher`], then [`audit`] what it left: for tests whose rig
/// is not signalled. `tag` is the one its target tree carries (a tag
/// nothing carries when it starts none); `out` its output directory, if
/// any. Returns exit code, stdout and stderr.
pub(super) fn run_audited(
    case: &str,
    tag: &str,
    out: &Path,
    cmd: &mut Command,
) -> (i32, String, String) {
    let rig = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rig_pid = rig.id();
    let w = Watcher::start(rig_pid, tag);
    let done = finish(rig);
    let seen = w.finish();
    audit(case, rig_pid, tag, &seen, out);
    done
}

/// Where in a command's life the signal lands.
#[derive(Clone, Copy, Debug)]
pub(super) enum Phase {
    /// rig waits for a (slow-starting) target to become ready.
    Launch,
    /// A clean pass's load running (no probes).
    Clean,
    /// Probes attached, the counted load running.
    Counted,
    /// An instruction window's requests running on a target under callgrind.
    Window,
}

/// Wait until `rig` reaches `phase`; true when it did.
pub(super) fn reach(phase: Phase, rig_pid: u32, tag: &str, w: &Watcher) -> bool {
    let ok = match phase {
        // The shell is up and still sleeping (not yet the server).
        Phase::Launch => wait_until(Duration::from_secs(30), || {
            let t = tagged(tag);
            !t.is_empty() && !t.iter().any(|&p| is_server(p))
        }),
        // A server launched for a clean pass (its cgroup says which pass)
        // holds a connection of the load.
        Phase::Clean => wait_until(Duration::from_secs(60), || {
            tagged(tag)
                .into_iter()
                .any(|p| in_pass(p, "clean") && has_established_tcp(p))
        }),
        // rig loads its programs one after another while it attaches; a
        // signal then ends it before any window (exit 130, no report). So
        // the counted load is running once the set of programs has stopped
        // growing for 1.5 s (under load, a signal after the first program
        // once landed in the attach: no window was written).
        Phase::Counted => {
            let (mut seen, mut since) = (0, Instant::now());
            wait_until(Duration::from_secs(60), || {
                let now = w.programs();
                if now != seen {
                    (seen, since) = (now, Instant::now());
                }
                seen > 0 && since.elapsed() >= Duration::from_millis(1500)
            })
        }
        // Past the counted runs (a gate) and valgrind's start-up: the
        // target under callgrind holds the window's connection.
        Phase::Window => wait_until(Duration::from_secs(180), || {
            tagged(tag)
                .into_iter()
                .any(|p| under_callgrind(p) && has_established_tcp(p))
        }),
    };
    // Into the middle of the phase.
    std::thread::sleep(Duration::from_millis(match phase {
        Phase::Launch => 500,
        _ => 1000,
    }));
    ok && alive(rig_pid)
}

/// Process `pid` is in the cgroup of a `pass` launch: its name is
/// `rig-<label>-<rig pid>-<n>`, the label `<target>-<pass>` with every `-`
/// made `_`.
pub(super) fn in_pass(pid: u32, pass: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|c| c.contains(&format!("_{pass}-")))
}

/// Process `pid` runs under valgrind's callgrind.
pub(super) fn under_callgrind(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("callgrind"))
        || std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|e| e.display().to_string().contains("callgrind"))
}

/// Process `pid` holds an established TCP connection (a socket fd of its
/// own in state 01 of /proc/PID/net/tcp or tcp6).
pub(super) fn has_established_tcp(pid: u32) -> bool {
    let Ok(rd) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let inodes: Vec<String> = rd
        .flatten()
        .filter_map(|e| std::fs::read_link(e.path()).ok())
        .filter_map(|l| {
            let l = l.display().to_string();
            Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    ["tcp", "tcp6"].iter().any(|f| {
        std::fs::read_to_string(format!("/proc/{pid}/net/{f}")).is_ok_and(|t| {
            t.lines().skip(1).any(|l| {
                let v: Vec<&str> = l.split_whitespace().collect();
                v.get(3) == Some(&"01") && v.get(9).is_some_and(|i| inodes.iter().any(|x| x == i))
            })
        })
    })
}

pub(super) fn sig_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGKILL => "SIGKILL",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// The one line a signal case prints: rig's exit code and the time from
/// the signal to rig's exit.
pub(super) fn exit_line(case: &str, code: i32, took: Duration, sig: i32) {
    // finish() gives -1 for death by a signal; say it as a shell does.
    let code = if code == -1 && sig == libc::SIGKILL {
        128 + libc::SIGKILL
    } else {
        code
    };
    eprintln!(
        "chaos: {case}: exit {code} {} ms after {}",
        took.as_millis(),
        sig_name(sig)
    );
}

/// The calibration server itself (not the shell whose script names it).
pub(super) fn is_server(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| c.trim_end() == "calib_server")
}

/// Direct children of rig that belong to the target tree and started
/// after boot-time tick `since` (rig is a child subreaper: an orphaned
/// grandchild of an older target also becomes its child, but is no launch).
pub(super) fn launched(rig_pid: u32, tag: &str, since: u64) -> Vec<u32> {
    let t = tagged(tag);
    children_of(rig_pid)
        .into_iter()
        .filter(|c| t.contains(c) && start_tick(*c).is_some_and(|s| s > since))
        .collect()
}

/// A process's start time in clock ticks since boot (/proc/PID/stat field 22).
pub(super) fn start_tick(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Now, in the clock ticks of [`start_tick`].
pub(super) fn now_tick() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    // SAFETY: no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    ts.tv_sec as u64 * hz + ts.tv_nsec as u64 * hz / 1_000_000_000
}

/// Targets rig launches from boot-time tick `since` until it exits (at
/// most 30 s).
pub(super) fn launches_until_exit(rig_pid: u32, tag: &str, since: u64) -> Vec<u32> {
    let t0 = Instant::now();
    let mut after: Vec<u32> = Vec::new();
    while alive(rig_pid) && t0.elapsed() < Duration::from_secs(30) {
        for p in launched(rig_pid, tag, since) {
            if !after.contains(&p) {
                after.push(p);
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    after
}

impl Target {
    pub(super) fn script(self) -> &'static str {
        match self {
            Target::Plain => "exec {calib_server} --port {port} --threads 2",
            Target::SlowStart => "sleep 3; exec {calib_server} --port {port} --threads 2",
            Target::NeverReady => "sleep 60; exec {calib_server} --port {port} --threads 2",
            Target::IgnoresTerm => "trap '' TERM; exec {calib_server} --port {port} --threads 2",
            Target::Forks => {
                "setsid sleep 600 </dev/null >/dev/null 2>&1 & exec {calib_server} --port {port} --threads 2"
            }
        }
    }
}

impl Case {
    pub(super) fn new(name: &str) -> Case {
        Case {
            s: Scratch::new(&format!("chaos-{name}")),
            tag: format!("{name}-{}", std::process::id()),
            bin: PathBuf::from(rig_bin()),
        }
    }

    /// A target spec: the calibration server behind `sh -c`, tagged.
    pub(super) fn spec(&self, t: Target) -> PathBuf {
        self.s.write(
            "t.toml",
            &format!(
                "name = \"chaos\"\nargv = [\"/bin/sh\", \"-c\", \"{}\"]\nport = \"argv\"\n\
                 env = {{ {TAG_VAR} = \"{}\" }}\nready = {{ stdout = \"READY\" }}\n\
                 ready_timeout_ms = 10000\n[protocols]\nh1 = true\n\
                 [[endpoints]]\npath = \"/calib\"\nstatus = 200\ncontent_type = \"text/plain\"\n\
                 body = {{ literal = \"calib\\n\" }}\n",
                t.script(),
                self.tag
            ),
        )
    }

    /// A one-case matrix on `path` whose passes run long.
    pub(super) fn long_matrix(&self, path: &str) -> PathBuf {
        self.s.write(
            "m.toml",
            &format!(
                "[defaults]\nwarmup_ms = 100\nduration_ms = 30000\ncounted_requests = 2000000\n\
                 [[suite]]\nname = \"long\"\nkind = \"http\"\nprotocols = [\"h1\"]\n\
                 paths = [\"{path}\"]\ntopologies = [\"1\"]\n"
            ),
        )
    }

    pub(super) fn out(&self) -> PathBuf {
        self.s.0.join("out")
    }

    pub(super) fn rig(&self, args: &[&str]) -> std::process::Child {
        Command::new(&self.bin)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// rig carrying the tag itself: what it starts without a spec (demo's
    /// server, probe-cost's fixture) inherits it and is audited as its
    /// target tree.
    pub(super) fn rig_tagged(&self, args: &[&str]) -> std::process::Child {
        Command::new(&self.bin)
            .args(args)
            .env(TAG_VAR, &self.tag)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    pub(super) fn run(&self, t: Target, passes: &str) -> std::process::Child {
        let spec = self.spec(t);
        let m = self.long_matrix("/calib");
        self.rig(&[
            "run",
            "--target",
            spec.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
            "--out",
            self.out().to_str().unwrap(),
            "--passes",
            passes,
            "--probes",
            "syscalls",
        ])
    }
}

impl Case {
    /// `rig ab` of two arms on a one-case matrix of `path` with long passes.
    pub(super) fn ab(&self, a: &Path, b: &Path, path: &str, passes: &str) -> std::process::Child {
        let m = self.long_matrix(path);
        self.rig(&[
            "ab",
            "--arm",
            &format!("A={}", a.display()),
            "--arm",
            &format!("B={}", b.display()),
            "--matrix",
            m.to_str().unwrap(),
            "--suite",
            "long",
            "--out",
            self.out().to_str().unwrap(),
            "--passes",
            passes,
            "--probes",
            "syscalls",
        ])
    }

    /// `rig gate` of a baseline with no counters on `target`: `repeats` runs
    /// of the long suite of `path`, `requests` each; `extra` is more TOML.
    pub(super) fn gate(
        &self,
        target: &Path,
        path: &str,
        repeats: u32,
        requests: u64,
        extra: &str,
    ) -> std::process::Child {
        let m = self.long_matrix(path);
        let baseline = self.s.write(
            "b.toml",
            &format!(
                "target = \"{}\"\nmatrix = \"{}\"\nsuite = \"long\"\nrepeats = {repeats}\n\
                 requests = {requests}\nprobes = \"syscalls\"\n{extra}",
                target.display(),
                m.display()
            ),
        );
        self.rig(&[
            "gate",
            "--baseline",
            baseline.to_str().unwrap(),
            "--out",
            self.out().to_str().unwrap(),
        ])
    }
}

impl Watcher {
    /// Watch rig `rig_pid` and the processes tagged `tag` (rig itself,
    /// when it carries the tag too, is not of the target tree).
    pub(super) fn start(rig_pid: u32, tag: &str) -> Watcher {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st, tag) = (Arc::clone(&seen), Arc::clone(&stop), tag.to_string());
        let thread = std::thread::spawn(move || {
            let mut last_fds = BTreeSet::new();
            while !st.load(Ordering::Relaxed) {
                let progs = program_ids_of(rig_pid);
                let tree: Vec<u32> = tagged(&tag).into_iter().filter(|&p| p != rig_pid).collect();
                // A child rig forked and that has not exec'd its program
                // yet is still rig's image, holding rig's descriptors
                // until the exec closes them (all are close-on-exec): it
                // is not the target holding rig's objects. An exec in
                // progress shows the new image a moment before it closes
                // them, so a descriptor is a leak only when two polls in
                // a row find it.
                let rig_exe = std::fs::read_link(format!("/proc/{rig_pid}/exe")).ok();
                let mut fds = Vec::new();
                for &p in &tree {
                    let exe = std::fs::read_link(format!("/proc/{p}/exe")).ok();
                    if exe.is_some() && exe == rig_exe {
                        continue;
                    }
                    fds.extend(
                        kernel_object_fds(p)
                            .into_iter()
                            .map(|f| format!("{p}: {f}")),
                    );
                }
                let mut g = s.lock().unwrap();
                for id in progs {
                    if !g.programs.contains(&id) {
                        g.programs.push(id);
                    }
                }
                for p in tree {
                    if !g.tagged.contains(&p) {
                        g.tagged.push(p);
                    }
                }
                let now: BTreeSet<String> = fds.into_iter().collect();
                for f in now.intersection(&last_fds) {
                    if !g.leaked_fds.contains(f) {
                        g.leaked_fds.push(f.clone());
                    }
                }
                last_fds = now;
                drop(g);
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        Watcher {
            seen,
            stop,
            thread: Some(thread),
        }
    }

    pub(super) fn programs(&self) -> usize {
        self.seen.lock().unwrap().programs.len()
    }

    pub(super) fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}
