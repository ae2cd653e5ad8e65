//! `rig run`'s memslope suite: memory against open idle connections, fitted
//! by least squares, against a server whose memory per connection is known
//! by construction (fixtures/conn/conn_server.c: one written-through heap
//! block of 65536 bytes per open connection, 65552 with glibc's chunk
//! header), and its deliberately leaking variant.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use super::{rig_bin, spec};
use rig::exit;

/// The fixture's resident bytes per open connection: the 65536-byte block
/// and glibc's 16-byte chunk header (blocks below the mmap threshold are
/// consecutive in the heap).
const CONN_BYTES: f64 = 65552.0;

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

fn run(target: &str, name: &str) -> (i32, String, Value, tempfile::TempDir) {
    let d = tempfile::Builder::new()
        .prefix(&format!("rig-memslope-{name}-"))
        .tempdir()
        .unwrap();
    let matrix = d.path().join("m.toml");
    std::fs::write(&matrix, MATRIX).unwrap();
    let out: PathBuf = d.path().join("out");
    let o = Command::new(rig_bin())
        .arg("run")
        .arg("--target")
        .arg(spec(target))
        .arg("--matrix")
        .arg(&matrix)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stdout = format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let case = only_case(&out);
    (o.status.code().unwrap_or(-1), stdout, case, d)
}

fn only_case(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("cases.jsonl")).unwrap();
    let mut lines = text.lines();
    let c: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    assert_eq!(lines.next(), None, "one case");
    c
}

#[test]
fn memslope_recovers_the_fixtures_bytes_per_connection_within_two_percent() {
    root_or_skip!();
    let (code, stdout, c, _d) = run("conn.toml", "exact");
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
}

#[test]
fn a_server_that_keeps_a_descriptor_per_closed_connection_fails_with_the_count() {
    root_or_skip!();
    let (code, stdout, c, _d) = run("conn-leaky.toml", "leak");
    assert_eq!(code, exit::CASE_FAILED, "{stdout}");
    assert_eq!(c["status"], "failed", "{c:#}");
    let m = &c["memslope"];
    // 4 warm-up connections were closed before READY's count was taken:
    // the 256 of the tiers are what the fixture kept.
    assert_eq!(m["fds_left_after_close"], 256, "{m:#}");
    let reasons = c["reasons"].to_string();
    assert!(reasons.contains("+256 against READY's"), "{reasons}");
    // Memory per open connection is still measured right.
    let slope = m["rss"]["slope"].as_f64().unwrap();
    assert!(
        (slope - CONN_BYTES).abs() <= 0.02 * CONN_BYTES + 4096.0,
        "{slope}"
    );
}
