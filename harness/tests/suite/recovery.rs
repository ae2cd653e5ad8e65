//! `rig run`'s recovery suite: one server process through cycles of
//! connect, fixed-rate load and close, each cycle checked on its own
//! (handshakes, ledger, descriptors back to READY's).

use serde_json::Value;

use super::{run_matrix, spec};
use rig::exit;

fn run(target: &str, matrix: &str) -> (i32, String, Vec<Value>) {
    let r = run_matrix("recovery", &spec(target), matrix, &[]);
    (r.code, r.text, r.cases)
}

#[test]
fn http2_recovery_counts_every_handshake_and_returns_to_readys_descriptors_each_cycle() {
    root_or_skip!();
    let (code, text, cases) = run(
        "peer.toml",
        r#"
[defaults]
settle_ms = 200
duration_ms = 300

[[suite]]
name = "rec"
kind = "recovery"
protocols = ["h2c", "h2-tls"]
paths = ["/plain"]
rates = [400.0]
topologies = ["4x2"]
cycles = 3
close = ["graceful", "abrupt"]
"#,
    );
    assert_eq!(code, exit::OK, "{text}");
    assert_eq!(cases.len(), 4, "{text}");
    for c in &cases {
        let id = c["id"].as_str().unwrap();
        assert_eq!(c["status"], "ok", "{c:#}");
        assert_eq!(c["kind"], "recovery");
        let tls = c["protocol"] == "h2-tls";
        let graceful = c["close"] == "graceful";
        let cycles = c["recovery"]["cycles"].as_array().unwrap();
        assert_eq!(cycles.len(), 3, "{id}");
        for (i, cy) in cycles.iter().enumerate() {
            assert_eq!(cy["cycle"], i as u64 + 1);
            // Exactly one TCP, TLS (for h2-tls) and h2 handshake per
            // connection, in every cycle.
            assert_eq!(
                cy["handshakes"],
                serde_json::json!({"tcp": 4, "tls": if tls { 4 } else { 0 }, "h2": 4}),
                "{id} cycle {}",
                i + 1
            );
            // 400/s for 300 ms: 120 scheduled, every one answered.
            assert_eq!(cy["scheduled"], 120, "{id}");
            assert_eq!(cy["succeeded"], 120, "{id}");
            assert_eq!(cy["errors"], 0, "{id}");
            assert_eq!(cy["went_away"], if graceful { 4 } else { 0 }, "{id}");
            assert_eq!(cy["fds_delta"], 0, "{id}");
            assert_eq!(cy["problems"], serde_json::json!([]), "{id}");
        }
        assert!(c["recovery"]["rss_drift"]["slope"].is_f64(), "{id}");
        assert!(
            text.contains(&format!("{id}: cycles: #1 120/120 ok")),
            "{text}"
        );
    }
}

#[test]
fn a_server_that_keeps_descriptors_fails_each_recovery_cycle_with_its_count() {
    root_or_skip!();
    // conn-leaky keeps a descriptor per closed connection: 4 more after
    // every cycle of 4 connections.
    let (code, text, cases) = run(
        "conn-leaky.toml",
        r#"
[defaults]
settle_ms = 200
duration_ms = 200

[[suite]]
name = "rec"
kind = "recovery"
protocols = ["h1"]
paths = ["/"]
rates = [200.0]
topologies = ["4"]
cycles = 3
close = ["abrupt"]
"#,
    );
    assert_eq!(code, exit::CASE_FAILED, "{text}");
    let c = &cases[0];
    assert_eq!(c["status"], "failed");
    let deltas: Vec<i64> = c["recovery"]["cycles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|cy| cy["fds_delta"].as_i64().unwrap())
        .collect();
    assert_eq!(deltas, vec![4, 8, 12], "{c:#}");
    let reasons = c["reasons"].to_string();
    for (n, d) in [(1, "+4"), (2, "+8"), (3, "+12")] {
        assert!(
            reasons.contains(&format!(
                "recovery cycle {n}: after closing every connection the server holds"
            )) && reasons.contains(&format!("{d} against READY's")),
            "{reasons}"
        );
    }
}
