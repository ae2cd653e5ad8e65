//! `rig run`'s soak suite: one server under fixed-rate load, interval by
//! interval, with a counted window after each, fitted for drift. Checked
//! against conn_server's leaks, which are known by construction
//! (fixtures/conn/conn_server.c).

use serde_json::Value;

use super::{probes_shared, repo, run_matrix, spec};
use rig::exit;

/// Three intervals of 1 s at 1000 req/s on 4 connections, a counted
/// window of 500 requests after each.
const SOAK: &str = r#"
[defaults]
warmup_ms = 300
settle_ms = 200
counted_requests = 500

[[suite]]
name = "soak"
kind = "soak"
protocols = ["h1"]
paths = ["/"]
rates = [1000.0]
topologies = ["4"]
duration_ms = 3000
interval_ms = 1000
"#;

const INTERVALS: usize = 3;
const CONNECTIONS: i64 = 4;

/// `rig run` of the soak matrix with the alloc and syscall probes: exit
/// code, stdout + stderr, the one case.
fn soak(target: &str) -> (i32, String, Value) {
    let r = run_matrix("soak", &spec(target), SOAK, &["--probes", "alloc,syscalls"]);
    assert_eq!(r.cases.len(), 1, "{}", r.text);
    let case = r.cases.into_iter().next().unwrap();
    (r.code, r.text, case)
}

/// A measured case: `ok`, or `limited` when the generator was late on a
/// shared machine (its only reason then says so).
fn assert_measured(c: &Value, text: &str) {
    let reasons = c["reasons"].as_array().unwrap();
    match c["status"].as_str() {
        Some("ok") => assert!(reasons.is_empty(), "{text}"),
        Some("limited") => assert!(
            reasons.len() == 1 && reasons[0].as_str().unwrap().starts_with("limited: "),
            "{text}"
        ),
        other => panic!("status {other:?}: {text}"),
    }
}

/// The line of conn_server.c holding `needle`.
fn conn_server_line(needle: &str) -> u64 {
    let src = std::fs::read_to_string(repo().join("fixtures/conn/conn_server.c")).unwrap();
    1 + src
        .lines()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no `{needle}` in conn_server.c")) as u64
}

/// Every interval answered its whole schedule at 1000/s over 1 s.
fn assert_ledgers(s: &Value) {
    let intervals = s["intervals"].as_array().unwrap();
    assert_eq!(intervals.len(), INTERVALS, "{s:#}");
    for (n, i) in intervals.iter().enumerate() {
        assert_eq!(i["interval"], n as u64 + 1);
        assert_eq!(i["scheduled"], 1000, "{i:#}");
        assert_eq!(i["succeeded"], 1000, "{i:#}");
        assert_eq!((&i["errors"], &i["expired"]), (&0.into(), &0.into()));
    }
}

#[test]
fn soak_names_a_per_request_leak_at_its_site_and_fits_its_bytes_per_request() {
    root_or_skip!();
    let _g = probes_shared();
    let (code, text, c) = soak("conn-leak-request.toml");
    // A leak is drift to report, not a failed case.
    assert_eq!(code, exit::OK, "{text}");
    assert_measured(&c, &text);
    let s = &c["soak"];
    assert_ledgers(s);
    let line = conn_server_line("char *p = malloc(g_leak_per_request);");
    for i in s["intervals"].as_array().unwrap() {
        // conn_server.c: one malloc of 4096 B per request at
        // conn_leak_request(), never freed; nothing else per request.
        let w = &i["counted"];
        assert_eq!(w["requests"], 500, "{w:#}");
        assert_eq!(w["allocations_per_request"], 1.0, "{w:#}");
        assert_eq!(w["frees_per_request"], 0.0, "{w:#}");
        assert_eq!(w["net_allocations_per_request"], 1.0, "{w:#}");
        assert_eq!(w["alloc_bytes_per_request"], 4096.0, "{w:#}");
        assert_eq!(w["complete"], true);
        // Every free matched to its allocation: the leaked block is the one
        // block per request the window left allocated, at its site.
        assert_eq!(
            (&w["live_blocks_per_request"], &w["live_bytes_per_request"]),
            (&1.0.into(), &4096.0.into()),
            "{w:#}"
        );
        assert_eq!(w["unmatched_frees_per_request"], 0.0, "{w:#}");
        let live = w["live_sites"].as_array().unwrap();
        assert_eq!(live.len(), 1, "{w:#}");
        assert_eq!(
            (&live[0]["function"], &live[0]["line"]),
            (&"conn_leak_request".into(), &line.into()),
            "{w:#}"
        );
        assert_eq!(
            (
                &live[0]["blocks_per_request"],
                &live[0]["bytes_per_request"]
            ),
            (&1.0.into(), &4096.0.into())
        );
        // In C the allocator's caller is the user site.
        let user = w["live_user_sites"].as_array().unwrap();
        assert_eq!(user.len(), 1, "{w:#}");
        assert_eq!(
            (
                &user[0]["function"],
                &user[0]["line"],
                &user[0]["bytes_per_request"]
            ),
            (&"conn_leak_request".into(), &line.into(), &4096.0.into()),
            "{w:#}"
        );
        let top = &w["top_alloc_sites"][0];
        assert_eq!(top["function"], "conn_leak_request", "{w:#}");
        assert!(
            top["file"]
                .as_str()
                .unwrap()
                .ends_with("fixtures/conn/conn_server.c"),
            "{top:#}"
        );
        assert_eq!(top["line"], line, "{top:#}");
        assert_eq!(
            (&top["calls_per_request"], &top["bytes_per_request"]),
            (&1.0.into(), &4096.0.into())
        );
    }
    // Each request keeps 4096 B and glibc's 16-byte chunk header, touched:
    // RSS against requests served rises by 4112 B per request.
    let fit = &s["rss_per_request"];
    let slope = fit["slope"].as_f64().unwrap();
    assert!(
        (slope - 4112.0).abs() <= 4112.0 * 0.02,
        "RSS slope {slope} B/request, want 4112 within 2%: {fit:#}"
    );
    assert!(fit["r2"].as_f64().unwrap() >= 0.99, "{fit:#}");
    let w = s["warnings"].as_array().unwrap();
    assert_eq!(w.len(), 1, "{w:#?}");
    let w = w[0].as_str().unwrap();
    let at = "most at conn_leak_request (";
    let per = format!("conn_server.c:{line}), 1.00 blocks and 4096 B per request");
    assert!(
        w.starts_with("every counted window ended with blocks it allocated still allocated (+1.000, +1.000, +1.000 per request)")
            && w.contains(at)
            && w.contains(&per),
        "{w}"
    );
    assert_eq!(s["fds_delta"], 0);
    assert!(text.contains("drift: RSS +"), "{text}");
}

#[test]
fn soak_of_a_server_that_keeps_nothing_reports_no_drift() {
    root_or_skip!();
    let _g = probes_shared();
    let (code, text, c) = soak("conn.toml");
    assert_eq!(code, exit::OK, "{text}");
    assert_measured(&c, &text);
    let s = &c["soak"];
    assert_ledgers(s);
    let fds: Vec<&Value> = s["intervals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            // conn_server answers from static memory: no allocation and no
            // free per request.
            let w = &i["counted"];
            assert_eq!(w["allocations_per_request"], 0.0, "{w:#}");
            assert_eq!(w["net_allocations_per_request"], 0.0, "{w:#}");
            assert_eq!(w["live_blocks_per_request"], 0.0, "{w:#}");
            assert_eq!(w["live_sites"], Value::Array(vec![]), "{w:#}");
            &i["fds"]
        })
        .collect();
    // READY's descriptors and the soak's 4 connections, the same at every
    // interval's end.
    let ready = s["ready_fds"].as_i64().unwrap();
    assert!(
        fds.iter().all(|f| f.as_i64() == Some(ready + CONNECTIONS)),
        "{fds:?} vs READY {ready}"
    );
    assert_eq!(s["fds_per_minute"]["slope"], 0.0);
    assert_eq!(s["warnings"], Value::Array(vec![]), "{s:#}");
    assert_eq!(s["fds_delta"], 0);
}

#[test]
fn soak_catches_descriptors_kept_per_closed_connection() {
    root_or_skip!();
    let _g = probes_shared();
    let (code, text, c) = soak("conn-leaky.toml");
    assert_eq!(code, exit::CASE_FAILED, "{text}");
    assert_eq!(c["status"], "failed", "{text}");
    let s = &c["soak"];
    assert_ledgers(s);
    // conn-leaky keeps a dup() of every closed connection's socket. Each
    // counted window opens and closes its own 4 connections (3 windows),
    // and the soak's 4 close at the end: 16 descriptors more than READY.
    let kept = CONNECTIONS * (INTERVALS as i64 + 1);
    assert_eq!(s["fds_delta"], kept, "{s:#}");
    let ready = s["ready_fds"].as_u64().unwrap();
    let why = format!(
        "after closing every connection the server holds {} file descriptors, +{kept} against READY's {ready}",
        ready as i64 + kept
    );
    assert!(
        c["reasons"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str() == Some(&why)),
        "want `{why}` in {:#}",
        c["reasons"]
    );
    // Between intervals the windows' leaks show as descriptors growing on
    // the soak's unchanged connections.
    let w = s["warnings"].as_array().unwrap();
    assert!(
        w.iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("the server's descriptors grew from")),
        "{w:#?}"
    );
}
