use super::*;
use std::collections::BTreeMap;
use std::path::Path;

fn obs(name: &str, v: &[f64]) -> Observed {
    Observed::new(name.into(), v.to_vec(), Tol::EXACT)
}

fn measured(observed: Vec<Observed>) -> Measured {
    Measured {
        target: "t.toml".into(),
        binary: None,
        cases: vec![("http/t/h1/work/c1x1/ka".into(), "h1 /work c1".into())],
        instructions: None,
        observed,
    }
}

#[test]
fn names_are_checked() {
    assert!(check_counter_name("allocs/req").is_ok());
    assert!(check_counter_name("malloc calls @ f (a.c:3)").is_ok());
    assert!(check_counter_name("syscall sendto").is_ok());
    assert!(check_counter_name("memcpy/memmove bytes @ g (c.c:94)").is_ok());
    assert!(check_counter_name("memcpy/memmove/mempcpy calls @ g (c.c:94)").is_ok());
    let e = check_counter_name("alocs/req").unwrap_err();
    assert!(e.contains("did you mean `allocs/req`"), "{e}");
    assert!(check_counter_name("mallc calls @ f").is_err());
    // Every allocator layer's entry points name sites too.
    for kind in [
        "__rust_alloc",
        "__rust_dealloc",
        "_rjem_sdallocx",
        "je_mallocx",
        "mi_free",
        "tc_malloc",
        "PyObject_Malloc",
        "PyMem_RawFree",
    ] {
        assert!(
            check_counter_name(&format!("{kind} calls @ f (a.rs:3)")).is_ok(),
            "{kind}"
        );
        assert!(
            check_counter_name(&format!("{kind} bytes @ f")).is_ok(),
            "{kind}"
        );
    }
    assert!(check_counter_name("__rust_aloc calls @ f").is_err());
    // The probes a user names, as metrics::counters names them.
    for ok in [
        "usdt:postgresql:transaction__start calls/req",
        "func:ngx_http_core_run_phases calls/req",
        "usdt:rigfix:sized arg1 summed/req",
        "usdt:rigfix:sized arg1 summed @ sized_pair (userwork.c:54)",
        "func:userwork_step calls @ handle (userwork.c:92)",
        "h1 /u c1: func:userwork_step calls/req",
        "application arena_alloc calls @ handle (userwork.c:97)",
        "application __pool_alloc bytes @ stream_new",
        "python:calls calls/req",
        "python:calls calls @ make_item (server.py:30)",
    ] {
        assert!(check_counter_name(ok).is_ok(), "{ok}");
    }
    for bad in [
        "usdt: calls/req",
        "func:userwork_step cals/req",
        "usdt:rigfix:sized argx summed/req",
        "kprobe:f calls/req",
        "application  calls @ f",
        "arena_alloc calls @ f",
        "cobol:calls calls/req",
        "python:call calls/req",
    ] {
        assert!(check_counter_name(bad).is_err(), "{bad}");
    }
    assert!(may_be_negative("usdt:a:b arg0 summed @ f (a.c:1)"));
    assert!(!may_be_negative("allocs/req"));
    // Per call site and per stack.
    assert!(check_counter_name("syscall epoll_wait @ mio::poll::Poll::poll (poll.rs:439)").is_ok());
    assert!(check_counter_name("syscall recvfrom @ ngx_unix_recv").is_ok());
    assert!(check_counter_name("syscall recv from @ f").is_err());
    assert!(check_counter_name("malloc stack calls @ level5 (c.c:6) < level4 < level3").is_ok());
    assert!(check_counter_name("malloc stack bytes @ level5 (c.c:6) < level4 < level3").is_ok());
}

#[test]
fn compare_and_bless() {
    let text = r#"
target = "t.toml"
matrix = "m.toml"
suite = "work"
repeats = 3
requests = 10
probes = "alloc"
[counters."allocs/req"]
value = 3.0
soft_pct = 10.0
[counters."malloc calls @ f (a.c:1)"]
value = 1.0
"#;
    let b = Baseline::parse(Path::new("b.toml"), text).unwrap();
    let o = vec![
        obs("allocs/req", &[3.0, 3.0, 3.0]),
        obs("malloc calls @ f (a.c:9)", &[1.0, 1.0, 1.0]),
        obs("page faults/req", &[0.1, 0.2, 0.1]),
    ];
    let (rows, breaches) = compare(&b, &o);
    assert!(breaches.is_empty(), "{breaches:?}");
    assert!(rows.iter().any(|r| r.verdict == Verdict::New));
    let o2 = vec![obs("allocs/req", &[3.4, 3.4, 3.4])];
    let (_, breaches) = compare(&b, &o2);
    assert_eq!(breaches.len(), 1, "{breaches:?}");
    let (nb, _) = blessed(&b, &measured(o));
    assert_eq!(nb.counters["allocs/req"].soft_pct, 10.0);
    assert!(!nb.counters.contains_key("malloc calls @ f (a.c:1)"));
    assert!(!nb.counters.contains_key("page faults/req"));
    let again = Baseline::parse(Path::new("b.toml"), &nb.to_toml()).unwrap();
    assert_eq!(again.counters, nb.counters);
}

#[test]
fn case_keys_and_instruction_names() {
    assert_eq!(
        split_case("h1 /calib c1: allocs/req"),
        (Some("h1 /calib c1"), "allocs/req")
    );
    assert_eq!(split_case("allocs/req"), (None, "allocs/req"));
    assert_eq!(
        split_case("malloc calls @ f (a.c:3)"),
        (None, "malloc calls @ f (a.c:3)")
    );
    assert!(check_counter_name("h1 /work c1: malloc calls @ f (a.c:3)").is_ok());
    assert!(check_counter_name("instructions/req").is_ok());
    assert!(
        check_counter_name("h2c /plain c4x8: Ir @ hyper::proto::h1::role::parse_headers").is_ok()
    );
    assert!(check_counter_name("instructons/req")
        .unwrap_err()
        .contains("did you mean `instructions/req`"));
    // An instruction counter needs `instructions` set.
    let e = Baseline::parse(
        Path::new("b.toml"),
        "target=\"t\"\nmatrix=\"m\"\nsuite=\"s\"\nrepeats=2\nrequests=1\nprobes=\"alloc\"\n[counters.\"instructions/req\"]\nvalue=1.0\n",
    )
    .unwrap_err();
    assert!(
        format!("{e}").contains("add `instructions = \"auto\"`"),
        "{e}"
    );
}

/// Instruction counters are judged with the baseline's tolerance
/// (0.1% by default), the others exactly.
#[test]
fn instruction_counters_use_the_stated_tolerance() {
    let text = "target=\"t\"\nmatrix=\"m\"\nsuite=\"s\"\nrepeats=2\nrequests=1\nprobes=\"alloc\"\n\
                instructions=\"auto\"\n[counters.\"instructions/req\"]\nvalue=10000.0\n\
                [counters.\"allocs/req\"]\nvalue=3.0\n";
    let b = Baseline::parse(Path::new("b.toml"), text).unwrap();
    let ins = |v: &[f64]| {
        Observed::new(
            "instructions/req".into(),
            v.to_vec(),
            b.tol("instructions/req", None),
        )
    };
    // 0.05% apart: deterministic, and within the comparison's resolution.
    let o = vec![ins(&[10005.0, 10000.0]), obs("allocs/req", &[3.0, 3.0])];
    assert!(o[0].deterministic);
    let (_, breaches) = compare(&b, &o);
    assert!(breaches.is_empty(), "{breaches:?}");
    // 0.2% apart: not deterministic, skipped and said so.
    let o = vec![ins(&[10020.0, 10000.0])];
    assert!(!o[0].deterministic);
    let (rows, _) = compare(&b, &o);
    assert!(rows[1].note.starts_with("non-deterministic"), "{rows:?}");
    // 0.2% more in every window: a breach.
    let o = vec![ins(&[10020.0, 10020.0]), obs("allocs/req", &[3.0, 3.0])];
    let (_, breaches) = compare(&b, &o);
    assert_eq!(breaches.len(), 1, "{breaches:?}");
    assert!(breaches[0].contains("instructions/req: 10020.000/req > 10000.000"));
    // The eBPF counters stay exact.
    let o = vec![obs("allocs/req", &[3.001, 3.001])];
    assert_eq!(compare(&b, &o).1.len(), 1);
}

/// `rare_events_per_req` makes near-integer event counts comparable;
/// bytes stay exact, and a change on every request still breaches.
#[test]
fn counters_listed_as_exact_get_no_rare_events_tolerance() {
    let text =
        "target=\"t\"\nmatrix=\"m\"\nsuite=\"s\"\nrepeats=3\nrequests=1\nprobes=\"syscalls\"\n\
                rare_events_per_req=0.1\nexact = [\"syscall recvfrom @*\"]\n";
    let b = Baseline::parse(Path::new("b.toml"), text).unwrap();
    assert_eq!(
        b.tol("syscall recvfrom @ mio::…::TcpStream::read", None)
            .abs,
        0.0
    );
    assert_eq!(b.tol("h1 /plain c1: syscall recvfrom @ f", None).abs, 0.0);
    assert_eq!(
        b.tol("syscall epoll_wait @ mio::poll::Poll::poll", None)
            .abs,
        0.1
    );
    assert!(b.to_toml().contains("exact = [\"syscall recvfrom @*\"]"));
}

#[test]
fn rare_events_tolerance_applies_to_event_counts_only() {
    let text = "target=\"t\"\nmatrix=\"m\"\nsuite=\"s\"\nrepeats=3\nrequests=1\nprobes=\"alloc\"\n\
                rare_events_per_req=0.01\n[counters.\"allocs/req\"]\nvalue=4.003\n";
    let b = Baseline::parse(Path::new("b.toml"), text).unwrap();
    let o = |n: &str, v: &[f64]| Observed::new(n.into(), v.to_vec(), b.tol(n, None));
    assert!(o("allocs/req", &[4.003, 4.002, 4.003]).deterministic);
    assert!(o("malloc calls @ f (a.rs:1)", &[3.003, 3.002, 3.001]).deterministic);
    // Bytes without an events counter are exact; with one, they get
    // 0.01 events' worth (here about 2220 B per allocation: 22.2 B).
    assert!(!o("alloc bytes/req", &[8888.087, 8887.9, 8888.087]).deterministic);
    let runs: Vec<BTreeMap<String, f64>> = [(4.003, 8888.087), (4.002, 8885.9), (4.004, 8890.0)]
        .iter()
        .map(|(n, by)| {
            BTreeMap::from([
                ("allocs/req".to_string(), *n),
                ("alloc bytes/req".to_string(), *by),
            ])
        })
        .collect();
    let seen = observe(&runs, &b);
    let bytes = seen.iter().find(|o| o.name == "alloc bytes/req").unwrap();
    assert!(bytes.deterministic, "{bytes:?}");
    let most = [8888.087 / 4.003, 8885.9 / 4.002, 8890.0 / 4.004]
        .into_iter()
        .fold(0.0, f64::max);
    assert!((bytes.tol.abs - 0.01 * most).abs() < 1e-9, "{bytes:?}");
    assert!(!o("allocs/req", &[4.003, 4.05, 4.003]).deterministic);
    let (_, breaches) = compare(&b, &[o("allocs/req", &[4.005, 4.004, 4.005])]);
    assert!(breaches.is_empty(), "{breaches:?}");
    let (_, breaches) = compare(&b, &[o("allocs/req", &[5.002, 5.003, 5.002])]);
    assert_eq!(breaches.len(), 1, "{breaches:?}");
    let e = Baseline::parse(Path::new("b.toml"), &text.replace("0.01", "0.5")).unwrap_err();
    assert!(format!("{e}").contains("rare_events_per_req = 0.5"), "{e}");
}

#[test]
fn unknown_keys_are_errors() {
    let e = Baseline::parse(
        Path::new("b.toml"),
        "target=\"t\"\nmatrix=\"m\"\nsuite=\"s\"\nrepeats=3\nrequests=1\nprobes=\"alloc\"\nrepeat=2\n",
    )
    .unwrap_err();
    assert!(format!("{e}").contains("unknown field `repeat`"), "{e}");
}
