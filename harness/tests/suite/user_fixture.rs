//! Probes a user names, on the fixture built for them
//! (fixtures/user/userwork.c, costs per request in its header): USDT
//! markers written with `<sys/sdt.h>` (plain, semaphore-guarded in a
//! shared library, with a size argument) and functions in the executable
//! and in a shared library, counted exactly per request and per call site
//! in `rig attach`, in `rig gate` (blessed, then breached by the build that
//! fires one marker more) and in `rig ab`; and the same functions found in
//! a build whose symbols survive only as MiniDebugInfo.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{probes_shared, rig_bin};
use rig::exit;

const USDT: &[&str] = &["rigfix:request@0", "rigfix:sized@1", "rigfix:guarded@0"];
const FUNC: &[&str] = &["userwork_step", "userlib_work"];

fn probe<'a>(user: &'a Value, name: &str) -> &'a Value {
    user.as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == name)
        .unwrap_or_else(|| panic!("no probe {name}: {user}"))
}

/// A probe's sites as (function, line, calls, argument sum), sorted.
fn sites(p: &Value) -> Vec<(String, u64, u64, i64)> {
    let mut v: Vec<_> = p["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["site"]["function"].as_str().unwrap_or("?").to_string(),
                s["site"]["line"].as_u64().unwrap_or(0),
                s["calls"].as_u64().unwrap(),
                s["arg_sum"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    v.sort();
    v
}

fn line(marker: &str) -> u64 {
    u64::from(rig_fixtures::userwork_line(marker))
}

/// The semaphore of `rigfix:guarded` in pid's libuserlib.so.
fn guarded_semaphore(pid: u32) -> u16 {
    let maps = rig::process::maps::ProcMaps::read(pid).unwrap();
    let lib = maps.find_object(|p| p.ends_with("/libuserlib.so")).unwrap();
    let markers = rig::elf::usdt::markers(Path::new(&lib)).unwrap();
    let sema = markers
        .0
        .iter()
        .find(|m| m.name == "guarded")
        .and_then(|m| m.semaphore)
        .unwrap();
    let facts = rig::elf::ElfFacts::shared(Path::new(&lib)).unwrap();
    let addr = rig::elf::load_base(&maps, &lib, &facts).unwrap() + sema.vaddr;
    use std::os::unix::fs::FileExt;
    let mem = std::fs::File::open(format!("/proc/{pid}/mem")).unwrap();
    let mut b = [0u8; 2];
    mem.read_exact_at(&mut b, addr).unwrap();
    u16::from_le_bytes(b)
}

fn attach(variant: &str, requests: u64, probes: &[&str]) -> (String, Value, u32) {
    let mut cmd = Command::new(rig_fixtures::userserve(variant));
    cmd.args(["--port", "0"]);
    let target = rig::session::Child::spawn_ready(cmd).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("a.json");
    let o = Command::new(rig_bin())
        .args(["attach", "--pid", &target.pid().to_string()])
        .args(["--probes", "syscalls", "--connections", "1"])
        .arg("--drive")
        .arg(format!("http://127.0.0.1:{}/u", target.port))
        .args(["--requests", &requests.to_string(), "--json"])
        .arg(&json)
        .args(probes)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let sema = guarded_semaphore(target.pid());
    let a = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (text, a, u32::from(sema))
}

fn named(usdt: &[&str], func: &[&str]) -> Vec<String> {
    let mut v = Vec::new();
    for u in usdt {
        v.extend(["--usdt".to_string(), u.to_string()]);
    }
    for f in func {
        v.extend(["--func".to_string(), f.to_string()]);
    }
    v
}

/// Every probe of the fixture, exact per request and per site: the plain
/// marker 1 with argument 5; the sized marker 2 at `sized_pair` (100 +
/// 200) and 1 at `handle` (1000); the guarded marker in the shared library
/// 2 (3 + 4), its semaphore back to 0 once rig has gone; `userwork_step` 3
/// from `handle`'s loop and 1 from `userwork_tail`; the library's
/// `userlib_work` 2 from `handle`.
#[test]
fn the_fixtures_markers_and_functions_are_counted_exactly_per_site() {
    root_or_skip!();
    let _g = probes_shared();
    const N: u64 = 400;
    let args = named(USDT, FUNC);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let (text, a, sema) = attach("", N, &args);
    assert_eq!(a["complete"], true, "{}", a["losses"]);
    let user = &a["user"];
    let p = probe(user, "usdt:rigfix:request");
    assert_eq!(
        (p["calls"].as_u64(), p["arg_sum"].as_i64()),
        (Some(N), Some(5 * N as i64))
    );
    assert_eq!(
        sites(p),
        [("handle".into(), line("request_marker"), N, 5 * N as i64)]
    );
    let p = probe(user, "usdt:rigfix:sized");
    assert_eq!(
        (p["calls"].as_u64(), p["arg_sum"].as_i64()),
        (Some(3 * N), Some(1300 * N as i64))
    );
    assert_eq!(
        sites(p),
        [
            ("handle".into(), line("sized_once"), N, 1000 * N as i64),
            (
                "sized_pair".into(),
                line("sized_each"),
                2 * N,
                300 * N as i64
            ),
        ]
    );
    let p = probe(user, "usdt:rigfix:guarded");
    assert_eq!(
        (p["calls"].as_u64(), p["arg_sum"].as_i64()),
        (Some(2 * N), Some(7 * N as i64))
    );
    assert_eq!(
        sites(p),
        [(
            "userlib_work".into(),
            line("guarded_marker"),
            2 * N,
            7 * N as i64
        )]
    );
    assert!(
        p["probed_at"].as_array().unwrap()[0]
            .as_str()
            .unwrap()
            .contains("libuserlib.so+0x"),
        "{p}"
    );
    assert_eq!(
        sema, 0,
        "the semaphore is the program's again once rig has gone"
    );
    let p = probe(user, "func:userwork_step");
    assert_eq!(p["calls"].as_u64(), Some(4 * N));
    assert_eq!(
        sites(p),
        [
            ("handle".into(), line("step_loop"), 3 * N, 0),
            ("userwork_tail".into(), line("step_tail"), N, 0),
        ]
    );
    let p = probe(user, "func:userlib_work");
    assert_eq!(sites(p), [("handle".into(), line("lib_call"), 2 * N, 0)]);
    assert!(
        text.contains("usdt:rigfix:sized: 3 calls/req, argument 1 summed: 1300.00/req"),
        "{text}"
    );
    // The build linked at a fixed address (no PIE): its markers, a global
    // argument among them, and functions counted the same.
    let (_, a, _) = attach("nopie", N, &args);
    for (name, calls, sum) in [
        ("usdt:rigfix:request", N, Some(5 * N as i64)),
        ("usdt:rigfix:sized", 3 * N, Some(1300 * N as i64)),
        ("usdt:rigfix:guarded", 2 * N, Some(7 * N as i64)),
        ("func:userwork_step", 4 * N, None),
    ] {
        let p = probe(&a["user"], name);
        assert_eq!(
            (p["calls"].as_u64(), p["arg_sum"].as_i64()),
            (Some(calls), sum),
            "{p}"
        );
    }
    // The build whose functions are named only by MiniDebugInfo: found by
    // name, counted the same, its call sites named by the same table.
    let (_, a, _) = attach("minidebug", N, &["--func", "userwork_step"]);
    let p = probe(&a["user"], "func:userwork_step");
    assert_eq!(p["calls"].as_u64(), Some(4 * N), "{p}");
    let callers: Vec<String> = sites(p).into_iter().map(|s| s.0).collect();
    assert_eq!(callers, ["handle", "userwork_tail"]);
}

/// A scratch directory with the fixture's target spec (its probes named
/// in the spec, as a user would check them in), the build that fires one
/// marker more as a second spec, and a one-case matrix.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("rig-userfix-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let list = |v: &[&str]| {
            v.iter()
                .map(|s| format!("{s:?}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        for (file, variant) in [("a.toml", ""), ("more.toml", "more")] {
            let spec = format!(
                "name = \"userserve{variant}\"\nargv = [{:?}, \"--port\", \"{{port}}\"]\nport = \"argv\"\n\
                 ready = {{ stdout = \"READY\" }}\nready_timeout_ms = 10000\nusdt = [{}]\nfunc = [{}]\n\
                 alloc_func = [\"arena_alloc@0\"]\nfree_func = [\"arena_reset\"]\n\n\
                 [protocols]\nh1 = true\n\n[[endpoints]]\npath = \"/u\"\nstatus = 200\n\
                 content_type = \"text/plain\"\nbody = {{ literal = \"ok\" }}\n",
                rig_fixtures::userserve(variant),
                list(USDT),
                list(FUNC),
            );
            std::fs::write(dir.join(file), spec).unwrap();
        }
        std::fs::write(
            dir.join("m.toml"),
            "[defaults]\nwarmup_ms = 100\nduration_ms = 300\ncounted_requests = 500\n\n\
             [[suite]]\nname = \"u\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/u\"]\n\
             topologies = [\"1\"]\n",
        )
        .unwrap();
        Scratch(dir)
    }

    fn path(&self, f: &str) -> String {
        self.0.join(f).display().to_string()
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `rig ARGS...`: its exit code, and its stdout and stderr together.
pub(super) fn rig(args: &[&str]) -> (i32, String) {
    let o = Command::new(rig_bin()).args(args).output().unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (o.status.code().unwrap_or(-1), text)
}

/// A user probe is an exact counter to `rig gate`: blessed from the spec's
/// probes, it passes the same build and is breached by the build that
/// fires `rigfix:request` once more per request, naming the new site; the
/// other probes stay as blessed.
#[test]
fn gate_blesses_user_probes_and_is_breached_by_one_more_marker() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("gate");
    let baseline = s.0.join("baseline.toml");
    std::fs::write(
        &baseline,
        format!(
            "target = {:?}\nmatrix = {:?}\nsuite = \"u\"\nrepeats = 2\nrequests = 500\nprobes = \"syscalls,alloc\"\n",
            s.path("a.toml"),
            s.path("m.toml")
        ),
    )
    .unwrap();
    let b = baseline.display().to_string();
    let (code, text) = rig(&["gate", "--baseline", &b, "--bless"]);
    assert_eq!(code, exit::OK, "{text}");
    let blessed = std::fs::read_to_string(&baseline).unwrap();
    for (counter, value) in [
        ("usdt:rigfix:request calls/req", "1.0"),
        ("usdt:rigfix:sized calls/req", "3.0"),
        ("usdt:rigfix:sized arg1 summed/req", "1300.0"),
        ("usdt:rigfix:guarded calls/req", "2.0"),
        ("func:userwork_step calls/req", "4.0"),
        ("func:userlib_work calls/req", "2.0"),
        // The spec's arena, an application allocator.
        (
            &format!(
                "application arena_alloc calls @ handle (userwork.c:{})",
                line("arena_calls")
            ),
            "5.0",
        ),
        (
            &format!(
                "application arena_alloc bytes @ handle (userwork.c:{})",
                line("arena_calls")
            ),
            "496.0",
        ),
    ] {
        assert!(
            blessed.contains(&format!("[counters.\"{counter}\"]\nvalue = {value}\n")),
            "{counter} = {value}:\n{blessed}"
        );
    }
    let (code, text) = rig(&["gate", "--baseline", &b]);
    assert_eq!(code, exit::OK, "{text}");
    let (code, text) = rig(&["gate", "--baseline", &b, "--target", &s.path("more.toml")]);
    assert_eq!(code, exit::GATE_BREACH, "{text}");
    assert!(
        text.contains("usdt:rigfix:request calls/req: 2.000/req > 1.000"),
        "{text}"
    );
    let more = line("request_marker_more");
    assert!(
        text.contains(&format!("(userwork.c:{more}): new site")),
        "{text}"
    );
    assert!(!text.contains("usdt:rigfix:sized calls/req:"), "{text}");
}

/// `rig ab` of the two builds: the marker fired once more is the one
/// difference, +1 call per request at the new site, every other probe
/// equal in both arms.
#[test]
fn ab_of_two_builds_shows_the_one_marker_more_and_nothing_else() {
    root_or_skip!();
    let _g = probes_shared();
    let s = Scratch::new("ab");
    let out = s.path("out");
    let (code, text) = rig(&[
        "ab",
        "--arm",
        &format!("A={}", s.path("a.toml")),
        "--arm",
        &format!("B={}", s.path("more.toml")),
        "--matrix",
        &s.path("m.toml"),
        "--out",
        &out,
        "--probes",
        "syscalls,alloc",
        "--suite",
        "u",
        "--rounds",
        "1",
    ]);
    assert_eq!(code, exit::OK, "{text}");
    let ab: Value =
        serde_json::from_slice(&std::fs::read(s.0.join("out/ab.json")).unwrap()).unwrap();
    let diff = |name: &str| {
        let m = ab["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == name)
            .unwrap_or_else(|| panic!("no metric {name}: {text}"));
        m["vs_first"][0]["diff_median"].as_f64().unwrap()
    };
    assert_eq!(diff("usdt:rigfix:request calls/req"), 1.0, "{text}");
    assert_eq!(diff("usdt:rigfix:request arg0 summed/req"), 5.0, "{text}");
    for same in [
        "usdt:rigfix:sized calls/req",
        "usdt:rigfix:guarded calls/req",
        "func:userwork_step calls/req",
        "func:userlib_work calls/req",
    ] {
        assert_eq!(diff(same), 0.0, "{same}: {text}");
    }
}

/// An arena allocator declared by `--alloc-func arena_alloc@0` (its size
/// argument 0) and `--free-func arena_reset`: 5 allocations per request
/// of 16, 32, 64, 128 and 256 bytes (496) and 1 free, exact, at the
/// handler's line, as a layer beside the heap's, whose totals stay the
/// fixture's 0; a misspelled declaration is refused with the nearest name,
/// and a declaration without the alloc probes is refused.
#[test]
fn a_declared_arena_allocator_is_counted_and_sized_exactly_beside_the_heap() {
    root_or_skip!();
    let _g = probes_shared();
    const N: u64 = 300;
    let mut cmd = Command::new(rig_fixtures::userserve(""));
    cmd.args(["--port", "0"]);
    let target = rig::session::Child::spawn_ready(cmd).unwrap();
    let pid = target.pid().to_string();
    let url = format!("http://127.0.0.1:{}/u", target.port);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("a.json");
    let run = |extra: &[&str]| {
        Command::new(rig_bin())
            .args([
                "attach",
                "--pid",
                &pid,
                "--drive",
                &url,
                "--connections",
                "1",
            ])
            .args(["--requests", &N.to_string(), "--json"])
            .arg(&json)
            .args(extra)
            .output()
            .unwrap()
    };
    let o = run(&[
        "--probes",
        "alloc",
        "--alloc-func",
        "arena_alloc@0",
        "--free-func",
        "arena_reset",
    ]);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let a: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(a["alloc_totals"]["allocations"], 0, "{text}");
    let layer = &a["alloc_layers"][0];
    assert_eq!(layer["allocator"], "application", "{layer}");
    assert_eq!(layer["beside_the_heap"], true);
    let t = &layer["totals"];
    assert_eq!(
        (
            t["allocations"].as_u64(),
            t["bytes"].as_u64(),
            t["frees"].as_u64()
        ),
        (Some(5 * N), Some(496 * N), Some(N)),
        "{text}"
    );
    let rows = a["alloc"].as_array().unwrap();
    let at = |kind: &str, marker: &str| -> (u64, u64) {
        rows.iter()
            .filter(|r| r["kind"] == kind && r["site"]["line"] == line(marker))
            .fold((0, 0), |(c, b), r| {
                assert_eq!(r["site"]["function"], "handle", "{r}");
                (
                    c + r["calls"].as_u64().unwrap(),
                    b + r["bytes"].as_u64().unwrap(),
                )
            })
    };
    assert_eq!(at("arena_alloc", "arena_calls"), (5 * N, 496 * N));
    assert_eq!(at("arena_reset", "arena_reset"), (N, 0));
    assert!(
        text.contains("application allocator: 5 allocs/req, 496 bytes/req, 1 frees/req"),
        "{text}"
    );
    std::fs::remove_file(&json).unwrap();
    let o = run(&["--probes", "alloc", "--alloc-func", "arena_aloc@0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("closest: `arena_alloc`"),
        "{err}"
    );
    let o = run(&["--probes", "syscalls", "--alloc-func", "arena_alloc@0"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        !o.status.success() && err.contains("without the alloc probes"),
        "{err}"
    );
}
