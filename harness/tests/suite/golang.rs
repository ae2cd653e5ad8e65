//! A Go net/http server (fixtures/go/goserver, costs in fixtures/go/COSTS.md):
//! Go's allocator probed (`runtime.mallocgc`, size from the register ABI),
//! exact allocations and bytes per request at the function that makes them
//! (the user site past Go's runtime frames), GC cycles counted exactly, Go
//! stacks unwound from `.gopclntab` and named from it, the same with the
//! binary stripped, and never a uretprobe in Go code.

use rig::probe::stacks::Stacks;
use rig::probe::{Family, ProbeSet, Scope};
use rig::report::stacks::StackFrames;
use rig::report::Attribution;
use rig::session::Child;

use super::{attribute_path, probes_shared};

const N: u64 = 1000;

fn goserver(stripped: bool) -> Child {
    let mut cmd = std::process::Command::new(rig_fixtures::goserver(stripped));
    cmd.args(["--port", "0"]);
    Child::spawn_ready(cmd).expect("the Go fixture starts")
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

/// (count, bytes) of `event` stacks of family `family` whose user site is
/// `function` at `line`.
fn at_user_site(a: &Attribution, event: &str, function: &str, line: &str) -> (u64, u64) {
    a.stacks
        .rows
        .iter()
        .filter(|r| r.family == Family::Alloc && r.event == event)
        .filter(|r| {
            a.stacks.user_site(r).is_some_and(|s| {
                s.function.as_deref() == Some(function) && s.file_line().as_deref() == Some(line)
            })
        })
        .fold((0, 0), |(c, b), r| (c + r.count, b + r.amount))
}

fn go_server_measured_exactly(stripped: bool) {
    let _g = probes_shared();
    let target = goserver(stripped);
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
    // goAllocs: three make([]byte, 100) and one new(record) (48 bytes).
    for (marker, bytes) in [
        ("go_slice_a", 100),
        ("go_slice_b", 100),
        ("go_slice_c", 100),
        ("go_record", 48),
    ] {
        assert_eq!(
            at_user_site(&a, "runtime.mallocgc", "main.goAllocs", &at(marker)),
            (N, N * bytes),
            "runtime.mallocgc at main.goAllocs ({})",
            at(marker)
        );
    }
    // One collection per 100 /alloc requests, the collector off otherwise.
    assert_eq!(a.alloc_totals.gc_cycles, N / 100, "{:#?}", a.alloc_totals);
    assert_eq!(a.alloc_totals.frees, 0, "a garbage-collected heap");
    let layer = a.alloc_layers.iter().find(|l| l.allocator == "go");
    assert!(
        layer.is_some_and(|l| l.totals.allocations >= 4 * N),
        "{:#?}",
        a.alloc_layers
    );
    assert!(a.alloc_unprobed.is_empty(), "{:#?}", a.alloc_unprobed);
    // Every Go stack whole: the read and the write of each request reach
    // the connection's goroutine.
    let mut whole = 0;
    for r in a.stacks.rows.iter().filter(|r| r.pid == target.pid()) {
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        assert!(
            s.incomplete.is_empty(),
            "{} {} x{}:\n{}",
            r.family,
            r.event,
            r.count,
            render(s)
        );
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
    go_server_measured_exactly(false);
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
    go_server_measured_exactly(true);
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
