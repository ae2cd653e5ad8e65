//! Probes a user names: what `rig probes` lists of a running process,
//! against binutils' reading of the same files.

use std::process::{Command, Stdio};

use super::rig_bin;

/// Debian's python3.11 (the machine's python3) carries CPython's USDT
/// markers, semaphore-guarded. `rig probes --pid P 'python:*'` lists each
/// marker readelf lists, with its semaphore and arguments; a function
/// pattern lists libc's functions by module; a pattern matching nothing
/// says so, offering the nearest name when one is near.
#[test]
fn rig_probes_lists_a_running_pythons_markers_as_readelf_reads_them() {
    let python = PYTHON;
    let py = Python::start();
    let pid = py.0.id().to_string();
    let probes = |pattern: &str| {
        let out = Command::new(rig_bin())
            .args(["probes", "--pid", &pid, pattern])
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let listed = probes("python:*");
    let notes = Command::new("readelf")
        .args(["-n", python])
        .output()
        .unwrap();
    let notes = String::from_utf8_lossy(&notes.stdout);
    // Each note as readelf prints it: Name, Location/Semaphore, Arguments.
    let field = |key: &str| -> Vec<String> {
        notes
            .lines()
            .filter_map(|l| l.split(key).nth(1))
            .map(|v| v.trim().to_string())
            .collect()
    };
    let (names, semaphores, args) = (field("Name: "), field("Semaphore: "), field("Arguments:"));
    assert!(names.len() >= 8, "{notes}");
    assert_eq!(
        (names.len(), args.len()),
        (semaphores.len(), semaphores.len())
    );
    let usdt: Vec<&str> = listed.lines().filter(|l| l.starts_with("usdt ")).collect();
    assert_eq!(usdt.len(), names.len(), "{listed}");
    for ((name, sema), args) in names.iter().zip(&semaphores).zip(&args) {
        let line = usdt
            .iter()
            .find(|l| l.starts_with(&format!("usdt python:{name} ")))
            .unwrap_or_else(|| panic!("python:{name} not listed:\n{listed}"));
        let sema = u64::from_str_radix(sema.trim_start_matches("0x"), 16).unwrap();
        assert!(line.contains(python), "{line}");
        assert!(line.contains(&format!("semaphore {sema:#x}")), "{line}");
        assert!(line.ends_with(&format!("args: {args}")), "{line}");
    }

    let funcs = probes("libc.so.6!malloc");
    assert!(
        funcs
            .lines()
            .any(|l| l.starts_with("func ") && l.ends_with("libc.so.6!malloc")),
        "{funcs}"
    );
    assert!(funcs.contains("1 function(s) match it"), "{funcs}");
    let typo = probes("python:functon__entry");
    assert!(
        typo.contains("0 USDT marker(s)") && typo.contains("closest: `python:function__entry`"),
        "{typo}"
    );
    let none = probes("nosuch:marker*");
    assert!(
        none.contains("0 USDT marker(s)") && none.contains("0 function(s) match it"),
        "{none}"
    );
    drop(py);
}

/// Python 3.11 started by the test, stopped when dropped (SIGKILL: rig's
/// tests never leave a process behind), once it has mapped libc.
struct Python(std::process::Child);

const PYTHON: &str = "/usr/bin/python3.11";

impl Python {
    fn start() -> Python {
        let child = Command::new(PYTHON)
            .args(["-c", "import sys; sys.stdin.read()"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("Debian 12's python3.11");
        let pid = child.id();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !std::fs::read_to_string(format!("/proc/{pid}/maps"))
            .unwrap_or_default()
            .contains("libc.so.6")
        {
            assert!(
                std::time::Instant::now() < deadline,
                "python never mapped libc"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Python(child)
    }
}

impl Drop for Python {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The helper [`a_usdt_semaphore_is_the_kernels_reference_count_and_falls_back_when_its_holder_is_killed`]
/// runs as a process of its own: with `RIG_TEST_HOLD=PID:OFFSET:SEMAPHORE`
/// it opens that uprobe in PID, says `held` and waits to be killed;
/// without it, as in any run of the suite, it does nothing.
#[test]
fn hold_a_guarded_uprobe_until_killed() {
    let Ok(spec) = std::env::var("RIG_TEST_HOLD") else {
        return;
    };
    let f: Vec<u64> = spec.split(':').map(|v| v.parse().unwrap()).collect();
    let _held = rig::probe::usdt::GuardedUprobe::open(
        std::path::Path::new(PYTHON),
        f[1],
        f[2],
        f[0] as u32,
    )
    .unwrap();
    println!("held");
    std::thread::sleep(std::time::Duration::from_secs(600));
}

/// CPython's `python:function__entry` is guarded by a semaphore. While a
/// uprobe at the marker is open, the kernel holds it raised (one count per
/// process the uprobe is installed in, however many consumers share it:
/// 1 with two open); when the last closes it falls back to 0; and when the
/// process holding one is killed with SIGKILL, it falls back too: rig
/// never leaves a target's marker raised.
#[test]
fn a_usdt_semaphore_is_the_kernels_reference_count_and_falls_back_when_its_holder_is_killed() {
    root_or_skip!();
    use rig::probe::usdt::GuardedUprobe;
    let py = Python::start();
    let pid = py.0.id();
    let markers = rig::elf::usdt::markers(std::path::Path::new(PYTHON)).unwrap();
    let m = markers
        .0
        .iter()
        .find(|m| m.provider == "python" && m.name == "function__entry")
        .expect("python:function__entry");
    let sema = m.semaphore.expect("a guarded marker");
    let sema_offset = sema.file_offset.unwrap();
    let maps = rig::process::maps::ProcMaps::read(pid).unwrap();
    let facts = rig::elf::ElfFacts::shared(std::path::Path::new(PYTHON)).unwrap();
    let addr = rig::elf::load_base(&maps, PYTHON, &facts).unwrap() + sema.vaddr;
    let value = || {
        use std::os::unix::fs::FileExt;
        let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
        let mut b = [0u8; 2];
        mem.read_exact_at(&mut b, addr).unwrap();
        u16::from_le_bytes(b)
    };
    let file = std::path::Path::new(PYTHON);
    assert_eq!(value(), 0, "nothing raised it yet");
    let a = GuardedUprobe::open(file, m.file_offset, sema_offset, pid).unwrap();
    assert_eq!(value(), 1);
    let b = GuardedUprobe::open(file, m.file_offset, sema_offset, pid).unwrap();
    assert_eq!(value(), 1, "one uprobe, two consumers");
    drop(a);
    assert_eq!(value(), 1, "b still holds it");
    drop(b);
    assert_eq!(value(), 0);

    let mut holder = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "suite::user_probes::hold_a_guarded_uprobe_until_killed",
            "--nocapture",
        ])
        .env(
            "RIG_TEST_HOLD",
            format!("{pid}:{}:{sema_offset}", m.file_offset),
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(holder.stdout.take().unwrap());
    let mut line = String::new();
    while !line.starts_with("held") {
        line.clear();
        let n = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
        assert!(n > 0, "the holder exited before holding the uprobe");
    }
    assert_eq!(value(), 1, "raised by the holder");
    holder.kill().unwrap();
    holder.wait().unwrap();
    assert_eq!(value(), 0, "the kernel lowered it when the holder died");
}

/// Guarded markers of a shipped binary counted exactly per request: a
/// python whose "request" is one line on its stdin (read as bytes: no
/// Python-level decoding) calls `f` three times per line, so CPython's
/// `python:function__entry` fires three times per line, and its argument
/// 2, `f`'s first line (1), sums to 3 per line. CPython 3.11 fires
/// function__entry only while its line tracing is on (its `python:line`
/// semaphore raised), so both are named. rig raises the semaphores itself;
/// the load is a command writing the lines inside the window (`--per`
/// their count).
#[test]
fn a_guarded_python_marker_is_counted_per_request_with_its_argument_summed() {
    root_or_skip!();
    let _g = super::probes_shared();
    const LINES: u64 = 300;
    let mut py = Command::new(PYTHON)
        .args([
            "-c",
            "def f(x):\n    return x\nimport sys\nfor line in sys.stdin.buffer:\n    list(map(f, (1, 2, 3)))\n    print('ok', flush=True)\n",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("Debian 12's python3.11");
    let pid = py.id();
    // Warm: one line answered means the loop runs.
    use std::io::{BufRead, BufReader, Write};
    let mut stdin = py.stdin.take().unwrap();
    let mut out = BufReader::new(py.stdout.take().unwrap());
    stdin.write_all(b"warm\n").unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "ok\n");
    // Its answers are drained meanwhile, so it never blocks on stdout.
    let drain = std::thread::spawn(move || out.lines().count());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("a.json");
    let load = format!("for i in $(seq {LINES}); do echo x; done > /proc/{pid}/fd/0; sleep 0.5");
    let o = Command::new(rig_bin())
        .args(["attach", "--pid", &pid.to_string(), "--probes", "syscalls"])
        .args(["--per", &LINES.to_string()])
        .args([
            "--usdt",
            "python:function__entry@2",
            "--usdt",
            "python:line",
        ])
        .arg("--json")
        .arg(&json)
        .args(["--", "sh", "-c", &load])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let probe = a["user"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == "usdt:python:function__entry")
        .unwrap_or_else(|| panic!("{}", a["user"]));
    assert_eq!(probe["calls"], 3 * LINES, "{probe}");
    assert_eq!(probe["arg_sum"], 3 * LINES, "{probe}");
    assert!(
        text.contains("usdt:python:function__entry: 3 calls/req, argument 2 summed: 3.00/req"),
        "{text}"
    );
    let sites = probe["sites"].as_array().unwrap();
    assert_eq!(
        sites
            .iter()
            .map(|s| s["calls"].as_u64().unwrap())
            .sum::<u64>(),
        3 * LINES
    );
    drop(stdin);
    let _ = py.wait();
    assert_eq!(drain.join().unwrap() as u64, LINES);
}

/// Functions a user names, counted per request: each `calib_*` function the
/// calibration server calls once per `/calib` request (its COSTS.md) is
/// one call per request from `calib_request`; `calib_spin` (not called on
/// `/calib`) is listed with 0 calls; a pattern that matches nothing is
/// refused before any window, with the nearest name.
#[test]
fn named_functions_are_counted_per_request_by_caller() {
    root_or_skip!();
    let _g = super::probes_shared();
    let target = super::calib(&[]);
    let port = target.port.to_string();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("a.json");
    let o = Command::new(rig_bin())
        .args([
            "attach",
            "--pid",
            &target.pid().to_string(),
            "--probes",
            "syscalls",
        ])
        .args([
            "--drive",
            &format!("http://127.0.0.1:{port}/calib"),
            "--requests",
            "400",
        ])
        .args(["--func", "calib_alloc_*", "--func", "calib_spin", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let user = a["user"].as_array().unwrap();
    for f in [
        "calib_alloc_small",
        "calib_alloc_calloc",
        "calib_alloc_realloc",
        "calib_alloc_aligned",
    ] {
        let p = user
            .iter()
            .find(|p| p["probe"] == format!("func:{f}"))
            .unwrap_or_else(|| panic!("{f}: {user:?}"));
        assert_eq!(p["calls"], 400, "{p}");
        let sites = p["sites"].as_array().unwrap();
        assert_eq!(sites.len(), 1, "{p}");
        assert_eq!(sites[0]["site"]["function"], "calib_request", "{p}");
    }
    let spin = user
        .iter()
        .find(|p| p["probe"] == "func:calib_spin")
        .unwrap();
    assert_eq!(spin["calls"], 0);
    // IFUNCs, probed on the implementations this CPU chose: memcpy 5 and
    // memmove 1 per request (COSTS.md). Where both chose one, it is one
    // probe named by both, never two counting each call twice.
    let o = Command::new(rig_bin())
        .args([
            "attach",
            "--pid",
            &target.pid().to_string(),
            "--probes",
            "syscalls",
        ])
        .args([
            "--drive",
            &format!("http://127.0.0.1:{port}/calib"),
            "--requests",
            "200",
        ])
        .args([
            "--func",
            "libc.so.6!memcpy",
            "--func",
            "libc.so.6!memmove",
            "--json",
        ])
        .arg(dir.path().join("ifunc.json"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("ifunc.json")).unwrap()).unwrap();
    let user = a["user"].as_array().unwrap();
    let total: u64 = user.iter().map(|p| p["calls"].as_u64().unwrap()).sum();
    assert_eq!(total, 6 * 200, "{user:?}");
    if user.len() == 1 {
        assert_eq!(user[0]["probe"], "func:memcpy/memmove", "{user:?}");
    } else {
        let calls = |n: &str| user.iter().find(|p| p["probe"] == n).unwrap()["calls"].clone();
        assert_eq!(
            (calls("func:memcpy"), calls("func:memmove")),
            (1000.into(), 200.into())
        );
    }
    let o = Command::new(rig_bin())
        .args([
            "attach",
            "--pid",
            &target.pid().to_string(),
            "--probes",
            "syscalls",
        ])
        .args([
            "--drive",
            &format!("http://127.0.0.1:{port}/calib"),
            "--requests",
            "10",
        ])
        .args(["--func", "calib_alloc_smal"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--func calib_alloc_smal matches nothing")
            && err.contains("closest: `calib_alloc_small`"),
        "{err}"
    );
}

/// A target spec's `func = [...]` and a matrix's `[probes]` are counted in
/// every counted pass of `rig run`: the calibration server's
/// `calib_alloc_small` (the spec's) and `calib_copy_small` (the matrix's)
/// once per request
/// from `calib_request`, in the case's attribution, its counters (what
/// `rig gate`, `rig ab` and `rig compare` read) and a flamegraph of its
/// own family.
#[test]
fn a_target_specs_functions_are_counted_in_rig_runs_counted_pass() {
    root_or_skip!();
    let _g = super::probes_shared();
    let s = super::scratch::Scratch::new("user-run");
    let spec = s.0.join("calib-user.toml");
    std::fs::write(
        &spec,
        format!(
            "extends = {:?}\nfunc = [\"calib_alloc_small\"]\n",
            super::repo().join("config/targets/calib.toml")
        ),
    )
    .unwrap();
    std::fs::write(
        s.0.join("m.toml"),
        "[probes]\nfunc = [\"calib_copy_small\"]\n\n[[suite]]\nname = \"calib\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/calib\"]\ntopologies = [\"1\"]\n",
    )
    .unwrap();
    let out_dir = s.0.join("out");
    let out = Command::new(rig_bin())
        .arg("run")
        .arg("--target")
        .arg(&spec)
        .arg("--matrix")
        .arg(s.0.join("m.toml"))
        .arg("--out")
        .arg(&out_dir)
        .args(["--probes", "syscalls", "--passes", "counted"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let line = std::fs::read_to_string(out_dir.join("cases.jsonl")).unwrap();
    let case: serde_json::Value = serde_json::from_str(line.lines().next().unwrap()).unwrap();
    let counted = &case["counted"];
    let requests = counted["load"]["succeeded"].as_u64().unwrap();
    let user = &counted["attribution"]["user"];
    // The spec's function and the matrix's.
    for f in ["func:calib_alloc_small", "func:calib_copy_small"] {
        let p = user
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["probe"] == f)
            .unwrap_or_else(|| panic!("{f}: {user}"));
        assert_eq!(p["calls"].as_u64(), Some(requests), "{p}");
        assert_eq!(p["sites"][0]["site"]["function"], "calib_request", "{p}");
    }
    let flame = std::fs::read_dir(out_dir.join("flame"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    // The family's graph, the probe a frame of its own, and one graph per
    // probe.
    let folded = std::fs::read_to_string(flame.join("user.folded")).unwrap();
    assert!(folded.contains("func:calib_alloc_small"), "{folded}");
    let one = std::fs::read_to_string(flame.join("user.func_calib_alloc_small.folded")).unwrap();
    assert!(one.contains("calib_request"), "{one}");
    assert!(flame.join("user.func_calib_alloc_small.svg").is_file());
    // report.html: a table per probe, its calls per request by call site.
    let html = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
    assert!(
        html.contains("func:calib_alloc_small: 1 calls/req") && html.contains("calib_request ("),
        "report.html has no table of the probe"
    );
}

/// `--func-time` on a recursive function: hitloop's `descend` recurses
/// four deep around its loop, and the program times that loop itself
/// (`ns=`, CLOCK_MONOTONIC around the outermost call). rig counts 4 calls
/// and, pairing each thread's calls by depth, adds the outermost call's
/// time once: within the program's own measurement of the same interval
/// (never 4 times it), and all of it but the probes' few traps.
#[test]
fn func_time_adds_the_outermost_calls_time_once_through_recursion() {
    root_or_skip!();
    let _g = super::probes_shared();
    use std::io::{BufRead, BufReader};
    let mut child = Command::new(rig_fixtures::hitloop())
        .args(["none", "100000000", "3"])
        .env("HITLOOP_HOLD", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert_eq!(line, "READY\n");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("a.json");
    let load = format!("echo go > /proc/{pid}/fd/0; sleep 0.5");
    let o = Command::new(rig_bin())
        .args(["attach", "--pid", &pid.to_string(), "--probes", "syscalls"])
        .args(["--per", "1", "--func", "descend", "--func-time", "--json"])
        .arg(&json)
        .args(["--", "sh", "-c", &load])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    line.clear();
    out.read_line(&mut line).unwrap();
    let loop_ns: u64 = line.trim().strip_prefix("ns=").unwrap().parse().unwrap();
    drop(child.stdin.take());
    let _ = child.wait();
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(a["complete"], true, "{}", a["losses"]);
    let p = &a["user"][0];
    assert_eq!(p["probe"], "func:descend");
    assert_eq!(p["calls"], 4, "{p}");
    let inside = p["ns_inside"].as_u64().unwrap();
    assert!(
        inside <= loop_ns && inside * 10 >= loop_ns * 9,
        "{inside} ns inside descend, {loop_ns} ns around it"
    );
}

/// A Go function a user names is counted on its prologue's stack check
/// (emulated by the kernel, the pass that grows the stack not counted):
/// the goserver's `main.goAllocs` runs once per `/alloc`, called by
/// `main.alloc` — in the stripped build, found and named by Go's own
/// function table. Timing Go functions (`--func 'main.*' --func-time`) is
/// refused before any window, with the reason: a return probe in Go code
/// breaks the program.
#[test]
fn a_go_function_is_counted_per_request_and_never_timed() {
    root_or_skip!();
    let _g = super::probes_shared();
    let mut cmd = Command::new(rig_fixtures::goserver(true));
    cmd.args(["--port", "0"]);
    let target = rig::session::Child::spawn_ready(cmd).unwrap();
    let pid = target.pid().to_string();
    let url = format!("http://127.0.0.1:{}/alloc", target.port);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("a.json");
    let o = Command::new(rig_bin())
        .args(["attach", "--pid", &pid, "--probes", "syscalls"])
        .args(["--drive", &url, "--requests", "300", "--connections", "1"])
        .args(["--func", "main.goAllocs", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let p = &a["user"][0];
    assert_eq!(p["probe"], "func:main.goAllocs");
    assert_eq!(p["calls"], 300, "{p}");
    assert_eq!(p["sites"][0]["site"]["function"], "main.alloc", "{p}");
    let note = a["notes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["family"] == "user")
        .unwrap();
    assert!(
        note["note"].as_str().unwrap().contains("stack check"),
        "{note}"
    );
    let o = Command::new(rig_bin())
        .args(["attach", "--pid", &pid, "--probes", "syscalls"])
        .args(["--drive", &url, "--requests", "10"])
        .args(["--func", "main.*", "--func-time"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("--func main.* --func-time")
            && err.contains("cannot be timed")
            && err.contains("Go"),
        "{err}"
    );
}
