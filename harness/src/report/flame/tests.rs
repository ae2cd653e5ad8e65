use std::collections::BTreeMap;

use super::input::{CpuPart, Recorded, Row, Stack, Stacks, WindowPart};
use super::*;
use crate::symbolize::InlinedFrame;

pub const N: u64 = 500;

pub fn site(module: &str, addr: u64, function: &str, line: Option<u32>) -> Site {
    Site {
        addr,
        module: Some(module.to_string()),
        module_offset: addr - 0x1000,
        build_id: Some("ab12cd".to_string()),
        function: Some(function.to_string()),
        function_offset: 4,
        file: line.map(|_| "/src/app.c".to_string()),
        line,
        inlined: Vec::new(),
        naming: Naming::Symbol,
    }
}

fn row(family: Family, event: &str, count: u64, amount: u64, stack: &str) -> Row {
    Row {
        family,
        event: event.to_string(),
        size_class: (family == Family::Alloc && !event.starts_with("free")).then_some(5),
        pid: 7,
        count,
        amount,
        stack: Some(stack.to_string()),
        kernel_stack: None,
        inner: false,
        rig_probes: false,
    }
}

/// Two allocating stacks (one through an inlined helper and operator
/// new, whose inner malloc must not count twice) and a free.
pub fn alloc_recorded() -> Recorded {
    let libc = "/lib/libc.so.6";
    let app = "/srv/app";
    let mut parse = site(app, 0x1300, "parse", Some(30));
    parse.inlined = vec![InlinedFrame {
        function: "inlined_helper".into(),
        file: Some("/src/app.h".into()),
        line: Some(5),
    }];
    let stacks = BTreeMap::from([
        (
            "a".to_string(),
            Stack {
                frames: vec![
                    site(libc, 0x5000, "malloc", None),
                    site(app, 0x1200, "build_reply", Some(20)),
                    site(app, 0x1100, "serve", Some(10)),
                    site(app, 0x1010, "main", Some(3)),
                ],
                user_site: 1,
                incomplete: vec![],
            },
        ),
        (
            "b".to_string(),
            Stack {
                frames: vec![
                    site(libc, 0x5000, "malloc", None),
                    site(
                        "/lib/libstdc++.so.6",
                        0x9000,
                        "operator new(unsigned long)",
                        None,
                    ),
                    parse.clone(),
                    site(app, 0x1108, "serve", Some(11)),
                    site(app, 0x1010, "main", Some(3)),
                ],
                user_site: 2,
                incomplete: vec![],
            },
        ),
        (
            "c".to_string(),
            Stack {
                frames: vec![
                    site(
                        "/lib/libstdc++.so.6",
                        0x9000,
                        "operator new(unsigned long)",
                        None,
                    ),
                    parse,
                    site(app, 0x1108, "serve", Some(11)),
                    site(app, 0x1010, "main", Some(3)),
                ],
                user_site: 1,
                incomplete: vec![],
            },
        ),
    ]);
    let mut inner = row(Family::Alloc, "malloc", N, 100 * N, "b");
    inner.inner = true;
    Recorded {
        pid: 7,
        command: "app".into(),
        families: vec![Family::Alloc],
        window: WindowPart {
            elapsed_ns: 1_000_000,
            requests: Some(N),
        },
        stacks: Stacks {
            enabled: true,
            stacks,
            kernel: BTreeMap::new(),
            rows: vec![
                row(Family::Alloc, "malloc", 3 * N, 72 * N, "a"),
                row(Family::Alloc, "free", 3 * N, 0, "a"),
                inner,
                row(Family::Alloc, "operator new", N, 100 * N, "c"),
            ],
            incomplete_events: BTreeMap::new(),
            stack_failures: BTreeMap::new(),
        },
        cpu: CpuPart::default(),
    }
}

pub fn alloc_profile() -> Profile {
    profile(&alloc_recorded(), Family::Alloc, "case-x").unwrap()
}

pub fn syscall_profile() -> Profile {
    let app = "/srv/app";
    let mut r = alloc_recorded();
    r.families = vec![Family::Syscalls];
    r.stacks.stacks.insert(
        "s".into(),
        Stack {
            frames: vec![
                site("/lib/libc.so.6", 0x6000, "syscall", None),
                site(app, 0x1400, "<[u8; 4] as Tr>::f", Some(40)),
                site(app, 0x1010, "main", Some(3)),
            ],
            user_site: 1,
            incomplete: vec![],
        },
    );
    r.stacks.kernel.insert(
        "syscalls:3".into(),
        vec!["do_syscall_64+0x5c".into(), "entry_SYSCALL_64+0x76".into()],
    );
    let mut s = row(Family::Syscalls, "getppid", 3 * N, 0, "s");
    s.kernel_stack = Some("syscalls:3".into());
    r.stacks.rows = vec![s];
    profile(&r, Family::Syscalls, "case-x").unwrap()
}

#[test]
fn a_timed_graph_below_a_nanosecond_per_request_is_shown_per_more_requests() {
    // One 20 µs wait over 100,000 requests rounds to 0 ns/req: a graph
    // of nothing, which once aborted the run that drew it.
    let s = Scale::choose(Some(100_000), Unit::Nanoseconds, [20_000u64, 3_000]);
    assert_eq!((s.per, s.value(20_000), s.value(3_000)), (10, 2, 0));
    assert_eq!(s.unit_text("wait ns"), "wait ns per 10 requests");
    assert_eq!(
        Scale::choose(Some(1000), Unit::Nanoseconds, [5_000u64]).per,
        1
    );
    let tiny = Scale::choose(Some(10_000_000), Unit::Nanoseconds, [1u64]);
    assert_eq!((tiny.per, tiny.value(1)), (10_000_000, 1));
}

#[test]
fn frees_and_inner_allocations_are_not_allocations() {
    let p = profile(&alloc_recorded(), Family::Alloc, "x").unwrap();
    let events: Vec<(&str, &[u64])> = p
        .samples
        .iter()
        .map(|s| (s.event.as_str(), s.values.as_slice()))
        .collect();
    assert_eq!(
        events,
        vec![
            ("malloc", &[3 * N, 72 * N][..]),
            ("operator new", &[N, 100 * N][..])
        ]
    );
    assert_eq!((p.total(0), p.total(1)), (4 * N, 172 * N));
}

#[test]
fn a_live_attribution_is_read_through_its_json() {
    // The JSON rig writes for a Site reads back as the same Site.
    let s = site("/srv/app", 0x1200, "build_reply", Some(20));
    let back: Site = serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
    assert_eq!(back, s);
}

#[test]
fn graph_names_are_unique_and_the_first_of_each_family_is_its_name() {
    let names = graph_names();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), names.len());
    for f in Family::ALL {
        assert_eq!(measures(f)[0].graph, f.name());
        assert_eq!(graph(f.name()), Some((f, 0)));
    }
    assert_eq!(graph("alloc_bytes"), Some((Family::Alloc, 1)));
}

#[test]
fn top_sites_are_user_sites_per_request() {
    let t = sites::top(&alloc_recorded(), 3);
    assert_eq!(t.len(), 1);
    let got: Vec<(String, f64)> = t[0]
        .sites
        .iter()
        .map(|s| (s.site.clone(), s.value))
        .collect();
    assert_eq!(
        got,
        vec![
            ("build_reply (app.c:20)".to_string(), 3.0),
            ("parse (app.c:30)".to_string(), 1.0),
        ]
    );
    assert_eq!(
        sites::render(&t),
        "  alloc     allocations per request: 3 build_reply (app.c:20) · 1 parse (app.c:30)\n"
    );
}

/// CPU samples of a probed server land in rig's own uprobe handling (the
/// single-stepped instruction in `[uprobes]`): one labelled site apart
/// from the server's, never its hottest code.
#[test]
fn samples_in_rigs_probe_handling_are_one_site_of_their_own() {
    let mut r = alloc_recorded();
    r.families = vec![Family::Cpu];
    r.stacks.stacks.insert(
        "u".to_string(),
        Stack {
            frames: vec![
                site("[uprobes]", 0x1084, "?", None),
                site("/srv/app", 0x1200, "build_reply", Some(20)),
            ],
            user_site: 0,
            incomplete: vec![],
        },
    );
    // Cpu rows: a sample count and its CPU ns.
    let mut probes = row(Family::Cpu, "on-CPU", 5 * N, 5 * N * 250_000, "u");
    probes.rig_probes = true;
    r.stacks.rows = vec![probes, row(Family::Cpu, "on-CPU", N, N * 250_000, "a")];
    let t = sites::top(&r, 3);
    let got: Vec<String> = t[0].sites.iter().map(|s| s.site.clone()).collect();
    assert_eq!(got, ["[rig's probes]", "build_reply (app.c:20)"]);
    let p = profile(&r, Family::Cpu, "case-x").unwrap();
    let roots: Vec<String> = p
        .samples
        .iter()
        .map(|s| s.locs.last().unwrap().lines[0].function.clone())
        .collect();
    assert!(roots.contains(&"[rig's probes]".to_string()), "{roots:?}");
}
