//! `rig attach --live-heap` against conn_server (fixtures/conn/conn_server.c),
//! whose heap is known by construction: one 65536-byte block per open
//! connection, malloc'd at `SITE:conn_open`, freed at close.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{probes_shared, rig_bin};
use rig::exit;

const BLOCK: u64 = 65536;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_conn_server() -> (Server, u16) {
    let mut c = Command::new(rig_fixtures::conn_server())
        .args(["--port", "0"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(c.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .strip_prefix("READY port=")
        .unwrap_or_else(|| panic!("not READY: {line:?}"))
        .parse()
        .unwrap();
    (Server(c), port)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// Wait (up to a deadline that only guards against hanging) for `f`.
fn wait_until(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(60), "waited for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A connection that has had its one request answered: the server ran
/// conn_open for it (before it could read the request).
fn served(port: u16) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 256];
    while !got.ends_with(b"ok\n") {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "closed before answering");
        got.extend_from_slice(&buf[..n]);
    }
    s
}

#[test]
fn attach_live_heap_counts_blocks_left_and_frees_of_older_blocks_apart() {
    root_or_skip!();
    let _g = probes_shared();
    let (server, port) = start_conn_server();
    let pid = server.0.id();
    let base = fds(pid);
    // Eight connections, and their blocks, from before the window.
    let before: Vec<TcpStream> = (0..8).map(|_| served(port)).collect();
    let d = tempfile::tempdir().unwrap();
    let (open, done, json) = (
        d.path().join("open"),
        d.path().join("done"),
        d.path().join("a.json"),
    );
    // The load command marks the window open, then waits for the test.
    let script = format!(
        "touch {}; while [ ! -e {} ]; do sleep 0.02; done",
        open.display(),
        done.display()
    );
    let rig = Command::new(rig_bin())
        .args(["attach", "--pid", &pid.to_string(), "--probes", "alloc"])
        .arg("--live-heap")
        .arg("--json")
        .arg(&json)
        .args(["--", "sh", "-c", &script])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until("the window to open", || {
        open.exists() || !Path::new(&format!("/proc/{}", rig.id())).exists()
    });
    // Inside the window: the eight older blocks are freed, five new
    // connections each get theirs (and keep it).
    drop(before);
    let after: Vec<TcpStream> = (0..5).map(|_| served(port)).collect();
    // conn_close frees the block before it closes the descriptor.
    wait_until("the eight closes", || fds(pid) == base + 5);
    std::fs::write(&done, "").unwrap();
    let o = rig.wait_with_output().unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(o.status.code(), Some(exit::OK), "{text}");
    let a: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let live = &a["live_heap"];
    assert_eq!(live["complete"], true, "{live:#}");
    assert_eq!(live["dropped"], 0, "{live:#}");
    // Freed in the window, allocated before it: counted, never negative.
    assert_eq!(live["unmatched_frees"], 8, "{live:#}");
    assert_eq!(live["bytes"], 5 * BLOCK, "{live:#}");
    assert_eq!(live["blocks"], 5, "{live:#}");
    let sites = live["sites"].as_array().unwrap();
    assert_eq!(sites.len(), 1, "{live:#}");
    let s = &sites[0];
    assert_eq!(s["site"]["function"], "conn_open", "{s:#}");
    assert_eq!(
        s["site"]["line"],
        rig_fixtures::conn_line("conn_open"),
        "{s:#}"
    );
    assert!(
        s["site"]["file"]
            .as_str()
            .unwrap()
            .ends_with("conn_server.c"),
        "{s:#}"
    );
    assert_eq!(s["kind"], "malloc");
    assert_eq!(s["bytes"], 5 * BLOCK);
    assert_eq!(s["blocks"], 5);
    // With whole stacks (attach's default), by user site too: conn_open.
    assert_eq!(live["blocks_without_stack"], 0, "{live:#}");
    let users = live["user_sites"].as_array().unwrap();
    assert_eq!(users.len(), 1, "{live:#}");
    assert_eq!(users[0]["site"]["function"], "conn_open", "{live:#}");
    assert_eq!(
        (users[0]["blocks"].as_u64(), users[0]["bytes"].as_u64()),
        (Some(5), Some(5 * BLOCK))
    );
    assert!(
        text.contains(&format!(
            "live heap at the window's end: {} B in 5 blocks",
            5 * BLOCK
        )),
        "{text}"
    );
    assert!(
        text.contains("8 frees of blocks allocated before it"),
        "{text}"
    );
    drop(after);
}

#[test]
fn attach_refuses_live_heap_without_the_alloc_probes() {
    let o = Command::new(rig_bin())
        .args([
            "attach",
            "--pid",
            "1",
            "--probes",
            "syscalls",
            "--live-heap",
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(exit::USAGE));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("--live-heap without the alloc probes"),
        "{err}"
    );
}

/// calib's /calib allocates 8 blocks per request (3 malloc, calloc, malloc
/// and its realloc, posix_memalign, memalign: fixtures/calib/COSTS.md) and
/// frees every one before answering: a window of N requests records 8N
/// allocations and leaves none live, with every free matched, while the
/// alloc table's counts stay what they are without the live heap.
#[test]
fn every_block_calib_allocates_and_frees_in_the_window_nets_to_nothing_live() {
    root_or_skip!();
    let _g = probes_shared();
    const N: u64 = 300;
    let target = super::calib(&[]);
    let s = rig::session::AttachSettings {
        pid: target.pid(),
        families: vec![rig::probe::Family::Alloc],
        duration: Duration::ZERO,
        per: None,
        drive: Some(super::drive(target.port, "/calib", N, 1)),
        command: Vec::new(),
        tree: None,
        wrappers: Vec::new(),
        live_heap: true,
        user_probes: Vec::new(),
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let a = rig::session::run_attach(&s, &stop).expect("attribution session");
    assert_eq!(a.window.load.as_ref().unwrap().succeeded, N);
    assert!(a.complete, "{:?}", a.losses);
    let live = a.live_heap.as_ref().expect("a live heap");
    // Each outermost call once: posix_memalign's and realloc's own work
    // inside glibc is not another allocation.
    assert_eq!(live.recorded, 8 * N, "{live:#?}");
    assert_eq!(live.unmatched_frees, 0, "{live:#?}");
    assert_eq!((live.bytes, live.blocks), (0, 0), "{live:#?}");
    assert_eq!(live.sites, vec![], "{live:#?}");
    assert!(live.complete);
    // The counted table is the one a window without the live heap gives.
    assert_eq!(a.alloc_totals.allocations, 8 * N, "{:#?}", a.alloc);
    assert_eq!(a.alloc_totals.frees, 7 * N);
    assert_eq!(
        a.alloc_totals.bytes,
        (3 * 24 + 64 + 5000 + 100 + 256 + 512) * N
    );
    assert_eq!(a.alloc_at("calib_alloc_realloc", "realloc"), (N, 100 * N));
    assert_eq!(
        a.alloc_at("calib_alloc_aligned", "posix_memalign"),
        (N, 256 * N)
    );
}

const CXX_SRC: &str = r#"
#include <cstdio>
struct Obj { long a[6]; };               // 48 bytes
static Obj *kept[100000];
static int n_kept;
__attribute__((noinline)) void work() {
    kept[n_kept++] = new Obj;            // operator new(48), kept: live
    int *arr = new int[10];              // operator new[](40)
    arr[0] = 1;
    delete[] arr;                        // freed in the window
}
int main() {
    char line[16];
    std::puts("READY");
    std::fflush(stdout);
    while (std::fgets(line, sizeof line, stdin)) {
        work();
        std::fputs("ok\n", stdout);
        std::fflush(stdout);
    }
}
"#;

/// operator new and new[] go through libstdc++ to malloc (new[] by way of
/// new): each is one block, recorded once at its caller, with the size
/// the program asked for.
#[test]
fn cxx_new_is_one_live_block_at_its_caller_and_new_array_freed_is_none() {
    root_or_skip!();
    let _g = probes_shared();
    // -O0: at -O2 g++ may elide a new/delete pair altogether.
    let mut prog = super::Driven::build(
        "g++",
        &["-O0", "-g", "-fno-omit-frame-pointer"],
        "live.cc",
        CXX_SRC,
    );
    let pid = prog.pid();
    let mut round = |n: u64| {
        for _ in 0..n {
            assert_eq!(prog.ask(), "ok");
        }
    };
    round(50); // warm-up: stdio buffers, lazy binding
    let probes = rig::probe::ProbeSet::attach_opts(
        pid,
        &[rig::probe::Family::Alloc],
        rig::probe::Scope::Process,
        rig::probe::Stacks::Off,
        true,
    )
    .unwrap();
    round(50);
    const N: u64 = 1000;
    let start = probes.start_window().unwrap();
    round(N);
    let w = probes
        .end_window(start, rig::probe::WindowEnd::Completed)
        .unwrap();
    drop(probes);
    let a =
        rig::report::Attribution::build(&w, Some(N), None, &mut rig::symbolize::Symbolizer::new());
    let live = a.live_heap.as_ref().expect("a live heap");
    assert_eq!(live.recorded, 2 * N, "{live:#?}");
    assert_eq!(live.unmatched_frees, 0, "{live:#?}");
    assert_eq!((live.blocks, live.bytes), (N, 48 * N), "{live:#?}");
    assert_eq!(live.sites.len(), 1, "{live:#?}");
    let s = &live.sites[0];
    assert_eq!(s.site.function.as_deref(), Some("work()"), "{s:#?}");
    assert_eq!(s.kind, "operator new");
    assert_eq!((s.blocks, s.bytes), (N, 48 * N));
    // The counted table is unchanged by the uretprobes.
    assert_eq!(a.alloc_totals.allocations, 2 * N, "{:#?}", a.alloc);
    assert_eq!(a.alloc_totals.bytes, 88 * N);
    assert_eq!(a.alloc_totals.frees, N, "{:#?}", a.alloc);
}

const MANY_SRC: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#define BLOCKS 270000
static void *kept[BLOCKS];
__attribute__((noinline)) static void keep_all(void) {
    for (int i = 0; i < BLOCKS; i++)
        kept[i] = malloc(16);
}
int main(void) {
    char line[16];
    puts("READY");
    fflush(stdout);
    while (fgets(line, sizeof line, stdin)) {
        keep_all();
        fputs("ok\n", stdout);
        fflush(stdout);
    }
}
"#;

/// More live blocks than the map holds (262144): the ones it could not
/// keep are counted, the result and the window are marked incomplete, and
/// kept plus dropped is every allocation.
#[test]
fn a_full_live_heap_counts_what_it_dropped_and_is_incomplete() {
    root_or_skip!();
    let _g = probes_shared();
    let mut prog = super::Driven::build("gcc", &["-O0", "-g"], "many.c", MANY_SRC);
    let pid = prog.pid();
    let probes = rig::probe::ProbeSet::attach_opts(
        pid,
        &[rig::probe::Family::Alloc],
        rig::probe::Scope::Process,
        rig::probe::Stacks::Off,
        true,
    )
    .unwrap();
    let start = probes.start_window().unwrap();
    assert_eq!(prog.ask(), "ok");
    let w = probes
        .end_window(start, rig::probe::WindowEnd::Completed)
        .unwrap();
    drop(probes);
    let a = rig::report::Attribution::build(&w, None, None, &mut rig::symbolize::Symbolizer::new());
    let live = a.live_heap.as_ref().expect("a live heap");
    const BLOCKS: u64 = 270_000;
    let max = rig::probe::live::LIVE_MAX_BLOCKS as u64;
    assert!(!live.complete, "{live:?}");
    assert!(live.dropped >= BLOCKS - max, "{}", live.dropped);
    assert_eq!(live.blocks + live.dropped, BLOCKS);
    assert_eq!(live.bytes + live.dropped_bytes, 16 * BLOCKS);
    assert_eq!(live.recorded, live.blocks);
    assert_eq!(live.sites[0].site.function.as_deref(), Some("keep_all"));
    // The window says it lost events, as every family's full map does.
    assert!(!a.complete);
    assert!(
        a.losses[&rig::probe::Family::Alloc]
            .iter()
            .any(|(what, n)| what == "map full" && *n >= live.dropped),
        "{:?}",
        a.losses
    );
}

/// fixtures/rustalloc's `work` allocates 5 blocks per request through
/// Rust's shims (a Box, a Vec that grows by realloc, a zeroed buffer and
/// a format! string) into jemalloc or mimalloc, and frees all of them:
/// each outermost call is recorded once (the shim's jump into the
/// allocator, and the allocator's own calls, are not more), every free is
/// matched, nothing stays live.
#[test]
fn rust_allocations_through_the_shims_are_recorded_once_and_all_freed() {
    root_or_skip!();
    let _g = probes_shared();
    const N: u64 = 500;
    for allocator in ["jemalloc", "mimalloc"] {
        let bin = super::allocators::rustalloc(&format!("rustalloc_{allocator}"));
        let mut cmd = Command::new(&bin);
        cmd.args(["--port", "0"]);
        let target = rig::session::Child::spawn_ready(cmd).expect("Rust fixture starts");
        let s = rig::session::AttachSettings {
            pid: target.pid(),
            families: vec![rig::probe::Family::Alloc],
            duration: Duration::ZERO,
            per: None,
            drive: Some(super::drive(target.port, "/calib", N, 1)),
            command: Vec::new(),
            tree: None,
            wrappers: Vec::new(),
            live_heap: true,
            user_probes: Vec::new(),
        };
        let stop = std::sync::atomic::AtomicBool::new(false);
        let a = rig::session::run_attach(&s, &stop).expect("attribution session");
        assert_eq!(a.window.load.as_ref().unwrap().succeeded, N);
        let live = a.live_heap.as_ref().expect("a live heap");
        assert_eq!(live.recorded, 5 * N, "{allocator}: {live:#?}");
        assert_eq!(live.unmatched_frees, 0, "{allocator}: {live:#?}");
        assert_eq!((live.blocks, live.bytes), (0, 0), "{allocator}: {live:#?}");
        assert!(live.complete);
        // The counted table is the one a window without the live heap gives.
        assert_eq!(a.alloc_totals.allocations, 5 * N, "{:#?}", a.alloc);
        assert_eq!(a.alloc_totals.frees, 4 * N, "{:#?}", a.alloc);
    }
}
