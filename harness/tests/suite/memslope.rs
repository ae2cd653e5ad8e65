//! `rig run`'s memslope suite: memory against open idle connections, fitted
//! by least squares, against a server whose memory per connection is known
//! by construction (fixtures/conn/conn_server.c: one written-through heap
//! block of 65536 bytes per open connection, 65552 with glibc's chunk
//! header), and its deliberately leaking variant.

use serde_json::Value;

use super::{run_matrix, spec};
use rig::exit;

/// The fixture's resident bytes per open connection: the 65536-byte block
/// and glibc's 16-byte chunk header (blocks below the mmap threshold are
/// consecutive in the heap).
const CONN_BYTES: f64 = 65552.0;
/// What conn_open asks malloc for per connection (`--conn-bytes`).
const BLOCK: u64 = 65536;

const MATRIX: &str = r#"
[defaults]
settle_ms = 200

[[suite]]
name = "memslope"
kind = "memslope"
protocols = ["h1"]
paths = ["/"]
connections = [0, 64, 128, 256]
"#;

fn run(target: &str, name: &str) -> (i32, String, Value) {
    let r = run_matrix(&format!("memslope-{name}"), &spec(target), MATRIX, &[]);
    assert_eq!(r.cases.len(), 1, "one case: {}", r.text);
    let case = r.cases.into_iter().next().unwrap();
    (r.code, r.text, case)
}

/// The live-heap site of `conn_server.c` whose malloc carries the
/// `SITE:marker`, by exact function name and file:line.
fn conn_site<'a>(live: &'a Value, function: &str, marker: &str) -> &'a Value {
    let line = rig_fixtures::conn_line(marker);
    let sites = live["sites"].as_array().unwrap();
    let found: Vec<&Value> = sites
        .iter()
        .filter(|s| s["site"]["function"] == function)
        .collect();
    assert_eq!(found.len(), 1, "one {function} site: {live:#}");
    let s = found[0];
    assert_eq!(s["site"]["line"], line, "{s:#}");
    assert!(
        s["site"]["file"]
            .as_str()
            .unwrap()
            .ends_with("conn_server.c"),
        "{s:#}"
    );
    assert_eq!(s["kind"], "malloc", "{s:#}");
    s
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap())
        .collect()
}

#[test]
fn memslope_recovers_the_fixtures_bytes_per_connection_within_two_percent() {
    root_or_skip!();
    let (code, stdout, c) = run("conn.toml", "exact");
    assert_eq!(code, exit::OK, "{stdout}");
    assert_eq!(c["status"], "ok", "{c:#}");
    assert_eq!(c["kind"], "memslope");
    assert_eq!(c["connections"], serde_json::json!([0, 64, 128, 256]));
    let m = &c["memslope"];
    // Every connection was made once and answered its request.
    assert_eq!(
        m["handshakes"],
        serde_json::json!({"tcp": 256, "tls": 0, "h2": 0})
    );
    let tiers: Vec<u64> = m["opened"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["connections"].as_u64().unwrap())
        .collect();
    assert_eq!(tiers, vec![0, 64, 128, 256]);
    let closed: Vec<u64> = m["closed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["connections"].as_u64().unwrap())
        .collect();
    assert_eq!(closed, vec![128, 64, 0]);
    // One descriptor per open connection, none left after closing.
    let fds: Vec<u64> = m["opened"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["fds"].as_u64().unwrap())
        .collect();
    assert_eq!(
        fds.iter().map(|f| f - fds[0]).collect::<Vec<_>>(),
        vec![0, 64, 128, 256]
    );
    assert_eq!(m["fds_left_after_close"], 0);
    for fit in ["rss", "pss"] {
        let slope = m[fit]["slope"].as_f64().unwrap();
        let r2 = m[fit]["r2"].as_f64().unwrap();
        assert!(
            (slope - CONN_BYTES).abs() <= 0.02 * CONN_BYTES,
            "{fit}: {slope} B/connection, not within 2% of {CONN_BYTES}: {m:#}"
        );
        assert!(r2 >= 0.99, "{fit}: R² {r2}: {m:#}");
        assert_eq!(m[fit]["residuals"].as_array().unwrap().len(), 4);
    }
    assert_eq!(m["warnings"], serde_json::json!([]));
    assert!(
        stdout.contains(&format!(
            "{}: memory per connection: RSS ",
            c["id"].as_str().unwrap()
        )),
        "{stdout}"
    );
    // The live heap: exactly one 65536-byte block per open connection, at
    // conn_open's malloc, and nothing else; all freed again at close.
    let live = &m["live_heap"];
    assert_eq!(live["complete"], true, "{live:#}");
    assert_eq!(live["dropped"], 0, "{live:#}");
    assert_eq!(live["unmatched_frees"], 0, "{live:#}");
    let s = conn_site(live, "conn_open", "conn_open");
    let tiers = [0u64, 64, 128, 256];
    let bytes: Vec<u64> = tiers.iter().map(|n| n * BLOCK).collect();
    assert_eq!(u64s(&s["bytes"]), bytes, "{s:#}");
    assert_eq!(u64s(&s["blocks"]), tiers.to_vec(), "{s:#}");
    assert_eq!(s["bytes_per_connection"].as_f64().unwrap(), BLOCK as f64);
    assert_eq!(s["blocks_per_connection"].as_f64().unwrap(), 1.0);
    assert_eq!(s["bytes_after_close"], 0, "freed inside the window: {s:#}");
    assert_eq!(s["blocks_after_close"], 0, "{s:#}");
    let totals: Vec<u64> = live["opened"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["bytes"].as_u64().unwrap())
        .collect();
    assert_eq!(totals, bytes, "{live:#}");
    assert_eq!(live["after_close"]["bytes"], 0, "{live:#}");
    assert_eq!(live["fit"]["slope"].as_f64().unwrap(), BLOCK as f64);
    // By user site (whole stacks): in C the allocator's caller is the user
    // site, so the same one row, the same numbers.
    let users = live["user_sites"].as_array().unwrap();
    assert_eq!(users.len(), 1, "{live:#}");
    let u = &users[0];
    assert_eq!(
        (&u["site"]["function"], &u["site"]["line"]),
        (
            &"conn_open".into(),
            &rig_fixtures::conn_line("conn_open").into()
        ),
        "{u:#}"
    );
    assert_eq!(u64s(&u["bytes"]), bytes, "{u:#}");
    assert_eq!(u["bytes_per_connection"].as_f64().unwrap(), BLOCK as f64);
    assert!(
        stdout.contains(&format!(
            "{}: live heap per connection: 65536 B/conn (R² 1.000)",
            c["id"].as_str().unwrap()
        )),
        "{stdout}"
    );
}

#[test]
fn a_server_that_keeps_a_descriptor_per_closed_connection_fails_with_the_count() {
    root_or_skip!();
    let (code, stdout, c) = run("conn-leaky.toml", "leak");
    assert_eq!(code, exit::CASE_FAILED, "{stdout}");
    assert_eq!(c["status"], "failed", "{c:#}");
    let m = &c["memslope"];
    // 4 warm-up connections were closed before READY's count was taken:
    // the 256 of the tiers are what the fixture kept.
    assert_eq!(m["fds_left_after_close"], 256, "{m:#}");
    let reasons = c["reasons"].to_string();
    assert!(reasons.contains("+256 against READY's"), "{reasons}");
    // The live heap names the leak: 4096 bytes per closed connection at
    // conn_leak's malloc, still allocated once all 256 are closed, while
    // conn_open's blocks were all freed (net 0 at that site).
    let live = &m["live_heap"];
    assert_eq!(live["complete"], true, "{live:#}");
    assert_eq!(live["unmatched_frees"], 0, "{live:#}");
    let leak = conn_site(live, "conn_leak", "conn_leak");
    assert_eq!(u64s(&leak["bytes"]), vec![0, 0, 0, 0], "{leak:#}");
    assert_eq!(leak["bytes_after_close"], 256 * 4096, "{leak:#}");
    assert_eq!(leak["blocks_after_close"], 256, "{leak:#}");
    let open = conn_site(live, "conn_open", "conn_open");
    assert_eq!(open["bytes_after_close"], 0, "{open:#}");
    assert_eq!(open["bytes_per_connection"].as_f64().unwrap(), BLOCK as f64);
    assert_eq!(live["after_close"]["bytes"], 256 * 4096, "{live:#}");
    assert_eq!(live["after_close"]["blocks"], 256, "{live:#}");
    // Memory per open connection is still measured right.
    let slope = m["rss"]["slope"].as_f64().unwrap();
    assert!(
        (slope - CONN_BYTES).abs() <= 0.02 * CONN_BYTES + 4096.0,
        "{slope}"
    );
}

/// memslope over rig-peer's live connections (its `live_variant`): TCP
/// echo, WebSocket and SSE connections held idle at each tier, each proven
/// served (the first echo, the upgrade, the first event). One process,
/// one descriptor per connection: the descriptor counts are exact.
#[test]
fn memslope_holds_tcp_websocket_and_sse_connections_at_each_tier() {
    root_or_skip!();
    let r = run_matrix(
        "memslope-live",
        &spec("peer.toml"),
        r#"
[defaults]
settle_ms = 100

[[suite]]
name = "memslope"
kind = "memslope"
live = ["tcp", "ws", "sse"]
connections = [0, 16, 32, 64]
"#,
        &["--passes", "clean"],
    );
    assert_eq!(r.code, exit::OK, "{}", r.text);
    let cases = r.cases;
    let ids: Vec<&str> = cases.iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "memslope/peer/tcp/c0-16-32-64/#1",
            "memslope/peer/ws/c0-16-32-64/#1",
            "memslope/peer/sse/c0-16-32-64/#1"
        ]
    );
    for c in &cases {
        assert_eq!(c["status"], "ok", "{}: {:#}", c["id"], c["reasons"]);
        let m = &c["memslope"];
        let opened = m["opened"].as_array().unwrap();
        let ready = opened[0]["fds"].as_u64().unwrap();
        // Each held connection is one more descriptor in the server.
        for p in opened {
            assert_eq!(
                p["fds"].as_u64().unwrap(),
                ready + p["connections"].as_u64().unwrap(),
                "{}: {p:#}",
                c["id"]
            );
        }
        assert_eq!(m["handshakes"]["tcp"], 64, "{m:#}");
        assert_eq!(m["fds_left_after_close"], 0);
        assert!(m["rss"]["slope"].is_number(), "{m:#}");
    }
}
