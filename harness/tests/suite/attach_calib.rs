//! Exact per-request counts at exact call sites on the calibration server
//! (fixtures/calib/calib_server.c, costs in fixtures/calib/COSTS.md).

use rig::probe::{Family, ProbeSet, WindowEnd};
use rig::report::Attribution;

use super::{at, attribute, attribute_path, calib, probes_shared};

const N: u64 = 1000;

/// (calls, bytes) of `kind` rows at `function` and the marker's line.
fn alloc_at(a: &Attribution, function: &str, marker: &str, kind: &str) -> (u64, u64) {
    let line = at(marker);
    a.alloc
        .iter()
        .filter(|r| {
            r.kind == kind
                && r.site.function.as_deref() == Some(function)
                && r.site.file_line().as_deref() == Some(line.as_str())
        })
        .fold((0, 0), |(c, b), r| (c + r.calls, b + r.bytes))
}

#[test]
fn counts_exact_allocations_per_request_at_each_call_site() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    let a = attribute(&target, &[Family::Alloc], N, 2);
    // (function, marker, kind, calls/req, bytes/req)
    let expected = super::calib_alloc_sites();
    for (function, marker, kind, calls, bytes) in expected {
        assert_eq!(
            alloc_at(&a, function, marker, kind),
            (calls * N, bytes * N),
            "{kind} at {function} ({})",
            at(marker)
        );
    }
    // Nothing else allocates per request: totals are exactly the sum.
    assert_eq!(a.alloc_totals.allocations, 8 * N, "{:#?}", a.alloc);
    assert_eq!(
        a.alloc_totals.bytes,
        (3 * 24 + 64 + 5000 + 100 + 256 + 512) * N
    );
    assert_eq!(a.alloc_totals.frees, 7 * N);
    assert_eq!(a.alloc_totals.null_frees, 0);
    // Size classes: 24 B is in (16, 32].
    let small = a
        .alloc
        .iter()
        .find(|r| r.site.file_line() == Some(at("alloc_small_a")))
        .unwrap();
    assert_eq!(small.size_class, Some(5));
    // The exact counts above hold with free's probe moved off its first
    // instruction (`test %rdi,%rdi`, single-stepped) to the `je` after it,
    // which the kernel emulates; malloc starts with a push, emulated where
    // it is.
    let note = |what: &str| attach_note(&a, Family::Alloc, what);
    let free = note("free");
    assert!(
        free.contains("placed at entry+0x3 on `je ") && free.contains("the kernel emulates it"),
        "{free}"
    );
    assert!(
        !note("malloc").contains("placed at entry+"),
        "{:#?}",
        a.notes
    );
}

/// The attach note of `what` in `family`.
fn attach_note(a: &Attribution, family: Family, what: &str) -> String {
    a.notes
        .iter()
        .find(|n| n.family == family && n.what == what)
        .unwrap_or_else(|| panic!("no {family:?} note for {what}: {:#?}", a.notes))
        .note
        .clone()
}

#[test]
fn counts_exact_copied_bytes_at_the_real_callers_of_the_real_implementation() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    let a = attribute(&target, &[Family::Copy], N, 2);
    // (function, marker, api, bucket, bytes per call)
    let expected = [
        ("calib_copy_small", "memcpy_small_a", "memcpy", "<64", 16),
        ("calib_copy_small", "memcpy_small_b", "memcpy", "<64", 16),
        ("calib_copy_medium", "memcpy_medium", "memcpy", "<1K", 200),
        ("calib_copy_large", "memcpy_large", "memcpy", "<16K", 4000),
        ("calib_copy_huge", "memcpy_huge", "memcpy", ">=16K", 20000),
        ("calib_move", "memmove", "memmove", "<1K", 1000),
        ("calib_set", "memset_a", "memset", "<16K", 3000),
        ("calib_set", "memset_b", "memset", "<1K", 100),
    ];
    for (function, marker, api, bucket, bytes) in expected {
        let rows: Vec<_> = a
            .copy
            .iter()
            .filter(|r| r.site.file_line() == Some(at(marker)))
            .collect();
        assert_eq!(rows.len(), 1, "one row at {}: {rows:#?}", at(marker));
        let r = rows[0];
        assert_eq!(r.site.function.as_deref(), Some(function));
        assert!(r.kind.split('/').any(|k| k == api), "{} is {api}", r.kind);
        assert_eq!(r.bucket, bucket);
        assert_eq!((r.calls, r.bytes), (N, bytes * N), "at {}", at(marker));
    }
    let total: u64 = a.copy.iter().map(|r| r.bytes).sum();
    assert_eq!(
        total,
        (16 + 16 + 200 + 4000 + 20000 + 1000 + 3000 + 100) * N,
        "{:#?}",
        a.copy
    );

    // The probes sit on the implementations glibc's IFUNC resolvers chose for
    // this CPU, named from libc6-dbg: `__memmove_<isa>_unaligned_erms`
    // (memcpy and memmove share it) and `__memset_<isa>_unaligned_erms`.
    let memcpy = a
        .copy_impls
        .iter()
        .find(|i| i.apis.contains(&"memcpy".to_string()))
        .unwrap();
    let name = memcpy.impl_name.as_deref().unwrap();
    assert!(
        name.starts_with("__memmove_") && !name.contains("nss"),
        "{name}"
    );
    assert!(
        memcpy.apis.contains(&"memmove".to_string()),
        "{:?}",
        a.copy_impls
    );
    let memset = a
        .copy_impls
        .iter()
        .find(|i| i.apis.contains(&"memset".to_string()))
        .unwrap();
    assert!(memset
        .impl_name
        .as_deref()
        .unwrap()
        .starts_with("__memset_"));
    // The exact bytes above hold with memset's probe off its first (vector)
    // instruction and memcpy/memmove's on the `jb` at +7, past `mov
    // %rdi,%rax`, where mempcpy's implementation jumps in: mempcpy shares
    // the probe (the calibration server calls it nowhere).
    let memset = attach_note(&a, Family::Copy, "memset");
    assert!(memset.contains("placed at entry+"), "{memset}");
    assert!(
        memcpy.apis.contains(&"mempcpy".to_string()),
        "{:?}",
        a.copy_impls
    );
    let memmove = attach_note(&a, Family::Copy, "memcpy/memmove/mempcpy");
    assert!(memmove.contains("placed at entry+0x7 on `jb "), "{memmove}");
    assert!(memmove.contains("its calls are counted here"), "{memmove}");
}

/// glibc's mempcpy jumps into memmove's implementation past its first
/// instruction; with the probe on memmove's `jb` at +7 its calls are counted,
/// at their callers, with their lengths (`GET /mempcpy`: two calls, 40 and
/// 7000 B, fixtures/calib/COSTS.md).
#[test]
fn counts_exact_mempcpy_calls_and_bytes_at_their_callers_through_the_memmove_probe() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    let a = attribute_path(&target, &[Family::Copy], "/mempcpy", N, 2);
    let sites = rig_fixtures::calib::MEMPCPY_SITES;
    // The size buckets of 40 and 7000 B.
    assert_eq!(
        sites.iter().map(|s| s.bytes).collect::<Vec<_>>(),
        [40, 7000]
    );
    for (s, bucket) in sites.iter().zip(["<64", "<16K"]) {
        let rows: Vec<_> = a
            .copy
            .iter()
            .filter(|r| r.site.file_line() == Some(at(s.marker)))
            .collect();
        assert_eq!(rows.len(), 1, "one row at {}: {:#?}", at(s.marker), a.copy);
        let r = rows[0];
        assert_eq!(r.site.function.as_deref(), Some(s.function));
        assert_eq!(r.kind, "memcpy/memmove/mempcpy");
        assert_eq!(r.bucket, bucket);
        assert_eq!(
            (r.calls, r.bytes),
            (s.count as u64 * N, s.bytes * N),
            "at {}",
            at(s.marker)
        );
    }
    // Nothing else copies per request.
    let calls: u64 = a.copy.iter().map(|r| r.calls).sum();
    let bytes: u64 = a.copy.iter().map(|r| r.bytes).sum();
    assert_eq!((calls, bytes), (2 * N, (40 + 7000) * N), "{:#?}", a.copy);
    let note = attach_note(&a, Family::Copy, "memcpy/memmove/mempcpy");
    assert!(note.contains("placed at entry+0x7 on `jb "), "{note}");
}

#[test]
fn counts_exact_mutex_operations_with_contention_attributed_to_the_locking_caller() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2", "--contend"]);
    let a = attribute(&target, &[Family::Locks], N, 2);
    let at_marker = |marker: &str, op: &str| {
        a.locks
            .iter()
            .filter(|r| r.op == op && r.site.file_line() == Some(at(marker)))
            .fold((0, 0, 0), |(c, q, w), r| {
                (c + r.calls, q + r.acquired, w + r.contended)
            })
    };
    let (lock_calls, lock_acq, lock_contended) = at_marker("mutex_lock", "lock");
    assert_eq!((lock_calls, lock_acq), (4 * N, 4 * N));
    assert_eq!(at_marker("mutex_unlock", "unlock").0, 4 * N);
    let (try_calls, try_ok, _) = at_marker("mutex_trylock", "trylock");
    assert_eq!(try_calls, N);
    // Whatever the contention, every successful trylock is unlocked once.
    assert_eq!(at_marker("mutex_unlock_try", "unlock").0, try_ok);
    let lock_row = a
        .locks
        .iter()
        .find(|r| r.site.file_line() == Some(at("mutex_lock")))
        .unwrap();
    assert_eq!(lock_row.site.function.as_deref(), Some("calib_lock"));
    // The contender holds the mutex ~20 µs of every ~70 µs, and the
    // request path holds it too: some lock calls wait in futex. Which side
    // waits is the scheduler's choice (with cheap lock probes the request
    // path's calls are short, and in one run all 18 waits fell on the
    // contender), so contention is asserted over both lock sites; what is
    // exact is that a wait is billed to the call site that waited: a row
    // has futex wait time exactly when it has contended acquisitions.
    let lock_rows: Vec<_> = a.locks.iter().filter(|r| r.op == "lock").collect();
    let contended: u64 = lock_rows.iter().map(|r| r.contended).sum();
    let wait: u64 = lock_rows.iter().map(|r| r.futex_wait_ns).sum();
    assert!(
        contended > 0 && wait > 0,
        "contention was seen: {:#?}",
        a.locks
    );
    for r in &lock_rows {
        assert_eq!(
            r.contended > 0,
            r.futex_wait_ns > 0,
            "wait billed to the waiting site: {r:#?}"
        );
        assert!(
            matches!(
                r.site.function.as_deref(),
                Some("calib_lock" | "calib_contender")
            ),
            "{r:#?}"
        );
    }
    assert!(lock_contended <= lock_acq);
    // The exact counts above hold with the lock probe (and the uretprobe
    // planted through it) moved past pthread_mutex_lock's loads of the
    // mutex kind to its `jne`, and the unlock probe past `mov $1,%esi` to
    // its tail jump: both emulated by the kernel, their entries are not.
    for what in [
        "pthread_mutex_lock",
        "pthread_mutex_lock return",
        "pthread_mutex_unlock",
    ] {
        let note = attach_note(&a, Family::Locks, what);
        assert!(
            note.contains("placed at entry+") && note.contains("the kernel emulates it"),
            "{what}: {note}"
        );
    }
    assert!(
        !a.notes
            .iter()
            .any(|n| n.what.starts_with("pthread_mutex_trylock")),
        "trylock starts with a push, probed where it is: {:#?}",
        a.notes
    );
}

#[test]
fn counts_exact_syscalls_and_none_of_the_probes_own() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    // Locks bring uretprobes, whose trampoline makes the `uretprobe` syscall
    // inside the target: it must not appear in the target's table.
    let a = attribute(&target, &[Family::Syscalls, Family::Locks], N, 2);
    // Without --contend the server goes quiet between batches, so the
    // trailing recv of each worker falls on a definite side of the boundary.
    assert_eq!(a.window.quiesced, Some(true));
    for (name, per_request) in [
        ("recvfrom", 1),
        ("sendto", 1),
        ("getppid", 3),
        ("getuid", 1),
        ("mmap", 1),
        ("munmap", 1),
        ("clock_nanosleep", 1),
    ] {
        assert_eq!(
            a.syscall(name),
            per_request * N,
            "{name}: {:#?}",
            a.syscalls
        );
    }
    assert!(
        a.syscalls
            .iter()
            .all(|r| r.nr != 335 && r.name != "uretprobe"),
        "{:#?}",
        a.syscalls
    );
    // One trampoline syscall per uretprobe hit: 4 locks + 1 trylock per
    // request. Seen, and kept out of the table. Kernels before 6.11 return
    // from a uretprobe through a trap, with no syscall at all.
    let trampoline = if a.kernel.features.uretprobe_syscall {
        5 * N
    } else {
        0
    };
    assert_eq!(
        a.probe_syscalls_excluded, trampoline,
        "trampoline syscalls were seen and excluded"
    );
    // Nothing else: the two workers may contend on g_mu, so futex may
    // appear; no other syscall may.
    for r in &a.syscalls {
        assert!(
            matches!(
                r.name.as_str(),
                "recvfrom"
                    | "sendto"
                    | "getppid"
                    | "getuid"
                    | "mmap"
                    | "munmap"
                    | "clock_nanosleep"
                    | "futex"
            ),
            "unexpected syscall {r:?}"
        );
    }
}

#[test]
fn counts_exact_page_faults_at_the_faulting_instruction() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    let a = attribute(&target, &[Family::Faults], N, 2);
    let rows: Vec<_> = a
        .faults
        .iter()
        .filter(|r| r.site.file_line() == Some(at("page_fault")))
        .collect();
    assert!(!rows.is_empty(), "{:#?}", a.faults);
    assert!(rows.iter().all(|r| !r.major && !r.in_kernel));
    assert!(rows
        .iter()
        .all(|r| r.site.function.as_deref() == Some("calib_touch")));
    assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), 4 * N);
    assert_eq!(
        a.faults.iter().map(|r| r.count).sum::<u64>(),
        4 * N,
        "{:#?}",
        a.faults
    );
}

/// Voluntary and involuntary switches of every thread, from the kernel's own
/// accounting (/proc/<pid>/task/*/status).
fn proc_switches(pid: u32) -> (u64, u64) {
    let mut v = (0, 0);
    for t in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let s = std::fs::read_to_string(t.unwrap().path().join("status")).unwrap();
        for l in s.lines() {
            if let Some(n) = l.strip_prefix("voluntary_ctxt_switches:") {
                v.0 += n.trim().parse::<u64>().unwrap();
            }
            if let Some(n) = l.strip_prefix("nonvoluntary_ctxt_switches:") {
                v.1 += n.trim().parse::<u64>().unwrap();
            }
        }
    }
    v
}

#[test]
fn context_switches_match_the_kernels_accounting_exactly() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    let url = format!("http://127.0.0.1:{}/calib", target.port);
    let t = rig::load::H1Target::parse(&url).unwrap();
    let mut conns = rig::load::connect(&t, 2).unwrap();
    rig::load::fixed_count(&mut conns, 200);
    let probes = ProbeSet::attach(target.pid(), &[Family::Sched]).unwrap();
    rig::load::fixed_count(&mut conns, 50);
    // Quiesced: every thread of the target is blocked, so nothing switches
    // between these reads and the snapshots.
    let settle = std::time::Duration::from_millis(20);
    let patience = std::time::Duration::from_secs(2);
    assert!(probes.quiesce(settle, patience).unwrap());
    let before = proc_switches(target.pid());
    let start = probes.start_window().unwrap();
    let r = rig::load::fixed_count(&mut conns, N);
    assert!(probes.quiesce(settle, patience).unwrap());
    let w = probes.end_window(start, WindowEnd::Completed).unwrap();
    let after = proc_switches(target.pid());
    assert_eq!(r.succeeded, N);
    let vol: u64 = w.delta.sched.values().map(|v| v.voluntary).sum();
    let invol: u64 = w.delta.sched.values().map(|v| v.involuntary).sum();
    assert_eq!((vol, invol), (after.0 - before.0, after.1 - before.1));
    // Not vacuous: most requests block in their recv and nanosleep. Not
    // every one does: a 1 µs nanosleep that expired before the task
    // blocked, or a recv whose data had arrived, does not switch (seen on
    // an emulated 5.10 guest sharing its cores: 859 of 1000).
    assert!(vol >= N / 2, "{vol}");
    // Both workers served (two connections, one worker each): the threads
    // that existed before attaching are all counted.
    let active = w
        .delta
        .sched
        .values()
        .filter(|v| v.voluntary >= N / 4)
        .count();
    assert!(active >= 2, "{:#?}", w.delta.sched);
}

#[test]
fn counts_every_thread_of_an_already_running_process() {
    root_or_skip!();
    let _g = probes_shared();
    // Four workers started long before attach; four connections land on
    // four different threads.
    let target = calib(&["--threads", "4"]);
    std::thread::sleep(std::time::Duration::from_millis(100));
    let a = attribute(&target, &[Family::Alloc, Family::Sched], N, 4);
    assert_eq!(a.alloc_totals.allocations, 8 * N);
    let busy = a
        .sched
        .threads
        .iter()
        .filter(|t| t.voluntary >= N / 8)
        .count();
    assert!(
        busy >= 4,
        "all four workers were seen: {:#?}",
        a.sched.threads
    );
}

/// Opening a window was mostly the kernel's verifier. Every program that
/// takes stacks carries the unwinder; written so that the verifier walks
/// it once per program (`take_ustack` and the mapping search as global
/// functions, the mapping search a scan in place of a binary search whose
/// bounds offset pointers), the heaviest program verifies in about 21,100
/// instructions here (`rig_alloc_free`: its own paths, and the walk's
/// rules down to the signal frame's, 1,400 of them). Inlined at each call
/// site with a binary search, the walk took 121,000 per call site (up to
/// 727,000 for one program) and windows opened in 3.39 s instead of
/// 0.63 s (docs/guide.md, "How long opening a window takes", medians side
/// by side). The bound leaves room for other kernels and compilers, and
/// fails on that explosion.
#[test]
fn every_program_rig_loads_verifies_in_fewer_than_30000_instructions() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    // A function of the user's own loads the user family too.
    let probes = ProbeSet::attach_named(
        target.pid(),
        &Family::ALL,
        rig::probe::Scope::Tree,
        rig::probe::Stacks::On,
        true,
        &[rig::probe::user::UserProbe::func("calib_*").unwrap()],
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let verified = probes.verified_instructions();
    // Every family's programs were loaded, each with its count.
    for family in Family::ALL {
        assert!(
            verified.iter().any(|(f, _, _)| *f == family),
            "{family:?}: {verified:?}"
        );
    }
    let heavy: Vec<_> = verified.iter().filter(|(_, _, n)| *n >= 30_000).collect();
    assert!(heavy.is_empty(), "{heavy:?}");
}

/// CPU time of every thread of `pid` as the scheduler accounts it
/// (`/proc/PID/task/*/schedstat`: ns on CPU, exact).
fn proc_cpu_ns(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .map(|t| {
            let s = std::fs::read_to_string(t.unwrap().path().join("schedstat")).unwrap();
            s.split_whitespace().next().unwrap().parse::<u64>().unwrap()
        })
        .sum()
}

/// Time the scheduler's task clock leaves out, per CPU, in clock ticks
/// (`/proc/stat`: irq, softirq and steal). With paravirtual steal and IRQ
/// time accounting a task's `schedstat` excludes the time its virtual CPU
/// was stolen by the host or spent in interrupts while it ran, and the
/// cpu-clock's timer counts it: on a busy host the samples can exceed the
/// scheduled time by that much (580 against 544 in one CI run).
fn unscheduled_ticks() -> Vec<u64> {
    std::fs::read_to_string("/proc/stat")
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("cpu") && !l.starts_with("cpu "))
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .skip(1)
                .map(|v| v.parse().unwrap())
                .collect();
            f[5] + f[6] + f[7]
        })
        .collect()
}

/// The cpu family's samples are statistics, so the check is against the
/// kernel's own accounting: a target that spins in one named function
/// (hitloop's `hit_none`, 3 frames under `main`) is sampled once per
/// period of its CPU time, as the scheduler counts that time, within the
/// sampling's granularity; and the samples' stacks are whole and end in
/// that function.
#[test]
fn cpu_samples_match_the_schedulers_cpu_time_and_land_in_the_spinning_function() {
    root_or_skip!();
    let _g = probes_shared();
    use std::io::{BufRead, BufReader, Write};
    // The kernel matrix's guests are emulated, three on two cores (`rigvm=`
    // on their command line): there the loop is shorter and the count only
    // bounded above.
    let emulated = std::fs::read_to_string("/proc/cmdline").is_ok_and(|c| c.contains("rigvm="));
    let iterations = if emulated { "400000000" } else { "1200000000" };
    let mut child = std::process::Command::new(rig_fixtures::hitloop())
        .args(["none", iterations, "3"])
        .env("HITLOOP_HOLD", "1")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut input = child.stdin.take().unwrap();
    let mut output = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    output.read_line(&mut line).unwrap();
    assert_eq!(line, "READY\n");
    let probes = ProbeSet::attach(pid, &[Family::Cpu]).unwrap();
    let before = proc_cpu_ns(pid);
    let unscheduled_before = unscheduled_ticks();
    let start = probes.start_window().unwrap();
    input.write_all(b"go\n").unwrap();
    line.clear();
    output.read_line(&mut line).unwrap();
    assert!(line.starts_with("ns="), "{line}");
    // Until it blocks in its next read of stdin the target still runs (its
    // write, its return to user space), and a sample taken between the
    // snapshot's reads of the two sample maps would be in one and not the
    // other.
    let syscall = format!("/proc/{pid}/syscall");
    while !std::fs::read_to_string(&syscall).is_ok_and(|s| s.starts_with("0 0x0 ")) {
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    let w = probes.end_window(start, WindowEnd::Completed).unwrap();
    let on_cpu = proc_cpu_ns(pid) - before;
    // Each CPU's count is in whole ticks, so what it left out in the window
    // is below one tick more than its difference.
    let tick_ns = 1_000_000_000 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let unscheduled_ns: u64 = unscheduled_ticks()
        .iter()
        .zip(&unscheduled_before)
        .map(|(after, before)| (after - before + 1) * tick_ns)
        .sum();
    let a = rig::report::Attribution::build(&w, None, None, &mut rig::symbolize::Symbolizer::new());
    drop(probes);
    input.write_all(b"exit\n").unwrap();
    let _ = child.wait();

    let period = a.cpu.period_ns;
    let samples = a.cpu.user + a.cpu.kernel;
    let expected = on_cpu / period;
    let unscheduled = unscheduled_ns / period;
    println!(
        "on cpu {on_cpu} ns, period {period} ns: {samples} samples, {expected} expected; \
         up to {unscheduled_ns} ns of irq, softirq and steal on the CPUs"
    );
    assert!(
        expected >= 200,
        "the loop ran {on_cpu} ns: too short to weigh"
    );
    // One sample per period the target ran: a timer tick lands in it or in
    // another task at each of its switches in and out, so the count can
    // differ by a few ticks per switch, never by more than 5%. The timer
    // also counts what the scheduler leaves out of the task's time (irq,
    // softirq, steal; see `unscheduled_ticks`), so above the bound allows
    // that much more. A timer that fires late (a virtual CPU its host did
    // not run for a while) fires once for all the periods it missed, so
    // samples can fall short of that time.
    let slack = expected / 20 + 2;
    assert!(
        samples <= expected + unscheduled + slack,
        "{samples} samples against {expected} periods of scheduled CPU time \
         and {unscheduled} of irq, softirq and steal (slack {slack})"
    );
    if emulated {
        assert!(samples >= expected / 8, "{samples} of {expected}");
    } else {
        assert!(
            samples + slack >= expected,
            "{samples} samples against {expected} periods of scheduled CPU time (slack {slack})"
        );
    }
    let rows: Vec<_> = a
        .stacks
        .rows
        .iter()
        .filter(|r| r.pid == pid && r.family == Family::Cpu)
        .collect();
    assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), samples);
    let want = [
        "hit_none", "descend", "descend", "descend", "descend", "main",
    ];
    let mut in_loop = 0;
    for r in &rows {
        let s = &a.stacks.stacks[r.stack.as_ref().expect("a user stack")];
        let names: Vec<&str> = s
            .frames
            .iter()
            .map(|f| f.function.as_deref().unwrap_or("?"))
            .collect();
        if names.first() == Some(&"hit_none") {
            assert!(s.incomplete.is_empty(), "{names:?}: {:?}", s.incomplete);
            assert_eq!(
                &names[..want.len().min(names.len())],
                &want[..],
                "{names:?}"
            );
            let runtime = &names[want.len()..];
            let c_runtime = rig_fixtures::stacks::C_RUNTIME;
            assert!(
                runtime.len() == c_runtime.len()
                    && runtime.iter().zip(c_runtime).all(|(g, w)| g.starts_with(w)),
                "{names:?}"
            );
            in_loop += r.count;
        }
    }
    // The loop is all the target runs in the window, but for the line it
    // writes after it.
    assert!(
        in_loop * 100 >= samples * 98,
        "{in_loop} of {samples} samples in hit_none: {rows:#?}"
    );
}

/// A kernel without BTF (built without CONFIG_DEBUG_INFO_BTF), as rig sees
/// it: `/sys/kernel/btf` hidden under an empty tmpfs in a private mount
/// namespace, so neither rig's feature probe nor the loader's CO-RE finds
/// vmlinux's BTF. Every family but sched still loads, the attach line and
/// the JSON say what was given up, and the counts by name and by call site
/// stay exact.
#[test]
fn without_the_kernels_btf_counts_stay_exact_and_rig_says_what_it_gave_up() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("attach.json");
    let script = format!(
        "mount -t tmpfs none /sys/kernel/btf && exec {} attach --pid {} --probes all \
         --drive http://127.0.0.1:{}/calib --requests {N} --json {}",
        super::rig_bin(),
        target.pid(),
        target.port,
        json.display()
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .expect("unshare runs (util-linux)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{out:?}");
    assert!(
        stderr.lines().any(|l| l.starts_with("rig: kernel ")
            && l.contains("degraded: no btf (")
            && l.contains("no sched family")),
        "{stderr}"
    );
    let d: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(d["kernel"]["features"]["btf"], false);
    assert_eq!(
        d["kernel"]["degraded"][0]["feature"], "btf",
        "{}",
        d["kernel"]
    );
    assert_eq!(
        d["families"],
        serde_json::json!(["syscalls", "alloc", "copy", "locks", "faults", "cpu"])
    );
    assert!(
        d["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n["family"] == "sched" && n["note"].as_str().unwrap().contains("no BTF")),
        "{}",
        d["notes"]
    );
    let calls = |name: &str| -> u64 {
        d["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["name"] == name)
            .map(|r| r["count"].as_u64().unwrap())
            .sum()
    };
    for &(name, per_request) in rig_fixtures::calib::SYSCALLS_PER_CALIB {
        assert_eq!(
            calls(name),
            u64::from(per_request) * N,
            "{name}: {}",
            d["syscalls"]
        );
    }
    // calib_server's allocations (fixtures/calib/COSTS.md): 8 allocations
    // and 7 frees of 6004 bytes per request, each at its own line.
    let t = &d["alloc_totals"];
    assert_eq!(
        (
            t["allocations"].as_u64(),
            t["bytes"].as_u64(),
            t["frees"].as_u64()
        ),
        (Some(8 * N), Some(6004 * N), Some(7 * N)),
        "{t}"
    );
    let small = d["alloc"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["site"]["function"] == "calib_alloc_small" && r["kind"] == "malloc")
        .map(|r| r["calls"].as_u64().unwrap())
        .sum::<u64>();
    assert_eq!(small, 3 * N, "{}", d["alloc"]);
}

/// A signal handler's return (`GET /signal`: the worker raises SIGUSR1,
/// whose handler does nothing): glibc's `__restore_rt` makes the
/// rt_sigreturn, and its stack goes on through the kernel's signal frame
/// into the code the signal interrupted (raise, in `calib_raise`), whole
/// to the worker thread's start. Exactly one per request.
#[test]
fn a_signal_handlers_return_is_unwound_through_the_signal_frame_into_the_interrupted_code() {
    root_or_skip!();
    let _g = probes_shared();
    let target = calib(&["--threads", "2"]);
    let a = attribute_path(&target, &[Family::Syscalls], "/signal", N, 1);
    let rows: Vec<_> = a
        .stacks
        .rows
        .iter()
        .filter(|r| r.event == "rt_sigreturn")
        .collect();
    assert_eq!(rows.iter().map(|r| r.count).sum::<u64>(), N, "{rows:#?}");
    for r in rows {
        let s = &a.stacks.stacks[r.stack.as_ref().unwrap()];
        let names: Vec<&str> = s
            .frames
            .iter()
            .map(|f| f.function.as_deref().unwrap_or("?"))
            .collect();
        assert!(s.incomplete.is_empty(), "{:?}: {names:?}", s.incomplete);
        let at = |f: &str| names.iter().position(|n| *n == f);
        let (raise, request, serve) = (
            at("calib_raise"),
            at("calib_signal_request"),
            at("calib_serve_conn"),
        );
        assert!(
            raise.is_some()
                && raise < request
                && request < serve
                && names.contains(&"start_thread"),
            "{names:?}"
        );
    }
}
