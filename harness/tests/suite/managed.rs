//! Managed runtimes as Debian ships them, running fixtures of our own: the
//! JVM (OpenJDK 17) and CPython (python3.11, link-time optimized). Where a
//! runtime keeps a heap, copies or locks of its own that rig does not
//! count, the family says so by name, with what would make it countable,
//! and the window is incomplete: never a silent zero.

use super::foreign::{attach_driven_with, start};
use super::probes_shared;
use super::user_fixture::rig;

/// Debian's OpenJDK 17 (scripts/deps.sh installs it), by its own path:
/// another `java` on PATH may be another JDK.
const JAVA: &str = "/usr/lib/jvm/java-17-openjdk-amd64/bin/java";

/// Debian's CPython, whose pymalloc is inlined into its callers.
const PYTHON: &str = "/usr/bin/python3.11";

/// The losses of family `family`: (why, processes).
fn losses<'a>(a: &'a serde_json::Value, family: &str) -> Vec<&'a str> {
    a["losses"][family]
        .as_array()
        .map(|l| l.iter().map(|w| w[0].as_str().unwrap()).collect())
        .unwrap_or_default()
}

/// A user probe's calls whose string argument was `value` (`by_value`).
fn calls_by(probe: &serde_json::Value, value: &str) -> Option<u64> {
    probe["by_value"]
        .as_array()?
        .iter()
        .find(|v| v["value"] == value)
        .map(|v| v["calls"].as_u64().unwrap())
}

fn java(flags: &'static [&'static str]) -> super::foreign::Server {
    java_with(flags, &[])
}

/// The Java fixture with JVM `flags` and its own arguments after the port
/// (ITEMS, GCS).
fn java_with(flags: &[&str], args: &[&str]) -> super::foreign::Server {
    let server = rig_fixtures::java_server().display().to_string();
    start("java (Debian package openjdk-17-jdk-headless)", |port| {
        let mut argv = vec![JAVA.to_string()];
        argv.extend(flags.iter().map(|f| f.to_string()));
        argv.extend([server.clone(), port.to_string()]);
        argv.extend(args.iter().map(|a| a.to_string()));
        argv
    })
}

/// The fixture's own count of its runtime's garbage collections so far
/// (`GET /gcs`: the JVM's collector beans, Python's `gc.get_stats()`).
fn collections(s: &super::foreign::Server) -> u64 {
    use std::io::{Read, Write};
    let mut c = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    c.write_all(b"GET /gcs HTTP/1.0\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut text = String::new();
    c.read_to_string(&mut text).unwrap();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default();
    body.trim()
        .parse()
        .unwrap_or_else(|_| panic!("GET /gcs: {text}"))
}

/// The row of list `list` (`alloc_layers`, `user`) whose `field` is `value`.
fn row<'a>(
    a: &'a serde_json::Value,
    list: &str,
    field: &str,
    value: &str,
) -> &'a serde_json::Value {
    a[list]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r[field] == value)
        .unwrap_or_else(|| panic!("no {value} in {list}: {:#}", a[list]))
}

/// The alloc layer `name` of an attribution.
fn layer<'a>(a: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    row(a, "alloc_layers", "allocator", name)
}

/// A user probe's row.
fn user_probe<'a>(a: &'a serde_json::Value, probe: &str) -> &'a serde_json::Value {
    row(a, "user", "probe", probe)
}

/// `--probes alloc` on a JVM with -XX:+DTraceAllocProbes counts its
/// objects, by class, and its collections as the alloc family's `java`
/// layer, without a probe named: the fixture's 7 `Server$Item`s per
/// request exactly, and its one System.gc() per request exactly, as the
/// JVM's own collector beans count them. The objects' bytes are their
/// classes' instance sizes, as the JVM's class histogram gives them
/// (Server$Item's 24 bytes exact); arrays' bytes are named as not counted.
#[test]
fn a_jvms_objects_and_collections_are_its_java_layer_without_naming_a_probe() {
    root_or_skip!();
    let _g = probes_shared();
    // The serial collector runs nothing on its own in a window this small:
    // every collection is the fixture's.
    let s = java_with(&["-XX:+UseSerialGC", "-XX:+DTraceAllocProbes"], &["7", "1"]);
    let before = collections(&s);
    let probes = ["--probes", "alloc", "--warmup", "0"];
    let (stdout, a) = attach_driven_with(&s, "/work", 200, &probes, rig::exit::INCOMPLETE);
    let by_jvm = collections(&s) - before;
    let requests = a["window"]["requests"].as_u64().unwrap();
    assert_eq!(requests, 200, "{stdout}");
    let java = layer(&a, "java");
    assert_eq!(java["totals"]["gc_cycles"], requests, "{stdout}");
    // The fixture's /gcs request collects nothing itself.
    assert_eq!(by_jvm, requests);
    let objects = user_probe(&a, "usdt:hotspot:object__alloc");
    assert_eq!(
        calls_by(objects, "Server$Item"),
        Some(7 * requests),
        "{stdout}"
    );
    assert_eq!(java["totals"]["allocations"], objects["calls"]);
    // A Server$Item is 24 bytes by the JVM's layout on x86-64 (Debian's
    // defaults, compressed class pointers and oops): a 12-byte header, an
    // int and a reference of 4 bytes each, aligned to 8. Its bytes are its
    // calls times that size, from the JVM's own class histogram.
    let by_value = objects["by_value"].as_array().unwrap();
    let item = by_value
        .iter()
        .find(|v| v["value"] == "Server$Item")
        .unwrap();
    assert_eq!(item["bytes"], 24 * 7 * requests, "{item}");
    // Every type the histogram sized is in the layer's bytes; the rest
    // (arrays) are its unsized calls.
    let sized = by_value.iter().filter(|v| v["bytes"].is_u64());
    let (calls, bytes) = sized.fold((0, 0), |(c, b), v| {
        (
            c + v["calls"].as_u64().unwrap(),
            b + v["bytes"].as_u64().unwrap(),
        )
    });
    assert_eq!(java["totals"]["bytes"], bytes, "{stdout}");
    let all = objects["calls"].as_u64().unwrap();
    assert_eq!(java["totals"]["not_sized"], all - calls, "{stdout}");
    assert!(
        by_value
            .iter()
            .filter(|v| v["value"].as_str().unwrap().starts_with('['))
            .all(|v| v.get("bytes").is_none()),
        "arrays are not sized: {by_value:#?}"
    );
    assert_eq!(java["beside_the_heap"], true);
    assert!(stdout.contains("java allocator: "), "{stdout}");
    let alloc = losses(&a, "alloc");
    assert!(
        alloc
            .iter()
            .any(|w| w.starts_with("the Java heap's arrays' bytes:")),
        "{alloc:#?}"
    );
    let notes = a["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n["what"] == "usdt:hotspot:gc__begin"
            && n["note"].as_str().unwrap().contains("alloc family")),
        "{notes:#?}"
    );
}

/// `--probes locks` on a JVM with -XX:+DTraceMonitorProbes counts its
/// contended monitor enters as rows of the locks family, each with its
/// wait, from the JVM's markers: the fixture's one per request (another
/// thread holds the monitor when the handler enters it, for 20 ms)
/// exactly, every one contended and waited; their stacks are whole, through
/// the Java frames (frame pointers kept). The uncontended ones are named
/// as not counted.
#[test]
fn a_jvms_contended_monitor_enters_are_counted_for_the_locks_family() {
    root_or_skip!();
    let _g = probes_shared();
    let flags = ["-XX:+DTraceMonitorProbes", "-XX:+PreserveFramePointer"];
    let s = java_with(&flags, &["7", "0", "1"]);
    let probes = ["--probes", "locks"];
    let (stdout, a) = attach_driven_with(&s, "/work", 100, &probes, rig::exit::INCOMPLETE);
    let requests = a["window"]["requests"].as_u64().unwrap();
    assert_eq!(requests, 100, "{stdout}");
    let monitors: Vec<&serde_json::Value> = a["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["op"] == "monitor enter (contended)")
        .collect();
    let sum = |field: &str| -> u64 { monitors.iter().map(|r| r[field].as_u64().unwrap()).sum() };
    assert_eq!(sum("calls"), requests, "{stdout}");
    assert_eq!(sum("acquired"), requests, "{stdout}");
    assert_eq!(sum("contended"), requests, "{stdout}");
    assert!(sum("futex_wait_ns") > 0, "{stdout}");
    assert!(stdout.contains("monitor enter (contended)"), "{stdout}");
    assert!(
        stdout.contains("a JVM's contended monitor enters"),
        "{stdout}"
    );
    // No marker of the user family counts them twice.
    assert!(
        a["user"].as_array().is_none_or(|u| u.is_empty()),
        "{:#}",
        a["user"]
    );
    // Their stacks (the acquisition's, and the wait's) are whole and run
    // through Java frames.
    let st = &a["stacks"];
    for event in ["monitor enter (contended)", "contended (monitor wait)"] {
        let through: u64 = st["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["family"] == "locks" && r["event"] == event)
            .filter(|r| {
                let s = &st["stacks"][r["stack"].as_str().unwrap()];
                let java = s["frames"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|f| f["naming"] == "jit");
                java && s["incomplete"].as_array().unwrap().is_empty()
            })
            .map(|r| r["count"].as_u64().unwrap())
            .sum();
        assert_eq!(through, requests, "{event}\n{stdout}");
    }
    let locks = losses(&a, "locks");
    assert!(
        locks
            .iter()
            .any(|w| w.starts_with("Java's uncontended monitor enters")),
        "{locks:#?}"
    );
}

/// A JVM started without `-XX:+DTraceAllocProbes`: the alloc family counts
/// the JVM's own mallocs and is incomplete, naming the Java heap and the
/// flag that would make its objects countable; Java's copies and locks are
/// named too. The syscalls are complete.
#[test]
fn a_jvm_names_the_java_heap_it_does_not_count_and_the_flag_that_would() {
    root_or_skip!();
    let _g = probes_shared();
    let s = java(&[]);
    let probes = ["--probes", "alloc,copy,locks,syscalls"];
    let (stdout, a) = attach_driven_with(&s, "/work", 200, &probes, rig::exit::INCOMPLETE);
    assert_eq!(a["complete"], false, "{stdout}");
    let alloc = losses(&a, "alloc");
    assert!(
        alloc.iter().any(|w| w.starts_with("the Java heap:")
            && w.contains("-XX:+DTraceAllocProbes")
            && w.contains("--usdt 'hotspot:object__alloc#1/2'")
            && w.ends_with("/lib/server/libjvm.so)")),
        "{alloc:#?}\n{stdout}"
    );
    assert!(
        stdout.contains("INCOMPLETE (alloc): the Java heap"),
        "{stdout}"
    );
    let copy = losses(&a, "copy");
    assert!(copy.iter().any(|w| w.contains("arraycopy")), "{copy:#?}");
    let locks = losses(&a, "locks");
    assert!(
        locks.iter().any(|w| w.contains("-XX:+DTraceMonitorProbes")),
        "{locks:#?}"
    );
    assert!(losses(&a, "syscalls").is_empty(), "{stdout}");
    // Its compiled Java code keeps no frame pointers: a stack that reaches
    // it ends there, and says why, with the flag that would walk through.
    let reasons: Vec<&str> = a["stacks"]["stacks"]
        .as_object()
        .unwrap()
        .values()
        .flat_map(|s| s["incomplete"].as_array().unwrap())
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("JIT code: ") && r.contains("-XX:+PreserveFramePointer")),
        "{reasons:#?}"
    );
}

/// The stacks of a user probe's calls (`--usdt`) whose frames include one
/// whose function starts with `function`: (count, incomplete reasons).
fn user_stacks_through<'a>(
    a: &'a serde_json::Value,
    function: &str,
) -> Vec<(u64, &'a serde_json::Value)> {
    let st = &a["stacks"];
    st["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["family"] == "user")
        .filter_map(|r| {
            let s = &st["stacks"][r["stack"].as_str()?];
            let through = s["frames"].as_array()?.iter().any(|f| {
                f["function"]
                    .as_str()
                    .is_some_and(|n| n.starts_with(function))
            });
            through.then(|| (r["count"].as_u64().unwrap(), &s["incomplete"]))
        })
        .collect()
}

/// The fixture's objects by class: with the flag the Java heap's line
/// names, `--usdt 'hotspot:object__alloc#1/2'` (the class name at argument
/// 1, its length at argument 2) counts exactly `Server.items` (7) objects
/// of class `Server$Item` per request; the JDK's HTTP server's own objects
/// are counted beside them, under their classes.
#[test]
fn java_objects_of_the_fixtures_class_are_counted_exactly_per_request_by_class() {
    root_or_skip!();
    let _g = probes_shared();
    let s = java(&["-XX:+DTraceAllocProbes", "-XX:+PreserveFramePointer"]);
    let (stdout, a) = attach_driven_with(
        &s,
        "/work",
        300,
        &[
            "--probes",
            "syscalls",
            "--usdt",
            "hotspot:object__alloc#1/2",
            // Requests before the window, so the JIT has compiled the
            // handler: its frames are then named by their Java methods
            // (an interpreted one is `[interpreted Java]`).
            "--warmup",
            "400",
        ],
        rig::exit::OK,
    );
    let probe = a["user"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == "usdt:hotspot:object__alloc")
        .unwrap_or_else(|| panic!("no object__alloc probe: {stdout}"));
    assert_eq!(
        probe["by"],
        serde_json::json!({"arg": 1, "len": 2}),
        "{stdout}"
    );
    let requests = a["window"]["requests"].as_u64().unwrap();
    assert_eq!(requests, 300, "{stdout}");
    let by_class = |class: &str| calls_by(probe, class);
    assert_eq!(by_class("Server$Item"), Some(7 * requests), "{stdout}");
    // The JDK's own: its String objects, for one.
    assert!(
        by_class("java/lang/String").is_some_and(|n| n >= requests),
        "{stdout}"
    );
    let all: u64 = probe["by_value"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(
        all,
        probe["calls"].as_u64().unwrap(),
        "every object has its class"
    );
    assert!(
        stdout.contains("usdt:hotspot:object__alloc: by argument 1,"),
        "{stdout}"
    );
    // Made where the fixture makes them: every one at Server.work, the
    // Java method (compiled: named from the perf map rig had the JVM write
    // with jcmd), past the JVM's own allocation code and stubs.
    let item = probe["by_value"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["value"] == "Server$Item")
        .unwrap();
    let at_work: u64 = item["sites"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["site"]["function"] == "int Server.work()")
        .map(|s| s["calls"].as_u64().unwrap())
        .sum();
    assert_eq!(at_work, 7 * requests, "{:#}", item["sites"]);
    assert!(
        a["notes"].as_array().unwrap().iter().any(|n| n["note"]
            .as_str()
            .is_some_and(|t| t.contains("Compiler.perfmap`"))),
        "{:#}",
        a["notes"]
    );
    // With -XX:+PreserveFramePointer the stacks through Server.work are
    // whole: through the Java frames and the interpreter to the thread's
    // start.
    let through = user_stacks_through(&a, "int Server.work()");
    assert_eq!(
        through.iter().map(|(n, _)| n).sum::<u64>(),
        7 * requests,
        "{stdout}"
    );
    for (_, incomplete) in &through {
        assert_eq!(incomplete.as_array().map(Vec::len), Some(0), "{incomplete}");
    }
}

/// A scratch directory with target specs of one fixture, each naming the
/// probe its counter is of, and a one-case matrix.
struct Specs(std::path::PathBuf);

impl Specs {
    /// `targets`: (name, argv with `{port}`), each with the probes of
    /// `named` (a spec's lines: `usdt = [...]`, `interp_calls = [...]`).
    fn new(name: &str, targets: &[(String, Vec<String>)], named: &str) -> Specs {
        let dir = std::env::temp_dir().join(format!("rig-managed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        for (target, argv) in targets {
            let spec = format!(
                "name = {target:?}\nargv = {argv:?}\n\
                 port = \"argv\"\nready = {{ stdout = \"READY\" }}\nready_timeout_ms = 60000\n\
                 {named}\n\n\
                 [protocols]\nh1 = true\n\n[[endpoints]]\npath = \"/work\"\nstatus = 200\n\
                 content_type = \"text/plain\"\nbody = {{ literal = \"ok\\n\" }}\n",
            );
            std::fs::write(dir.join(format!("{target}.toml")), spec).unwrap();
        }
        std::fs::write(
            dir.join("m.toml"),
            "[defaults]\nwarmup_ms = 2000\nduration_ms = 300\ncounted_requests = 100\n\n\
             [[suite]]\nname = \"j\"\nkind = \"http\"\nprotocols = [\"h1\"]\npaths = [\"/work\"]\n\
             topologies = [\"1\"]\n",
        )
        .unwrap();
        Specs(dir)
    }

    /// The Java fixture with 7 and 9 `Server$Item`s per request (`java7`,
    /// `java9`), counted by class.
    fn java(name: &str) -> Specs {
        let server = rig_fixtures::java_server().display().to_string();
        let targets: Vec<(String, Vec<String>)> = [7, 9]
            .map(|items| {
                let argv = [
                    JAVA,
                    "-XX:+DTraceAllocProbes",
                    &server,
                    "{port}",
                    &items.to_string(),
                ];
                (format!("java{items}"), argv.map(String::from).to_vec())
            })
            .to_vec();
        Specs::new(name, &targets, r#"usdt = ["hotspot:object__alloc#1/2"]"#)
    }

    fn path(&self, f: &str) -> String {
        self.0.join(f).display().to_string()
    }

    /// `rig gate`: bless from target `a` (the counter `counter` is
    /// `blessed` per request in the baseline), then target `b` breaches it
    /// with `breach` in its text.
    fn gate(&self, a: &str, b: &str, counter: &str, blessed: f64, breach: &str) {
        let baseline = self.0.join("baseline.toml");
        std::fs::write(
            &baseline,
            format!(
                "target = {:?}\nmatrix = {:?}\nsuite = \"j\"\nrepeats = 2\nrequests = 100\nprobes = \"syscalls\"\n",
                self.path(&format!("{a}.toml")),
                self.path("m.toml")
            ),
        )
        .unwrap();
        let base = baseline.display().to_string();
        let (code, text) = rig(&["gate", "--baseline", &base, "--bless"]);
        assert_eq!(code, rig::exit::OK, "{text}");
        let written = std::fs::read_to_string(&baseline).unwrap();
        assert!(
            written.contains(&format!("[counters.\"{counter}\"]\nvalue = {blessed:?}\n")),
            "{written}"
        );
        let target = self.path(&format!("{b}.toml"));
        let (code, text) = rig(&["gate", "--baseline", &base, "--target", &target]);
        assert_eq!(code, rig::exit::GATE_BREACH, "{text}");
        assert!(text.contains(&format!("{counter}: {breach}")), "{text}");
    }
}

impl Specs {
    /// `rig ab` of targets `a` and `b`: `counter` is a code difference,
    /// its median per arm `medians`.
    fn ab(&self, a: &str, b: &str, counter: &str, medians: [f64; 2]) {
        let out = self.path("out");
        let arm = |n: &str, t: &str| format!("{n}={}", self.path(&format!("{t}.toml")));
        let (arm_a, arm_b, matrix) = (arm("A", a), arm("B", b), self.path("m.toml"));
        let (code, text) = rig(&[
            "ab", "--arm", &arm_a, "--arm", &arm_b, "--matrix", &matrix, "--out", &out, "--probes",
            "syscalls", "--suite", "j",
            // Two rounds: four runs of each arm, enough to prove a site's
            // count constant within an arm (`ab::analyse::PROOF_RUNS`).
            "--rounds", "2",
        ]);
        assert_eq!(code, rig::exit::OK, "{text}");
        let ab: serde_json::Value =
            serde_json::from_slice(&std::fs::read(self.0.join("out/ab.json")).unwrap()).unwrap();
        // A call site's counter is a code difference: its median per arm.
        let sites: Vec<&serde_json::Value> = ab["code_differences"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|d| d["sites"].as_array().unwrap())
            .collect();
        let found = sites
            .iter()
            .find(|s| s[0] == counter)
            .unwrap_or_else(|| panic!("{counter} is no code difference: {sites:?}\n{text}"));
        assert_eq!(found[1], serde_json::json!(medians), "{text}");
    }
}

impl Drop for Specs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const ITEMS: &str = "usdt:hotspot:object__alloc calls @ arg1=Server$Item";

/// Java objects per request by class are gateable: blessed from the 7-item
/// build, `Server$Item` is 7.0 in the baseline, and the 9-item build
/// breaches it by exactly 2 per request.
#[test]
fn rig_gate_blesses_java_objects_by_class_and_two_more_per_request_breach_it() {
    root_or_skip!();
    let _g = probes_shared();
    Specs::java("gate").gate("java7", "java9", ITEMS, 7.0, "9.000/req > 7.000");
}

/// Python calls per request by function are gateable: blessed from the
/// fixture calling make_item 16 times per request (counted by
/// `interp_calls = ["python"]`, no profile function set), a build calling
/// it 17 times breaches it by exactly 1.
#[test]
fn rig_gate_blesses_python_calls_by_function_and_one_more_per_request_breaches_it() {
    root_or_skip!();
    let _g = probes_shared();
    let counter = PY_CALLS;
    python_specs("pygate").gate("py16", "py17", counter, 16.0, "17.000/req > 16.000");
}

/// The Python fixture calling make_item 16 and 17 times per request
/// (`py16`, `py17`), its calls counted by function.
fn python_specs(name: &str) -> Specs {
    let server = rig_fixtures::python_server().display().to_string();
    let targets: Vec<(String, Vec<String>)> = [16, 17]
        .map(|items| {
            let n = items.to_string();
            let argv = [PYTHON, &server, "{port}", "--items", &n];
            (format!("py{items}"), argv.map(String::from).to_vec())
        })
        .to_vec();
    Specs::new(name, &targets, r#"interp_calls = ["python"]"#)
}

/// The counter of the fixture's make_item calls (`--interp-calls python`).
const PY_CALLS: &str = "python:calls calls @ make_item (server.py:30)";

/// `rig ab` of the 7- and 9-item builds: `Server$Item` is a code
/// difference of exactly 7.0 against 9.0 objects per request.
#[test]
fn rig_ab_names_the_java_class_with_two_more_objects_per_request_as_a_code_difference() {
    root_or_skip!();
    let _g = probes_shared();
    Specs::java("ab").ab("java7", "java9", ITEMS, [7.0, 9.0]);
}

/// `rig ab` of the fixture calling make_item 16 and 17 times per request:
/// the Python function's calls are a code difference of exactly 16.0
/// against 17.0.
#[test]
fn rig_ab_names_the_python_function_called_once_more_per_request_as_a_code_difference() {
    root_or_skip!();
    let _g = probes_shared();
    let counter = PY_CALLS;
    python_specs("pyab").ab("py16", "py17", counter, [16.0, 17.0]);
}

/// Debian's python3.11 with pymalloc (the default): the alloc family is
/// incomplete, naming the inlined allocation and free paths it found in
/// the interpreter's machine code (Debian's build has 204 and 51 today;
/// the test asks for some of each, not that number) and `PYTHONMALLOC=
/// malloc`, and measuring how often they ran: one uprobe_multi link on
/// the branch after every path's hook test. Started with `PYTHONMALLOC=
/// malloc`, the same server's family is complete, and counts more
/// allocations per request than the pymalloc run saw: what the inlined
/// paths hid.
///
/// The measured runs are checked against that independent count: one
/// more `Item` per request (`--items 17` against 16) adds exactly as many
/// inlined allocations in the pymalloc run as counted mallocs in the
/// `PYTHONMALLOC=malloc` run, per request and whole, and none the family
/// counts in the pymalloc run.
#[test]
fn cpythons_inlined_pymalloc_is_named_measured_and_pythonmalloc_malloc_makes_the_family_complete() {
    root_or_skip!();
    let _g = probes_shared();
    let server = rig_fixtures::python_server().display().to_string();
    const REQUESTS: u64 = 300;
    let run = |malloc: bool, items: u64| {
        let s = start("python3.11 (Debian)", |port| {
            let mut argv: Vec<String> = Vec::new();
            if malloc {
                argv.extend(["env", "PYTHONMALLOC=malloc"].map(String::from));
            }
            argv.extend([PYTHON.to_string(), server.clone(), port.to_string()]);
            argv.extend(["--items".to_string(), items.to_string()]);
            argv
        });
        let exit = if malloc {
            rig::exit::OK
        } else {
            rig::exit::INCOMPLETE
        };
        let (stdout, a) = attach_driven_with(&s, "/work", REQUESTS, &["--probes", "alloc"], exit);
        assert_eq!(a["window"]["requests"], REQUESTS, "{stdout}");
        (stdout, a)
    };
    let counted = |a: &serde_json::Value, what: &str| a["alloc_totals"][what].as_u64().unwrap();
    let inlined = |a: &serde_json::Value, label: &str| -> u64 {
        let c = a["alloc_unseen"]
            .as_array()
            .and_then(|l| l.iter().find(|c| c["label"] == label))
            .unwrap_or_else(|| panic!("no {label} in {:#}", a["alloc_unseen"]));
        assert_eq!(c["module"], "/usr/bin/python3.11", "{c}");
        let (sites, paths) = (c["sites"].as_u64().unwrap(), c["paths"].as_u64().unwrap());
        assert!(sites > 0 && sites * 10 >= paths * 9, "{c}");
        c["count"]
            .as_u64()
            .unwrap_or_else(|| panic!("not measured: {c}"))
    };

    let (stdout, a) = run(false, 16);
    assert_eq!(a["complete"], false, "{stdout}");
    let alloc = losses(&a, "alloc");
    let line = alloc
        .iter()
        .find(|w| w.starts_with("CPython's object allocator (pymalloc) is inlined"))
        .unwrap_or_else(|| panic!("{alloc:#?}\n{stdout}"));
    let number = |before: &str| -> u64 {
        let at = line.find(before).unwrap_or_else(|| panic!("{line}"));
        let digits: String = line[..at]
            .trim_end()
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string();
        digits.parse().unwrap_or_else(|_| panic!("{line}"))
    };
    assert!(number(" allocation and") > 0, "{line}");
    assert!(number(" free paths") > 0, "{line}");
    assert!(line.contains("PYTHONMALLOC=malloc"), "{line}");
    // uprobe_multi links are 6.6 on: before, the share is said unmeasured.
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    let mut v = release
        .split(['.', '-'])
        .map(|n| n.parse::<u32>().unwrap_or(0));
    if (v.next().unwrap(), v.next().unwrap()) < (6, 6) {
        let why = "(/usr/bin/python3.11); how often they ran is not measured: no uprobe_multi";
        assert!(line.contains(why), "{line}");
        return;
    }
    assert!(
        line.contains("(/usr/bin/python3.11); measured in this window"),
        "{line}"
    );
    assert!(line.contains("% of the allocations and "), "{line}");
    // Most of what Python allocates runs inlined, uncounted.
    let (seen, hidden) = (counted(&a, "allocations"), inlined(&a, "allocations"));
    assert!(
        hidden > 2 * seen,
        "{seen} counted, {hidden} inlined\n{stdout}"
    );
    assert!(inlined(&a, "frees") > counted(&a, "frees"), "{stdout}");

    let (stdout, b) = run(true, 16);
    assert_eq!(b["complete"], true, "{stdout}");
    assert!(b.get("alloc_unseen").is_none(), "{stdout}");
    let all = counted(&b, "allocations");
    assert!(
        all > 2 * seen,
        "PYTHONMALLOC=malloc counted {all} allocations, pymalloc {seen}\n{stdout}"
    );

    // One more Item per request, seen by both counts alike.
    let (stdout17, a17) = run(false, 17);
    let (_, b17) = run(true, 17);
    let by_malloc = counted(&b17, "allocations") - all;
    assert!(by_malloc > 0 && by_malloc % REQUESTS == 0, "{by_malloc}");
    assert_eq!(
        inlined(&a17, "allocations") - hidden,
        by_malloc,
        "inlined runs against counted mallocs, 17 items against 16\n{stdout17}"
    );
    assert_eq!(counted(&a17, "allocations"), seen, "{stdout17}");
}

/// CPython 3.11's python:function__entry, named with `#1` (the function
/// name, NUL-terminated): on a server running normally it never fires, and
/// rig says why (gh-98894) with the user family incomplete, never a silent
/// zero; with a profile function set (server.py --profile) it counts the
/// fixture's functions exactly: `work` once and `make_item` 16 times per
/// request.
#[test]
fn python_calls_by_function_are_exact_where_cpython_fires_its_marker_and_named_where_not() {
    root_or_skip!();
    let _g = probes_shared();
    let server = rig_fixtures::python_server().display().to_string();
    let usdt = ["--probes", "syscalls", "--usdt", "python:function__entry#1"];
    let run = |profile: bool, exit: i32| {
        let s = start("python3.11 (Debian)", |port| {
            let mut argv = vec![PYTHON.to_string(), server.clone(), port.to_string()];
            if profile {
                argv.push("--profile".into());
            }
            argv
        });
        attach_driven_with(&s, "/work", 200, &usdt, exit)
    };
    let (stdout, a) = run(false, rig::exit::INCOMPLETE);
    let user = losses(&a, "user");
    assert!(
        user.iter().any(
            |w| w.starts_with("usdt:python:function__entry: CPython 3.11 fires")
                && w.contains("gh-98894")
        ),
        "{user:#?}\n{stdout}"
    );

    let (stdout, a) = run(true, rig::exit::OK);
    let probe = &a["user"][0];
    assert_eq!(probe["probe"], "usdt:python:function__entry", "{stdout}");
    let requests = a["window"]["requests"].as_u64().unwrap();
    let by = |function: &str| calls_by(probe, function);
    assert_eq!(by("work"), Some(requests), "{stdout}");
    assert_eq!(by("make_item"), Some(16 * requests), "{stdout}");
}

/// `--interp-calls python` on Debian's python3.11, running normally (no
/// profile function, so its own call marker never fires): every call of
/// the fixture's functions per request exactly, by construction: make_item
/// and Item.__init__ ITEMS times (16, then 17), work, its generator,
/// Handler.do_GET and Handler.log_message once. The generator is entered once per request and
/// resumed ITEMS times more: those resumptions are not calls. The stacks
/// of make_item's calls run on through the generator and work. Then,
/// against CPython's own count, with a profile function set so that its
/// python:function__entry marker fires, both in one window: each of the
/// fixture's functions that is not a generator has as many calls by either;
/// the marker counts the generator's every resumption as an entry (17 per
/// request: 16 items and its end), rig its one call.
#[test]
fn python_calls_are_counted_by_function_without_a_profiler_as_cpythons_marker_counts_them() {
    root_or_skip!();
    let _g = probes_shared();
    let server = rig_fixtures::python_server().display().to_string();
    let run = |items: u64, profile: bool, probes: &[&str]| {
        let s = start("python3.11 (Debian)", |port| {
            let mut argv = vec![PYTHON.to_string(), server.clone(), port.to_string()];
            argv.extend(["--items".to_string(), items.to_string()]);
            if profile {
                argv.push("--profile".into());
            }
            argv
        });
        attach_driven_with(&s, "/work", 200, probes, rig::exit::OK)
    };
    // The calls of the fixture's own functions (in server.py), by name.
    let own = |probe: &serde_json::Value| -> std::collections::BTreeMap<String, u64> {
        let mut by = std::collections::BTreeMap::new();
        for r in probe["sites"].as_array().unwrap() {
            let site = &r["site"];
            if site["naming"] == "interpreted"
                && site["file"]
                    .as_str()
                    .unwrap_or("")
                    .ends_with("python/server.py")
            {
                let f = site["function"].as_str().unwrap().to_string();
                *by.entry(f).or_insert(0) += r["calls"].as_u64().unwrap();
            }
        }
        by
    };
    for items in [16u64, 17] {
        let probes = ["--probes", "syscalls", "--interp-calls", "python"];
        let (stdout, a) = run(items, false, &probes);
        let requests = a["window"]["requests"].as_u64().unwrap();
        assert_eq!(requests, 200, "{stdout}");
        let calls = own(user_probe(&a, "python:calls"));
        let expect: std::collections::BTreeMap<String, u64> = [
            ("Item.__init__", items),
            ("make_item", items),
            ("work", 1),
            ("work.<locals>.<genexpr>", 1),
            ("Handler.do_GET", 1),
            // http.server logs each request through it (rig's fixture
            // keeps it quiet).
            ("Handler.log_message", 1),
        ]
        .into_iter()
        .map(|(f, n)| (f.to_string(), n * requests))
        .collect();
        assert_eq!(calls, expect, "{stdout}");
        let made = at_python_function(&a, "user", "make_item");
        assert_eq!(made.iter().map(|r| r.1).sum::<u64>(), items * requests);
        for (_, _, _, outwards) in &made {
            assert!(
                outwards.starts_with(&["make_item", "work.<locals>.<genexpr>", "work"]),
                "{outwards:?}"
            );
        }
    }

    let probes = [
        "--probes",
        "syscalls",
        "--interp-calls",
        "python",
        "--usdt",
        "python:function__entry#1",
    ];
    let (stdout, a) = run(16, true, &probes);
    let requests = a["window"]["requests"].as_u64().unwrap();
    let calls = own(user_probe(&a, "python:calls"));
    let marker = user_probe(&a, "usdt:python:function__entry");
    // Names no other function of the process has (the marker gives a
    // function's name alone: `__init__` is every class's).
    for (function, name) in [
        ("make_item", "make_item"),
        ("work", "work"),
        ("Handler.do_GET", "do_GET"),
    ] {
        assert_eq!(
            calls_by(marker, name),
            calls.get(function).copied(),
            "{function}\n{stdout}"
        );
    }
    assert_eq!(calls.get("make_item"), Some(&(16 * requests)), "{stdout}");
    assert_eq!(calls.get("work.<locals>.<genexpr>"), Some(&requests));
    assert_eq!(calls_by(marker, "<genexpr>"), Some(17 * requests));
}

/// `--probes alloc` on Debian's python3.11 counts its collections from its
/// python:gc__start marker without a probe named: the fixture's 2
/// gc.collect() per request (its automatic collector off) exactly, as
/// `gc.get_stats()` counts them.
#[test]
fn cpython_collections_are_counted_exactly_per_request_without_naming_a_probe() {
    root_or_skip!();
    let _g = probes_shared();
    let server = rig_fixtures::python_server().display().to_string();
    let s = start("python3.11 (Debian)", |port| {
        let port = port.to_string();
        [PYTHON, &server, &port, "--collect", "2"]
            .map(String::from)
            .to_vec()
    });
    let before = collections(&s);
    let probes = ["--probes", "alloc", "--warmup", "0"];
    let (stdout, a) = attach_driven_with(&s, "/work", 300, &probes, rig::exit::INCOMPLETE);
    let by_python = collections(&s) - before;
    let requests = a["window"]["requests"].as_u64().unwrap();
    assert_eq!(requests, 300, "{stdout}");
    assert_eq!(
        layer(&a, "cpython")["totals"]["gc_cycles"],
        2 * requests,
        "{stdout}"
    );
    assert_eq!(by_python, 2 * requests);
    assert_eq!(
        user_probe(&a, "usdt:python:gc__start")["calls"],
        2 * requests
    );
    assert!(stdout.contains("GC cycles/req"), "{stdout}");
}

/// The rows of family `family` whose user site is the Python function
/// `function`: (event, count, bytes, the stack's Python functions from the
/// site outwards).
fn at_python_function<'a>(
    a: &'a serde_json::Value,
    family: &str,
    function: &str,
) -> Vec<(&'a str, u64, u64, Vec<&'a str>)> {
    let st = &a["stacks"];
    st["rows"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["family"] == family)
        .filter_map(|r| {
            let s = &st["stacks"][r["stack"].as_str()?];
            let frames = s["frames"].as_array()?;
            let site = s["user_site"].as_u64()? as usize;
            let python = |f: &'a serde_json::Value| {
                (f["naming"] == "interpreted").then(|| f["function"].as_str().unwrap())
            };
            (python(&frames[site])? == function).then(|| {
                let outwards = frames[site..].iter().filter_map(python).collect();
                let count = r["count"].as_u64().unwrap();
                (
                    r["event"].as_str().unwrap(),
                    count,
                    r["amount"].as_u64().unwrap(),
                    outwards,
                )
            })
        })
        .collect()
}

/// Python frames in every counted stack. Debian's python3.11 with
/// `PYTHONMALLOC=malloc` (every allocation a counted malloc) runs the
/// fixture, whose make_item() makes one `Item` per call, 16 per request:
/// the allocations whose user site is the Python function `make_item` are
/// exactly 16 mallocs per request of 48 bytes each (a GC header, an object
/// header and two slots), and their stacks run on through the Python
/// frames that called it (`work.<locals>.<genexpr>`, `work`,
/// `Handler.do_GET`); none ends early. Each Item and its name are freed
/// in the generator that summed them: 32 frees per request there. The same window's `recvfrom`, made
/// with the interpreter's lock released, is under a Python function too.
/// With `--items 17`, 17.
#[test]
fn python_allocations_are_counted_under_the_python_function_that_made_them() {
    root_or_skip!();
    let _g = probes_shared();
    let server = rig_fixtures::python_server().display().to_string();
    for items in [16u64, 17] {
        let s = start("python3.11 (Debian)", |port| {
            let mut argv: Vec<String> = ["env", "PYTHONMALLOC=malloc", PYTHON]
                .map(String::from)
                .to_vec();
            argv.extend([server.clone(), port.to_string()]);
            argv.extend(["--items".to_string(), items.to_string()]);
            argv
        });
        let probes = ["--probes", "alloc,syscalls"];
        let (stdout, a) = attach_driven_with(&s, "/work", 200, &probes, rig::exit::OK);
        let requests = a["window"]["requests"].as_u64().unwrap();
        assert_eq!(requests, 200, "{stdout}");
        let made = at_python_function(&a, "alloc", "make_item");
        let mallocs: Vec<_> = made.iter().filter(|r| r.0 == "malloc").collect();
        let count: u64 = mallocs.iter().map(|r| r.1).sum();
        let bytes: u64 = mallocs.iter().map(|r| r.2).sum();
        assert_eq!(count, items * requests, "{made:#?}\n{stdout}");
        assert_eq!(bytes, 48 * items * requests, "{made:#?}");
        // Each Item and its name die in the generator that summed them.
        let freed: u64 = at_python_function(&a, "alloc", "work.<locals>.<genexpr>")
            .iter()
            .filter(|r| r.0 == "free")
            .map(|r| r.1)
            .sum();
        assert_eq!(freed, 2 * items * requests, "{stdout}");
        for (_, _, _, outwards) in &mallocs {
            assert!(
                outwards.starts_with(&[
                    "make_item",
                    "work.<locals>.<genexpr>",
                    "work",
                    "Handler.do_GET"
                ]),
                "{outwards:?}"
            );
        }
        // The line it ran (`return Item(index)`), and its Python callers.
        assert!(
            stdout.contains("make_item (server.py:31) [python]"),
            "{stdout}"
        );
        assert!(
            stdout.contains("work.<locals>.<genexpr> ← work"),
            "{stdout}"
        );
        assert_eq!(a["stacks"]["incomplete_events"], serde_json::json!({}));
        let reads: u64 = a["stacks"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["family"] == "syscalls" && r["event"] == "recvfrom")
            .filter(|r| {
                let s = &a["stacks"]["stacks"][r["stack"].as_str().unwrap()];
                let site = &s["frames"][s["user_site"].as_u64().unwrap() as usize];
                site["naming"] == "interpreted"
            })
            .map(|r| r["count"].as_u64().unwrap())
            .sum();
        assert!(
            reads >= requests,
            "recvfrom under Python: {reads}\n{stdout}"
        );
    }
}

/// Each thread's own Python frames: two threads of one python3.11 take
/// turns with the interpreter's lock, one calling os.getppid in `alpha`,
/// the other os.getuid in `beta`. Every getppid of the window is under
/// `alpha` and every getuid under `beta`: the frames are the thread's own
/// (found by its TLS base), not those of the thread that holds the lock.
#[test]
fn each_thread_of_a_python_process_has_its_own_python_frames() {
    use std::io::BufRead;
    root_or_skip!();
    let _g = probes_shared();
    let script = "import os, threading, time\n\
                  def alpha():\n    while True:\n        os.getppid()\n\
                  def beta():\n    while True:\n        os.getuid()\n\
                  for f in (alpha, beta):\n    threading.Thread(target=f, daemon=True).start()\n\
                  print('READY', flush=True)\n\
                  time.sleep(3600)\n";
    let mut child = std::process::Command::new(PYTHON)
        .args(["-c", script])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "READY");
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("a.json");
    let out = std::process::Command::new(super::rig_bin())
        .args(["attach", "--pid", &child.id().to_string()])
        .args(["--probes", "syscalls", "--duration", "2s", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let _ = child.kill();
    let _ = child.wait();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(rig::exit::OK), "{stdout}");
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    for (event, function) in [("getppid", "alpha"), ("getuid", "beta")] {
        let all: u64 = a["stacks"]["rows"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["family"] == "syscalls" && r["event"] == event)
            .map(|r| r["count"].as_u64().unwrap())
            .sum();
        let under: u64 = at_python_function(&a, "syscalls", function)
            .iter()
            .filter(|r| r.0 == event)
            .map(|r| r.1)
            .sum();
        assert!(all > 1000, "{event}: {all}\n{stdout}");
        assert_eq!(under, all, "{event} under {function}\n{stdout}");
    }
}
