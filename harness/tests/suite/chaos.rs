//! Chaos: rig interrupted (SIGINT, SIGTERM) or killed (SIGKILL) at chosen
//! phases of each command, its target killed during launch, a target that
//! forks a detached grandchild or ignores SIGTERM, and a full disk under
//! `--out`. After every case one audit ([`audit`]) checks that nothing of
//! that run is left:
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
//! Phases are chosen where rig holds the most: during a launch (the target
//! sleeps before it execs the server, so rig is waiting for readiness),
//! during a clean pass (load running, no probes), during a counted pass
//! (probes attached, load running) and during an instruction window (the
//! target under callgrind, its requests running). Matrices are long so
//! that the signal lands mid-phase; a case that would run its course is
//! cut short by the signal, which keeps the suite at a few seconds a case.
//!
//! Every signal case prints one line, `chaos: <case>: exit <code> <ms> ms
//! after <SIG>` (a SIGKILLed rig's code is 137, 128 + 9, as a shell says),
//! and a SIGKILL case also `chaos: <case>: nothing left <ms> ms after
//! SIGKILL` (the watchdogs' and the kernel's teardown).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rig::exit;
use serde_json::Value;

use super::hostile::{alive, cgroups_of, children_of, finish, launch_dirs_of, signal, Scratch};
use super::{probes_shared, program_ids_of, repo, rig_bin, still_loaded};

/// The environment variable whose value tags every process of one test's
/// target tree.
pub(super) const TAG_VAR: &str = "RIG_CHAOS_TAG";

/// How the target's shell starts the calibration server.
#[derive(Clone, Copy, Debug)]
enum Target {
    /// `exec` at once.
    Plain,
    /// Sleeps 3 s first: rig waits in the launch (readiness) phase.
    SlowStart,
    /// Ignores SIGTERM (inherited across exec): only SIGKILL stops it.
    IgnoresTerm,
    /// Forks a grandchild in its own session (outside the process group)
    /// that would outlive the server.
    Forks,
}

impl Target {
    fn script(self) -> &'static str {
        match self {
            Target::Plain => "exec {calib_server} --port {port} --threads 2",
            Target::SlowStart => "sleep 3; exec {calib_server} --port {port} --threads 2",
            Target::IgnoresTerm => "trap '' TERM; exec {calib_server} --port {port} --threads 2",
            Target::Forks => {
                "setsid sleep 600 </dev/null >/dev/null 2>&1 & exec {calib_server} --port {port} --threads 2"
            }
        }
    }
}

/// One chaos case's scratch directory and tag.
struct Case {
    s: Scratch,
    tag: String,
    /// The rig binary: this build's, unless a measurement names another.
    bin: PathBuf,
}

impl Case {
    fn new(name: &str) -> Case {
        Case {
            s: Scratch::new(&format!("chaos-{name}")),
            tag: format!("{name}-{}", std::process::id()),
            bin: PathBuf::from(rig_bin()),
        }
    }

    /// A target spec: the calibration server behind `sh -c`, tagged.
    fn spec(&self, t: Target) -> PathBuf {
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
    fn long_matrix(&self, path: &str) -> PathBuf {
        self.s.write(
            "m.toml",
            &format!(
                "[defaults]\nwarmup_ms = 100\nduration_ms = 30000\ncounted_requests = 2000000\n\
                 [[suite]]\nname = \"long\"\nkind = \"http\"\nprotocols = [\"h1\"]\n\
                 paths = [\"{path}\"]\ntopologies = [\"1\"]\n"
            ),
        )
    }

    fn out(&self) -> PathBuf {
        self.s.0.join("out")
    }

    fn rig(&self, args: &[&str]) -> std::process::Child {
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
    fn rig_tagged(&self, args: &[&str]) -> std::process::Child {
        Command::new(&self.bin)
            .args(args)
            .env(TAG_VAR, &self.tag)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    fn run(&self, t: Target, passes: &str) -> std::process::Child {
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
fn watchdogs_of(rig_pid: u32) -> Vec<u32> {
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
fn kernel_object_fds(pid: u32) -> Vec<String> {
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
    programs: Vec<u32>,
    /// Every tagged process (the target tree), in order of first sight.
    tagged: Vec<u32>,
    /// perf-event or BPF fds found in a tagged process.
    leaked_fds: Vec<String>,
}

/// Polls rig and its target tree every 10 ms until stopped.
pub(super) struct Watcher {
    seen: Arc<Mutex<Seen>>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
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

    fn programs(&self) -> usize {
        self.seen.lock().unwrap().programs.len()
    }

    pub(super) fn finish(mut self) -> Seen {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap();
        std::mem::take(&mut *self.seen.lock().unwrap())
    }
}

/// Wait (at most `within`) for `cond`; false if it never held.
fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
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
fn legacy_probes_of(rig_pid: u32) -> Vec<String> {
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
fn temp_dirs_of(rig_pid: u32) -> Vec<PathBuf> {
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
enum Phase {
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
fn reach(phase: Phase, rig_pid: u32, tag: &str, w: &Watcher) -> bool {
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
        Phase::Counted => wait_until(Duration::from_secs(60), || w.programs() > 0),
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
fn in_pass(pid: u32, pass: &str) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/cgroup"))
        .is_ok_and(|c| c.contains(&format!("_{pass}-")))
}

/// Process `pid` runs under valgrind's callgrind.
fn under_callgrind(pid: u32) -> bool {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|c| String::from_utf8_lossy(&c).contains("callgrind"))
        || std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|e| e.display().to_string().contains("callgrind"))
}

/// Process `pid` holds an established TCP connection (a socket fd of its
/// own in state 01 of /proc/PID/net/tcp or tcp6).
fn has_established_tcp(pid: u32) -> bool {
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

fn sig_name(sig: i32) -> &'static str {
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
fn exit_line(case: &str, code: i32, took: Duration, sig: i32) {
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
fn is_server(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .is_ok_and(|c| c.trim_end() == "calib_server")
}

/// Direct children of rig that belong to the target tree and started
/// after boot-time tick `since` (rig is a child subreaper: an orphaned
/// grandchild of an older target also becomes its child, but is no launch).
fn launched(rig_pid: u32, tag: &str, since: u64) -> Vec<u32> {
    let t = tagged(tag);
    children_of(rig_pid)
        .into_iter()
        .filter(|c| t.contains(c) && start_tick(*c).is_some_and(|s| s > since))
        .collect()
}

/// A process's start time in clock ticks since boot (/proc/PID/stat field 22).
fn start_tick(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Now, in the clock ticks of [`start_tick`].
fn now_tick() -> u64 {
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
fn launches_until_exit(rig_pid: u32, tag: &str, since: u64) -> Vec<u32> {
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
    let (code, stdout, stderr) = finish(rig);
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
    let spec = c.spec(Target::SlowStart);
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
    for p in launched(rig_pid, &c.tag, 0) {
        signal(p, libc::SIGKILL);
    }
    let (code, stdout, stderr) = finish(rig);
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

impl Case {
    /// `rig ab` of two arms on a one-case matrix of `path` with long passes.
    fn ab(&self, a: &Path, b: &Path, path: &str, passes: &str) -> std::process::Child {
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
    fn gate(
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

    // As hostile::probe_cost_and_instructions_obey_sigterm_with_exit_130
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

/// The tmpfs of one test, unmounted when dropped.
struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(at: PathBuf, size: &str) -> Tmpfs {
        std::fs::create_dir_all(&at).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "rig-chaos"])
            .arg(&at)
            .status()
            .unwrap();
        assert!(ok.success(), "mount tmpfs at {}", at.display());
        Tmpfs(at)
    }

    /// Fill it until the kernel says ENOSPC.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.0.join("filler")).unwrap();
        let block = vec![0u8; 64 * 1024];
        loop {
            if let Err(e) = f.write_all(&block) {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                break;
            }
        }
        // Small writes until not even a byte fits.
        while f.write_all(&[0u8; 512]).is_ok() {}
        let _ = f.sync_all();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// `--out` on a disk that fills before the first case and one that fills
/// mid-run: rig exits 1 naming the cause, no target left, and each file
/// it had written is still whole JSON (an append that did not fit is
/// taken back, a report that did not fit leaves the previous one).
#[test]
fn a_full_disk_under_out_fails_cleanly_and_keeps_written_files_valid() {
    root_or_skip!();
    for when in ["before", "mid-run"] {
        let c = Case::new(&format!("disk-full-{when}"));
        let fs = Tmpfs::mount(c.s.0.join("mnt"), "1m");
        let out = fs.0.join("out");
        if when == "before" {
            fs.fill();
        }
        let spec = c.spec(Target::Plain);
        let m = c.s.write(
            "m.toml",
            "[defaults]\nwarmup_ms = 50\nduration_ms = 400\n\
             [[suite]]\nname = \"a\"\nkind = \"http\"\nprotocols = [\"h1\"]\n\
             paths = [\"/calib\"]\ntopologies = [\"1\", \"2\", \"3\", \"4\", \"5\", \"6\"]\n",
        );
        let rig = c.rig(&[
            "run",
            "--target",
            spec.to_str().unwrap(),
            "--matrix",
            m.to_str().unwrap(),
            "--out",
            out.to_str().unwrap(),
            "--passes",
            "clean",
        ]);
        let rig_pid = rig.id();
        let w = Watcher::start(rig_pid, &c.tag);
        if when == "mid-run" {
            // After the first case and its report are on disk.
            assert!(wait_until(Duration::from_secs(60), || {
                out.join("report.json").exists()
            }));
            fs.fill();
        }
        let (code, stdout, stderr) = finish(rig);
        let seen = w.finish();
        eprintln!("disk full {when}: exit {code}: {}", stderr.trim_end());
        audit(&format!("disk-full-{when}"), rig_pid, &c.tag, &seen, &out);
        assert_eq!(code, exit::ERROR, "{stdout}\n{stderr}");
        assert!(stderr.contains("No space left on device"), "{stderr}");
        if when == "mid-run" {
            let lines = std::fs::read_to_string(out.join("cases.jsonl")).unwrap();
            assert!(lines.lines().count() >= 1, "the first case is kept");
            assert!(out.join("report.json").exists());
        }
    }
}

/// The README's "Failure behaviour" tables and the tests cannot drift:
/// every test a row names exists (`file::test` of this suite, or
/// `module::tests::test` of the library), and every chaos test is a row.
#[test]
fn the_readme_failure_tables_name_only_tests_that_exist_and_every_chaos_test() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let section = readme
        .split("\n## Failure behaviour\n")
        .nth(1)
        .expect("README has a Failure behaviour section");
    let section = section.split("\n## ").next().unwrap();
    // A row's last cell (its test column) lies between its last two `|`.
    let named: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with('|'))
        .filter_map(|l| l.trim_end().strip_suffix('|')?.rsplit('|').next())
        .filter(|cell| cell.contains("::"))
        .flat_map(|cell| cell.split(','))
        .map(str::trim)
        .collect();
    let mut missing = Vec::new();
    for path in &named {
        let parts: Vec<&str> = path.split("::").collect();
        let (name, modules) = parts.split_last().unwrap();
        let modules: Vec<&str> = modules.iter().copied().filter(|m| *m != "tests").collect();
        let dir = modules.join("/");
        let src = repo().join("harness/src");
        let candidates = [
            repo().join(format!("harness/tests/suite/{dir}.rs")),
            src.join(format!("{dir}/tests.rs")),
            src.join(format!("{dir}.rs")),
            src.join(format!("{dir}/mod.rs")),
        ];
        let found = candidates
            .iter()
            .any(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains(&format!("fn {name}()"))));
        if !found {
            missing.push(*path);
        }
    }
    assert_eq!(
        missing,
        Vec::<&str>::new(),
        "README rows name tests that do not exist"
    );
    let chaos = std::fs::read_to_string(repo().join("harness/tests/suite/chaos.rs")).unwrap();
    // This test checks the table; it is no case of it.
    let this = test_name!();
    let unlisted: Vec<&str> = chaos
        .split("#[test]\nfn ")
        .skip(1)
        .filter_map(|t| t.split('(').next())
        .filter(|name| *name != this)
        .filter(|name| !named.contains(&format!("chaos::{name}").as_str()))
        .collect();
    assert_eq!(
        unlisted,
        Vec::<&str>::new(),
        "chaos tests with no README row"
    );
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
