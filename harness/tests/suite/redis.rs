//! Debian's redis-server, which allocates through jemalloc: rig's counts of
//! a GET against an independent truth (a counting LD_PRELOAD library,
//! fixtures/alloc/alloccount.c, in a separate run), and user sites in redis.
//!
//! Two windows: `rig attach -- redis-benchmark ...`, the window tied to the
//! load tool with the request count rig reads from its output; and a
//! `--duration` window around the test's own RESP client sending exactly
//! `N` sequential GETs, divided by `--per N` (rig's `--drive` speaks HTTP
//! only).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rig::elf::{load_base, ElfFacts};
use rig::launch::port::{check_holder, free_port, HolderCheck};
use rig::process::maps::ProcMaps;

use super::{probes_shared, rig_bin};
use rig::exit;

const N: u64 = 8_000;
const WARMUP: u64 = 2_000;

/// A redis-server this test started on a loopback port it chose.
pub(super) struct Redis {
    pub(super) child: std::process::Child,
    pub(super) port: u16,
    dir: PathBuf,
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub(super) fn start_redis(preload: Option<&Path>) -> Redis {
    // Another process (a parallel test's target) may take the port between
    // free_port() and redis's bind: then redis exits or another process
    // holds the port, and a fresh port is tried, as rig's launcher does.
    for _ in 0..3 {
        if let Some(r) = try_start_redis(preload) {
            return r;
        }
    }
    panic!("redis-server lost its port three times in a row");
}

fn try_start_redis(preload: Option<&Path>) -> Option<Redis> {
    let dir = rig::fsutil::private_dir("rig-redis-test").unwrap();
    let port = free_port().unwrap();
    let mut cmd = Command::new("redis-server");
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
        .args(["--loglevel", "warning"])
        .arg("--dir")
        .arg(&dir)
        .stdout(Stdio::null());
    if let Some(lib) = preload {
        cmd.env("LD_PRELOAD", lib);
    }
    let child = cmd
        .spawn()
        .expect("redis-server (Debian package redis-server) starts");
    let mut r = Redis { child, port, dir };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match check_holder(port, r.child.id()) {
            HolderCheck::Proven(_) => return Some(r),
            HolderCheck::Other { pid, cmdline } => {
                eprintln!("port {port} was taken by pid {pid} ({cmdline}); trying another");
                return None;
            }
            HolderCheck::NoListener => {
                if r.child.try_wait().unwrap().is_some() {
                    eprintln!(
                        "redis-server exited before listening on {port}; trying another port"
                    );
                    return None;
                }
                assert!(
                    Instant::now() < deadline,
                    "redis-server never listened on {port}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// redis's own allocation wrappers (zmalloc.c): the user site is their
/// caller.
const ZMALLOC_WRAPPERS: &[&str] = &[
    "--wrapper",
    "zmalloc*",
    "--wrapper",
    "zcalloc*",
    "--wrapper",
    "zrealloc*",
    "--wrapper",
    "ztry*",
    "--wrapper",
    "zfree*",
];

/// Every alloc row is jemalloc's, and the user site of (nearly) every call
/// is a named function of redis itself.
fn jemalloc_rows_with_user_sites_in_redis(a: &serde_json::Value, stdout: &str) {
    // Served by jemalloc, found through the C library's GOT.
    let rows = a["alloc"].as_array().unwrap();
    assert!(
        rows.iter().all(|r| r["allocator"] == "jemalloc"),
        "{stdout}"
    );
    assert!(stdout.contains("jemalloc malloc"), "{stdout}");
    // The user site of (nearly) every call is in redis itself, named (the
    // Debian binary is redis-check-rdb; redis-server links to it).
    let stacks = &a["stacks"];
    let mut in_redis = 0u64;
    let mut all = 0u64;
    for r in stacks["rows"].as_array().unwrap() {
        if r["family"] != "alloc" || r["inner"] == true {
            continue;
        }
        let count = r["count"].as_u64().unwrap();
        all += count;
        let Some(id) = r["stack"].as_str() else {
            continue;
        };
        let s = &stacks["stacks"][id];
        let site = &s["frames"][s["user_site"].as_u64().unwrap() as usize];
        let function = site["function"].as_str().unwrap_or("");
        if site["module"]
            .as_str()
            .is_some_and(|m| m.rsplit('/').next().unwrap().starts_with("redis-"))
            && !function.is_empty()
            && !function.starts_with('z')
        {
            in_redis += count;
        }
    }
    assert!(
        in_redis as f64 >= 0.995 * all as f64,
        "user sites in redis-server: {in_redis} of {all}\n{stdout}"
    );
}

/// A RESP connection sending sequential requests.
struct Client(TcpStream);

impl Client {
    fn new(port: u16) -> Client {
        let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_nodelay(true).unwrap();
        let mut c = Client(s);
        c.call(b"*3\r\n$3\r\nSET\r\n$3\r\nfoo\r\n$3\r\nbar\r\n", b"+OK\r\n");
        c
    }

    fn call(&mut self, req: &[u8], reply: &[u8]) {
        self.0.write_all(req).unwrap();
        let mut got = vec![0u8; reply.len()];
        self.0.read_exact(&mut got).unwrap();
        assert_eq!(got, reply, "{}", String::from_utf8_lossy(&got));
    }

    fn gets(&mut self, n: u64) {
        for _ in 0..n {
            self.call(b"*2\r\n$3\r\nGET\r\n$3\r\nfoo\r\n", b"$3\r\nbar\r\n");
        }
    }
}

/// The counters of alloccount.so in `pid`, read from its memory:
/// (allocations, frees of non-NULL pointers).
fn shim_counts(pid: u32, lib: &Path) -> (u64, u64) {
    let maps = ProcMaps::read(pid).unwrap();
    let path = lib.to_string_lossy().into_owned();
    let facts = ElfFacts::shared(lib).unwrap();
    let base = load_base(&maps, &path, &facts).expect("alloccount.so is mapped");
    let read = |name: &str| {
        let sym = facts.lookup_symbol(name).unwrap();
        rig::probe::ifunc::read_u64(pid, base + sym.vaddr).unwrap()
    };
    (read("rig_count_allocs"), read("rig_count_frees"))
}

/// Allocations and frees per GET by the counting library: the truth.
fn truth_per_get() -> (f64, f64) {
    let lib = rig_fixtures::alloccount();
    let redis = start_redis(Some(lib));
    let pid = redis.child.id();
    let mut c = Client::new(redis.port);
    c.gets(WARMUP);
    let before = shim_counts(pid, lib);
    c.gets(N);
    let after = shim_counts(pid, lib);
    (
        (after.0 - before.0) as f64 / N as f64,
        (after.1 - before.1) as f64 / N as f64,
    )
}

#[test]
fn counts_redis_jemalloc_allocations_per_get_within_half_a_percent_of_a_counting_shim() {
    root_or_skip!();
    let (truth_allocs, truth_frees) = truth_per_get();
    let _g = probes_shared();
    let redis = start_redis(None);
    let pid = redis.child.id();
    let mut c = Client::new(redis.port);
    c.gets(WARMUP);
    let json = redis.dir.join("attribution.json");
    let mut rig = Command::new(rig_bin())
        .args(["attach", "--pid", &pid.to_string(), "--probes", "alloc"])
        .args(["--duration", "6s", "--per", &N.to_string(), "--top", "8"])
        .args(ZMALLOC_WRAPPERS)
        .arg("--json")
        .arg(&json)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(rig.stderr.take().unwrap());
    let mut line = String::new();
    loop {
        line.clear();
        assert!(
            stderr.read_line(&mut line).unwrap() > 0,
            "rig ended before its window opened"
        );
        if line.contains("window open") {
            break;
        }
    }
    let sent = Instant::now();
    c.gets(N);
    let took = sent.elapsed();
    let out = rig.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(rig::exit::OK), "{stdout}");
    assert!(
        took < Duration::from_secs(6),
        "the GETs fit in the window: {took:?}"
    );
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let totals = &a["alloc_totals"];
    let per = |v: &serde_json::Value| v.as_u64().unwrap() as f64 / N as f64;
    let (allocs, frees) = (per(&totals["allocations"]), per(&totals["frees"]));
    eprintln!(
        "redis GET: rig {allocs:.4} allocations, {frees:.4} frees; \
         counting shim {truth_allocs:.4}, {truth_frees:.4}"
    );
    assert!(
        (allocs - truth_allocs).abs() <= 0.005 * truth_allocs,
        "allocations/GET: rig {allocs}, truth {truth_allocs}\n{stdout}"
    );
    assert!(
        (frees - truth_frees).abs() <= 0.005 * truth_frees,
        "frees/GET: rig {frees}, truth {truth_frees}\n{stdout}"
    );
    jemalloc_rows_with_user_sites_in_redis(&a, &stdout);
}

/// `redis-benchmark` sending exactly `GETS` GETs on one connection, one at
/// a time, to `port`.
fn benchmark_argv(port: u16) -> Vec<String> {
    let gets = GETS.to_string();
    ["redis-benchmark", "-p", &port.to_string(), "-n", &gets]
        .into_iter()
        .chain(["-c", "1", "-t", "get", "-P", "1"])
        .map(String::from)
        .collect()
}

const GETS: u64 = 20_000;

fn run_benchmark(port: u16) {
    let argv = benchmark_argv(port);
    let out = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .expect("redis-benchmark (Debian package redis-tools) runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Allocations and frees per GET by the counting library over one whole
/// `redis-benchmark` run (its connection, `CONFIG GET`s and close are in
/// both this count and rig's command window): the truth.
fn truth_per_benchmark_get() -> (f64, f64) {
    let lib = rig_fixtures::alloccount();
    let redis = start_redis(Some(lib));
    let pid = redis.child.id();
    run_benchmark(redis.port);
    let before = shim_counts(pid, lib);
    run_benchmark(redis.port);
    let after = shim_counts(pid, lib);
    (
        (after.0 - before.0) as f64 / GETS as f64,
        (after.1 - before.1) as f64 / GETS as f64,
    )
}

#[test]
fn a_redis_benchmark_command_window_counts_jemallocs_allocations_per_get_within_half_a_percent_of_a_counting_shim(
) {
    root_or_skip!();
    let (truth_allocs, truth_frees) = truth_per_benchmark_get();
    let _g = probes_shared();
    let redis = start_redis(None);
    let pid = redis.child.id();
    // The same warm-up as the truth's: one run before the counted one.
    run_benchmark(redis.port);
    let json = redis.dir.join("attribution.json");
    let out = Command::new(rig_bin())
        .args(["attach", "--pid", &pid.to_string(), "--probes", "alloc"])
        .args(["--top", "8"])
        .args(ZMALLOC_WRAPPERS)
        .arg("--json")
        .arg(&json)
        .arg("--")
        .args(benchmark_argv(redis.port))
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(exit::OK), "{stderr}\n{stdout}");
    let a: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    // No --per: the count is redis-benchmark's own, read from its output,
    // and the report says where it came from.
    let cmd = &a["window"]["command"];
    assert_eq!(cmd["exit_code"], 0, "{cmd}");
    assert_eq!(cmd["count"]["tool"], "redis-benchmark", "{cmd}");
    assert_eq!(a["window"]["requests"], GETS);
    let evidence = cmd["count"]["evidence"].to_string();
    assert!(
        evidence.contains(&format!("GET: {GETS} requests completed in")),
        "{evidence}"
    );
    assert!(
        stdout.contains(&format!(
            "requests: {GETS} successful, read from redis-benchmark's output"
        )),
        "{stdout}"
    );
    let totals = &a["alloc_totals"];
    let per = |v: &serde_json::Value| v.as_u64().unwrap() as f64 / GETS as f64;
    let (allocs, frees) = (per(&totals["allocations"]), per(&totals["frees"]));
    eprintln!(
        "redis-benchmark GET: rig {allocs:.4} allocations, {frees:.4} frees; \
         counting shim {truth_allocs:.4}, {truth_frees:.4}"
    );
    assert!(
        (allocs - truth_allocs).abs() <= 0.005 * truth_allocs,
        "allocations/GET: rig {allocs}, truth {truth_allocs}\n{stdout}"
    );
    assert!(
        (frees - truth_frees).abs() <= 0.005 * truth_frees,
        "frees/GET: rig {frees}, truth {truth_frees}\n{stdout}"
    );
    jemalloc_rows_with_user_sites_in_redis(&a, &stdout);
}
