//! Any percentile of the latency `rig run` stored for each case, read from
//! the HDR histogram in `cases.jsonl` (the summary keeps p50, p90, p99 and
//! p99.9 only):
//!
//! ```text
//! cargo run -p rig --example percentiles -- OUT/cases.jsonl 50 95 99 99.9
//! ```
//!
//! One line per case and pass: its key, then each percentile in µs of the
//! latency from the scheduled send time (open loop) or from the send.

use std::io::BufRead;

fn main() -> Result<(), String> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: percentiles CASES.JSONL PERCENTILE...")?;
    let wanted: Vec<f64> = args
        .map(|a| a.parse().map_err(|e| format!("percentile {a:?}: {e}")))
        .collect::<Result<_, _>>()?;
    let file = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
    for line in std::io::BufReader::new(file).lines() {
        let line = line.map_err(|e| format!("{path}: {e}"))?;
        let case: serde_json::Value =
            serde_json::from_str(&line).map_err(|e| format!("{path}: {e}"))?;
        let key = case["id"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| case["id"].to_string());
        for pass in ["clean", "counted"] {
            let Some(encoded) = case[pass]["load"]["histogram"]["latency"].as_str() else {
                continue;
            };
            let h = rig::load::hist::decode(encoded)?;
            let cells: Vec<String> = wanted
                .iter()
                .map(|p| {
                    let us = h.value_at_quantile(p / 100.0) as f64 / 1e3;
                    format!("p{p} {us:.1} µs")
                })
                .collect();
            println!("{key} {pass}: {} ({} requests)", cells.join(", "), h.len());
        }
    }
    Ok(())
}
