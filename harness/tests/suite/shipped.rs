//! The calibration server (fixtures/calib/calib_server.c, costs in
//! fixtures/calib/COSTS.md) built as servers ship: non-PIE with code that
//! takes malloc's address (glibc's GOT slot for malloc holds the
//! executable's canonical `malloc@plt`), linked statically against glibc,
//! and linked statically against musl (`musl-gcc -static`: no libc.so, the
//! C library's malloc, memcpy and mutexes inside the executable, and no
//! unwind tables for musl's code). Every family exact per call site, as
//! for the dynamic build; what musl's own code adds is known by
//! construction and asserted as such; every stack whole, through musl's
//! code too.

use std::path::Path;
use std::process::Command;

use rig::probe::Family;
use rig::report::Attribution;
use rig::session::Child;

use super::{at, attribute, probes_shared};

const N: u64 = 1000;

#[derive(Clone, Copy, PartialEq)]
enum Build {
    NoPie,
    StaticGlibc,
    StaticMusl,
}

fn start(exe: &Path) -> Child {
    let mut cmd = Command::new(exe);
    cmd.args(["--port", "0", "--threads", "1"]);
    Child::spawn_ready(cmd).expect("the calibration server starts")
}

/// Calls and bytes of the rows of `kind` at `function` and the marker's
/// line, made by the server's code (`inner`: false) or inside another
/// allocator call (`inner`: true).
fn alloc_at(a: &Attribution, function: &str, marker: &str, kind: &str, inner: bool) -> (u64, u64) {
    let line = at(marker);
    a.alloc
        .iter()
        .filter(|r| {
            r.kind == kind
                && r.inner == inner
                && r.site.function.as_deref() == Some(function)
                && r.site.file_line().as_deref() == Some(line.as_str())
        })
        .fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes))
}

fn every_family_exact(exe: &Path, build: Build) {
    let _g = probes_shared();
    let target = start(exe);
    let families = [Family::Alloc, Family::Copy, Family::Locks, Family::Syscalls];
    // One connection on one worker: nothing contends (COSTS.md, "exact").
    let a = attribute(&target, &families, N, 1);
    let musl = build == Build::StaticMusl;
    assert!(a.complete, "{:#?} {:#?}", a.losses, a.alloc_unprobed);
    assert!(a.alloc_unprobed.is_empty(), "{:#?}", a.alloc_unprobed);
    let allocator = if musl { "musl" } else { "glibc" };
    assert!(
        a.alloc_layers.iter().all(|l| l.allocator == allocator),
        "{:#?}",
        a.alloc_layers
    );

    // Allocations: (function, marker, kind, calls/req, bytes/req).
    let expected = super::calib_alloc_sites();
    for (function, marker, kind, calls, bytes) in expected {
        assert_eq!(
            alloc_at(&a, function, marker, kind, false),
            (calls * N, bytes * N),
            "{kind} at {function} ({}): {:#?}",
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
    // musl's own calls inside the server's: memalign tail-jumps to
    // aligned_alloc (so its caller is memalign's), posix_memalign calls
    // aligned_alloc, calloc calls malloc. Inner, counted once.
    let inner: u64 = a.alloc.iter().filter(|r| r.inner).map(|r| r.calls).sum();
    if musl {
        assert_eq!(
            alloc_at(&a, "calib_alloc_aligned", "memalign", "aligned_alloc", true),
            (N, 512 * N)
        );
        let from = |caller: &str, kind: &str| {
            a.alloc
                .iter()
                .filter(|r| r.inner && r.kind == kind && r.site.function.as_deref() == Some(caller))
                .fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes))
        };
        assert_eq!(from("posix_memalign", "aligned_alloc"), (N, 256 * N));
        assert_eq!(from("calloc", "malloc"), (N, 64 * N));
        assert_eq!(inner, 3 * N, "{:#?}", a.alloc);
    } else {
        assert_eq!(inner, 0, "{:#?}", a.alloc);
    }

    // Copies: (function, marker, api, bucket, bytes per call).
    let mut copies = vec![
        ("calib_copy_small", "memcpy_small_a", "memcpy", "<64", 16),
        ("calib_copy_small", "memcpy_small_b", "memcpy", "<64", 16),
        ("calib_copy_medium", "memcpy_medium", "memcpy", "<1K", 200),
        ("calib_copy_large", "memcpy_large", "memcpy", "<16K", 4000),
        ("calib_copy_huge", "memcpy_huge", "memcpy", ">=16K", 20000),
        ("calib_move", "memmove", "memmove", "<1K", 1000),
        ("calib_set", "memset_a", "memset", "<16K", 3000),
        ("calib_set", "memset_b", "memset", "<1K", 100),
    ];
    if musl {
        // musl's calloc clears the block with a tail call to memset (its
        // caller is calloc's, at the calloc line): 64 bytes.
        copies.push(("calib_alloc_calloc", "calloc", "memset", "<1K", 64));
    }
    for (function, marker, api, bucket, bytes) in &copies {
        let rows: Vec<_> = a
            .copy
            .iter()
            .filter(|r| r.site.file_line() == Some(at(marker)))
            .collect();
        assert_eq!(rows.len(), 1, "one row at {}: {:#?}", at(marker), a.copy);
        let r = rows[0];
        assert_eq!(r.site.function.as_deref(), Some(*function));
        assert!(r.kind.split('/').any(|k| k == *api), "{} is {api}", r.kind);
        assert_eq!(r.bucket, *bucket);
        assert_eq!((r.calls, r.bytes), (N, bytes * N), "at {}", at(marker));
    }
    let mut copied = copies.iter().map(|c| c.4).sum::<u64>() * N;
    if musl {
        // mallocng moves a block shrunk into a smaller size class:
        // realloc(p, 100) copies 100 bytes, inside realloc.
        let r: Vec<_> = a
            .copy
            .iter()
            .filter(|r| r.site.function.as_deref() == Some("__libc_realloc"))
            .collect();
        assert_eq!(r.len(), 1, "{:#?}", a.copy);
        assert_eq!(
            (r[0].kind.as_str(), r[0].calls, r[0].bytes),
            ("memcpy", N, 100 * N)
        );
        copied += 100 * N;
    }
    assert_eq!(
        a.copy.iter().map(|r| r.bytes).sum::<u64>(),
        copied,
        "{:#?}",
        a.copy
    );

    // Locks, uncontended.
    let locks = |marker: &str, op: &str| {
        a.locks
            .iter()
            .filter(|r| r.op == op && r.site.file_line() == Some(at(marker)))
            .fold((0, 0, 0), |(c, q, w), r| {
                (c + r.calls, q + r.acquired, w + r.contended)
            })
    };
    assert_eq!(locks("mutex_lock", "lock"), (4 * N, 4 * N, 0));
    assert_eq!(locks("mutex_unlock", "unlock").0, 4 * N);
    assert_eq!(locks("mutex_trylock", "trylock"), (N, N, 0));
    assert_eq!(locks("mutex_unlock_try", "unlock").0, N);
    assert_eq!(
        a.locks.iter().map(|r| r.calls).sum::<u64>(),
        10 * N,
        "{:#?}",
        a.locks
    );

    // Syscalls. musl's nanosleep is the nanosleep syscall (glibc's is
    // clock_nanosleep); musl's malloc maps and unmaps groups of its own
    // now and then, beside calib_touch's one mmap and munmap per request.
    let sleep = if musl { "nanosleep" } else { "clock_nanosleep" };
    for (name, per_request) in [
        ("recvfrom", 1),
        ("sendto", 1),
        ("getppid", 3),
        ("getuid", 1),
        (sleep, 1),
    ] {
        assert_eq!(
            a.syscall(name),
            per_request * N,
            "{name}: {:#?}",
            a.syscalls
        );
    }
    if musl {
        assert!(a.syscall("mmap") >= N, "{:#?}", a.syscalls);
        assert_eq!(a.syscall("mmap"), a.syscall("munmap"), "{:#?}", a.syscalls);
    } else {
        assert_eq!((a.syscall("mmap"), a.syscall("munmap")), (N, N));
    }
    let known = [
        "recvfrom", "sendto", "getppid", "getuid", sleep, "mmap", "munmap",
    ];
    assert!(
        a.syscalls.iter().all(|r| known.contains(&r.name.as_str())),
        "{:#?}",
        a.syscalls
    );

    // Stacks. Every one is whole and names the handler; so are those
    // through musl's own code (no unwind tables: its rows come from the
    // stack height analysis of its machine code), which end at the
    // thread's start. The syscalls the server's code makes are exact frame
    // by frame: musl's wrappers, then the server's call site.
    let pid = target.pid();
    let code = std::fs::read(exe).unwrap();
    let mut exact = 0;
    for r in a.stacks.rows.iter().filter(|r| r.pid == pid) {
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        let names: Vec<&str> = s
            .frames
            .iter()
            .filter_map(|f| f.function.as_deref())
            .collect();
        assert!(
            s.incomplete.is_empty(),
            "{} {} x{}: {:?} {names:?}",
            r.family,
            r.event,
            r.count,
            s.incomplete
        );
        assert!(
            names.contains(&"calib_serve_conn") && names.contains(&"worker_main"),
            "{} {}: {names:?}",
            r.family,
            r.event
        );
        // The user site of a syscall the server makes is the server's
        // call, past the C library linked in with it (glibc's wrappers
        // known by the names glibc exports, musl's code by having no
        // unwind tables).
        if r.family == Family::Syscalls {
            let user = s.frames[s.user_site].function.as_deref().unwrap_or("?");
            assert!(
                user.starts_with("calib_"),
                "{} {}: user site {user} (frame {}) of {names:?}",
                r.family,
                r.event,
                s.user_site
            );
        }
        if !musl {
            continue;
        }
        // gdb cannot unwind musl's code (no CFI; its prologue analysis
        // gives made-up frames), so each frame is checked on its own: its
        // address is a return address, just past a call.
        for f in &s.frames[1..] {
            assert!(
                follows_a_call(&code, f.module_offset as usize),
                "{} {}: {:#x} in {:?} is no return address: {names:?}",
                r.family,
                r.event,
                f.module_offset,
                f.function
            );
        }
        if r.family != Family::Syscalls {
            continue;
        }
        assert_eq!(names.last(), Some(&"start"), "{}: {names:?}", r.event);
        let from_server = names.get(1).is_some_and(|n| n.starts_with("calib_"));
        let (chain, marker): (&[&str], &str) = match r.event.as_str() {
            "getppid" => (&["syscall", "calib_syscalls", "calib_request"], "getppid"),
            "getuid" => (&["syscall", "calib_syscalls", "calib_request"], "getuid"),
            "mmap" if from_server => (&["mmap64", "calib_touch", "calib_request"], "mmap"),
            "munmap" if from_server => (&["munmap", "calib_touch", "calib_request"], "munmap"),
            "recvfrom" => (&["sccp", "recvfrom"], "recv"),
            "sendto" => (&["sccp", "sendto", "calib_send"], "send"),
            "nanosleep" => (
                &[
                    "sccp",
                    "clock_nanosleep",
                    "nanosleep",
                    "calib_sleep",
                    "calib_request",
                ],
                "nanosleep",
            ),
            // musl's malloc and free mapping groups of their own.
            _ => continue,
        };
        let whole: Vec<&str> = chain
            .iter()
            .copied()
            .chain(["calib_serve_conn", "worker_main", "start"])
            .collect();
        assert_eq!(names, whole, "{}", r.event);
        let site = s
            .frames
            .iter()
            .find(|f| {
                f.function
                    .as_deref()
                    .is_some_and(|n| n.starts_with("calib_"))
            })
            .unwrap();
        assert_eq!(site.file_line(), Some(at(marker)), "{}: {names:?}", r.event);
        // The user site is the server's call, past musl's wrappers.
        assert_eq!(
            s.frames[s.user_site].file_line(),
            Some(at(marker)),
            "{}: user site {} of {names:?}",
            r.event,
            s.user_site
        );
        exact += r.count;
    }
    if musl {
        // recvfrom, sendto, getppid x3, getuid, nanosleep, mmap, munmap.
        assert_eq!(exact, 9 * N, "{:#?}", a.stacks.rows);
    }
}

/// Whether the instruction that ends just before file offset `ra` of
/// `code` is a call (a call's return address, not a guessed one).
fn follows_a_call(code: &[u8], ra: usize) -> bool {
    use iced_x86::{Decoder, DecoderOptions, FlowControl};
    (2..=7).filter(|&n| n <= ra && ra <= code.len()).any(|n| {
        let ins = Decoder::new(64, &code[ra - n..ra], DecoderOptions::NONE).decode();
        !ins.is_invalid()
            && ins.len() == n
            && matches!(
                ins.flow_control(),
                FlowControl::Call | FlowControl::IndirectCall
            )
    })
}

#[test]
fn a_non_pie_server_whose_code_takes_mallocs_address_is_exact_in_every_family() {
    root_or_skip!();
    // The canonical malloc@plt the fixture is about.
    let exe = rig_fixtures::calib_server_nopie();
    let out = Command::new("readelf")
        .args(["-h", "-W"])
        .arg(&exe)
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("EXEC (Executable file)"),
        "non-PIE"
    );
    every_family_exact(&exe, Build::NoPie);
}

#[test]
fn a_static_glibc_server_is_exact_in_every_family() {
    root_or_skip!();
    every_family_exact(
        &rig_fixtures::calib_server_static("glibc"),
        Build::StaticGlibc,
    );
}

#[test]
fn a_static_musl_server_is_exact_in_every_family_and_its_stacks_are_whole_through_musl() {
    root_or_skip!();
    every_family_exact(
        &rig_fixtures::calib_server_static("musl"),
        Build::StaticMusl,
    );
}

/// Functions a JIT wrote (fixtures/alloc/jitcode.c: machine code copied
/// into anonymous memory and named in /tmp/perf-PID.map, as `node
/// --perf-basic-prof` does): syscalls made inside them counted exactly,
/// their frames named from the map with the exact offset of the
/// instruction after `syscall`, and their stacks marked `JIT code`, where
/// the walk ends (JIT code has no unwind table).
#[test]
fn code_a_jit_wrote_is_named_from_its_perf_map_and_its_stacks_say_jit_code() {
    root_or_skip!();
    let _g = probes_shared();
    let mut cmd = Command::new(rig_fixtures::jitcode());
    cmd.args(["--port", "0"]);
    let target = Child::spawn_ready(cmd).expect("the JIT fixture starts");
    let map = format!("/tmp/perf-{}.map", target.pid());
    struct Remove(String);
    impl Drop for Remove {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }
    let _map = Remove(map.clone());
    assert!(Path::new(&map).exists(), "the fixture wrote {map}");
    let a = super::attribute_path(&target, &[Family::Syscalls], "/", N, 1);
    assert_eq!(a.syscall("getppid"), 2 * N, "{:#?}", a.syscalls);
    assert_eq!(a.syscall("getuid"), N, "{:#?}", a.syscalls);
    // (event, function, offset past `syscall`): mov is 5 bytes, syscall 2,
    // after push %rbp; mov %rsp,%rbp (4) in jit_getppid.
    for (event, function, offset, count) in [
        ("getppid", "jit_getppid", 0xb, 2 * N),
        ("getuid", "jit_getuid", 0x7, N),
    ] {
        let rows: Vec<_> = a
            .stacks
            .rows
            .iter()
            .filter(|r| r.family == Family::Syscalls && r.event == event)
            .collect();
        assert_eq!(
            rows.iter().map(|r| r.count).sum::<u64>(),
            count,
            "{rows:#?}"
        );
        for r in rows {
            let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
            let leaf = &s.frames[0];
            assert_eq!(leaf.naming, rig::symbolize::Naming::Jit, "{leaf:?}");
            assert_eq!(
                (leaf.function.as_deref(), leaf.function_offset),
                (Some(function), offset),
                "{leaf:?}"
            );
            assert_eq!(leaf.label(), format!("{function}+{offset:#x} [jit]"));
            assert_eq!(s.incomplete, ["JIT code"], "{:?}", s.frames);
        }
    }
}

/// A server in a container: a private mount and pid namespace
/// (`unshare --mount --pid --fork`) in which variant C of libcalibwork.so
/// is bind-mounted over variant A's path, so the host's file at the path
/// the server maps is another build. rig probes and names the file the
/// server mapped (one more allocation per request, at a site A does not
/// have), and measures the server by its host pid.
#[test]
fn a_server_in_a_private_mount_and_pid_namespace_is_measured_from_its_own_files() {
    root_or_skip!();
    let _g = probes_shared();
    let (a_so, c_so) = (
        rig_fixtures::calibwork_so('a'),
        rig_fixtures::calibwork_so('c'),
    );
    let mut cmd = Command::new("unshare");
    cmd.args([
        "--mount",
        "--pid",
        "--fork",
        "--kill-child",
        "--",
        "sh",
        "-c",
    ])
    .arg(r#"mount --bind "$1" "$2" && exec "$3" --port 0 --threads 1"#)
    .arg("sh")
    .arg(&c_so)
    .arg(&a_so)
    .arg(rig_fixtures::calib_dyn())
    .env("LD_LIBRARY_PATH", rig_fixtures::calibwork_dir('a'));
    let wrapper = Child::spawn_ready(cmd).expect("the server starts in its namespaces");
    let children =
        std::fs::read_to_string(format!("/proc/{0}/task/{0}/children", wrapper.pid())).unwrap();
    let pid: u32 = children.trim().parse().expect("one child: the server");
    // The setup holds: the server is pid 1 of its namespace and maps C's
    // bytes at A's path, while the host's file there is still A.
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let nspid = status.lines().find(|l| l.starts_with("NSpid:")).unwrap();
    assert_eq!(nspid.split_whitespace().last(), Some("1"), "{nspid}");
    let inside = std::fs::read(format!("/proc/{pid}/root{}", a_so.display())).unwrap();
    assert_eq!(
        inside,
        std::fs::read(&c_so).unwrap(),
        "C's bytes at A's path"
    );
    assert_ne!(
        inside,
        std::fs::read(&a_so).unwrap(),
        "the host's file is A"
    );

    let drive = super::drive(wrapper.port, "/work", N, 1);
    let s = rig::session::AttachSettings {
        pid,
        families: vec![Family::Alloc, Family::Copy],
        duration: std::time::Duration::ZERO,
        per: None,
        drive: Some(drive),
        command: Vec::new(),
        tree: None,
        wrappers: Vec::new(),
        live_heap: false,
        user_probes: Vec::new(),
    };
    let stop = std::sync::atomic::AtomicBool::new(false);
    let a = rig::session::run_attach(&s, &stop).expect("attribution session");
    assert_eq!(a.window.load.as_ref().unwrap().succeeded, N);
    assert!(a.complete, "{:#?} {:#?}", a.losses, a.alloc_unprobed);
    let c = rig_fixtures::ab::costs_of('c');
    for site in rig_fixtures::ab::SITES
        .iter()
        .filter(|s| s.variants.contains('c'))
    {
        let line = format!(
            "calibwork.c:{}",
            rig_fixtures::calibwork_site_line(site.marker)
        );
        let at_site = |r: &rig::symbolize::Site| {
            r.function.as_deref() == Some(site.function)
                && r.file_line().as_deref() == Some(line.as_str())
        };
        let (kind, (calls, bytes)) = match site.kind {
            rig_fixtures::calib::Kind::Memcpy => (
                "memcpy",
                a.copy
                    .iter()
                    .filter(|r| at_site(&r.site))
                    .fold((0, 0), |(n, b), r| (n + r.calls, b + r.bytes)),
            ),
            k => {
                let kind = if k == rig_fixtures::calib::Kind::Free {
                    "free"
                } else {
                    "malloc"
                };
                let rows = a.alloc.iter().filter(|r| r.kind == kind && !r.inner);
                (
                    kind,
                    rows.filter(|r| at_site(&r.site))
                        .fold((0, 0), |(n, b), r| (n + r.calls, b + r.bytes)),
                )
            }
        };
        assert_eq!(
            (calls, bytes),
            (N, N * site.bytes),
            "{} ({kind} at {} {line})",
            site.marker,
            site.function
        );
    }
    assert_eq!(
        a.alloc_totals.allocations,
        N * u64::from(c.mallocs),
        "{:#?}",
        a.alloc_totals
    );
}
