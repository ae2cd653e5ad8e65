//! Managed runtimes as Debian ships them, running fixtures of our own: the
//! JVM (OpenJDK 17) and CPython (python3.11, link-time optimized). Where a
//! runtime keeps a heap, copies or locks of its own that rig does not
//! count, the family says so by name, with what would make it countable,
//! and the window is incomplete: never a silent zero.

use super::foreign::{attach_driven_with, start};
use super::probes_shared;

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

fn java(flags: &'static [&'static str]) -> super::foreign::Server {
    let server = rig_fixtures::java_server().display().to_string();
    start("java (Debian package openjdk-17-jdk-headless)", |port| {
        let mut argv = vec![JAVA.to_string()];
        argv.extend(flags.iter().map(|f| f.to_string()));
        argv.extend([server.clone(), port.to_string()]);
        argv
    })
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
            && w.contains("--usdt hotspot:object__alloc")
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
}

/// The flag and the probe the Java heap's line names count the fixture's
/// objects: at least its 7 `Server$Item`s per request (the handler's
/// other objects, the JDK's HTTP server's, come beside them).
#[test]
fn the_jvms_object_alloc_marker_counts_java_objects_with_the_flag_rig_names() {
    root_or_skip!();
    let _g = probes_shared();
    let s = java(&["-XX:+DTraceAllocProbes"]);
    let (stdout, a) = attach_driven_with(
        &s,
        "/work",
        200,
        &["--probes", "syscalls", "--usdt", "hotspot:object__alloc"],
        rig::exit::OK,
    );
    let probe = a["user"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["probe"] == "usdt:hotspot:object__alloc")
        .unwrap_or_else(|| panic!("no object__alloc probe: {stdout}"));
    let calls: u64 = probe["sites"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["calls"].as_u64().unwrap())
        .sum();
    let requests = a["window"]["requests"].as_u64().unwrap();
    assert!(
        calls >= 7 * requests,
        "{calls} objects in {requests} requests\n{stdout}"
    );
}

/// Debian's python3.11 with pymalloc (the default): the alloc family is
/// incomplete, naming the inlined allocation and free paths it found in
/// the interpreter's machine code (Debian's build has 190 and 51 today;
/// the test asks for some of each, not that number) and `PYTHONMALLOC=
/// malloc`. Started with `PYTHONMALLOC=malloc`, the same server's family
/// is complete, and counts more allocations per request than the pymalloc
/// run saw: what the inlined paths hid.
#[test]
fn cpythons_inlined_pymalloc_is_named_and_pythonmalloc_malloc_makes_the_family_complete() {
    root_or_skip!();
    let _g = probes_shared();
    let server = rig_fixtures::python_server().display().to_string();
    let run = |malloc: bool| {
        let s = start("python3.11 (Debian)", |port| {
            let mut argv: Vec<String> = Vec::new();
            if malloc {
                argv.extend(["env", "PYTHONMALLOC=malloc"].map(String::from));
            }
            argv.extend([PYTHON.to_string(), server.clone(), port.to_string()]);
            argv
        });
        let exit = if malloc {
            rig::exit::OK
        } else {
            rig::exit::INCOMPLETE
        };
        attach_driven_with(&s, "/work", 300, &["--probes", "alloc"], exit)
    };
    let (stdout, a) = run(false);
    assert_eq!(a["complete"], false, "{stdout}");
    let alloc = losses(&a, "alloc");
    let inlined = alloc
        .iter()
        .find(|w| w.starts_with("CPython's object allocator (pymalloc) is inlined"))
        .unwrap_or_else(|| panic!("{alloc:#?}\n{stdout}"));
    let number = |before: &str| -> u64 {
        let at = inlined.find(before).unwrap_or_else(|| panic!("{inlined}"));
        let digits: String = inlined[..at]
            .trim_end()
            .rsplit(' ')
            .next()
            .unwrap()
            .to_string();
        digits.parse().unwrap_or_else(|_| panic!("{inlined}"))
    };
    assert!(number(" allocation and") > 0, "{inlined}");
    assert!(number(" free paths") > 0, "{inlined}");
    assert!(inlined.contains("PYTHONMALLOC=malloc"), "{inlined}");
    assert!(inlined.ends_with("(/usr/bin/python3.11)"), "{inlined}");
    let seen = a["alloc_totals"]["allocations"].as_u64().unwrap();

    let (stdout, b) = run(true);
    assert_eq!(b["complete"], true, "{stdout}");
    let all = b["alloc_totals"]["allocations"].as_u64().unwrap();
    assert!(
        all > 2 * seen,
        "PYTHONMALLOC=malloc counted {all} allocations, pymalloc {seen}\n{stdout}"
    );
}
