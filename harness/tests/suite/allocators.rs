//! Allocator discovery: the calibration server linked against Debian's
//! jemalloc, mimalloc and tcmalloc_minimal (the same calls per request as
//! calib_server: fixtures/calib/COSTS.md), an allocator rig finds but cannot
//! probe, and the layered allocators of CPython and of Rust's
//! `#[global_allocator]`.

use std::process::Command;

use rig::exit;
use rig::probe::Family;
use rig::report::{AllocTotals, Attribution};
use rig::session::Child;

use super::{at, attribute, probes_shared, rig_bin};

const N: u64 = 1000;

/// (calls, bytes) of the outer rows of `allocator`'s `kind` at `function`
/// and the marker's line.
fn outer_at(
    a: &Attribution,
    allocator: &str,
    function: &str,
    marker: &str,
    kind: &str,
) -> (u64, u64) {
    let line = at(marker);
    a.alloc
        .iter()
        .filter(|r| {
            !r.inner
                && r.allocator == allocator
                && r.kind == kind
                && r.site.function.as_deref() == Some(function)
                && r.site.file_line().as_deref() == Some(line.as_str())
        })
        .fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes))
}

/// The calibration server's allocations, served by `allocator` (a library
/// that interposes glibc's malloc), counted exactly per site; `inner` is
/// how many allocations and frees per request the library's entry points
/// make through its other entry points (marked inner, out of the totals).
fn counts_calib_allocations_through(allocator: &str, library: &str, inner: (u64, u64)) {
    let _g = probes_shared();
    let mut cmd = Command::new(rig_fixtures::calib_server_with(allocator));
    cmd.args(["--port", "0", "--threads", "2"]);
    let target = Child::spawn_ready(cmd).expect("calibration server starts");
    let a = attribute(&target, &[Family::Alloc], N, 2);
    let expected = super::calib_alloc_sites();
    for (function, marker, kind, calls, bytes) in expected {
        assert_eq!(
            outer_at(&a, allocator, function, marker, kind),
            (calls * N, bytes * N),
            "{allocator} {kind} at {function} ({}): {:#?}",
            at(marker),
            a.alloc
        );
    }
    assert_eq!(a.alloc_totals.allocations, 8 * N, "{:#?}", a.alloc);
    assert_eq!(
        a.alloc_totals.bytes,
        (3 * 24 + 64 + 5000 + 100 + 256 + 512) * N
    );
    assert_eq!(a.alloc_totals.frees, 7 * N);
    // glibc's malloc is interposed: not one call reaches it.
    assert!(
        a.alloc.iter().all(|r| r.allocator == allocator),
        "{:#?}",
        a.alloc
    );
    assert_eq!(a.alloc_layers.len(), 1, "{:#?}", a.alloc_layers);
    let layer = &a.alloc_layers[0];
    assert_eq!(layer.allocator, allocator);
    assert_eq!(layer.totals.allocations, (8 + inner.0) * N);
    assert_eq!(layer.inner_allocations, inner.0 * N, "{:#?}", a.alloc);
    assert_eq!(layer.totals.frees, (7 + inner.1) * N);
    assert_eq!(layer.inner_frees, inner.1 * N, "{:#?}", a.alloc);
    assert!(a.alloc_unprobed.is_empty(), "{:?}", a.alloc_unprobed);
    let note = a
        .notes
        .iter()
        .find(|n| n.what == format!("{allocator} allocator"))
        .unwrap_or_else(|| panic!("a note names {allocator}: {:#?}", a.notes));
    assert!(
        note.note
            .contains("serves malloc (libc.so.6's GOT slot for malloc")
            && note.note.contains(library),
        "{}",
        note.note
    );
}

#[test]
fn counts_exact_allocations_served_by_debian_jemalloc() {
    root_or_skip!();
    counts_calib_allocations_through("jemalloc", "libjemalloc.so.2", (0, 0));
}

#[test]
fn counts_exact_allocations_served_by_debian_mimalloc_with_its_inner_aligned_calls() {
    root_or_skip!();
    // mimalloc's posix_memalign and memalign go through mi_malloc_aligned;
    // its realloc to a smaller size class moves the block and frees the old
    // one through free.
    counts_calib_allocations_through("mimalloc", "libmimalloc.so.2", (2, 1));
}

#[test]
fn counts_exact_allocations_served_by_debian_tcmalloc_with_its_inner_memalign() {
    root_or_skip!();
    // tcmalloc's posix_memalign calls its memalign.
    counts_calib_allocations_through("tcmalloc", "libtcmalloc_minimal.so.4", (1, 0));
}

#[test]
fn an_allocator_rig_cannot_probe_is_named_and_the_run_is_incomplete() {
    root_or_skip!();
    let _g = probes_shared();
    let lib = rig_fixtures::unprobeable_allocator();
    let mut cmd = Command::new(rig_fixtures::calib_server());
    cmd.args(["--port", "0", "--threads", "2"])
        .env("LD_PRELOAD", lib);
    let target = Child::spawn_ready(cmd).expect("calibration server starts");
    let out = Command::new(rig_bin())
        .args([
            "attach",
            "--pid",
            &target.pid().to_string(),
            "--probes",
            "alloc",
        ])
        .args([
            "--drive",
            &format!("http://127.0.0.1:{}/calib", target.port),
        ])
        .args(["--requests", "200", "--warmup", "20"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(exit::INCOMPLETE),
        "{stdout}\n{stderr}"
    );
    let warning = format!(
        "WARNING: pid {} allocates through jemalloc ({}), which rig could not probe: mallocx:",
        target.pid(),
        lib.display()
    );
    assert!(stdout.contains(&warning), "{warning}\nnot in:\n{stdout}");
    assert!(stdout.contains("vmovd"), "{stdout}");
    assert!(stdout.contains("INCOMPLETE"), "{stdout}");
    // glibc, which serves malloc, is still probed and exact.
    assert!(stdout.contains("allocations: 8 allocs/req"), "{stdout}");
}

/// `pycalib.c:LINE` of a `SITE:` marker in the CPython extension.
fn py_at(marker: &str) -> String {
    format!("pycalib.c:{}", rig_fixtures::pycalib_line(marker))
}

/// The CPython fixture server (`--c-loop`: requests answered in C).
fn pycalib(args: &[&str]) -> Child {
    let mut cmd = Command::new("python3");
    cmd.arg(rig_fixtures::pycalib_server())
        .arg(rig_fixtures::pycalib_dir())
        .args(["--port", "0"])
        .args(args);
    Child::spawn_ready(cmd).expect("CPython fixture starts")
}

/// pycalib.work()'s calls at their sites, exactly, `n` times each: the
/// CPython layer's outer calls, and glibc's malloc and free inside
/// PyMem_RawMalloc and PyMem_RawFree, marked inner and found under work
/// by their stacks.
fn work_calls_are_exact_per_site(a: &Attribution, n: u64) {
    let at_work = |marker: &str, allocator: &str, kind: &str, inner: bool| {
        let line = py_at(marker);
        a.alloc
            .iter()
            .filter(|r| {
                r.allocator == allocator
                    && r.kind == kind
                    && r.inner == inner
                    && r.site.function.as_deref() == Some("work")
                    && r.site.file_line().as_deref() == Some(line.as_str())
            })
            .fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes))
    };
    // (marker, kind, bytes/req): the CPython layer, outer calls.
    for (marker, kind, bytes) in [
        ("py_object_malloc", "PyObject_Malloc", 48),
        ("py_mem_malloc", "PyMem_Malloc", 200),
        ("py_raw_malloc", "PyMem_RawMalloc", 70000),
        ("py_object_free", "PyObject_Free", 0),
        ("py_mem_free", "PyMem_Free", 0),
        ("py_raw_free", "PyMem_RawFree", 0),
    ] {
        assert_eq!(
            at_work(marker, "cpython", kind, false),
            (n, bytes * n),
            "{kind} at work ({}): {:#?}",
            py_at(marker),
            a.alloc
                .iter()
                .filter(|r| r.site.function.as_deref() == Some("work"))
                .collect::<Vec<_>>()
        );
    }
    // PyMem_RawMalloc and PyMem_RawFree are glibc's malloc and free
    // underneath: counted in the glibc layer, marked inner.
    for (marker, event, bytes) in [
        ("py_raw_malloc", "malloc", 70000),
        ("py_raw_free", "free", 0),
    ] {
        let inner: u64 = a
            .stacks
            .rows
            .iter()
            .filter(|r| {
                r.event == event
                    && r.inner
                    && r.amount == bytes * r.count
                    && r.stack.as_ref().is_some_and(|s| {
                        a.stacks.stacks[s].frames.iter().any(|site| {
                            site.function.as_deref() == Some("work")
                                && site.file_line() == Some(py_at(marker))
                        })
                    })
            })
            .map(|r| r.count)
            .sum();
        assert_eq!(
            inner,
            n,
            "inner {event} at {}: {:#?}",
            py_at(marker),
            a.stacks.rows
        );
    }
}

/// Inside http.server the request's own Python code allocates too (a few
/// hundred objects, a number nobody states exactly): work()'s sites are
/// exact among them.
#[test]
fn counts_cpython_allocations_per_site_in_http_server_with_glibc_inside_pymem_raw_marked_inner() {
    root_or_skip!();
    let _g = probes_shared();
    const N: u64 = 100;
    let target = pycalib(&[]);
    let a = attribute(&target, &[Family::Alloc], N, 1);
    work_calls_are_exact_per_site(&a, N);
}

/// Requests answered in C (`--c-loop`) make work()'s calls and nothing
/// else, so every layer's totals are known: CPython 3 allocations (48 +
/// 200 + 70,000 B) and 3 frees; glibc 1 malloc and 1 free, both inner
/// (inside PyMem_Raw*), so out of the process's totals.
#[test]
fn counts_cpython_and_glibc_layers_exactly_when_only_pycalib_allocates() {
    root_or_skip!();
    let _g = probes_shared();
    const N: u64 = 500;
    let target = pycalib(&["--c-loop"]);
    let a = attribute(&target, &[Family::Alloc], N, 1);
    work_calls_are_exact_per_site(&a, N);
    let layers: Vec<(&str, AllocTotals, u64, u64)> = a
        .alloc_layers
        .iter()
        .map(|l| {
            (
                l.allocator.as_str(),
                l.totals.clone(),
                l.inner_allocations,
                l.inner_frees,
            )
        })
        .collect();
    let totals = |allocations, bytes, frees| AllocTotals {
        allocations: allocations * N,
        bytes: bytes * N,
        frees: frees * N,
        null_frees: 0,
        gc_cycles: 0,
        not_sized: 0,
    };
    assert_eq!(
        layers,
        vec![
            ("cpython", totals(3, 70248, 3), 0, 0),
            ("glibc", totals(1, 70000, 1), N, N),
        ],
        "{:#?}",
        a.alloc
    );
    assert_eq!(a.alloc_totals, totals(3, 70248, 3));
}

/// The Rust fixture `bin` (fixtures/rustalloc), built with cargo on first
/// use (release, into target/rustalloc; its allocator crates are fixtures
/// only, outside rig's workspace).
pub(super) fn rustalloc(bin: &str) -> std::path::PathBuf {
    static BUILD: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = BUILD.lock().unwrap_or_else(|e| e.into_inner());
    let target = super::repo().join("target/rustalloc");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args(["build", "--release", "--locked", "--manifest-path"])
        .arg(super::repo().join("fixtures/rustalloc/Cargo.toml"))
        .arg("--target-dir")
        .arg(&target)
        .env_remove("RUSTFLAGS")
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "building fixtures/rustalloc: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    target.join("release").join(bin)
}

/// `server.rs:LINE` of a `// SITE:` marker in fixtures/rustalloc.
fn rs_at(marker: &str) -> String {
    let src =
        std::fs::read_to_string(super::repo().join("fixtures/rustalloc/src/server.rs")).unwrap();
    let needle = format!("// SITE:{marker}");
    let lines: Vec<usize> = src
        .lines()
        .enumerate()
        .filter(|(_, l)| l.ends_with(&needle))
        .map(|(i, _)| i + 1)
        .collect();
    assert_eq!(lines.len(), 1, "marker {marker}");
    format!("server.rs:{}", lines[0])
}

/// Whether some stack of `event` rows (`count` calls of `bytes` each) runs
/// through `work` at `marker`'s line; returns the calls found.
fn calls_through_work(a: &Attribution, event: &str, inner: bool, bytes: u64, line: &str) -> u64 {
    a.stacks
        .rows
        .iter()
        .filter(|r| {
            r.event == event
                && r.inner == inner
                && r.amount == bytes * r.count
                && r.stack.as_ref().is_some_and(|s| {
                    a.stacks.stacks[s].frames.iter().any(|f| {
                        f.function.as_deref() == Some("work")
                            && f.file_line().as_deref() == Some(line)
                    })
                })
        })
        .map(|r| r.count)
        .sum()
}

/// A Rust server whose `#[global_allocator]` is `allocator`, statically
/// linked: exact calls per site and per layer. `names` are the allocator's
/// entry points the crate calls for (alloc, alloc_zeroed, realloc, dealloc);
/// `inner_frees`: frees its realloc makes through its own free.
fn counts_rust_global_allocator(allocator: &str, names: [&str; 4], inner_frees: u64) {
    let bin = rustalloc(&format!("rustalloc_{allocator}"));
    let _g = probes_shared();
    let mut cmd = Command::new(&bin);
    cmd.args(["--port", "0"]);
    let target = Child::spawn_ready(cmd).expect("Rust fixture starts");
    let a = attribute(&target, &[Family::Alloc], N, 1);
    let [alloc, zeroed, realloc, dealloc] = names;
    let at = |kind: &str, marker: &str| {
        let line = rs_at(marker);
        a.alloc
            .iter()
            .filter(|r| {
                !r.inner
                    && r.allocator == allocator
                    && r.kind == kind
                    && r.site.function.as_deref() == Some("work")
                    && r.site.file_line().as_deref() == Some(line.as_str())
            })
            .fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes))
    };
    for (kind, marker, bytes) in [
        (alloc, "rs_box", 100),
        (alloc, "rs_vec", 32),
        (zeroed, "rs_zeroed", 3000),
        (dealloc, "rs_drop_format", 0),
        (dealloc, "rs_drop_zeroed", 0),
        (dealloc, "rs_drop_vec", 0),
        (dealloc, "rs_drop_box", 0),
    ] {
        assert_eq!(
            at(kind, marker),
            (N, bytes * N),
            "{kind} at {}: {:#?}",
            rs_at(marker),
            a.alloc
        );
    }
    // Vec's growth (32 -> 64 bytes) reallocates in std's finish_grow, called
    // from work's extend_from_slice.
    assert_eq!(
        calls_through_work(&a, realloc, false, 64, &rs_at("rs_grow")),
        N
    );
    // Formatting in the precompiled std reaches the allocator through the
    // __rust_alloc shim (the rust layer), which calls the allocator: that
    // call is inner, so the 16 bytes are counted once.
    assert_eq!(
        calls_through_work(&a, "__rust_alloc", false, 16, &rs_at("rs_format")),
        N
    );
    assert_eq!(
        calls_through_work(&a, alloc, true, 16, &rs_at("rs_format")),
        N
    );
    assert_eq!(a.alloc_totals.allocations, 5 * N, "{:#?}", a.alloc);
    assert_eq!(a.alloc_totals.bytes, (100 + 32 + 64 + 3000 + 16) * N);
    assert_eq!(a.alloc_totals.frees, 4 * N);
    let layers: Vec<(&str, u64, u64, u64, u64)> = a
        .alloc_layers
        .iter()
        .map(|l| {
            (
                l.allocator.as_str(),
                l.totals.allocations / N,
                l.inner_allocations / N,
                l.totals.frees / N,
                l.inner_frees / N,
            )
        })
        .collect();
    assert_eq!(
        layers,
        vec![
            (allocator, 5, 1, 4 + inner_frees, inner_frees),
            ("rust", 1, 0, 0, 0)
        ]
    );
    assert!(a.alloc_unprobed.is_empty(), "{:?}", a.alloc_unprobed);
}

#[test]
fn counts_a_static_tikv_jemallocator_and_the_rust_shim_above_it_per_layer() {
    root_or_skip!();
    counts_rust_global_allocator(
        "jemalloc",
        [
            "_rjem_malloc",
            "_rjem_calloc",
            "_rjem_realloc",
            "_rjem_sdallocx",
        ],
        0,
    );
}

#[test]
fn counts_a_static_mimalloc_and_the_rust_shim_above_it_per_layer() {
    root_or_skip!();
    // mimalloc's realloc frees the old block through mi_free.
    counts_rust_global_allocator(
        "mimalloc",
        [
            "mi_malloc_aligned",
            "mi_zalloc_aligned",
            "mi_realloc_aligned",
            "mi_free",
        ],
        1,
    );
}

/// fixtures/alloc/staleslot.c: per request, malloc(24) in `first`, freed,
/// then malloc(40) in `second`, freed, from 8 KiB further down the stack,
/// where `first`'s call left its return address unwritten. Neither call is
/// inside the other: 2 allocations, 64 bytes and 2 frees per request, none
/// inner. Before the nesting check bounded its depth, the second malloc
/// read as inner and the request as 1 allocation (rig-peer's new
/// connections as 2.3 instead of 14).
#[test]
fn an_allocation_below_a_returned_ones_stale_return_slot_is_not_inner() {
    root_or_skip!();
    let _g = probes_shared();
    let mut fx = super::stacks::Fixture::start(&rig_fixtures::staleslot());
    let n = 500;
    let a = super::stacks::measure(&mut fx, &[Family::Alloc], n);
    assert_eq!(
        (
            a.alloc_totals.allocations,
            a.alloc_totals.bytes,
            a.alloc_totals.frees
        ),
        (2 * n, 64 * n, 2 * n),
        "{:#?}",
        a.alloc
    );
    assert!(a.alloc.iter().all(|r| !r.inner), "{:#?}", a.alloc);
}
