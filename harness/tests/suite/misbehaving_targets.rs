//! Targets that misbehave, on purpose (`fixtures/trial/trial_server.c`,
//! one way per flag) or by nature: answers that drip, interim, chunked,
//! gzip or LF-only answers, servers that close, crash, daemonize, exec,
//! fork or stop, zombies, an io_uring server, other traffic in a window.
//! Each test says what rig must do, and every run is audited afterwards
//! ([`super::audit::audit`]): nothing of it is left. Times are bounded only
//! to catch a hang; none is asserted.

use super::scratch::{
    alive, children_of, finish, is_calib, rig, signal, start_run, wait_for_target, Scratch,
    LONG_MATRIX,
};
use super::trial_server::{
    attach, attach_probes, matrix, syscalls, tag, trial_run, trial_spec, Server,
};
use super::{probes_shared, repo, rig_bin};
use rig::exit;
use serde_json::Value;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    let (code, _, err) = rig(&["attach", "--pid", &pid.to_string(), "--duration", "1s"]);
    child.wait().unwrap();
    assert_eq!(code, exit::NO_PROCESS, "{err}");
    assert!(err.contains("zombie"), "{err}");
    assert!(!err.contains("no process with pid"), "{err}");
}

/// A server that answers one byte per 100 ms (about 7 s a response), 5
/// requests at 5/s on 2 connections: with `request_timeout_ms = 500` every
/// request fails as `timeout` and the case fails at once; with the default
/// request timeout and `--case-timeout 6s` the case is cut at its deadline
/// and fails saying so; `attach --drive --request-timeout 300ms` fails its
/// warm-up with `timeout`. It ran past 180 s before.
#[test]
fn a_server_that_drips_its_answers_ends_its_case_on_time_with_timeouts() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-drip");
    let t = tag("drip");
    let target = trial_spec(&s, "t.toml", &["--drip-ms", "100"], &t);
    let suite = "rates = [5]";
    let m = matrix(&s, "m.toml", "request_timeout_ms = 500", suite);
    let r = trial_run(
        &s,
        "out-timeout",
        &[&target],
        &m,
        &["--probes", "syscalls"],
        &t,
    );
    assert_eq!(r.code, exit::CASE_FAILED, "{}", r.text());
    let c = &r.cases[0];
    assert_eq!(c["status"], "failed", "{c:#}");
    assert_eq!(c["request_timeout_ms"], 500);
    let errors = &c["clean"]["load"]["errors"];
    assert!(errors["timeout"].as_u64().unwrap() >= 1, "{errors:#}");
    assert_eq!(c["clean"]["load"]["succeeded"], 0, "{c:#}");

    let m = matrix(&s, "m2.toml", "", suite);
    let r = trial_run(
        &s,
        "out-deadline",
        &[&target],
        &m,
        &["--case-timeout", "6s"],
        &t,
    );
    assert_eq!(r.code, exit::CASE_FAILED, "{}", r.text());
    let c = &r.cases[0];
    assert_eq!(c["case_timeout_ms"], 6000);
    let reasons = c["reasons"].to_string();
    assert!(
        reasons.contains("timed out: the case did not finish within case_timeout_ms = 6000"),
        "{reasons}"
    );
    assert!(
        reasons.contains("timeout"),
        "a request cut short: {reasons}"
    );

    let server = Server::start(&["--drip-ms", "100"]);
    let (code, text, _) = attach(
        &s,
        "attach",
        server.pid(),
        &["--drive", &server.url(), "--request-timeout", "300ms"],
    );
    assert_eq!(code, exit::ERROR, "{text}");
    assert!(text.contains("\"timeout\""), "{text}");
}

/// `--drive https://` to a plaintext server: the TLS handshake is bounded
/// by the request timeout (exit 1, saying the server never answered the
/// ClientHello), and a SIGINT during it ends rig at once (exit 130). It
/// hung 69 minutes, deaf to SIGINT and SIGTERM.
#[test]
fn drive_https_to_a_plaintext_server_is_a_handshake_timeout_and_obeys_sigint() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-https");
    let server = Server::start(&[]);
    let url = format!("https://127.0.0.1:{}/", server.port);
    let (code, text, _) = attach(
        &s,
        "timeout",
        server.pid(),
        &["--drive", &url, "--insecure", "--request-timeout", "1s"],
    );
    assert_eq!(code, exit::ERROR, "{text}");
    assert!(text.contains("never answered the ClientHello"), "{text}");
    for sig in [libc::SIGINT, libc::SIGTERM] {
        let child = Command::new(rig_bin())
            .args(["attach", "--pid", &server.pid().to_string()])
            .args(["--probes", "syscalls", "--drive", &url, "--insecure"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Inside the 10 s handshake.
        std::thread::sleep(Duration::from_millis(1500));
        let t0 = Instant::now();
        signal(child.id(), sig);
        let (code, out, err) = finish(child);
        eprintln!(
            "signal {sig} in the handshake: exit {code} {:?} after",
            t0.elapsed()
        );
        assert_eq!(code, exit::INTERRUPTED, "{out}\n{err}");
    }
}

/// 103 Early Hints before each 200, chunked bodies and gzip bodies (sent
/// unasked: a request without Accept-Encoding accepts any): every request
/// succeeds, in `rig run` and in `attach --drive`. The 103 and the gzip
/// bodies were failures.
#[test]
fn interim_chunked_and_gzip_answers_are_answers_not_failures() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-framing");
    let t = tag("framing");
    let m = matrix(&s, "m.toml", "", "");
    for (name, flags) in [
        ("hints", &["--early-hints"][..]),
        ("chunked", &["--chunked"][..]),
        ("gzip", &["--gzip"][..]),
        ("all", &["--early-hints", "--chunked", "--gzip"][..]),
    ] {
        let target = trial_spec(&s, &format!("{name}.toml"), flags, &t);
        let r = trial_run(&s, name, &[&target], &m, &["--probes", "syscalls"], &t);
        assert_eq!(r.code, exit::OK, "{name}: {}", r.text());
        let c = &r.cases[0];
        for pass in ["clean", "counted"] {
            let load = &c[pass]["load"];
            assert_eq!(
                load["errors"],
                serde_json::json!({}),
                "{name} {pass}: {load:#}"
            );
            assert!(load["succeeded"].as_u64().unwrap() > 0, "{name} {pass}");
        }
        let server = Server::start(flags);
        let (code, text, a) = attach(
            &s,
            name,
            server.pid(),
            &["--drive", &server.url(), "--requests", "200"],
        );
        assert_eq!(code, exit::OK, "{name}: {text}");
        assert_eq!(a.unwrap()["window"]["load"]["succeeded"], 200, "{name}");
    }
}

/// Lines that end in LF alone: each answer is malformed at once (`parse:
/// a line ends in LF without CR`), not a 10 s timeout.
#[test]
fn lf_only_answers_are_malformed_at_once_not_timeouts() {
    root_or_skip!();
    let s = Scratch::new("trial-lf");
    let t = tag("lf");
    let target = trial_spec(&s, "t.toml", &["--lf-only"], &t);
    let m = matrix(&s, "m.toml", "", "");
    let r = trial_run(&s, "out", &[&target], &m, &["--passes", "clean"], &t);
    assert_eq!(r.code, exit::CASE_FAILED, "{}", r.text());
    let errors = r.cases[0]["clean"]["load"]["errors"].as_object().unwrap();
    assert!(
        errors.keys().all(|k| k.contains("LF without CR")),
        "{errors:?}"
    );
    assert!(!errors.is_empty());
}

/// A server that answers `Connection: close` on every response, and one
/// that speaks HTTP/1.0: a `ka` case is measured (status ok) with a
/// warning that it made one TCP handshake per request, counted exactly.
#[test]
fn keep_alive_cases_against_servers_that_close_say_so_and_count_the_handshakes() {
    root_or_skip!();
    let s = Scratch::new("trial-close");
    let t = tag("close");
    let m = matrix(&s, "m.toml", "", "");
    for (name, flag) in [("close", "--close"), ("http10", "--http10")] {
        let target = trial_spec(&s, &format!("{name}.toml"), &[flag], &t);
        let r = trial_run(&s, name, &[&target], &m, &["--passes", "clean"], &t);
        assert_eq!(r.code, exit::OK, "{name}: {}", r.text());
        let c = &r.cases[0];
        assert_eq!(c["status"], "ok", "{c:#}");
        let load = &c["clean"]["load"];
        let sent = load["sent"].as_u64().unwrap();
        assert_eq!(load["handshakes"]["tcp"], sent, "{name}: {load:#}");
        let w = c["warnings"][0].as_str().unwrap_or_default();
        assert!(
            w.contains(&format!("{sent} TCP handshakes for {sent} requests")),
            "{name}: {:#}",
            c["warnings"]
        );
        assert!(
            r.out.contains("warning: clean pass: a keep-alive case"),
            "{}",
            r.out
        );
    }
}

/// A target killed by SIGABRT after 50 requests, and one that exits with
/// code 3: each case fails naming the signal or the code; the run goes on.
#[test]
fn a_target_that_crashes_or_exits_mid_case_is_named_by_its_signal_or_code() {
    root_or_skip!();
    let s = Scratch::new("trial-crash");
    let t = tag("crash");
    let crash = trial_spec(&s, "crash.toml", &["--crash-after", "50"], &t);
    let exits = trial_spec(&s, "exits.toml", &["--exit-after", "50"], &t);
    let m = matrix(&s, "m.toml", "", "");
    for (target, why) in [
        (
            &crash,
            "the target exited during the case (killed by signal 6 (SIGABRT)",
        ),
        (
            &exits,
            "the target exited during the case (exited with code 3)",
        ),
    ] {
        let r = trial_run(&s, "out", &[target], &m, &["--passes", "clean"], &t);
        assert_eq!(r.code, exit::CASE_FAILED, "{}", r.text());
        assert!(
            r.cases[0]["reasons"].to_string().contains(why),
            "{:#}",
            r.cases[0]["reasons"]
        );
        std::fs::remove_dir_all(s.0.join("out")).unwrap();
    }
}

/// A target that forks into the background (the parent exits 0 at once,
/// its child holds the port): refused as a daemonizing target, with the
/// fix; its daemon is removed with its cgroup (the audit).
#[test]
fn a_daemonizing_target_is_recognized_and_its_daemon_removed() {
    root_or_skip!();
    let s = Scratch::new("trial-daemon");
    let t = tag("daemon");
    let target = trial_spec(&s, "t.toml", &["--daemonize"], &t);
    let m = matrix(&s, "m.toml", "", "");
    let r = trial_run(&s, "out", &[&target], &m, &["--passes", "clean"], &t);
    assert_eq!(r.code, exit::CASE_FAILED, "{}", r.text());
    let reasons = r.cases[0]["reasons"].to_string();
    assert!(
        reasons.contains("exited with code 0 after it started"),
        "{reasons}"
    );
    assert!(reasons.contains("the target daemonized"), "{reasons}");
    assert!(
        reasons.contains("run the server in the foreground"),
        "{reasons}"
    );
}

/// A target whose stderr retitles and clears the terminal: rig's messages
/// carry its stderr escaped (`\x1b]0;…`), never the raw bytes.
#[test]
fn a_targets_escape_sequences_are_escaped_in_rigs_output() {
    root_or_skip!();
    let s = Scratch::new("trial-esc");
    let t = tag("esc");
    let target = trial_spec(&s, "t.toml", &["--stderr-esc", "--exit-after", "5"], &t);
    let m = matrix(&s, "m.toml", "", "");
    let r = trial_run(&s, "out", &[&target], &m, &["--passes", "clean"], &t);
    assert_eq!(r.code, exit::CASE_FAILED, "{}", r.text());
    let all = r.text();
    assert!(all.contains("\\x1b]0;trial_server was here\\x07"), "{all}");
    assert!(!all.contains('\u{1b}'), "a raw ESC reached rig's output");
    assert!(!all.contains('\u{7}'), "a raw BEL reached rig's output");
}

/// A target that replaces its program (execve of itself, on the same
/// listening socket) in the middle of a driven window: the window is
/// INCOMPLETE (exit 5), every family says why.
#[test]
fn a_target_that_execs_during_a_window_is_reported_incomplete() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-exec");
    // 100 warm-up requests before the probes and 100 under them; the exec
    // comes at request 251, inside the window of 400.
    let server = Server::start(&["--exec-after", "250"]);
    let (code, text, a) = attach(
        &s,
        "exec",
        server.pid(),
        &[
            "--drive",
            &server.url(),
            "--warmup",
            "100",
            "--requests",
            "400",
            "--connections",
            "1",
        ],
    );
    assert_eq!(code, exit::INCOMPLETE, "{text}");
    let a = a.unwrap();
    assert_eq!(a["complete"], false);
    let warnings = a["window"]["warnings"].to_string();
    assert!(
        warnings.contains("replaced its program during the window"),
        "{warnings}"
    );
    assert!(
        a["losses"]["syscalls"].to_string().contains("execve"),
        "{:#}",
        a["losses"]
    );
}

/// A server that forks a process per connection, and one with 500 more
/// threads: a driven window follows the tree (or every thread) and counts
/// exactly one `sendto` per request (the server's one send per answer).
#[test]
fn forking_and_500_thread_servers_are_counted_exactly() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-tree");
    for (name, flags) in [
        ("fork", &["--fork"][..]),
        ("threads", &["--threads", "500"][..]),
    ] {
        let server = Server::start(flags);
        let (code, text, a) = attach(
            &s,
            name,
            server.pid(),
            &["--drive", &server.url(), "--requests", "1000"],
        );
        assert_eq!(code, exit::OK, "{name}: {text}");
        let a = a.unwrap();
        assert_eq!(syscalls(&a, "sendto"), 1000, "{name}: {:#}", a["syscalls"]);
        if name == "fork" {
            // The parent and a child per connection (2).
            assert_eq!(
                a["processes"].as_array().unwrap().len(),
                3,
                "{:#}",
                a["processes"]
            );
        }
    }
}

/// A server whose accepts, receives and sends are io_uring operations
/// (liburing): its one I/O syscall is io_uring_enter, at a rate that moves
/// with timing. rig counts its allocations and copies exactly per request
/// (one malloc(64) + free, one 70-byte memcpy, by construction), with the
/// handler's file:line, and says that the syscall table holds only the
/// submissions and waits: the reads and writes themselves are not in it.
#[test]
fn an_io_uring_server_is_exact_and_its_syscall_table_says_what_it_leaves_out() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-uring");
    let server = Server::start_program(rig_fixtures::uring_server(), &[]);
    let (code, text, a) = attach_probes(
        &s,
        "uring",
        server.pid(),
        "syscalls,alloc,copy",
        &["--drive", &server.url(), "--requests", "1000"],
    );
    assert_eq!(code, exit::OK, "{text}");
    let a = a.unwrap();
    assert_eq!(a["complete"], true, "{:#}", a["losses"]);
    let t = &a["alloc_totals"];
    assert_eq!(
        (
            t["allocations"].as_i64(),
            t["bytes"].as_i64(),
            t["frees"].as_i64()
        ),
        (Some(1000), Some(64_000), Some(1000)),
        "{t:#}"
    );
    // The malloc's site is the handler's line, read from the source.
    let src = std::fs::read_to_string(repo().join("fixtures/trial/uring_server.c")).unwrap();
    let line = src
        .lines()
        .position(|l| l.contains("= malloc(ALLOC_BYTES)"))
        .unwrap() as i64
        + 1;
    let malloc = a["alloc"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["kind"] == "malloc")
        .unwrap();
    assert_eq!(malloc["site"]["function"], "handle", "{malloc:#}");
    assert_eq!(malloc["site"]["line"].as_i64(), Some(line), "{malloc:#}");
    let copied: i64 = a["copy"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["bytes"].as_i64())
        .sum();
    assert_eq!(copied, 70_000, "{:#}", a["copy"]);
    // The only I/O syscall is io_uring_enter; no read, write, accept or
    // send reached the kernel as a syscall.
    assert!(syscalls(&a, "io_uring_enter") > 0, "{:#}", a["syscalls"]);
    for name in ["read", "write", "recvfrom", "sendto", "accept4", "accept"] {
        assert_eq!(syscalls(&a, name), 0, "{name}: {:#}", a["syscalls"]);
    }
    let note = a["io_uring"].as_str().unwrap_or_default();
    assert!(note.contains("not in this table"), "{:#}", a);
    assert!(text.contains("note: io_uring:"), "{text}");
}

/// Two `rig attach` sessions on one pid at once, one driven (1000
/// requests) and one timed: each counts its own window; the driven one
/// still sees exactly 1000 sendto calls.
#[test]
fn two_attach_sessions_on_one_pid_count_their_own_windows() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-two");
    let server = Server::start(&[]);
    let timed_json = s.0.join("timed.json");
    let timed = Command::new(rig_bin())
        .args(["attach", "--pid", &server.pid().to_string()])
        .args(["--probes", "syscalls", "--duration", "8s", "--json"])
        .arg(&timed_json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The timed window opens first.
    std::thread::sleep(Duration::from_secs(2));
    let (code, text, a) = attach(
        &s,
        "driven",
        server.pid(),
        &["--drive", &server.url(), "--requests", "1000"],
    );
    let (tcode, tout, terr) = finish(timed);
    assert_eq!(code, exit::OK, "{text}");
    assert_eq!(syscalls(&a.unwrap(), "sendto"), 1000);
    assert_eq!(tcode, exit::OK, "{tout}\n{terr}");
    let t: Value = serde_json::from_slice(&std::fs::read(&timed_json).unwrap()).unwrap();
    assert_eq!(t["complete"], true, "{:#}", t["losses"]);
    // It saw the driven session's warm-ups and window, if any of them.
    assert!(syscalls(&t, "sendto") <= 1000 + 400, "{:#}", t["syscalls"]);
}

/// A stopped target (SIGSTOP): a driven window is refused at once (its
/// load could only time out), a timed one says the target was stopped.
#[test]
fn a_stopped_target_is_refused_for_a_driven_window_and_said_for_a_timed_one() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-stopped");
    let server = Server::start(&[]);
    signal(server.pid(), libc::SIGSTOP);
    let (code, text, _) = attach(&s, "driven", server.pid(), &["--drive", &server.url()]);
    let (tcode, ttext, t) = attach(&s, "timed", server.pid(), &["--duration", "1s"]);
    signal(server.pid(), libc::SIGCONT);
    assert_eq!(code, exit::ERROR, "{text}");
    assert!(text.contains("is stopped (SIGSTOP"), "{text}");
    assert_eq!(tcode, exit::OK, "{ttext}");
    let warnings = t.unwrap()["window"]["warnings"].to_string();
    assert!(warnings.contains("is stopped"), "{warnings}");
}

/// Another client sends requests to the target while a `--drive` window
/// is open: the window's counts are not one request's, so `attach` says
/// so (`window.other_traffic`, a warning) and exits 5; the same window
/// without that client is complete.
#[test]
fn other_traffic_in_a_driven_window_makes_it_incomplete() {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("trial-other");
    let server = Server::start(&[]);
    let (code, text, a) = attach(
        &s,
        "alone",
        server.pid(),
        &["--drive", &server.url(), "--requests", "300"],
    );
    assert_eq!(code, exit::OK, "{text}");
    let a = a.unwrap();
    assert!(a["window"]["other_traffic"].is_null(), "{:#}", a["window"]);
    assert_eq!(a["complete"], true);

    let stop = Arc::new(AtomicBool::new(false));
    let port = server.port;
    let other = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut c = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = [0u8; 4096];
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                c.write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    .unwrap();
                let _ = c.read(&mut buf).unwrap();
                sent += 1;
                std::thread::sleep(Duration::from_millis(2));
            }
            sent
        })
    };
    let (code, text, a) = attach(
        &s,
        "shared",
        server.pid(),
        &["--drive", &server.url(), "--requests", "1000"],
    );
    stop.store(true, Ordering::Relaxed);
    let sent = other.join().unwrap();
    assert!(sent > 0, "the other client sent requests");
    assert_eq!(code, exit::INCOMPLETE, "{text}");
    assert!(text.contains("OTHER TRAFFIC"), "{text}");
    let a = a.unwrap();
    assert_eq!(a["complete"], false);
    assert!(
        !a["window"]["other_traffic"]["client_ports"]
            .as_array()
            .expect("the other client's port is named")
            .is_empty(),
        "{:#}",
        a["window"]
    );
}
