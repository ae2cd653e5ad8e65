//! The matrix file as written: every key any kind of suite may have, with
//! its default. Only [`super::validate`] reads these, turning each suite
//! into the [`super::Plan`] of its kind.

use serde::Deserialize;

use super::{CloseKind, Defaults, Listener, LiveProto, Proto, SuiteKind};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMatrix {
    #[serde(default)]
    pub defaults: Defaults,
    #[serde(rename = "suite", default)]
    pub suites: Vec<RawSuite>,
    #[serde(default)]
    pub probes: super::NamedProbes,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSuite {
    pub name: String,
    pub kind: SuiteKind,
    #[serde(default)]
    pub protocols: Vec<Proto>,
    #[serde(default)]
    pub paths: Vec<String>,
    /// Open-loop rates; empty = closed loop.
    #[serde(default)]
    pub rates: Vec<f64>,
    /// `CONNECTIONSxSTREAMS` (h2) or `CONNECTIONS` (h1).
    #[serde(default)]
    pub topologies: Vec<String>,
    /// h1 only: keep-alive (true) and/or a new connection per request.
    #[serde(default = "d_keepalive")]
    pub keepalive: Vec<bool>,
    pub warmup_ms: Option<u64>,
    pub duration_ms: Option<u64>,
    pub request_timeout_ms: Option<u64>,
    pub case_timeout_ms: Option<u64>,
    /// Memory suites: the listeners to measure the idle server with.
    #[serde(default = "d_listeners")]
    pub listeners: Vec<Listener>,
    /// Memslope and live suites: the tiers of open connections.
    #[serde(default)]
    pub connections: Vec<usize>,
    /// Memslope and live suites: the protocols of long-lived connections.
    #[serde(default)]
    pub live: Vec<LiveProto>,
    /// Live suites: ms between the messages of a held connection.
    #[serde(default = "d_message_ms")]
    pub message_ms: u64,
    /// Recovery and live suites: cycles per case.
    #[serde(default = "d_cycles")]
    pub cycles: u32,
    /// Recovery suites: how each cycle's connections are closed.
    #[serde(default = "d_closes")]
    pub close: Vec<CloseKind>,
    /// Soak suites: the length of one interval.
    pub interval_ms: Option<u64>,
}

fn d_message_ms() -> u64 {
    100
}

fn d_cycles() -> u32 {
    3
}

fn d_closes() -> Vec<CloseKind> {
    vec![CloseKind::Graceful, CloseKind::Abrupt]
}

fn d_listeners() -> Vec<Listener> {
    vec![Listener::Plain]
}

fn d_keepalive() -> Vec<bool> {
    vec![true]
}
