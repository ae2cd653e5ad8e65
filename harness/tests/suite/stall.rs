//! Open-loop latency proven by construction: `stall_server` stalls S ms out
//! of every T ms (on the monotonic clock's grid) and answers at once
//! otherwise, so under a fixed-rate schedule every request's latency
//! follows from its send time. rig's reported percentiles (from the
//! scheduled time) must match the model's, and nothing may be dropped.
//!
//! The model (`model_latencies`) is the exact recurrence of that setup:
//! requests due every 1/rate; each goes out at max(its time, the moment the
//! first of the connections frees up), FIFO; the server answers at the end
//! of the stall it arrives in, else at once; every answer takes the service
//! floor `c` on top. `c` is measured, not assumed: the p50 request latency
//! of 2000 back-to-back requests on one connection before the run (a stall
//! delays at most one of them, so the median is the floor). With one
//! connection `c` matters beyond the floor: the requests queued during a
//! stall drain one round trip after another once it ends.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::Duration;

use rig::load::{hist, Client, Endpoint, Expect, LoadReport, LoadSpec, Mode, Protocol};
use rig::session::Child;

const STALL_MS: u64 = 60;
const EVERY_MS: u64 = 100;
const RATE: f64 = 1000.0;
/// 30 whole periods: every phase of the grid is scheduled equally often.
const DURATION_MS: u64 = 3000;

fn stall_server() -> Child {
    let mut cmd = Command::new(rig_fixtures::stall_server());
    cmd.args(["--port", "0"])
        .args(["--stall-ms", &STALL_MS.to_string()])
        .args(["--every-ms", &EVERY_MS.to_string()]);
    Child::spawn_ready(cmd).expect("stall server starts")
}

fn spec(port: u16, path: &str, body: &str, connections: usize) -> LoadSpec {
    LoadSpec {
        addr: SocketAddr::from(([127, 0, 0, 1], port)),
        protocol: Protocol::H1 { keepalive: true },
        endpoint: Endpoint {
            path: path.into(),
            expect: Expect::ok_exact(Some("text/plain"), body.to_string()),
        },
        connections,
        streams: 1,
        client_cpus: None,
        // One thread: one FIFO over every connection, as in the model.
        threads: Some(1),
        spin: None,
    }
}

/// Latency (ns) of every request of the schedule, by the recurrence above.
fn model_latencies(connections: usize, floor_ns: u64, offset_ns: u64) -> Vec<u64> {
    let (stall, every) = (STALL_MS * 1_000_000, EVERY_MS * 1_000_000);
    let n = (RATE * DURATION_MS as f64 / 1e3) as u64;
    let answer = |sent: u64| {
        let phase = sent % every;
        let at = if phase < stall {
            sent - phase + stall
        } else {
            sent
        };
        at + floor_ns
    };
    let mut free: BinaryHeap<Reverse<u64>> = (0..connections).map(|_| Reverse(0)).collect();
    (0..n)
        .map(|k| {
            let due = offset_ns + (k as f64 * 1e9 / RATE) as u64;
            let Reverse(f) = free.pop().expect("a connection");
            let done = answer(due.max(f));
            free.push(Reverse(done));
            done - due
        })
        .collect()
}

/// The `q` quantile of `v` as HdrHistogram reports it: the smallest value
/// at or above which `q` of the values lie.
fn quantile(sorted: &[u64], q: f64) -> u64 {
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

/// The service floor: p50 request latency of back-to-back requests.
fn floor_ns(client: &mut Client) -> u64 {
    let r = client.run(&Mode::FixedCount { requests: 2000 });
    assert_eq!(r.succeeded, 2000, "{:?}", r.errors);
    r.request_latency.p50_ns
}

fn check_against_model(r: &LoadReport, connections: usize, floor: u64) {
    r.check_invariants().unwrap();
    let n = (RATE * DURATION_MS as f64 / 1e3) as u64;
    // Nothing dropped, nothing expired: every scheduled request answered.
    assert_eq!(r.scheduled, n, "{r:?}");
    assert_eq!((r.succeeded, r.expired), (n, 0), "{:?}", r.errors);
    let mut model = model_latencies(connections, floor, 0);
    model.sort_unstable();
    let got = hist::decode(&r.histogram.latency).unwrap();
    let mut lines = Vec::new();
    let mut bad = false;
    for q in [0.5, 0.95, 0.99, 0.999] {
        let want = quantile(&model, q) as f64;
        let have = got.value_at_quantile(q) as f64;
        let off = (have - want) / want;
        bad |= off.abs() > 0.05;
        lines.push(format!(
            "p{}: rig {:.3} ms, model {:.3} ms ({:+.1}%)",
            q * 100.0,
            have / 1e6,
            want / 1e6,
            off * 100.0
        ));
    }
    let summary = format!(
        "{connections} connection(s), floor {:.1} µs, on time {} late {}, dispatch lag p50/p99 {:.1}/{:.1} µs:\n  {}",
        floor as f64 / 1e3,
        r.on_time,
        r.late,
        r.dispatch_lag.p50_ns as f64 / 1e3,
        r.dispatch_lag.p99_ns as f64 / 1e3,
        lines.join("\n  ")
    );
    eprintln!("{summary}");
    assert!(
        !bad,
        "a percentile is more than 5% off the model: {summary}"
    );
}

#[test]
fn stall_latency_matches_the_model_on_one_connection_with_none_dropped() {
    let s = stall_server();
    let mut c = Client::connect(&spec(s.port, "/", "ok\n", 1)).unwrap();
    let floor = floor_ns(&mut c);
    let r = c.run(&Mode::Open {
        rate: RATE,
        duration: Duration::from_millis(DURATION_MS),
    });
    // One connection: each stall queues the requests due in it, and they go
    // out one by one when it ends.
    assert!(r.late > 0, "{r:?}");
    check_against_model(&r, 1, floor);
}

#[test]
fn stall_latency_matches_the_model_on_many_connections_with_none_dropped() {
    let s = stall_server();
    let connections = 32;
    let mut c = Client::connect(&spec(s.port, "/", "ok\n", connections)).unwrap();
    let floor = floor_ns(&mut c);
    let r = c.run(&Mode::Open {
        rate: RATE,
        duration: Duration::from_millis(DURATION_MS),
    });
    check_against_model(&r, connections, floor);
}

#[test]
fn the_calibration_server_at_1000_per_second_on_one_connection_drops_nothing() {
    let s = super::calib(&[]);
    let mut c = Client::connect(&spec(s.port, "/noop", "noop!\n", 1)).unwrap();
    let r = c.run(&Mode::Open {
        rate: 1000.0,
        duration: Duration::from_secs(2),
    });
    r.check_invariants().unwrap();
    assert_eq!(r.scheduled, 2000);
    assert_eq!((r.succeeded, r.expired), (2000, 0), "{:?}", r.errors);
    eprintln!(
        "calib /noop 1000/s, 1 connection: on time {} late {}, dispatch lag p50/p99 {:.1}/{:.1} µs, latency p50/p99 {:.1}/{:.1} µs",
        r.on_time,
        r.late,
        r.dispatch_lag.p50_ns as f64 / 1e3,
        r.dispatch_lag.p99_ns as f64 / 1e3,
        r.latency.p50_ns as f64 / 1e3,
        r.latency.p99_ns as f64 / 1e3,
    );
}

#[test]
fn the_model_of_one_connection_is_the_stall_plus_the_drain() {
    // The model itself, on numbers worked by hand: 60 of every 100 requests
    // fall in a stall; with a zero floor and many connections the stalled
    // ones wait 60, 59, ..., 1 ms.
    let mut v = model_latencies(64, 0, 0);
    v.sort_unstable();
    assert_eq!(v.iter().filter(|&&l| l == 0).count(), 40 * 30);
    assert_eq!(quantile(&v, 1.0), 60_000_000);
    assert_eq!(quantile(&v, 0.5), 10_000_000);
    // One connection and a 50 µs floor: the k-th request of a stall leaves
    // k round trips after it ends, so the last of the 60 waits 1 ms + 60 × 50 µs.
    let one = model_latencies(1, 50_000, 0);
    assert_eq!(one[59], 1_000_000 + 60 * 50_000);
}
