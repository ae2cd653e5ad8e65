//! What rig prints, pinned: the `rig run` table, the attribution table
//! (`rig attach`, `rig demo`), the A/B table and its markdown, and the gate
//! report, each built
//! from hand-made values (no root, no probes). A change to a format shows
//! as a snapshot diff (`cargo insta review`, or `INSTA_UPDATE=always`).

use std::collections::BTreeMap;

use rig::ab::{AbReport, CodeDifference, EqualityReport, MetricComparison, MetricValues};
use rig::gate::{GateReport, Observed, Row, Tol, Verdict};
use rig::host::Pmu;
use rig::probe::{Family, Scope, WindowEnd};
use rig::report::stacks::{StackFrames, StackRow, StackSection};
use rig::report::{
    AllocRow, AllocTotals, Attribution, CopyRow, CpuSamples, FaultRow, LockRow, SchedSection,
    SyscallRow, WindowInfo,
};
use rig::symbolize::{Naming, Site};

use rig::case::{CaseResult, CleanPass, CountedPass, LaunchInfo, PerRequest, ServerUsage, Status};
use rig::launch::port::PortProof;
use rig::launch::start::ExitInfo;
use rig::load::{EncodedHists, Handshakes, HistSummary, LoadReport, Mode};
use rig::scenario::Matrix;

fn site(function: &str, offset: u64, line: u32) -> Site {
    Site {
        addr: 0x5555_5555_0000 + offset,
        module: Some("/usr/local/bin/server".into()),
        module_offset: offset,
        build_id: None,
        function: Some(function.into()),
        function_offset: 0x1f,
        file: Some("/src/server.c".into()),
        line: Some(line),
        inlined: Vec::new(),
        naming: Naming::Symbol,
    }
}

/// One stack: malloc (a wrapper) called from handle_request, from main.
fn stacks(handler: &Site) -> StackSection {
    let mut malloc = site("malloc", 0x9_0000, 3281);
    malloc.module = Some("/usr/lib/x86_64-linux-gnu/libc.so.6".into());
    let mut frames = StackSection {
        enabled: true,
        ..Default::default()
    };
    frames.stacks.insert(
        "00000000000000ab".into(),
        StackFrames {
            frames: vec![malloc, handler.clone(), site("main", 0x1000, 30)],
            user_site: 1,
            incomplete: Vec::new(),
        },
    );
    frames.rows.push(StackRow {
        family: Family::Alloc,
        event: "malloc".into(),
        size_class: Some(5),
        pid: 4242,
        count: 3000,
        amount: 72_000,
        stack: Some("00000000000000ab".into()),
        kernel_stack: None,
        inner: false,
        rig_probes: false,
        beside_the_heap: false,
        free: false,
    });
    frames
}

fn attribution() -> Attribution {
    let handler = site("handle_request", 0x1200, 120);
    let parse = site("parse_headers", 0x1400, 88);
    let stacks = stacks(&handler);
    Attribution {
        schema_version: rig::report::SCHEMA_VERSION,
        pid: 4242,
        command: "/usr/local/bin/server --port 8080".into(),
        families: Family::BUILT_IN.to_vec(),
        window: WindowInfo {
            elapsed_ns: 250_000_000,
            end: WindowEnd::Completed,
            requests: Some(1000),
            load: None,
            quiesced: Some(true),
            drive: None,
            command: None,
            warnings: Vec::new(),
            rig_excluded: Vec::new(),
            other_traffic: None,
        },
        syscalls: vec![
            SyscallRow {
                nr: 45,
                name: "recvfrom".into(),
                count: 2000,
                returns: 2000,
                ns: 3_000_000,
            },
            SyscallRow {
                nr: 44,
                name: "sendto".into(),
                count: 1000,
                returns: 1000,
                ns: 9_000_000,
            },
        ],
        alloc: vec![
            AllocRow {
                site: handler.clone(),
                kind: "malloc".into(),
                allocator: "glibc".into(),
                size_class: Some(5),
                calls: 3000,
                bytes: 72_000,
                inner: false,
                not_sized: false,
                free: false,
            },
            AllocRow {
                site: handler.clone(),
                kind: "free".into(),
                allocator: "glibc".into(),
                size_class: None,
                calls: 3000,
                bytes: 0,
                inner: false,
                not_sized: false,
                free: true,
            },
        ],
        alloc_totals: AllocTotals {
            allocations: 3000,
            bytes: 72_000,
            frees: 3000,
            null_frees: 0,
            gc_cycles: 0,
            not_sized: 0,
        },
        alloc_layers: Vec::new(),
        alloc_unprobed: Vec::new(),
        alloc_unseen: Vec::new(),
        copy_impls: Vec::new(),
        copy: vec![CopyRow {
            site: parse.clone(),
            kind: "memcpy/memmove".into(),
            implementation: Some("__memmove_avx_unaligned_erms".into()),
            bucket: "<=4K",
            calls: 1000,
            bytes: 4_096_000,
        }],
        user: Vec::new(),
        locks: vec![LockRow {
            site: handler,
            pid: 4242,
            op: "lock",
            mutex: 0x7f00_0000_1000,
            calls: 1000,
            acquired: 1000,
            contended: 10,
            futex_wait_ns: 50_000,
            call_ns: 80_000,
            holds: 1000,
            hold_ns: 200_000,
        }],
        faults: vec![FaultRow {
            site: parse,
            major: false,
            in_kernel: false,
            count: 3,
        }],
        sched: SchedSection {
            voluntary: 1000,
            involuntary: 2,
            off_cpu_ns: 120_000_000,
            threads: Vec::new(),
        },
        scope: Scope::Process,
        processes: Vec::new(),
        losses: BTreeMap::new(),
        probe_syscalls_excluded: 0,
        complete: true,
        notes: Vec::new(),
        distortions: vec!["off-CPU time includes the probes' own overhead".into()],
        io_uring: None,
        pmu: Pmu {
            instructions: false,
            detail: "no PMU (hand-made value)".into(),
        },
        kernel: rig::report::KernelSection {
            version: "6.18.0 (hand-made value)".into(),
            features: rig::probe::kernel::Features {
                btf: true,
                global_functions: true,
                bpf_loop: true,
                attach_cookie: true,
                sched_switch_prev_state: true,
                ring_buffer: true,
                perf_software_events: true,
                uretprobe_syscall: true,
                cgroup_v1: false,
                cgroup_v2: true,
            },
            degraded: Vec::new(),
        },
        stacks,
        cpu: CpuSamples {
            period_ns: 250_000,
            user: 40,
            kernel: 10,
            rig_probes: 0,
        },
        uprobe_coverage: None,
        live_heap: None,
    }
}

#[test]
fn the_attribution_table_reads_per_request_at_each_call_site() {
    insta::assert_snapshot!(rig::report::table::render(&attribution(), 10));
}

fn ab_report() -> AbReport {
    let metric = |case: &str, metric: &str, unit, exact, a: &[f64], b: &[f64]| {
        let values = MetricValues {
            case: case.into(),
            metric: metric.into(),
            unit,
            lower_is_better: true,
            counter: exact,
            exact,
            control: false,
            values: vec![a.to_vec(), b.to_vec()],
        };
        let pairs: Vec<(f64, f64)> = a.iter().copied().zip(b.iter().copied()).collect();
        MetricComparison {
            vs_first: vec![rig::stats::compare(a, b, Some(&pairs), true, 1)],
            values,
        }
    };
    AbReport {
        schema_version: 1,
        arms: vec!["A".into(), "B".into()],
        rounds: 4,
        order: ["A", "B", "B", "A", "A", "B", "B", "A"]
            .map(String::from)
            .to_vec(),
        interrupted: false,
        measured: true,
        failed_runs: Vec::new(),
        equality: Some(EqualityReport {
            masks: vec!["date".into()],
            paths: vec!["/calib".into()],
            differences: vec![Vec::new()],
            responses: Vec::new(),
        }),
        code_differences: vec![CodeDifference {
            case: "http/h1/plain/r2000/16x1/ka".into(),
            sites: vec![(
                "malloc calls @ handle_request (server.c:120)".into(),
                vec![3.0, 2.0],
            )],
            varying_sites: 0,
        }],
        evidence: "outputs are byte-identical and 1 call site differs: the arms ran different code"
            .into(),
        metrics: vec![
            metric(
                "http/h1/plain/r2000/16x1/ka",
                "allocs/req",
                "",
                true,
                &[3.0, 3.0, 3.0, 3.0],
                &[2.0, 2.0, 2.0, 2.0],
            ),
            metric(
                "http/h1/plain/r2000/16x1/ka",
                "cpu_us_per_request",
                "µs",
                false,
                &[30.0, 31.0, 29.5, 30.5],
                &[28.0, 29.0, 27.5, 28.5],
            ),
        ],
        drift: Vec::new(),
        verdict: "B allocates less (allocs/req 3 → 2)".into(),
        case_keys: Default::default(),
    }
}

#[test]
fn the_ab_table_shows_each_metric_against_the_first_arm() {
    insta::assert_snapshot!(rig::ab::render(&ab_report()));
}

#[test]
fn the_ab_markdown_carries_the_same_comparisons() {
    insta::assert_snapshot!(rig::ab::markdown(&ab_report()));
}

fn gate_report() -> GateReport {
    let obs = |name: &str, v: &[f64]| Observed::new(name.into(), v.to_vec(), Tol::EXACT);
    let row = |counter: &str, baseline, now, limit: &str, verdict, note: &str| Row {
        counter: counter.into(),
        baseline,
        now,
        limit: Some(limit.into()),
        verdict,
        note: note.into(),
    };
    GateReport {
        baseline: "config/gates/calib.toml".into(),
        target: "config/targets/calib.toml".into(),
        binary: None,
        cases: vec![("http/calib/h1/work/c1x1/ka".into(), "h1 /work c1".into())],
        repeats: 3,
        requests: 1000,
        instructions: None,
        rare_events_per_req: None,
        observed: vec![
            obs("allocs/req", &[3.0, 3.0, 3.0]),
            obs("syscalls/req", &[2.0, 2.0, 2.0]),
            obs("page faults/req", &[0.01, 0.0, 0.02]),
        ],
        rows: vec![
            row(
                "allocs/req",
                Some(2.0),
                Some(3.0),
                "+0%",
                Verdict::SoftBreach,
                "3 > 2",
            ),
            row("syscalls/req", Some(2.0), Some(2.0), "+0%", Verdict::Ok, ""),
            row(
                "page faults/req",
                Some(0.0),
                Some(0.01),
                "+0%",
                Verdict::Skipped,
                "non-deterministic: spread 0.02/req",
            ),
        ],
        breaches: vec!["allocs/req: 3 > 2 (+0%)".into()],
    }
}

#[test]
fn the_gate_report_lists_every_counter_with_its_verdict() {
    insta::assert_snapshot!(rig::gate::render(&gate_report()));
}

#[test]
fn the_gate_junit_xml_has_a_test_case_per_counter_and_fails_the_breaches() {
    insta::assert_snapshot!(rig::gate::junit(&gate_report()));
}

#[test]
fn the_gate_markdown_summary_leads_with_the_verdict_and_the_breaches() {
    insta::assert_snapshot!(rig::gate::markdown(&gate_report()));
}

#[test]
fn the_gate_bencher_json_holds_the_deterministic_counters_of_the_case() {
    insta::assert_snapshot!(serde_json::to_string_pretty(&rig::gate::bmf(&gate_report())).unwrap());
}

#[test]
fn the_ab_bencher_json_holds_every_metric_per_arm() {
    insta::assert_snapshot!(
        serde_json::to_string_pretty(&rig::ab::export::bmf(&ab_report())).unwrap()
    );
}

fn launch_info() -> LaunchInfo {
    LaunchInfo {
        pid: 4242,
        port: 8080,
        ready_ms: 12.5,
        affinity: vec![1],
        proof: PortProof {
            port: 8080,
            inodes: vec![77],
            holders: vec![4242],
            via_descendant: false,
        },
        notes: Vec::new(),
        exe_sha256: "00".repeat(32),
        arm_proof: None,
        uid: Some(0),
        gid: Some(0),
    }
}

fn exit() -> ExitInfo {
    ExitInfo {
        code: None,
        signal: Some(15),
        exited_on_its_own: false,
        killed_after_grace: false,
        leftover: Vec::new(),
        cgroup_removed: true,
        cgroup: None,
        stderr_tail: String::new(),
    }
}

fn load_report(succeeded: u64, p50_us: u64, p99_us: u64) -> LoadReport {
    let latency = HistSummary {
        count: succeeded,
        min_ns: 40_000,
        mean_ns: (p50_us * 1000) as f64,
        p50_ns: p50_us * 1000,
        p90_ns: p99_us * 800,
        p99_ns: p99_us * 1000,
        p999_ns: p99_us * 1200,
        max_ns: p99_us * 1500,
    };
    LoadReport {
        mode: Mode::Open {
            rate: 2000.0,
            duration: std::time::Duration::from_secs(1),
        },
        elapsed_ns: 1_000_000_000,
        scheduled: succeeded,
        sent: succeeded,
        on_time: succeeded - 5,
        late: 5,
        expired: 0,
        generator_late: 0,
        succeeded,
        errors: BTreeMap::new(),
        not_sent: BTreeMap::new(),
        latency,
        request_latency: latency,
        dispatch_lag: HistSummary {
            count: succeeded,
            p50_ns: 1_200,
            p99_ns: 9_800,
            ..HistSummary::default()
        },
        queue_delay: HistSummary {
            count: 5,
            p50_ns: 31_000,
            p99_ns: 52_000,
            ..HistSummary::default()
        },
        histogram: EncodedHists::default(),
        handshakes: Handshakes::default(),
        client_cpu_ns: 20_000_000,
        client_spin_ns: 4_000_000,
        dispatch: rig::load::DispatchFacts::given(std::time::Duration::from_micros(60)),
        rps: succeeded as f64,
    }
}

#[test]
fn the_run_table_has_a_row_per_case_and_says_why_a_case_failed() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/demo.toml");
    let m = Matrix::load(std::path::Path::new(path)).unwrap();
    let cases = m.expand(&["http".into()], &["peer".into()], None).unwrap();
    let attribution = attribution();
    let ok = CaseResult {
        case: cases[0].clone(),
        status: Status::Ok,
        reasons: Vec::new(),
        warnings: Vec::new(),
        memory: None,
        memslope: None,
        recovery: None,
        soak: None,
        live: None,
        // 15 of 2000 sent late by the generator: under the 1% that makes a
        // case `limited`, so `ok`, with the number beside it (the page and
        // the terminal once called such a case ok and "generator saturated"
        // at once).
        clean: Some(CleanPass {
            launch: launch_info(),
            load: LoadReport {
                generator_late: 15,
                ..load_report(2000, 122, 242)
            },
            server: ServerUsage {
                cpu_us_per_request: Some(28.99),
                rss_max_kib: 5017,
                ..ServerUsage::default()
            },
            client_us_per_request: 10.0,
            generator_limited: None,
            generator_busy: 0.25,
            exit: exit(),
            series: Vec::new(),
        }),
        counted: Some(CountedPass {
            launch: launch_info(),
            load: load_report(1000, 100, 200),
            per_request: PerRequest::of(&attribution),
            attribution,
            exit: exit(),
        }),
        elapsed_ms: 2500,
        objects: None,
    };
    let mut failed = CaseResult::skipped(&cases[1], String::new());
    failed.status = Status::Failed;
    failed.reasons = vec!["clean pass: the target exited (status 1)".into()];
    insta::assert_snapshot!(rig::run::table::render(&[ok, failed]));
}

#[test]
fn a_case_is_generator_limited_above_one_percent_of_scheduled_requests_late() {
    let mut r = load_report(2000, 122, 242);
    r.generator_late = 20;
    assert!(!r.generator_limited(), "exactly 1% is not more than 1%");
    r.generator_late = 21;
    assert!(r.generator_limited());
    // Work CPU per request leaves the spin out: (20 − 4) ms / 2000.
    assert_eq!(r.client_us_per_request(), 8.0);
}
