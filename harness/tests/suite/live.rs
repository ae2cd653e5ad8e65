//! `rig run`'s live suite: long-lived TCP echo, WebSocket and SSE
//! connections through cycles of connecting, holding, closing and
//! disconnecting in one server process, each cycle's ledger exact.

use serde_json::Value;

use super::{run_matrix, spec};
use rig::exit;

/// `rig run` of `matrix` on `target`; without probes (`--passes clean`)
/// unless `args` ask for them.
fn run(
    target: impl AsRef<std::path::Path>,
    matrix: &str,
    args: &[&str],
) -> (i32, String, Vec<Value>) {
    let args = if args.is_empty() {
        &["--passes", "clean"][..]
    } else {
        args
    };
    let target = target.as_ref().display().to_string();
    let r = run_matrix("live", &target, matrix, args);
    (r.code, r.text, r.cases)
}

/// 600 ms holds with a message every 100 ms: every TCP and WebSocket
/// connection sends exactly 6 (send times are scheduled from the start of
/// the hold, spread over the first interval, and a send is due while its
/// time is inside the hold). SSE at 200 ms (peer-live.toml): a connection
/// needs at least half the 3 intervals, 1 heartbeat.
const MATRIX: &str = r#"
[defaults]
settle_ms = 200

[[suite]]
name = "live"
kind = "live"
live = ["tcp", "ws", "sse"]
connections = [16, 64]
cycles = 2
message_ms = 100
duration_ms = 600
"#;

#[test]
fn live_echoes_every_message_of_every_connection_and_returns_to_readys_descriptors_each_cycle() {
    root_or_skip!();
    let (code, text, cases) = run(spec("peer.toml"), MATRIX, &[]);
    assert_eq!(code, exit::OK, "{text}");
    assert_eq!(cases.len(), 6, "{text}");
    let mut seen = Vec::new();
    for c in &cases {
        let id = c["id"].as_str().unwrap();
        assert_eq!(c["status"], "ok", "{c:#}");
        assert_eq!(c["kind"], "live", "{id}");
        let n = c["connections"][0].as_u64().unwrap();
        let proto = c["live_protocol"].as_str().unwrap();
        seen.push((proto.to_string(), n));
        let p = &c["live"];
        assert_eq!(p["ready_fds"], p["cycles"][0]["fds_after"], "{id}");
        let cycles = p["cycles"].as_array().unwrap();
        assert_eq!(cycles.len(), 2, "{id}");
        for (i, cy) in cycles.iter().enumerate() {
            let at = format!("{id} cycle {}", i + 1);
            assert_eq!(cy["cycle"], i as u64 + 1, "{at}");
            assert_eq!(cy["connected"], n, "{at}");
            assert_eq!(cy["reclaimed"], n, "{at}");
            assert_eq!(cy["errors"], serde_json::json!({}), "{at}");
            assert_eq!(cy["fds_delta"], 0, "{at}");
            assert_eq!(cy["problems"], serde_json::json!([]), "{at}");
            if proto == "sse" {
                assert_eq!(cy["sent"], 0, "{at}");
                assert_eq!(cy["heartbeats_needed"], 1, "{at}");
                assert!(cy["heartbeats_min"].as_u64().unwrap() >= 1, "{at}: {cy:#}");
                assert!(cy["heartbeats"].as_u64().unwrap() >= n, "{at}: {cy:#}");
            } else {
                // Exactly 6 messages per connection, each echoed with its
                // cycle, connection and sequence.
                assert_eq!(cy["sent"], 6 * n, "{at}");
                assert_eq!(cy["echoed"], 6 * n, "{at}");
                assert_eq!(cy["sent_min"], 6, "{at}");
                assert_eq!(cy["sent_max"], 6, "{at}");
                assert_eq!(cy["heartbeats"], 0, "{at}");
            }
            let phases: Vec<&str> = cy["phases"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["phase"].as_str().unwrap())
                .collect();
            assert_eq!(
                phases,
                ["connecting", "connected", "closing", "disconnected"],
                "{at}"
            );
            // While held, the server holds exactly one descriptor per
            // connection more than at READY (every connection was proven
            // served before the hold: TCP by its message 0, WebSocket and
            // SSE by their handshakes; none closes before it ends); once
            // disconnected, READY's.
            let held = &cy["phases"][1];
            assert!(held["samples"].as_u64().unwrap() >= 1, "{at}");
            let want = p["ready_fds"].as_u64().unwrap() + n;
            assert_eq!(held["fds_min"], want, "{at}: {held:#}");
            assert_eq!(held["fds_max"], want, "{at}: {held:#}");
            let gone = &cy["phases"][3];
            assert_eq!(gone["fds_max"], p["ready_fds"], "{at}: {gone:#}");
        }
    }
    seen.sort();
    let want: Vec<(String, u64)> = ["sse", "tcp", "ws"]
        .iter()
        .flat_map(|p| [(p.to_string(), 16), (p.to_string(), 64)])
        .collect();
    assert_eq!(seen, want);
    assert!(
        text.contains("live/peer/ws/c64/x2/#1: ws /ws: #1 64 open, 384/384 echoed, 64 reclaimed"),
        "{text}"
    );
}

/// A target whose echo is wrong (rig-peer --live --wrong-echo answers
/// `xc1 n0 s1` to `c1 n0 s1`) fails every cycle, naming the message.
#[test]
fn a_wrong_echo_fails_the_cycle_with_the_message_and_the_answer() {
    root_or_skip!();
    let d = tempfile::Builder::new()
        .prefix("rig-live-wrong-")
        .tempdir()
        .unwrap();
    let target = d.path().join("wrong.toml");
    std::fs::write(
        &target,
        r#"
name = "wrong"
argv = ["{rig_peer}", "--port", "{port}", "--workers", "1", "--live", "--wrong-echo"]
port = "argv"
ready = { stdout = "READY" }

[protocols]
tcp_echo = true
ws = "/ws"
"#,
    )
    .unwrap();
    let (code, text, cases) = run(
        &target,
        r#"
[defaults]
settle_ms = 100

[[suite]]
name = "live"
kind = "live"
live = ["tcp", "ws", "sse"]
connections = [4]
cycles = 1
duration_ms = 300
"#,
        &[],
    );
    assert_eq!(code, exit::CASE_FAILED, "{text}");
    assert_eq!(cases.len(), 3, "{text}");
    // TCP: message 0, the proof a connection is open, comes back wrong,
    // so no connection opens.
    let tcp = &cases[0];
    assert_eq!(tcp["status"], "failed", "{tcp:#}");
    let cy = &tcp["live"]["cycles"][0];
    assert_eq!(cy["connected"], 0, "{cy:#}");
    assert_eq!(cy["sent"], 0, "{cy:#}");
    assert_eq!(cy["fds_delta"], 0, "{cy:#}");
    assert_eq!(
        tcp["reasons"][0],
        "live cycle 1: phase connected missing: 4 of 4 connections did not open (first: connection 0: connect: wrong echo: sent `c1 n0 s0`, got `xc1 n0 s0`)",
    );
    // WebSocket: every connection's first message comes back wrong; it
    // sends no more after that, and still closes cleanly.
    let ws = &cases[1];
    assert_eq!(ws["status"], "failed", "{ws:#}");
    let cy = &ws["live"]["cycles"][0];
    assert_eq!(cy["connected"], 4, "{cy:#}");
    assert_eq!(cy["sent"], 4, "{cy:#}");
    assert_eq!(cy["echoed"], 0, "{cy:#}");
    assert_eq!(cy["reclaimed"], 4, "{cy:#}");
    assert_eq!(cy["fds_delta"], 0, "{cy:#}");
    assert_eq!(
        ws["reasons"],
        serde_json::json!(["live cycle 1: 4 connections had an echo wrong or missing (first: connection 0: wrong echo: sent `c1 n0 s1`, got `xc1 n0 s1`)"]),
    );
    // No SSE on this target, and no live_variant: skipped, with why.
    assert_eq!(cases[2]["status"], "skipped", "{:#}", cases[2]);
    assert_eq!(
        cases[2]["reasons"][0],
        "target wrong offers no sse (no [protocols] sse, no live_variant)"
    );
}

/// With probes, each hold is one window holding exactly the hold's
/// messages: rig-peer's TCP echo (`tokio::io::copy`, its buffer allocated
/// when the connection opened) answers each message (one connection has
/// one in flight) with one `recv` of it and one `send` (std's read and
/// write on a socket), and allocates nothing: exactly 1 `recvfrom`, 1
/// `sendto` and 0 allocations per message.
#[test]
fn live_probes_count_one_recv_one_send_and_no_allocation_per_tcp_echo() {
    root_or_skip!();
    let _g = super::probes_shared();
    let (code, text, cases) = run(
        spec("peer.toml"),
        r#"
[defaults]
settle_ms = 100

[[suite]]
name = "live"
kind = "live"
live = ["tcp"]
connections = [8]
cycles = 2
message_ms = 100
duration_ms = 500
"#,
        &["--passes", "counted", "--probes", "syscalls,alloc"],
    );
    assert_eq!(code, exit::OK, "{text}");
    let c = &cases[0];
    assert_eq!(c["status"], "ok", "{c:#}");
    for cy in c["live"]["cycles"].as_array().unwrap() {
        let p = &cy["probes"];
        assert_eq!(cy["echoed"], 40, "{cy:#}");
        assert_eq!(p["messages"], 40, "{p:#}");
        assert_eq!(p["connections"], 8, "{p:#}");
        assert_eq!(p["complete"], true, "{p:#}");
        assert_eq!(p["syscalls_per_message"]["sendto"], 1.0, "{p:#}");
        assert_eq!(p["syscalls_per_message"]["recvfrom"], 1.0, "{p:#}");
        assert_eq!(p["per_message"]["allocations"], 0.0, "{p:#}");
        assert_eq!(p["per_connection"]["allocations"], 0.0, "{p:#}");
        // The system calls at their user sites (whole stacks): the echo's
        // one read and one write, each exactly once per message at mio's
        // TcpStream read and write; the sites add up to every call by name
        // (the event loop's epoll_wait too). The alloc family, with
        // nothing allocated, lists no site.
        let fams = p["sites_per_message"].as_array().unwrap();
        let sys = fams
            .iter()
            .find(|f| f["family"] == "syscalls")
            .unwrap_or_else(|| panic!("no syscall sites: {p:#}"));
        let sites = sys["sites"].as_array().unwrap();
        let at = |needle: &str| -> f64 {
            let found: Vec<f64> = sites
                .iter()
                .filter(|s| s[0].as_str().unwrap().contains(needle))
                .map(|s| s[1].as_f64().unwrap())
                .collect();
            assert_eq!(found.len(), 1, "one {needle} site: {sys:#}");
            found[0]
        };
        assert_eq!(at("TcpStream as std::io::Read>::read"), 1.0, "{sys:#}");
        assert_eq!(at("TcpStream as std::io::Write>::write"), 1.0, "{sys:#}");
        let by_site: f64 = sites.iter().map(|s| s[1].as_f64().unwrap()).sum();
        let by_name: f64 = p["syscalls_per_message"]
            .as_object()
            .unwrap()
            .values()
            .map(|v| v.as_f64().unwrap())
            .sum();
        // (Only the top 5 sites are listed: with more, they add up to less.)
        match sites.len() {
            5 => assert!(by_site <= by_name + 1e-9, "{p:#}"),
            _ => assert!((by_site - by_name).abs() < 1e-9, "{p:#}"),
        }
        assert!(!fams.iter().any(|f| f["family"] == "alloc"), "{p:#}");
    }
}

/// A WebSocket server nobody here wrote: Debian's websocketd with one
/// /bin/cat per connection (config/targets/websocketd.toml). Every
/// message comes back, and once the connections close the process tree
/// (websocketd and its cats) holds READY's descriptors again.
#[test]
fn websocketd_echoes_every_message_and_gives_back_its_descriptors_each_cycle() {
    root_or_skip!();
    let (code, text, cases) = run(
        spec("websocketd.toml"),
        r#"
[defaults]
settle_ms = 200

[[suite]]
name = "live"
kind = "live"
live = ["ws"]
connections = [16]
cycles = 2
message_ms = 100
duration_ms = 500
"#,
        &[],
    );
    assert_eq!(code, exit::OK, "{text}");
    let c = &cases[0];
    assert_eq!(c["status"], "ok", "{c:#}");
    assert_eq!(c["live"]["endpoint"], "ws /");
    for cy in c["live"]["cycles"].as_array().unwrap() {
        assert_eq!(cy["connected"], 16, "{cy:#}");
        assert_eq!(cy["sent"], 80, "{cy:#}");
        assert_eq!(cy["echoed"], 80, "{cy:#}");
        assert_eq!(cy["reclaimed"], 16, "{cy:#}");
        assert_eq!(cy["fds_delta"], 0, "{cy:#}");
    }
}
