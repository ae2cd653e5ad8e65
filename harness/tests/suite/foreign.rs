//! Servers nobody here wrote, as Debian ships them: the Prometheus node
//! exporter (Go, with cgo: glibc mapped beside Go's own heap) and node (V8:
//! a non-PIE executable whose code takes malloc's address, and JIT code).
//! Their per-request costs are not known by construction, so these tests
//! assert what is certain of any such window: the families are complete,
//! or name what they do not count (node's JavaScript heap), the counts are
//! not zero, stacks are whole or say exactly why not, names
//! come from where they should, and no uretprobe is ever planted in Go
//! code. The exact counts are the fixtures' tests (golang, shipped).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rig::launch::port::{check_holder, free_port, HolderCheck};

use super::{probes_shared, rig_bin};

/// A server this test started on a loopback port it chose.
pub(super) struct Server {
    pub(super) child: std::process::Child,
    pub(super) port: u16,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Start `argv(port)` until it listens on the port it was given: another
/// process may take a port between free_port() and the server's bind,
/// and then a fresh one is tried, as rig's launcher does.
pub(super) fn start(what: &str, argv: impl Fn(u16) -> Vec<String>) -> Server {
    for _ in 0..3 {
        let dir = rig::fsutil::private_dir("rig-foreign-test").unwrap();
        let port = free_port().unwrap();
        let argv = argv(port);
        let child = Command::new(&argv[0])
            .args(&argv[1..])
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("{what} ({}) starts: {e}", argv[0]));
        let mut s = Server { child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match check_holder(port, s.child.id()) {
                HolderCheck::Proven(_) => return s,
                HolderCheck::Other { pid, cmdline } => {
                    eprintln!("port {port} was taken by pid {pid} ({cmdline}); trying another");
                    break;
                }
                HolderCheck::NoListener => {
                    if s.child.try_wait().unwrap().is_some() {
                        eprintln!("{what} exited before listening on {port}; trying another");
                        break;
                    }
                    assert!(Instant::now() < deadline, "{what} never listened on {port}");
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
        }
    }
    panic!("{what} lost its port three times in a row");
}

/// `rig attach --pid P --drive URL --probes alloc,syscalls`: its stdout and
/// JSON.
fn attach_driven(s: &Server, path: &str, requests: u64) -> (String, serde_json::Value) {
    attach_driven_with(
        s,
        path,
        requests,
        &["--probes", "alloc,syscalls"],
        rig::exit::OK,
    )
}

/// `rig attach --pid P --drive URL ARGS...` (50 warm-up requests unless
/// ARGS say how many), which exits `exit`: its stdout and JSON.
pub(super) fn attach_driven_with(
    s: &Server,
    path: &str,
    requests: u64,
    args: &[&str],
    exit: i32,
) -> (String, serde_json::Value) {
    let json = s.dir.join("attribution.json");
    let out = Command::new(rig_bin())
        .args(["attach", "--pid", &s.child.id().to_string()])
        .args(["--drive", &format!("http://127.0.0.1:{}{path}", s.port)])
        .args(["--requests", &requests.to_string()])
        .args(
            ["--warmup", "50"]
                .iter()
                .filter(|_| !args.contains(&"--warmup")),
        )
        .args(["--connections", "1"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(exit),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let a = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    (stdout, a)
}

/// Every (row, its stack) of `family`.
fn rows<'a>(
    a: &'a serde_json::Value,
    family: &'a str,
) -> impl Iterator<Item = (&'a serde_json::Value, &'a serde_json::Value)> + 'a {
    let stacks = &a["stacks"];
    stacks["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(move |r| r["family"] == family)
        .map(move |r| (r, &stacks["stacks"][r["stack"].as_str().unwrap()]))
}

fn frames(s: &serde_json::Value) -> &Vec<serde_json::Value> {
    s["frames"].as_array().unwrap()
}

fn has_function(s: &serde_json::Value, name: &str) -> bool {
    frames(s).iter().any(|f| f["function"] == name)
}

fn label(s: &serde_json::Value) -> String {
    let mut out = String::new();
    for f in frames(s) {
        out.push_str(&format!(
            "  {} {}\n",
            f["module"].as_str().unwrap_or("?"),
            f["function"].as_str().unwrap_or("[unnamed]")
        ));
    }
    out.push_str(&format!("  incomplete: {}\n", s["incomplete"]));
    out
}

const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";
const EXPORTER_REQUESTS: u64 = 40;

/// Debian's prometheus-node-exporter (Go 1.19, stripped, cgo): GET
/// /metrics allocates on Go's heap (runtime.mallocgc, probed at entry
/// only), every allocation's stack is whole and named from `.gopclntab`,
/// the serving goroutine's stacks reach net/http.(*conn).serve, and no
/// uretprobe goes into the Go executable.
#[test]
fn prometheus_node_exporter_allocates_per_request_with_whole_go_stacks_and_no_uretprobe_in_go() {
    root_or_skip!();
    let _g = probes_shared();
    // Collectors that read a few /proc files and vary little; the default
    // set reads hardware, filesystems and the network.
    let s = start("prometheus-node-exporter (Debian package)", |port| {
        [
            NODE_EXPORTER,
            &format!("--web.listen-address=127.0.0.1:{port}"),
            "--collector.disable-defaults",
            "--collector.loadavg",
            "--collector.meminfo",
            "--collector.time",
            "--collector.uname",
        ]
        .map(String::from)
        .to_vec()
    });
    let (stdout, a) = attach_driven(&s, "/metrics", EXPORTER_REQUESTS);
    assert_eq!(a["complete"], true, "{stdout}");
    assert_eq!(a["alloc_unprobed"], serde_json::json!([]), "{stdout}");
    assert_eq!(a["window"]["requests"], EXPORTER_REQUESTS, "{stdout}");
    // Go's heap is a layer of its own, with GC cycles beside allocations.
    let layers = a["alloc_layers"].as_array().unwrap();
    let go = layers
        .iter()
        .find(|l| l["allocator"] == "go")
        .unwrap_or_else(|| panic!("no go layer: {layers:?}\n{stdout}"));
    let allocations = go["totals"]["allocations"].as_u64().unwrap();
    assert!(
        allocations >= EXPORTER_REQUESTS,
        "Go allocations in {EXPORTER_REQUESTS} scrapes: {allocations}\n{stdout}"
    );
    assert!(go["totals"]["gc_cycles"].is_u64(), "{go}");
    assert!(
        stdout.contains("garbage-collected heap: no frees"),
        "{stdout}"
    );
    // The attach notes: runtime.mallocgc has an entry probe and says there
    // is no uretprobe; no probe in the Go executable is a uretprobe.
    let notes = a["notes"].as_array().unwrap();
    let mallocgc = notes
        .iter()
        .find(|n| n["what"] == "runtime.mallocgc")
        .unwrap_or_else(|| panic!("no runtime.mallocgc note: {notes:?}"));
    let text = mallocgc["note"].as_str().unwrap();
    assert!(
        text.starts_with("uprobe at prometheus-node-exporter+") && text.contains("no uretprobe"),
        "{text}"
    );
    for n in notes {
        let text = n["note"].as_str().unwrap();
        assert!(
            !(text.contains("uretprobe at prometheus-node-exporter")
                || text.contains("uprobe and uretprobe at prometheus-node-exporter")),
            "a uretprobe in Go code: {n}"
        );
    }
    // Every allocation's stack is whole (Go's runtime.goexit or the
    // runtime's thread start ends it) and every frame is named, from
    // .gopclntab (the binary is stripped).
    let mut served = 0;
    for (r, st) in rows(&a, "alloc") {
        assert_eq!(st["incomplete"], serde_json::json!([]), "{}", label(st));
        let first = &frames(st)[0];
        assert_eq!(first["module"], NODE_EXPORTER, "{}", label(st));
        assert!(
            matches!(
                first["function"].as_str(),
                Some("runtime.mallocgc" | "runtime.gcMarkTermination")
            ),
            "{}",
            label(st)
        );
        assert!(
            frames(st).iter().all(|f| f["function"].is_string()),
            "{}",
            label(st)
        );
        if has_function(st, "net/http.(*conn).serve") {
            served += r["count"].as_u64().unwrap();
        }
    }
    assert!(
        served >= EXPORTER_REQUESTS,
        "allocations under net/http.(*conn).serve: {served}"
    );
    // Syscall stacks made in Go code are whole too; each response is
    // written from the serving goroutine.
    let mut writes = 0;
    for (r, st) in rows(&a, "syscalls") {
        if frames(st)[0]["module"] != NODE_EXPORTER {
            continue;
        }
        assert_eq!(st["incomplete"], serde_json::json!([]), "{}", label(st));
        if r["event"] == "write" && has_function(st, "net/http.(*conn).serve") {
            writes += r["count"].as_u64().unwrap();
        }
    }
    assert!(
        writes >= EXPORTER_REQUESTS,
        "writes under net/http.(*conn).serve: {writes}"
    );
}

const NODE_REQUESTS: u64 = 200;

/// node (V8) running fixtures/node/server.js with `--perf-basic-prof`: the
/// alloc family is served by glibc, found through node's canonical
/// malloc@plt (node takes malloc's address), and incomplete, naming the
/// JavaScript heap it does not count; the syscalls are complete; stacks
/// walked through V8's builtins reach JIT frames named from
/// /tmp/perf-PID.map, where they end saying "JIT code".
#[test]
fn node_allocates_through_glibc_by_its_malloc_plt_and_jit_frames_are_named_from_its_perf_map() {
    root_or_skip!();
    let _g = probes_shared();
    let server = rig_fixtures::node_server().display().to_string();
    let s = start("node (Debian package nodejs)", |port| {
        ["node", "--perf-basic-prof", &server, &port.to_string()]
            .map(String::from)
            .to_vec()
    });
    let map = PathBuf::from(format!("/tmp/perf-{}.map", s.child.id()));
    let (stdout, a) = attach_driven_with(
        &s,
        "/work",
        NODE_REQUESTS,
        &["--probes", "alloc,syscalls"],
        rig::exit::INCOMPLETE,
    );
    let _ = std::fs::remove_file(&map);
    // Never a silent zero: JavaScript objects are V8's, not malloc's.
    assert_eq!(a["complete"], false, "{stdout}");
    let losses = a["losses"].as_object().unwrap();
    assert_eq!(losses.keys().collect::<Vec<_>>(), ["alloc"], "{stdout}");
    let heap = losses["alloc"][0][0].as_str().unwrap();
    assert!(
        heap.starts_with("the JavaScript heap:") && heap.contains("--trace-gc"),
        "{heap}"
    );
    assert!(
        stdout.contains("INCOMPLETE (alloc): the JavaScript heap"),
        "{stdout}"
    );
    assert_eq!(a["alloc_unprobed"], serde_json::json!([]), "{stdout}");
    let layers = a["alloc_layers"].as_array().unwrap();
    let glibc = layers
        .iter()
        .find(|l| l["allocator"] == "glibc")
        .unwrap_or_else(|| panic!("no glibc layer: {layers:?}\n{stdout}"));
    let allocations = glibc["totals"]["allocations"].as_u64().unwrap();
    assert!(
        allocations >= NODE_REQUESTS,
        "glibc allocations in {NODE_REQUESTS} requests: {allocations}\n{stdout}"
    );
    let notes = a["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n["what"] == "glibc allocator"
            && n["note"]
                .as_str()
                .unwrap()
                .contains("the canonical malloc@plt of node")),
        "{notes:?}"
    );
    // JIT frames: named from the perf map (V8 writes `JS:<tier><function>
    // <script>:<line>:<column>`), server.js's own functions among them,
    // and walked through by their frame pointers (V8 keeps them in every
    // frame) to node's own code and its start: whole stacks; a stack that
    // ends in JIT code says so, and no other reason.
    let (mut in_server_js, mut whole) = (0, 0);
    for (r, st) in rows(&a, "alloc").chain(rows(&a, "syscalls")) {
        let fr = frames(st);
        let mut here = false;
        for f in fr.iter().filter(|f| f["naming"] == "jit") {
            let name = f["function"].as_str().unwrap();
            assert!(!name.is_empty(), "{}", label(st));
            if name.starts_with("JS:") && name.contains("fixtures/node/server.js:") {
                in_server_js += r["count"].as_u64().unwrap();
                here = true;
            }
        }
        if here
            && st["incomplete"] == serde_json::json!([])
            && fr.last().unwrap()["function"] == "_start"
        {
            whole += r["count"].as_u64().unwrap();
        }
        if fr.last().unwrap()["naming"] == "jit" {
            assert_eq!(
                st["incomplete"],
                serde_json::json!(["JIT code"]),
                "{}",
                label(st)
            );
        }
    }
    assert!(
        in_server_js > 0,
        "no JIT frame of server.js named from the perf map\n{stdout}"
    );
    assert!(
        whole > 0,
        "no whole stack through server.js's frames to node's _start\n{stdout}"
    );
}
