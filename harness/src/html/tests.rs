//! The page from a hand-made output directory: what it holds, exactly.

use serde_json::json;

use super::*;
use crate::load::hist;

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn site(function: &str, line: u32) -> Value {
    json!({"addr": 4096, "module": "/usr/bin/calib", "module_offset": 16, "build_id": null,
           "function": function, "function_offset": 0, "file": "/src/calib.c", "line": line,
           "inlined": [], "naming": "symbol"})
}

fn http_case(id: &str, conns: u64) -> Value {
    let mut h = hist::new_hist();
    for v in 1..=1000u64 {
        h.record(v * 1000).unwrap();
    }
    let enc = hist::encode(&h);
    let empty = hist::encode(&hist::new_hist());
    json!({
        "id": id, "suite": "calib", "kind": "http", "target": 0, "target_name": "calib",
        "repeat": 1, "protocol": "h1", "path": "/calib", "load": {"kind": "closed"},
        "topology": {"connections": conns, "streams": 1}, "keepalive": true, "status": "ok",
        "reasons": [],
        "clean": {
            "load": {"succeeded": 1000, "errors": {}, "rps": 2500.0, "scheduled": 1000, "on_time": 990, "late": 10, "generator_late": 0,
                     "queue_delay": {"p50_ns": 12000, "p99_ns": 95000},
                     "expired": 0,
                     "latency": {"p50_ns": 500_000, "p99_ns": 990_000, "p999_ns": 999_000},
                     "histogram": {"latency": enc, "request_latency": enc, "dispatch_lag": empty}},
            "server": {"cpu_us_per_request": 28.5, "rss_max_kib": 5017},
            "client_us_per_request": 10.0, "generator_limited": null, "generator_busy": 0.1,
            "series": [
                {"t_ms": 0, "cpu_ns": 0, "rss_kib": 1024, "pss_kib": 512},
                {"t_ms": 50, "cpu_ns": 25_000_000, "rss_kib": 2048, "pss_kib": 1024}],
        },
        "counted": {
            "load": {"succeeded": 1000},
            "per_request": {"allocations": 8.0, "alloc_bytes": 6004.0, "syscalls": 9.0,
                            "locks": null},
            "attribution": {
                "complete": true, "window": {"requests": 1000},
                "processes": [{"pid": 1}],
                "stacks": {
                    "enabled": true,
                    "stacks": {
                        "00000000000000aa": {"frames": [site("malloc", 1), site("Vec<u8>::push", 42)], "user_site": 1, "incomplete": []},
                        "00000000000000bb": {"frames": [site("calib_alloc_2", 7)], "user_site": 0, "incomplete": []},
                    },
                    "kernel": {},
                    "rows": [
                        {"family": "alloc", "event": "malloc", "count": 3000, "amount": 96000, "stack": "00000000000000aa", "kernel_stack": null, "inner": false, "pid": 1},
                        {"family": "alloc", "event": "malloc", "count": 5000, "amount": 5908000, "stack": "00000000000000bb", "kernel_stack": null, "inner": false, "pid": 1},
                        {"family": "alloc", "event": "malloc", "count": 7000, "amount": 7000, "stack": "00000000000000bb", "kernel_stack": null, "inner": true, "pid": 1},
                        {"family": "alloc", "event": "free", "count": 7000, "amount": 0, "stack": "00000000000000bb", "kernel_stack": null, "inner": false, "pid": 1},
                    ],
                },
            },
        },
    })
}

fn out_dir(name: &str, cases: &[Value]) -> Dir {
    let d = std::env::temp_dir().join(format!("rig-html-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let lines: String = cases.iter().map(|c| format!("{c}\n")).collect();
    std::fs::write(d.join("cases.jsonl"), lines + "{\"id\": \"cut sh").unwrap();
    std::fs::write(
        d.join("manifest.json"),
        json!({"rig_version": "9.9", "argv": ["rig", "run"], "host": {"cpu_model": "x"}})
            .to_string(),
    )
    .unwrap();
    std::fs::write(
        d.join("report.json"),
        json!({"complete": true, "interrupted": false, "ok": 2, "failed": 0, "skipped": 0})
            .to_string(),
    )
    .unwrap();
    Dir(d)
}

#[test]
fn the_page_holds_every_case_its_plots_sites_and_flamegraphs() {
    let a = "calib/calib/h1/calib/closed/1x1/ka/#1";
    let b = "calib/calib/h1/calib/closed/4x1/ka/#1";
    let d = out_dir("page", &[http_case(a, 1), http_case(b, 4)]);
    let flame = d.0.join("flame").join(crate::scenario::slug(a));
    std::fs::create_dir_all(&flame).unwrap();
    let svg = r#"<svg xmlns="http://www.w3.org/2000/svg" width="1200" height="150"><g><title>calib_alloc_2 (8 per request)</title></g></svg>"#;
    std::fs::write(flame.join("alloc.svg"), svg).unwrap();
    std::fs::write(flame.join("copy.svg"), svg).unwrap();

    let path = write(&d.0).unwrap();
    assert_eq!(path, d.0.join("report.html"));
    let html = std::fs::read_to_string(&path).unwrap();
    // The clean pass's ledger: the queued (late) requests and how long
    // they waited, never "dropped".
    assert!(
        html.contains("of 1000 scheduled, 990 sent on time and <b>10 late</b> (queued for a free connection: p50 12 µs, p99 95 µs"),
        "the ledger is on the page"
    );
    assert!(!html.contains("dropped"));
    // A matrix row per case, with its filters' data.
    for id in [a, b] {
        assert!(
            html.contains(&format!(
                "<tr class=\"case-row status-ok\" data-case=\"{id}\" data-suite=\"calib\" data-protocol=\"h1\" data-target=\"calib\">"
            )),
            "{id}"
        );
    }
    assert!(html.contains(r#"<td class="n" data-sort="8.0">8</td>"#));
    // A latency and a memory chart per case; no dispatch lag in closed loop.
    for id in [a, b] {
        let slug = crate::scenario::slug(id);
        assert!(html.contains(&format!(
            "<figure class=\"chart latency\" data-chart=\"latency-{slug}\" data-case=\"{id}\">"
        )));
        assert!(html.contains(&format!("\"memory-{slug}\":")));
    }
    assert_eq!(html.matches("no dispatch lag recorded").count(), 2);
    // Top user sites per request: 5 at calib_alloc_2 (the inner 7 left out),
    // 3 at the first frame outside malloc, its name escaped.
    assert!(
        html.contains(
            "<td>calib_alloc_2 (calib.c:7)</td><td class=\"n\">5</td><td class=\"n\">5908</td>"
        ),
        "{html}"
    );
    assert!(html.contains(
        "<td>Vec&lt;u8&gt;::push (calib.c:42)</td><td class=\"n\">3</td><td class=\"n\">96</td>"
    ));
    assert!(html.contains("alloc: 8 events/req, 6004 bytes/req at 2 user sites"));
    assert!(html.contains("frees: 7 events/req at 1 user site<"));
    // The flamegraphs of case a, switchable; none recorded for case b.
    let b64 = base64::engine::general_purpose::STANDARD;
    use base64::Engine;
    let src = format!("data:image/svg+xml;base64,{}", b64.encode(svg));
    assert_eq!(html.matches(&src).count(), 2);
    assert!(html.contains(r#"<iframe class="flame" data-family="alloc" title="flamegraph: alloc" style="height: 150px""#));
    assert!(html.contains(r#"<button type="button" class="tab" data-family="copy">copy</button>"#));
    assert_eq!(html.matches("no flamegraph recorded").count(), 1);
    // The two cases differ in connections only: one sweep.
    assert!(html.contains("calib · calib · h1 /calib · keep-alive against connections"));
    // Self-contained: nothing is loaded from anywhere.
    for bad in ["http://", "https://", "src=\"/", "<link"] {
        let hits: Vec<_> = html.match_indices(bad).collect();
        assert!(
            hits.iter().all(|(i, _)| html[..*i].ends_with("xmlns=\"")
                || html[*i..].starts_with("http://www.w3.org/")),
            "{bad} in the page"
        );
    }
}

/// A process of a tree as the counted pass records it
/// (`report::ProcessRow`): its role, how it joined (`root`, `at_attach`,
/// `forked`) and its own counts.
fn process(pid: u32, ppid: u32, role: &str, joined: &str, counts: [u64; 6]) -> Value {
    let [syscalls, allocations, copy_bytes, faults, voluntary, off_cpu_ns] = counts;
    json!({
        "pid": pid, "ppid": ppid, "role": role, "command": format!("nginx: {role}"),
        "root": joined == "root", "joined": {"how": joined}, "error": null,
        "syscalls": syscalls,
        "alloc": {"allocations": allocations, "bytes": 24 * allocations,
                  "frees": allocations, "null_frees": 0},
        "copy_calls": copy_bytes / 256, "copy_bytes": copy_bytes, "lock_acquisitions": 0,
        "faults": faults, "voluntary_switches": voluntary, "involuntary_switches": 1,
        "off_cpu_ns": off_cpu_ns,
    })
}

/// The `<table class="procs">` of the page, if it has one.
fn procs_table(html: &str) -> Option<&str> {
    let start = html.find("<table class=\"procs\">")?;
    let end = start + html[start..].find("</table>").unwrap();
    Some(&html[start..end])
}

#[test]
fn a_tree_of_processes_gets_its_process_table_and_a_single_process_none() {
    let tree = "tree/nginx/h1/plain/closed/2x1/ka/#1";
    let single = "tree/nginx/h1/plain/closed/1x1/ka/#1";
    let mut t = http_case(tree, 2);
    t["counted"]["attribution"]["processes"] = json!([
        process(
            4200,
            1,
            "master process",
            "root",
            [12, 3, 0, 2, 4, 1_500_000]
        ),
        process(
            4201,
            4200,
            "worker process",
            "at_attach",
            [4507, 4000, 96_000, 7, 510, 42_000_000]
        ),
        process(
            4202,
            4200,
            "worker process",
            "forked",
            [4491, 4002, 95_744, 9, 498, 41_000_000]
        ),
    ]);
    let mut s = http_case(single, 1);
    s["counted"]["attribution"]["processes"] = json!([process(
        4300,
        1,
        "nginx",
        "root",
        [9000, 8000, 0, 1, 1000, 5]
    )]);

    let d = out_dir("procs", &[t]);
    let html = render(&Inputs::read(&d.0).unwrap()).unwrap();
    let table = procs_table(&html).expect("a process table for a tree of 3");
    assert!(
        table.contains("<caption>process tree (3 processes)</caption>"),
        "{table}"
    );
    // pid, ppid, role, how it joined, syscalls, allocations, copy bytes,
    // faults, voluntary switches, off-CPU ns: each process's own counts.
    for row in [
        "<tr><td class=\"n\">4200</td><td class=\"n\">1</td><td>master process</td><td>root</td><td class=\"n\">12</td><td class=\"n\">3</td><td class=\"n\">0</td><td class=\"n\">2</td><td class=\"n\">4</td><td class=\"n\">1500000</td></tr>",
        "<tr><td class=\"n\">4201</td><td class=\"n\">4200</td><td>worker process</td><td>at_attach</td><td class=\"n\">4507</td><td class=\"n\">4000</td><td class=\"n\">96000</td><td class=\"n\">7</td><td class=\"n\">510</td><td class=\"n\">42000000</td></tr>",
        "<tr><td class=\"n\">4202</td><td class=\"n\">4200</td><td>worker process</td><td>forked</td><td class=\"n\">4491</td><td class=\"n\">4002</td><td class=\"n\">95744</td><td class=\"n\">9</td><td class=\"n\">498</td><td class=\"n\">41000000</td></tr>",
    ] {
        assert!(table.contains(row), "{row}\nnot in\n{table}");
    }
    assert_eq!(table.matches("<tr><td").count(), 3, "{table}");

    let d = out_dir("proc1", &[s]);
    let html = render(&Inputs::read(&d.0).unwrap()).unwrap();
    // The case and its counted pass are on the page, only the table not.
    assert!(html.contains(&format!(
        "<article class=\"case status-ok\" id=\"case-{}\"",
        crate::scenario::slug(single)
    )));
    assert!(html.contains("<h4>counted pass: 1000 requests</h4>"));
    assert_eq!(procs_table(&html), None, "no process table for one process");
    assert!(!html.contains("process tree ("));
}

#[test]
fn a_directory_without_cases_is_refused_by_name() {
    let d = std::env::temp_dir().join(format!("rig-html-none-{}", std::process::id()));
    let err = write(&d).unwrap_err().to_string();
    assert!(err.contains("no cases.jsonl"), "{err}");
}

#[test]
fn a_lock_sites_events_are_its_acquisitions_and_its_amount_the_wait() {
    // Per request: 2 locks and 2 unlocks at one site, one contended wait of
    // 3000 ns there. The page says 2 acquisitions and 3000 wait ns, as the
    // terminal and the flamegraphs do, not 5 "events".
    let counted = json!({
        "load": {"succeeded": 10},
        "attribution": {"window": {"requests": 10}, "stacks": {
            "stacks": {"00000000000000cc": {"frames": [site("pthread_mutex_lock", 1), site("calib_lock", 208)], "user_site": 1, "incomplete": []}},
            "kernel": {},
            "rows": [
                {"family": "locks", "event": "lock", "count": 20, "amount": 0, "stack": "00000000000000cc", "kernel_stack": null, "inner": false, "pid": 1},
                {"family": "locks", "event": "unlock", "count": 20, "amount": 0, "stack": "00000000000000cc", "kernel_stack": null, "inner": false, "pid": 1},
                {"family": "locks", "event": "contended (futex wait)", "count": 10, "amount": 30000, "stack": "00000000000000cc", "kernel_stack": null, "inner": false, "pid": 1},
            ]}},
    });
    let st: lite::Stacks =
        serde_json::from_value(counted["attribution"]["stacks"].clone()).unwrap();
    let t = cases::top_sites(10, &st, 3);
    assert_eq!(t.len(), 1, "{t:?}");
    assert_eq!(t[0]["family"], "locks");
    assert_eq!(t[0]["unit"], "wait ns");
    assert_eq!(
        t[0]["rows"],
        json!([{"site": "calib_lock (calib.c:208)", "events": "2", "amount": "3000"}])
    );
}

#[test]
fn an_application_allocators_calls_are_a_group_of_their_own_beside_the_heaps() {
    // Per request: 1 malloc of 100 B and 5 pool allocations of 496 B and 1
    // pool free at one site. The heap's group holds the malloc alone, as
    // the terminal's totals do; the pool's calls are their own group.
    let counted = json!({
        "attribution": {"window": {"requests": 10}, "stacks": {
            "stacks": {"00000000000000dd": {"frames": [site("arena_alloc", 1), site("handle", 97)], "user_site": 1, "incomplete": []}},
            "kernel": {},
            "rows": [
                {"family": "alloc", "event": "malloc", "count": 10, "amount": 1000, "stack": "00000000000000dd", "kernel_stack": null, "inner": false, "pid": 1},
                {"family": "alloc", "event": "arena_alloc", "count": 50, "amount": 4960, "stack": "00000000000000dd", "kernel_stack": null, "inner": false, "pid": 1, "beside_the_heap": true},
                {"family": "alloc", "event": "arena_reset", "count": 10, "amount": 0, "stack": "00000000000000dd", "kernel_stack": null, "inner": false, "pid": 1, "beside_the_heap": true, "free": true},
            ]}},
    });
    let st: lite::Stacks =
        serde_json::from_value(counted["attribution"]["stacks"].clone()).unwrap();
    let t = cases::top_sites(10, &st, 3);
    let group = |fam: &str| {
        t.iter()
            .find(|g| g["family"] == fam)
            .unwrap_or_else(|| panic!("{fam}: {t:?}"))
    };
    assert_eq!(group("alloc")["total_events"], "1");
    assert_eq!(group("alloc")["total_amount"], "100");
    assert_eq!(group("application allocator")["total_events"], "5");
    assert_eq!(group("application allocator")["total_amount"], "496");
    assert_eq!(group("application frees")["total_events"], "1");
}

#[test]
fn what_a_window_did_not_count_is_said_under_its_counted_pass_by_family() {
    let heap = "the Java heap: objects Java code makes are not counted; \
                started with -XX:+DTraceAllocProbes <...> (/x/libjvm.so)";
    let mut c = http_case("calib/calib/h1/calib/closed/1x1/ka/#1", 1);
    c["counted"]["attribution"]["complete"] = json!(false);
    c["counted"]["attribution"]["losses"] = json!({"alloc": [[heap, 1]], "copy": [["x", 3]]});
    let d = out_dir("losses", &[c]);
    let html = std::fs::read_to_string(write(&d.0).unwrap()).unwrap();
    assert!(html.contains("counted pass: 1000 requests <b class=\"bad\">incomplete</b>"));
    assert!(
        html.contains(
            "<li><b class=\"bad\">alloc incomplete:</b> the Java heap: objects Java code makes \
             are not counted; started with -XX:+DTraceAllocProbes &lt;...&gt; (/x/libjvm.so)</li>"
        ),
        "{html}"
    );
    assert!(html.contains("<li><b class=\"bad\">copy incomplete:</b> x [3]</li>"));
}

#[test]
fn a_probe_counted_by_a_string_argument_gets_a_table_of_its_values() {
    let mut c = http_case("calib/calib/h1/calib/closed/1x1/ka/#1", 1);
    c["counted"]["attribution"]["user"] = json!([{
        "probe": "usdt:hotspot:object__alloc", "calls": 171000, "probed_at": ["libjvm.so+0x1"],
        "sites": [], "by": {"arg": 1, "len": 2},
        "by_value": [
            {"value": "[B", "calls": 32500},
            {"value": "Server$Item", "calls": 7000, "sites": [
                {"site": {"function": "int Server.work()", "module": null}, "calls": 7000},
            ]},
        ],
    }]);
    let d = out_dir("by-value", &[c]);
    let html = std::fs::read_to_string(write(&d.0).unwrap()).unwrap();
    assert!(
        html.contains("<caption>usdt:hotspot:object__alloc by argument 1: 2 values</caption>"),
        "{html}"
    );
    assert!(
        html.contains("<tr><td>[B</td><td class=\"n\">32.5</td><td></td></tr>"),
        "{html}"
    );
    assert!(html
        .contains("<tr><td>Server$Item</td><td class=\"n\">7</td><td>int Server.work()</td></tr>"));
}

#[test]
fn the_run_summary_counts_the_cases_the_generator_limited() {
    let d = out_dir(
        "limited",
        &[http_case("calib/calib/h1/calib/closed/1x1/ka/#1", 1)],
    );
    std::fs::write(
        d.0.join("report.json"),
        json!({"complete": true, "interrupted": false, "ok": 2, "limited": 1, "failed": 0, "skipped": 0})
            .to_string(),
    )
    .unwrap();
    let html = std::fs::read_to_string(write(&d.0).unwrap()).unwrap();
    assert!(
        html.contains("2 ok · 1 limited by the generator · 0 failed"),
        "{html}"
    );
}

#[test]
fn an_open_loop_case_gets_its_dispatch_lag_plot_beside_its_latency() {
    let id = "calib/calib/h1/calib/r1000/1x1/ka/#1";
    let mut c = http_case(id, 1);
    let mut lag = hist::new_hist();
    for v in 1..=100u64 {
        lag.record(v * 1_000).unwrap();
    }
    c["load"] = json!({"kind": "open", "rate": 1000.0});
    c["clean"]["load"]["histogram"]["dispatch_lag"] = json!(hist::encode(&lag));
    let d = out_dir("lag", &[c]);
    let html = std::fs::read_to_string(write(&d.0).unwrap()).unwrap();
    let slug = crate::scenario::slug(id);
    assert!(
        html.contains(&format!(
            "<figure class=\"chart lag\" data-chart=\"lag-{slug}\" data-case=\"{id}\">"
        )),
        "{html}"
    );
    assert!(html.contains(&format!("\"lag-{slug}\":")));
    assert!(!html.contains("no dispatch lag recorded"));
}

#[test]
fn a_memslope_case_draws_memory_against_connections_with_its_fitted_line() {
    let id = "memslope/conn/h1/c0-64-128/#1";
    let pt = |n: u64, rss: u64| json!({"connections": n, "rss_bytes": rss, "pss_bytes": rss, "cgroup_bytes": null, "fds": 7 + n, "threads": 1});
    let c = json!({
        "id": id, "suite": "memslope", "kind": "memslope", "target": 0, "target_name": "conn",
        "repeat": 1, "protocol": "h1", "path": "/", "connections": [0, 64, 128],
        "status": "ok", "reasons": [],
        "memslope": {
            "opened": [pt(0, 1 << 20), pt(64, (1 << 20) + 64 * 65552), pt(128, (1 << 20) + 128 * 65552)],
            "closed": [pt(64, (1 << 20) + 64 * 65552), pt(0, 1 << 20)],
            "rss": {"slope": 65552.0, "intercept": 1048576.0, "r2": 1.0, "residuals": [0.0, 0.0, 0.0]},
            "live_heap": {
                "opened": [], "after_close": {"connections": 0, "bytes": 4096, "blocks": 1},
                "fit": {"slope": 65536.0, "intercept": 0.0, "r2": 1.0, "residuals": [0.0, 0.0, 0.0]},
                "sites": [{
                    "label": "conn_open+0x1e (conn_server.c:89)", "kind": "malloc",
                    "bytes_per_connection": 65536.0, "blocks_per_connection": 1.0,
                    "bytes_after_close": 0,
                }, {
                    "label": "idle_site (x.c:1)", "kind": "malloc",
                    "bytes_per_connection": 0.0, "blocks_per_connection": 0.0,
                    "bytes_after_close": 0,
                }],
                "unmatched_frees": 3, "dropped": 0, "complete": true,
            },
        },
    });
    let d = out_dir("memslope", &[c]);
    let html = std::fs::read_to_string(write(&d.0).unwrap()).unwrap();
    let slug = crate::scenario::slug(id);
    assert!(
        html.contains(&format!(
            "<figure class=\"chart memslope\" data-chart=\"memslope-{slug}\" data-case=\"{id}\">"
        )),
        "{html}"
    );
    assert!(
        html.contains("RSS 64.0 KiB per connection (R² 1.000)"),
        "{html}"
    );
    // The live heap's sites: the one that holds bytes per connection, not
    // the one that holds nothing.
    assert!(
        html.contains("live heap by call site: 65536 B per connection (R² 1.000); 4096 B in 1 blocks left after close; 3 unmatched frees"),
        "{html}"
    );
    assert!(
        html.contains("<tr><td>conn_open+0x1e (conn_server.c:89)</td><td>malloc</td><td class=\"n\">65536</td><td class=\"n\">1.00</td><td class=\"n\">0</td></tr>"),
        "{html}"
    );
    assert!(!html.contains("idle_site"), "{html}");
    // The matrix row's RSS is the top tier's (KiB).
    let top = ((1u64 << 20) + 128 * 65552) / 1024;
    assert!(html.contains(&format!("data-sort=\"{top}.0\"")), "{html}");
}

#[test]
fn a_soak_case_draws_latency_per_interval_and_rss_by_requests_with_its_line() {
    let id = "soak/conn/h1/r1000/4x1/i1000ms/#1";
    let iv = |n: u64| {
        json!({"interval": n, "end_ms": n as f64 * 1000.0, "served": n * 1500,
               "p50_ns": 40_000, "p99_ns": 900_000 * n, "p999_ns": 2_000_000 * n,
               "rss_bytes": (4u64 << 20) + n * 1500 * 4112})
    };
    let c = json!({
        "id": id, "suite": "soak", "kind": "soak", "target": 0, "target_name": "conn",
        "repeat": 1, "protocol": "h1", "path": "/", "interval_ms": 1000,
        "status": "ok", "reasons": [],
        "soak": {
            "intervals": [iv(1), iv(2), iv(3)],
            "rss_per_request": {"slope": 4112.0, "intercept": 4194304.0, "r2": 1.0, "residuals": [0.0, 0.0, 0.0]},
        },
    });
    let d = out_dir("soak", &[c]);
    let html = std::fs::read_to_string(write(&d.0).unwrap()).unwrap();
    let slug = crate::scenario::slug(id);
    for kind in ["soak-latency", "soak-memory"] {
        assert!(
            html.contains(&format!(
                "<figure class=\"chart {kind}\" data-chart=\"{kind}-{slug}\" data-case=\"{id}\">"
            )),
            "{kind}: {html}"
        );
    }
    assert!(
        html.contains("RSS +4112.0 B per request served (R² 1.000)"),
        "{html}"
    );
    assert!(html.contains("latency per interval (from the scheduled time)"));
}

#[test]
fn a_live_case_draws_its_server_phase_by_phase() {
    let id = "live/peer/ws/c32/x1/#1";
    let ph = |phase: &str, rss: u64, fds: u64| json!({"phase": phase, "samples": 2, "rss_max_bytes": rss, "pss_max_bytes": rss, "fds_min": fds, "fds_max": fds, "threads_max": 2, "server_cpu_ns": 1000});
    let c = json!({
        "id": id, "suite": "live", "kind": "live", "target": 0, "target_name": "peer",
        "repeat": 1, "live_protocol": "ws", "connections": [32], "cycles": 1,
        "status": "ok", "reasons": [],
        "live": {
            "endpoint": "ws /ws", "ready_fds": 12,
            "cycles": [{"cycle": 1, "phases": [
                ph("connecting", 8 << 20, 30), ph("connected", 12 << 20, 44),
                ph("closing", 12 << 20, 20), ph("disconnected", 9 << 20, 12),
            ]}],
        },
    });
    let d = out_dir("live", &[c]);
    let html = std::fs::read_to_string(write(&d.0).unwrap()).unwrap();
    let slug = crate::scenario::slug(id);
    assert!(
        html.contains(&format!(
            "<figure class=\"chart live\" data-chart=\"live-{slug}\" data-case=\"{id}\">"
        )),
        "{html}"
    );
    assert!(html.contains("server by phase (ws /ws)"), "{html}");
    let live = serde_json::json!({"endpoint": "ws /ws", "ready_fds": 12, "cycles": [{"cycle": 1, "phases": [ph("connecting", 8 << 20, 30), ph("connected", 12 << 20, 44)]}]});
    let live: crate::results::case::Live = serde::Deserialize::deserialize(&live).unwrap();
    let v = chart::live_chart(&live).unwrap();
    assert_eq!(v["series"][0]["points"], json!([[1.0, 8.0], [1.25, 12.0]]));
    assert_eq!(v["series"][2]["points"], json!([[1.0, 30.0], [1.25, 44.0]]));
}

fn skipped_case(i: usize, why: &str) -> Value {
    json!({
        "id": format!("s{i}/calib/h1/calib/closed/1x1/ka/#1"), "suite": format!("s{i}"),
        "kind": "http", "target": 0, "target_name": "calib", "repeat": 1, "protocol": "h1",
        "path": "/calib", "load": {"kind": "closed"}, "topology": {"connections": 1, "streams": 1},
        "keepalive": true, "status": "skipped", "reasons": [why],
    })
}

#[test]
fn a_run_of_skipped_cases_is_one_row_listing_every_case_and_one_section() {
    let why = "rig was interrupted by SIGINT before this case";
    let ok = "s0/calib/h1/calib/closed/1x1/ka/#1";
    let mut cases = vec![http_case(ok, 1)];
    cases.extend((1..=5).map(|i| skipped_case(i, why)));
    // Two skipped for another reason: too few to fold, a row each.
    cases.extend((6..=7).map(|i| skipped_case(i, "the target failed to start")));
    let d = out_dir("skipped", &cases);
    let html = render(&Inputs::read(&d.0).unwrap()).unwrap();
    assert!(html.contains(&format!(
        "<tr class=\"case-row status-ok\" data-case=\"{ok}\" data-suite=\"calib\""
    )));
    let first = "s1/calib/h1/calib/closed/1x1/ka/#1";
    let anchor = format!("skipped-{}", crate::scenario::slug(first));
    assert!(
        html.contains(&format!(
            "<tr class=\"skipped-run status-skipped\" id=\"{anchor}\"><td colspan=\"18\"><details><summary>5 cases skipped: {why}</summary>"
        )),
        "{html}"
    );
    // Every skipped case is named in the row's list, with its filters' data.
    for i in 1..=5 {
        assert!(
            html.contains(&format!(
                "<li class=\"case-row\" data-case=\"s{i}/calib/h1/calib/closed/1x1/ka/#1\" data-suite=\"s{i}\" data-protocol=\"h1\" data-target=\"calib\">s{i}/calib/h1/calib/closed/1x1/ka/#1</li>"
            )),
            "s{i}"
        );
        assert!(html.contains(&format!("<option>s{i}</option>")));
    }
    assert_eq!(html.matches("<li class=\"case-row\"").count(), 5);
    // One section for the run, not one per case.
    assert!(html.contains(&format!(
        "<h3>5 cases skipped, {first} to s5/calib/h1/calib/closed/1x1/ka/#1 <small class=\"status\">skipped</small></h3>"
    )));
    assert_eq!(
        html.matches("<article class=\"case status-skipped\"")
            .count(),
        3
    );
    for i in 6..=7 {
        let id = format!("s{i}/calib/h1/calib/closed/1x1/ka/#1");
        assert!(html.contains(&format!(
            "<tr class=\"case-row status-skipped\" data-case=\"{id}\" data-suite=\"s{i}\""
        )));
        assert!(html.contains(&format!(
            "<article class=\"case status-skipped\" id=\"case-{}\" data-case=\"{id}\">",
            crate::scenario::slug(&id)
        )));
    }
    assert_eq!(
        html.matches("<li>the target failed to start</li>").count(),
        2
    );
}
