//! `rig attach` where a new user's first tries misled it: a thread's id
//! for `--pid`, several pids, a server that forks inside the window, a
//! clock read through the vDSO, a target that dies mid-window, a request
//! count that could never finish, a port with thousands of sockets around
//! it, SIGTERM in every phase, ports that do not speak what the URL says.
//! Each against a fixture with the shape of the real server that misled it
//! (`fixtures/trial/trial_server.c`, the Go fixture), with exact truth by
//! construction. Times to exit are bounded only to tell "obeyed" from
//! "ran its whole phase"; the measured times are printed.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rig::exit;
use serde_json::Value;

use super::scratch::{finish, signal, Scratch};
use super::trial_server::Server;
use super::{probes_shared, rig_bin};

/// `rig ARGS…` to its end (a minute at most): exit code, stdout + stderr,
/// and the `--json` it wrote when one was asked for (`json`).
pub(super) fn rig(args: &[&str], json: Option<&Path>) -> (i32, String, Option<Value>) {
    let mut cmd = Command::new(rig_bin());
    // `--json` before a `-- COMMAND`, whose words it must not join.
    let (ours, load) = match args.iter().position(|a| *a == "--") {
        Some(i) => args.split_at(i),
        None => (args, &[][..]),
    };
    cmd.args(ours);
    if let Some(j) = json {
        cmd.arg("--json").arg(j);
    }
    cmd.args(load);
    let child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (code, out, err) = finish(child);
    let a = json
        .and_then(|j| std::fs::read(j).ok())
        .map(|b| serde_json::from_slice(&b).unwrap());
    (code, format!("{out}\n{err}"), a)
}

/// Calls of syscall `name` in an attach JSON.
fn syscalls(a: &Value, name: &str) -> u64 {
    a["syscalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["name"] == name)
        .map(|r| r["count"].as_u64().unwrap())
        .sum()
}

/// The threads of `pid` other than its main one.
fn other_threads(pid: u32) -> Vec<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&t| t != pid)
        .collect()
}

/// haproxy's shape: a process whose second thread does the work. `--pid`
/// of that thread read as a process of its own (`/proc/TID` exists), so
/// every family counted nothing and the window said complete. Now the
/// thread is measured as its process, and rig says so.
#[test]
fn a_thread_id_is_measured_as_its_process_and_said_so() {
    root_or_skip!();
    let _p = probes_shared();
    let s = Scratch::new("thread-id");
    let server = Server::start(&["--threads", "1"]);
    // The server starts its thread after it says READY.
    let t0 = Instant::now();
    let tid = loop {
        if let Some(&t) = other_threads(server.pid()).first() {
            break t;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no second thread");
        std::thread::sleep(Duration::from_millis(5));
    };
    let json = s.0.join("a.json");
    let (code, text, a) = rig(
        &[
            "attach",
            "--pid",
            &tid.to_string(),
            "--probes",
            "syscalls",
            "--",
            "h2load",
            "--h1",
            "-n",
            "500",
            "-c",
            "1",
            &server.url(),
        ],
        Some(&json),
    );
    assert_eq!(code, exit::OK, "{text}");
    assert!(
        text.contains(&format!(
            "--pid {tid} is a thread of process {}",
            server.pid()
        )),
        "{text}"
    );
    let a = a.unwrap();
    assert_eq!(a["pid"], server.pid(), "{text}");
    // One send per request, by the connection's thread: exactly 500.
    assert_eq!(syscalls(&a, "sendto"), 500, "{text}");
    assert!(a["window"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .any(|w| w.as_str().unwrap().contains("is a thread of process")));
}

/// `--pid $(pidof apache2)` gave clap's "unexpected argument". Several
/// pids are refused (exit 2), naming the one whose tree holds the others.
#[test]
fn several_pids_are_refused_naming_the_one_whose_tree_holds_them() {
    let server = Server::start(&["--fork"]);
    // A connection makes the server fork a child for it.
    let _c = std::net::TcpStream::connect(("127.0.0.1", server.port)).unwrap();
    let t0 = Instant::now();
    let child = loop {
        if let Some(c) = rig::process::descendants(server.pid()).first() {
            break *c;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "no child forked");
        std::thread::sleep(Duration::from_millis(10));
    };
    let (code, text, _) = rig(
        &[
            "attach",
            "--pid",
            &child.to_string(),
            &server.pid().to_string(),
        ],
        None,
    );
    assert_eq!(code, exit::USAGE, "{text}");
    assert!(
        text.contains(&format!("{} (", server.pid()))
            && text.contains(&format!("give --pid {} --tree", server.pid())),
        "{text}"
    );
    let other = Server::start(&[]);
    let (code, text, _) = rig(
        &[
            "attach",
            "--pid",
            &server.pid().to_string(),
            &other.pid().to_string(),
        ],
        None,
    );
    assert_eq!(code, exit::USAGE, "{text}");
    assert!(text.contains("are not one tree"), "{text}");
}

/// PostgreSQL's shape: a server that forks a process per connection, the
/// connection made inside the window (`-- COMMAND`). The child runs before
/// its uprobes go in; what it did meanwhile is counted where nothing is
/// missed (its syscalls, pending in the kernel until its uprobes are in)
/// and the coverage says how much of the window the allocation counts
/// cover. Each request costs the child exactly 3 mallocs, one recv and one
/// send: the allocations rig saw must be the coverage times the truth,
/// within the one request the uprobes' arrival can split.
#[test]
fn a_process_forked_in_the_window_says_how_much_its_uprobes_missed() {
    root_or_skip!();
    let _p = probes_shared();
    let s = Scratch::new("fork-gap");
    let server = Server::start(&["--fork", "--mallocs", "3"]);
    let json = s.0.join("a.json");
    const N: u64 = 3000;
    let (code, text, a) = rig(
        &[
            "attach",
            "--tree",
            "--pid",
            &server.pid().to_string(),
            "--probes",
            "alloc,syscalls",
            "--",
            "h2load",
            "--h1",
            "-n",
            &N.to_string(),
            "-c",
            "1",
            &server.url(),
        ],
        Some(&json),
    );
    assert_eq!(code, exit::INCOMPLETE, "{text}");
    let a = a.unwrap();
    assert_eq!(a["window"]["requests"], N, "{text}");
    let c = &a["uprobe_coverage"];
    assert_eq!(c["processes"], 1, "{c:#}");
    let gap = c["longest_gap_ms"].as_f64().unwrap();
    assert!(gap > 0.0, "{c:#}");
    let covered = c["covered_by_syscalls"].as_f64().unwrap();
    let unseen = c["unseen_syscalls"].as_u64().unwrap();
    // The child's record says the same.
    let child = a["processes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["joined"]["how"] == "forked")
        .unwrap_or_else(|| panic!("no forked process: {text}"));
    assert_eq!(
        child["joined"]["before_uprobes"]["syscalls"], unseen,
        "{child:#}"
    );
    assert_eq!(child["joined"]["uprobe_gap_ms"], c["longest_gap_ms"]);
    let seen: u64 = a["alloc"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "malloc" && r["site"]["function"] == "trial_alloc")
        .map(|r| r["calls"].as_u64().unwrap())
        .sum();
    let truth = 3 * N;
    let predicted = covered * truth as f64;
    eprintln!(
        "fork gap: {gap:.2} ms, {unseen} syscalls before the uprobes, coverage {:.4}: \
         {seen} of {truth} mallocs seen, {predicted:.1} predicted",
        covered
    );
    assert!(
        (seen as f64 - predicted).abs() <= 6.0,
        "seen {seen}, predicted {predicted:.1} (coverage {covered}): {text}"
    );
    assert!(
        text.contains("forked during the window ran up to") && text.contains("(by syscalls)"),
        "{text}"
    );
}

/// haproxy reads its threads' CPU clocks with
/// `clock_gettime(CLOCK_THREAD_CPUTIME_ID)`, which the vDSO turns into a
/// syscall made from inside itself: those stacks ended at `[vdso]+0x…`,
/// incomplete. The vDSO's own unwind tables take them to the caller.
#[test]
fn a_clock_read_through_the_vdso_has_a_whole_stack_to_its_caller() {
    root_or_skip!();
    let _p = probes_shared();
    let s = Scratch::new("vdso");
    let server = Server::start(&["--cputime"]);
    let json = s.0.join("a.json");
    let (code, text, a) = rig(
        &[
            "attach",
            "--pid",
            &server.pid().to_string(),
            "--drive",
            &server.url(),
            "--requests",
            "300",
            "--probes",
            "syscalls",
        ],
        Some(&json),
    );
    assert_eq!(code, exit::OK, "{text}");
    let a = a.unwrap();
    assert_eq!(syscalls(&a, "clock_gettime"), 300, "{text}");
    let st = &a["stacks"];
    let mut counted = 0;
    for r in st["rows"].as_array().unwrap() {
        if r["event"] != "clock_gettime" {
            continue;
        }
        let s = &st["stacks"][r["stack"].as_str().unwrap()];
        let frames = s["frames"].as_array().unwrap();
        assert_eq!(s["incomplete"], serde_json::json!([]), "{s:#}");
        assert_eq!(frames[0]["module"], "[vdso]", "{s:#}");
        assert_eq!(frames[0]["function"], "__vdso_clock_gettime", "{s:#}");
        let user = &frames[s["user_site"].as_u64().unwrap() as usize];
        assert_eq!(user["function"], "trial_cputime", "{s:#}");
        counted += r["count"].as_u64().unwrap();
    }
    assert_eq!(counted, 300, "{text}");
}

/// A target killed mid-window: the window said `[TARGET EXITED]`, exit 0,
/// and counted the requests its dead connections never carried as sent
/// and failed. Now the window fails (exit 6), sent means sent, and the
/// rest are "never sent".
#[test]
fn a_target_that_dies_mid_window_fails_the_window_and_sends_no_more() {
    root_or_skip!();
    let _p = probes_shared();
    let s = Scratch::new("dies");
    // The warm-up takes 300 requests (200 before the probes, 100 under):
    // the server exits inside the window.
    let server = Server::start(&["--exit-after", "500"]);
    let json = s.0.join("a.json");
    let (code, text, a) = rig(
        &[
            "attach",
            "--pid",
            &server.pid().to_string(),
            "--drive",
            &server.url(),
            "--requests",
            "100000",
            "--probes",
            "syscalls",
        ],
        Some(&json),
    );
    assert_eq!(code, exit::CASE_FAILED, "{text}");
    let a = a.unwrap();
    assert_eq!(a["window"]["end"], "target_exited", "{text}");
    let l = &a["window"]["load"];
    let sent = l["sent"].as_u64().unwrap();
    let failed: u64 = l["errors"]
        .as_object()
        .unwrap()
        .values()
        .map(|v| v.as_u64().unwrap())
        .sum();
    let not_sent: u64 = l["not_sent"]
        .as_object()
        .map(|m| m.values().map(|v| v.as_u64().unwrap()).sum())
        .unwrap_or(0);
    assert_eq!(sent, l["succeeded"].as_u64().unwrap() + failed, "{l:#}");
    assert_eq!(sent + not_sent, 100_000, "{l:#}");
    // At most a few requests met the dying connections; the rest were
    // never sent.
    assert!(sent < 1000, "{l:#}");
    assert!(text.contains("never sent"), "{text}");
}

/// `--requests 100000000000` ran for days at the warm-up's rate (and was
/// still printing "sent" for requests it never sent after SIGINT). It is
/// refused after the warm-up, before any probe is attached, with the
/// estimate.
#[test]
fn a_window_that_cannot_finish_is_refused_from_the_warm_up_rate() {
    root_or_skip!();
    let server = Server::start(&[]);
    let (code, text, _) = rig(
        &[
            "attach",
            "--pid",
            &server.pid().to_string(),
            "--drive",
            &server.url(),
            "--requests",
            "100000000000",
            "--probes",
            "syscalls",
        ],
        None,
    );
    assert_eq!(code, exit::USAGE, "{text}");
    assert!(
        text.contains("--requests 100000000000: at the warm-up's rate"),
        "{text}"
    );
    assert!(!text.contains("probes attached"), "{text}");
}

/// The port-holder proof read all of /proc/net/tcp, every TIME_WAIT socket
/// included (131,072 after a load test): under socket churn one proof took
/// seconds, and nothing in it looked at SIGTERM. Hundreds of proofs while
/// two threads open and close sockets (and fill TIME_WAIT) all prove the
/// right holder; a hang would end the test at its own deadline.
#[test]
fn the_port_holder_proof_is_right_while_sockets_churn() {
    use rig::launch::port::{check_holder_on, HolderCheck, Transport};
    let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = l.local_addr().unwrap().port();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                // Each round holds ephemeral ports in TIME_WAIT for 60 s: a
                // slow machine's 300 proofs must not use up the range
                // (28,232 ports) for the tests beside it (a churn thread
                // failed so once, under load): 1000 rounds a thread, more
                // than an unloaded run's proofs take.
                let mut rounds = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) && rounds < 1000 {
                    let a = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
                    let c = std::net::TcpStream::connect(a.local_addr().unwrap()).unwrap();
                    let (s, _) = a.accept().unwrap();
                    // The accepted side closes first: TIME_WAIT piles up.
                    drop(s);
                    drop(c);
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    let me = std::process::id();
    let t0 = Instant::now();
    let mut slowest = Duration::ZERO;
    for i in 0..300 {
        let t = Instant::now();
        match check_holder_on(port, me, Transport::Tcp) {
            HolderCheck::Proven(p) => assert_eq!(p.holders, vec![me], "proof {i}"),
            other => panic!("proof {i}: {other:?}"),
        }
        slowest = slowest.max(t.elapsed());
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let rounds: u64 = churn.into_iter().map(|h| h.join().unwrap()).sum();
    eprintln!(
        "port proof: 300 proofs in {:?} (slowest {slowest:?}) beside {rounds} socket rounds",
        t0.elapsed()
    );
    drop(l);
}

/// rig attach with stderr read line by line as it comes, so a test can act
/// on a phase.
struct Watched {
    child: std::process::Child,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Watched {
    fn spawn(args: &[&str]) -> Watched {
        let mut child = Command::new(rig_bin())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let err = child.stderr.take().unwrap();
        let l = lines.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                l.lock().unwrap().push(line);
            }
        });
        Watched { child, lines }
    }

    fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Wait (a minute at most) for a stderr line containing `what`.
    fn wait_for(&self, what: &str) {
        let t0 = Instant::now();
        while !self.text().contains(what) {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "never said `{what}`:\n{}",
                self.text()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM, then the exit code and how long the exit took (a minute at
    /// most: then it is killed and the test fails).
    fn term(mut self) -> (i32, Duration, String) {
        let t0 = Instant::now();
        signal(self.child.id(), libc::SIGTERM);
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                std::thread::sleep(Duration::from_millis(50));
                return (st.code().unwrap_or(-1), t0.elapsed(), self.text());
            }
            if t0.elapsed() > Duration::from_secs(60) {
                let _ = self.child.kill();
                let _ = self.child.wait();
                return (-1, t0.elapsed(), self.text());
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// SIGTERM once rig attach was in a phase: a spin in the port proof once
/// ignored `timeout 120`'s SIGTERM for ten minutes (the signal thread set
/// the flag, the main thread never looked). In each phase, one that would
/// otherwise last a minute or more: attaching (seven families' programs
/// verified one by one), the warm-up (a server answering one byte per
/// 100 ms), a driven window of ten million requests, a timed window of a
/// minute, a load command that sleeps a minute (and is stopped with its
/// process group). Every one ends with exit 130 at once.
#[test]
fn sigterm_ends_every_phase_of_attach() {
    root_or_skip!();
    let _p = probes_shared();
    let fast = Server::start(&[]);
    let drip = Server::start(&["--drip-ms", "100"]);
    let pid = fast.pid().to_string();
    let url = fast.url();
    let drip_pid = drip.pid().to_string();
    let drip_url = drip.url();
    let phases: Vec<(&str, Vec<&str>, Option<&str>)> = vec![
        (
            "attaching",
            vec![
                "attach", "--pid", &pid, "--probes", "all", "--drive", &url, "--warmup", "0",
            ],
            None,
        ),
        (
            "warm-up",
            vec![
                "attach", "--pid", &drip_pid, "--probes", "syscalls", "--drive", &drip_url,
                "--warmup", "1000",
            ],
            Some("warming up"),
        ),
        (
            "driven window",
            vec![
                "attach",
                "--pid",
                &pid,
                "--probes",
                "syscalls",
                "--drive",
                &url,
                "--requests",
                "10000000",
            ],
            Some("probes attached"),
        ),
        (
            "timed window",
            vec![
                "attach",
                "--pid",
                &pid,
                "--probes",
                "syscalls",
                "--duration",
                "60s",
            ],
            Some("window open"),
        ),
        (
            "load command",
            vec![
                "attach", "--pid", &pid, "--probes", "syscalls", "--per", "1", "--", "sleep", "61",
            ],
            Some("window open"),
        ),
    ];
    for (phase, args, reached) in phases {
        let w = Watched::spawn(&args);
        match reached {
            Some(line) => {
                w.wait_for(line);
                // Into the phase the line opens.
                std::thread::sleep(Duration::from_millis(500));
            }
            None => std::thread::sleep(Duration::from_millis(300)),
        }
        let (code, took, text) = w.term();
        eprintln!(
            "sigterm: {phase}: exit {code} {} ms after SIGTERM",
            took.as_millis()
        );
        assert_eq!(code, exit::INTERRUPTED, "{phase}:\n{text}");
        assert!(took < Duration::from_secs(10), "{phase}: {took:?}\n{text}");
        if phase == "attaching" {
            assert!(!text.contains("window"), "{phase}: past attaching:\n{text}");
        }
    }
    // The load command's process group went with it.
    let left = std::process::Command::new("pgrep")
        .args(["-f", "^sleep 61$"])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "sleep 61 is still running");
}

/// `--drive https://` to a plain-HTTP port said `tls: received corrupt
/// message of type InvalidContentType`; to Redis, "closed before response".
/// Both now say what the port does speak.
#[test]
fn a_drive_to_a_port_that_speaks_otherwise_says_what_it_speaks() {
    root_or_skip!();
    let server = Server::start(&[]);
    let (code, text, _) = rig(
        &[
            "attach",
            "--pid",
            &server.pid().to_string(),
            "--probes",
            "syscalls",
            "--drive",
            &format!("https://127.0.0.1:{}/", server.port),
            "--insecure",
            "--request-timeout",
            "2s",
        ],
        None,
    );
    assert_ne!(code, exit::OK, "{text}");
    assert!(
        text.contains(&format!(
            "port {} answered plain HTTP (not TLS)",
            server.port
        )),
        "{text}"
    );
    let redis = super::redis::start_redis(None);
    let (code, text, _) = rig(
        &[
            "attach",
            "--pid",
            &redis.child.id().to_string(),
            "--probes",
            "syscalls",
            "--drive",
            &format!("http://127.0.0.1:{}/", redis.port),
        ],
        None,
    );
    assert_ne!(code, exit::OK, "{text}");
    assert!(text.contains("does not speak HTTP"), "{text}");
}

/// Every Go allocation reaches `runtime.mallocgc` through the runtime, so
/// the per-site table named `runtime.newobject+0x27` and
/// `runtime.makeslice+…` for nearly every row. Those rows are split by the
/// first frame outside the runtime: the fixture's four allocations per
/// request are at its own function, exactly.
#[test]
fn go_allocations_are_tabled_at_the_code_that_asked() {
    root_or_skip!();
    let _p = probes_shared();
    let s = Scratch::new("go-sites");
    let server = Server::start_program(&rig_fixtures::goserver(false), &[]);
    let json = s.0.join("a.json");
    const N: u64 = 1000;
    let (code, text, a) = rig(
        &[
            "attach",
            "--pid",
            &server.pid().to_string(),
            "--drive",
            &format!("http://127.0.0.1:{}/alloc", server.port),
            "--requests",
            &N.to_string(),
            "--probes",
            "alloc",
        ],
        Some(&json),
    );
    assert_eq!(code, exit::OK, "{text}");
    let a = a.unwrap();
    let rows = a["alloc"].as_array().unwrap();
    let at_main: u64 = rows
        .iter()
        .filter(|r| {
            r["site"]["function"]
                .as_str()
                .is_some_and(|f| f.starts_with("main."))
        })
        .map(|r| r["calls"].as_u64().unwrap())
        .sum();
    // go/COSTS.md: three makeslice and one newobject in main.goAllocs.
    assert_eq!(at_main, 4 * N, "{text}");
    let in_runtime: u64 = rows
        .iter()
        .filter(|r| {
            r["site"]["function"].as_str().is_some_and(|f| {
                f.starts_with("runtime.") && r["kind"] != "runtime.gcMarkTermination"
            })
        })
        .map(|r| r["calls"].as_u64().unwrap())
        .sum();
    assert!(
        in_runtime < N,
        "{in_runtime} allocations still at runtime callers: {text}"
    );
}

/// A probed Go server spent most of its samples in rig's own uprobe
/// handling (then single-stepping mallocgc's instruction in the
/// `[uprobes]` page), which the table showed as the server's hottest code
/// (`[uprobes]+0x84`). Samples in rig's probe handling (that page, or the
/// kernel's uprobe and BPF code on the kernel stack; since the probe sits
/// on an instruction the kernel emulates, the latter) are one row of their
/// own, "rig's probes", never a user site.
#[test]
fn cpu_samples_in_rigs_probe_handling_are_a_row_of_their_own() {
    root_or_skip!();
    let _p = probes_shared();
    let s = Scratch::new("rig-probes");
    let server = Server::start_program(&rig_fixtures::goserver(false), &[]);
    let json = s.0.join("a.json");
    let (code, text, a) = rig(
        &[
            "attach",
            "--pid",
            &server.pid().to_string(),
            "--drive",
            &format!("http://127.0.0.1:{}/alloc", server.port),
            "--requests",
            "2000",
            "--probes",
            "alloc,cpu",
        ],
        Some(&json),
    );
    assert_eq!(code, exit::OK, "{text}");
    let a = a.unwrap();
    let st = &a["stacks"];
    let mut in_probes = 0;
    for r in st["rows"].as_array().unwrap() {
        if r["family"] != "cpu" {
            continue;
        }
        let first = r["stack"]
            .as_str()
            .and_then(|id| st["stacks"][id]["frames"].as_array())
            .and_then(|f| f.first())
            .map(|f| f["module"].clone());
        if first == Some(Value::from("[uprobes]")) {
            assert_eq!(r["rig_probes"], true, "{r:#}");
        }
        if r["rig_probes"] == true {
            in_probes += r["count"].as_u64().unwrap();
        }
    }
    assert!(in_probes > 0, "no sample in rig's probe handling: {text}");
    assert_eq!(a["cpu"]["rig_probes"].as_u64().unwrap(), in_probes);
    assert!(text.contains("rig's probes (uprobe handling"), "{text}");
    assert!(!text.contains("[uprobes]+0x"), "{text}");
}
