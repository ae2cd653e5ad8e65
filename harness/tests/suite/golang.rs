//! A Go net/http server (fixtures/go/goserver, costs in fixtures/go/COSTS.md):
//! Go's allocator probed (`runtime.mallocgc`, size from the register ABI),
//! exact allocations and bytes per request at the function that makes them
//! (the user site past Go's runtime frames), GC cycles counted exactly, Go
//! stacks unwound from `.gopclntab` and named from it, the same with the
//! binary stripped, equal to gdb's backtraces at the same points, and never
//! a uretprobe in Go code; a cgo server (fixtures/go/cgoserver) whose
//! stacks cross between Go and C both ways.

use rig::probe::stacks::Stacks;
use rig::probe::{Family, ProbeSet, Scope};
use rig::report::stacks::{StackFrames, StackRow};
use rig::report::Attribution;
use rig::session::Child;

use super::{attribute_path, probes_shared};

const N: u64 = 1000;

fn goserver(stripped: bool) -> Child {
    go_binary(&rig_fixtures::goserver(stripped))
}

/// A goserver build (the fixture's, or one of the Go matrix's), started.
fn go_binary(binary: &std::path::Path) -> Child {
    let mut cmd = std::process::Command::new(binary);
    cmd.args(["--port", "0"]);
    Child::spawn_ready(cmd).unwrap_or_else(|e| panic!("{} starts: {e:#}", binary.display()))
}

fn at(marker: &str) -> String {
    format!("main.go:{}", rig_fixtures::go_site_line(marker))
}

fn render(s: &StackFrames) -> String {
    let mut out = String::new();
    for (i, f) in s.frames.iter().enumerate() {
        let mark = if i == s.user_site { '*' } else { ' ' };
        out.push_str(&format!("  {mark}{i:>2} {}\n", f.label()));
    }
    if !s.incomplete.is_empty() {
        out.push_str(&format!("  incomplete: {:?}\n", s.incomplete));
    }
    out
}

/// Whether `s` is the known break: a signal's return whose interrupted code
/// is the vDSO, called by Go's clock reads (`time.now`, `runtime.nanotime1`)
/// on the thread's system stack, where rig does not follow Go's saved
/// goroutine stack pointer (`m.vdsoSP`): the stack ends there, incomplete.
/// It was seen once in the Go matrix (1.26), one stack of thousands.
fn is_signal_in_gos_vdso_call(event: &str, s: &StackFrames) -> bool {
    let name = |i: usize| s.frames.get(i).and_then(|f| f.function.as_deref());
    event == "rt_sigreturn"
        && name(1).is_some_and(|f| f.starts_with("__vdso_"))
        && name(2).is_some_and(|f| {
            [
                "time.now",
                "runtime.nanotime1",
                "runtime.walltime",
                "runtime.walltime1",
            ]
            .contains(&f)
        })
}

/// The rows of process `pid` with their stacks, each asserted whole (but
/// for `is_signal_in_gos_vdso_call`'s).
fn whole_stacks(a: &Attribution, pid: u32) -> Vec<(&StackRow, &StackFrames)> {
    let rows = a.stacks.rows.iter().filter(|r| r.pid == pid);
    rows.map(|r| {
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        assert!(
            s.incomplete.is_empty() || is_signal_in_gos_vdso_call(&r.event, s),
            "{} {} x{}:\n{}",
            r.family,
            r.event,
            r.count,
            render(s)
        );
        (r, s)
    })
    .collect()
}

/// Whether a stack's `event` is `want`; `runtime.mallocgc` stands for
/// Go's allocator, also the size-specialized entries of Go 1.27 on
/// (`runtime.mallocgcSmallScanNoHeaderSC5`), which compiled code calls
/// directly for a small object.
fn is_event(event: &str, want: &str) -> bool {
    event == want || (want == "runtime.mallocgc" && event.starts_with("runtime.mallocgc"))
}

/// (count, bytes) of `event` stacks of family `family` whose user site is
/// `function` at `line`.
fn at_user_site(
    a: &Attribution,
    family: Family,
    event: &str,
    function: &str,
    line: &str,
) -> (u64, u64) {
    a.stacks
        .rows
        .iter()
        .filter(|r| r.family == family && is_event(&r.event, event))
        .filter(|r| {
            a.stacks.user_site(r).is_some_and(|s| {
                s.function.as_deref() == Some(function) && s.file_line().as_deref() == Some(line)
            })
        })
        .fold((0, 0), |(c, b), r| (c + r.count, b + r.amount))
}

/// Exact allocations and bytes at goAllocs' sites, GC cycles, every stack
/// whole, of the goserver build `binary`.
pub(super) fn go_server_measured_exactly(binary: &std::path::Path) {
    let _g = probes_shared();
    let target = go_binary(binary);
    let a = attribute_path(&target, &[Family::Alloc, Family::Syscalls], "/alloc", N, 1);
    for r in a.stacks.rows.iter().filter(|r| r.family == Family::Alloc) {
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        if s.frames
            .iter()
            .any(|f| f.function.as_deref() == Some("main.goAllocs"))
        {
            println!("{} x{} {} B:\n{}", r.event, r.count, r.amount, render(s));
        }
    }
    // goAllocs: three make([]byte, 100) and one new(record) (48 bytes) in
    // newRecord, inlined at its call in goAllocs.
    for (marker, bytes) in [
        ("go_slice_a", 100),
        ("go_slice_b", 100),
        ("go_slice_c", 100),
        ("go_record_call", 48),
    ] {
        assert_eq!(
            at_user_site(
                &a,
                Family::Alloc,
                "runtime.mallocgc",
                "main.goAllocs",
                &at(marker)
            ),
            (N, N * bytes),
            "runtime.mallocgc at main.goAllocs ({})",
            at(marker)
        );
    }
    // The inlined function is a frame of its own at the same address,
    // named from the binary's inline tree, at its own line.
    let record = a
        .stacks
        .rows
        .iter()
        .filter(|r| r.family == Family::Alloc && r.amount == N * 48)
        .map(|r| &a.stacks.stacks[r.stack.as_ref().unwrap()])
        .find(|s| s.frames[s.user_site].function.as_deref() == Some("main.goAllocs"))
        .expect("the record's stack");
    let site = &record.frames[record.user_site];
    let inlined: Vec<(String, Option<String>, Option<u32>)> = site
        .inlined
        .iter()
        .map(|i| {
            let file = i.file.as_deref().map(|f| {
                std::path::Path::new(f)
                    .file_name()
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            });
            (i.function.clone(), file, i.line)
        })
        .collect();
    assert_eq!(
        inlined,
        [(
            "main.newRecord".to_string(),
            Some("main.go".to_string()),
            Some(rig_fixtures::go_site_line("go_record"))
        )],
        "{}",
        render(record)
    );
    // One collection per 100 /alloc requests, the collector off otherwise.
    assert_eq!(a.alloc_totals.gc_cycles, N / 100, "{:#?}", a.alloc_totals);
    // Go's heap has no frees (a build with cgo may free C memory: the
    // runtime's C thread start frees its argument).
    let layer = a.alloc_layers.iter().find(|l| l.allocator == "go");
    assert!(
        layer.is_some_and(|l| l.totals.allocations >= 4 * N && l.totals.frees == 0),
        "a garbage-collected heap: {:#?}",
        a.alloc_layers
    );
    assert!(a.alloc_unprobed.is_empty(), "{:#?}", a.alloc_unprobed);
    // Every Go stack whole: the read and the write of each request reach
    // the connection's goroutine.
    let mut whole = 0;
    for (r, s) in whole_stacks(&a, target.pid()) {
        if r.family == Family::Syscalls && ["read", "write"].contains(&r.event.as_str()) {
            let names: Vec<&str> = s
                .frames
                .iter()
                .filter_map(|f| f.function.as_deref())
                .collect();
            if names.contains(&"net/http.(*conn).serve") {
                assert_eq!(names.last(), Some(&"runtime.goexit"), "{}", render(s));
                whole += r.count;
            }
        }
    }
    assert!(
        whole >= 2 * N,
        "each request's read and write reach net/http.(*conn).serve: {whole}"
    );
}

#[test]
fn a_go_server_counts_exact_allocations_and_gc_cycles_at_the_function_that_allocates() {
    root_or_skip!();
    go_server_measured_exactly(&rig_fixtures::goserver(false));
}

#[test]
fn a_stripped_go_server_is_named_from_its_pclntab_exactly_as_the_unstripped_one() {
    root_or_skip!();
    let out = std::process::Command::new("readelf")
        .args(["-S", "-W"])
        .arg(rig_fixtures::goserver(true))
        .output()
        .unwrap();
    let sections = String::from_utf8_lossy(&out.stdout);
    assert!(
        !sections.contains(".symtab") && !sections.contains(".debug_info"),
        "the fixture is stripped: {sections}"
    );
    go_server_measured_exactly(&rig_fixtures::goserver(true));
}

#[test]
fn no_uretprobe_is_ever_attached_in_go_code_even_for_the_live_heap() {
    root_or_skip!();
    let _g = probes_shared();
    let target = goserver(false);
    let probes = ProbeSet::attach_opts(
        target.pid(),
        &[Family::Alloc],
        Scope::Process,
        Stacks::On,
        true,
    )
    .expect("probes attach");
    let notes = probes.notes();
    let go: Vec<_> = notes
        .iter()
        .filter(|n| n.family == Family::Alloc && n.note.contains("goserver"))
        .collect();
    assert!(
        go.iter().any(|n| n.what == "runtime.mallocgc"),
        "mallocgc is probed: {notes:#?}"
    );
    for n in &go {
        assert!(
            !n.note.starts_with("uprobe and uretprobe"),
            "a uretprobe in Go code: {n:?}"
        );
    }
    let m = go.iter().find(|n| n.what == "runtime.mallocgc").unwrap();
    assert!(
        m.note.contains("no uretprobe") && m.note.contains("live heap is not available for Go"),
        "{m:?}"
    );
    drop(probes);
}

/// A thread the Go runtime makes during the window: its first syscall
/// (gettid, inside runtime.clone on the thread's new stack) is a whole
/// stack of that one frame, never the frames its fresh stack memory happens
/// to hold; the parent's clone syscall in the same function unwinds on to
/// runtime.newosproc. `/thread` ends one OS thread per request, so the
/// runtime makes threads all through the window.
#[test]
fn a_thread_made_during_the_window_starts_its_stack_at_runtime_clone() {
    root_or_skip!();
    let _g = probes_shared();
    let target = goserver(false);
    let a = attribute_path(&target, &[Family::Syscalls], "/thread", 200, 1);
    let (mut children, mut parents) = (0, 0);
    for r in a.stacks.rows.iter().filter(|r| r.pid == target.pid()) {
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        assert!(
            s.incomplete.is_empty(),
            "{} x{}:\n{}",
            r.event,
            r.count,
            render(s)
        );
        let names: Vec<&str> = s
            .frames
            .iter()
            .map(|f| f.function.as_deref().unwrap_or("?"))
            .collect();
        if names.first() != Some(&"runtime.clone") {
            continue;
        }
        match r.event.as_str() {
            "gettid" => {
                assert_eq!(names, ["runtime.clone"], "the new thread's whole stack");
                children += r.count;
            }
            "clone" => {
                assert_eq!(names.get(1), Some(&"runtime.newosproc"), "{}", render(s));
                parents += r.count;
            }
            other => panic!("{other} in runtime.clone:\n{}", render(s)),
        }
    }
    println!("{children} gettid in new threads, {parents} clone");
    assert!(
        children > 0 && parents > 0,
        "threads made in the window: {children} gettid in new threads, {parents} clone"
    );
}

/// A cgo build's thread starts (`/thread`: one OS thread per request, made
/// through cgo's C: `_cgo_try_pthread_create`, glibc's `pthread_create`
/// and `clone3`, then `threadentry` on the new thread): every stack whole
/// (cgo's C code, linked without its `.eh_frame`, read by the stack height
/// analysis; the parent's half of `clone3`), the parent's `clone3` under
/// `_cgo_try_pthread_create` once per thread made.
pub(super) fn cgo_thread_starts_are_whole(binary: &std::path::Path) {
    let _g = probes_shared();
    let target = go_binary(binary);
    let a = attribute_path(&target, &[Family::Syscalls], "/thread", 200, 1);
    let mut made = 0;
    for (r, s) in whole_stacks(&a, target.pid()) {
        let under = |f: &str| s.frames.iter().any(|x| x.function.as_deref() == Some(f));
        if r.event == "clone3" && under("_cgo_try_pthread_create") {
            made += r.count;
        }
    }
    assert!(
        made >= 190,
        "threads made through cgo in the window: {made}"
    );
}

/// One `GET /alloc` on a keep-alive connection: the request written,
/// `answer` reads the response (Go's `ok` body, `Content-Length: 3`).
struct KeepAlive(std::net::TcpStream);

impl KeepAlive {
    fn connect(port: u16) -> KeepAlive {
        let s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(std::time::Duration::from_secs(60)))
            .unwrap();
        KeepAlive(s)
    }

    fn send(&mut self) {
        use std::io::Write;
        self.0
            .write_all(b"GET /alloc HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .unwrap();
    }

    fn answer(&mut self) {
        use std::io::Read;
        let mut got = Vec::new();
        let mut buf = [0u8; 512];
        while !got.ends_with(b"\r\n\r\nok\n") {
            let n = self.0.read(&mut buf).unwrap();
            assert!(
                n > 0,
                "the Go server closed: {:?}",
                String::from_utf8_lossy(&got)
            );
            got.extend_from_slice(&buf[..n]);
        }
    }
}

/// For one request, gdb's backtrace (unwound from the DWARF call frame
/// information Go writes, a source rig does not read) at each of the
/// request's allocations in `main.goAllocs` (a breakpoint on the exact
/// instruction rig's `runtime.mallocgc` probe sits on) and at its response
/// `write` (a syscall catchpoint, under `net/http.(*conn).serve`) equals
/// rig's stack for that event frame by frame: the same code address
/// (module and offset) and the same function name in every frame, from
/// the allocation or syscall to `runtime.goexit`.
///
/// gdb runs on a second process of the same binary, which never had a
/// uprobe (see `stacks::stacks_equal_gdb` for why).
#[test]
fn go_stacks_equal_gdb_backtraces_at_the_same_points() {
    root_or_skip!();
    go_stacks_equal_gdb(&rig_fixtures::goserver(false));
}

/// [`go_stacks_equal_gdb_backtraces_at_the_same_points`] of the goserver
/// build `binary` (one with DWARF, which gdb unwinds from).
pub(super) fn go_stacks_equal_gdb(binary: &std::path::Path) {
    use super::stacks::{addr_of, code_of, gdb_backtraces, text_maps, Code};
    let _g = probes_shared();
    let measured = go_binary(binary);
    let a = attribute_path(
        &measured,
        &[Family::Alloc, Family::Syscalls],
        "/alloc",
        100,
        1,
    );
    let pid = measured.pid();
    drop(measured);
    let names = |s: &StackFrames| -> Vec<String> {
        s.frames
            .iter()
            .map(|f| f.function.clone().unwrap_or_else(|| "?".into()))
            .collect()
    };
    // rig's stacks of the events gdb stops at, once per request each.
    let mut want: Vec<(String, &StackFrames, Vec<Code>)> = Vec::new();
    for r in a.stacks.rows.iter().filter(|r| r.pid == pid) {
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        let under = |f: &str| s.frames.iter().any(|x| x.function.as_deref() == Some(f));
        let ours = (r.family == Family::Alloc && under("main.goAllocs"))
            || (r.family == Family::Syscalls
                && r.event == "write"
                && under("net/http.(*conn).serve"));
        if !ours {
            continue;
        }
        assert_eq!(r.count, 100, "{} once per request:\n{}", r.event, render(s));
        let code: Vec<Code> = s
            .frames
            .iter()
            .map(|f| (f.module.clone().unwrap(), f.module_offset))
            .collect();
        want.push((r.event.clone(), s, code));
    }
    let allocs = want
        .iter()
        .filter(|(e, _, _)| is_event(e, "runtime.mallocgc"))
        .count();
    let writes = want.iter().filter(|(e, _, _)| e == "write").count();
    assert_eq!(
        (allocs, writes),
        (4, 1),
        "rig's stacks: four allocations in goAllocs and one response write per request"
    );
    // The allocator entries' probe points (mallocgc's, and a
    // size-specialized allocator's where compiled code calls one).
    let mut probe_points: Vec<Code> = want
        .iter()
        .filter(|(e, _, _)| is_event(e, "runtime.mallocgc"))
        .map(|(_, _, code)| code[0].clone())
        .collect();
    probe_points.sort();
    probe_points.dedup();

    let target = go_binary(binary);
    let mut conn = KeepAlive::connect(target.port);
    for _ in 0..5 {
        conn.send();
        conn.answer();
    }
    let maps = text_maps(target.pid());
    // Go preempts goroutines with SIGURG: not a stop of ours.
    let mut stops = vec!["handle SIGURG nostop noprint pass".to_string()];
    for (i, p) in probe_points.iter().enumerate() {
        stops.push(format!("break *{:#x}", addr_of(&maps, p)));
        stops.push(format!(
            "condition {} $_rig_under(\"main.goAllocs\")",
            i + 1
        ));
    }
    stops.push("catch syscall write".to_string());
    stops.push(format!(
        "condition {} $_rig_under(\"net/http.(*conn).serve\")",
        probe_points.len() + 1
    ));
    let got = gdb_backtraces(target.pid(), &stops, 5, 1, || conn.send());
    conn.answer();

    let mut unmatched = Vec::new();
    for mut g in got {
        // A goroutine's stack ends in runtime.goexit, above which Go leaves
        // a return address of 0; gdb shows it as one more frame (pc 0, no
        // function): the end of the stack, not a frame.
        if g.last().is_some_and(|(pc, _)| *pc == 0) {
            g.pop();
        }
        let g: Vec<(Code, String)> = g
            .into_iter()
            .map(|(pc, f)| (code_of(&maps, pc), f))
            .collect();
        let at = want.iter().position(|(_, s, code)| {
            code.len() == g.len()
                && code.iter().zip(&g).all(|(c, (gc, _))| c == gc)
                && names(s).iter().zip(&g).all(|(n, (_, gn))| n == gn)
        });
        match at {
            Some(i) => {
                let (event, s, _) = want.remove(i);
                println!("gdb == rig for {event}:\n{}", render(s));
            }
            None => unmatched.push(g),
        }
    }
    let left: Vec<String> = want
        .iter()
        .map(|(e, s, _)| format!("{e}:\n{}", render(s)))
        .collect();
    assert!(
        unmatched.is_empty() && left.is_empty(),
        "gdb stacks matching no rig stack: {unmatched:#x?}\nrig stacks gdb did not see:\n{}",
        left.join("\n")
    );
}

fn cgoserver() -> Child {
    let mut cmd = std::process::Command::new(rig_fixtures::cgoserver());
    cmd.args(["--port", "0"]);
    Child::spawn_ready(cmd).expect("the cgo fixture starts")
}

/// A function name with cgo's per-package hash (`_cgo_<hex>_Cfunc_c_work`,
/// `_cgoexp_<hex>_goCallback`) as `_cgo_H_Cfunc_c_work`.
fn without_cgo_hash(name: &str) -> String {
    for prefix in ["_cgo_", "_cgoexp_"] {
        if let Some(rest) = name.strip_prefix(prefix) {
            if let Some((hash, tail)) = rest.split_once('_') {
                if hash.len() >= 8 && hash.chars().all(|c| c.is_ascii_hexdigit()) {
                    return format!("{prefix}H_{tail}");
                }
            }
        }
    }
    name.to_string()
}

/// Go calling C and C calling Go (fixtures/go/cgoserver, costs in
/// fixtures/go/COSTS.md): C's malloc, free and getppid in `c_work`, called
/// through cgo, and Go's allocation in `goCallback`, which `c_work` calls
/// back, are exact per request at their lines, and their stacks are whole
/// across both switches between the goroutine's stack and the thread's
/// system stack: from C back into Go through `runtime.asmcgocall`, and from
/// Go back into the C code that called it through `runtime.cgocallback`,
/// frame by frame to the goroutine's `runtime.goexit`.
#[test]
fn cgo_stacks_cross_between_go_and_c_both_ways() {
    root_or_skip!();
    let _g = probes_shared();
    let target = cgoserver();
    let a = attribute_path(&target, &[Family::Alloc, Family::Syscalls], "/cgo", N, 1);
    let c_at = |m: &str| format!("cwork.c:{}", rig_fixtures::cgo_c_site_line(m));
    let go_at = |m: &str| format!("main.go:{}", rig_fixtures::cgo_go_site_line(m));
    // The Go side of every C call: cgo's wrappers to the request's goroutine.
    let go_side = [
        "_cgo_H_Cfunc_c_work",
        "runtime.asmcgocall",
        "runtime.cgocall",
        "main._Cfunc_c_work",
        "main.cgoHandler",
        "net/http.HandlerFunc.ServeHTTP",
        "net/http.(*ServeMux).ServeHTTP",
        "net/http.serverHandler.ServeHTTP",
        "net/http.(*conn).serve",
        "net/http.(*Server).Serve.func3",
        "runtime.goexit",
    ];
    let c_work_stack = |leaf: &str| -> Vec<String> {
        std::iter::once(leaf)
            .chain(std::iter::once("c_work"))
            .chain(go_side)
            .map(String::from)
            .collect()
    };
    let callback_stack: Vec<String> = [
        "runtime.mallocgc",
        "runtime.makeslice",
        "main.goCallback",
        "_cgoexp_H_goCallback",
        "runtime.cgocallbackg1",
        "runtime.cgocallbackg",
        // cgocallbackg's ABI wrapper, under the same name
        "runtime.cgocallbackg",
        "runtime.cgocallback",
        "crosscall2",
        // cgo's C wrapper of the exported Go function
        "goCallback",
        "c_work",
    ]
    .into_iter()
    .chain(go_side)
    .map(String::from)
    .collect();
    // (family, event, want stack, user site, its line, count, bytes)
    let want = [
        (
            Family::Alloc,
            "malloc",
            c_work_stack("malloc"),
            "c_work",
            c_at("cgo_malloc"),
            N,
            64 * N,
        ),
        (
            Family::Alloc,
            "free",
            c_work_stack("free"),
            "c_work",
            c_at("cgo_free"),
            N,
            0,
        ),
        (
            Family::Syscalls,
            "getppid",
            c_work_stack("getppid"),
            "c_work",
            c_at("cgo_getppid"),
            N,
            0,
        ),
        (
            Family::Alloc,
            "runtime.mallocgc",
            callback_stack,
            "main.goCallback",
            go_at("cgo_go_alloc"),
            N,
            200 * N,
        ),
    ];
    for (family, event, stack, site, line, count, bytes) in want {
        let rows: Vec<_> = a
            .stacks
            .rows
            .iter()
            .filter(|r| r.pid == target.pid() && r.family == family && r.event == event)
            .filter(|r| {
                let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
                s.frames[s.user_site].function.as_deref() == Some(site)
                    && s.frames[s.user_site].file_line().as_deref() == Some(line.as_str())
            })
            .collect();
        assert_eq!(rows.len(), 1, "one {event} stack at {site} ({line})");
        let r = rows[0];
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        println!("{event} x{} {} B:\n{}", r.count, r.amount, render(s));
        assert_eq!(
            (r.count, r.amount),
            (count, bytes),
            "{event} at {site} ({line})"
        );
        let names: Vec<String> = s
            .frames
            .iter()
            .map(|f| without_cgo_hash(f.function.as_deref().unwrap_or("?")))
            .collect();
        assert_eq!(names, stack, "{event}: the whole stack\n{}", render(s));
        assert!(s.incomplete.is_empty(), "{event}:\n{}", render(s));
    }
}

/// `GET /work` of the goserver build `binary`, in one window with the copy
/// and locks families: its copies and locks exact where it makes them
/// (`go_copies_exact`, `go_locks_exact`), every stack whole.
pub(super) fn go_copies_and_locks_measured_exactly(binary: &std::path::Path) {
    let _g = probes_shared();
    let target = go_binary(binary);
    let a = super::attribute_path_as_is(&target, &[Family::Copy, Family::Locks], "/work", N, 1);
    go_copies_exact(&a);
    go_locks_exact(&a, binary);
    whole_stacks(&a, target.pid());
}

/// Exact copies and clears at goCopies' sites (runtime.memmove of 1000 and
/// 300 bytes, runtime.memclrNoHeapPointers of 4096), each stack's user
/// site goCopies, in a window of `GET /work`; what Go copies inline is
/// named as not counted.
fn go_copies_exact(a: &Attribution) {
    for (marker, routine, bytes) in [
        ("go_copy_a", "runtime.memmove", 1000),
        ("go_copy_b", "runtime.memmove", 300),
        ("go_clear", "runtime.memclrNoHeapPointers", 4096),
    ] {
        let sited = |r: &&rig::report::CopyRow| {
            r.kind == routine
                && r.site.function.as_deref() == Some("main.goCopies")
                && r.site.file_line().as_deref() == Some(at(marker).as_str())
        };
        let rows = a.copy.iter().filter(sited);
        let got = rows.fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes));
        assert_eq!(
            got,
            (N, N * bytes),
            "{routine} at {}: {:#?}",
            at(marker),
            a.copy
        );
        assert_eq!(
            at_user_site(a, Family::Copy, routine, "main.goCopies", &at(marker)),
            (N, N * bytes),
            "{routine} stacks at {}",
            at(marker)
        );
    }
    let lost = a.losses.get(&Family::Copy).cloned().unwrap_or_default();
    assert!(
        lost.iter().any(|(why, _)| why.contains("emitted inline")),
        "{lost:#?}"
    );
}

/// Exact contended sync.Mutex acquisitions at the goroutine that waited,
/// with their wait, an RWMutex writer's wait for a reader, and runtime lock
/// acquisitions and releases at goChan's channel send and receive, each
/// stack's user site the code that locked, in a window of `GET /work` of
/// the goserver build `binary`; Go's uncontended (inlined) sync.Mutex
/// acquisitions named as not counted.
fn go_locks_exact(a: &Attribution, binary: &std::path::Path) {
    let line = at("go_contended");
    let rows: Vec<_> = a
        .locks
        .iter()
        .filter(|r| {
            r.op == "Mutex.lockSlow"
                && r.site.function.as_deref() == Some("main.contend.func1")
                && r.site.file_line().as_deref() == Some(line.as_str())
        })
        .collect();
    let sum = |f: fn(&&rig::report::LockRow) -> u64| rows.iter().map(f).sum::<u64>();
    assert_eq!(
        (sum(|r| r.calls), sum(|r| r.acquired), sum(|r| r.contended)),
        (N, N, N),
        "Mutex.lockSlow at main.contend.func1 ({line}): {:#?}",
        a.locks
    );
    assert!(sum(|r| r.futex_wait_ns) > 0, "{rows:#?}");
    assert_eq!(
        at_user_site(
            a,
            Family::Locks,
            "Mutex.lockSlow",
            "main.contend.func1",
            &line
        ),
        (N, 0),
        "Mutex.lockSlow stacks at {line}"
    );
    // The writer that waits for a reader: on RWMutex's writers' semaphore
    // (Go 1.20 on), or on the semaphore function sync.Mutex's slow path
    // waits on too (before), its call outside that slow path.
    let old = rig::runtime::go::version(binary).is_some_and(|v| (v.major, v.minor) < (1, 20));
    let event = if old {
        "RWMutex wait"
    } else {
        "RWMutex.Lock wait"
    };
    let writer = at("go_rw_writer");
    assert_eq!(
        at_user_site(a, Family::Locks, event, "main.contend.func2", &writer),
        (N, 0),
        "{event} stacks at main.contend.func2 ({writer})"
    );
    // The mutex's own wait on that semaphore is its slow path's, counted
    // once.
    assert_eq!(
        at_user_site(
            a,
            Family::Locks,
            "RWMutex wait",
            "main.contend.func1",
            &line
        ),
        (0, 0)
    );
    // goChan's send and receive each lock the channel once (runtime.lock2,
    // through the runtime's chansend and chanrecv) and unlock it once.
    for marker in ["go_chan_send", "go_chan_recv"] {
        for event in ["runtime.lock2", "unlock"] {
            assert_eq!(
                at_user_site(a, Family::Locks, event, "main.goChan", &at(marker)),
                (N, 0),
                "{event} stacks at main.goChan ({})",
                at(marker)
            );
        }
    }
    let lost = a.losses.get(&Family::Locks).cloned().unwrap_or_default();
    assert!(
        lost.iter().any(|(why, _)| why.contains("inlined")),
        "{lost:#?}"
    );
}

#[test]
fn a_go_servers_copies_and_locks_are_exact_where_it_makes_them() {
    root_or_skip!();
    go_copies_and_locks_measured_exactly(&rig_fixtures::goserver(false));
}

/// Go's copies against an independent count: bpftrace's uprobes on
/// runtime.memmove and runtime.memclrNoHeapPointers (lengths from rcx and
/// rbx), on the same process, attached before rig's window and detached
/// after it. The server is idle outside the window (its collector off),
/// and the window's load is one connection a client opens, uses for N
/// requests and closes inside it: every call bpftrace sees, rig sees.
#[test]
fn go_copy_calls_and_bytes_equal_bpftraces_count_of_runtime_memmove_and_memclr() {
    root_or_skip!();
    let _g = probes_shared();
    let binary = rig_fixtures::goserver(false).canonicalize().unwrap();
    let target = go_binary(&binary);
    let pid = target.pid();
    let exe = binary.display();
    let script = format!(
        "uprobe:{exe}:\"runtime.memmove\" /pid == {pid}/ {{ @m = count(); @mb = sum(reg(\"cx\")); }} \
         uprobe:{exe}:\"runtime.memclrNoHeapPointers\" /pid == {pid}/ {{ @c = count(); @cb = sum(reg(\"bx\")); }}"
    );
    let mut bt = std::process::Command::new("bpftrace")
        .args(["-e", &script])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("bpftrace (scripts/deps.sh installs it)");
    let mut out = std::io::BufReader::new(bt.stdout.take().unwrap());
    let mut line = String::new();
    std::io::BufRead::read_line(&mut out, &mut line).unwrap();
    assert!(line.starts_with("Attaching"), "bpftrace: {line}");
    std::thread::sleep(std::time::Duration::from_secs(1));
    let client = format!(
        "import http.client, time\n\
         c = http.client.HTTPConnection('127.0.0.1', {port})\n\
         for _ in range({N}):\n    c.request('GET', '/work'); c.getresponse().read()\n\
         c.close()\n\
         time.sleep(0.5)\n",
        port = target.port
    );
    let s = rig::session::AttachSettings {
        pid,
        families: vec![Family::Copy],
        duration: std::time::Duration::ZERO,
        per: Some(N),
        drive: None,
        command: vec!["python3".into(), "-c".into(), client],
        tree: Some(false),
        wrappers: Vec::new(),
        live_heap: false,
        user_probes: Vec::new(),
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let a = rig::session::run_attach(&s, &stop).expect("attribution session");
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: SIGINT to the bpftrace this test started: it prints its maps.
    unsafe { libc::kill(bt.id() as i32, libc::SIGINT) };
    let mut counts = String::new();
    std::io::Read::read_to_string(&mut out, &mut counts).unwrap();
    let _ = bt.wait();
    let truth = |name: &str| -> u64 {
        counts
            .lines()
            .find_map(|l| l.strip_prefix(&format!("@{name}: ")))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("bpftrace printed no @{name}: {counts}"))
    };
    for (routine, calls, bytes) in [
        ("runtime.memmove", "m", "mb"),
        ("runtime.memclrNoHeapPointers", "c", "cb"),
    ] {
        let rows = a.copy.iter().filter(|r| r.kind == routine);
        let seen = rows.fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes));
        println!(
            "{routine}: rig {seen:?}, bpftrace ({}, {})",
            truth(calls),
            truth(bytes)
        );
        assert_eq!(seen, (truth(calls), truth(bytes)), "{routine}: {counts}");
        assert!(seen.0 >= 2 * N, "{routine}: {seen:?}");
    }
}

/// A cgo server's copies and locks: Go's routines (runtime.memmove, the
/// lock slow paths) probed beside its C library's, and what Go does
/// without calling them (inline copies, uncontended acquisitions) named
/// as not counted, with the executable: the window is incomplete — never
/// `copies: 0 bytes/req` or an empty mutex table and complete.
#[test]
fn go_copies_and_locks_are_named_as_not_counted() {
    root_or_skip!();
    let _g = probes_shared();
    let target = cgoserver();
    let a = super::attribute_path_as_is(&target, &[Family::Copy, Family::Locks], "/cgo", N, 1);
    assert!(!a.complete, "{:#?}", a.losses);
    let exe = rig_fixtures::cgoserver().display().to_string();
    for (family, says) in [(Family::Copy, "emitted inline"), (Family::Locks, "inlined")] {
        let lost = a.losses.get(&family).cloned().unwrap_or_default();
        assert!(
            lost.iter().any(|(why, processes)| why.contains(says)
                && why.contains(&exe)
                && *processes == 1),
            "{family}: {lost:#?}"
        );
    }
    let kinds: Vec<&str> = a.copy.iter().map(|r| r.kind.as_str()).collect();
    assert!(kinds.contains(&"runtime.memmove"), "{kinds:?}");
    let noted = |what: &str| {
        a.notes
            .iter()
            .any(|n| n.family == Family::Locks && n.what == what)
    };
    assert!(noted("sync.(*Mutex).lockSlow"), "{:#?}", a.notes);
}
