//! Windows tied to the load: `rig attach --pid P -- COMMAND` opens the
//! window, runs the command, closes the window when it exits, records the
//! command and its exit status, and takes the request count from the
//! output of the load tools it knows. Duration windows whose target was
//! idle, or whose load outlasted them, are warned about.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::{calib, probes_shared, rig_bin};
use rig::exit;

/// A tool the test needs: present, else skipped (never in CI).
fn have(tool: &str, package: &str) -> bool {
    super::required(
        "command",
        tool,
        super::on_path(tool, &[]),
        &format!("scripts/deps.sh installs {package}"),
    )
    .is_some()
}

/// `rig attach --pid PID --json F ARGS`: exit code, stderr, attribution.
fn attach(pid: u32, args: &[&str]) -> (i32, String, Value) {
    let json = std::env::temp_dir().join(format!(
        "rig-command-{}-{}.json",
        std::process::id(),
        args.len() * 31 + args.first().map_or(0, |a| a.len())
    ));
    let _ = std::fs::remove_file(&json);
    let out = Command::new(rig_bin())
        .args(["attach", "--pid", &pid.to_string()])
        .args(["--json", json.to_str().unwrap()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let a = std::fs::read(&json)
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap_or_else(|e| panic!("no attribution ({e}): {err}"));
    let _ = std::fs::remove_file(&json);
    (out.status.code().unwrap_or(-1), err, a)
}

/// Calls of `kind` at `function`, summed over its rows.
fn alloc_calls(a: &Value, function: &str, kind: &str) -> u64 {
    a["alloc"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == kind && r["site"]["function"] == function && r["inner"] == false)
        .map(|r| r["calls"].as_u64().unwrap())
        .sum()
}

fn warnings(a: &Value) -> Vec<String> {
    a["window"]["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_command_window_takes_h2loads_count_and_holds_exactly_its_requests() {
    root_or_skip!();
    if !have("h2load", "nghttp2-client") {
        return;
    }
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    let url = format!("http://127.0.0.1:{}/calib", target.port);
    let (code, err, a) = attach(
        target.pid(),
        &[
            "--probes", "alloc", "--", "h2load", "--h1", "-n", "2000", "-c", "1", &url,
        ],
    );
    assert_eq!(code, exit::OK, "{err}");
    let cmd = &a["window"]["command"];
    assert_eq!(cmd["argv"][0], "h2load");
    assert_eq!(cmd["exit_code"], 0);
    assert_eq!(cmd["count"]["tool"], "h2load");
    assert_eq!(a["window"]["requests"], 2000);
    assert!(
        cmd["count"]["evidence"][0]
            .as_str()
            .unwrap()
            .starts_with("requests: 2000 total, 2000 started, 2000 done, 2000 succeeded"),
        "{cmd}"
    );
    // The window opened before the first request and closed after the
    // last: calib_alloc_small's three mallocs, exactly, for every request
    // h2load counted (fixtures/calib/COSTS.md).
    assert_eq!(alloc_calls(&a, "calib_alloc_small", "malloc"), 3 * 2000);
    assert_eq!(alloc_calls(&a, "calib_alloc_small", "free"), 3 * 2000);
    assert!(warnings(&a).is_empty(), "{:?}", warnings(&a));
}

#[test]
fn a_command_window_records_a_failing_command_and_says_why_it_has_no_count() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "1"]);
    let (code, err, a) = attach(
        target.pid(),
        &["--probes", "syscalls", "--", "sh", "-c", "exit 3"],
    );
    // The window itself is complete; the warnings say what went wrong.
    assert_eq!(code, exit::OK, "{err}");
    let cmd = &a["window"]["command"];
    assert_eq!(cmd["argv"], serde_json::json!(["sh", "-c", "exit 3"]));
    assert_eq!(cmd["exit_code"], 3);
    assert!(
        cmd["count_error"]
            .as_str()
            .unwrap()
            .starts_with("`sh` is not a load tool rig reads"),
        "{cmd}"
    );
    assert_eq!(a["window"]["requests"], Value::Null);
    let w = warnings(&a);
    assert!(
        w.iter()
            .any(|w| w.starts_with("the target was (nearly) idle")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w == "the load command ended with exit status 3: its requests may have failed"),
        "{w:?}"
    );
}

#[test]
fn a_duration_window_warns_when_the_target_was_idle_or_the_load_outlasted_it() {
    root_or_skip!();
    if !have("h2load", "nghttp2-client") {
        return;
    }
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    let (_, err, a) = attach(
        target.pid(),
        &["--probes", "syscalls", "--duration", "700ms"],
    );
    let w = warnings(&a);
    assert!(
        w.iter()
            .any(|w| w.starts_with("the target was (nearly) idle")),
        "{w:?} {err}"
    );

    // A load that runs before, through and after the window.
    let url = format!("http://127.0.0.1:{}/calib", target.port);
    let mut load = Command::new("h2load")
        .args(["--h1", "-c", "2", "-D", "6", &url])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (_, err, a) = attach(
        target.pid(),
        &[
            "--probes",
            "syscalls",
            "--duration",
            "1500ms",
            "--per",
            "1000",
        ],
    );
    // The test started h2load: it may stop it.
    let _ = load.kill();
    let _ = load.wait();
    // Which edges look busy depends on how the shared cores were loaded
    // in that second (the exact edge rules are unit-tested on hand-made
    // slices in session::activity); a window inside a longer load must be
    // called out at one edge at least.
    let w = warnings(&a);
    assert!(
        w.iter().any(
            |w| (w.starts_with("the target was already busy when the window opened")
                || w.starts_with("the target was still busy when the window closed"))
                && w.contains("the load and the window are not the same interval")
        ),
        "{w:?} {err}"
    );
}

#[test]
fn a_command_window_takes_redis_benchmarks_count() {
    root_or_skip!();
    if !have("redis-server", "redis-server") || !have("redis-benchmark", "redis-tools") {
        return;
    }
    let _g = probes_shared();
    let dir = std::env::temp_dir().join(format!("rig-command-redis-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("redis.sock");
    // A unix socket: no port to hold.
    let mut server = Command::new("redis-server")
        .args(["--port", "0", "--save", "", "--appendonly", "no"])
        .arg("--unixsocket")
        .arg(&sock)
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    for _ in 0..200 {
        if Path::new(&sock).exists() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let s = sock.to_str().unwrap();
    let (code, err, a) = attach(
        server.id(),
        &[
            "--probes",
            "syscalls",
            "--",
            "redis-benchmark",
            "-s",
            s,
            "-n",
            "5000",
            "-c",
            "1",
            "-t",
            "get",
            "-P",
            "1",
        ],
    );
    let _ = server.kill();
    let _ = server.wait();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(code, exit::OK, "{err}");
    assert_eq!(a["window"]["requests"], 5000);
    let ev = a["window"]["command"]["count"]["evidence"].to_string();
    assert!(ev.contains("GET: 5000 requests completed in"), "{ev}");
}
