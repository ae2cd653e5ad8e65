//! Allocator nesting decided exactly: an allocator call is inner only while
//! an outer allocator call on the same thread has not returned. On the
//! twomalloc server (two mallocs in a row and a tail-called free: the
//! pattern whose stale return slot made an older rule drop both mallocs)
//! and on generated handlers whose every call site's truth is recorded as
//! the sequence is drawn (`rig_fixtures::allocmix`), the per-site counts
//! equal the truth exactly, stacks whole; the mmap a large calloc makes is
//! billed through calloc's uretprobe-held return slot to the calloc's
//! caller.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rig::probe::Family;
use rig::report::Attribution;
use rig::session::Child;

use super::{attribute_path, probes_shared};

const N: u64 = 500;

/// Every stack of `family`'s rows in `a` is whole (the walk reached the
/// outermost frame) and passes through `through`, when given.
fn stacks_whole(a: &Attribution, family: Family, through: Option<&str>) {
    let rows: Vec<_> = a
        .stacks
        .rows
        .iter()
        .filter(|r| r.family == family)
        .collect();
    assert!(!rows.is_empty(), "{family:?} has stack rows");
    for r in rows {
        let id = r.stack.as_ref().expect("a user stack was taken");
        let s = &a.stacks.stacks[id];
        assert!(
            s.incomplete.is_empty(),
            "{} stack ends early ({:?}): {:#?}",
            r.event,
            s.incomplete,
            s.frames
        );
        if let Some(f) = through {
            assert!(
                s.frames.iter().any(|x| x.function.as_deref() == Some(f)),
                "{} stack passes {f}: {:#?}",
                r.event,
                s.frames
            );
        }
    }
}

/// What happens to a running server's executable on disk before the
/// window opens: what every deploy does to the old process.
#[derive(Clone, Copy, Debug)]
enum OnDisk {
    Kept,
    /// Unlinked: `/proc/PID/exe` says `(deleted)`.
    Deleted,
    /// Another file renamed over its path (as `install` and package
    /// managers do): the path names a different binary.
    Replaced,
}

impl OnDisk {
    /// Applies this to `exe`, a copy the test owns.
    fn apply(self, exe: &Path) {
        match self {
            OnDisk::Kept => {}
            OnDisk::Deleted => std::fs::remove_file(exe).unwrap(),
            OnDisk::Replaced => {
                let new = exe.with_extension("new");
                std::fs::copy("/bin/true", &new).unwrap();
                std::fs::rename(&new, exe).unwrap();
            }
        }
    }
}

/// A copy of `exe` in a fresh directory (removed on drop), so the test can
/// delete or replace it.
struct Copied(PathBuf);

impl Copied {
    fn new(exe: &Path, tag: &str) -> Copied {
        let dir = std::env::temp_dir().join(format!("rig-nesting-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let to = dir.join(exe.file_name().unwrap());
        std::fs::copy(exe, &to).unwrap();
        Copied(to)
    }
}

impl Drop for Copied {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(self.0.parent().unwrap());
    }
}

/// The twomalloc server of `variant` (see `rig_fixtures::twomalloc`),
/// measured for N requests.
fn twomalloc(variant: &str) -> Attribution {
    twomalloc_on_disk(variant, OnDisk::Kept)
}

/// As `twomalloc`, run from a copy that `disk` is applied to once the
/// server is ready.
fn twomalloc_on_disk(variant: &str, disk: OnDisk) -> Attribution {
    let _g = probes_shared();
    let exe = rig_fixtures::twomalloc(variant);
    let copy = Copied::new(&exe, &format!("two-{variant}-{disk:?}"));
    let run = match disk {
        OnDisk::Kept => exe,
        _ => copy.0.clone(),
    };
    let target = Child::spawn_ready(Command::new(&run)).expect("twomalloc starts");
    disk.apply(&run);
    attribute_path(&target, &[Family::Alloc], "/", N, 2)
}

/// 2 allocations, 200 bytes, 2 frees per request, none inner.
fn exact_two(a: &Attribution) {
    assert_eq!(
        (
            a.alloc_totals.allocations,
            a.alloc_totals.bytes,
            a.alloc_totals.frees
        ),
        (2 * N, 200 * N, 2 * N),
        "{:#?}",
        a.alloc
    );
    assert!(a.alloc.iter().all(|r| !r.inner), "{:#?}", a.alloc);
    // Two malloc sites of one call each per request, two free sites.
    for kind in ["malloc", "free"] {
        let mut calls: Vec<u64> = a
            .alloc
            .iter()
            .filter(|r| r.kind == kind)
            .map(|r| r.calls)
            .collect();
        calls.sort_unstable();
        assert_eq!(calls, vec![N, N], "{kind} rows: {:#?}", a.alloc);
    }
}

#[test]
fn two_mallocs_in_a_row_and_a_tail_called_free_are_two_allocations_per_request() {
    root_or_skip!();
    let a = twomalloc("");
    exact_two(&a);
    let line = |m| format!("twomalloc.c:{}", rig_fixtures::twomalloc_line(m));
    for (kind, marker) in [
        ("malloc", "two_malloc_a"),
        ("malloc", "two_malloc_b"),
        ("free", "two_free_a"),
    ] {
        let r = a
            .alloc
            .iter()
            .find(|r| r.kind == kind && r.site.file_line() == Some(line(marker)))
            .unwrap_or_else(|| panic!("a {kind} row at {}: {:#?}", line(marker), a.alloc));
        assert_eq!(r.site.function.as_deref(), Some("handle"));
        assert_eq!(
            (r.calls, r.bytes),
            (N, if kind == "free" { 0 } else { 100 * N })
        );
    }
    // The tail-called free returns into handle()'s caller: it is counted
    // there, once per request.
    let tail = a
        .alloc
        .iter()
        .find(|r| r.kind == "free" && r.site.function.as_deref() == Some("serve"))
        .unwrap_or_else(|| panic!("the tail-called free at serve: {:#?}", a.alloc));
    assert_eq!(tail.calls, N);
    stacks_whole(&a, Family::Alloc, Some("main"));
}

#[test]
fn two_mallocs_in_a_server_deleted_or_replaced_on_disk_keep_names_and_whole_stacks() {
    root_or_skip!();
    for disk in [OnDisk::Deleted, OnDisk::Replaced] {
        let a = twomalloc_on_disk("", disk);
        exact_two(&a);
        // Names and lines come from the mapped object, not from the path.
        for r in a.alloc.iter().filter(|r| r.kind == "malloc") {
            assert_eq!(
                r.site.function.as_deref(),
                Some("handle"),
                "{disk:?}: {r:#?}"
            );
        }
        stacks_whole(&a, Family::Alloc, Some("main"));
    }
}

#[test]
fn two_mallocs_in_a_stripped_server_are_counted_exactly_at_unnamed_sites() {
    root_or_skip!();
    let a = twomalloc("stripped");
    exact_two(&a);
    for r in &a.alloc {
        assert_eq!(
            r.site.function, None,
            "nothing names a stripped site: {r:#?}"
        );
        assert!(
            r.site.label().contains("twomalloc-stripped+0x") && r.site.label().contains("unnamed"),
            "{}",
            r.site.label()
        );
    }
    // libc's frames are named from libc6-dbg: the walk crossed the
    // unnamed executable into __libc_start_call_main.
    stacks_whole(&a, Family::Alloc, Some("__libc_start_call_main"));
}

/// Stripped, with MiniDebugInfo (`.gnu_debugdata`: an xz-compressed ELF
/// whose `.symtab` keeps the functions, as Fedora and RHEL ship binaries):
/// the sites are named from it, by function (it has no lines).
#[test]
fn a_stripped_server_with_minidebuginfo_is_named_from_its_gnu_debugdata() {
    root_or_skip!();
    let out = Command::new("readelf")
        .args(["-S", "-W"])
        .arg(rig_fixtures::twomalloc("minidebug"))
        .output()
        .unwrap();
    let sections = String::from_utf8_lossy(&out.stdout);
    assert!(
        sections.contains(".gnu_debugdata")
            && !sections.contains(".symtab")
            && !sections.contains(".debug_info"),
        "{sections}"
    );
    let a = twomalloc("minidebug");
    exact_two(&a);
    for r in a.alloc.iter().filter(|r| r.kind == "malloc") {
        assert_eq!(r.site.function.as_deref(), Some("handle"), "{r:#?}");
        assert_eq!(r.site.naming, rig::symbolize::Naming::Symbol, "{r:#?}");
    }
    // The tail-called free returns to handle()'s caller, serve(), a static
    // function of httpserve.c that only the mini symbol table names.
    let sites: std::collections::BTreeSet<_> = a
        .alloc
        .iter()
        .filter(|r| r.kind == "free")
        .filter_map(|r| r.site.function.as_deref())
        .collect();
    assert_eq!(
        sites,
        ["handle", "serve"].into_iter().collect(),
        "{:#?}",
        a.alloc
    );
}

#[test]
fn a_debug_file_of_another_build_names_nothing_and_the_counts_stay_exact() {
    root_or_skip!();
    let a = twomalloc("debuglink");
    exact_two(&a);
    for r in &a.alloc {
        // The stale file's names belong to code that moved: using them
        // would name a site after another function.
        assert!(
            r.site.function.is_none() || r.site.function.as_deref() == Some("handle"),
            "{r:#?}"
        );
    }
    stacks_whole(&a, Family::Alloc, Some("__libc_start_call_main"));
}

/// `allocmix.c` of `seed` compiled with httpserve.c, in a fresh directory
/// (removed on drop).
struct Built {
    dir: PathBuf,
    mix: rig_fixtures::allocmix::Mix,
}

impl Built {
    fn new(seed: u64) -> Built {
        let mix = rig_fixtures::allocmix::generate(seed);
        let dir = std::env::temp_dir().join(format!("rig-allocmix-{}-{seed}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join(rig_fixtures::allocmix::FILE);
        std::fs::write(&src, &mix.source).unwrap();
        let ok = Command::new("gcc")
            .args(rig_fixtures::allocmix::CFLAGS)
            .arg("-o")
            .arg(dir.join("allocmix"))
            .arg(&src)
            .arg(rig_fixtures::httpserve_source())
            .status()
            .expect("gcc runs");
        assert!(ok.success(), "seed {seed}: allocmix.c compiles");
        Built { dir, mix }
    }

    fn exe(&self) -> PathBuf {
        self.dir.join("allocmix")
    }
}

impl Drop for Built {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

type Sites = BTreeMap<(String, u32, String), (u64, u64)>;

/// Outer rows of `a` summed by (function, line, kind).
fn outer_sites(a: &Attribution, file: &str) -> Sites {
    let mut out = Sites::new();
    for r in a.alloc.iter().filter(|r| !r.inner) {
        let f = r.site.function.clone().unwrap_or_else(|| r.site.label());
        let line = match (&r.site.file, r.site.line) {
            (Some(p), Some(l)) if Path::new(p).file_name().unwrap() == file => l,
            _ => 0,
        };
        let e = out.entry((f, line, r.kind.clone())).or_default();
        e.0 += r.calls;
        e.1 += r.bytes;
    }
    out
}

/// Syscall stack rows of `event` summed by the user site's (function, line).
fn syscall_sites(a: &Attribution, event: &str) -> BTreeMap<(String, u32), u64> {
    let mut out = BTreeMap::new();
    for r in a
        .stacks
        .rows
        .iter()
        .filter(|r| r.family == Family::Syscalls && r.event == event)
    {
        let s = &a.stacks.stacks[r.stack.as_ref().expect("a user stack")];
        assert!(s.incomplete.is_empty(), "{event} stack whole: {s:#?}");
        let site = &s.frames[s.user_site];
        let key = (
            site.function.clone().unwrap_or_else(|| site.label()),
            site.line.unwrap_or(0),
        );
        *out.entry(key).or_default() += r.count;
    }
    out
}

/// One seed: every outer site's calls and bytes, the totals, the inner
/// mallocs of realloc(NULL), and the mmap/munmap made inside calloc and
/// free at the right user sites, exactly.
fn generated_sequence_is_exact(seed: u64, disk: OnDisk) {
    let b = Built::new(seed);
    let m = &b.mix;
    let trace = m.trace.join("\n");
    let _g = probes_shared();
    let target = Child::spawn_ready(Command::new(b.exe())).expect("allocmix starts");
    disk.apply(&b.exe());
    let a = attribute_path(&target, &[Family::Alloc, Family::Syscalls], "/", N, 2);
    let want: Sites = m
        .sites
        .iter()
        .map(|((f, l, k), t)| ((f.clone(), *l, k.to_string()), (t.calls * N, t.bytes * N)))
        .collect();
    let got = outer_sites(&a, rig_fixtures::allocmix::FILE);
    assert_eq!(got, want, "seed {seed}: per-site outer calls\n{trace}");
    assert_eq!(
        (
            a.alloc_totals.allocations,
            a.alloc_totals.bytes,
            a.alloc_totals.frees
        ),
        (m.allocations * N, m.bytes * N, m.frees * N),
        "seed {seed}"
    );
    assert_eq!(a.alloc_layers.len(), 1, "{:#?}", a.alloc_layers);
    assert_eq!(
        (
            a.alloc_layers[0].inner_allocations,
            a.alloc_layers[0].inner_frees
        ),
        (m.inner_allocations * N, 0),
        "seed {seed}: inner calls {:#?}",
        a.alloc.iter().filter(|r| r.inner).collect::<Vec<_>>()
    );
    stacks_whole(&a, Family::Alloc, Some("handle"));
    let times_n = |t: &BTreeMap<(String, u32), u64>| -> BTreeMap<(String, u32), u64> {
        t.iter().map(|(k, v)| (k.clone(), v * N)).collect()
    };
    assert_eq!(
        syscall_sites(&a, "mmap"),
        times_n(&m.mmaps),
        "seed {seed}: mmap"
    );
    assert_eq!(
        syscall_sites(&a, "munmap"),
        times_n(&m.munmaps),
        "seed {seed}: munmap"
    );
}

#[test]
fn generated_allocation_sequences_are_counted_exactly_at_every_site() {
    root_or_skip!();
    for seed in 1..=5 {
        generated_sequence_is_exact(seed, OnDisk::Kept);
    }
}

#[test]
fn generated_sequences_of_a_server_deleted_or_replaced_on_disk_are_counted_exactly() {
    root_or_skip!();
    generated_sequence_is_exact(6, OnDisk::Deleted);
    generated_sequence_is_exact(7, OnDisk::Replaced);
}
