use super::*;

#[test]
fn parses_stat_with_hostile_comm() {
    // Real layout (kernel 6.x), comm "a) (b".
    let t = "1234 (a) (b) S 1 1234 1234 0 -1 4194560 1500 0 3 0 25 7 0 0 20 0 3 0 98765 10000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0";
    let s = parse_stat(t).unwrap();
    assert_eq!(
        s,
        StatFields {
            state: 'S',
            minflt: 1500,
            majflt: 3,
            utime_ticks: 25,
            stime_ticks: 7,
            threads: 3,
            start_ticks: 98765,
        }
    );
    assert_eq!(parse_stat("garbage"), None);
}

#[test]
fn parses_status() {
    let t = "Name:\tcalib_server\nVmHWM:\t    4096 kB\nVmRSS:\t    3000 kB\nThreads:\t3\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t4\n";
    assert_eq!(
        parse_status(t),
        StatusFields {
            vm_rss_kib: 3000,
            vm_hwm_kib: 4096,
            threads: 3,
            voluntary_ctxt: 12,
            nonvoluntary_ctxt: 4
        }
    );
}

#[test]
fn parses_pss_and_schedstat() {
    let r = "55d0-7ffd ---p 00000000 00:00 0    [rollup]\nRss:                1000 kB\nPss:                 612 kB\nPss_Dirty:           100 kB\n";
    assert_eq!(parse_smaps_rollup_pss(r), Some(612));
    assert_eq!(parse_schedstat("123456789 2000 15\n"), Some(123456789));
}

#[test]
fn parses_cgroup_key_values() {
    let oc = "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n";
    assert_eq!(parse_kv(oc, "oom_kill"), Some(2));
    assert_eq!(parse_kv(oc, "oom"), None);
    let ev = "low 0\nhigh 0\nmax 17\noom 1\noom_kill 1\noom_group_kill 0\n";
    assert_eq!(parse_kv(ev, "oom"), Some(1));
    assert_eq!(parse_kv(ev, "max"), Some(17));
    let cpu = "nr_periods 10\nnr_throttled 4\nthrottled_time 5000\n";
    assert_eq!(parse_kv(cpu, "throttled_time"), Some(5000));
}

#[test]
fn deltas() {
    let a = ProcSnapshot {
        pid: 1,
        processes: 1,
        rss_kib: 100,
        pss_kib: 90,
        vm_hwm_kib: 100,
        threads: 1,
        fds: 3,
        cpu_ns: 1000,
        utime_ticks: 1,
        stime_ticks: 1,
        minflt: 10,
        majflt: 0,
        voluntary_ctxt: 5,
        nonvoluntary_ctxt: 1,
    };
    let b = ProcSnapshot {
        rss_kib: 80,
        cpu_ns: 3500,
        utime_ticks: 3,
        minflt: 14,
        voluntary_ctxt: 9,
        ..a
    };
    let d = b.since(&a);
    assert_eq!(d.cpu_ns, 2500);
    assert_eq!(d.minflt, 4);
    assert_eq!(d.voluntary_ctxt, 4);
    assert_eq!(d.rss_kib, -20);
    assert_eq!(d.utime_stime_ns, 2 * (1_000_000_000 / clock_ticks()));
}

/// Busy threads, then: the per-task sum sees them, the process-level
/// schedstat file (main thread only) does not.
#[test]
fn cpu_ns_sums_threads_not_just_the_main_one() {
    let stop = Arc::new(AtomicBool::new(false));
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            let done = done_tx.clone();
            std::thread::spawn(move || {
                // Spin until THIS thread has run 150 ms of CPU, however
                // loaded the machine is.
                while thread_cpu_ns() < 150_000_000 {
                    std::hint::black_box(0u64);
                }
                done.send(()).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
        .collect();
    for _ in 0..2 {
        done_rx.recv().unwrap();
    }
    let me = std::process::id();
    let snap = ProcSnapshot::read(me).unwrap();
    // The process-level file: whichever thread is the group leader.
    let leader = parse_schedstat(&read(format!("/proc/{me}/schedstat")).unwrap()).unwrap();
    let leader_task =
        parse_schedstat(&read(format!("/proc/{me}/task/{me}/schedstat")).unwrap()).unwrap();
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    // Leader file equals the leader task (± what it ran between reads).
    assert!(leader_task >= leader && leader_task - leader < 50_000_000);
    // The two busy workers alone ran >= 2 x 150 ms.
    assert!(
        snap.cpu_ns >= leader + 300_000_000,
        "sum {} vs leader {}",
        snap.cpu_ns,
        leader
    );
    assert!(snap.threads >= 3);
    assert!(snap.fds >= 3);
    assert!(snap.rss_kib > 0 && snap.vm_hwm_kib >= snap.rss_kib);
}

fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: valid out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[test]
fn self_cpu_moves() {
    let a = self_cpu_ns();
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_millis(30) {
        std::hint::black_box(0u64);
    }
    assert!(self_cpu_ns() > a);
}
